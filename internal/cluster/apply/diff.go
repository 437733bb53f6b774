package apply

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Step is one job an apply runs.
type Step struct {
	Action           plan.Action
	PlannedNodes     []string // nil: every node
	Services         []string // nil: every service
	OnlyPlannedNodes bool
	// Reason says why, for the plan's header.
	Reason string
	// Resume is the unfinished job this step resumes (nil: a new job).
	Resume *state.Job
	// Spec is the spec the step plans from (a resumed job's own).
	Spec *spec.Spec
}

// DiffOptions tune Diff.
type DiffOptions struct {
	// NoRestart reconfigures without stopping and starting services.
	NoRestart bool
}

// Diff compares the cluster (nil: none yet) with the spec and returns the
// jobs that bring the cluster to it, in order: resume an unfinished job;
// destroy the nodes the spec no longer has; create the new ones; add
// services the spec added to node groups; reconfigure (with restart,
// unless NoRestart) when the config, the provider or a service definition
// changed, else a plain configure of the old nodes after a scale so they
// see the new node list. No step means nothing to do.
func Diff(cl *state.Cluster, sp *spec.Spec, o DiffOptions) ([]Step, error) {
	if cl == nil || len(cl.Nodes) == 0 && (cl.LastJob() == nil || cl.LastJob().Status == state.JobComplete) {
		return []Step{{Action: plan.Create, Reason: "new cluster", Spec: sp}}, nil
	}
	var steps []Step
	if j := cl.LastJob(); j != nil && j.Status != state.JobComplete {
		old, err := spec.Parse(cl.SpecFile+" (as applied by job "+j.ID+")", []byte(j.Spec))
		if err != nil {
			return nil, fmt.Errorf("cluster %s: the spec of unfinished job %s no longer parses: %w", cl.Name, j.ID, err)
		}
		a, err := plan.ParseAction(j.Action)
		if err != nil {
			return nil, fmt.Errorf("cluster %s: job %s: %w", cl.Name, j.ID, err)
		}
		steps = append(steps, Step{Action: a, PlannedNodes: j.PlannedNodes, Services: j.Services, OnlyPlannedNodes: j.OnlyPlannedNodes,
			Reason: fmt.Sprintf("resume job %s (%s)", j.ID, j.Status), Resume: j, Spec: old})
		if a == plan.Create && len(cl.Nodes) == countNew(cl) {
			// A first create cut short: finishing it is the whole diff
			// when the spec did not change meanwhile.
			if j.Spec == specText(sp) {
				return steps, nil
			}
		}
	}

	want := map[string]spec.Node{}
	for _, n := range sp.Nodes() {
		want[n.ID] = n
	}
	var removed, added, kept []string
	for _, id := range cl.NodeIDs() {
		if _, ok := want[id]; ok {
			kept = append(kept, id)
		} else {
			removed = append(removed, id)
		}
	}
	for _, n := range sp.Nodes() {
		if cl.Nodes[n.ID] == nil {
			added = append(added, n.ID)
		}
	}
	// Services added to (or removed from) the nodes that stay.
	addSvc := map[string]bool{}
	var changedNodes []string
	for _, id := range kept {
		have, wantSvc := cl.Nodes[id].Services, want[id].Services
		var plus []string
		for _, s := range wantSvc {
			if !slices.Contains(have, s) {
				plus = append(plus, s)
			}
		}
		for _, s := range have {
			if !slices.Contains(wantSvc, s) {
				return nil, fmt.Errorf("node group %s no longer lists service %s on node %s: removing a service from running nodes is not supported "+
					"(Coopr had no such action); put the group's count to 0 and add a new group with the services you want, or destroy the cluster",
					want[id].Group, s, id)
			}
		}
		if len(plus) > 0 {
			changedNodes = append(changedNodes, id)
			for _, s := range plus {
				addSvc[s] = true
			}
		}
	}
	if len(removed) > 0 {
		steps = append(steps, Step{Action: plan.Destroy, PlannedNodes: removed, OnlyPlannedNodes: true, Spec: sp,
			Reason: fmt.Sprintf("scale down: remove %d node(s)", len(removed))})
	}
	if len(added) > 0 {
		steps = append(steps, Step{Action: plan.Create, PlannedNodes: added, OnlyPlannedNodes: true, Spec: sp,
			Reason: fmt.Sprintf("scale up: add %d node(s)", len(added))})
	}
	if len(changedNodes) > 0 {
		steps = append(steps, Step{Action: plan.AddServices, PlannedNodes: changedNodes, Services: sortedKeys(addSvc), Spec: sp,
			Reason: fmt.Sprintf("add services %s", strings.Join(sortedKeys(addSvc), ", "))})
	}
	if len(kept) > 0 {
		old, err := spec.Parse(cl.SpecFile+" (as last applied)", []byte(cl.Spec))
		changed := err != nil || fingerprint(old) != fingerprint(sp)
		switch {
		// Every node, new ones included: a restart must see the whole
		// cluster's services to order STOP and START across nodes.
		case changed && o.NoRestart:
			steps = append(steps, Step{Action: plan.Configure, Spec: sp, Reason: "the config or service definitions changed"})
		case changed:
			steps = append(steps, Step{Action: plan.ConfigureRestart, Spec: sp, Reason: "the config or service definitions changed"})
		case len(added) > 0 || len(removed) > 0:
			steps = append(steps, Step{Action: plan.Configure, PlannedNodes: kept, OnlyPlannedNodes: true, Spec: sp,
				Reason: "the node list changed: reconfigure the nodes that stay"})
		}
	}
	return steps, nil
}

func countNew(cl *state.Cluster) int {
	n := 0
	for _, node := range cl.Nodes {
		if node.State != state.NodeActive {
			n++
		}
	}
	return n
}

// fingerprint is what, when it changes, calls for a reconfigure: the
// cluster config, the provider, and every service definition.
func fingerprint(s *spec.Spec) string {
	type svc struct {
		Provides, Conflicts []string
		Install, Runtime    spec.Deps
		Actions             map[string]spec.Action
	}
	services := map[string]svc{}
	for name, d := range s.Services {
		services[name] = svc{d.Provides, d.Conflicts, d.Install, d.Runtime, d.Actions}
	}
	data, _ := json.Marshal(struct {
		Config   map[string]any
		Provider spec.Provider
		Services map[string]svc
	}{s.Config, spec.Provider{Name: s.Provider.Name, Type: s.Provider.Type, Fields: s.Provider.Fields}, services})
	return string(data)
}

// specText is the spec's source, as kept in the state.
func specText(s *spec.Spec) string { return s.Source }

// Nodes returns the nodes a step plans over: the cluster's, plus the
// spec's new ones (which the step may create).
func Nodes(cl *state.Cluster, sp *spec.Spec) []spec.Node {
	var out []spec.Node
	if cl != nil {
		for _, id := range cl.NodeIDs() {
			n := cl.Nodes[id]
			out = append(out, spec.Node{ID: n.ID, Group: n.Group, Index: n.Index, Num: n.Num, Hostname: n.Hostname,
				Flavor: n.Flavor, Image: n.Image, SSHUser: n.SSHUser, HardwareType: n.HardwareType, ImageType: n.ImageType,
				Services: n.Services})
		}
	}
	num := 1000
	if cl != nil && cl.NextNum > num {
		num = cl.NextNum
	}
	for _, n := range sp.Nodes() {
		if cl != nil && cl.Nodes[n.ID] != nil {
			continue
		}
		if g := sp.Group(n.Group); g == nil || g.Num == 0 {
			// A solved template's node keeps the nodenum in its id.
			n.Num = num
			num++
		}
		out = append(out, n)
	}
	return out
}

// PlanStep builds a step's plan.
func PlanStep(cl *state.Cluster, st Step) (*plan.Plan, error) {
	nodes := Nodes(cl, st.Spec)
	if st.Resume != nil && cl != nil {
		// A resumed job runs on the nodes it started with.
		kept := nodes[:0]
		for _, n := range nodes {
			if cl.Nodes[n.ID] != nil {
				kept = append(kept, n)
			}
		}
		nodes = kept
	}
	if st.Action == plan.AddServices || st.Action == plan.Create {
		// The nodes carry the spec's services for these steps.
		for i := range nodes {
			if g := st.Spec.Group(nodes[i].Group); g != nil {
				nodes[i].Services = append([]string(nil), g.Services...)
			}
		}
	}
	return plan.Build(plan.Input{Spec: st.Spec, Nodes: nodes, Action: st.Action, PlannedNodes: st.PlannedNodes,
		Services: st.Services, OnlyPlannedNodes: st.OnlyPlannedNodes})
}

// Begin records a new job for the step in the cluster (creating the
// cluster when cl is nil), adding the spec's new nodes, and returns both.
func Begin(cl *state.Cluster, st Step, now time.Time) (*state.Cluster, *state.Job) {
	sp := st.Spec
	if cl == nil {
		cl = &state.Cluster{Name: sp.Name, Created: now, Nodes: map[string]*state.Node{}, NextJob: 1, NextNum: 1000}
	}
	if st.Resume != nil {
		return cl, st.Resume
	}
	for _, n := range Nodes(cl, sp) {
		cur := cl.Nodes[n.ID]
		if cur == nil {
			if st.Action != plan.Create {
				continue
			}
			cl.Nodes[n.ID] = &state.Node{ID: n.ID, Group: n.Group, Index: n.Index, Num: n.Num, Hostname: n.Hostname,
				Flavor: n.Flavor, Image: n.Image, SSHUser: n.SSHUser, HardwareType: n.HardwareType, ImageType: n.ImageType,
				Services: n.Services, State: state.NodeNew}
			cl.NextNum = max(cl.NextNum, n.Num+1)
			continue
		}
		if st.Action == plan.AddServices && slices.Contains(st.PlannedNodes, n.ID) {
			if g := sp.Group(n.Group); g != nil {
				cur.Services = append([]string(nil), g.Services...)
			}
		}
	}
	if cl.NextJob < 1 {
		cl.NextJob = 1
	}
	job := &state.Job{ID: fmt.Sprintf("%s-%03d", cl.Name, cl.NextJob), Action: string(st.Action), PlannedNodes: st.PlannedNodes,
		Services: st.Services, OnlyPlannedNodes: st.OnlyPlannedNodes, Spec: specText(sp), Status: state.JobRunning,
		Started: now, Tasks: map[int]*state.Task{}}
	cl.NextJob++
	cl.Jobs = append(cl.Jobs, job)
	cl.Spec, cl.SpecFile = specText(sp), sp.File
	return cl, job
}

// Rollback is the step that undoes a failed create: destroy (stop what
// started, then DELETE) every node of the job that may hold a machine,
// that is every node whose CREATE ran. Nil when there is nothing to undo.
func Rollback(cl *state.Cluster, job *state.Job, sp *spec.Spec) *Step {
	if job.Action != string(plan.Create) || job.Status != state.JobFailed {
		return nil
	}
	planned := job.PlannedNodes
	if planned == nil {
		planned = cl.NodeIDs()
	}
	var nodes []string
	for _, id := range planned {
		n := cl.Nodes[id]
		if n != nil && (n.State != state.NodeNew || n.ProviderID() != "") {
			nodes = append(nodes, id)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	return &Step{Action: plan.Destroy, PlannedNodes: nodes, OnlyPlannedNodes: true, Spec: sp,
		Reason: fmt.Sprintf("roll back failed job %s: destroy %d node(s)", job.ID, len(nodes))}
}

// DestroySteps is what `loomd destroy` runs: one destroy of every node,
// planned from the spec the cluster was last applied with, or the resume
// of a destroy that did not finish. None when the cluster has no nodes.
func DestroySteps(cl *state.Cluster) ([]Step, error) {
	if cl == nil || len(cl.Nodes) == 0 {
		return nil, nil
	}
	sp, err := spec.Parse(cl.SpecFile+" (as last applied)", []byte(cl.Spec))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: its saved spec no longer parses: %w", cl.Name, err)
	}
	step := Step{Action: plan.Destroy, Spec: sp, Reason: "destroy"}
	if j := cl.LastJob(); j != nil && j.Status != state.JobComplete && j.Action == string(plan.Destroy) && j.PlannedNodes == nil {
		step.Resume = j
		step.Reason = "resume job " + j.ID
	}
	return []Step{step}, nil
}
