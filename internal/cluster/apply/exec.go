// Package apply plans and runs cluster jobs. Plan compares a cluster's
// recorded state (every node, what every service on it went through, the
// digest of the inputs each action last ran with) with its spec and
// decides the job that closes the gap, as steps (destroy, remove services,
// create, reconfigure) of exactly the tasks needed; Begin records the job
// with every step before anything runs; Run runs a recorded job's steps
// that are left, whoever calls it (the apply that planned it, an apply run
// again after a crash, another daemon).
//
// Running a step sends each planned task to a Runner (the in-process
// runtime, or a loomd daemon's API) as soon as its prerequisites finished
// and its node is idle, up to a parallelism limit; merges each result into
// the node's state and later tasks' config as Coopr did; retries failed
// tasks the way Coopr did, minus its leaks; and saves the cluster's state
// after every change, so that a job cut short resumes without running
// again a task that finished.
package apply

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/macro"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

// Runner runs one task.
type Runner interface {
	// Run runs the task (Coopr task JSON, taskId id) and returns its
	// result. An error means it could not run at all (a malformed task,
	// no such plugin, the daemon unreachable): the task is not retried.
	Run(ctx context.Context, id string, task []byte) (*runtime.Result, error)
}

// Options tune an executor.
type Options struct {
	Runner Runner
	// Parallelism caps the tasks running at once (default 16).
	Parallelism int
	// Attempts per task and run kind (default 3, Coopr's).
	Attempts int
	// Logger gets one line per state change.
	Logger *slog.Logger
	// Save persists the whole cluster: at the job's start, each step's
	// start, between steps (a step's end with what follows it) and at the
	// job's end, and after every round of changes when Journal is nil. An
	// error stops the job (no task is started whose outcome could be
	// lost).
	Save func(*state.Cluster) error
	// Journal, when set, appends a round's changes instead (cost per
	// round independent of the job's size).
	Journal func(*state.Cluster, []state.Change) error
	// Now is the clock (tests).
	Now func() time.Time
	// Observe, when set, is told every task state change, from the
	// executor's own goroutine (it must not block): a live view's feed.
	Observe func(Event)
	// OnStep, when set, is told each step's plan before the step runs
	// (and after, with done true, once the step's end is saved).
	OnStep func(step int, st *state.Step, p *plan.Plan, done bool)
}

// Event is a task state change.
type Event struct {
	Step    int    // the job's step
	Task    int    // plan index within the step
	Run     string // run name (CREATE, or DELETE before a retried CREATE...)
	Status  string // running, done, retrying, failed
	Message string // first line, for failures
	Time    time.Time
}

func (o *Options) defaults() error {
	if o.Runner == nil {
		return ErrNoRunner
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 16
	}
	if o.Attempts <= 0 {
		o.Attempts = 3
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Save == nil {
		o.Save = func(*state.Cluster) error { return nil }
	}
	return nil
}

// runStep runs step k of job (its plan p) on cluster cl. Tasks the job
// already records as done are not run again. It returns whether every
// task finished (or, in a forced destroy, was abandoned) and ctx was not
// cancelled; the job's Message says why not. The error is for what
// stopped the executor itself (saving the state).
func runStep(ctx context.Context, cl *state.Cluster, sp *spec.Spec, p *plan.Plan, job *state.Job, k int, o Options) (bool, error) {
	st := job.Steps[k]
	confirming := map[string]bool{}
	for i, t := range p.Tasks {
		if rec := job.Tasks[st.Offset+i]; t.Name == "CONFIRM" && (rec == nil || rec.Status != state.TaskDone) {
			confirming[t.Node] = true
		}
	}
	e := &executor{o: o, cl: cl, spec: sp, plan: p, job: job, stepIndex: k, step: st, off: st.Offset,
		log:     o.Logger.With("cluster", cl.Name, "job", job.ID, "step", k+1),
		builder: &taskBuilder{spec: sp, cluster: cl, jobID: job.ID, inputs: job.Inputs, confirming: confirming}, done: make(chan outcome),
		busy: map[string]bool{}, deferred: map[string][]int{}, dirtyTasks: map[int]bool{}, dirtyNodes: map[string]bool{},
		waiting: map[int]string{},
		force:   job.Options.Force && (st.Action == string(plan.Destroy) || st.Action == string(plan.Rollback))}
	err := e.run(ctx)
	return e.ok, err
}

type executor struct {
	o         Options
	cl        *state.Cluster
	spec      *spec.Spec
	plan      *plan.Plan
	job       *state.Job
	stepIndex int
	step      *state.Step
	// off is the job-wide index of the step's first task.
	off     int
	log     *slog.Logger
	builder *taskBuilder
	// force abandons a task that fails for good instead of failing the
	// step (destroy --force).
	force bool
	// ok is the step's outcome.
	ok bool

	tasks      []*tstate
	groupsLeft []int
	succ       [][]int32
	ready      readyHeap
	busy       map[string]bool
	deferred   map[string][]int // ready tasks whose node was busy
	waiting    map[int]string   // ready tasks whose macros need an address not known yet, with why
	running    int
	done       chan outcome
	failed     []int
	stopping   bool
	saveErr    error
	// dirty means the state changed since the last save; launches are
	// runs started but not yet handed to their goroutine. The loop saves
	// once per round (group commit), then launches: a run is on disk as
	// running before it starts, a finished one before anything after it.
	dirty      bool
	dirtyTasks map[int]bool
	dirtyNodes map[string]bool
	launches   []launch
	// initializing suppresses queueing while run() replays a resumed
	// job's finished tasks; it queues the ready ones once after.
	initializing bool
}

// tstate is a task's progress in this run.
type tstate struct {
	pending int
	// runs left to do, the task itself last: a retry may put DELETE
	// and CREATE first.
	runs     []string
	attempts map[string]int
	status   string
}

type outcome struct {
	task    int
	run     state.Run
	res     *runtime.Result
	err     error
	started time.Time
	// digest is the inputs' digest of a service task (recorded when it
	// succeeds); topo the node list's digest it was built with.
	digest, topo string
}

func (e *executor) run(ctx context.Context) error {
	n := len(e.plan.Tasks)
	e.tasks = make([]*tstate, n)
	e.succ = e.plan.Successors()
	e.groupsLeft = make([]int, len(e.plan.Groups))
	if e.job.Tasks == nil {
		e.job.Tasks = map[int]*state.Task{}
	}
	for i, t := range e.plan.Tasks {
		ts := &tstate{runs: []string{t.Name}, attempts: map[string]int{}, status: state.TaskPending}
		ts.pending = len(t.Deps) + len(t.Groups)
		rec := e.job.Tasks[e.off+i]
		switch {
		case rec != nil && finished(rec.Status):
			ts.status = rec.Status
		case rec != nil:
			rec.Status = state.TaskPending // failed or cut short: run again
		default:
			rec = &state.Task{Status: state.TaskPending}
			e.job.Tasks[e.off+i] = rec
		}
		rec.Name, rec.Node, rec.Service, rec.Stage = t.Name, t.Node, t.Service, t.Stage
		e.tasks[i] = ts
	}
	for g, mem := range e.plan.Groups {
		e.groupsLeft[g] = len(mem)
	}
	// Release what finished in an earlier run, then queue what is ready.
	e.initializing = true
	for i, ts := range e.tasks {
		if finished(ts.status) {
			e.release(i)
		}
	}
	e.initializing = false
	for i, ts := range e.tasks {
		if ts.pending == 0 && ts.status == state.TaskPending {
			heap.Push(&e.ready, readyItem{stage: e.plan.Tasks[i].Stage, index: i})
		}
	}
	e.step.Status = state.JobRunning
	e.save()
	e.log.Info("step started", "action", e.step.Action, "tasks", n, "stages", len(e.plan.Stages), "parallelism", e.o.Parallelism)

	for {
		if ctx.Err() != nil && !e.stopping {
			e.stopping = true
			e.job.Message = "interrupted: " + context.Cause(ctx).Error()
		}
		if !e.stopping && e.saveErr == nil {
			e.dispatch(ctx)
		}
		if e.dirty {
			e.commit()
		}
		e.launch(ctx)
		if e.running == 0 && len(e.waiting) > 0 && !e.stopping {
			// Nothing left that could bring the addresses they wait for.
			for _, i := range sortedKeys(e.waiting) {
				if e.force {
					e.abandon(i, e.waiting[i])
					continue
				}
				e.log.Error("task failed", "taskName", e.plan.Tasks[i].Name, "node", e.plan.Tasks[i].Node, "message", e.waiting[i])
				e.observe(i, e.plan.Tasks[i].Name, state.TaskFailed, e.waiting[i])
				e.fail(i, e.waiting[i])
			}
			clear(e.waiting)
			continue
		}
		if e.running == 0 {
			break
		}
		select {
		case out := <-e.done:
			e.finish(out)
			e.drain()
		case <-ctx.Done():
			if !e.stopping {
				e.stopping = true
				e.job.Message = "interrupted: " + context.Cause(ctx).Error()
				e.log.Warn("interrupted: waiting for the running tasks to stop", "running", e.running)
			}
			out := <-e.done
			e.finish(out)
		}
	}
	e.end(ctx)
	return e.saveErr
}

// dispatch starts ready tasks, earliest stage first, while there is room.
func (e *executor) dispatch(ctx context.Context) {
	for e.running < e.o.Parallelism && e.ready.Len() > 0 {
		it := heap.Pop(&e.ready).(readyItem)
		if e.tasks[it.index].status != state.TaskPending {
			continue
		}
		t := e.plan.Tasks[it.index]
		if e.busy[t.Node] {
			e.deferred[t.Node] = append(e.deferred[t.Node], it.index)
			continue
		}
		e.start(ctx, it.index)
	}
}

// start runs the task's next run in a goroutine.
func (e *executor) start(ctx context.Context, i int) {
	t := e.plan.Tasks[i]
	ts := e.tasks[i]
	rec := e.job.Tasks[e.off+i]
	node := e.cl.Nodes[t.Node]
	name := ts.runs[0]
	svc := t.Service
	if name != t.Name {
		svc = "" // DELETE or CREATE before a retry: node tasks
	}
	if node == nil {
		e.fail(i, fmt.Sprintf("node %s is not in the cluster state", t.Node))
		return
	}
	if !hardwareFirst(name) && name != "DELETE" && !node.Reachable() {
		// Never connect to a node without an address (its CREATE or
		// CONFIRM failed): the plan should not have sent a task there.
		msg := fmt.Sprintf("node %s was never confirmed (no CONFIRM succeeded): %s cannot reach it", t.Node, strings.TrimSpace(name+" "+svc))
		if e.force {
			e.abandon(i, msg)
		} else {
			e.fail(i, msg)
		}
		return
	}
	if name == "BOOTSTRAP" && len(e.spec.Automators(node.Services)) == 0 {
		// No automator to bootstrap: Coopr's worker would run nothing.
		e.log.Info("task skipped: no automator to bootstrap", "node", t.Node)
		e.observe(i, name, state.TaskDone, "")
		ts.status = state.TaskDone
		rec.Status = state.TaskDone
		e.touch(i)
		e.release(i)
		return
	}
	// A run the last apply lost track of keeps its id: a daemon that
	// knows the id answers with that run instead of running it again.
	var run state.Run
	resumed := false
	if n := len(rec.Runs); n > 0 && rec.Runs[n-1].Status == state.TaskRunning && rec.Runs[n-1].Name == name {
		run, resumed = rec.Runs[n-1], true
	} else {
		run = state.Run{ID: fmt.Sprintf("%s-%04d-%d", e.job.ID, e.off+i+1, len(rec.Runs)+1), Name: name}
	}
	data, digest, err := e.builder.build(run.ID, name, node, svc)
	var inc *macro.IncompleteError
	if errors.As(err, &inc) {
		// A macro needs the address of a node whose CONFIRM has not
		// run: Coopr ran every CONFIRM a stage before, so wait for it.
		e.waiting[i] = err.Error()
		return
	}
	if resumed {
		rec.Runs = rec.Runs[:len(rec.Runs)-1]
	}
	ts.attempts[name]++
	run.Status = state.TaskRunning
	run.Started = e.o.Now()
	rec.Runs = append(rec.Runs, run)
	rec.Status = state.TaskRunning
	ts.status = state.TaskRunning
	e.busy[t.Node] = true
	e.running++
	e.touch(i)
	// What a run may leave behind is on record before it starts: a
	// machine (CREATE), files (INSTALL), a process (START).
	switch {
	case name == "CREATE" && (!node.CreateRan || node.State == state.NodeDeleted):
		// A CREATE retried after the DELETE of what the failed one may
		// have made: the node is being made again.
		node.CreateRan = true
		if node.State == state.NodeDeleted {
			node.State = state.NodeNew
		}
		e.dirtyNodes[node.ID] = true
	case name == "INSTALL" && svc != "":
		if ss := node.ServiceState(svc); !ss.Installed {
			ss.Installed = true
			e.dirtyNodes[node.ID] = true
		}
	case name == "START" && svc != "":
		if ss := node.ServiceState(svc); !ss.Started {
			ss.Started = true
			e.dirtyNodes[node.ID] = true
		}
	}
	attrs := []any{"task", run.ID, "taskName", name, "node", t.Node}
	if svc != "" {
		attrs = append(attrs, "service", svc)
	}
	if a := ts.attempts[name]; a > 1 {
		attrs = append(attrs, "attempt", a)
	}
	e.log.Info("task started", attrs...)
	e.observe(i, name, state.TaskRunning, "")
	topo := ""
	if name == "CONFIGURE" {
		topo = e.builder.topology()
	}
	e.launches = append(e.launches, launch{out: outcome{task: i, run: run, started: run.Started, err: err, digest: digest, topo: topo}, data: data})
}

// launch is a run waiting for the round's save before it starts.
type launch struct {
	out  outcome
	data []byte
}

// launch starts the round's runs; after a failed save, none runs.
func (e *executor) launch(ctx context.Context) {
	saveErr := e.saveErr
	for _, l := range e.launches {
		go func(out outcome, data []byte) {
			switch {
			case saveErr != nil:
				out.err = fmt.Errorf("not started: %w", saveErr)
			case out.err == nil:
				out.res, out.err = e.o.Runner.Run(ctx, out.run.ID, data)
			}
			e.done <- out
		}(l.out, l.data)
	}
	e.launches = e.launches[:0]
}

// drain handles every outcome already waiting, so that one save covers
// them all.
func (e *executor) drain() {
	for {
		select {
		case out := <-e.done:
			e.finish(out)
		default:
			return
		}
	}
}

// finish records a run's outcome and decides what comes next.
func (e *executor) finish(out outcome) {
	i := out.task
	t := e.plan.Tasks[i]
	ts := e.tasks[i]
	rec := e.job.Tasks[e.off+i]
	node := e.cl.Nodes[t.Node]
	e.running--
	e.busy[t.Node] = false
	name := out.run.Name
	run := &rec.Runs[len(rec.Runs)-1]
	run.Duration = float64(e.o.Now().Sub(out.started).Microseconds()) / 1000
	ok := out.err == nil && out.res != nil && out.res.Status == 0
	switch {
	case out.err != nil && e.stopping && isCancel(out.err):
		// Cut short by an interrupt: how it ended is unknown. The run
		// stays "running", so a resumed apply asks for it by its id.
		e.log.Warn("task interrupted", "task", run.ID, "taskName", name, "node", t.Node)
		ts.status = state.TaskFailed
		rec.Status = state.TaskRunning
		e.touch(i)
		return
	case out.err != nil:
		// The runner could not say how the run ended (a malformed task,
		// a daemon that went away). It stays "running": a resumed apply
		// sends the same task id, which a daemon that ran it answers
		// with its outcome instead of running it again.
		run.Status, run.Code, run.Message = state.TaskRunning, -1, out.err.Error()
	case out.res.Status != 0:
		run.Status, run.Code, run.Message = state.TaskFailed, out.res.Status, firstLine(out.res.Message, out.res.Stderr)
		// What the command said is what an operator needs first (the
		// runtime appends the error and its traceback after it).
		if head := firstLine(out.res.Stderr, ""); head != "(no message)" && !strings.Contains(run.Message, head) {
			run.Message += " (stderr: " + head + ")"
		}
		run.Stdout, run.Stderr = snip(out.res.Stdout), snip(out.res.Stderr)
	default:
		run.Status = state.TaskDone
	}
	if out.res != nil {
		e.merge(node, name, out.res, ok)
		e.dirtyNodes[node.ID] = true
	}
	if ok && t.Service != "" && name == t.Name {
		e.record(node, t.Service, name, out)
	}
	attrs := []any{"task", run.ID, "taskName", name, "node", t.Node, "duration", time.Duration(run.Duration * float64(time.Millisecond)).Round(time.Millisecond).String()}
	if t.Service != "" && name == t.Name {
		attrs = append(attrs, "service", t.Service)
	}
	// Requeue the node's deferred tasks: it is idle again.
	for _, d := range e.deferred[t.Node] {
		heap.Push(&e.ready, readyItem{stage: e.plan.Tasks[d].Stage, index: d})
	}
	delete(e.deferred, t.Node)

	if ok {
		e.log.Info("task finished", attrs...)
		e.observe(i, name, state.TaskDone, "")
		ts.runs = ts.runs[1:]
		if len(ts.runs) > 0 { // a DELETE or CREATE before a retry: go on
			rec.Status = state.TaskPending
			ts.status = state.TaskPending
			e.touch(i)
			heap.Push(&e.ready, readyItem{stage: t.Stage, index: i})
			return
		}
		ts.status = state.TaskDone
		rec.Status = state.TaskDone
		e.touch(i)
		e.release(i)
		return
	}
	attrs = append(attrs, "status", run.Code, "message", run.Message)
	retryable := out.err == nil && !e.stopping
	if !retryable || ts.attempts[name] >= e.o.Attempts {
		if retryable {
			attrs = append(attrs, "attempts", ts.attempts[name])
		}
		if e.force && !(e.stopping && out.err != nil && isCancel(out.err)) {
			e.abandon(i, run.Message)
			return
		}
		e.log.Error("task failed", attrs...)
		e.observe(i, name, state.TaskFailed, run.Message)
		e.fail(i, run.Message)
		return
	}
	// Coopr's retries, minus its leak: a failed CONFIRM becomes DELETE,
	// CREATE, CONFIRM; a failed CREATE is retried only after a DELETE of
	// what it may have made (unless it said it made nothing: 2xx).
	switch {
	case name == "CONFIRM":
		ts.runs = append([]string{"DELETE", "CREATE"}, ts.runs...)
	case name == "CREATE" && (run.Code < 200 || run.Code > 299):
		ts.runs = append([]string{"DELETE"}, ts.runs...)
	}
	attrs = append(attrs, "next", ts.runs)
	e.log.Warn("task failed, retrying", attrs...)
	e.observe(i, name, "retrying", run.Message)
	rec.Status = state.TaskPending
	ts.status = state.TaskPending
	e.touch(i)
	heap.Push(&e.ready, readyItem{stage: t.Stage, index: i})
}

// merge applies a result to the node as Coopr's finish did: the result
// map always (last write wins), addresses and hostname on success. A
// successful DELETE forgets the machine's identity, so nothing later
// deletes it twice or talks to a machine that is gone.
func (e *executor) merge(n *state.Node, name string, res *runtime.Result, ok bool) {
	if len(res.Result) > 0 {
		if n.Results == nil {
			n.Results = map[string]any{}
		}
		maps.Copy(n.Results, res.Result)
	}
	if ok {
		// config.nodes (cached) holds properties, not results.
		if len(res.IPAddresses) > 0 {
			n.IPAddresses = maps.Clone(res.IPAddresses)
			e.builder.invalidate(n.ID)
			// Tasks waiting for an address may build now.
			for w := range e.waiting {
				heap.Push(&e.ready, readyItem{stage: e.plan.Tasks[w].Stage, index: w})
			}
			clear(e.waiting)
		}
		if res.Hostname != "" && res.Hostname != n.Hostname {
			n.Hostname = res.Hostname
			e.builder.invalidate(n.ID)
		}
		switch name {
		case "CREATE":
			if n.State == state.NodeNew || n.State == state.NodeDeleted || n.State == "" {
				n.State = state.NodeCreated
			}
		case "CONFIRM":
			n.Confirmed = true
		case "BOOTSTRAP":
			// What it shipped: the job's resources of the node's types.
			if n.Bootstrapped == nil {
				n.Bootstrapped = map[string]string{}
			}
			for _, typ := range e.spec.Automators(n.Services) {
				if d, ok := e.job.Resources[typ]; ok {
					n.Bootstrapped[typ] = d
				} else {
					n.Bootstrapped[typ] = "shipped"
				}
			}
		case "DELETE":
			delete(n.Results, "providerid")
			delete(n.Results, "ssh_host_keys")
			n.IPAddresses, n.Confirmed = nil, false
			n.State = state.NodeDeleted
			e.builder.invalidate(n.ID)
		}
	}
}

// record notes on the node what a service task that succeeded did: the
// digest of the inputs an install, configure, initialize or start ran
// with; that it stopped or is removed.
func (e *executor) record(n *state.Node, svc, name string, out outcome) {
	ss := n.ServiceState(svc)
	if ss.Done == nil {
		ss.Done = map[string]string{}
	}
	action := strings.ToLower(name)
	if res := e.job.Inputs[svc+"/"+action]; res != "" && name != "STOP" && name != "REMOVE" {
		if ss.Res == nil {
			ss.Res = map[string]string{}
		}
		ss.Res[action] = res
	}
	switch name {
	case "INSTALL", "CONFIGURE", "INITIALIZE":
		ss.Done[action] = out.digest
		if name == "CONFIGURE" {
			ss.Topology = out.topo
		}
	case "START":
		ss.Done["start"] = out.digest
		ss.Started, ss.Drift = true, ""
		if e.job.Action == string(plan.Start) || e.job.Action == string(plan.Restart) {
			ss.Held = false
		}
	case "STOP":
		ss.Started = false
		if e.job.Action == string(plan.Stop) {
			ss.Held = true
		}
	case "REMOVE":
		ss.Installed = false
		for _, a := range []string{"install", "configure", "initialize"} {
			delete(ss.Done, a)
			delete(ss.Res, a)
		}
	}
}

// abandon gives up on a task that failed for good in a forced destroy:
// it is listed in the job, and what waits on it goes on.
func (e *executor) abandon(i int, msg string) {
	t := e.plan.Tasks[i]
	rec := e.job.Tasks[e.off+i]
	a := state.Abandoned{Node: t.Node, Task: t.Name, Service: t.Service, Message: msg}
	if n := e.cl.Nodes[t.Node]; n != nil && t.Name == "DELETE" {
		a.ProviderID = n.ProviderID()
		n.State = state.NodeDeleted
		e.builder.invalidate(n.ID)
		e.dirtyNodes[n.ID] = true
	}
	e.job.Abandoned = append(e.job.Abandoned, a)
	e.log.Warn("task abandoned (--force)", "taskName", t.Name, "node", t.Node, "service", t.Service, "message", msg)
	e.observe(i, t.Name, state.TaskAbandoned, msg)
	e.tasks[i].status = state.TaskAbandoned
	rec.Status = state.TaskAbandoned
	if len(rec.Runs) == 0 {
		rec.Message = msg
	}
	e.touch(i)
	e.release(i)
}

// release tells the task's successors (and barrier groups) it is done.
func (e *executor) release(i int) {
	n := len(e.plan.Tasks)
	for _, s := range e.succ[i] {
		if int(s) < n {
			e.prereqDone(int(s))
			continue
		}
		g := int(s) - n
		e.groupsLeft[g]--
		if e.groupsLeft[g] == 0 {
			for _, u := range e.succ[s] {
				e.prereqDone(int(u))
			}
		}
	}
}

func (e *executor) prereqDone(i int) {
	ts := e.tasks[i]
	ts.pending--
	if ts.pending == 0 && ts.status == state.TaskPending && !e.initializing {
		heap.Push(&e.ready, readyItem{stage: e.plan.Tasks[i].Stage, index: i})
	}
}

// fail marks the task failed and the job as failing: nothing new starts.
func (e *executor) fail(i int, msg string) {
	e.tasks[i].status = state.TaskFailed
	rec := e.job.Tasks[e.off+i]
	rec.Status = state.TaskFailed
	if len(rec.Runs) == 0 {
		rec.Message = msg
	}
	e.failed = append(e.failed, i)
	if !e.stopping {
		t := e.plan.Tasks[i]
		e.job.Message = fmt.Sprintf("%s on %s failed: %s", strings.TrimSpace(t.Name+" "+t.Service), t.Node, msg)
	}
	e.stopping = true
	e.touch(i)
}

// end sets the step's outcome.
func (e *executor) end(ctx context.Context) {
	complete := len(e.failed) == 0 && ctx.Err() == nil && e.saveErr == nil
	if complete {
		for _, ts := range e.tasks {
			if !finished(ts.status) {
				complete = false
			}
		}
	}
	e.ok = complete
	if complete {
		e.step.Status = state.JobComplete
	} else {
		e.step.Status = state.JobFailed
		if e.job.Message == "" && e.saveErr != nil {
			e.job.Message = e.saveErr.Error()
		}
	}
	// Not saved here: Run saves the step's end with what follows it (the
	// next step, a rollback step, the job's end). A journal store reads
	// the whole cluster at each save (about 1,000 keys at 100 nodes), and
	// a crash before that save loses nothing: the rounds hold every
	// task's end, and the step resumed runs none of them again.
	level := slog.LevelInfo
	if !complete {
		level = slog.LevelError
	}
	e.log.Log(context.Background(), level, "step "+e.step.Status, "action", e.step.Action, "message", e.job.Message)
}

// finished reports whether a task status is final for the step.
func finished(status string) bool {
	return status == state.TaskDone || status == state.TaskSkipped || status == state.TaskAbandoned
}

// hardwareFirst reports whether a task name runs before a node has an
// address (CREATE, CONFIRM).
func hardwareFirst(name string) bool { return name == "CREATE" || name == "CONFIRM" }

func (e *executor) observe(i int, run, status, msg string) {
	if e.o.Observe != nil {
		e.o.Observe(Event{Step: e.stepIndex, Task: i, Run: run, Status: status, Message: msg, Time: e.o.Now()})
	}
}

// touch marks task i's record (and the job) as changed.
func (e *executor) touch(i int) {
	e.dirty = true
	e.dirtyTasks[i] = true
}

// commit persists the round's changes: appended to the journal when the
// store keeps one, else a whole snapshot.
func (e *executor) commit() {
	if e.o.Journal == nil {
		e.save()
		return
	}
	var changes []state.Change
	for i := range e.dirtyTasks {
		gi := e.off + i
		changes = append(changes, state.Change{Job: e.job.ID, Task: &gi, Rec: e.job.Tasks[gi]})
	}
	for id := range e.dirtyNodes {
		if n := e.cl.Nodes[id]; n != nil {
			changes = append(changes, state.Change{Node: n})
		}
	}
	changes = append(changes, state.Change{Job: e.job.ID, JobStatus: e.job.Status, Message: e.job.Message})
	clear(e.dirtyTasks)
	clear(e.dirtyNodes)
	e.dirty = false
	e.cl.Seq++
	if err := e.o.Journal(e.cl, changes); err != nil && e.saveErr == nil {
		e.saveErr = fmt.Errorf("saving the state of cluster %s: %w", e.cl.Name, err)
		e.log.Error("cannot save the cluster state: stopping the job", "error", err)
		e.stopping = true
	}
}

// save persists the cluster; the first failure stops the job.
func (e *executor) save() {
	e.dirty = false
	clear(e.dirtyTasks)
	clear(e.dirtyNodes)
	e.cl.Updated = e.o.Now()
	if err := e.o.Save(e.cl); err != nil && e.saveErr == nil {
		e.saveErr = fmt.Errorf("saving the state of cluster %s: %w", e.cl.Name, err)
		e.log.Error("cannot save the cluster state: stopping the job", "error", err)
		e.stopping = true
	}
}

// firstLine is the first non-empty line of msg, else of alt.
func firstLine(msg, alt string) string {
	for _, s := range []string{msg, alt} {
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
	}
	return "(no message)"
}

// snip keeps the last 2,048 characters, marked as Coopr did.
func snip(s string) string {
	const keep = 2048
	if len(s) <= keep {
		return s
	}
	return "[snipped]" + s[len(s)-keep:]
}

func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, runtime.ErrCancelled)
}

// ErrNoRunner is returned when Options.Runner is nil.
var ErrNoRunner = errors.New("apply: no runner")

type readyItem struct{ stage, index int }

// readyHeap orders ready tasks by stage, then plan index.
type readyHeap []readyItem

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	if h[i].stage != h[j].stage {
		return h[i].stage < h[j].stage
	}
	return h[i].index < h[j].index
}
func (h readyHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(readyItem)) }
func (h *readyHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
