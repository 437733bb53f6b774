package plan

import (
	"sort"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// rule is one of Coopr's four cross-service action dependencies: the
// dependent's To waits for the dependency's From.
type rule struct {
	from, to string // task names
	phase    string // "install" or "runtime"
	reversed bool   // dependents first (STOP)
}

var rules = []rule{
	{from: "START", to: "START", phase: "runtime"},
	{from: "START", to: "INITIALIZE", phase: "runtime"},
	{from: "STOP", to: "STOP", phase: "runtime", reversed: true},
	{from: "INSTALL", to: "INSTALL", phase: "install"},
	// Loom's: REMOVE in the reverse order of INSTALL (Coopr documented
	// it but never scheduled REMOVE).
	{from: "REMOVE", to: "REMOVE", phase: "install", reversed: true},
}

// crossDep is "wait for action on every node carrying service".
type crossDep struct {
	action  string
	service int
}

// resolver holds, once per spec, the services' minimised dependency
// graphs (Coopr's ServiceDependencyResolver, §4.3); crossDeps applies the
// rules to the tasks of one plan.
type resolver struct {
	services []string // index → name, sorted
	index    map[string]int
	// graphs[phase][reversed][s] = minimised direct deps of s.
	graphs map[string][2][][]int
}

func newResolver(s *spec.Spec) *resolver {
	r := &resolver{index: map[string]int{}, graphs: map[string][2][][]int{}}
	for name := range s.Services {
		r.services = append(r.services, name)
	}
	sort.Strings(r.services)
	for i, n := range r.services {
		r.index[n] = i
	}
	for _, phase := range []string{"install", "runtime"} {
		fwd := make([][]int, len(r.services))
		for i, n := range r.services {
			for _, d := range s.DepsOf(s.Services[n], phase) {
				fwd[i] = append(fwd[i], r.index[d])
			}
		}
		fwd = minimise(fwd)
		rev := make([][]int, len(r.services))
		for i, ds := range fwd {
			for _, d := range ds {
				rev[d] = append(rev[d], i)
			}
		}
		r.graphs[phase] = [2][][]int{fwd, rev}
	}
	return r
}

// crossDeps computes, for each (action, service) that has tasks in the
// plan, the (action, service) task groups it waits for. has[s][a] says
// whether service s has a task of action a; onCluster whether a node
// carries s.
func (r *resolver) crossDeps(has [][]bool, onCluster []bool) map[[2]int][]crossDep {
	out := map[[2]int][]crossDep{}
	for svc := range r.services {
		for _, ru := range rules {
			to := actionIndex[ru.to]
			if !has[svc][to] {
				continue
			}
			key := [2]int{to, svc}
			out[key] = append(out[key], r.resolve(svc, ru, has, onCluster)...)
		}
	}
	return out
}

// resolve walks svc's (possibly reversed) graph breadth first: a service
// on the cluster with a task of rule.from in the plan is a dependency; one
// without passes the walk on to its own dependencies. Results another
// result already depends on are dropped: the chain covers them.
func (r *resolver) resolve(svc int, ru rule, has [][]bool, onCluster []bool) []crossDep {
	g := r.graphs[ru.phase][b2i(ru.reversed)]
	from := actionIndex[ru.from]
	seen := map[int]bool{svc: true}
	queue := append([]int(nil), g[svc]...)
	var found []int
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if !onCluster[p] {
			continue
		}
		if has[p][from] {
			found = append(found, p)
			continue
		}
		queue = append(queue, g[p]...)
	}
	var out []crossDep
	for _, p2 := range found {
		covered := false
		for _, p1 := range found {
			if p1 != p2 && reaches(g, p1, p2) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, crossDep{action: ru.from, service: p2})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].service < out[j].service })
	return out
}

// minimise drops a direct dependency that another direct dependency
// already reaches (A→{B,C}, B→C gives A→{B}).
func minimise(g [][]int) [][]int {
	out := make([][]int, len(g))
	for a, ds := range g {
		for _, d := range ds {
			redundant := false
			for _, other := range ds {
				if other != d && reaches(g, other, d) {
					redundant = true
					break
				}
			}
			if !redundant {
				out[a] = append(out[a], d)
			}
		}
	}
	return out
}

// reaches reports whether b is reachable from a (a path of one or more
// edges).
func reaches(g [][]int, a, b int) bool {
	seen := map[int]bool{}
	stack := append([]int(nil), g[a]...)
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if x == b {
			return true
		}
		if seen[x] {
			continue
		}
		seen[x] = true
		stack = append(stack, g[x]...)
	}
	return false
}

// closure adds to set, to a fixpoint, the services set members reach in
// the runtime graph (reversed: the services that depend on them).
func (r *resolver) closure(set map[string]bool, reversed bool) {
	g := r.graphs["runtime"][b2i(reversed)]
	var stack []int
	for n := range set {
		if i, ok := r.index[n]; ok {
			stack = append(stack, i)
		}
	}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range g[x] {
			if !set[r.services[d]] {
				set[r.services[d]] = true
				stack = append(stack, d)
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Closure returns services plus, to a fixpoint, every defined service they
// depend on at runtime (dependents false) or that depends on them at
// runtime (dependents true): what Coopr's START_SERVICES and
// STOP/RESTART_SERVICES add to the services asked for (§4.4). Sorted.
func Closure(s *spec.Spec, services []string, dependents bool) []string {
	r := newResolver(s)
	set := map[string]bool{}
	for _, n := range services {
		set[n] = true
	}
	r.closure(set, dependents)
	return sortedSet(set)
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
