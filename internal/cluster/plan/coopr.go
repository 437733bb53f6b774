package plan

import (
	"fmt"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// cooprOrder is each of Coopr's cluster actions' task names, in order
// (Coopr's Actions.java).
var cooprOrder = map[Action][]string{
	Create:           {"CREATE", "CONFIRM", "BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START"},
	Delete:           {"DELETE"},
	AddServices:      {"BOOTSTRAP", "INSTALL", "CONFIGURE", "INITIALIZE", "START"},
	Configure:        {"BOOTSTRAP", "CONFIGURE"},
	ConfigureRestart: {"BOOTSTRAP", "STOP", "CONFIGURE", "START"},
	Start:            {"START"},
	Stop:             {"STOP"},
	Restart:          {"STOP", "START"},
}

// CooprWork is the work of one of Coopr's cluster actions on nodes (nil
// services: all; start adds the services they depend on at runtime, stop
// and restart those depending on them), as Coopr's JobPlanner chose it
// (reference/coopr-server.md §4.4), over-scheduling included: a runtime
// rule's dependency gets its task on every node carrying it even when it
// was not asked for (Coopr's "thrown in for safety"). Loom's own jobs do
// not use it (they run what changed); it keeps the planner checked against
// Coopr's worked example.
func CooprWork(s *spec.Spec, nodes []spec.Node, action Action, services []string) ([]Work, error) {
	steps, ok := cooprOrder[action]
	if !ok {
		return nil, fmt.Errorf("planning: %q is not one of Coopr's cluster actions", action)
	}
	var planned map[string]bool
	if services != nil {
		planned = map[string]bool{}
		list := services
		switch action {
		case Start:
			list = Closure(s, services, false)
		case Stop, Restart:
			list = Closure(s, services, true)
		}
		for _, n := range list {
			planned[n] = true
		}
	}
	work := map[[2]string][]string{}
	var keys [][2]string
	have := map[[3]string]bool{}
	add := func(task, svc, node string) {
		if have[[3]string{task, svc, node}] {
			return
		}
		have[[3]string{task, svc, node}] = true
		k := [2]string{task, svc}
		if _, ok := work[k]; !ok {
			keys = append(keys, k)
		}
		work[k] = append(work[k], node)
	}
	everywhere := map[[2]string]bool{} // dependency tasks added on every carrier
	carriers := map[string][]string{}
	for _, n := range nodes {
		for _, svc := range n.Services {
			carriers[svc] = append(carriers[svc], n.ID)
		}
	}
	r := newResolver(s)
	onCluster := make([]bool, len(r.services))
	defines := make([][]bool, len(r.services))
	for i, name := range r.services {
		onCluster[i] = len(carriers[name]) > 0
		defines[i] = make([]bool, len(actionNames))
		for a, act := range actionNames {
			defines[i][a] = onCluster[i] && ServiceAction(act) != "" && s.Services[name].Defines(ServiceAction(act))
		}
	}
	deps := r.crossDeps(defines, onCluster)
	for _, n := range nodes {
		for _, step := range steps {
			if Hardware(step) {
				add(step, "", n.ID)
			}
		}
		for _, svc := range n.Services {
			if planned != nil && !planned[svc] {
				continue
			}
			for _, step := range steps {
				if Hardware(step) || !s.Services[svc].Defines(ServiceAction(step)) {
					continue
				}
				add(step, svc, n.ID)
				for _, cd := range deps[[2]int{actionIndex[step], r.index[svc]}] {
					dep := r.services[cd.service]
					if step == "INSTALL" && planned != nil && !planned[dep] {
						continue // already installed
					}
					if everywhere[[2]string{cd.action, dep}] {
						continue
					}
					everywhere[[2]string{cd.action, dep}] = true
					for _, c := range carriers[dep] {
						add(cd.action, dep, c)
					}
				}
			}
		}
	}
	out := make([]Work, 0, len(keys))
	for _, k := range keys {
		out = append(out, Work{Task: k[0], Service: k[1], Nodes: work[k]})
	}
	SortWork(out)
	return out, nil
}
