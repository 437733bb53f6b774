package spec

import (
	"fmt"
	"sort"
	"strings"

	"github.com/loomrt/loom/internal/cluster/macro"
	"github.com/loomrt/loom/runtime"
)

// MaxNodes is the largest cluster a spec may describe (Coopr's
// server.max.cluster.size).
const MaxNodes = 10000

// problem records a validation problem at line.
func (d *decoder) at(line int, format string, args ...any) {
	if len(d.problems) >= maxErrors {
		return
	}
	d.problems = append(d.problems, Problem{Line: line, Msg: fmt.Sprintf(format, args...)})
}

// validate checks the cross-references: names, services of groups,
// dependencies, conflicts, cycles and layout constraints.
func (d *decoder) validate(s *Spec) {
	if !labelName.MatchString(s.Name) {
		d.at(s.nameLine, "name %q must be a lower-case DNS label of at most 32 characters (letters, digits, '-'): it starts every node id and hostname", s.Name)
	}
	names := make([]string, 0, len(s.Services))
	for name := range s.Services {
		names = append(names, name)
	}
	sort.Strings(names)

	// Which names a dependency may use: services, and what they provide.
	providers := map[string][]string{}
	for _, name := range names {
		svc := s.Services[name]
		if !serviceName.MatchString(name) {
			d.at(svc.Line, "service name %q may use only letters, digits, '_', '.' and '-'", name)
		}
		for _, p := range svc.Provides {
			providers[p] = append(providers[p], name)
		}
	}
	known := func(n string) bool { return s.Services[n] != nil || len(providers[n]) > 0 }

	total := 0
	seen := map[string]int{}
	for _, g := range s.NodeGroups {
		if g.Name != "" && !labelName.MatchString(g.Name) {
			d.at(g.Line, "node group name %q must be a lower-case DNS label of at most 32 characters", g.Name)
		}
		if line, dup := seen[g.Name]; dup {
			d.at(g.Line, "node group %q is defined twice (first on line %d)", g.Name, line)
		}
		seen[g.Name] = g.Line
		total += g.Count
		dup := map[string]bool{}
		for _, name := range g.Services {
			if s.Services[name] == nil {
				d.at(g.servicesLine, "node group %q lists service %q, which the spec's services do not define%s", g.Name, name, suggest(name, names))
			}
			if dup[name] {
				d.at(g.servicesLine, "node group %q lists service %q twice", g.Name, name)
			}
			dup[name] = true
		}
		sort.Strings(g.Services)
	}
	if len(s.NodeGroups) == 0 {
		d.at(0, "the spec has no nodegroups: add at least one (- name: web, count: 1, services: [...]), or name a \"template\" and a \"size\" for the solver to lay the nodes out")
	}
	if s.Size >= 0 && len(s.NodeGroups) > 0 && s.Size != total {
		d.at(0, "size is %d but the node groups add up to %d nodes: drop the node groups to let the template's solver lay out %d nodes, or drop size", s.Size, total, s.Size)
	}
	if len(s.ServiceNames) > 0 && len(s.NodeGroups) > 0 && s.Template == nil && s.TemplateName == "" {
		d.at(0, "services lists names (%s): that form picks a template's services; with node groups, define the services (name: {actions: ...})", strings.Join(s.ServiceNames, ", "))
	}
	if total > MaxNodes {
		d.at(0, "the node groups add up to %d nodes, above the limit of %d per cluster", total, MaxNodes)
	}
	if len(d.problems) > 0 {
		return
	}

	onCluster := map[string]bool{}
	for _, name := range s.OnCluster() {
		onCluster[name] = true
	}
	// provided reports whether a service on the cluster is or provides n.
	provided := func(n string) bool {
		if onCluster[n] {
			return true
		}
		for _, p := range providers[n] {
			if onCluster[p] {
				return true
			}
		}
		return false
	}
	for _, name := range names {
		svc := s.Services[name]
		for _, phase := range []struct {
			name string
			deps Deps
		}{{"install", svc.Install}, {"runtime", svc.Runtime}} {
			for _, dep := range phase.deps.Requires {
				switch {
				case !known(dep):
					d.at(svc.Line, "service %q: %s.requires names %q, which no service defines or provides%s", name, phase.name, dep, suggest(dep, names))
				case onCluster[name] && !provided(dep):
					d.at(svc.Line, "service %q requires %q (%s), which no node group carries: add %q (or a service that provides it) to a node group", name, dep, phase.name, dep)
				}
			}
			for _, dep := range phase.deps.Uses {
				if !known(dep) {
					d.at(svc.Line, "service %q: %s.uses names %q, which no service defines or provides%s", name, phase.name, dep, suggest(dep, names))
				}
			}
		}
		for _, c := range svc.Conflicts {
			if s.Services[c] == nil {
				d.at(svc.Line, "service %q conflicts with %q, which is not a service (conflicts name real services, not provided aliases)%s", name, c, suggest(c, names))
			} else if onCluster[name] && onCluster[c] {
				d.at(svc.Line, "service %q conflicts with %q, and both are on the cluster: remove one from the node groups", name, c)
			}
		}
	}
	for _, phase := range []string{"install", "runtime"} {
		if cycle := s.dependencyCycle(phase); cycle != nil {
			d.at(s.Services[cycle[0]].Line, "%s dependencies form a cycle: %s; no order can satisfy them", phase, strings.Join(cycle, " → "))
		}
	}
	d.checkConstraints(s, known, names)
}

// validateTemplateSpec checks what a template spec must say before the
// solver runs; the solved spec is validated in full.
func (d *decoder) validateTemplateSpec(s *Spec) {
	if !labelName.MatchString(s.Name) {
		d.at(s.nameLine, "name %q must be a lower-case DNS label of at most 32 characters (letters, digits, '-'): it starts every node id and hostname", s.Name)
	}
	switch {
	case s.Size < 0:
		d.at(0, "the spec names template %s but no \"size\": give the number of nodes (size: 5), or list nodegroups", templateName(s))
	case s.Size > MaxNodes:
		d.at(0, "size %d is above the limit of %d nodes per cluster", s.Size, MaxNodes)
	}
}

// DepsOf lists the services a service's phase ("install" or "runtime")
// dependencies name, with each provided alias replaced by every service
// providing it (a service also provides itself), sorted.
func (s *Spec) DepsOf(svc *Service, phase string) []string {
	deps := svc.Install
	if phase == "runtime" {
		deps = svc.Runtime
	}
	set := map[string]bool{}
	for _, n := range deps.All() {
		if s.Services[n] != nil {
			set[n] = true
		}
		for _, other := range s.providersOf(n) {
			set[other] = true
		}
	}
	delete(set, svc.Name)
	return sortedKeys(set)
}

func (s *Spec) providersOf(alias string) []string {
	var out []string
	for name, svc := range s.Services {
		for _, p := range svc.Provides {
			if p == alias {
				out = append(out, name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// dependencyCycle returns a dependency cycle among the services on the
// cluster in the phase's graph, or nil.
func (s *Spec) dependencyCycle(phase string) []string {
	on := map[string]bool{}
	for _, n := range s.OnCluster() {
		on[n] = true
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var found []string
	var visit func(n string) bool
	visit = func(n string) bool {
		color[n] = grey
		stack = append(stack, n)
		for _, dep := range s.DepsOf(s.Services[n], phase) {
			if !on[dep] {
				continue
			}
			switch color[dep] {
			case grey:
				for i, x := range stack {
					if x == dep {
						found = append(append([]string(nil), stack[i:]...), dep)
					}
				}
				return true
			case white:
				if visit(dep) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return false
	}
	for _, n := range s.OnCluster() {
		if color[n] == white && visit(n) {
			return found
		}
	}
	return nil
}

// checkConstraints applies the layout constraints to every node group.
func (d *decoder) checkConstraints(s *Spec, known func(string) bool, names []string) {
	c := s.Constraints
	for _, list := range [][][]string{c.MustCoexist, c.CantCoexist} {
		for _, g := range list {
			for _, n := range g {
				if s.Services[n] == nil {
					d.at(c.Line, "constraints name service %q, which the spec does not define%s", n, suggest(n, names))
				}
			}
		}
	}
	for n := range c.Quantities {
		if s.Services[n] == nil {
			d.at(c.Line, "constraints.services names %q, which the spec does not define%s", n, suggest(n, names))
		}
	}
	if len(d.problems) > 0 {
		return
	}
	onCluster := map[string]bool{}
	for _, n := range s.OnCluster() {
		onCluster[n] = true
	}
	counts := map[string]int{}
	for _, g := range s.NodeGroups {
		has := map[string]bool{}
		for _, n := range g.Services {
			has[n] = true
			counts[n] += g.Count
		}
		if g.Count == 0 {
			continue
		}
		for _, must := range c.MustCoexist {
			var in, out []string
			for _, n := range must {
				if !onCluster[n] {
					continue
				}
				if has[n] {
					in = append(in, n)
				} else {
					out = append(out, n)
				}
			}
			if len(in) > 0 && len(out) > 0 {
				d.at(g.servicesLine, "node group %q carries %s but not %s, which must coexist with it (constraints.mustcoexist)", g.Name, strings.Join(in, ", "), strings.Join(out, ", "))
			}
		}
		for _, cant := range c.CantCoexist {
			all := len(cant) > 0
			for _, n := range cant {
				all = all && has[n]
			}
			if all {
				d.at(g.servicesLine, "node group %q carries %s together, which constraints.cantcoexist forbids on one node", g.Name, strings.Join(cant, ", "))
			}
		}
	}
	qnames := make([]string, 0, len(c.Quantities))
	for n := range c.Quantities {
		qnames = append(qnames, n)
	}
	sort.Strings(qnames)
	for _, n := range qnames {
		q := c.Quantities[n]
		if counts[n] < q.Min || (q.Max > 0 && counts[n] > q.Max) {
			bound := fmt.Sprintf("at least %d", q.Min)
			if q.Max > 0 {
				bound = fmt.Sprintf("between %d and %d", q.Min, q.Max)
			}
			d.at(c.Line, "service %q is on %d nodes; constraints.services wants it on %s: change the node groups' counts", n, counts[n], bound)
		}
	}
}

// checkMacros parses the Coopr macros of the cluster config and of the
// service action fields, and checks the services they name are defined
// (a misspelt name would silently expand to nothing).
func (d *decoder) checkMacros(s *Spec) {
	known := make([]string, 0, len(s.Services))
	for n := range s.Services {
		known = append(known, n)
	}
	sort.Strings(known)
	check := func(line int, where string, v any) {
		svcs, err := macro.CheckValue(v)
		if err != nil {
			d.at(line, "%s: %v", where, err)
			return
		}
		for _, n := range svcs {
			if s.Services[n] == nil {
				d.at(line, "%s: a macro names service %q, which the spec does not define%s", where, n, suggest(n, known))
			}
		}
	}
	line := s.configLine
	if line == 0 {
		line = s.nameLine
	}
	check(line, "config", s.Config)
	for _, n := range known {
		svc := s.Services[n]
		acts := make([]string, 0, len(svc.Actions))
		for a := range svc.Actions {
			acts = append(acts, a)
		}
		sort.Strings(acts)
		for _, a := range acts {
			check(svc.Line, fmt.Sprintf("service %s, action %s, fields", n, a), svc.Actions[a].Fields)
		}
	}
}

// suggest offers the closest known name when one is near.
func suggest(name string, known []string) string { return runtime.DidYouMean(name, known) }
