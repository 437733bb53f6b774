package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/loomrt/loom/internal/cluster/macro"
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
	if !validLabelName(s.Name) {
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
		if !validServiceName(name) {
			d.at(svc.Line, "service name %q may use only letters, digits, '_', '.' and '-'", name)
		}
		for _, p := range svc.Provides {
			providers[p] = append(providers[p], name)
		}
	}
	known := func(n string) bool { return s.Services[n] != nil || len(providers[n]) > 0 }
	// Names a dependency may use, for suggestions: services and aliases.
	depNames := append([]string(nil), names...)
	for alias := range providers {
		if s.Services[alias] == nil {
			depNames = append(depNames, alias)
		}
	}
	sort.Strings(depNames)
	at := func(lines []int, i, fallback int) int {
		if i < len(lines) && lines[i] > 0 {
			return lines[i]
		}
		return fallback
	}

	total := 0
	seen := map[string]int{}
	for _, g := range s.NodeGroups {
		if g.Name != "" && !validLabelName(g.Name) {
			d.at(g.Line, "node group name %q must be a lower-case DNS label of at most 32 characters", g.Name)
		}
		if line, dup := seen[g.Name]; dup {
			d.at(g.Line, "node group %q is defined twice (first on line %d)", g.Name, line)
		}
		seen[g.Name] = g.Line
		total += g.Count
		dup := map[string]bool{}
		for _, name := range g.Services {
			line := g.servicesLine
			if l := g.serviceLines[name]; l > 0 {
				line = l
			}
			if s.Services[name] == nil {
				d.at(line, "node group %q lists service %q, which the spec's services do not define%s", g.Name, name, suggest(name, names))
			}
			if dup[name] {
				d.at(line, "node group %q lists service %q twice", g.Name, name)
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
			for i, dep := range phase.deps.Requires {
				switch {
				case !known(dep):
					d.at(at(phase.deps.reqLines, i, svc.Line), "service %q: %s.requires names %q, which no service defines or provides%s", name, phase.name, dep, suggest(dep, depNames))
				case onCluster[name] && !provided(dep):
					d.at(at(phase.deps.reqLines, i, svc.Line), "service %q requires %q (%s), which no node group carries: add %q (or a service that provides it) to a node group", name, dep, phase.name, dep)
				}
			}
			for i, dep := range phase.deps.Uses {
				if !known(dep) {
					d.at(at(phase.deps.useLines, i, svc.Line), "service %q: %s.uses names %q, which no service defines or provides%s", name, phase.name, dep, suggest(dep, depNames))
				}
			}
		}
		for i, c := range svc.Conflicts {
			if s.Services[c] == nil {
				d.at(at(svc.conflictLines, i, svc.Line), "service %q conflicts with %q, which is not a service (conflicts name real services, not provided aliases)%s", name, c, suggest(c, names))
			} else if onCluster[name] && onCluster[c] {
				d.at(at(svc.conflictLines, i, svc.Line), "service %q conflicts with %q, and both are on the cluster: remove one from the node groups", name, c)
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
	if !validLabelName(s.Name) {
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
		if s.Services[n] == nil {
			stack = stack[:len(stack)-1]
			color[n] = black
			return false
		}
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
	// In name order: errors on one line must come out the same way every
	// time (a map's order is random).
	qnames := make([]string, 0, len(c.Quantities))
	for n := range c.Quantities {
		qnames = append(qnames, n)
	}
	sort.Strings(qnames)
	for _, n := range qnames {
		if s.Services[n] == nil {
			d.at(c.Line, "constraints.services names %q, which the spec does not define%s", n, suggest(n, names))
		}
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

// KnownAddressTypes are the address types the bundled providers return
// (Coopr's access_v4 and bind_v4, and their v6 forms); a provider's
// addresstypes adds others.
var KnownAddressTypes = []string{"access_v4", "bind_v4", "access_v6", "bind_v6"}

// checkMacros parses the Coopr macros of the cluster config and of the
// service action fields, each at the line of the string that holds it,
// and checks the services and address types they name (a misspelt name
// would silently expand to nothing, or never get an address).
func (d *decoder) checkMacros(s *Spec) {
	known := make([]string, 0, len(s.Services))
	for n := range s.Services {
		known = append(known, n)
	}
	sort.Strings(known)
	ipTypes := append(append([]string(nil), KnownAddressTypes...), s.Provider.AddressTypes...)
	check := func(str string, line int, where string) {
		refs, err := macro.CheckRefs(str)
		if err != nil {
			d.at(line, "%s: %v", where, err)
			return
		}
		for _, r := range refs {
			if r.Service != "" && s.Services[r.Service] == nil {
				d.at(line, "%s: macro %%%s%% names service %q, which the spec does not define%s", where, r.Macro, r.Service, suggest(r.Service, known))
			}
			if r.IPType != "" && !slices.Contains(ipTypes, r.IPType) {
				d.at(line, "%s: macro %%%s%% names address type %q, which no provider returns%s (known: %s; a provider returning others lists them in provider.addresstypes)",
					where, r.Macro, r.IPType, suggest(r.IPType, ipTypes), strings.Join(ipTypes, ", "))
			}
		}
	}
	walkStrings(s.config, s.configLine, func(str string, line int) { check(str, line, "config") })
	if s.config == nil {
		_ = macro.Walk(s.Config, func(str string) error { check(str, s.configLine, "config"); return nil })
	}
	for _, n := range known {
		svc := s.Services[n]
		acts := make([]string, 0, len(svc.Actions))
		for a := range svc.Actions {
			acts = append(acts, a)
		}
		sort.Strings(acts)
		for _, a := range acts {
			act := svc.Actions[a]
			where := fmt.Sprintf("service %s, action %s, fields", n, a)
			if act.fields != nil {
				walkStrings(act.fields, svc.Line, func(str string, line int) { check(str, line, where) })
			} else {
				_ = macro.Walk(act.Fields, func(str string) error { check(str, svc.Line, where); return nil })
			}
		}
	}
}

// walkStrings calls f with every string scalar under n and its line.
func walkStrings(n *yaml.Node, fallback int, f func(s string, line int)) {
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!str" || n.Tag == "" {
			line := n.Line
			if line == 0 {
				line = fallback
			}
			f(n.Value, line)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			walkStrings(n.Content[i], fallback, f)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			walkStrings(c, fallback, f)
		}
	case yaml.AliasNode:
		walkStrings(n.Alias, fallback, f)
	}
}

// checkPlugins checks every plugin type the spec names against the loaded
// plugins: the provider type, and each action's automator type.
func (d *decoder) checkPlugins(s *Spec, p *Plugins) {
	where := ""
	if p.Where != "" {
		where = " in " + p.Where
	}
	list := func(names []string) string {
		if len(names) == 0 {
			return "none"
		}
		return strings.Join(names, ", ")
	}
	providers := append([]string(nil), p.Providers...)
	automators := append([]string(nil), p.Automators...)
	sort.Strings(providers)
	sort.Strings(automators)
	if t := s.Provider.Type; t != "" && !slices.Contains(providers, t) {
		line := s.Provider.typeLine
		if line == 0 {
			line = s.Provider.Line
		}
		d.at(line, "provider type %q is not a loaded provider plugin%s%s (loaded provider types: %s; 'loomd plugins' lists them)",
			t, where, suggest(t, providers), list(providers))
	}
	names := make([]string, 0, len(s.Services))
	for n := range s.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		svc := s.Services[n]
		acts := make([]string, 0, len(svc.Actions))
		for a := range svc.Actions {
			acts = append(acts, a)
		}
		sort.Strings(acts)
		for _, a := range acts {
			act := svc.Actions[a]
			if act.Type == "" || slices.Contains(automators, act.Type) {
				continue
			}
			line := act.typeLine
			if line == 0 {
				line = svc.Line
			}
			d.at(line, "service %q, action %s: automator type %q is not a loaded automator plugin%s%s (loaded automator types: %s)",
				n, a, act.Type, where, suggest(act.Type, automators), list(automators))
		}
	}
}

// suggest offers the closest known name when one is near: at most 2
// edits away (an adjacent transposition is one edit: "wbe" is "web"),
// ties going to the longer common prefix.
func suggest(name string, known []string) string {
	best, bestD, bestP := "", 3, -1
	ln := strings.ToLower(name)
	for _, k := range known {
		lk := strings.ToLower(k)
		d := osaDistance(ln, lk)
		p := 0
		for p < len(ln) && p < len(lk) && ln[p] == lk[p] {
			p++
		}
		if d < bestD || d == bestD && d < 3 && p > bestP {
			best, bestD, bestP = k, d, p
		}
	}
	if best == "" || best == name {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// osaDistance is the optimal string alignment distance: Levenshtein's,
// plus the transposition of two adjacent characters as one edit.
func osaDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// Suggest returns " (did you mean %q?)" for the closest of known to name
// when one is near, else "".
func Suggest(name string, known []string) string { return suggest(name, known) }
