package runner

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/loomrt/loom/internal/cluster/state"
)

// fakeGate is the queue's view of which live daemons lack the journal
// capability (older loomd versions), as a test sets it.
type fakeGate struct {
	mu      sync.Mutex
	lacking []string
	seen    chan struct{}
}

func newFakeGate() *fakeGate { return &fakeGate{seen: make(chan struct{}, 1)} }

func (g *fakeGate) get() ([]string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lacking, true
}

// set names the live daemons without the capability; naming one signals
// LackingSeen, as the queue does when such an announcement appears.
func (g *fakeGate) set(daemons ...string) {
	g.mu.Lock()
	g.lacking = daemons
	g.mu.Unlock()
	if len(daemons) > 0 {
		select {
		case g.seen <- struct{}{}:
		default:
		}
	}
}

// runnerOn starts a runner named owner with a store of its own (a daemon
// of its own) whose journal gate is g.
func (e *env) runnerOn(owner string, g *fakeGate) *Runner {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := state.OpenKV(ctx, e.q.JetStream(), 1, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.mu.Lock()
	e.live[owner] = true
	e.mu.Unlock()
	r, err := New(ctx, Config{Store: st, JS: e.q.JetStream(), Queue: e.tasks, Log: e.log, Owner: owner, Host: "host-" + owner, PID: 1,
		LeaseTTL: 900 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Live:    func(o string) bool { e.mu.Lock(); defer e.mu.Unlock(); return e.live[o] },
		Lacking: g.get, LackingSeen: g.seen})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.crash() })
	return r
}

// rounds counts the journal rounds written to cluster c's state from now
// on, and tells how many it holds now.
type rounds struct {
	t       *testing.T
	kv      jetstream.KeyValue
	w       jetstream.KeyWatcher
	mu      sync.Mutex
	written int
}

func (e *env) rounds() *rounds {
	e.t.Helper()
	ctx := context.Background()
	kv, err := e.q.JetStream().KeyValue(ctx, state.Bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "c.r.>", jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	r := &rounds{t: e.t, kv: kv, w: w}
	go func() {
		for en := range w.Updates() {
			if en != nil && en.Operation() == jetstream.KeyValuePut {
				r.mu.Lock()
				r.written++
				r.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(func() { _ = w.Stop() })
	return r
}

// count is how many rounds were written since the watch began.
func (r *rounds) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// held is how many rounds the bucket holds now.
func (r *rounds) held() int {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := r.kv.ListKeysFiltered(ctx, "c.r.>")
	if err != nil {
		r.t.Fatal(err)
	}
	n := 0
	for range l.Keys() {
		n++
	}
	return n
}

// waitSubmitted waits until n tasks named name were submitted.
func (e *env) waitSubmitted(name string, n int) {
	e.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for {
		e.tasks.mu.Lock()
		got := 0
		for _, ft := range e.tasks.tasks {
			if ft.rec.TaskName == name {
				got++
			}
		}
		e.tasks.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(end) {
			e.t.Fatalf("%d %s tasks were never submitted (%d were)", n, name, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// journalGauge is loom_cluster_state_journal's value.
func (m *metrics) journalGauge() float64 {
	var d dto.Metric
	if err := m.journal.Write(&d); err != nil {
		return -1
	}
	return d.GetGauge().GetValue()
}

// doneTasks are the indexes of the last job's finished tasks.
func doneTasks(t *testing.T, st *state.KVStore) map[int]bool {
	t.Helper()
	cl, err := st.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for i, x := range cl.LastJob().Tasks {
		if x.Status == state.TaskDone {
			out[i] = true
		}
	}
	return out
}

// TestOlderDaemonJoinsMidJob: a job's rounds go to the state journal
// while every daemon reads it; when a daemon that cannot (an older loomd)
// announces itself mid-job, the journal is folded into the records at
// once: no round is left, and the records alone (all an older loomd
// reads) hold every task that had finished. The job's owner then dies;
// a daemon takes it over while the older one is still live and finishes
// it writing key by key (no round written), running no task twice. Once
// the older daemon is gone, the next job journals again.
func TestOlderDaemonJoinsMidJob(t *testing.T) {
	e := newEnv(t)
	g := newFakeGate()
	release := e.tasks.holdTask("START")
	defer release()
	a := e.runnerOn("a", g)
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	e.waitSubmitted("START", 3)
	r := e.rounds()
	if n := r.held(); n == 0 {
		t.Fatal("with every daemon new, the job's rounds did not go to the journal")
	}
	before := doneTasks(t, e.store)
	if len(before) < 12 {
		t.Fatalf("only %d tasks done before START", len(before))
	}
	if v := a.metrics.journalGauge(); v != 1 {
		t.Errorf("loom_cluster_state_journal with every daemon new: %v", v)
	}
	g.set("old-daemon")
	end := time.Now().Add(10 * time.Second)
	for r.held() > 0 {
		if time.Now().After(end) {
			t.Fatalf("an older daemon joined: %d rounds still in the journal after 10 s", r.held())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := a.metrics.journalGauge(); v != 0 {
		t.Errorf("loom_cluster_state_journal with an older daemon live: %v", v)
	}
	after := doneTasks(t, e.store) // no rounds: the records alone
	for i := range before {
		if !after[i] {
			t.Errorf("task %d finished before the fold; the records do not say so", i)
		}
	}
	written := r.count()
	a.crash()
	e.mu.Lock()
	e.live["a"] = false
	e.mu.Unlock()
	b := e.runnerOn("b", g)
	release()
	rec := e.waitJob(b, "b finishes the job", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "b" {
		t.Errorf("record: %+v", rec)
	}
	if n := r.count() - written; n > 0 {
		t.Errorf("%d rounds went to the journal while an older daemon was live", n)
	}
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
	cl, err := e.store.Get("c")
	if err != nil || cl.Status != state.Active || !cl.LastJob().Finished() {
		t.Fatalf("state: %+v %v", cl, err)
	}

	// The older daemon is gone: the next job's rounds go to the journal.
	g.set()
	if v := b.metrics.journalGauge(); v != 1 {
		t.Errorf("loom_cluster_state_journal with the older daemon gone: %v", v)
	}
	written = r.count()
	if _, err := b.Submit(context.Background(), "c", Request{Verb: VerbDestroy}); err != nil {
		t.Fatal(err)
	}
	e.waitJob(b, "the destroy ends", func(r Record) bool { return r.ID == "c-002" && r.Done() })
	if r.count() == written {
		t.Error("with the older daemon gone, no round went to the journal")
	}
}

// TestNewDaemonTakesOverFromOlder: a job run by a daemon that writes its
// state key by key (as a loomd older than the journal does) dies; a new
// daemon takes it over, reads the records, finishes the job journaling
// its rounds, and runs no task twice.
func TestNewDaemonTakesOverFromOlder(t *testing.T) {
	e := newEnv(t)
	old, fresh := newFakeGate(), newFakeGate()
	old.set("old-itself") // its rounds go to the keys, as an older loomd's
	release := e.tasks.holdTask("START")
	defer release()
	r := e.rounds()
	a := e.runnerOn("old", old)
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	e.waitSubmitted("START", 3)
	if n := r.count(); n > 0 {
		t.Fatalf("the older daemon wrote %d journal rounds", n)
	}
	before := doneTasks(t, e.store)
	a.crash()
	e.mu.Lock()
	e.live["old"] = false
	e.mu.Unlock()
	b := e.runnerOn("new", fresh)
	release()
	rec := e.waitJob(b, "the new daemon finishes the job", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "new" || rec.Owners != 2 {
		t.Errorf("record: %+v", rec)
	}
	if r.count() == 0 {
		t.Error("the new daemon did not journal its rounds")
	}
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
	cl, err := e.store.Get("c")
	if err != nil || cl.Status != state.Active {
		t.Fatalf("state: %+v %v", cl, err)
	}
	for i := range before {
		if cl.LastJob().Tasks[i].Status != state.TaskDone {
			t.Errorf("task %d, done before the takeover, is %s", i, cl.LastJob().Tasks[i].Status)
		}
	}
	var kinds []string
	for _, ev := range cl.LastJob().Events {
		kinds = append(kinds, ev.Kind+" by "+ev.By)
	}
	if got := strings.Join(kinds, ", "); got != "started by loomd old, interrupted by loomd old, taken over by loomd new" {
		t.Errorf("events: %s", got)
	}
}
