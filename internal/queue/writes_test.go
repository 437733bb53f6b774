package queue

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// streamCounts is what a stream stored and still holds.
type streamCounts struct{ stored, held uint64 }

// taskPathCounts reads the counts of the streams a task's life writes to:
// the task streams, the record buckets and the index.
func taskPathCounts(t *testing.T, q *Queue) map[string]streamCounts {
	t.Helper()
	out := map[string]streamCounts{}
	names := q.js.StreamNames(context.Background())
	for name := range names.Name() {
		if !strings.HasPrefix(name, "LOOM_TASKS") && !strings.HasPrefix(name, "KV_"+StateBucket) &&
			!strings.HasPrefix(name, IndexStream) && !strings.HasPrefix(name, ActiveIndexStream) {
			continue
		}
		s, err := q.js.Stream(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		out[name] = streamCounts{stored: info.State.LastSeq, held: info.State.Msgs}
	}
	if err := names.Err(); err != nil && err != jetstream.ErrEndOfData {
		t.Fatal(err)
	}
	return out
}

// TestWritesPerTask counts the durable writes (stored messages and
// removals, each fsynced with --fsync always) a task costs from submit to
// result, on the streams of its path: the number every throughput figure
// in docs/benchmarks.md rests on. A change that adds one shows here. The
// tasks are all queued before a worker serves them, so that no claim
// races a submit (a worker that sees the message before the submit wrote
// its record creates the record itself; see Submit), which would make
// the count vary.
func TestWritesPerTask(t *testing.T) {
	q := open(t, testConfig(t))
	// A type served once, so that every stream and consumer exists.
	warm := Route{Family: "automator", Type: "warm"}
	submit(t, q, task("w-warm", "warm"))
	stop := serve(t, q, newCounter(nil), 4, warm)
	wait(t, q, "w-warm")
	stop()
	q.ix.bg.Wait()
	before := taskPathCounts(t, q)
	const n = 40
	for i := range n {
		submit(t, q, task(fmt.Sprintf("w-%d", i), "shell"))
	}
	serve(t, q, newCounter(nil), 4, shell)
	for i := range n {
		if got := wait(t, q, fmt.Sprintf("w-%d", i)); got.State != Succeeded {
			t.Fatalf("w-%d = %s", i, got.State)
		}
	}
	// The acks and the index's background deletes are done once the
	// streams hold only the finished tasks' records and entries.
	var after map[string]streamCounts
	held := func() (tasks, active uint64) {
		after = taskPathCounts(t, q)
		for name, c := range after {
			switch {
			case strings.HasPrefix(name, "LOOM_TASKS"):
				tasks += c.held
			case strings.HasPrefix(name, ActiveIndexStream):
				active += c.held
			}
		}
		return tasks, active
	}
	if !eventually(func() bool { tk, ac := held(); return tk == 0 && ac == 0 }) {
		tk, ac := held()
		t.Fatalf("after %d tasks the task streams still hold %d messages and the active index %d entries", n, tk, ac)
	}
	var stored, removed uint64
	var detail []string
	for name, a := range after {
		b := before[name]
		s, r := a.stored-b.stored, (a.stored-b.stored)-(a.held-b.held)
		stored += s
		removed += r
		if s+r > 0 {
			detail = append(detail, fmt.Sprintf("%s %d stored, %d removed", name, s, r))
		}
	}
	per := float64(stored+removed) / n
	t.Logf("durable writes per task: %.2f (%d stored, %d removed over %d tasks): %s", per, stored, removed, n, strings.Join(detail, "; "))
	// The task's message and its ack's removal, the record's three
	// revisions (queued, running, final), the index entries when queued
	// and when finished, and the removal of the queued one.
	const want = 8
	if per != want {
		t.Errorf("a task costs %.2f durable writes, want %d", per, want)
	}
}
