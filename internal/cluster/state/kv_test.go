package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// openKV opens the cluster bucket beside a real embedded queue.
func openKV(t testing.TB) *KVStore {
	t.Helper()
	s, _ := openKVQueue(t)
	return s
}

// openKVQueue is openKV, with the queue (a daemon's: it announces the
// journal capability).
func openKVQueue(t testing.TB) (*KVStore, *queue.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler), Capabilities: []string{JournalCapability}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	s, err := OpenKV(ctx, q.JetStream(), q.Replicas(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, q
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
		if err := s.AppendChanges(c.Name, changes); err != nil {
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

// roundKeys is how many journal rounds cluster name has in the bucket.
func roundKeys(t *testing.T, s *KVStore, name string) int {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	vals, _, err := s.read(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range vals {
		if strings.HasPrefix(k, name+".r.") {
			n++
		}
	}
	return n
}

// TestKVJournal: a round of the executor goes to the bucket as one
// journal message, not to the keys it changes; Get (of this store or of
// another daemon's) replays the rounds in order; a Put folds them into the
// records and drops them; a record written after a round wins over it;
// rounds left behind by a Put cut short read as the Put wrote; the journal
// is folded every compactRounds rounds; a round too large for a message,
// or one that removes a node, goes to the keys; Delete drops the rounds.
func TestKVJournal(t *testing.T) {
	s := openKV(t)
	c := &Cluster{Name: "shop", Status: Pending,
		Nodes: map[string]*Node{"shop-a-1": {ID: "shop-a-1", Num: 1000, State: NodeNew}, "shop-a-2": {ID: "shop-a-2", Num: 1001, State: NodeNew}},
		Jobs:  []*Job{{ID: "shop-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{}}}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodeRev := func(id string) uint64 {
		t.Helper()
		e, err := s.kv.Get(ctx, "shop.n."+id)
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	rev1 := nodeRev("shop-a-1")
	zero, one := 0, 1
	round := func(state string, task int, status string) []Change {
		n := &Node{ID: "shop-a-1", Num: 1000, State: state}
		c.Nodes["shop-a-1"] = n
		rec := &Task{Status: status, Name: "CREATE", Node: "shop-a-1", Runs: []Run{{ID: fmt.Sprintf("shop-001-%04d-1", task+1), Status: status}}}
		c.Jobs[0].Tasks[task] = rec
		return []Change{{Node: n}, {Job: "shop-001", Task: &task, Rec: rec}, {Job: "shop-001", JobStatus: JobRunning}}
	}
	for _, r := range [][]Change{round(NodeNew, zero, TaskRunning), round(NodeCreated, zero, TaskDone), round(NodeCreated, one, TaskRunning)} {
		if err := s.Append(c, r); err != nil {
			t.Fatal(err)
		}
	}
	if n := roundKeys(t, s, "shop"); n != 3 || nodeRev("shop-a-1") != rev1 {
		t.Fatalf("after 3 rounds: %d journal keys, node record rewritten: %v", n, nodeRev("shop-a-1") != rev1)
	}
	// Another daemon (a takeover) reads the same state.
	other, err := OpenKV(ctx, s.js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*KVStore{s, other} {
		got, err := st.Get("shop")
		if err != nil {
			t.Fatal(err)
		}
		j := got.LastJob()
		if got.Nodes["shop-a-1"].State != NodeCreated || j.Tasks[0].Status != TaskDone || j.Tasks[1].Status != TaskRunning || got.Nodes["shop-a-2"].State != NodeNew {
			t.Fatalf("replayed: node %+v tasks %+v %+v", got.Nodes["shop-a-1"], j.Tasks[0], j.Tasks[1])
		}
	}
	// A record written after a round (another writer, key by key) wins.
	if err := s.AppendChanges("shop", []Change{{Node: &Node{ID: "shop-a-1", Num: 1000, State: NodeActive}}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("shop"); err != nil || got.Nodes["shop-a-1"].State != NodeActive {
		t.Fatalf("a record newer than the rounds: %+v %v", got.Nodes["shop-a-1"], err)
	}
	// ...until a later round.
	if err := s.Append(c, round(NodeCreated, one, TaskDone)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("shop")
	if err != nil || got.Nodes["shop-a-1"].State != NodeCreated || got.LastJob().Tasks[1].Status != TaskDone {
		t.Fatalf("a round after the record: %+v %v", got, err)
	}
	// A Put cut short before it dropped the rounds: the key records
	// what the Put wrote even where it equals an old record (node
	// shop-a-1 back to its first value, which the rounds changed).
	s.keepRounds = true
	c.Nodes["shop-a-1"] = &Node{ID: "shop-a-1", Num: 1000, State: NodeActive}
	c.Jobs[0].Status = JobComplete
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	if n := roundKeys(t, s, "shop"); n != 4 {
		t.Fatalf("rounds kept: %d", n)
	}
	got, err = s.Get("shop")
	if err != nil || got.Nodes["shop-a-1"].State != NodeActive || got.LastJob().Status != JobComplete || got.LastJob().Tasks[1].Status != TaskDone {
		t.Fatalf("after a Put that left its rounds: %+v %v", got, err)
	}
	// The next Put drops them.
	s.keepRounds = false
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	if n := roundKeys(t, s, "shop"); n != 0 {
		t.Fatalf("rounds after a Put: %d", n)
	}
	if got, err = s.Get("shop"); err != nil || got.Nodes["shop-a-1"].State != NodeActive || got.LastJob().Tasks[1].Status != TaskDone {
		t.Fatalf("after the Put: %+v %v", got, err)
	}
	// Every compact rounds, Append folds the journal into the records.
	s.compact = 3
	for i := range 7 {
		if err := s.Append(c, round(NodeActive, 2+i, TaskDone)); err != nil {
			t.Fatal(err)
		}
		if n := roundKeys(t, s, "shop"); n > 3 {
			t.Fatalf("round %d: %d journal keys", i, n)
		}
	}
	if got, err = s.Get("shop"); err != nil || len(got.LastJob().Tasks) != 9 || got.LastJob().Tasks[8].Status != TaskDone {
		t.Fatalf("after compactions: %+v %v", got.LastJob(), err)
	}
	// A round over one message's worth goes to its keys.
	before := roundKeys(t, s, "shop")
	big := round(NodeActive, 9, TaskFailed)
	big[1].Rec.Runs[0].Stderr = strings.Repeat("x", maxRound)
	if err := s.Append(c, big); err != nil {
		t.Fatal(err)
	}
	if n := roundKeys(t, s, "shop"); n != before {
		t.Fatalf("a large round went to the journal: %d keys, %d before", n, before)
	}
	if got, err = s.Get("shop"); err != nil || got.LastJob().Tasks[9].Status != TaskFailed {
		t.Fatalf("the large round: %v", err)
	}
	if err := s.Delete("shop"); err != nil {
		t.Fatal(err)
	}
	if n := roundKeys(t, s, "shop"); n != 0 {
		t.Fatalf("rounds after Delete: %d", n)
	}
}

// TestKVPutOverRounds: a Put writes every key a round of the journal
// changed, even where its record already equals what the Put writes, both
// over rounds its own store wrote (known without reading them again) and
// over another daemon's (a takeover: read from the bucket), so that the
// state reads as the Put wrote when the rounds outlive it (a Put cut short
// before it dropped them). Keys no round changed and equal to their
// record are not written again.
func TestKVPutOverRounds(t *testing.T) {
	s := openKV(t)
	other, err := OpenKV(context.Background(), s.js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, by := range []*KVStore{s, other} {
		name := "own"
		if by == other {
			name = "taken"
		}
		node := func(id, st string) *Node { return &Node{ID: id, Num: 1000, State: st} }
		c := &Cluster{Name: name, Status: Pending,
			Nodes: map[string]*Node{"n-1": node("n-1", NodeNew), "n-2": node("n-2", NodeNew)},
			Jobs:  []*Job{{ID: name + "-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{0: {Status: TaskRunning, Name: "CREATE", Node: "n-1"}}}}}
		if err := s.Put(c); err != nil {
			t.Fatal(err)
		}
		revOf := func(key string) uint64 {
			t.Helper()
			e, err := s.kv.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			return e.Revision()
		}
		n2 := revOf(name + ".n.n-2")
		zero := 0
		if err := s.Append(c, []Change{{Node: node("n-1", NodeCreated)}, {Job: name + "-001", Task: &zero, Rec: &Task{Status: TaskDone, Name: "CREATE", Node: "n-1"}},
			{Job: name + "-001", JobStatus: JobFailed, Message: "m"}}); err != nil {
			t.Fatal(err)
		}
		// by saves the cluster as it was before the round: every key
		// equals its record, and the round changed three of them.
		by.keepRounds = true
		if err := by.Put(c); err != nil {
			t.Fatal(err)
		}
		by.keepRounds = false
		if n := roundKeys(t, s, name); n != 1 {
			t.Fatalf("%s: %d rounds kept", name, n)
		}
		got, err := s.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		j := got.LastJob()
		if got.Nodes["n-1"].State != NodeNew || j.Tasks[0].Status != TaskRunning || j.Status != JobRunning {
			t.Errorf("%s: after the Put over the round: node %s, task %s, job %s", name, got.Nodes["n-1"].State, j.Tasks[0].Status, j.Status)
		}
		if revOf(name+".n.n-2") != n2 {
			t.Errorf("%s: a key no round changed, equal to its record, was written again", name)
		}
	}
}

// A node removed from the cluster (a DELETE's purge) stays removed: the
// journal's earlier rounds that wrote it are not replayed over its
// deletion. The delete's KV marker is invisible to Get's read, so a
// round that deletes a node folds the journal into the records instead.
func TestKVJournalNodeDeleteStays(t *testing.T) {
	s := openKV(t)
	c := &Cluster{Name: "shrink", Status: Active,
		Nodes: map[string]*Node{"shrink-a-1": {ID: "shrink-a-1", Num: 1000, State: NodeActive}, "shrink-a-2": {ID: "shrink-a-2", Num: 1001, State: NodeActive}},
		Jobs:  []*Job{{ID: "shrink-002", Action: "scale", Status: JobRunning, Tasks: map[int]*Task{}}}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	// The DELETE task of node 2 runs and ends: two rounds naming the node.
	task := 0
	for _, st := range []string{NodeActive, NodeDeleted} {
		n := &Node{ID: "shrink-a-2", Num: 1001, State: st}
		c.Nodes["shrink-a-2"] = n
		rec := &Task{Status: TaskRunning, Name: "DELETE", Node: "shrink-a-2"}
		c.Jobs[0].Tasks[task] = rec
		if err := s.Append(c, []Change{{Node: n}, {Job: "shrink-002", Task: &task, Rec: rec}}); err != nil {
			t.Fatal(err)
		}
	}
	// Then the node is purged from the cluster.
	delete(c.Nodes, "shrink-a-2")
	if err := s.Append(c, []Change{{DeleteNode: "shrink-a-2"}}); err != nil {
		t.Fatal(err)
	}
	other, err := OpenKV(context.Background(), s.js, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*KVStore{s, other} {
		got, err := st.Get("shrink")
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := got.Nodes["shrink-a-2"]; ok {
			t.Fatalf("the purged node came back from the journal: %+v", n)
		}
		if got.Nodes["shrink-a-1"] == nil || got.LastJob().Tasks[0] == nil {
			t.Fatalf("the rest of the state is lost: %+v", got)
		}
	}
	// Later rounds still journal.
	n1 := &Node{ID: "shrink-a-1", Num: 1000, State: NodeActive, Hostname: "h1"}
	c.Nodes["shrink-a-1"] = n1
	if err := s.Append(c, []Change{{Node: n1}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("shrink"); err != nil || got.Nodes["shrink-a-1"].Hostname != "h1" || got.Nodes["shrink-a-2"] != nil {
		t.Fatalf("after a later round: %+v %v", got, err)
	}
}

// oldView is the cluster as a loomd older than the journal reads it: the
// records alone (it knows nothing of the <name>.r.* keys).
func oldView(t *testing.T, s *KVStore, name string) *Cluster {
	t.Helper()
	ctx, cancel := s.ctx()
	defer cancel()
	vals, revs, err := s.read(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	for k := range vals {
		if strings.HasPrefix(k, name+".r.") {
			delete(vals, k)
		}
	}
	c, err := decode(name, vals, revs)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sameTasks fails unless got has every task of want with the same status,
// and want's nodes in the same state.
func sameTasks(t *testing.T, what string, want, got *Cluster) {
	t.Helper()
	for id, n := range want.Nodes {
		if g := got.Nodes[id]; g == nil || g.State != n.State {
			t.Errorf("%s: node %s is %+v, want state %s", what, id, g, n.State)
		}
	}
	wj, gj := want.LastJob(), got.LastJob()
	for i, wt := range wj.Tasks {
		if untouched(wt) {
			continue
		}
		if g := gj.Tasks[i]; g == nil || g.Status != wt.Status {
			t.Errorf("%s: task %d is %+v, want %s", what, i, g, wt.Status)
		}
	}
}

// TestKVJournalGate: while the journal gate names a daemon that cannot
// read the journal (an older loomd announcing itself), or cannot tell,
// rounds go to their keys and what an older loomd reads (the records
// alone) is the whole state after every round; when the gate closes
// mid-job, FoldJournal (or, if it was not called, the next round) folds
// the rounds written so far into the records; the journal is used again
// once the gate opens.
func TestKVJournalGate(t *testing.T) {
	s := openKV(t)
	var mu sync.Mutex
	lacking, sure := []string{"old-daemon"}, true
	s.SetJournalGate(func() ([]string, bool) { mu.Lock(); defer mu.Unlock(); return lacking, sure })
	set := func(l []string, su bool) { mu.Lock(); lacking, sure = l, su; mu.Unlock() }
	c := &Cluster{Name: "mixed", Status: Pending, Nodes: map[string]*Node{}, Jobs: []*Job{{ID: "mixed-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{}}}}
	for i := range 4 {
		id := fmt.Sprintf("mixed-n-%d", i+1)
		c.Nodes[id] = &Node{ID: id, Num: 1000 + i, State: NodeNew}
	}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	task := 0
	round := func() {
		t.Helper()
		i := task
		task++
		n := &Node{ID: fmt.Sprintf("mixed-n-%d", i%4+1), Num: 1000 + i%4, State: NodeCreated}
		c.Nodes[n.ID] = n
		rec := &Task{Status: TaskDone, Name: "CREATE", Node: n.ID, Runs: []Run{{ID: fmt.Sprintf("mixed-001-%04d-1", i+1), Status: TaskDone}}}
		c.Jobs[0].Tasks[i] = rec
		if err := s.Append(c, []Change{{Node: n}, {Job: "mixed-001", Task: &i, Rec: rec}, {Job: "mixed-001", JobStatus: JobRunning}}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, wantRounds bool) {
		t.Helper()
		n := roundKeys(t, s, "mixed")
		if wantRounds != (n > 0) {
			t.Fatalf("%s: %d journal keys", what, n)
		}
		got, err := s.Get("mixed")
		if err != nil {
			t.Fatal(err)
		}
		sameTasks(t, what+" (Get)", c, got)
		if !wantRounds {
			sameTasks(t, what+" (as an older loomd reads it)", c, oldView(t, s, "mixed"))
		}
	}
	// An older daemon is live from the start: no round is journaled.
	for range 3 {
		round()
		check("with an older daemon live", false)
	}
	// It is gone: the journal is used again.
	set(nil, true)
	for range 3 {
		round()
	}
	check("once the older daemon is gone", true)
	// It comes back mid-job: FoldJournal folds what the journal holds.
	set([]string{"old-daemon"}, true)
	if folded, err := s.FoldJournal("mixed"); err != nil || !folded {
		t.Fatalf("FoldJournal: %v %v", folded, err)
	}
	check("after the fold", false)
	if folded, err := s.FoldJournal("mixed"); err != nil || folded {
		t.Fatalf("FoldJournal with nothing to fold: %v %v", folded, err)
	}
	for range 3 {
		round()
		check("after the fold, key by key", false)
	}
	// Gone, then back without a FoldJournal (its notice came late): the
	// next round folds.
	set(nil, true)
	round()
	round()
	check("journal again", true)
	set([]string{"old-daemon"}, true)
	round()
	check("the first round after it came back", false)
	// This daemon cannot tell (its view of the announcements is stale):
	// key by key too.
	set(nil, true)
	round()
	set(nil, false)
	round()
	check("not sure who is live", false)
	round()
	check("not sure who is live, key by key", false)
	// A node removed while the gate is closed stays removed.
	delete(c.Nodes, "mixed-n-4")
	if err := s.Append(c, []Change{{DeleteNode: "mixed-n-4"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("mixed"); err != nil || got.Nodes["mixed-n-4"] != nil || len(got.Nodes) != 3 {
		t.Fatalf("after a node removal: %+v %v", got, err)
	}
}

// TestKVGetView: a view of a cluster is the whole cluster with the other
// jobs left out and, brief, the records of tasks that finished well cut to
// their status; the journal's rounds (a record a round finished, a node it
// changed) show in it as in the whole.
func TestKVGetView(t *testing.T) {
	s := openKV(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	run := func(id, status string) []Run {
		return []Run{{ID: id, Name: "INSTALL", Status: status, Started: now, Message: "m " + id}}
	}
	c := &Cluster{Name: "shop", Status: Active, Spec: "name: shop\n", NextJob: 3,
		Nodes: map[string]*Node{"shop-a-1": {ID: "shop-a-1", Num: 1000, State: NodeActive, Hostname: "a1"}},
		Jobs: []*Job{
			{ID: "shop-001", Action: "create", Status: JobComplete, TaskCount: 1, Tasks: map[int]*Task{
				0: {Status: TaskDone, Name: "CREATE", Node: "shop-a-1", Runs: run("shop-001-0000-1", TaskDone)}}},
			{ID: "shop-002", Action: "apply", Status: JobRunning, TaskCount: 5, Tasks: map[int]*Task{
				0: {Status: TaskDone, Name: "INSTALL", Node: "shop-a-1", Service: "db", Stage: 1, Runs: run("shop-002-0000-1", TaskDone)},
				1: {Status: TaskSkipped, Name: "START", Node: "shop-a-1", Service: "db", Stage: 2},
				2: {Status: TaskFailed, Name: "INSTALL", Node: "shop-a-1", Service: "web", Stage: 1, Runs: run("shop-002-0002-1", TaskFailed)},
				3: {Status: TaskRunning, Name: "CONFIGURE", Node: "shop-a-1", Service: "db", Stage: 2, Runs: run("shop-002-0003-1", TaskRunning)},
				4: {Status: TaskPending, Name: "START", Node: "shop-a-1", Service: "web", Stage: 3}}},
		}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	three, four := 3, 4
	c.Nodes["shop-a-1"].Hostname = "a1.example"
	if err := s.Append(c, []Change{
		{Job: "shop-002", Task: &three, Rec: &Task{Status: TaskDone, Name: "CONFIGURE", Node: "shop-a-1", Service: "db", Stage: 2, Runs: run("shop-002-0003-1", TaskDone)}},
		{Job: "shop-002", Task: &four, Rec: &Task{Status: TaskRunning, Name: "START", Node: "shop-a-1", Service: "web", Stage: 3, Runs: run("shop-002-0004-1", TaskRunning)}},
		{Node: c.Nodes["shop-a-1"]},
	}); err != nil {
		t.Fatal(err)
	}
	whole, err := s.Get("shop")
	if err != nil {
		t.Fatal(err)
	}
	if whole.Nodes["shop-a-1"].Hostname != "a1.example" || whole.Jobs[1].Tasks[3].Status != TaskDone {
		t.Fatalf("the rounds are not in the whole cluster: %+v %+v", whole.Nodes["shop-a-1"], whole.Jobs[1].Tasks[3])
	}
	// want is the view made from the whole cluster.
	want := func(v View) *Cluster {
		w, err := s.Get("shop")
		if err != nil {
			t.Fatal(err)
		}
		if v.Job != "" {
			if w.Jobs = slices.DeleteFunc(w.Jobs, func(j *Job) bool { return j.ID != v.Job }); len(w.Jobs) == 0 {
				w.Jobs = nil // as a cluster without jobs reads
			}
		}
		for _, j := range w.Jobs {
			for i, tk := range j.Tasks {
				if v.Brief && (tk.Status == TaskDone || tk.Status == TaskSkipped) {
					j.Tasks[i] = &Task{Status: tk.Status}
				}
			}
		}
		return w
	}
	for _, v := range []View{{}, {Brief: true}, {Job: "shop-002"}, {Job: "shop-002", Brief: true}, {Job: "shop-001", Brief: true}, {Job: "shop-009"}} {
		got, err := s.GetView("shop", v)
		if err != nil {
			t.Fatalf("%+v: %v", v, err)
		}
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want(v))
		if string(gj) != string(wj) {
			t.Errorf("view %+v:\n got %s\nwant %s", v, gj, wj)
		}
	}
	if got, _ := s.GetView("shop", View{Job: "shop-002", Brief: true}); len(got.Jobs) != 1 || got.Jobs[0].DoneTasks() != 2 ||
		got.Jobs[0].Tasks[2].Runs[0].Message != "m shop-002-0002-1" || got.Jobs[0].Tasks[4].Status != TaskRunning {
		t.Errorf("brief view of shop-002: %+v", got.Jobs)
	}
}
