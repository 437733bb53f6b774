// Package runner runs cluster jobs where they belong: in the daemon, not
// in a terminal. A client (loomd apply, loomd destroy) submits a Request;
// the daemon that takes it computes the change's steps, records them in
// the bucket LOOM_CLUSTER_JOBS under the cluster's name, and runs them
// under a lease it renews. When that daemon dies, another daemon sharing
// the queue takes the job over (the lease ran out and the owner stopped
// announcing itself, or the owner's process is gone from this host, or
// it released the job on shutdown) and resumes it: tasks that finished
// are not run again, a task that was running is picked up by its id.
// Every write of the record is a compare-and-set on its revision, and a
// daemon that cannot renew its lease stops writing the cluster's state
// before anyone may take it over: two daemons never run one job.
//
// The Engine is the loop over a change's steps that both the daemon and
// loomd apply --local run; the Runner adds the record, the lease, the
// takeover and the job log around it.
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
)

// Verbs of a Request.
const (
	VerbApply   = "apply"
	VerbDestroy = "destroy"
)

// Request is what a client asks of a cluster.
type Request struct {
	// Verb is apply (bring the cluster to Spec) or destroy.
	Verb string `json:"verb"`
	// Spec is the spec's text (apply); SpecFile where it was read from,
	// for messages.
	Spec     string `json:"spec,omitempty"`
	SpecFile string `json:"specFile,omitempty"`
	// NoRestart reconfigures without restarting services.
	NoRestart bool `json:"noRestart,omitempty"`
	// OnFailure is keep (default) or rollback: after a failed create,
	// destroy the nodes it made.
	OnFailure string `json:"onFailure,omitempty"`
	// Parallelism caps the tasks running at once (default 16).
	Parallelism int `json:"parallelism,omitempty"`
	// TaskTimeoutMs bounds the wait for one task (0: the daemon's
	// deadlines).
	TaskTimeoutMs int64 `json:"taskTimeoutMs,omitempty"`
	// Requester says who asked ("ops@laptop pid 4242"), for the history.
	Requester string `json:"requester,omitempty"`
}

// Check validates a request's fields (not its spec).
func (r *Request) Check() error {
	switch r.Verb {
	case VerbApply:
		if strings.TrimSpace(r.Spec) == "" {
			return errors.New("apply needs the spec's text in \"spec\"")
		}
	case VerbDestroy:
	default:
		return fmt.Errorf("verb %q: want apply or destroy", r.Verb)
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
	return nil
}

// same reports whether two requests ask for the same change (who asked
// and how fast aside).
func (r Request) same(o Request) bool {
	return r.Verb == o.Verb && r.Spec == o.Spec && r.NoRestart == o.NoRestart && r.OnFailure == o.OnFailure
}

// Step is one step of a change, as the job record keeps it.
type Step struct {
	Action           string   `json:"action"`
	PlannedNodes     []string `json:"plannedNodes,omitempty"`
	Services         []string `json:"services,omitempty"`
	OnlyPlannedNodes bool     `json:"onlyPlannedNodes,omitempty"`
	Reason           string   `json:"reason"`
	// Job is the cluster state's job that runs the step, once begun.
	Job string `json:"job,omitempty"`
	// Status is "" (not begun), running, complete or failed.
	Status  string `json:"status,omitempty"`
	Message string `json:"message,omitempty"`
	// Rollback marks the destroy --on-failure rollback added after a
	// failed create.
	Rollback bool `json:"rollback,omitempty"`
}

// Step statuses.
const (
	StepRunning  = "running"
	StepComplete = "complete"
	StepFailed   = "failed"
)

func stepOf(s apply.Step) Step {
	st := Step{Action: string(s.Action), PlannedNodes: s.PlannedNodes, Services: s.Services, OnlyPlannedNodes: s.OnlyPlannedNodes, Reason: s.Reason}
	if s.Resume != nil {
		st.Job = s.Resume.ID
	}
	return st
}

// Plan computes the steps of a request against the cluster's state (nil:
// no cluster yet): apply diffs the spec, destroy destroys every node. No
// steps means nothing to do. Errors are the request's (a bad spec, a
// change apply cannot make).
func Plan(cl *state.Cluster, req Request) ([]Step, error) {
	var steps []apply.Step
	switch req.Verb {
	case VerbApply:
		sp, err := spec.Parse(req.SpecFile, []byte(req.Spec))
		if err != nil {
			return nil, err
		}
		if steps, err = apply.Diff(cl, sp, apply.DiffOptions{NoRestart: req.NoRestart}); err != nil {
			return nil, err
		}
	case VerbDestroy:
		var err error
		if steps, err = apply.DestroySteps(cl); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("verb %q: want apply or destroy", req.Verb)
	}
	out := make([]Step, len(steps))
	for i, s := range steps {
		out[i] = stepOf(s)
	}
	return out, nil
}

// Engine runs a change's steps, one job each, on a store. loomd serve's
// Runner and loomd apply --local both use it.
type Engine struct {
	Store state.Journal
	Tasks apply.Runner
	// Log gets the job log (executor lines, task state changes, step
	// events); Logger gets the executor lines too (nil: only the log).
	Log    joblog.Sink
	Logger *slog.Logger
	// Who names the runner in job events ("loomd <owner>"); Source in
	// log entries.
	Who, Source string
	// Begun is called once a step's job exists, before its first task
	// (the daemon records the job's id); an error stops the run.
	Begun func(i int, st Step, job *state.Job) error
	// Observe sees every task state change (a live view).
	Observe func(i int, job *state.Job, p *plan.Plan, ev apply.Event)
	// Started and Ended are told each step's start (with its plan) and
	// end (the CLI prints each step's summary).
	Started func(i int, st Step, job *state.Job, p *plan.Plan)
	Ended   func(i int, st Step, cl *state.Cluster, job *state.Job, p *plan.Plan)
	// Now is the clock (tests).
	Now func() time.Time
}

// Outcome is how a run of the steps ended.
type Outcome struct {
	// State is complete, failed or interrupted (ctx ended: the steps left
	// are for whoever resumes).
	State   string
	Message string
	Cluster *state.Cluster
	// Job and Plan are the last step's that ran.
	Job  *state.Job
	Plan *plan.Plan
}

// Outcome states.
const (
	Complete    = "complete"
	Failed      = "failed"
	Interrupted = "interrupted"
)

// Run runs steps (in place: each one's Job and Status are updated) from
// the first not complete. first, when set, are the events the first step
// that runs records instead of "started" or "resumed" (an interruption
// and a takeover). The error is for what stopped the run itself (the
// store): run again later.
func (e *Engine) Run(ctx context.Context, name string, req Request, steps *[]Step, first []state.Event) (Outcome, error) {
	now := e.Now
	if now == nil {
		now = time.Now
	}
	var out Outcome
	failed := ""
	for i := 0; i < len(*steps); i++ {
		st := &(*steps)[i]
		if st.Status == StepComplete || st.Status == StepFailed {
			continue
		}
		cl, err := e.Store.Get(name)
		if errors.Is(err, state.ErrNotFound) {
			cl, err = nil, nil
		}
		if err != nil {
			return out, err
		}
		out.Cluster = cl
		step, err := e.step(cl, req, *st)
		if err != nil {
			st.Status, st.Message = StepFailed, err.Error()
			out.State, out.Message = Failed, err.Error()
			return out, nil
		}
		if step.Resume != nil && step.Resume.Status == state.JobComplete {
			st.Status = StepComplete
			continue
		}
		cl, job := apply.Begin(cl, step, now())
		out.Cluster, out.Job = cl, job
		ev := state.Event{Time: now(), Kind: state.EventStarted, By: e.Who, Message: e.why(req, i, len(*steps), *st)}
		if step.Resume != nil {
			ev.Kind, ev.Message, ev.Done = state.EventResumed, e.why(req, i, len(*steps), *st), job.DoneTasks()
		}
		if len(first) > 0 {
			for _, f := range first[:len(first)-1] {
				f.Done = job.DoneTasks()
				job.AddEvent(f)
			}
			ev = first[len(first)-1]
			ev.Done = job.DoneTasks()
			first = nil
		}
		job.AddEvent(ev)
		p, err := apply.PlanStep(cl, step)
		if err != nil {
			msg := fmt.Sprintf("planning %s of cluster %s: %v", step.Action, name, err)
			st.Status, st.Message = StepFailed, msg
			out.State, out.Message = Failed, msg
			return out, nil
		}
		out.Plan = p
		st.Job, st.Status = job.ID, StepRunning
		if e.Begun != nil {
			if err := e.Begun(i, *st, job); err != nil {
				return out, err
			}
		}
		if e.Started != nil {
			e.Started(i, *st, job, p)
		}
		var next slog.Handler
		if e.Logger != nil {
			next = e.Logger.Handler()
		}
		logger := slog.New(joblog.Handler(e.Log, name, job.ID, e.Source, next))
		e.jobEvent(name, job.ID, "step-started", fmt.Sprintf("step %d/%d: %s (%s)", i+1, len(*steps), step.Action, st.Reason),
			joblog.Attr{K: "step", V: fmt.Sprint(i + 1)}, joblog.Attr{K: "action", V: string(step.Action)})
		logger.Info("applying", "cluster", name, "job", job.ID, "why", st.Reason, "plan", p.Summary())
		opts := apply.Options{Runner: e.Tasks, Parallelism: req.Parallelism, Logger: logger, Save: e.Store.Put, Journal: e.Store.Append,
			Observe: func(ev apply.Event) {
				e.Log.Write(name, joblog.Entry{Time: ev.Time, Kind: joblog.KindTask, Job: job.ID, Source: e.Source,
					Task: &joblog.TaskEvent{Index: ev.Task, Run: ev.Run, Status: ev.Status, Message: ev.Message}})
				if e.Observe != nil {
					e.Observe(i, job, p, ev)
				}
			}}
		err = apply.Execute(ctx, cl, step.Spec, p, job, opts)
		if ctx.Err() != nil {
			// Cut short: the step stays running, for whoever resumes.
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
		if job.Status == state.JobComplete {
			st.Status, st.Message = StepComplete, ""
		} else {
			st.Status, st.Message = StepFailed, job.Message
		}
		if st.Status == StepFailed {
			failed = job.Message
			// Nothing after a failed step runs, but the rollback of a
			// failed create, when asked for.
			*steps = (*steps)[:i+1]
			st = &(*steps)[i]
			if rb := apply.Rollback(cl, job, step.Spec); req.OnFailure == "rollback" && rb != nil && !st.Rollback {
				rs := stepOf(*rb)
				rs.Rollback = true
				*steps = append(*steps, rs)
				st = &(*steps)[i]
			}
		}
		e.jobEvent(name, job.ID, "step-ended", fmt.Sprintf("step %d/%d: job %s %s", i+1, len(*steps), job.ID, job.Status),
			joblog.Attr{K: "step", V: fmt.Sprint(i + 1)}, joblog.Attr{K: "status", V: job.Status}, joblog.Attr{K: "message", V: job.Message})
		if e.Ended != nil {
			e.Ended(i, *st, cl, job, p)
		}
	}
	out.State = Complete
	if failed != "" {
		out.State, out.Message = Failed, failed
	}
	return out, nil
}

// step is the apply step of a persisted one: its action, nodes and spec,
// and the job it resumes.
func (e *Engine) step(cl *state.Cluster, req Request, st Step) (apply.Step, error) {
	a, err := plan.ParseAction(st.Action)
	if err != nil {
		return apply.Step{}, err
	}
	step := apply.Step{Action: a, PlannedNodes: st.PlannedNodes, Services: st.Services, OnlyPlannedNodes: st.OnlyPlannedNodes, Reason: st.Reason}
	if st.Job != "" && cl != nil {
		if i := slices.IndexFunc(cl.Jobs, func(j *state.Job) bool { return j.ID == st.Job }); i >= 0 {
			j := cl.Jobs[i]
			sp, err := spec.Parse(cl.SpecFile+" (as applied by job "+j.ID+")", []byte(j.Spec))
			if err != nil {
				return apply.Step{}, fmt.Errorf("cluster %s: the spec of job %s no longer parses: %w", cl.Name, j.ID, err)
			}
			step.Resume, step.Spec = j, sp
			return step, nil
		}
	}
	switch {
	case req.Verb == VerbApply:
		step.Spec, err = spec.Parse(req.SpecFile, []byte(req.Spec))
	case cl != nil:
		step.Spec, err = spec.Parse(cl.SpecFile+" (as last applied)", []byte(cl.Spec))
	default:
		err = fmt.Errorf("cluster %s has no state to %s", req.Verb, st.Action)
	}
	return step, err
}

// why is the message of a step's "started" event.
func (e *Engine) why(req Request, i, n int, st Step) string {
	var b strings.Builder
	b.WriteString(req.Verb)
	if req.SpecFile != "" && req.Verb == VerbApply {
		b.WriteString(" " + req.SpecFile)
	}
	if req.Requester != "" {
		b.WriteString(" for " + req.Requester)
	}
	fmt.Fprintf(&b, "; step %d/%d: %s (%s)", i+1, n, st.Action, st.Reason)
	return b.String()
}

// jobEvent writes a job-level entry to the job log.
func (e *Engine) jobEvent(cluster, job, event, msg string, attrs ...joblog.Attr) {
	e.Log.Write(cluster, joblog.Entry{Time: time.Now(), Kind: joblog.KindJob, Job: job, Level: "INFO", Msg: msg, Source: e.Source,
		Attrs: append([]joblog.Attr{{K: "event", V: event}}, attrs...)})
}

// JobPlan rebuilds the plan a job of the cluster runs (or ran), for a
// live view attached after it started. A job whose nodes are gone (a
// finished destroy) may no longer plan the same: callers compare the task
// count with the job's.
func JobPlan(cl *state.Cluster, job *state.Job) (*plan.Plan, error) {
	a, err := plan.ParseAction(job.Action)
	if err != nil {
		return nil, err
	}
	sp, err := spec.Parse(cl.SpecFile+" (as applied by job "+job.ID+")", []byte(job.Spec))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: the spec of job %s no longer parses: %w", cl.Name, job.ID, err)
	}
	return apply.PlanStep(cl, apply.Step{Action: a, PlannedNodes: job.PlannedNodes, Services: job.Services,
		OnlyPlannedNodes: job.OnlyPlannedNodes, Resume: job, Spec: sp})
}
