package queue

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestFetchesPerTask: a route whose fetch took its last message is not
// fetched again at once. Tasks submitted one at a time cost one fetch
// each (the publish wakes the route), not a second, empty one after it.
// The poll ticker is off, so it cannot add fetches either.
func TestFetchesPerTask(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollInterval = time.Hour
	q := open(t, cfg)
	var fetches, empty atomic.Int64
	q.onFetch = func(got int) {
		fetches.Add(1)
		if got == 0 {
			empty.Add(1)
		}
	}
	serve(t, q, newCounter(nil), 2, shell)
	// The start looks at every shard's consumer once.
	waitFor(t, func() bool { return fetches.Load() >= StateShards })
	time.Sleep(100 * time.Millisecond)
	start, startEmpty := fetches.Load(), empty.Load()
	const n = 40
	for i := range n {
		id := fmt.Sprintf("fpt-%d", i)
		submit(t, q, task(id, "shell"))
		wait(t, q, id)
	}
	got, gotEmpty := fetches.Load()-start, empty.Load()-startEmpty
	t.Logf("%d tasks: %d fetches, %d of them empty", n, got, gotEmpty)
	// A fetch woken before its message is stored finds nothing (the
	// message then comes with the next); allow a few, never one per task.
	if got > n+n/4 || gotEmpty > n/4 {
		t.Fatalf("%d tasks took %d fetches (%d empty), want about one each", n, got, gotEmpty)
	}
}

// TestBacklogDrainsWithoutPolling: tasks queued before the daemon serves
// are all run without the poll ticker (off here): a fetch that leaves
// messages behind (the consumer says how many) fetches again.
func TestBacklogDrainsWithoutPolling(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollInterval = time.Hour
	q := open(t, cfg)
	const n = 60
	for i := range n {
		submit(t, q, task(fmt.Sprintf("backlog-%d", i), "shell"))
	}
	c := newCounter(nil)
	serve(t, q, c, 3, shell)
	for i := range n {
		wait(t, q, fmt.Sprintf("backlog-%d", i))
	}
	if got := c.total(); got != n {
		t.Fatalf("%d runs, want %d", got, n)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatal("condition not met within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
