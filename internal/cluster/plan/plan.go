// Package plan turns a cluster spec and a cluster action (create, delete,
// reconfigure, start/stop/restart, scale) into Coopr's task DAG and cuts
// it into stages (reference/coopr-server.md §4).
//
// Every node gets CREATE → CONFIRM → BOOTSTRAP (the hardware tasks, one
// per node), then per service INSTALL → CONFIGURE → INITIALIZE → START for
// the actions the service defines; cross-service edges follow Coopr's four
// rules (START→START, START→INITIALIZE and reversed STOP→STOP on runtime
// dependencies; INSTALL→INSTALL on install dependencies), from the
// dependency's task on every node that carries it. Such "wait for X on
// every node" edges are kept as one barrier group shared by all waiting
// tasks, so a 1,000-node plan stays linear in size instead of holding a
// million edges.
//
// Stages are Coopr's: a task's level is one more than its deepest
// prerequisite, and each level is split so that a stage holds at most one
// task per node. Sorting (by action order, service, node) makes the split
// deterministic, which Coopr's was not.
package plan

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// Action is a cluster action.
type Action string

// The cluster actions. Delete is Coopr's (DELETE every node, nothing
// else); Destroy stops services first, dependents before dependencies.
const (
	Create           Action = "create"
	Delete           Action = "delete"
	Destroy          Action = "destroy"
	AddServices      Action = "add-services"
	Configure        Action = "configure"
	ConfigureRestart Action = "configure-restart"
	Start            Action = "start"
	Stop             Action = "stop"
	Restart          Action = "restart"
)

// Actions lists the cluster actions in the order docs present them.
var Actions = []Action{Create, Delete, Destroy, AddServices, Configure, ConfigureRestart, Start, Stop, Restart}

// order is each cluster action's task names, in order (Coopr's Actions.java,
// plus Destroy).
var order = map[Action][]string{
	Create:           {"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START"},
	Delete:           {"DELETE"},
	Destroy:          {"STOP", "DELETE"},
	AddServices:      {"BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START"},
	Configure:        {"BOOTSTRAP", "CONFIGURE"},
	ConfigureRestart: {"BOOTSTRAP", "STOP", "CONFIGURE", "START"},
	Start:            {"START"},
	Stop:             {"STOP"},
	Restart:          {"STOP", "START"},
}

// actionNames are the task names in lifecycle order; their index sorts
// tasks within a level.
var actionNames = []string{"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE", "DELETE"}

var actionIndex = func() map[string]int {
	m := map[string]int{}
	for i, a := range actionNames {
		m[a] = i
	}
	return m
}()

// hardware reports whether a task name is a node-level task.
func hardware(task string) bool {
	switch task {
	case "CREATE", "CONFIRM", "BOOTSTRAP", "DELETE":
		return true
	}
	return false
}

// installTime reports whether a task name is ordered by install
// dependencies.
func installTime(task string) bool { return task == "INSTALL" || task == "REMOVE" }

// serviceActionOf is the spec's action name of a service task name.
func serviceActionOf(task string) string {
	switch task {
	case "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE":
		return strings.ToLower(task)
	}
	return ""
}

// ParseAction reads a cluster action name.
func ParseAction(s string) (Action, error) {
	for _, a := range Actions {
		if string(a) == s {
			return a, nil
		}
	}
	names := make([]string, len(Actions))
	for i, a := range Actions {
		names[i] = string(a)
	}
	return "", fmt.Errorf("unknown cluster action %q (want one of %s)", s, strings.Join(names, ", "))
}

// Input is what to plan.
type Input struct {
	Spec *spec.Spec
	// Nodes are every node of the cluster (planned or not): cross edges
	// reach services on any node.
	Nodes  []spec.Node
	Action Action
	// PlannedNodes limits the plan to these node ids; nil means all.
	PlannedNodes []string
	// Services limits the plan to these services; nil means all. Start
	// adds the services they depend on at runtime; Stop and Restart add
	// the services that depend on them.
	Services []string
	// OnlyPlannedNodes keeps cross edges inside the planned nodes: a
	// scale-up does not re-start services on the nodes it leaves alone,
	// and a scale-down stops nothing on the nodes that stay.
	OnlyPlannedNodes bool
}

// Task is one task of the plan.
type Task struct {
	// Index is the task's position in Plan.Tasks.
	Index int `json:"index"`
	// Name is Coopr's taskName (CREATE, INSTALL...).
	Name    string `json:"taskName"`
	Node    string `json:"nodeId"`
	Service string `json:"service,omitempty"`
	// Level is 1 + the deepest prerequisite's level; Stage the stage
	// (from 1) after the one-task-per-node split.
	Level int `json:"level"`
	Stage int `json:"stage"`
	// Deps are direct prerequisites (the node's own chain).
	Deps []int `json:"-"`
	// Groups are barrier groups: wait for every member.
	Groups []int `json:"-"`
}

// Plan is a task DAG cut into stages.
type Plan struct {
	Cluster string
	Action  Action
	Tasks   []Task
	// Groups are the barrier groups tasks wait on: each is every task of
	// one action on one service across the nodes carrying it.
	Groups [][]int
	// Levels is the DAG's depth; Stages the tasks of each stage.
	Levels int
	Stages [][]int
	// Edges counts prerequisite edges as Coopr would (a barrier counts
	// one edge per member and waiting task).
	Edges int
	// node order, for sorting and output.
	nodeOrder map[string]int
}

// ErrCycle is returned when the DAG cannot be ordered.
var ErrCycle = errors.New("the task graph has a cycle")

type vkey struct {
	node int32
	act  int8
	svc  int32 // -1 for hardware tasks
}

// Build plans in.
func Build(in Input) (*Plan, error) {
	steps, ok := order[in.Action]
	if !ok {
		return nil, fmt.Errorf("planning: unknown cluster action %q", in.Action)
	}
	s := in.Spec
	p := &Plan{Cluster: s.Name, Action: in.Action, nodeOrder: make(map[string]int, len(in.Nodes))}
	for i, n := range in.Nodes {
		p.nodeOrder[n.ID] = i
	}
	planned := make([]bool, len(in.Nodes))
	if in.PlannedNodes == nil {
		for i := range planned {
			planned[i] = true
		}
	} else {
		for _, id := range in.PlannedNodes {
			i, ok := p.nodeOrder[id]
			if !ok {
				return nil, fmt.Errorf("planning: node %q is not in the cluster", id)
			}
			planned[i] = true
		}
	}
	onCluster := map[string]bool{}
	for _, n := range in.Nodes {
		for _, svc := range n.Services {
			onCluster[svc] = true
		}
	}
	r := newResolver(s, sortedSet(onCluster))

	// Planned services, expanded for the runtime actions (§4.4).
	var plannedSvc map[string]bool
	if in.Services != nil {
		plannedSvc = map[string]bool{}
		for _, n := range in.Services {
			if s.Services[n] == nil {
				return nil, fmt.Errorf("planning: service %q is not defined in %s", n, s.File)
			}
			if !onCluster[n] {
				return nil, fmt.Errorf("planning: service %q is on no node of cluster %s", n, s.Name)
			}
			plannedSvc[n] = true
		}
		switch in.Action {
		case Start:
			r.closure(plannedSvc, false)
		case Stop, Restart:
			r.closure(plannedSvc, true)
		}
	}
	isPlannedSvc := func(n string) bool { return plannedSvc == nil || plannedSvc[n] }

	// Which nodes carry each service, for cross edges.
	carriers := make([][]int32, len(r.services))
	for ni, n := range in.Nodes {
		if in.OnlyPlannedNodes && !planned[ni] {
			continue
		}
		for _, svc := range n.Services {
			si := r.index[svc]
			carriers[si] = append(carriers[si], int32(ni))
		}
	}

	verts := make(map[vkey]int, len(in.Nodes)*8)
	vertex := func(node int32, act int, svc int32) int {
		k := vkey{node, int8(act), svc}
		if i, ok := verts[k]; ok {
			return i
		}
		t := Task{Index: len(p.Tasks), Name: actionNames[act], Node: in.Nodes[node].ID}
		if svc >= 0 {
			t.Service = r.services[svc]
		}
		p.Tasks = append(p.Tasks, t)
		verts[k] = t.Index
		return t.Index
	}
	addDep := func(t, dep int) {
		for _, d := range p.Tasks[t].Deps {
			if d == dep {
				return
			}
		}
		p.Tasks[t].Deps = append(p.Tasks[t].Deps, dep)
	}
	groups := map[[2]int]int{} // (action, service) → group
	group := func(act int, svc int) int {
		k := [2]int{act, svc}
		if g, ok := groups[k]; ok {
			return g
		}
		members := make([]int, 0, len(carriers[svc]))
		for _, ni := range carriers[svc] {
			members = append(members, vertex(ni, act, int32(svc)))
		}
		g := len(p.Groups)
		p.Groups = append(p.Groups, members)
		groups[k] = g
		return g
	}

	for ni, n := range in.Nodes {
		if !planned[ni] {
			continue
		}
		svcs := make([]int32, 0, len(n.Services)+1)
		for _, name := range n.Services {
			if isPlannedSvc(name) {
				svcs = append(svcs, int32(r.index[name]))
			}
		}
		if len(svcs) == 0 {
			svcs = append(svcs, -1) // a node without services still gets its hardware tasks
		}
		for _, svc := range svcs {
			prev := -1
			for _, step := range steps {
				act := actionIndex[step]
				var t int
				switch {
				case hardware(step):
					t = vertex(int32(ni), act, -1)
				case svc >= 0 && r.defines[svc][act]:
					t = vertex(int32(ni), act, svc)
				default:
					continue
				}
				if prev >= 0 {
					addDep(t, prev)
				}
				prev = t
				if svc < 0 || hardware(step) {
					continue
				}
				for _, cd := range r.deps[[2]int{act, int(svc)}] {
					if installTime(step) && !isPlannedSvc(r.services[cd.service]) {
						continue // already installed
					}
					if len(carriers[cd.service]) == 0 {
						continue
					}
					g := group(actionIndex[cd.action], cd.service)
					p.Tasks[t].Groups = append(p.Tasks[t].Groups, g)
				}
			}
		}
	}
	for i := range p.Tasks {
		p.Edges += len(p.Tasks[i].Deps)
		for _, g := range p.Tasks[i].Groups {
			p.Edges += len(p.Groups[g])
		}
	}
	p.addressBarrier()
	if err := p.levelize(); err != nil {
		return nil, err
	}
	p.stage()
	return p, nil
}

// addressBarrier makes every BOOTSTRAP wait for every CONFIRM of the
// plan. Coopr ran stage after stage, so every node had its addresses
// before any service task ran, and config.nodes always carried them; a
// DAG-driven executor keeps that promise only with this barrier. It adds
// no level (all CONFIRMs are one level below the BOOTSTRAPs) and is not
// counted in Edges, which stays Coopr's count.
func (p *Plan) addressBarrier() {
	var confirms, bootstraps []int
	for i, t := range p.Tasks {
		switch t.Name {
		case "CONFIRM":
			confirms = append(confirms, i)
		case "BOOTSTRAP":
			bootstraps = append(bootstraps, i)
		}
	}
	if len(confirms) < 2 || len(bootstraps) == 0 {
		return
	}
	g := len(p.Groups)
	p.Groups = append(p.Groups, confirms)
	for _, b := range bootstraps {
		p.Tasks[b].Groups = append(p.Tasks[b].Groups, g)
	}
}

// levelize sets each task's level (Kahn's algorithm over tasks and
// barrier groups; a group adds no level).
func (p *Plan) levelize() error {
	n, m := len(p.Tasks), len(p.Groups)
	indeg := make([]int32, n+m)
	succ := p.successors()
	for i := range p.Tasks {
		indeg[i] = int32(len(p.Tasks[i].Deps) + len(p.Tasks[i].Groups))
	}
	for g, mem := range p.Groups {
		indeg[n+g] = int32(len(mem))
	}
	level := make([]int32, n+m)
	queue := make([]int32, 0, n+m)
	for i := range indeg {
		if indeg[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	done := 0
	for len(queue) > 0 {
		x := queue[0]
		queue = queue[1:]
		done++
		lx := level[x]
		if int(x) < n {
			lx++ // a task is one level below its prerequisites
			level[x] = lx
		}
		for _, y := range succ[x] {
			if lx > level[y] {
				level[y] = lx
			}
			indeg[y]--
			if indeg[y] == 0 {
				queue = append(queue, y)
			}
		}
	}
	if done != n+m {
		for i := range p.Tasks {
			if indeg[i] > 0 {
				t := p.Tasks[i]
				return fmt.Errorf("%w (at %s of %s on %s): check the services' dependencies", ErrCycle, t.Name, t.Service, t.Node)
			}
		}
		return ErrCycle
	}
	for i := range p.Tasks {
		p.Tasks[i].Level = int(level[i])
		p.Levels = max(p.Levels, int(level[i]))
	}
	return nil
}

// successors returns, for every task and group (groups after the tasks),
// what waits on it.
func (p *Plan) successors() [][]int32 {
	n := len(p.Tasks)
	succ := make([][]int32, n+len(p.Groups))
	for i, t := range p.Tasks {
		for _, d := range t.Deps {
			succ[d] = append(succ[d], int32(i))
		}
		for _, g := range t.Groups {
			succ[n+g] = append(succ[n+g], int32(i))
		}
	}
	for g, mem := range p.Groups {
		for _, t := range mem {
			succ[t] = append(succ[t], int32(n+g))
		}
	}
	return succ
}

// stage cuts the levels into stages of at most one task per node: the
// k-th task of a node within a level (in sorted order) goes to the k-th
// stage of that level, which is what first-fit gives.
func (p *Plan) stage() {
	byLevel := make([][]int, p.Levels+1)
	for i, t := range p.Tasks {
		byLevel[t.Level] = append(byLevel[t.Level], i)
	}
	for _, tasks := range byLevel[1:] {
		sort.Slice(tasks, func(a, b int) bool { return p.less(tasks[a], tasks[b]) })
		seen := map[string]int{}
		base := len(p.Stages)
		for _, ti := range tasks {
			k := seen[p.Tasks[ti].Node]
			seen[p.Tasks[ti].Node] = k + 1
			for len(p.Stages) <= base+k {
				p.Stages = append(p.Stages, nil)
			}
			p.Stages[base+k] = append(p.Stages[base+k], ti)
			p.Tasks[ti].Stage = base + k + 1
		}
	}
}

// less orders tasks by action, service, then node.
func (p *Plan) less(a, b int) bool {
	ta, tb := &p.Tasks[a], &p.Tasks[b]
	if ta.Name != tb.Name {
		return actionIndex[ta.Name] < actionIndex[tb.Name]
	}
	if ta.Service != tb.Service {
		return ta.Service < tb.Service
	}
	return p.nodeOrder[ta.Node] < p.nodeOrder[tb.Node]
}

// Prereqs lists every prerequisite of task i (groups expanded), sorted.
func (p *Plan) Prereqs(i int) []int {
	out := append([]int(nil), p.Tasks[i].Deps...)
	for _, g := range p.Tasks[i].Groups {
		out = append(out, p.Groups[g]...)
	}
	sort.Ints(out)
	return out
}

// Successors returns what waits on each task and group: index i < len(Tasks)
// is task i, index len(Tasks)+g is group g.
func (p *Plan) Successors() [][]int32 { return p.successors() }

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
