// Package plan turns the tasks one step of a cluster job runs (which task
// names, of which services, on which nodes) into Coopr's task DAG, cut
// into stages (reference/coopr-server.md §4).
//
// What runs is decided before: by the change planner (internal/cluster/
// apply), which compares the cluster's recorded state with its spec, or
// by CooprWork for one of Coopr's cluster actions. This package only
// orders it. On each node, the node tasks CREATE → CONFIRM → BOOTSTRAP
// come first, then each service's tasks in the order STOP → REMOVE →
// INSTALL → CONFIGURE → INITIALIZE → START, then DELETE. Across services,
// Coopr's rules order the tasks present: START waits for START and
// INITIALIZE for START of the runtime dependencies, STOP of a dependency
// waits for STOP of its dependents, INSTALL waits for INSTALL of the
// install dependencies, and (Loom's addition, the reverse of INSTALL's)
// REMOVE of a dependency waits for REMOVE of its dependents, from the
// dependency's task on every node that has it. Such "wait for X on every
// node" edges are kept as one barrier group shared by all waiting tasks,
// so a 1,000-node plan stays linear in size instead of holding a million
// edges. A dependency with no task of the rule's action in the plan (it is
// running, or installed, already) passes the wait on to its own
// dependencies.
//
// Stages are Coopr's: a task's level is one more than its deepest
// prerequisite, and each level is split so that a stage holds at most one
// task per node. Sorting (by action order, service, node) makes the split
// deterministic, which Coopr's was not.
package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// Action names what a step of a job does; it labels the plan (the tasks
// come from its Work).
type Action string

// The step kinds the change planner produces, and Coopr's cluster actions
// (Delete, Configure, ConfigureRestart), which CooprWork expands.
const (
	// Create makes nodes and brings up their services (and finishes the
	// creation of nodes a failed job left incomplete).
	Create Action = "create"
	// AddServices installs, configures and starts services new to nodes.
	AddServices Action = "add-services"
	// Reconfigure re-runs what changed: CONFIGURE (and INSTALL) of the
	// services whose inputs changed, STOP/START of those and of what
	// depends on them at runtime.
	Reconfigure Action = "reconfigure"
	// RemoveServices stops and removes services the spec dropped.
	RemoveServices Action = "remove-services"
	// Destroy stops what runs, removes what is installed, deletes nodes.
	Destroy Action = "destroy"
	// Rollback destroys what a failed create made.
	Rollback Action = "rollback"
	// Start, Stop and Restart are service actions.
	Start   Action = "start"
	Stop    Action = "stop"
	Restart Action = "restart"
	// Delete, Configure and ConfigureRestart are Coopr's CLUSTER_DELETE,
	// CLUSTER_CONFIGURE and CLUSTER_CONFIGURE_WITH_RESTART (CooprWork).
	Delete           Action = "delete"
	Configure        Action = "configure"
	ConfigureRestart Action = "configure-restart"
)

// ServiceActions are the service actions an operator may run by hand
// (loomd apply --action).
var ServiceActions = []Action{Start, Stop, Restart}

// ParseServiceAction reads start, stop or restart.
func ParseServiceAction(s string) (Action, error) {
	for _, a := range ServiceActions {
		if string(a) == s {
			return a, nil
		}
	}
	return "", fmt.Errorf("unknown service action %q (want start, stop or restart)", s)
}

// actionNames are the task names in lifecycle order; their index sorts
// tasks within a level.
var actionNames = []string{"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE", "DELETE"}

// TaskNames lists the task names a plan may hold.
var TaskNames = slices.Clone(actionNames)

var actionIndex = func() map[string]int {
	m := map[string]int{}
	for i, a := range actionNames {
		m[a] = i
	}
	return m
}()

// serviceChain is the order of a service's tasks on one node.
var serviceChain = []string{"STOP", "REMOVE", "INSTALL", "CONFIGURE", "INITIALIZE", "START"}

// nodeFirst are the node tasks that come before a node's service tasks.
var nodeFirst = []string{"CREATE", "CONFIRM", "BOOTSTRAP"}

// Hardware reports whether a task name is a node task (no service).
func Hardware(task string) bool {
	switch task {
	case "CREATE", "CONFIRM", "BOOTSTRAP", "DELETE":
		return true
	}
	return false
}

// ServiceAction is the spec's action name of a service task name
// ("initialize" for INITIALIZE), or "".
func ServiceAction(task string) string {
	switch task {
	case "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE":
		return strings.ToLower(task)
	}
	return ""
}

// Work is one kind of task a step runs: task Task of service Service ("",
// for node tasks) on each of Nodes.
type Work struct {
	Task    string   `json:"task"`
	Service string   `json:"service,omitempty"`
	Nodes   []string `json:"nodes"`
}

// Input is what to plan.
type Input struct {
	Spec *spec.Spec
	// Nodes are the nodes the plan may name, in nodenum order (the order
	// sorts tasks and names nothing to run), with the services each
	// carries (a dependency on a service no node carries is ignored, as
	// in Coopr).
	Nodes []spec.Node
	// Action labels the plan.
	Action Action
	// Work is what runs.
	Work []Work
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
	// one action on one service across the nodes that have it.
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
	svc  int32 // -1 for node tasks
}

// Build plans in.
func Build(in Input) (*Plan, error) {
	s := in.Spec
	p := &Plan{Cluster: s.Name, Action: in.Action, nodeOrder: make(map[string]int, len(in.Nodes))}
	for i, n := range in.Nodes {
		p.nodeOrder[n.ID] = i
	}
	r := newResolver(s)

	// The vertices, by node.
	byNode := make([][]vkey, len(in.Nodes))
	seen := map[vkey]bool{}
	has := make([][]bool, len(r.services)) // [service][action]: some node has the task
	for i := range has {
		has[i] = make([]bool, len(actionNames))
	}
	for _, w := range in.Work {
		act, ok := actionIndex[w.Task]
		if !ok {
			return nil, fmt.Errorf("planning: unknown task name %q (want one of %s)", w.Task, strings.Join(actionNames, ", "))
		}
		svc := int32(-1)
		switch {
		case Hardware(w.Task) && w.Service != "":
			return nil, fmt.Errorf("planning: %s is a node task, not a task of service %s", w.Task, w.Service)
		case !Hardware(w.Task):
			si, ok := r.index[w.Service]
			if !ok {
				return nil, fmt.Errorf("planning: %s of service %q: %s defines no such service", w.Task, w.Service, s.File)
			}
			if !s.Services[w.Service].Defines(ServiceAction(w.Task)) {
				return nil, fmt.Errorf("planning: service %s defines no %s action", w.Service, ServiceAction(w.Task))
			}
			svc = int32(si)
		}
		for _, id := range w.Nodes {
			ni, ok := p.nodeOrder[id]
			if !ok {
				return nil, fmt.Errorf("planning: %s names node %q, which is not in the cluster", w.Task, id)
			}
			k := vkey{int32(ni), int8(act), svc}
			if seen[k] {
				continue
			}
			seen[k] = true
			byNode[ni] = append(byNode[ni], k)
			if svc >= 0 {
				has[svc][act] = true
			}
		}
	}
	onCluster := make([]bool, len(r.services))
	for _, n := range in.Nodes {
		for _, name := range n.Services {
			if i, ok := r.index[name]; ok {
				onCluster[i] = true
			}
		}
	}
	for i := range has {
		for _, h := range has[i] {
			onCluster[i] = onCluster[i] || h
		}
	}
	deps := r.crossDeps(has, onCluster)

	// Tasks in a canonical order (node, then its chain), so the same work
	// always gives the same indexes, which saved plans and resumed jobs
	// rely on.
	chainPos := map[string]int{}
	for i, a := range append(append(append([]string(nil), nodeFirst...), serviceChain...), "DELETE") {
		chainPos[a] = i
	}
	index := make(map[vkey]int, len(seen))
	for ni, ks := range byNode {
		sort.Slice(ks, func(a, b int) bool {
			ka, kb := ks[a], ks[b]
			pa, pb := chainPos[actionNames[ka.act]], chainPos[actionNames[kb.act]]
			// Node tasks before DELETE bracket every service's chain.
			ga, gb := group3(actionNames[ka.act]), group3(actionNames[kb.act])
			if ga != gb {
				return ga < gb
			}
			if ka.svc != kb.svc {
				return ka.svc < kb.svc
			}
			return pa < pb
		})
		for _, k := range ks {
			t := Task{Index: len(p.Tasks), Name: actionNames[k.act], Node: in.Nodes[ni].ID}
			if k.svc >= 0 {
				t.Service = r.services[k.svc]
			}
			index[k] = t.Index
			p.Tasks = append(p.Tasks, t)
		}
	}

	// Each node's chain: node tasks, each service's tasks, DELETE.
	for _, ks := range byNode {
		pre, last := -1, -1
		var del = -1
		var ends []int
		prevSvc := int32(-2)
		for _, k := range ks {
			t := index[k]
			name := actionNames[k.act]
			switch group3(name) {
			case 0:
				if pre >= 0 {
					p.Tasks[t].Deps = append(p.Tasks[t].Deps, pre)
				}
				pre = t
			case 1:
				if k.svc != prevSvc {
					if last >= 0 {
						ends = append(ends, last)
					}
					prevSvc, last = k.svc, pre
				}
				if last >= 0 {
					p.Tasks[t].Deps = append(p.Tasks[t].Deps, last)
				}
				last = t
			case 2:
				del = t
			}
		}
		if last >= 0 && prevSvc >= 0 {
			ends = append(ends, last)
		}
		if del >= 0 {
			if len(ends) == 0 && pre >= 0 {
				ends = append(ends, pre)
			}
			p.Tasks[del].Deps = append(p.Tasks[del].Deps, ends...)
		}
	}

	// Cross-service waits, as barrier groups.
	carriers := map[[2]int][]int{} // (action, service) → tasks
	for _, ks := range byNode {
		for _, k := range ks {
			if k.svc >= 0 {
				key := [2]int{int(k.act), int(k.svc)}
				carriers[key] = append(carriers[key], index[k])
			}
		}
	}
	groups := map[[2]int]int{}
	for _, ks := range byNode {
		for _, k := range ks {
			if k.svc < 0 {
				continue
			}
			t := index[k]
			for _, cd := range deps[[2]int{int(k.act), int(k.svc)}] {
				key := [2]int{actionIndex[cd.action], cd.service}
				g, ok := groups[key]
				if !ok {
					g = len(p.Groups)
					p.Groups = append(p.Groups, carriers[key])
					groups[key] = g
				}
				p.Tasks[t].Groups = append(p.Tasks[t].Groups, g)
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

// group3 puts a task name in its part of a node's chain: node tasks
// before the services (0), service tasks (1), DELETE (2).
func group3(name string) int {
	switch name {
	case "CREATE", "CONFIRM", "BOOTSTRAP":
		return 0
	case "DELETE":
		return 2
	}
	return 1
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
	return slices.Compact(out)
}

// Successors returns what waits on each task and group: index i < len(Tasks)
// is task i, index len(Tasks)+g is group g.
func (p *Plan) Successors() [][]int32 { return p.successors() }

// Digest identifies the plan: its tasks and how they wait on each other.
// Two builds of the same input give the same digest; a saved plan and a
// resumed job check that what they run is what was shown.
func (p *Plan) Digest() string {
	h := sha256.New()
	var b []byte
	for _, t := range p.Tasks {
		b = append(b[:0], t.Name...)
		b = append(b, ' ')
		b = append(b, t.Node...)
		b = append(b, ' ')
		b = append(b, t.Service...)
		for _, d := range t.Deps {
			b = append(b, " d"...)
			b = strconv.AppendInt(b, int64(d), 10)
		}
		for _, g := range t.Groups {
			b = append(b, " g"...)
			b = strconv.AppendInt(b, int64(g), 10)
		}
		b = append(b, '\n')
		h.Write(b)
	}
	for _, g := range p.Groups {
		b = append(b[:0], 'G')
		for _, m := range g {
			b = append(b, ' ')
			b = strconv.AppendInt(b, int64(m), 10)
		}
		b = append(b, '\n')
		h.Write(b)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// WorkOf lists a plan's tasks as Work, grouped by task name and service
// (in lifecycle order), each with its nodes in the plan's node order.
func (p *Plan) WorkOf() []Work {
	type key struct{ task, svc string }
	idx := map[key]int{}
	var out []Work
	for _, t := range p.Tasks {
		k := key{t.Name, t.Service}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, Work{Task: t.Name, Service: t.Service})
		}
		out[i].Nodes = append(out[i].Nodes, t.Node)
	}
	SortWork(out)
	return out
}

// SortWork sorts work by lifecycle order, then service.
func SortWork(w []Work) {
	sort.SliceStable(w, func(i, j int) bool {
		if w[i].Task != w[j].Task {
			return actionIndex[w[i].Task] < actionIndex[w[j].Task]
		}
		return w[i].Service < w[j].Service
	})
}
