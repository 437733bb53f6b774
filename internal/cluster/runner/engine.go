// Package runner runs cluster jobs where they belong: in the daemon, not
// in a terminal. A client (loomd apply, loomd destroy) submits a Request;
// the daemon that takes it plans the change (apply.Plan), records it as a
// job of the cluster's state with every step (apply.Begin), records the
// job in the bucket LOOM_CLUSTER_JOBS under the cluster's name, and runs
// it (apply.Run) under a lease it renews. When that daemon dies, another
// daemon sharing the queue takes the job over (the lease ran out and the
// owner stopped announcing itself, or the owner's process is gone from
// this host, or it released the job on shutdown) and resumes it: tasks
// that finished are not run again, a task that was running is picked up
// by its id. Every write of the record is a compare-and-set on its
// revision, and a daemon that cannot renew its lease stops writing the
// cluster's state before anyone may take it over: two daemons never run
// one job.
//
// The Engine runs a recorded job for both the daemon and loomd apply
// --local; the Runner adds the record, the lease, the takeover and the
// job log around it.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

// Verbs of a Request: apply a spec, destroy the cluster, or run a
// service action.
const (
	VerbApply   = "apply"
	VerbDestroy = "destroy"
	VerbStart   = "start"
	VerbStop    = "stop"
	VerbRestart = "restart"
)

// Request is what a client asks of a cluster.
type Request struct {
	// Verb is apply (bring the cluster to Spec), destroy, or a service
	// action (start, stop, restart) on Services (nil: all) on Nodes (nil:
	// every node carrying them).
	Verb     string   `json:"verb"`
	Services []string `json:"services,omitempty"`
	Nodes    []string `json:"nodes,omitempty"`
	// Spec is the spec's text (needed for apply and service actions; a
	// destroy given one uses its service definitions); SpecFile where it
	// was read from, for messages.
	Spec     string `json:"spec,omitempty"`
	SpecFile string `json:"specFile,omitempty"`
	// NoRestart reconfigures without restarting services.
	NoRestart bool `json:"noRestart,omitempty"`
	// NoRemove runs no REMOVE; Force (destroy) abandons what fails for
	// good and goes on.
	NoRemove bool `json:"noRemove,omitempty"`
	Force    bool `json:"force,omitempty"`
	// OnFailure is keep (default) or rollback: after a failed create,
	// destroy the nodes it made.
	OnFailure string `json:"onFailure,omitempty"`
	// Refresh first confirms every node with its provider and runs the
	// services' check actions (apply.Refresh); what drifted is planned.
	Refresh bool `json:"refresh,omitempty"`
	// Drift is what a refresh found (the plan acts on it).
	Drift []state.Drift `json:"drift,omitempty"`
	// Expect, when set, is the plan the client showed (and was
	// confirmed, or saved): the job runs only if planning again gives
	// exactly that plan.
	Expect *apply.Expect `json:"expect,omitempty"`
	// Parallelism caps the tasks running at once (default 16).
	Parallelism int `json:"parallelism,omitempty"`
	// TaskTimeoutMs bounds the wait for one task (0: the daemon's
	// deadlines).
	TaskTimeoutMs int64 `json:"taskTimeoutMs,omitempty"`
	// Requester says who asked ("ops@laptop pid 4242"), for the history.
	Requester string `json:"requester,omitempty"`
	// Tenant is the tenant a new cluster belongs to (state.Cluster.Tenant:
	// its tasks' tenantId); the API sets it from a tenant token. It never
	// changes an existing cluster's. Empty: the daemon's --tenant.
	Tenant string `json:"tenant,omitempty"`
}

// Check validates a request's fields (not its spec).
func (r *Request) Check() error {
	switch r.Verb {
	case VerbApply, VerbStart, VerbStop, VerbRestart:
		if strings.TrimSpace(r.Spec) == "" {
			return fmt.Errorf("%s needs the spec's text in \"spec\"", r.Verb)
		}
	case VerbDestroy:
	default:
		return fmt.Errorf("verb %q: want apply, destroy, start, stop or restart", r.Verb)
	}
	if (r.Services != nil || r.Nodes != nil) && !r.action() {
		return errors.New("services and nodes go with a service action (start, stop, restart)")
	}
	if r.Force && r.Verb != VerbDestroy {
		return errors.New("force goes with destroy")
	}
	switch r.OnFailure {
	case "", "keep", "rollback":
	default:
		return fmt.Errorf("onFailure %q: want keep or rollback", r.OnFailure)
	}
	if r.Parallelism < 0 || r.Parallelism > 4096 {
		return fmt.Errorf("parallelism %d: want 1 to 4096 (0: the default, 16)", r.Parallelism)
	}
	if r.TaskTimeoutMs < 0 {
		return fmt.Errorf("taskTimeoutMs %d: must not be negative", r.TaskTimeoutMs)
	}
	if r.Tenant != "" && !runtime.ValidTenant(r.Tenant) {
		return fmt.Errorf("tenant %q: want 1 to 64 letters, digits, '.', '_' or '-'", r.Tenant)
	}
	return nil
}

func (r *Request) action() bool {
	return r.Verb == VerbStart || r.Verb == VerbStop || r.Verb == VerbRestart
}

// Options are the plan options of the request.
func (r *Request) Options() apply.PlanOptions {
	o := apply.PlanOptions{Destroy: r.Verb == VerbDestroy, NoRestart: r.NoRestart, NoRemove: r.NoRemove, Force: r.Force,
		Rollback: r.OnFailure == "rollback"}
	if r.action() {
		o.Action, o.Services, o.Nodes = plan.Action(r.Verb), r.Services, r.Nodes
	}
	return o
}

// same reports whether two requests ask for the same change (who asked
// and how fast aside).
func (r Request) same(o Request) bool {
	return r.Verb == o.Verb && r.Spec == o.Spec && r.NoRestart == o.NoRestart && r.OnFailure == o.OnFailure &&
		r.NoRemove == o.NoRemove && r.Force == o.Force && slices.Equal(r.Services, o.Services) && slices.Equal(r.Nodes, o.Nodes)
}

// Step is one step of a job, as the job record mirrors it (the cluster
// state's job holds the steps themselves).
type Step struct {
	// Index is the step's in the job (from 0).
	Index  int    `json:"index"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	// Job is the cluster state's job the step is part of.
	Job string `json:"job,omitempty"`
	// Status is "" (not begun), running, complete or failed.
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	// Tasks counts its tasks.
	Tasks int `json:"tasks"`
	// Rollback marks the step --on-failure rollback added after a
	// failed create.
	Rollback bool `json:"rollback,omitempty"`
}

// Step statuses.
const (
	StepRunning  = "running"
	StepComplete = "complete"
	StepFailed   = "failed"
)

// StepsOf mirrors a job's steps for its record.
func StepsOf(job *state.Job) []Step {
	out := make([]Step, len(job.Steps))
	for k, st := range job.Steps {
		s := Step{Index: k, Action: st.Action, Reason: st.Reason, Job: job.ID, Tasks: st.Tasks,
			Rollback: st.Action == string(plan.Rollback)}
		switch st.Status {
		case state.JobRunning, state.JobComplete, state.JobFailed:
			s.Status = st.Status
		}
		if s.Status == StepFailed && k == len(job.Steps)-1 {
			s.Message = job.Message
		}
		out[k] = s
	}
	return out
}

// Env is what planning needs of the daemon (or of loomd apply --local):
// the plugins the spec is checked against, the automator types' resource
// files.
type Env struct {
	Plugins   *spec.Plugins
	Resources *apply.Resources
}

// Plan plans a request against the cluster's state (nil: no cluster
// yet): the job apply.Begin records. An empty change means nothing to do.
// With Expect, a plan other than the one expected is an error (the
// cluster changed since it was shown). Errors are the request's (a bad
// spec, a change apply cannot make).
func Plan(cl *state.Cluster, req Request, env Env) (*apply.Change, error) {
	var sp *spec.Spec
	if req.Spec != "" {
		var err error
		if sp, err = spec.ParseWith(req.SpecFile, []byte(req.Spec), spec.Options{Plugins: env.Plugins}); err != nil {
			return nil, err
		}
	}
	if req.Verb == VerbDestroy && cl == nil {
		return &apply.Change{Cluster: specName(sp), Base: "none"}, nil
	}
	ch, err := apply.Plan(apply.Input{Cluster: cl, Spec: sp, Resources: env.Resources, Drift: req.Drift, Options: req.Options()})
	if err != nil {
		return nil, err
	}
	if req.Expect != nil {
		if why := req.Expect.Check(cl, ch); why != "" {
			return nil, &StaleError{Why: why}
		}
	}
	return ch, nil
}

func specName(sp *spec.Spec) string {
	if sp == nil {
		return ""
	}
	return sp.Name
}

// StaleError says the plan a client showed is not what would run now.
type StaleError struct{ Why string }

func (e *StaleError) Error() string {
	return e.Why + "; nothing was run: make a new plan ('loomd plan')"
}

// Engine runs a recorded job on a store. loomd serve's Runner and loomd
// apply --local both use it.
type Engine struct {
	Store state.Journal
	Tasks apply.Runner
	// Log gets the job log (executor lines, task state changes, step
	// events); Logger gets the executor lines too (nil: only the log).
	Log    joblog.Sink
	Logger *slog.Logger
	// Who names the runner in job events ("loomd <owner>"); Source in
	// log entries; Requester who asked for the job.
	Who, Source, Requester string
	// Parallelism caps the tasks running at once.
	Parallelism int
	// Observe sees every task state change (a live view); the task index
	// is job-wide (step k's task i is job.Steps[k].Offset+i).
	Observe func(job *state.Job, ev apply.Event)
	// Started and Ended are told each step's start (with its plan) and
	// end (the CLI prints each step's summary); steps is the record's
	// mirror, up to date.
	Started func(k int, steps []Step, job *state.Job, p *plan.Plan)
	Ended   func(k int, steps []Step, cl *state.Cluster, job *state.Job, p *plan.Plan)
	// Now is the clock (tests).
	Now func() time.Time
}

// Outcome is how a run of a job ended.
type Outcome struct {
	// State is complete, failed or interrupted (ctx ended: the steps left
	// are for whoever resumes).
	State   string
	Message string
	Cluster *state.Cluster
	Job     *state.Job
}

// Outcome states.
const (
	Complete    = "complete"
	Failed      = "failed"
	Interrupted = "interrupted"
)

// Run runs job jobID of cluster name (recorded by apply.Begin) from its
// first step not complete, to its end. first, when set, are the events the
// job records instead of "started" or "resumed" (an interruption and a
// takeover). The error is for what stopped the run itself (the store):
// run again later.
func (e *Engine) Run(ctx context.Context, name, jobID string, first []state.Event) (Outcome, error) {
	now := e.Now
	if now == nil {
		now = time.Now
	}
	var out Outcome
	cl, err := e.Store.Get(name)
	if err != nil {
		return out, err
	}
	out.Cluster = cl
	i := slices.IndexFunc(cl.Jobs, func(j *state.Job) bool { return j.ID == jobID })
	if i < 0 {
		return out, fmt.Errorf("cluster %s has no job %s in its state", name, jobID)
	}
	job := cl.Jobs[i]
	out.Job = job
	if job.Finished() && job.Status != state.JobRunning {
		out.State, out.Message = Complete, ""
		if job.Status != state.JobComplete {
			out.State, out.Message = Failed, job.Message
		}
		return out, nil
	}
	ev := state.Event{Time: now(), Kind: state.EventStarted, By: e.Who, Message: e.why(job)}
	if job.DoneTasks() > 0 || job.Step > 0 || len(job.Events) > 0 {
		ev.Kind = state.EventResumed
	}
	for _, f := range first {
		f.Done = job.DoneTasks()
		job.AddEvent(f)
	}
	if len(first) == 0 {
		ev.Done = job.DoneTasks()
		job.AddEvent(ev)
	}
	var next slog.Handler
	if e.Logger != nil {
		next = e.Logger.Handler()
	}
	logger := slog.New(joblog.Handler(e.Log, name, job.ID, e.Source, next))
	opts := apply.Options{Runner: e.Tasks, Parallelism: e.Parallelism, Logger: logger, Save: e.Store.Put, Journal: e.Store.Append,
		Observe: func(ev apply.Event) {
			idx := ev.Task
			if ev.Step < len(job.Steps) {
				idx += job.Steps[ev.Step].Offset
			}
			e.Log.Write(name, joblog.Entry{Time: ev.Time, Kind: joblog.KindTask, Job: job.ID, Source: e.Source,
				Task: &joblog.TaskEvent{Index: idx, Run: ev.Run, Status: ev.Status, Message: ev.Message}})
			if e.Observe != nil {
				ev.Task = idx
				e.Observe(job, ev)
			}
		},
		OnStep: func(k int, st *state.Step, p *plan.Plan, done bool) {
			steps := StepsOf(job)
			if !done {
				e.jobEvent(name, job.ID, "step-started", fmt.Sprintf("step %d/%d: %s (%s)", k+1, len(job.Steps), st.Action, st.Reason),
					joblog.Attr{K: "step", V: fmt.Sprint(k + 1)}, joblog.Attr{K: "action", V: st.Action})
				if e.Started != nil {
					e.Started(k, steps, job, p)
				}
				return
			}
			status := st.Status
			if status == state.JobRunning && ctx.Err() == nil {
				status = state.JobComplete
			}
			e.jobEvent(name, job.ID, "step-ended", fmt.Sprintf("step %d/%d: %s", k+1, len(job.Steps), status),
				joblog.Attr{K: "step", V: fmt.Sprint(k + 1)}, joblog.Attr{K: "status", V: status}, joblog.Attr{K: "message", V: job.Message})
			if e.Ended != nil && ctx.Err() == nil {
				e.Ended(k, steps, cl, job, p)
			}
		}}
	err = apply.Run(ctx, cl, job, opts)
	if ctx.Err() != nil {
		// Cut short: the job stays unfinished, for whoever resumes.
		cause := context.Cause(ctx).Error()
		job.AddEvent(state.Event{Time: now(), Kind: state.EventInterrupted, By: e.Who, Message: cause, Done: job.DoneTasks()})
		if perr := e.Store.Put(cl); perr != nil && e.Logger != nil {
			e.Logger.Warn("recording the interruption in the cluster state failed", "cluster", name, "job", job.ID, "err", perr)
		}
		e.jobEvent(name, job.ID, "interrupted", fmt.Sprintf("job %s interrupted: %s", job.ID, cause))
		out.State, out.Message = Interrupted, cause
		return out, nil
	}
	if err != nil {
		return out, err
	}
	out.State = Complete
	if job.Status != state.JobComplete {
		out.State, out.Message = Failed, job.Message
	}
	return out, nil
}

// why is the message of a job's "started" event.
func (e *Engine) why(job *state.Job) string {
	var b strings.Builder
	b.WriteString(job.Action)
	if job.SpecFile != "" {
		b.WriteString(" " + job.SpecFile)
	}
	if e.Requester != "" {
		b.WriteString(" for " + e.Requester)
	}
	fmt.Fprintf(&b, ": %s (%d step(s))", job.Reason, len(job.Steps))
	return b.String()
}

// jobEvent writes a job-level entry to the job log.
func (e *Engine) jobEvent(cluster, job, event, msg string, attrs ...joblog.Attr) {
	e.Log.Write(cluster, joblog.Entry{Time: time.Now(), Kind: joblog.KindJob, Job: job, Level: "INFO", Msg: msg, Source: e.Source,
		Attrs: append([]joblog.Attr{{K: "event", V: event}}, attrs...)})
}

// StepsOfChange mirrors a planned change's steps (not begun; Job names
// the job it resumes).
func StepsOfChange(ch *apply.Change) []Step {
	out := make([]Step, len(ch.Steps))
	for i, s := range ch.Steps {
		out[i] = Step{Index: s.Index, Action: s.State.Action, Reason: s.State.Reason, Tasks: len(s.Plan.Tasks),
			Rollback: s.State.Action == string(plan.Rollback)}
		if ch.Resume != nil {
			out[i].Job = ch.Resume.ID
		}
	}
	return out
}
