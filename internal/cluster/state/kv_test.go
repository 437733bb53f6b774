package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// openKV opens the cluster bucket beside a real embedded queue.
func openKV(t testing.TB) *KVStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	s, err := OpenKV(ctx, q.JetStream(), q.Replicas(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestKVStore: a cluster round-trips through the bucket key by key (tasks
// that never ran are left out: absent means pending); changes land on
// their keys; a Put drops the keys of removed nodes; List and Delete.
func TestKVStore(t *testing.T) {
	s := openKV(t)
	if _, err := s.Get("shop"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get of an unknown cluster: %v", err)
	}
	c := &Cluster{Name: "shop", Status: Pending, Spec: "name: shop\n", NextJob: 2, NextNum: 1002,
		Nodes: map[string]*Node{
			"shop-a-1": {ID: "shop-a-1", Num: 1000, State: NodeNew, Services: []string{"db"}},
			"shop-a-2": {ID: "shop-a-2", Num: 1001, State: NodeNew},
		},
		Jobs: []*Job{{ID: "shop-001", Action: "create", Status: JobRunning, TaskCount: 2, Tasks: map[int]*Task{
			0: {Status: TaskPending, Name: "CREATE", Node: "shop-a-1"}, 1: {Status: TaskPending, Name: "CREATE", Node: "shop-a-2"}}}}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	zero := 0
	err := s.Append(c, []Change{
		{Node: &Node{ID: "shop-a-1", Num: 1000, State: NodeCreated, Results: map[string]any{"providerid": "p1"}}},
		{Job: "shop-001", Task: &zero, Rec: &Task{Status: TaskDone, Name: "CREATE", Node: "shop-a-1", Runs: []Run{{ID: "shop-001-0001-1", Status: TaskDone}}}},
		{Job: "shop-001", JobStatus: JobFailed, Message: "CREATE on shop-a-2 failed: quota"},
		{Status: Incomplete},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("shop")
	if err != nil {
		t.Fatal(err)
	}
	j := got.LastJob()
	if got.Status != Incomplete || got.Spec != c.Spec || got.NextNum != 1002 || len(got.Nodes) != 2 ||
		got.Nodes["shop-a-1"].ProviderID() != "p1" || j == nil || j.Status != JobFailed || j.Tasks[0].Status != TaskDone ||
		j.Tasks[0].Runs[0].ID != "shop-001-0001-1" || j.Tasks[1] != nil || j.TaskCount != 2 || j.Action != "create" {
		t.Fatalf("read back: %+v job %+v", got, j)
	}
	// A second job, and a node removed: Put writes the one, drops the other.
	delete(got.Nodes, "shop-a-2")
	got.Jobs = append(got.Jobs, &Job{ID: "shop-002", Action: "destroy", Status: JobRunning, Tasks: map[int]*Task{0: {Status: TaskRunning}}})
	if err := s.Put(got); err != nil {
		t.Fatal(err)
	}
	again, err := s.Get("shop")
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Nodes) != 1 || len(again.Jobs) != 2 || again.Jobs[0].ID != "shop-001" || again.LastJob().Tasks[0].Status != TaskRunning {
		t.Fatalf("after the second put: nodes %v jobs %+v", again.Nodes, again.Jobs)
	}
	if err := s.Put(&Cluster{Name: "blog", Status: Active}); err != nil {
		t.Fatal(err)
	}
	names, err := s.List()
	if err != nil || len(names) != 2 || names[0] != "blog" || names[1] != "shop" {
		t.Fatalf("list: %v %v", names, err)
	}
	if err := s.Delete("shop"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("shop"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestKVLock: one holder at a time; renewal; takeover of a dead holder's
// lease; an expired lease is free; unlock only by the holder.
func TestKVLock(t *testing.T) {
	s := openKV(t)
	now := time.Unix(1_700_000_000, 0)
	s.Now = func() time.Time { return now }
	a := Holder{Owner: "a", Host: "h1", PID: 10}
	b := Holder{Owner: "b", Host: "h2", PID: 20}
	if _, err := s.Lock("shop", a, 15*time.Second, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock("shop", a, 15*time.Second, ""); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	var le *LockedError
	if _, err := s.Lock("shop", b, 15*time.Second, ""); !errors.As(err, &le) || le.Holder.Owner != "a" || le.Holder.PID != 10 {
		t.Fatalf("second holder: %v", err)
	}
	if _, err := s.Lock("shop", b, 15*time.Second, "a"); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	if err := s.Unlock("shop", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock("shop", a, 15*time.Second, ""); !errors.As(err, &le) || le.Holder.Owner != "b" {
		t.Fatalf("unlock by a non-holder released the lock: %v", err)
	}
	now = now.Add(16 * time.Second)
	if _, err := s.Lock("shop", a, 15*time.Second, ""); err != nil {
		t.Fatalf("expired lease: %v", err)
	}
	if err := s.Unlock("shop", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock("shop", b, 15*time.Second, ""); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}

// TestKVLeaderReads: the bucket's stream allows no direct gets (a replica
// could answer them with a value from before the last write), the store
// still reads and writes, and opening it again (another daemon's start
// turns direct gets on) leaves them off.
func TestKVLeaderReads(t *testing.T) {
	s := openKV(t)
	ctx := context.Background()
	direct := func() bool {
		t.Helper()
		st, err := s.js.Stream(ctx, "KV_"+Bucket)
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.AllowDirect
	}
	if direct() {
		t.Fatal("the cluster bucket allows direct gets")
	}
	again, err := OpenKV(ctx, s.js, 1, nil)
	if err != nil || direct() {
		t.Fatalf("opened again: %v, direct gets %v", err, direct())
	}
	if err := again.Put(&Cluster{Name: "shop", Status: Active, Nodes: map[string]*Node{}}); err != nil {
		t.Fatal(err)
	}
	if cl, err := s.Get("shop"); err != nil || cl.Status != Active {
		t.Fatalf("read back: %v %v", cl, err)
	}
}

// TestKVAtomicRounds: the embedded server takes atomic batches; a round
// larger than one batch is written whole; a round with a write the server
// cannot take (a value over its message size) stores none of its writes;
// a store without batches (an older server) writes the same keys.
func TestKVAtomicRounds(t *testing.T) {
	s := openKV(t)
	if !s.atomic {
		t.Fatal("the embedded server refused atomic batches on the cluster bucket")
	}
	for _, atomic := range []bool{true, false} {
		s.atomic = atomic
		name := fmt.Sprintf("round-%v", atomic)
		c := &Cluster{Name: name, Status: Pending, Nodes: map[string]*Node{"n-1": {ID: "n-1", State: NodeNew}},
			Jobs: []*Job{{ID: name + "-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{}}}}
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
		var changes []Change
		for i := range maxBatch + 100 {
			idx := i
			changes = append(changes, Change{Job: name + "-001", Task: &idx, Rec: &Task{Status: TaskDone, Name: "INSTALL", Node: "n-1",
				Runs: []Run{{ID: fmt.Sprintf("%s-001-%04d-1", name, i+1), Status: TaskDone}}}})
		}
		changes = append(changes, Change{Node: &Node{ID: "n-1", State: NodeActive}})
		if err := s.Append(c, changes); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(got.LastJob().Tasks); n != maxBatch+100 || got.Nodes["n-1"].State != NodeActive {
			t.Fatalf("atomic %v: read back %d tasks, node %+v", atomic, n, got.Nodes["n-1"])
		}
		if !atomic {
			continue
		}
		// A round the server cannot take whole: nothing of it is stored.
		one, two := maxBatch+100, maxBatch+101+minBatch
		round := []Change{{Node: &Node{ID: "n-1", State: NodeDeleted}}}
		for i := one; i < two; i++ {
			idx := i
			round = append(round, Change{Job: name + "-001", Task: &idx, Rec: &Task{Status: TaskDone, Name: "START", Node: "n-1"}})
		}
		round = append(round, Change{Job: name + "-001", Task: &two, Rec: &Task{Status: TaskDone, Name: "START", Node: "n-1",
			Runs: []Run{{Message: strings.Repeat("x", int(s.js.Conn().MaxPayload())+1)}}}})
		err = s.Append(c, round)
		if err == nil {
			t.Fatal("a round with a value over the server's message size was written")
		}
		got, err = s.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Nodes["n-1"].State != NodeActive || got.LastJob().Tasks[one] != nil {
			t.Fatalf("a refused round was written in part: node %+v, task %+v", got.Nodes["n-1"], got.LastJob().Tasks[one])
		}
	}
}
