package queue_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/console"
	"github.com/loomrt/loom/internal/queue"
)

// BenchmarkConsoleTaskList renders the console's task list (GET
// /ui/tasks, the whole page: the index read, the records, the template)
// on 100,000 records, the target being 200 ms of server time per
// page. The console's own share is compared with the queue's List of the
// same page in the same run (list/op: how many times the bare List fits
// in one rendered page). It lives here to seed records as BenchmarkList
// does (Seed, export_test.go).
func BenchmarkConsoleTaskList(b *testing.B) {
	n := 100_000
	if v := os.Getenv("LOOM_BENCH_RECORDS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	q, err := queue.Open(context.Background(), queue.Config{DataDir: b.TempDir(), Retain: -1, SyncInterval: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	queue.Seed(b, q, n)
	c, err := console.New(console.Config{Queue: q})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	h := c.Handler()
	get := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		if w.Code != http.StatusOK {
			b.Fatalf("GET %s = %d %.500s", path, w.Code, w.Body.String())
		}
		return w
	}
	ctx := context.Background()
	half, err := q.List(ctx, queue.Filter{Limit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n/2000 && half.Next != ""; i++ {
		if half, err = q.List(ctx, queue.Filter{Limit: 1000, After: half.Next}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		path string
		f    queue.Filter
	}{
		{"page50", "/ui/tasks", queue.Filter{Limit: 50}},
		{"page100", "/ui/tasks?limit=100", queue.Filter{Limit: 100}},
		{"page50-halfway", "/ui/tasks?after=" + half.Next, queue.Filter{Limit: 50, After: half.Next}},
		{"page50-state=failed", "/ui/tasks?state=failed", queue.Filter{State: queue.Failed, Limit: 50}},
		{"page50-cluster=c7", "/ui/tasks?cluster=c7", queue.Filter{Cluster: "c7", Limit: 50}},
		{"page50-since=1h", "/ui/tasks?since=1h", queue.Filter{Limit: 50}},
	} {
		b.Run(c.name, func(b *testing.B) {
			// The bare List, median of 5, as the baseline.
			var lists []time.Duration
			for range 5 {
				start := time.Now()
				if _, err := q.List(ctx, c.f); err != nil {
					b.Fatal(err)
				}
				lists = append(lists, time.Since(start))
			}
			slices.Sort(lists)
			b.ResetTimer()
			for range b.N {
				w := get(c.path)
				if w.Body.Len() < 1000 {
					b.Fatalf("a page of %d bytes", w.Body.Len())
				}
			}
			per := float64(b.Elapsed()) / float64(b.N)
			b.ReportMetric(per/1e6, "ms/page")
			b.ReportMetric(per/float64(lists[2]), "list/op")
		})
	}
	fmt.Fprintf(os.Stderr, "seeded %d records\n", n)
}
