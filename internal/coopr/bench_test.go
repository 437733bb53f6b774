package coopr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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
	for _, c := range []struct {
		slots int
		tls   bool
	}{{1, false}, {1, true}, {4, false}} {
		name := fmt.Sprintf("Slots%d", c.slots)
		if c.tls {
			name += "TLS" // https with a client certificate the server verifies
		}
		b.Run(name, func(b *testing.B) {
			srv, files := benchServer(b, c.tls)
			defer srv.Close()
			for i := 0; i < b.N; i++ {
				srv.Enqueue("t", task(fmt.Sprintf("b-%d", i)))
			}
			p, err := coopr.New(coopr.Config{ServerURL: srv.URL(), ID: "bench", Listen: "127.0.0.1:0", Runner: &runner{},
				Tenants: map[string]int{"t": c.slots}, Poll: time.Millisecond, Heartbeat: time.Second, TLS: files})
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

// benchServer is the fake, plain or requiring a client certificate (then
// with the provisioner's TLS files).
func benchServer(b *testing.B, withTLS bool) (*coopfake.Server, coopr.TLS) {
	if !withTLS {
		srv, err := coopfake.Start()
		if err != nil {
			b.Fatal(err)
		}
		return srv, coopr.TLS{}
	}
	ca, err := coopfake.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	certPEM, keyPEM, err := ca.Issue("bench-client", false)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	files := coopr.TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "c.key")}
	for f, data := range map[string][]byte{files.CAFile: ca.PEM, files.CertFile: certPEM, files.KeyFile: keyPEM} {
		if err := os.WriteFile(f, data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	srv, err := coopfake.StartRequiringClientCerts(ca)
	if err != nil {
		b.Fatal(err)
	}
	return srv, files
}
