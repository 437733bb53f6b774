package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/natstest"
)

// delayProxy forwards TCP connections from a loopback port to target()
// (asked at each connection: "" refuses it), delivering every byte delay
// after it arrived, in order, both ways.
func delayProxy(t *testing.T, target func() string, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	pump := func(dst, src net.Conn) {
		type chunk struct {
			at time.Time
			b  []byte
		}
		ch := make(chan chunk, 4096)
		go func() {
			defer close(ch)
			for {
				buf := make([]byte, 32<<10)
				n, err := src.Read(buf)
				if n > 0 {
					ch <- chunk{time.Now().Add(delay), buf[:n]}
				}
				if err != nil {
					return
				}
			}
		}()
		for c := range ch {
			time.Sleep(time.Until(c.at))
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		_ = dst.Close()
		_, _ = io.Copy(io.Discard, src)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			to := target()
			if to == "" {
				_ = c.Close()
				continue
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			go pump(u, c)
			go pump(c, u)
		}
	}()
	return ln.Addr().String()
}

// startLaggingCluster starts three nats-servers whose third, n2, gets
// every route message (replication included) delay late: the other two
// make the quorum, and n2 answers from a copy delay behind the leader.
func startLaggingCluster(t *testing.T, delay time.Duration) *natstest.Cluster {
	t.Helper()
	// n2 is reached, and reaches the others, only through delaying
	// proxies, in front of the route ports the servers are given; it
	// advertises its proxy. The servers start one by one, n2 last: n0 and
	// n1 already route to each other when n2 joins, so n2 hears of
	// neither's direct address, and no route of n2's bypasses the delay.
	var routeAddr [3]atomic.Pointer[string]
	var slowTo [3]string
	for i := range 3 {
		slowTo[i] = delayProxy(t, func() string {
			if a := routeAddr[i].Load(); a != nil {
				return *a
			}
			return ""
		}, delay)
	}
	return natstest.Start(t, natstest.Config{
		Bin: natsServerBinary(t), Name: "loomlag", OneByOne: true,
		Route: func(i, j int, addr string) string {
			if i == 2 || j == 2 {
				return "nats-route://" + slowTo[j]
			}
			return "nats-route://" + addr
		},
		ClusterExtra: func(i int) string {
			if i == 2 {
				return fmt.Sprintf("advertise: %q, pool_size: -1,", slowTo[2])
			}
			return "pool_size: -1,"
		},
		Listening: func(i int, _, route string) { routeAddr[i].Store(&route) },
	})
}

// TestClusterReadsAfterWrites: two daemons on a 3-node NATS cluster, B
// connected to a server whose copy of every stream lags 100 ms behind
// (its routes go through a delaying proxy; the other two make the
// quorum). Records that A has just written (a new task, its
// cancellation) are read by B at once: B sees them, and B's own CAS loop
// (Cancel of a task A cancelled) sees the cancelled record instead of
// looping on a stale revision. With direct gets (any replica answers,
// and NATS hands a request to a subscriber on the requester's own server
// first) B read from n2's stale copy: "not found" for the new task, and
// queued for the cancelled one, every time.
func TestClusterReadsAfterWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := startLaggingCluster(t, 100*time.Millisecond)
	cfg := func(owner, url string) Config {
		return Config{
			URLs: []string{url}, Replicas: 3, Owner: owner,
			AckWait: 10 * time.Second, RetryDelay: 50 * time.Millisecond, PollInterval: 100 * time.Millisecond,
			Logger: testLogger(),
		}
	}
	a := openWithin(t, cfg("daemon-a", c.URLs()[0]), 2*time.Minute)
	b := openWithin(t, cfg("daemon-b", c.URLs()[2]), 2*time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Only records in buckets that n2 does not lead can be stale on n2.
	lagging := map[int]bool{}
	leaders := func() {
		for s := range StateShards {
			st, err := a.js.Stream(ctx, "KV_"+fmt.Sprintf("%s_%d", StateBucket, s))
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lagging[s] = info.Cluster != nil && info.Cluster.Leader != "n2"
		}
	}
	leaders()
	// Leaders are placed at random: when n2 leads every state bucket
	// (about one run in 80), ask one bucket's leader to step down, so
	// that another server leads it and n2 can be behind on it.
	anyLagging := func() bool {
		for _, l := range lagging {
			if l {
				return true
			}
		}
		return false
	}
	for try := 0; !anyLagging(); try++ {
		if try == 10 {
			t.Fatal("n2 still leads every state bucket after 10 leader step-downs: nothing to check")
		}
		subj := "$JS.API.STREAM.LEADER.STEPDOWN.KV_" + fmt.Sprintf("%s_%d", StateBucket, try%StateShards)
		if _, err := a.nc.RequestWithContext(ctx, subj, nil); err != nil {
			t.Logf("step-down of %s: %v", subj, err)
		}
		time.Sleep(2 * time.Second) // the election
		leaders()
	}
	checked := 0
	for i := 0; checked < 6 && i < 200; i++ {
		id := fmt.Sprintf("lag-%03d", i)
		if !lagging[shardOf(id)] {
			continue
		}
		checked++
		if _, _, err := a.Submit(ctx, task(id, "shell")); err != nil {
			t.Fatalf("submit %s on daemon A: %v", id, err)
		}
		rec, err := b.Get(ctx, id)
		if err != nil || rec.State != Queued {
			t.Fatalf("daemon B read task %s right after A submitted it: %v %v (a stale replica answered)", id, rec.State, err)
		}
		if _, err := a.Cancel(ctx, id); err != nil {
			t.Fatalf("cancel %s on daemon A: %v", id, err)
		}
		if rec, err = b.Get(ctx, id); err != nil || rec.State != Cancelled {
			t.Fatalf("daemon B read task %s right after A cancelled it: %v %v (a stale replica answered)", id, rec.State, err)
		}
		if _, _, err := a.Submit(ctx, task(id+"x", "shell")); err != nil {
			t.Fatal(err)
		}
		_, _ = a.Cancel(ctx, id+"x")
		if rec, err := b.Cancel(ctx, id+"x"); !errors.Is(err, ErrFinished) || rec.State != Cancelled {
			t.Fatalf("daemon B cancelled task %s right after A did: %v %v, want it finished (cancelled)", id+"x", rec.State, err)
		}
	}
	if checked == 0 {
		t.Fatal("no task id fell in a bucket n2 does not lead: nothing was checked")
	}
}
