package tasklog

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
)

// BenchmarkTaskLog runs b.N task attempts through a task log on an
// embedded store (fsync on every write, as loomd serve), each logging
// lines lines of about 80 bytes through the daemon's tee, and reports what
// one task costs: CPU (ns/op, the logging goroutine and the publisher
// together), the stream's bytes and the files' bytes per task, and the
// heap the store and the log keep per task afterwards (the stream's
// index of subjects, one per task that logged; measured once the file
// store dropped its cache). Run with -benchtime=2000x.
func BenchmarkTaskLog(b *testing.B) {
	for _, lines := range []int{0, 1, 10} {
		b.Run(fmt.Sprintf("lines=%d", lines), func(b *testing.B) {
			dir := b.TempDir()
			ctx := context.Background()
			q, err := queue.Open(ctx, queue.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			tee := logstream.NewTee()
			l, err := Open(ctx, q.JetStream(), tee, Options{Source: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			logger := slog.New(tee.Handler(slog.NewJSONHandler(io.Discard, nil)))
			streamBytes := func() (uint64, int64) {
				st, err := q.JetStream().Stream(ctx, StreamName)
				if err != nil {
					b.Fatal(err)
				}
				info, err := st.Info(ctx)
				if err != nil {
					b.Fatal(err)
				}
				var files int64
				_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						if fi, err := d.Info(); err == nil {
							files += fi.Size()
						}
					}
					return nil
				})
				return info.State.Bytes, files
			}
			heap := func() uint64 {
				goruntime.GC()
				var m goruntime.MemStats
				goruntime.ReadMemStats(&m)
				return m.HeapInuse
			}
			s0, f0 := streamBytes()
			h0 := heap()
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("01KBENCH%08d", i)
				end := l.Start(Task{ID: id, Origin: OriginQueue, Attempt: 1})
				tl := logger.With("task", id, "plugin", "shell", "hook", "install")
				for j := range lines {
					tl.Info("installing package nginx-1.25.3 on web-1", "step", j)
				}
				end(0, nil)
			}
			b.StopTimer()
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_ = l.Flush(fctx)
			cancel()
			s1, f1 := streamBytes()
			b.ReportMetric(float64(s1-s0)/float64(b.N), "stream-B/task")
			b.ReportMetric(float64(f1-f0)/float64(b.N), "file-B/task")
			// The file store caches a block's messages for 10 s after
			// their last use and its subjects for 2 minutes: what stays
			// after that is the stream's index of subjects. The wait is
			// LOOM_TASKLOG_SETTLE (default 12s: the messages' cache only).
			settle := 12 * time.Second
			if d, err := time.ParseDuration(os.Getenv("LOOM_TASKLOG_SETTLE")); err == nil {
				settle = d
			}
			time.Sleep(settle)
			b.ReportMetric(float64(int64(heap())-int64(h0))/float64(b.N), "heap-B/task")
		})
	}
}
