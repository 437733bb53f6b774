package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// BenchmarkNoopTask compares one no-op task run in process (the runtime,
// as --isolation none) with the same task run in a warm worker process
// (--isolation worker): the per-task overhead of the isolation, in time
// and in CPU (this process's, and the workers').
//
//	go test -run '^$' -bench NoopTask -count 3 ./internal/worker/
func BenchmarkNoopTask(b *testing.B) {
	e := newEnv(b, worker.Config{})
	task := withName("CREATE", "bench", "ok")
	b.Run("in-process", func(b *testing.B) {
		rt := luatest.NewRuntime(b, runtime.Options{PluginsDir: e.plugins})
		cpu0 := selfCPU()
		for b.Loop() {
			if res, err := rt.Run(context.Background(), task); err != nil || res.Status != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
		b.ReportMetric(float64((selfCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	b.Run("worker", func(b *testing.B) {
		if _, _, err := e.sup.Run(context.Background(), "ok", "warm", task, time.Minute); err != nil {
			b.Fatal(err)
		}
		cpu0, child0 := selfCPU(), childrenCPU()
		for b.Loop() {
			if _, st, err := e.sup.Run(context.Background(), "ok", "bench", task, time.Minute); err != nil || st != 0 {
				b.Fatalf("%d %v", st, err)
			}
		}
		parent, child := selfCPU()-cpu0, childrenCPU()-child0
		b.ReportMetric(float64((parent+child).Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(child.Nanoseconds())/float64(b.N), "worker-cpu-ns/op")
	})
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU sums the CPU time of this process's live children, from
// /proc (clock ticks of 10 ms: use it over many tasks).
func childrenCPU() time.Duration {
	var total time.Duration
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, en := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", en.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 || f[1] != self {
			continue
		}
		u, _ := strconv.Atoi(f[11])
		s, _ := strconv.Atoi(f[12])
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}
