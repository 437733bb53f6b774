package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// fakeLocal is a daemon's own workers as the runner sees them: it serves
// the automator type "a" only; tasks whose name is in hold wait until
// released or interrupted; crash names a task (name+" "+node) whose first
// run kills its worker. It counts every run of every task id.
type fakeLocal struct {
	mu    sync.Mutex
	runs  map[string]int
	hold  map[string]chan struct{}
	crash map[string]bool
}

func newFakeLocal() *fakeLocal {
	return &fakeLocal{runs: map[string]int{}, hold: map[string]chan struct{}{}, crash: map[string]bool{}}
}

func (f *fakeLocal) Serves(family, typ string) bool { return family == "automator" && typ == "a" }

func (f *fakeLocal) Run(ctx context.Context, data []byte) ([]byte, int, error) {
	t, err := runtime.ParseTask(data)
	if err != nil {
		return nil, 0, err
	}
	f.mu.Lock()
	f.runs[t.TaskID]++
	hold := f.hold[t.TaskName]
	crash := f.crash[t.TaskName+" "+t.NodeID]
	delete(f.crash, t.TaskName+" "+t.NodeID)
	f.mu.Unlock()
	if crash {
		return nil, 0, fmt.Errorf("%w: worker 42 exited: signal: killed", queue.ErrWorkerCrashed)
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("hook interrupted: %w", ctx.Err())
		}
	}
	out, _ := json.Marshal(runtime.Result{TaskID: t.TaskID})
	return out, 0, nil
}

func (f *fakeLocal) holdTask(name string) func() {
	ch := make(chan struct{})
	f.mu.Lock()
	f.hold[name] = ch
	f.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// localRunner is e.runner with Config.Local set.
func (e *env) localRunner(owner string, l Local) *Runner {
	e.t.Helper()
	r := e.runner(owner)
	r.SetLocal(l)
	return r
}

func (m *metrics) localCount(outcome string) float64 {
	var d dto.Metric
	if err := m.local.WithLabelValues(outcome).Write(&d); err != nil {
		return 0
	}
	return d.GetCounter().GetValue()
}

// TestLocalTasks (--cluster-tasks local): a job's tasks of the types this
// daemon serves run on its own workers, the others through the queue; a
// task that kills its worker runs again; the metrics count them. A cancel
// interrupts the tasks running locally: they stay "running" in the state
// and run again, by the same id, when the job resumes on another daemon;
// no task recorded done ran twice.
func TestLocalTasks(t *testing.T) {
	e := newEnv(t)
	l := newFakeLocal()
	l.crash["INSTALL c-n-1"] = true
	release := l.holdTask("START")
	a := e.localRunner("a", l)
	if _, err := a.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil {
		t.Fatal(err)
	}
	starts := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := 0
		for id, k := range l.runs {
			if strings.HasSuffix(id, "-1") && k > 0 && strings.Contains(id, "-001-") {
				n++
			}
		}
		return n
	}
	e.waitJob(a, "every local task but START ran, and the STARTs started", func(Record) bool { return starts() == 12 })
	if _, err := a.Cancel(context.Background(), "c", "ops"); err != nil {
		t.Fatal(err)
	}
	e.waitJob(a, "cancelled while START was held", func(r Record) bool { return r.State == StateCancelled })
	if got := a.metrics.localCount("interrupted"); got != 3 {
		t.Errorf("interrupted local tasks: %v, want 3", got)
	}
	if got := a.metrics.localCount("succeeded"); got != 9 {
		t.Errorf("loom_cluster_local_tasks_total{outcome=succeeded} = %v, want 9", got)
	}
	cl, err := e.store.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	running := 0
	for _, tk := range cl.LastJob().Tasks {
		if n := len(tk.Runs); n > 0 && tk.Runs[n-1].Status == "running" {
			if tk.Name != "START" {
				t.Errorf("%s on %s left running", tk.Name, tk.Node)
			}
			running++
		}
	}
	if running != 3 {
		t.Errorf("%d runs left running after the cancel, want the 3 STARTs", running)
	}
	release()
	b := e.localRunner("b", l)
	if acc, err := b.Submit(context.Background(), "c", Request{Verb: VerbApply, Spec: spec3, SpecFile: "c.yaml"}); err != nil || acc.Change.Resume == nil {
		t.Fatalf("apply after the cancel: %+v %v", acc, err)
	}
	e.waitJob(b, "the resumed job completes", func(r Record) bool { return r.State == StateComplete })

	e.tasks.mu.Lock()
	for _, ft := range e.tasks.tasks {
		if ft.rec.TaskName != "CREATE" && ft.rec.TaskName != "CONFIRM" {
			t.Errorf("task %s (%s) went through the queue", ft.rec.TaskID, ft.rec.TaskName)
		}
	}
	queued := len(e.tasks.tasks)
	e.tasks.mu.Unlock()
	if queued != 6 { // CREATE and CONFIRM of 3 nodes: the provider type is not served locally
		t.Errorf("%d tasks through the queue, want 6", queued)
	}
	cl, err = e.store.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	j := cl.LastJob()
	if j.Status != "complete" || j.DoneTasks() != 18 {
		t.Fatalf("job %s: %s, %d tasks done", j.ID, j.Status, j.DoneTasks())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	local := 0
	for idx, tk := range j.Tasks {
		for _, r := range tk.Runs {
			if tk.Name == "CREATE" || tk.Name == "CONFIRM" {
				continue
			}
			local++
			want := 1
			if tk.Name == "START" || tk.Name == "INSTALL" && tk.Node == "c-n-1" { // interrupted; killed its worker
				want = 2
			}
			if n := l.runs[r.ID]; n != want {
				t.Errorf("task %d (%s on %s) run %s ran %d times, want %d", idx, tk.Name, tk.Node, r.ID, n, want)
			}
		}
	}
	if local != 12 {
		t.Errorf("%d runs recorded of local tasks, want 12", local)
	}
}
