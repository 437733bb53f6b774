package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Job kinds (state.Job.Action).
const (
	JobApply   = "apply"
	JobDestroy = "destroy"
)

// PlanOptions say what to plan.
type PlanOptions struct {
	// Destroy plans the cluster's destruction instead of its spec.
	Destroy bool
	// Action, when set (start, stop or restart), plans that service
	// action on Services (nil: every service) on Nodes (nil: every node
	// carrying them) instead of the spec's changes.
	Action   plan.Action
	Services []string
	Nodes    []string
	// NoRestart reconfigures without stopping and starting services.
	NoRestart bool
	// NoRemove skips REMOVE when services go away for good.
	NoRemove bool
	// Force (destroy): abandon what fails for good, and go on.
	Force bool
	// Rollback: a failed create step is followed by a rollback step.
	Rollback bool
}

// Input is what Plan compares.
type Input struct {
	// Cluster is the recorded state; nil for a cluster never applied.
	Cluster *state.Cluster
	// Spec is the spec to apply. For a destroy it may be nil: the
	// definitions recorded with the cluster then stop and remove its
	// services; given, its definitions are used (a fixed stop script
	// reaches the destroy).
	Spec *spec.Spec
	// Resources are the automator types' resource files (nil: unknown;
	// then nothing is re-shipped nor reconfigured for their sake).
	Resources *Resources
	// Drift is what Refresh found.
	Drift   []state.Drift
	Options PlanOptions
}

// Change is a planned job: the steps that bring the cluster to the spec
// (or destroy it, or run a service action), each with its plan. Begin
// records it; Run runs it.
type Change struct {
	Cluster string
	// Base is the fingerprint of the state the change was planned from;
	// Exists whether the cluster had any state.
	Base   string
	Exists bool
	// Action is the job's kind (apply, destroy, start, stop, restart);
	// Reason says why in a few words.
	Action string
	Reason string
	// Spec is what the job plans from: the spec, plus the definitions
	// (Defs) of services it no longer defines that the job stops or
	// removes.
	Spec *spec.Spec
	Defs map[string]json.RawMessage
	// Resume is the unfinished job the change finishes (its steps left);
	// Supersede the unfinished job it replaces (its spec or resources
	// changed since: planned anew from what ran).
	Resume    *state.Job
	Supersede *state.Job
	// Steps are the job's steps left to run, each with its plan.
	Steps []*Step
	// Notes are things the plan leaves alone, and why.
	Notes []string
	// Drift is what Refresh found (the steps act on it).
	Drift     []state.Drift
	Resources map[string]string
	Inputs    map[string]string
	Options   state.JobOptions

	// target is the layout the job brings the cluster to (nil for a
	// destroy, a service action or a resume).
	target map[string]*state.Node
}

// Step is one step of a change: its record and its plan.
type Step struct {
	Index int // in the job
	State *state.Step
	Plan  *plan.Plan
}

// Empty reports whether the change runs nothing.
func (c *Change) Empty() bool {
	for _, s := range c.Steps {
		if len(s.Plan.Tasks) > 0 {
			return false
		}
	}
	return true
}

// Tasks counts the tasks of every step.
func (c *Change) Tasks() int {
	n := 0
	for _, s := range c.Steps {
		n += len(s.Plan.Tasks)
	}
	return n
}

// Plan decides the job that brings the cluster to what in asks: finish
// an unfinished job whose spec and resources did not change since it was
// planned; else, from what every node and service went through (the
// state records it, failed runs included), the steps that close the gap:
//
//  1. destroy the nodes the spec no longer has (STOP what was started,
//     REMOVE what was installed, DELETE what CREATE may have made);
//  2. remove the services the spec no longer puts on nodes that stay
//     (dependents first);
//  3. create the nodes the spec adds, and finish what is missing on the
//     others (a CREATE, a CONFIRM, services not fully installed,
//     configured, initialized or started), new services included;
//  4. reconfigure what changed: CONFIGURE (and INSTALL, when its inputs
//     changed) of each service whose digest changed, with STOP and
//     START of it and of every service that depends on it at runtime;
//     CONFIGURE of services on nodes whose node list changed; START of
//     services that should run and do not.
//
// Changed resources are shipped (BOOTSTRAP) to a node before its first
// service task of a step. A step with nothing to do is left out; no step
// means nothing to do.
func Plan(in Input) (*Change, error) {
	cl := in.Cluster
	if cl != nil {
		migrate(cl)
	}
	o := in.Options
	ch := &Change{Base: state.Fingerprint(cl), Exists: cl != nil, Drift: in.Drift,
		Options: state.JobOptions{Force: o.Force, NoRemove: o.NoRemove, Rollback: o.Rollback, NoRestart: o.NoRestart}}
	switch {
	case in.Spec != nil:
		ch.Cluster = in.Spec.Name
	case cl != nil:
		ch.Cluster = cl.Name
	default:
		return nil, errors.New("planning: no spec and no cluster")
	}
	ch.Action = JobApply
	switch {
	case o.Destroy:
		ch.Action = JobDestroy
	case o.Action != "":
		ch.Action = string(o.Action)
	}
	if cl != nil && (o.Destroy || o.Action != "") && cl.Status == state.Terminated && len(cl.Nodes) == 0 && unfinished(cl) == nil {
		return ch, nil // nothing left to act on
	}
	if o.Destroy && cl == nil {
		return ch, nil
	}
	if o.Action != "" && cl == nil {
		return nil, fmt.Errorf("cluster %s has never been applied: nothing to %s", ch.Cluster, o.Action)
	}

	res := in.Resources
	var sp *spec.Spec
	if in.Spec != nil {
		sp = in.Spec
	} else {
		var err error
		if sp, err = recordedSpec(cl); err != nil {
			return nil, err
		}
	}
	eff, defs, err := effectiveSpec(sp, cl, in.Spec == nil)
	if err != nil {
		return nil, err
	}
	ch.Spec, ch.Defs = eff, defs
	ch.Inputs = actionInputs(eff, res)
	ch.Resources = res.TypeDigests()

	// An unfinished job: finish it when nothing it was planned from
	// changed; else plan anew from what ran, and supersede it.
	if j := unfinished(cl); j != nil {
		sameRes := ch.Resources == nil || maps.Equal(j.Resources, ch.Resources)
		if j.Action == ch.Action && len(j.Steps) > 0 && j.Spec == sp.Source && sameRes &&
			sameStrings(j.Defs, defs) && len(in.Drift) == 0 && sameOptions(j, o) {
			return resume(cl, j, ch)
		}
		ch.Supersede = j
	}

	var b builder
	b.init(cl, eff, ch, o)
	switch {
	case o.Destroy:
		ch.Reason = "destroy"
		if s := b.destroyStep(cl.NodeIDs(), plan.Destroy, "destroy every node"); s != nil {
			ch.Steps = append(ch.Steps, s)
		}
	case o.Action != "":
		if err := b.serviceAction(o); err != nil {
			return nil, err
		}
	default:
		if err := b.apply(); err != nil {
			return nil, err
		}
	}
	if ch.Supersede != nil && ch.Reason != "" {
		ch.Reason += fmt.Sprintf(" (replaces unfinished job %s)", ch.Supersede.ID)
	}
	return ch, b.err
}

// unfinished is the cluster's last job when it did not finish.
func unfinished(cl *state.Cluster) *state.Job {
	if cl == nil {
		return nil
	}
	if j := cl.LastJob(); j != nil && !j.Finished() {
		return j
	}
	return nil
}

func sameOptions(j *state.Job, o PlanOptions) bool {
	return j.Options.Force == o.Force && j.Options.NoRemove == o.NoRemove && j.Options.NoRestart == o.NoRestart
}

func sameStrings(a, b map[string]json.RawMessage) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if string(b[k]) != string(v) {
			return false
		}
	}
	return true
}

// resume is the change that finishes job j: its steps left, replanned
// from their records.
func resume(cl *state.Cluster, j *state.Job, ch *Change) (*Change, error) {
	sp, err := JobSpec(j)
	if err != nil {
		return nil, err
	}
	ch.Resume, ch.Spec, ch.Defs = j, sp, j.Defs
	// How a failure is handled is the resuming run's choice (--on-failure).
	rollback := ch.Options.Rollback
	ch.Action, ch.Reason, ch.Options = j.Action, fmt.Sprintf("resume job %s (%s)", j.ID, j.Status), j.Options
	ch.Options.Rollback = rollback
	ch.Resources, ch.Inputs, ch.Drift = j.Resources, j.Inputs, j.Drift
	for k := j.Step; k < len(j.Steps); k++ {
		p, err := StepPlan(cl, sp, j.Steps[k])
		if err != nil {
			return nil, fmt.Errorf("cluster %s: job %s, step %d: %w", cl.Name, j.ID, k+1, err)
		}
		ch.Steps = append(ch.Steps, &Step{Index: k, State: j.Steps[k], Plan: p})
	}
	return ch, nil
}

// recordedSpec is the spec a cluster was last applied with.
func recordedSpec(cl *state.Cluster) (*spec.Spec, error) {
	if cl.Spec == "" {
		return nil, fmt.Errorf("cluster %s has no recorded spec: give its spec file", cl.Name)
	}
	sp, err := spec.Parse(cl.SpecFile+" (as last applied)", []byte(cl.Spec))
	if err != nil {
		return nil, fmt.Errorf("cluster %s: its recorded spec no longer parses (give its spec file): %w", cl.Name, err)
	}
	return sp, nil
}

// effectiveSpec is sp plus the definitions of services some node still
// has that sp does not define (from the cluster's recorded definitions,
// else its last spec), and those definitions. A service nothing defines
// any more is an error: it cannot be stopped nor removed without its
// actions.
func effectiveSpec(sp *spec.Spec, cl *state.Cluster, recorded bool) (*spec.Spec, map[string]json.RawMessage, error) {
	if cl == nil {
		return sp, nil, nil
	}
	var missing []string
	for _, id := range cl.NodeIDs() {
		for name := range cl.Nodes[id].Svc {
			if sp.Services[name] == nil && !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
		}
	}
	if len(missing) == 0 {
		return sp, nil, nil
	}
	sort.Strings(missing)
	eff := *sp
	eff.Services = maps.Clone(sp.Services)
	defs := map[string]json.RawMessage{}
	var last *spec.Spec
	for _, name := range missing {
		raw, ok := cl.Defs[name]
		var svc spec.Service
		if ok && json.Unmarshal(raw, &svc) == nil {
			eff.Services[name] = &svc
			defs[name] = raw
			continue
		}
		if last == nil && !recorded && cl.Spec != "" {
			last, _ = spec.Parse(cl.SpecFile, []byte(cl.Spec))
		}
		if last != nil && last.Services[name] != nil {
			eff.Services[name] = last.Services[name]
			defs[name], _ = json.Marshal(last.Services[name])
			continue
		}
		return nil, nil, fmt.Errorf("cluster %s: service %s is still on some nodes, but neither the spec nor the cluster's records define it: "+
			"put its definition back in the spec's services (without a node group) so it can be stopped and removed", cl.Name, name)
	}
	return &eff, defs, nil
}

// JobSpec is the spec a recorded job plans from.
func JobSpec(j *state.Job) (*spec.Spec, error) {
	file := j.SpecFile
	if file == "" {
		file = "spec"
	}
	sp, err := spec.Parse(file+" (as job "+j.ID+" planned it)", []byte(j.Spec))
	if err != nil {
		return nil, fmt.Errorf("job %s: its spec no longer parses: %w", j.ID, err)
	}
	if len(j.Defs) == 0 {
		return sp, nil
	}
	eff := *sp
	eff.Services = maps.Clone(sp.Services)
	for name, raw := range j.Defs {
		var svc spec.Service
		if err := json.Unmarshal(raw, &svc); err != nil {
			return nil, fmt.Errorf("job %s: the recorded definition of service %s: %w", j.ID, name, err)
		}
		eff.Services[name] = &svc
	}
	return &eff, nil
}

// StepPlan rebuilds a recorded step's plan and checks it is the plan the
// step was recorded with.
func StepPlan(cl *state.Cluster, sp *spec.Spec, st *state.Step) (*plan.Plan, error) {
	nodes := make([]spec.Node, len(st.Nodes))
	for i, id := range st.Nodes {
		n := cl.Nodes[id]
		if n == nil {
			return nil, fmt.Errorf("node %s of step %q is not in the cluster's state", id, st.Reason)
		}
		nodes[i] = specNode(n)
	}
	work := make([]plan.Work, 0, len(st.Work))
	for _, w := range st.Work {
		idx, err := state.DecodeRanges(w.Nodes, len(st.Nodes))
		if err != nil {
			return nil, fmt.Errorf("step %q: %s %s: %w", st.Reason, w.Task, w.Service, err)
		}
		ids := make([]string, len(idx))
		for i, x := range idx {
			ids[i] = st.Nodes[x]
		}
		work = append(work, plan.Work{Task: w.Task, Service: w.Service, Nodes: ids})
	}
	p, err := plan.Build(plan.Input{Spec: sp, Nodes: nodes, Action: plan.Action(st.Action), Work: work})
	if err != nil {
		return nil, err
	}
	if st.Digest != "" && p.Digest() != st.Digest {
		return nil, fmt.Errorf("step %q no longer plans the tasks it was recorded with (loomd was upgraded, or the state edited): "+
			"run 'loomd plan' to plan the change anew", st.Reason)
	}
	return p, nil
}

func specNode(n *state.Node) spec.Node {
	return spec.Node{ID: n.ID, Group: n.Group, Index: n.Index, Num: n.Num, Hostname: n.Hostname, Flavor: n.Flavor,
		Image: n.Image, SSHUser: n.SSHUser, HardwareType: n.HardwareType, ImageType: n.ImageType, Services: n.Services}
}

// builder accumulates a change's steps.
type builder struct {
	cl   *state.Cluster
	sp   *spec.Spec
	ch   *Change
	o    PlanOptions
	err  error
	live []*state.Node // recorded nodes not deleted
	// target is the layout the spec wants (recorded nodes that stay,
	// with their state; new ones as they will start), by id.
	target map[string]*state.Node
	order  []string // target ids, by nodenum
	// drift, by node and "node/service".
	lost    map[string]string
	stopped map[string]string
	// view holds the nodes as the drift leaves them (planning sees them
	// so; Begin applies the drift to the state).
	view map[string]*state.Node
}

func (b *builder) init(cl *state.Cluster, sp *spec.Spec, ch *Change, o PlanOptions) {
	b.cl, b.sp, b.ch, b.o = cl, sp, ch, o
	b.target = map[string]*state.Node{}
	b.lost, b.stopped = map[string]string{}, map[string]string{}
	moved := map[string]map[string]any{}
	stoppedOn := map[string]bool{}
	for _, d := range ch.Drift {
		switch d.Kind {
		case state.DriftLost:
			b.lost[d.Node] = d.What
		case state.DriftAddresses:
			moved[d.Node] = d.IPAddresses
		case state.DriftStopped:
			b.stopped[d.Node+"/"+d.Service] = d.What
			stoppedOn[d.Node] = true
		}
	}
	if cl != nil {
		for _, id := range cl.NodeIDs() {
			n := cl.Nodes[id]
			if n.State == state.NodeDeleted {
				continue
			}
			if ip := moved[id]; ip != nil || stoppedOn[id] {
				// Plan as the drift leaves the node: Begin applies it.
				cp := *n
				if ip != nil {
					cp.IPAddresses = ip
				}
				cp.Svc = map[string]*state.Service{}
				for name, ss := range n.Svc {
					x := *ss
					if b.stopped[id+"/"+name] != "" {
						x.Started = false
					}
					cp.Svc[name] = &x
				}
				if len(cp.Svc) == 0 {
					cp.Svc = nil
				}
				n = &cp
				if b.view == nil {
					b.view = map[string]*state.Node{}
				}
				b.view[id] = n
			}
			b.live = append(b.live, n)
		}
	}
}

func (b *builder) ids(nodes []*state.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.ID
	}
	return out
}

// layout computes the target layout from the spec.
func (b *builder) layout() {
	num := 1000
	if b.cl != nil && b.cl.NextNum > num {
		num = b.cl.NextNum
	}
	for _, sn := range b.sp.Nodes() {
		var n *state.Node
		if b.cl != nil {
			n = b.cl.Nodes[sn.ID]
			if v := b.view[sn.ID]; v != nil {
				n = v
			}
		}
		if n == nil || n.State == state.NodeDeleted {
			nodeNum := num
			if g := b.sp.Group(sn.Group); g != nil && g.Num > 0 {
				nodeNum = sn.Num // a solved template's node keeps the nodenum in its id
			} else {
				num++
			}
			n = &state.Node{ID: sn.ID, Group: sn.Group, Index: sn.Index, Num: nodeNum, Hostname: sn.Hostname, Flavor: sn.Flavor,
				Image: sn.Image, SSHUser: sn.SSHUser, HardwareType: sn.HardwareType, ImageType: sn.ImageType, State: state.NodeNew}
		} else {
			cp := *n
			n = &cp
		}
		n.Services = sn.Services
		b.target[n.ID] = n
	}
	b.order = slices.Collect(maps.Keys(b.target))
	sort.Slice(b.order, func(i, j int) bool { return b.target[b.order[i]].Num < b.target[b.order[j]].Num })
}

// work collects a step's tasks.
type work struct {
	nodes map[string]bool
	tasks map[[2]string][]string // (task, service) → nodes, in the order added
	seen  map[[3]string]bool     // (task, service, node)
}

func newWork() *work {
	return &work{nodes: map[string]bool{}, tasks: map[[2]string][]string{}, seen: map[[3]string]bool{}}
}

func (w *work) add(task, svc, node string) {
	w.nodes[node] = true
	if k := [3]string{task, svc, node}; !w.seen[k] {
		w.seen[k] = true
		w.tasks[[2]string{task, svc}] = append(w.tasks[[2]string{task, svc}], node)
	}
}

func (w *work) has(task, svc, node string) bool {
	return w.seen[[3]string{task, svc, node}]
}

func (w *work) empty() bool { return len(w.tasks) == 0 && len(w.nodes) == 0 }

// step turns work into a change step.
func (b *builder) step(w *work, action plan.Action, reason string, lookup func(string) *state.Node) *Step {
	if w.empty() {
		return nil
	}
	ids := slices.Collect(maps.Keys(w.nodes))
	sort.Slice(ids, func(i, j int) bool { return lookup(ids[i]).Num < lookup(ids[j]).Num })
	pos := map[string]int{}
	nodes := make([]spec.Node, len(ids))
	for i, id := range ids {
		pos[id] = i
		nodes[i] = specNode(lookup(id))
	}
	var pw []plan.Work
	for k, ns := range w.tasks {
		pw = append(pw, plan.Work{Task: k[0], Service: k[1], Nodes: ns})
	}
	plan.SortWork(pw)
	p, err := plan.Build(plan.Input{Spec: b.sp, Nodes: nodes, Action: action, Work: pw})
	if err != nil {
		b.err = errors.Join(b.err, fmt.Errorf("planning %s of cluster %s: %w", action, b.ch.Cluster, err))
		return nil
	}
	st := &state.Step{Action: string(action), Reason: reason, Nodes: ids, Digest: p.Digest()}
	for _, x := range p.WorkOf() {
		idx := make([]int, len(x.Nodes))
		for i, id := range x.Nodes {
			idx[i] = pos[id]
		}
		sort.Ints(idx)
		st.Work = append(st.Work, state.StepWork{Task: x.Task, Service: x.Service, Nodes: state.EncodeRanges(idx)})
	}
	return &Step{Index: len(b.ch.Steps), State: st, Plan: p}
}

func (b *builder) addStep(s *Step) {
	if s != nil {
		s.Index = len(b.ch.Steps)
		b.ch.Steps = append(b.ch.Steps, s)
	}
}

// stale reports whether the node needs the job's resources shipped
// before its service tasks: BOOTSTRAP never ran there, or shipped other
// resources than the job's, or its services use a type it never shipped.
func (b *builder) stale(n *state.Node, services []string) bool {
	types := b.sp.Automators(services)
	if len(types) == 0 {
		return false
	}
	for _, t := range types {
		have, ok := n.Bootstrapped[t]
		if !ok {
			return true
		}
		if want, known := b.ch.Resources[t]; known && have != want {
			return true
		}
	}
	return false
}

func (b *builder) defines(svc, action string) bool {
	s := b.sp.Services[svc]
	return s != nil && s.Defines(action)
}

// teardown adds what stops and removes the services of n listed in svcs
// (all of its recorded ones when nil): STOP of what was started, REMOVE
// of what was installed (unless --no-remove), after a BOOTSTRAP when its
// resources are stale. Nothing runs on a node without an address.
func (b *builder) teardown(w *work, n *state.Node, svcs []string) {
	if !n.Reachable() {
		return
	}
	if svcs == nil {
		svcs = slices.Sorted(maps.Keys(n.Svc))
	}
	var touched []string
	for _, name := range svcs {
		ss := n.Svc[name]
		if ss == nil {
			continue
		}
		if ss.Started && b.defines(name, "stop") {
			w.add("STOP", name, n.ID)
			touched = append(touched, name)
		}
		if ss.Installed && !b.o.NoRemove && b.defines(name, "remove") {
			w.add("REMOVE", name, n.ID)
			touched = append(touched, name)
		}
	}
	if len(touched) > 0 && b.stale(n, touched) {
		w.add("BOOTSTRAP", "", n.ID)
	}
}

// destroyStep stops, removes and deletes nodes.
func (b *builder) destroyStep(ids []string, action plan.Action, reason string) *Step {
	w := newWork()
	for _, id := range ids {
		n := b.cl.Nodes[id]
		w.nodes[id] = true // a node never created (or deleted) is dropped from the state
		if n.State == state.NodeDeleted {
			continue
		}
		if b.lost[id] == "" {
			b.teardown(w, n, nil)
		}
		if n.CreateRan || n.State != state.NodeNew || n.ProviderID() != "" {
			w.add("DELETE", "", id)
		}
	}
	return b.step(w, action, reason, b.node)
}

// node is a node as the job will see it: its target layout (the services
// the spec puts on it) when the spec keeps it, else its recorded state.
func (b *builder) node(id string) *state.Node {
	if n := b.target[id]; n != nil {
		return n
	}
	if n := b.view[id]; n != nil {
		return n
	}
	return b.cl.Nodes[id]
}

// apply plans the steps that bring the cluster to the spec.
func (b *builder) apply() error {
	b.layout()
	var removed []string
	for _, n := range b.live {
		if b.target[n.ID] == nil || b.lost[n.ID] != "" {
			removed = append(removed, n.ID)
		}
	}
	if b.cl != nil {
		// Nodes deleted for good (a CREATE that failed, then its DELETE)
		// leave the state with the destroy step, if there is one.
		for _, id := range b.cl.NodeIDs() {
			if n := b.cl.Nodes[id]; n.State == state.NodeDeleted && b.target[id] == nil && len(removed) > 0 {
				removed = append(removed, id)
			}
		}
	}
	var parts []string

	// 1. Destroy the nodes that go (and lost ones, to make them again).
	if len(removed) > 0 {
		reason := fmt.Sprintf("scale down: destroy %d node(s)", len(removed))
		if len(b.lost) > 0 {
			reason = fmt.Sprintf("destroy %d node(s) the spec dropped or the provider lost", len(removed))
		}
		b.addStep(b.destroyStep(removed, plan.Destroy, reason))
		parts = append(parts, reason)
	}

	// 2. Remove the services the spec no longer puts on nodes that stay.
	w := newWork()
	gone := map[string]bool{}
	for _, id := range b.order {
		n := b.target[id]
		if n.State == state.NodeNew || b.lost[id] != "" {
			continue
		}
		var drop []string
		for name := range n.Svc {
			if !slices.Contains(n.Services, name) {
				drop = append(drop, name)
				gone[name] = true
			}
		}
		sort.Strings(drop)
		if len(drop) > 0 {
			b.teardown(w, b.cl.Nodes[id], drop)
		}
	}
	if !w.empty() {
		reason := "remove services " + strings.Join(slices.Sorted(maps.Keys(gone)), ", ")
		b.addStep(b.step(w, plan.RemoveServices, reason, b.node))
		parts = append(parts, reason)
	}

	// 3. Create new nodes; finish what is missing (new services too).
	w = newWork()
	var created, completed []string
	added := map[string]bool{}
	started := map[string]bool{}
	unfinished := false
	for _, id := range b.order {
		n := b.target[id]
		lost := b.lost[id] != ""
		fresh := n.State == state.NodeNew || lost
		if fresh {
			created = append(created, id)
			w.add("CREATE", "", id)
			w.add("CONFIRM", "", id)
		} else if !n.Reachable() {
			w.add("CONFIRM", "", id)
			completed = append(completed, id)
		}
		var todo []string
		for _, name := range n.Services {
			var ss *state.Service
			if !fresh {
				ss = n.Svc[name]
			}
			if ss == nil {
				added[name] = added[name] || !fresh
			}
			if ss != nil && ss.Held {
				continue
			}
			need := b.missing(name, ss)
			if len(need) > 0 && !fresh {
				unfinished = true
			}
			if len(need) == 0 && ss != nil && !ss.Started && b.defines(name, "start") {
				// Installed and configured, not running (stopped, or its
				// check failed): started here, so what depends on it at
				// runtime, if new, starts after it.
				need = []string{"START"}
				started[name] = true
			}
			for _, t := range need {
				w.add(t, name, id)
			}
			if len(need) > 0 {
				todo = append(todo, name)
			}
		}
		if len(todo) > 0 && (fresh || b.stale(n, n.Services) || w.has("CONFIRM", "", id)) {
			w.add("BOOTSTRAP", "", id)
		}
		if !fresh && len(todo) > 0 && !slices.Contains(completed, id) {
			completed = append(completed, id)
		}
	}
	if !w.empty() {
		var what []string
		if len(created) > 0 {
			what = append(what, fmt.Sprintf("create %d node(s)", len(created)))
		}
		if len(added) > 0 {
			var names []string
			for n, on := range added {
				if on {
					names = append(names, n)
				}
			}
			if len(names) > 0 {
				sort.Strings(names)
				what = append(what, "add services "+strings.Join(names, ", "))
			}
		}
		if len(completed) > 0 && len(what) == 0 {
			if len(started) > 0 && !unfinished {
				what = append(what, "start "+strings.Join(slices.Sorted(maps.Keys(started)), ", ")+", which should run")
			} else {
				what = append(what, fmt.Sprintf("finish %d node(s) a job left incomplete", len(completed)))
			}
		}
		action := plan.Create
		if len(created) == 0 {
			action = plan.AddServices
		}
		reason := strings.Join(what, ", ")
		if len(b.live) == 0 {
			reason = "new cluster"
		}
		b.addStep(b.step(w, action, reason, b.node))
		parts = append(parts, reason)
	}
	createStep := w

	// 4. Reconfigure what changed on the nodes that stay.
	if r := b.reconfigure(createStep); r != nil {
		b.addStep(r)
		parts = append(parts, r.State.Reason)
	}
	b.ch.Reason = strings.Join(parts, "; ")
	b.ch.target = b.target
	return nil
}

// missing lists the tasks a service lacks to be up on a node, given what
// it went through (nil: nothing yet): what never succeeded of INSTALL,
// CONFIGURE, INITIALIZE, and START unless it runs.
func (b *builder) missing(svc string, ss *state.Service) []string {
	done := func(a string) bool { return ss != nil && ss.Done[a] != "" }
	var out []string
	if b.defines(svc, "install") && !done("install") {
		out = append(out, "INSTALL")
	}
	if b.defines(svc, "configure") && !done("configure") {
		out = append(out, "CONFIGURE")
	}
	if b.defines(svc, "initialize") && !done("initialize") {
		out = append(out, "INITIALIZE")
	}
	if len(out) > 0 || ss == nil {
		if b.defines(svc, "start") {
			out = append(out, "START")
		}
	} else if b.defines(svc, "start") && !done("start") {
		out = append(out, "START") // its START failed
	}
	return out
}

// reconfigure plans step 4 over the nodes that stay (those the create
// step does not bring up from nothing).
func (b *builder) reconfigure(created *work) *Step {
	var nodes []*state.Node
	for _, id := range b.order {
		if n := b.target[id]; n.State != state.NodeNew && b.lost[id] == "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	var all []*state.Node
	for _, id := range b.order {
		all = append(all, b.target[id])
	}
	d := newDigester(b.sp, b.ch.Inputs, all)
	var legacy *digester
	w := newWork()
	roots := map[string][]string{} // service → nodes whose change restarts it
	var configured, started, reinstalled []string
	restart := func(svc string, n *state.Node, ss *state.Service) {
		if !b.o.NoRestart && ss.Started && b.defines(svc, "stop") {
			w.add("STOP", svc, n.ID)
		}
		if !b.o.NoRestart && b.defines(svc, "start") && !ss.Held {
			w.add("START", svc, n.ID)
		}
	}
	for _, n := range nodes {
		for _, svc := range n.Services {
			ss := n.Svc[svc]
			if ss == nil || created.has("INSTALL", svc, n.ID) || created.has("CONFIGURE", svc, n.ID) || created.has("START", svc, n.ID) {
				continue // new, or finished by the create step
			}
			if len(b.missing(svc, ss)) > 0 && !ss.Held {
				continue
			}
			changed := func(a string) bool {
				if !b.defines(svc, a) {
					return false
				}
				have := ss.Done[a]
				if have == "legacy" {
					if legacy == nil {
						legacy = b.legacyDigester(all)
					}
					if legacy == nil {
						return false
					}
					have = legacy.action(svc, a, n.ID)
				}
				want := d.action(svc, a, n.ID)
				if want == "" || have != want {
					return true
				}
				// Its resource files, when both this plan and the run
				// that recorded them could read them.
				res, rec := b.ch.Inputs[svc+"/"+a], ss.Res[a]
				return res != "" && rec != "" && res != rec
			}
			switch {
			case changed("install"):
				restart(svc, n, ss)
				w.add("INSTALL", svc, n.ID)
				if b.defines(svc, "configure") {
					w.add("CONFIGURE", svc, n.ID)
				}
				roots[svc] = append(roots[svc], n.ID)
				reinstalled = append(reinstalled, svc+"@"+n.ID)
			case changed("configure") || changed("start"):
				if b.defines(svc, "configure") {
					w.add("CONFIGURE", svc, n.ID)
				}
				restart(svc, n, ss)
				roots[svc] = append(roots[svc], n.ID)
				configured = append(configured, svc+"@"+n.ID)
			case b.defines(svc, "configure") && ss.Topology != "" && ss.Topology != d.topo:
				w.add("CONFIGURE", svc, n.ID)
				configured = append(configured, svc+"@"+n.ID)
			}
			if ss.Held && !w.has("START", svc, n.ID) {
				b.ch.Notes = append(b.ch.Notes, fmt.Sprintf("%s on %s was stopped by a stop action: left stopped ('loomd apply --action start --service %s' starts it)", svc, n.ID, svc))
			}
		}
	}
	// Services that depend at runtime on a restarted one restart too
	// (Coopr's rule), wherever they run.
	if !b.o.NoRestart && len(roots) > 0 {
		deps := plan.Closure(b.sp, slices.Collect(maps.Keys(roots)), true)
		for _, svc := range deps {
			if _, root := roots[svc]; root {
				continue
			}
			for _, n := range nodes {
				ss := n.Svc[svc]
				if ss == nil || !slices.Contains(n.Services, svc) || !ss.Started {
					continue
				}
				restart(svc, n, ss)
			}
		}
	}
	if w.empty() {
		return nil
	}
	for id := range w.nodes {
		n := b.target[id]
		var svcs []string
		for k, ns := range w.tasks {
			if k[1] != "" && slices.Contains(ns, id) {
				svcs = append(svcs, k[1])
			}
		}
		if b.stale(n, svcs) {
			w.add("BOOTSTRAP", "", id)
		}
	}
	var what []string
	if len(roots) > 0 {
		what = append(what, "reconfigure "+strings.Join(slices.Sorted(maps.Keys(roots)), ", "))
	}
	if len(reinstalled) == 0 && len(roots) == 0 && len(configured) > 0 {
		what = append(what, "the node list changed: reconfigure the nodes that stay")
	}
	if len(started) > 0 {
		what = append(what, fmt.Sprintf("start %d service(s) that should run", len(started)))
	}
	if len(what) == 0 {
		what = append(what, "reconfigure")
	}
	return b.step(w, plan.Reconfigure, strings.Join(what, "; "), b.node)
}

// legacyDigester computes digests under the spec the cluster was last
// applied with, for services recorded before digests existed: their
// inputs changed if today's digest differs from that spec's.
func (b *builder) legacyDigester(all []*state.Node) *digester {
	if b.cl == nil || b.cl.Spec == "" {
		return nil
	}
	old, err := spec.Parse(b.cl.SpecFile, []byte(b.cl.Spec))
	if err != nil {
		return nil
	}
	return newDigester(old, b.ch.Inputs, all)
}

// serviceAction plans start, stop or restart of services.
func (b *builder) serviceAction(o PlanOptions) error {
	requested := o.Services
	onCluster := map[string]bool{}
	for _, n := range b.live {
		for name := range n.Svc {
			onCluster[name] = true
		}
	}
	for _, s := range requested {
		if b.sp.Services[s] == nil {
			return fmt.Errorf("--service %s: the spec defines no such service%s", s, didYouMean(s, slices.Collect(maps.Keys(b.sp.Services))))
		}
		if !onCluster[s] {
			return fmt.Errorf("--service %s: no node of cluster %s has it", s, b.cl.Name)
		}
	}
	for _, id := range o.Nodes {
		if n := b.cl.Nodes[id]; n == nil || n.State == state.NodeDeleted {
			return fmt.Errorf("--node %s: cluster %s has no such node%s", id, b.cl.Name, didYouMean(id, b.ids(b.live)))
		}
	}
	if requested == nil {
		requested = slices.Sorted(maps.Keys(onCluster))
	}
	asked := func(n *state.Node) bool { return o.Nodes == nil || slices.Contains(o.Nodes, n.ID) }
	w := newWork()
	var notes []string
	switch o.Action {
	case plan.Start:
		// What they depend on at runtime starts too, where it is not
		// running; the services asked for, only on the nodes asked for
		// (another node's stopped one stays stopped).
		all := plan.Closure(b.sp, requested, false)
		for _, n := range b.live {
			for _, svc := range all {
				ss := n.Svc[svc]
				if ss == nil || !b.defines(svc, "start") || !n.Reachable() {
					continue
				}
				if slices.Contains(requested, svc) && asked(n) || !slices.Contains(requested, svc) && !ss.Started {
					w.add("START", svc, n.ID)
				}
			}
		}
	case plan.Stop, plan.Restart:
		// What depends on them at runtime stops (restarts) too,
		// wherever it runs.
		all := plan.Closure(b.sp, requested, true)
		for _, n := range b.live {
			for _, svc := range all {
				ss := n.Svc[svc]
				if ss == nil || !n.Reachable() {
					continue
				}
				if slices.Contains(requested, svc) && !asked(n) {
					continue
				}
				if ss.Started && b.defines(svc, "stop") {
					w.add("STOP", svc, n.ID)
				}
				if o.Action == plan.Restart && b.defines(svc, "start") && (ss.Started || slices.Contains(requested, svc)) {
					w.add("START", svc, n.ID)
				}
				if o.Action == plan.Stop && !ss.Started {
					notes = append(notes, fmt.Sprintf("%s on %s is not running: nothing to stop", svc, n.ID))
				}
			}
		}
	default:
		return fmt.Errorf("unknown service action %q (want start, stop or restart)", o.Action)
	}
	b.ch.Notes = append(b.ch.Notes, notes...)
	what := "every service"
	if o.Services != nil {
		what = strings.Join(o.Services, ", ")
	}
	if o.Nodes != nil {
		what += " on " + strings.Join(o.Nodes, ", ")
	}
	b.ch.Reason = fmt.Sprintf("%s %s", o.Action, what)
	b.addStep(b.step(w, o.Action, b.ch.Reason, b.node))
	return nil
}

func didYouMean(s string, known []string) string { return spec.Suggest(s, known) }

// JobPlans rebuilds the plan of every step of a recorded job (for a view
// attached after it started). A step whose nodes are gone (a destroy that
// finished) may no longer rebuild: its plan is nil, and the job's task
// records say what ran.
func JobPlans(cl *state.Cluster, job *state.Job) ([]*plan.Plan, error) {
	sp, err := JobSpec(job)
	if err != nil {
		return nil, err
	}
	out := make([]*plan.Plan, len(job.Steps))
	for k, st := range job.Steps {
		if p, err := StepPlan(cl, sp, st); err == nil {
			out[k] = p
		}
	}
	return out, nil
}
