package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// BenchmarkNoopTask compares one no-op task run in process (the runtime,
// as --isolation none) with the same task run in a warm worker process
// (--isolation worker): the per-task overhead of the isolation.
//
//	go test -run '^$' -bench NoopTask -count 3 ./internal/worker/
func BenchmarkNoopTask(b *testing.B) {
	e := newEnv(b, worker.Config{})
	task := withName("CREATE", "bench", "ok")
	b.Run("in-process", func(b *testing.B) {
		rt := luatest.NewRuntime(b, runtime.Options{PluginsDir: e.plugins})
		for b.Loop() {
			if res, err := rt.Run(context.Background(), task); err != nil || res.Status != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
	b.Run("worker", func(b *testing.B) {
		for b.Loop() {
			if _, st, err := e.sup.Run(context.Background(), "ok", task, time.Minute); err != nil || st != 0 {
				b.Fatalf("%d %v", st, err)
			}
		}
	})
}
