package runner

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// fakeTasks is the task queue as the runner sees it, in memory: a task
// submitted twice (same id) runs once; tasks whose name is in hold wait
// until released. It counts every run of every task id.
type fakeTasks struct {
	mu    sync.Mutex
	tasks map[string]*fakeTask
	runs  map[string]int
	hold  map[string]chan struct{} // taskName -> closed to release
	fail  map[string]string        // taskName+" "+nodeId -> message
}

type fakeTask struct {
	rec  queue.Record
	done chan struct{}
}

func newFakeTasks() *fakeTasks {
	return &fakeTasks{tasks: map[string]*fakeTask{}, runs: map[string]int{}, hold: map[string]chan struct{}{}, fail: map[string]string{}}
}

func (f *fakeTasks) Submit(_ context.Context, data []byte) (queue.Record, bool, error) {
	t, err := runtime.ParseTask(data)
	if err != nil {
		return queue.Record{}, false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ft := f.tasks[t.TaskID]; ft != nil {
		return ft.rec, false, nil
	}
	ft := &fakeTask{rec: queue.Record{TaskID: t.TaskID, State: queue.Running, Family: "automator", Type: "a", TaskName: t.TaskName}, done: make(chan struct{})}
	f.tasks[t.TaskID] = ft
	f.runs[t.TaskID]++
	hold := f.hold[t.TaskName]
	msg := f.fail[t.TaskName+" "+t.NodeID]
	go func() {
		if hold != nil {
			<-hold
		}
		res := runtime.Result{TaskID: t.TaskID}
		switch {
		case msg != "":
			res.Status, res.Message = 1, msg
		case t.TaskName == "CREATE":
			res.Result = map[string]any{"providerid": "m-" + t.NodeID}
		case t.TaskName == "CONFIRM":
			res.IPAddresses = map[string]any{"access_v4": "192.0.2.1"}
		}
		data, _ := json.Marshal(res)
		f.mu.Lock()
		ft.rec.State, ft.rec.Result = queue.Succeeded, data
		if res.Status != 0 {
			ft.rec.State = queue.Failed
		}
		f.mu.Unlock()
		close(ft.done)
	}()
	return ft.rec, true, nil
}

func (f *fakeTasks) Wait(ctx context.Context, id string) (queue.Record, error) {
	f.mu.Lock()
	ft := f.tasks[id]
	f.mu.Unlock()
	if ft == nil {
		return queue.Record{}, queue.ErrNotFound
	}
	select {
	case <-ft.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return ft.rec, nil
	case <-ctx.Done():
		f.mu.Lock()
		defer f.mu.Unlock()
		return ft.rec, ctx.Err()
	}
}

func (f *fakeTasks) Served(queue.Route) (bool, []queue.Route) { return true, nil }

func (f *fakeTasks) holdTask(name string) func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold[name] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// twice lists the task ids that ran more than once.
func (f *fakeTasks) twice() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id, n := range f.runs {
		if n > 1 {
			out = append(out, id)
		}
	}
	return out
}

// env is a JetStream (an embedded queue's) with the cluster store and the
// job log the runners share.
type env struct {
	t     *testing.T
	q     *queue.Queue
	store *state.KVStore
	log   *joblog.Stream
	tasks *fakeTasks
	live  map[string]bool
	mu    sync.Mutex
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	st, err := state.OpenKV(ctx, q.JetStream(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	jl, err := joblog.OpenStream(ctx, q.JetStream(), joblog.StreamOptions{FlushEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jl.Close)
	return &env{t: t, q: q, store: st, log: jl, tasks: newFakeTasks(), live: map[string]bool{}}
}

// runner starts a runner named owner (on another "host", so only its
// lease and liveness tell whether it died).
func (e *env) runner(owner string) *Runner {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e.mu.Lock()
	e.live[owner] = true
	e.mu.Unlock()
	r, err := New(ctx, Config{Store: e.store, JS: e.q.JetStream(), Queue: e.tasks, Log: e.log, Owner: owner, Host: "host-" + owner, PID: 1,
		LeaseTTL: 900 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Live: func(o string) bool { e.mu.Lock(); defer e.mu.Unlock(); return e.live[o] }})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { r.crash() })
	return r
}

// crash makes a runner stop as a killed process would: nothing more is
// written, nothing is handed over.
func (r *Runner) crash() {
	r.mu.Lock()
	r.stopping = true
	jobs := make([]*owned, 0, len(r.owned))
	for _, o := range r.owned {
		jobs = append(jobs, o)
	}
	r.mu.Unlock()
	if r.stopScan != nil {
		r.stopScan()
		<-r.scanDone
		r.stopScan = nil
	}
	for _, o := range jobs {
		o.mu.Lock()
		o.lost = true
		o.mu.Unlock()
		o.stop(errLost)
	}
	r.wg.Wait()
}

const spec3 = `name: c
provider: {type: p, fields: {api_token: s3cret-token-value}}
nodegroups: [{name: n, count: 3, services: [s]}]
services:
  s: {actions: {install: {type: a}, configure: {type: a}, start: {type: a}}}
`

// waitJob waits until the cluster's job record satisfies cond.
func (e *env) waitJob(r *Runner, what string, cond func(Record) bool) Record {
	e.t.Helper()
	end := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		rec, err := r.Job(context.Background(), "c")
		if err == nil && cond(rec) {
			return rec
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec, err := r.Job(context.Background(), "c")
	e.t.Fatalf("%s: never happened; job %+v (%v)", what, rec, err)
	return Record{}
}

// TestTakeover: a daemon dies (its runner stops writing anything) while
// its job's START tasks run; another daemon takes the job over once the
// lease ran out and the owner is no longer live, resumes it and finishes
// every step; no task ran twice (the running ones were picked up by id);
// the cluster's history shows the interruption and the takeover.
func TestTakeover(t *testing.T) {
	e := newEnv(t)
	release := e.tasks.holdTask("START")
	a := e.runner("a")
	acc, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml", Requester: "test"})
	if err != nil || acc.Record == nil || acc.Record.ID != "c-001" || acc.Record.Owner != "a" {
		t.Fatalf("submit: %+v %v", acc, err)
	}
	// The same change again attaches; another one is refused.
	if again, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil || !again.Attached {
		t.Fatalf("same change again: %+v %v", again, err)
	}
	var busy *BusyError
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbDestroy}); !errors.As(err, &busy) || busy.Record.ID != "c-001" {
		t.Fatalf("another change while running: %v", err)
	}
	// Wait for the START tasks to be submitted, then kill a.
	end := time.Now().Add(30 * time.Second)
	for {
		e.tasks.mu.Lock()
		n := 0
		for _, ft := range e.tasks.tasks {
			if ft.rec.TaskName == "START" {
				n++
			}
		}
		e.tasks.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the START tasks were never submitted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.crash()
	e.mu.Lock()
	e.live["a"] = false
	e.mu.Unlock()
	b := e.runner("b")
	release()
	rec := e.waitJob(b, "b finishes the job", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "b" || rec.Owners != 2 {
		t.Errorf("record after takeover: %+v", rec)
	}
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
	cl, err := e.store.Get("c")
	if err != nil || cl.Status != state.Active || len(cl.Jobs) != 1 {
		t.Fatalf("state: %+v %v", cl, err)
	}
	var kinds []string
	for _, ev := range cl.Jobs[0].Events {
		kinds = append(kinds, ev.Kind+" by "+ev.By)
	}
	if got := strings.Join(kinds, ", "); got != "started by loomd a, interrupted by loomd a, taken over by loomd b" {
		t.Errorf("events: %s", got)
	}
	// The job log has the executor's lines of both daemons, the
	// takeover, and no secret.
	batches, err := e.log.Read(context.Background(), "c", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sources := map[string]bool{}
	for _, b := range batches {
		for _, en := range b.Entries {
			text.WriteString(joblog.Format(en) + "\n")
			sources[en.Source] = true
		}
	}
	for _, want := range []string{"task started", "taken over by loomd b", "job c-001 complete"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("job log lacks %q:\n%s", want, text.String())
		}
	}
	if !sources["a"] || !sources["b"] || strings.Contains(text.String(), "s3cret") {
		t.Errorf("job log sources %v or a secret:\n%s", sources, text.String())
	}
}

// TestHandover: a daemon that shuts down hands its job over at once; the
// next daemon resumes it without waiting for the lease, even while the
// first one is still announcing itself.
func TestHandover(t *testing.T) {
	e := newEnv(t)
	release := e.tasks.holdTask("INSTALL")
	defer release()
	a := e.runner("a")
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	e.waitJob(a, "INSTALL starts", func(r Record) bool { return len(r.Steps) == 1 && r.Steps[0].Job == "c-001" })
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	a.Stop(ctx)
	cancel()
	rec := e.waitJob(a, "released", func(r Record) bool { return r.Owner == "" })
	if rec.State != StateRunning || len(rec.Events) == 0 || rec.Events[len(rec.Events)-1].Kind != state.EventInterrupted {
		t.Fatalf("released record: %+v", rec)
	}
	b := e.runner("b") // e.live["a"] stays true: only the hand-over allows this
	release()
	rec = e.waitJob(b, "b finishes", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "b" {
		t.Errorf("owner: %+v", rec)
	}
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
}

// TestLiveOwnerKeepsJob: a live owner whose lease is current keeps its
// job; another daemon never takes it over.
func TestLiveOwnerKeepsJob(t *testing.T) {
	e := newEnv(t)
	release := e.tasks.holdTask("START")
	a := e.runner("a")
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	b := e.runner("b")
	time.Sleep(3 * time.Second) // several leases: a renews, b looks
	release()
	rec := e.waitJob(b, "a finishes", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "a" || rec.Owners != 1 {
		t.Errorf("the job moved off its live owner: %+v", rec)
	}
}

// TestCancel: a cancel request stops the job on its owner: the job ends
// cancelled, the state job is failed with the interruption, and a new
// apply resumes it.
func TestCancel(t *testing.T) {
	e := newEnv(t)
	release := e.tasks.holdTask("INSTALL")
	a := e.runner("a")
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	e.waitJob(a, "INSTALL starts", func(r Record) bool { return len(r.Steps) == 1 && r.Steps[0].Job == "c-001" })
	b := e.runner("b")
	if _, err := b.Cancel(context.Background(), "c", "ops"); err != nil {
		t.Fatal(err)
	}
	rec := e.waitJob(a, "cancelled", func(r Record) bool { return r.State == StateCancelled })
	if !strings.Contains(rec.Message, "cancelled by ops") {
		t.Errorf("message: %q", rec.Message)
	}
	release()
	acc, err := b.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"})
	if err != nil || acc.Record == nil || acc.Record.ID != "c-001" || acc.Record.Steps[0].Job != "c-001" || acc.Change.Resume == nil {
		t.Fatalf("apply after cancel: %+v %v", acc, err)
	}
	e.waitJob(b, "resumed job completes", func(r Record) bool { return r.State == StateComplete })
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
	if _, err := b.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: "name: c\n", SpecFile: "bad.yaml"}); err == nil {
		t.Error("a bad spec was accepted")
	} else if !errors.As(err, new(*BadRequestError)) {
		t.Errorf("a bad spec: %v", err)
	}
}

// TestLapse: a daemon cut off from the store while its job runs stops
// writing the cluster's state before its lease runs out (the fence) and
// interrupts its job; another daemon takes the job over once the lease
// ran out and finishes it; when the first one reaches the store again it
// finds the job taken and stops without writing anything. No task ran
// twice; the history has no resume by the cut-off daemon.
func TestLapse(t *testing.T) {
	e := newEnv(t)
	release := e.tasks.holdTask("START")
	a := e.runner("a")
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(30 * time.Second)
	for {
		e.tasks.mu.Lock()
		n := 0
		for _, ft := range e.tasks.tasks {
			if ft.rec.TaskName == "START" {
				n++
			}
		}
		e.tasks.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the START tasks were never submitted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a.recs.cutOff.Store(true)
	e.mu.Lock()
	e.live["a"] = false // it cannot announce itself either
	e.mu.Unlock()
	// The fence holds before anyone may take the job over.
	a.mu.Lock()
	o := a.owned["c"]
	a.mu.Unlock()
	if o == nil {
		t.Fatal("a does not run the job")
	}
	for o.holds() {
		time.Sleep(20 * time.Millisecond)
	}
	rec, err := a.Job(context.Background(), "c")
	if err != nil || rec.Owner != "a" || time.Now().After(rec.Lease) {
		t.Fatalf("the fence came after the lease ran out: %+v %v", rec, err)
	}
	if err := (fenced{Journal: e.store, o: o}).Put(&state.Cluster{Name: "c"}); err == nil {
		t.Fatal("a fenced daemon wrote the cluster's state")
	}
	b := e.runner("b")
	release()
	rec = e.waitJob(b, "b finishes the job", func(r Record) bool { return r.State == StateComplete })
	if rec.Owner != "b" {
		t.Errorf("owner: %+v", rec)
	}
	a.recs.cutOff.Store(false)
	end = time.Now().Add(30 * time.Second)
	for a.metrics.lostCount() == 0 && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
	}
	if a.metrics.lostCount() != 1 {
		t.Errorf("a did not find its job taken over (leases lost %v)", a.metrics.lostCount())
	}
	if tw := e.tasks.twice(); len(tw) > 0 {
		t.Errorf("tasks ran twice: %v", tw)
	}
	cl, err := e.store.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range cl.Jobs[0].Events {
		if ev.By == "loomd a" && ev.Kind == state.EventResumed {
			t.Errorf("the cut-off daemon resumed the job: %+v", cl.Jobs[0].Events)
		}
	}
	if rec, _ := b.Job(context.Background(), "c"); rec.State != StateComplete || rec.Owner != "b" {
		t.Errorf("the cut-off daemon changed the record after the takeover: %+v", rec)
	}
}

// lostCount is the leases lost so far.
func (m *metrics) lostCount() float64 {
	var d dto.Metric
	if err := m.lost.Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}
