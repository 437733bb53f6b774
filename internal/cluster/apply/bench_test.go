package apply

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// BenchmarkExecute100 runs a 100-node create (900 tasks) through an
// instant fake runner, saving the state to a file store after every round:
// the executor's own cost per task.
func BenchmarkExecute100(b *testing.B) {
	src := `name: bench
provider: {type: p}
nodegroups:
  - {name: n, count: 100, services: [a, b]}
services:
  a:
    actions: {install: {type: x}, configure: {type: x}, start: {type: x}}
  b:
    install: {requires: [a]}
    runtime: {requires: [a]}
    actions: {install: {type: x}, configure: {type: x}, start: {type: x}}
`
	sp, err := spec.Parse("bench.yaml", []byte(src))
	if err != nil {
		b.Fatal(err)
	}
	store := &state.FileStore{Dir: b.TempDir()}
	for i := 0; i < b.N; i++ {
		ch, err := Plan(Input{Spec: sp})
		if err != nil {
			b.Fatal(err)
		}
		cl, job := Begin(nil, ch, time.Now())
		f := &fakeRunner{running: map[string]bool{}}
		if err := Run(context.Background(), cl, job, Options{Runner: f, Save: store.Put}); err != nil {
			b.Fatal(err)
		}
		if job.Status != state.JobComplete {
			b.Fatal(job.Message)
		}
		if i == 0 {
			b.ReportMetric(float64(ch.Tasks()), "tasks")
		}
	}
	_ = fmt.Sprint()
}
