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
}

// crossDep is "wait for action on every node carrying service".
type crossDep struct {
	action  string
	service int
}

// resolver computes, once per service, the cross-service dependencies of
// each of its actions (Coopr's ServiceDependencyResolver, §4.3).
type resolver struct {
	services []string // index → name, sorted
	index    map[string]int
	defines  [][]bool // [service][action index]
	// graphs[phase][reversed][s] = minimised direct deps of s.
	graphs map[string][2][][]int
	onCl   []bool
	deps   map[[2]int][]crossDep // (action, service) → deps
}

func newResolver(s *spec.Spec, onCluster []string) *resolver {
	r := &resolver{index: map[string]int{}, graphs: map[string][2][][]int{}, deps: map[[2]int][]crossDep{}}
	for name := range s.Services {
		r.services = append(r.services, name)
	}
	sort.Strings(r.services)
	for i, n := range r.services {
		r.index[n] = i
	}
	r.onCl = make([]bool, len(r.services))
	for _, n := range onCluster {
		if i, ok := r.index[n]; ok {
			r.onCl[i] = true
		}
	}
	r.defines = make([][]bool, len(r.services))
	for i, n := range r.services {
		r.defines[i] = make([]bool, len(actionNames))
		for a, act := range actionNames {
			if svcAction := serviceActionOf(act); svcAction != "" {
				r.defines[i][a] = s.Services[n].Defines(svcAction)
			}
		}
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
	for svc := range r.services {
		for _, ru := range rules {
			to := actionIndex[ru.to]
			if !r.defines[svc][to] {
				continue
			}
			key := [2]int{to, svc}
			r.deps[key] = append(r.deps[key], r.resolve(svc, ru)...)
		}
	}
	return r
}

// resolve walks svc's (possibly reversed) graph breadth first: a service
// on the cluster that defines rule.from is a dependency; one that does
// not passes the walk on to its own dependencies. Results another result
// already depends on are dropped: the chain covers them.
func (r *resolver) resolve(svc int, ru rule) []crossDep {
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
		if !r.onCl[p] {
			continue
		}
		if r.defines[p][from] {
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
