package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Begin records the change as a new job of the cluster (creating the
// cluster when cl is nil), with every step, before anything runs: the
// spec's new nodes join the cluster as "new", the nodes that stay get the
// services the spec gives them, an unfinished job the change replaces is
// marked superseded, and what plan --refresh found is applied. A change
// that resumes a job returns that job. The caller saves the cluster, then
// calls Run.
func Begin(cl *state.Cluster, ch *Change, now time.Time) (*state.Cluster, *state.Job) {
	if j := ch.Resume; j != nil {
		// Resumed: running again from now on (readers of the state
		// must not take its last failure for this run's end).
		j.Options.Rollback = ch.Options.Rollback
		j.Status, j.Message, j.Ended = state.JobRunning, "", time.Time{}
		return cl, j
	}
	if cl == nil {
		cl = &state.Cluster{Name: ch.Cluster, Created: now, Nodes: map[string]*state.Node{}, NextJob: 1, NextNum: 1000}
	}
	if cl.NextJob < 1 {
		cl.NextJob = 1
	}
	id := fmt.Sprintf("%s-%03d", cl.Name, cl.NextJob)
	if j := ch.Supersede; j != nil {
		j.Status, j.SupersededBy, j.Ended = state.JobSuperseded, id, now
		why := "its spec, resources or options changed"
		switch ch.Action {
		case string(plan.Destroy):
			why = "a destroy"
		case string(plan.Start), string(plan.Stop), string(plan.Restart):
			why = "a " + ch.Action + " of services"
		}
		j.Message = fmt.Sprintf("replaced by job %s (%s): what it left undone is in that job's plan", id, why)
	}
	for _, d := range ch.Drift {
		n := cl.Nodes[d.Node]
		if n == nil {
			continue
		}
		switch d.Kind {
		case state.DriftLost:
			n.Lost = d.What
		case state.DriftAddresses:
			n.IPAddresses = d.IPAddresses
		case state.DriftStopped:
			ss := n.ServiceState(d.Service)
			ss.Started, ss.Drift = false, d.What
		}
	}
	for tid, t := range ch.target {
		n := cl.Nodes[tid]
		if n == nil || n.State == state.NodeDeleted {
			cp := *t
			cp.Services = slices.Clone(t.Services)
			cl.Nodes[tid] = &cp
			cl.NextNum = max(cl.NextNum, t.Num+1)
			continue
		}
		n.Services = slices.Clone(t.Services)
	}
	job := &state.Job{ID: id, Action: ch.Action, Reason: ch.Reason, Spec: ch.Spec.Source, SpecFile: ch.Spec.File, Defs: ch.Defs,
		Options: ch.Options, Base: ch.Base, Resources: ch.Resources, Inputs: ch.Inputs, Drift: ch.Drift,
		Status: state.JobRunning, Started: now, Tasks: map[int]*state.Task{}}
	off := 0
	for _, s := range ch.Steps {
		st := *s.State
		st.Offset, st.Tasks, st.Status = off, len(s.Plan.Tasks), "pending"
		off += st.Tasks
		job.Steps = append(job.Steps, &st)
	}
	job.TaskCount = off
	cl.NextJob++
	cl.Jobs = append(cl.Jobs, job)
	cl.Spec, cl.SpecFile = ch.Spec.Source, ch.Spec.File
	recordDefs(cl, ch.Spec)
	return cl, job
}

// recordDefs keeps the definition of every service some node has or is to
// have, so it can be stopped and removed once the spec drops it.
func recordDefs(cl *state.Cluster, sp *spec.Spec) {
	present := map[string]bool{}
	for _, n := range cl.Nodes {
		for _, s := range n.Services {
			present[s] = true
		}
		for s := range n.Svc {
			present[s] = true
		}
	}
	defs := map[string]json.RawMessage{}
	for name := range present {
		if svc := sp.Services[name]; svc != nil {
			if data, err := json.Marshal(svc); err == nil {
				defs[name] = data
			}
		} else if raw, ok := cl.Defs[name]; ok {
			defs[name] = raw
		}
	}
	if len(defs) == 0 {
		defs = nil
	}
	cl.Defs = defs
}

// Run runs a recorded job's steps that are left, in order, each exactly
// as it was planned (a step whose plan no longer rebuilds to its recorded
// digest is refused). It is the one entry point that runs jobs: right
// after Begin, after an apply was cut short, or in another daemon taking
// a job over. Tasks the job records as done are not run again; a run it
// lost track of is sent again with its task id. When a step that creates
// nodes fails and the job asks for a rollback, a rollback step (recorded
// first) destroys what the job created.
//
// It returns when the job completed, failed, or ctx was cancelled; the
// job's and the cluster's Status and the job's Message say which. The
// error is for what stopped it before the job could say (saving the
// state, a job whose spec no longer parses).
func Run(ctx context.Context, cl *state.Cluster, job *state.Job, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if len(job.Steps) == 0 && job.Status != state.JobComplete && job.Action != "" && job.PlannedNodes == nil && job.Spec == "" {
		return fmt.Errorf("job %s has no steps", job.ID)
	}
	save := func() error {
		cl.Updated = o.Now()
		if err := o.Save(cl); err != nil {
			return fmt.Errorf("saving the state of cluster %s: %w", cl.Name, err)
		}
		return nil
	}
	sp, err := JobSpec(job)
	if err != nil {
		job.Status, job.Message, job.Ended = state.JobFailed, err.Error(), o.Now()
		_ = save()
		return err
	}
	job.Status, job.Message = state.JobRunning, ""
	job.Ended = time.Time{}
	cl.Status = state.Pending
	if err := save(); err != nil {
		return err
	}
	o.Logger.Info("job started", "cluster", cl.Name, "job", job.ID, "action", job.Action, "steps", len(job.Steps)-job.Step, "tasks", job.TaskCount)
	failedStep := -1
	rolledBack := false
	// stepEnded tells OnStep of the last step's end, once it is saved.
	var stepEnded func()
	for job.Step < len(job.Steps) {
		k := job.Step
		st := job.Steps[k]
		p, err := StepPlan(cl, sp, st)
		if err != nil {
			job.Message = fmt.Sprintf("step %d (%s): %v", k+1, st.Reason, err)
			st.Status = state.JobFailed
			failedStep = k
			break
		}
		o.Logger.Info("step", "cluster", cl.Name, "job", job.ID, "step", k+1, "of", len(job.Steps), "action", st.Action, "why", st.Reason, "plan", p.Summary())
		if o.OnStep != nil {
			o.OnStep(k, st, p, false)
		}
		ok, err := runStep(ctx, cl, sp, p, job, k, o)
		// The step's end is saved with what follows it (the next step,
		// a rollback step, the job's end), then told to OnStep: one
		// whole save per step fewer, and whoever learns from OnStep that
		// the step ended (the job record's mirror of the steps) finds
		// its end in the state.
		stepEnded = func() {
			if o.OnStep != nil {
				o.OnStep(k, st, p, true)
			}
		}
		saveStepEnd := func() error {
			err := save()
			stepEnded()
			stepEnded = nil
			return err
		}
		if err != nil {
			job.Status, job.Ended = state.JobFailed, o.Now()
			cl.Status = failureStatus(st.Action, cl)
			_ = saveStepEnd()
			return err
		}
		if !ok {
			failedStep = k
			if st.Action == string(plan.Rollback) {
				break
			}
			if rb := rollbackStep(cl, sp, job, k); rb != nil && ctx.Err() == nil {
				rb.Offset, rb.Status = job.TaskCount, "pending"
				job.TaskCount += rb.Tasks
				job.Steps = append(job.Steps, rb)
				job.Step = len(job.Steps) - 1
				job.Message += "; rolling back"
				if err := saveStepEnd(); err != nil {
					return err
				}
				o.Logger.Warn("rolling back", "cluster", cl.Name, "job", job.ID, "why", rb.Reason)
				continue
			}
			break
		}
		finishStep(cl, job, k)
		if st.Action == string(plan.Rollback) {
			rolledBack = true
		}
		job.Step++
		if job.Step == len(job.Steps) {
			break // the job's end below saves this step's end too
		}
		if err := saveStepEnd(); err != nil {
			return err
		}
	}
	job.Ended = o.Now()
	switch {
	case rolledBack:
		job.Status = state.JobRolledBack
		cl.Status = state.Inconsistent
		if len(cl.Nodes) == 0 {
			cl.Status = state.Terminated
		}
	case failedStep >= 0:
		job.Status = state.JobFailed
		if job.Message == "" && ctx.Err() != nil {
			job.Message = "interrupted: " + context.Cause(ctx).Error()
		}
		cl.Status = failureStatus(job.Steps[failedStep].Action, cl)
	default:
		job.Status = state.JobComplete
		job.Message = ""
		cl.Status = state.Active
		if len(cl.Nodes) == 0 {
			cl.Status = state.Terminated
		}
		recordDefs(cl, sp)
	}
	err = save()
	if stepEnded != nil {
		stepEnded()
	}
	if err != nil {
		return err
	}
	level := "job " + job.Status
	if job.Status == state.JobComplete {
		o.Logger.Info(level, "cluster", cl.Name, "job", job.ID, "action", job.Action, "cluster_status", cl.Status)
	} else {
		o.Logger.Error(level, "cluster", cl.Name, "job", job.ID, "action", job.Action, "cluster_status", cl.Status, "message", job.Message)
	}
	return nil
}

// failureStatus is the cluster's status after a step of that kind failed
// (Coopr's: incomplete after a create or delete, inconsistent otherwise).
func failureStatus(action string, cl *state.Cluster) string {
	switch plan.Action(action) {
	case plan.Create, plan.Destroy, plan.Rollback, plan.Delete:
		return state.Incomplete
	}
	return state.Inconsistent
}

// rollbackStep destroys what failed step k created (every node it ran
// CREATE on: a CREATE that failed may have made a machine) when the job
// asks for a rollback; nil otherwise.
func rollbackStep(cl *state.Cluster, sp *spec.Spec, job *state.Job, k int) *state.Step {
	st := job.Steps[k]
	if !job.Options.Rollback || st.Action != string(plan.Create) {
		return nil
	}
	var ids []string
	for _, w := range st.Work {
		if w.Task != "CREATE" {
			continue
		}
		idx, _ := state.DecodeRanges(w.Nodes, len(st.Nodes))
		for _, i := range idx {
			if n := cl.Nodes[st.Nodes[i]]; n != nil && n.State != state.NodeDeleted {
				ids = append(ids, n.ID)
			}
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ch := &Change{Cluster: cl.Name, Resources: job.Resources, Inputs: job.Inputs}
	var b builder
	b.init(cl, sp, ch, PlanOptions{NoRemove: job.Options.NoRemove})
	s := b.destroyStep(ids, plan.Rollback, fmt.Sprintf("roll back failed step %d: destroy the %d node(s) it created", k+1, len(ids)))
	if s == nil {
		return nil
	}
	s.State.Tasks = len(s.Plan.Tasks)
	return s.State
}

// finishStep updates the cluster after step k completed: the nodes it
// deleted (or never had to) leave the cluster, unless a later step of the
// job makes them again; the nodes it brought up are active; services the
// nodes no longer carry and of which nothing is left are forgotten.
func finishStep(cl *state.Cluster, job *state.Job, k int) {
	st := job.Steps[k]
	later := map[string]bool{}
	for _, s := range job.Steps[k+1:] {
		for _, id := range s.Nodes {
			later[id] = true
		}
	}
	destroy := st.Action == string(plan.Destroy) || st.Action == string(plan.Rollback)
	for _, id := range st.Nodes {
		n := cl.Nodes[id]
		if n == nil {
			continue
		}
		if destroy {
			if n.State != state.NodeDeleted && n.CreateRan {
				continue // DELETE did not run (not planned): keep it
			}
			if later[id] {
				// Made again by a later step (a lost node).
				*n = state.Node{ID: n.ID, Group: n.Group, Index: n.Index, Num: n.Num, Hostname: n.Hostname, Flavor: n.Flavor,
					Image: n.Image, SSHUser: n.SSHUser, HardwareType: n.HardwareType, ImageType: n.ImageType,
					Services: n.Services, State: state.NodeNew}
				continue
			}
			delete(cl.Nodes, id)
			continue
		}
		if st.Action == string(plan.Create) || st.Action == string(plan.AddServices) {
			if n.State == state.NodeCreated || n.State == state.NodeNew && n.CreateRan {
				n.State = state.NodeActive
			}
		}
		for name, ss := range n.Svc {
			if !slices.Contains(n.Services, name) && !ss.Started && (!ss.Installed || job.Options.NoRemove) {
				delete(n.Svc, name)
			}
		}
		if len(n.Svc) == 0 {
			n.Svc = nil
		}
	}
}

// migrate fills in what a cluster recorded before jobs had steps lacks:
// its services' states (an active node's services are taken as installed,
// configured and started with the spec it was applied with: "legacy"
// digests compare against that spec) and whether CREATE ran. An
// unfinished job of that time is superseded: planning from the state
// finishes what it left. Only the copy in memory changes; a job that
// begins saves it.
func migrate(cl *state.Cluster) {
	if cl.Nodes == nil {
		cl.Nodes = map[string]*state.Node{}
	}
	for _, j := range cl.Jobs {
		if len(j.Steps) > 0 {
			return // recorded with steps: nothing to fill in
		}
	}
	created := map[string]bool{}
	for _, j := range cl.Jobs {
		for _, t := range j.Tasks {
			if t.Name == "CREATE" && len(t.Runs) > 0 {
				created[t.Node] = true
			}
		}
		if !j.Finished() {
			j.Status = state.JobSuperseded
			j.Message = "recorded by an older loomd: what it left undone is planned anew from the state"
		}
	}
	for _, n := range cl.Nodes {
		n.CreateRan = n.CreateRan || n.State != state.NodeNew || created[n.ID] || n.ProviderID() != ""
		if n.Svc != nil {
			continue
		}
		for _, s := range n.Services {
			ss := n.ServiceState(s)
			switch n.State {
			case state.NodeActive:
				ss.Installed, ss.Started = true, true
				ss.Done = map[string]string{"install": "legacy", "configure": "legacy", "initialize": "legacy", "start": "legacy"}
			case state.NodeCreated:
				// Its services may have run in part: undo them on destroy,
				// run them again on apply.
				ss.Installed, ss.Started = true, true
			}
		}
		if n.State == state.NodeActive {
			n.Bootstrapped = nil
		}
	}
}
