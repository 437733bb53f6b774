package queue

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

func cmpRouteShard(a, b routeShard) int {
	if c := cmpRoute(a.route, b.route); c != 0 {
		return c
	}
	return a.shard - b.shard
}

// looks counts the poll ticker's looks at each shard (Queue.onPoll).
type looks [StateShards]atomic.Int64

func (l *looks) seen(shard int) { l[shard].Add(1) }

// least is the fewest looks any shard had.
func (l *looks) least() int64 {
	n := l[0].Load()
	for i := 1; i < StateShards; i++ {
		n = min(n, l[i].Load())
	}
	return n
}

// wait waits until the poll ticker looked at every shard n more times.
func (l *looks) wait(t *testing.T, n int64) {
	t.Helper()
	want := l.least() + n
	end := time.Now().Add(30 * time.Second)
	for l.least() < want {
		if time.Now().After(end) {
			t.Fatalf("the poll ticker looked at every shard %d times in 30 s, want %d", l.least()-want+n, n)
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
	look := func() []routeShard {
		q.w.mu.Lock()
		for _, rs := range q.w.ready {
			rs.ready = false
		}
		q.w.ready = nil
		q.w.mu.Unlock()
		q.lookAgain(context.Background())
		q.w.mu.Lock()
		defer q.w.mu.Unlock()
		var got []routeShard
		for _, rs := range q.w.ready {
			got = append(got, routeShard{rs.route, rs.shard})
		}
		slices.SortFunc(got, cmpRouteShard)
		return got
	}
	want := []routeShard{{routes[5], 2}, {routes[7], 0}}
	if got := look(); !slices.Equal(got, want) {
		t.Fatalf("ready after a look = %v, want %v", got, want)
	}

	// A shard whose stream does not answer has each of its routes
	// fetched, as before the looks.
	healthy := q.tasks[1]
	q.tasks[1] = failingInfo{healthy}
	defer func() { q.tasks[1] = healthy }()
	want = []routeShard{{routes[5], 2}, {routes[7], 0}}
	for _, r := range routes {
		want = append(want, routeShard{r, 1})
	}
	slices.SortFunc(want, cmpRouteShard)
	if got := look(); !slices.Equal(got, want) {
		t.Fatalf("ready after a look with shard 1's stream not answering = %v, want %v", got, want)
	}
}

// failingInfo is a task stream whose Info fails, as when its leader is
// lost.
type failingInfo struct{ jetstream.Stream }

func (failingInfo) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	return nil, errors.New("nats: timeout")
}

// TestIdleDaemonDoesNotFetch: an idle daemon serving many types fetches
// nothing in 10 looks at every shard while its task streams are empty
// (before, the poll ticker fetched every type in every shard each tick:
// 80 fetches a tick here), and
// still runs a task that no publish announces as soon as a look sees it.
func TestIdleDaemonDoesNotFetch(t *testing.T) {
	cfg := testConfig(t)
	cfg.PollInterval = 20 * time.Millisecond
	q := open(t, cfg)
	var fetches atomic.Int64
	var lk looks
	q.onFetch = func(int) { fetches.Add(1) }
	q.onPoll = lk.seen
	routes := manyRoutes(20)
	c := newCounter(nil)
	serve(t, q, c, 2, routes...)
	waitFilled(t, q)
	// The start and the fill fetch every route once; wait until three
	// looks at every shard see no fetch.
	waitFor(t, func() bool {
		f := fetches.Load()
		lk.wait(t, 3)
		return fetches.Load() == f
	})
	f0 := fetches.Load()
	lk.wait(t, 10)
	if n := fetches.Load() - f0; n != 0 {
		t.Fatalf("%d fetches in 10 looks at every shard of an idle daemon with %d types, want none", n, len(routes))
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
