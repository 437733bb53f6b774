package queue

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// manyRoutes is n automator types named idle00, idle01, ...
func manyRoutes(n int) []Route {
	out := make([]Route, n)
	for i := range out {
		out[i] = Route{Family: "automator", Type: fmt.Sprintf("idle%02d", i)}
	}
	return out
}

// idInShard is the first id with prefix whose task goes to shard.
func idInShard(prefix string, shard int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); shardOf(id) == shard {
			return id
		}
	}
}

// waitFilled waits until every served route has its consumer in every
// shard (SetTypes creates the first shard's, the fill the others').
func waitFilled(t *testing.T, q *Queue) {
	t.Helper()
	waitFor(t, func() bool {
		q.w.mu.Lock()
		defer q.w.mu.Unlock()
		for _, parts := range q.w.routes {
			if len(parts) != StateShards {
				return false
			}
		}
		return true
	})
}

type routeShard struct {
	route Route
	shard int
}

// waitLooks waits until the poll ticker looked n more times.
func waitLooks(t *testing.T, looks *atomic.Int64, n int64) {
	t.Helper()
	want := looks.Load() + n
	end := time.Now().Add(30 * time.Second)
	for looks.Load() < want {
		if time.Now().After(end) {
			t.Fatalf("the poll ticker looked %d times in 30 s, want %d", looks.Load()-want+n, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLookAgainMarksRoutesWithMessages: the poll ticker's look marks
// ready exactly the served routes (in their shard) whose subjects hold
// messages, from one stream info per shard: not every route, not a type
// nobody here serves.
func TestLookAgainMarksRoutesWithMessages(t *testing.T) {
	q := open(t, testConfig(t))
	routes := manyRoutes(12)
	if err := q.SetTypes(context.Background(), routes); err != nil {
		t.Fatal(err)
	}
	waitFilled(t, q)
	// Nothing serves: the tasks stay in their streams.
	submit(t, q, task(idInShard("look-a", 2), "idle05"))
	submit(t, q, task(idInShard("look-b", 0), "idle07"))
	submit(t, q, task(idInShard("look-c", 0), "idle07"))
	submit(t, q, task(idInShard("look-d", 3), "nobody"))
	q.w.mu.Lock()
	for _, rs := range q.w.ready {
		rs.ready = false
	}
	q.w.ready = nil
	q.w.mu.Unlock()

	q.lookAgain(context.Background())

	q.w.mu.Lock()
	var got []routeShard
	for _, rs := range q.w.ready {
		got = append(got, routeShard{rs.route, rs.shard})
	}
	q.w.mu.Unlock()
	want := []routeShard{{routes[5], 2}, {routes[7], 0}}
	cmp := func(a, b routeShard) int {
		if c := cmpRoute(a.route, b.route); c != 0 {
			return c
		}
		return a.shard - b.shard
	}
	slices.SortFunc(got, cmp)
	if !slices.Equal(got, want) {
		t.Fatalf("ready after a look = %v, want %v", got, want)
	}
}

// TestIdleDaemonDoesNotFetch: an idle daemon serving many types fetches
// nothing while its task streams are empty (before, the poll ticker
// fetched every type in every shard each tick: 80 fetches here), and
// still runs a task that no publish announces as soon as a look sees it.
func TestIdleDaemonDoesNotFetch(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollInterval = 20 * time.Millisecond
	q := open(t, cfg)
	var fetches, looks atomic.Int64
	q.onFetch = func(int) { fetches.Add(1) }
	q.onPoll = func() { looks.Add(1) }
	routes := manyRoutes(20)
	c := newCounter(nil)
	serve(t, q, c, 2, routes...)
	waitFilled(t, q)
	// The start and the fill fetch every route once; wait until three
	// looks in a row see no fetch.
	waitFor(t, func() bool {
		f := fetches.Load()
		waitLooks(t, &looks, 3)
		return fetches.Load() == f
	})
	f0 := fetches.Load()
	waitLooks(t, &looks, 10)
	if n := fetches.Load() - f0; n != 0 {
		t.Fatalf("%d fetches in 10 looks of an idle daemon with %d types, want none", n, len(routes))
	}

	// A message no publish announced (as a redelivery is): a look finds
	// it and the task runs.
	id := idInShard("silent", 1)
	q.w.mu.Lock()
	for _, parts := range q.w.routes {
		for _, rs := range parts {
			_ = rs.sub.Unsubscribe() // no wake for this publish
		}
	}
	q.w.mu.Unlock()
	submit(t, q, task(id, "idle03"))
	if got := wait(t, q, id); got.State != Succeeded || c.count(id) != 1 {
		t.Fatalf("%s = %s, run %d times; want succeeded once", id, got.State, c.count(id))
	}
}

// TestIdleDaemonTakesOverExpiredClaim: a task whose daemon went silent
// mid-run (no heartbeats, no announcements) is redelivered after the ack
// wait, and an idle daemon serving many types, which no publish wakes
// for it, finds it with its poll and runs it.
func TestIdleDaemonTakesOverExpiredClaim(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Owner = "silent"
	cfg.AckWait = 300 * time.Millisecond
	a := open(t, cfg)
	a.noHeartbeat = true
	bcfg := testConfig(t)
	bcfg.DataDir = ""
	bcfg.URLs = []string{a.ClientURL()}
	bcfg.NkeyFile = filepath.Join(cfg.DataDir, "nats.nk") // a's generated key
	bcfg.Owner = "idle"
	bcfg.AckWait = cfg.AckWait
	b := open(t, bcfg)

	release := make(chan struct{})
	started := make(chan struct{})
	id := idInShard("expired", 2)
	ra := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		close(started)
		<-release
		return []byte(`{"status":0}`), 0, nil
	})
	routes := manyRoutes(20)
	stopA := serve(t, a, ra, 1, routes[4])
	submit(t, a, task(id, "idle04"))
	<-started
	a.served.close()
	rb := newCounter(nil)
	serve(t, b, rb, 2, routes...)
	got := wait(t, b, id)
	if got.State != Succeeded || got.Owner != "idle" || got.Attempts != 2 || rb.count(id) != 1 {
		t.Fatalf("record = %+v (run %d times by the idle daemon), want succeeded by it on attempt 2", got, rb.count(id))
	}
	close(release)
	stopA()
}
