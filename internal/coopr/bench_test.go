package coopr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/coopr/coopfake"
)

// BenchmarkTakeFinish measures the protocol's cost per task: b.N tasks
// through one worker slot against the fake server (take, run a no-op
// runner, finish), against the Direct baseline of calling the runner.
func BenchmarkTakeFinish(b *testing.B) {
	b.Run("Direct", func(b *testing.B) {
		r := &runner{}
		for i := 0; i < b.N; i++ {
			if _, _, err := r.Run(context.Background(), task(fmt.Sprintf("d-%d", i))); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, slots := range []int{1, 4} {
		b.Run(fmt.Sprintf("Slots%d", slots), func(b *testing.B) {
			srv, err := coopfake.Start()
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			for i := 0; i < b.N; i++ {
				srv.Enqueue("t", task(fmt.Sprintf("b-%d", i)))
			}
			p, err := coopr.New(coopr.Config{ServerURL: srv.URL(), ID: "bench", Listen: "127.0.0.1:0", Runner: &runner{},
				Tenants: map[string]int{"t": slots}, Poll: time.Millisecond, Heartbeat: time.Second})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := p.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if _, err := srv.WaitFinished(ctx, fmt.Sprintf("b-%d", b.N-1)); err != nil {
				b.Fatal(err)
			}
			for len(srv.Finishes()) < b.N {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			p.Stop(time.Second)
		})
	}
}
