package queue

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSubmitRunWait measures the queue alone, in process: 32 clients
// each Submit a no-op task and Wait for its result, with 8 worker slots on
// the embedded server (file store, fsync on every write).
func BenchmarkSubmitRunWait(b *testing.B) {
	q, err := Open(context.Background(), Config{DataDir: b.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	run := RunnerFunc(func(context.Context, []byte) ([]byte, int, error) { return []byte(`{"status":0}`), 0, nil })
	if err := q.SetTypes(context.Background(), []Route{shell}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Serve(ctx, run, 8); close(done) }()
	defer func() { cancel(); <-done }()
	b.ResetTimer()
	start, cpu0 := time.Now(), processCPU()
	submitAndWait(b, q, func(i int64) []byte { return task(fmt.Sprintf("b-%d", i), "shell") })
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tasks/s")
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-us/task")
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

const benchClients = 32

// submitAndWait has benchClients clients Submit b.N tasks (taskOf(1) to
// taskOf(b.N)) and Wait for each one's result.
func submitAndWait(b *testing.B, q *Queue, taskOf func(i int64) []byte) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				rec, _, err := q.Submit(context.Background(), taskOf(i))
				if err == nil {
					_, err = q.Wait(context.Background(), rec.TaskID)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
