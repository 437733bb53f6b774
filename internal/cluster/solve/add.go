package solve

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// ClusterLayout is a multiset of node layouts: how many nodes have each.
type ClusterLayout struct {
	layouts map[string]Layout
	counts  map[string]int
}

// NewClusterLayout counts the layouts of some nodes.
func NewClusterLayout(nodes []Layout) *ClusterLayout {
	cl := &ClusterLayout{layouts: map[string]Layout{}, counts: map[string]int{}}
	for _, l := range nodes {
		cl.add(l, 1)
	}
	return cl
}

func (cl *ClusterLayout) add(l Layout, n int) {
	k := l.Key()
	cl.layouts[k] = l
	cl.counts[k] += n
	if cl.counts[k] == 0 {
		delete(cl.counts, k)
		delete(cl.layouts, k)
	}
}

// Count is how many nodes have layout l.
func (cl *ClusterLayout) Count(l Layout) int { return cl.counts[l.Key()] }

// Layouts lists the layouts present, in preference order.
func (cl *ClusterLayout) Layouts() []Layout {
	out := make([]Layout, 0, len(cl.layouts))
	for _, l := range cl.layouts {
		out = append(out, l)
	}
	slices.SortFunc(out, Comparator{}.Compare)
	return out
}

// Nodes is the number of nodes.
func (cl *ClusterLayout) Nodes() int {
	n := 0
	for _, c := range cl.counts {
		n += c
	}
	return n
}

// ServiceCounts is how many nodes carry each service.
func (cl *ClusterLayout) ServiceCounts() map[string]int {
	out := map[string]int{}
	for k, c := range cl.counts {
		for _, s := range cl.layouts[k].Services {
			out[s] += c
		}
	}
	return out
}

// Valid is Coopr's ClusterLayout.isValid: every layout satisfies the
// layout and type rules (must-coexist restricted to the services on the
// cluster), and every constrained service's count is within its
// quantities and the number of nodes.
func (cl *ClusterLayout) Valid(c *Constraints) bool { return cl.Broken(c) == "" }

// Broken names the first constraint the cluster breaks, or "".
func (cl *ClusterLayout) Broken(c *Constraints) string {
	counts := cl.ServiceCounts()
	on := map[string]bool{}
	for s := range counts {
		on[s] = true
	}
	for _, l := range cl.Layouts() {
		if r := c.brokenLayoutRule(l.Services, on); r != "" {
			return fmt.Sprintf("%d node(s) %s break %s", cl.Count(l), l, r)
		}
		if r := c.brokenTypeRule(l); r != "" {
			return fmt.Sprintf("%d node(s) %s: %s", cl.Count(l), l, r)
		}
	}
	n := cl.Nodes()
	names := make([]string, 0, len(counts))
	for s := range counts {
		names = append(names, s)
	}
	sort.Strings(names)
	for _, s := range names {
		sc, ok := c.Services[s]
		if !ok {
			continue
		}
		if k := counts[s]; k < sc.Min || k > sc.Max || k > n {
			return fmt.Sprintf("%s is on %d node(s), outside %s", s, k, quantity(s, sc))
		}
	}
	return ""
}

// quantity names a service's quantities: "s min 1 max 3".
func quantity(s string, sc ServiceConstraint) string {
	q := fmt.Sprintf("%s min %d", s, sc.Min)
	if sc.Max < NoMax {
		q += fmt.Sprintf(" max %d", sc.Max)
	}
	return q
}

// Change adds a service to Count nodes of layout From.
type Change struct {
	Service string `json:"service"`
	From    Layout `json:"from"`
	Count   int    `json:"count"`
}

func (cl *ClusterLayout) apply(ch Change) {
	cl.add(ch.From, -ch.Count)
	cl.add(ch.From.With(ch.Service), ch.Count)
}

func (cl *ClusterLayout) undo(ch Change) {
	cl.add(ch.From.With(ch.Service), -ch.Count)
	cl.add(ch.From, ch.Count)
}

// AddOrder is Coopr's order for adding services: those with a service
// constraint by max ascending, then min descending, then name; then the
// others by name (Coopr: hash order).
func AddOrder(c *Constraints, services []string) []string {
	out := slices.Clone(services)
	sort.Strings(out)
	out = slices.Compact(out)
	sort.SliceStable(out, func(i, j int) bool {
		a, aok := c.Services[out[i]]
		b, bok := c.Services[out[j]]
		if aok != bok {
			return aok
		}
		if !aok {
			return false
		}
		if a.Max != b.Max {
			return a.Max < b.Max
		}
		return a.Min > b.Min
	})
	return out
}

// AddServices is Coopr's ClusterLayoutUpdater: it adds services to the
// nodes of a cluster, never adding nodes nor moving a service, by a
// depth-first search over one service at a time: the service goes on K
// nodes (K from its max, or every node that can take it, down to its
// min, at least 1), spread over the layouts that stay valid with it in
// every way Coopr's walk visits; a change is kept when the whole cluster
// is valid and the rest of the services can be added after it. The
// changes are returned in order; the cluster layout is left changed.
func AddServices(cl *ClusterLayout, c *Constraints, services []string, b Budget) ([]Change, error) {
	b = b.orDefault()
	order := AddOrder(c, services)
	s := &adder{cl: cl, c: c, budget: b, deadline: time.Now().Add(b.Time)}
	if s.add(order) {
		return s.changes, nil
	}
	if s.out != nil {
		return nil, fmt.Errorf("adding %s: %w", strings.Join(order, ", "), s.out)
	}
	return nil, s.explain(order)
}

type adder struct {
	cl       *ClusterLayout
	c        *Constraints
	changes  []Change
	budget   Budget
	deadline time.Time
	steps    int
	out      error
}

// expandable lists the layouts present that stay valid with svc added,
// in preference order.
func (s *adder) expandable(svc string) []Layout {
	on := map[string]bool{svc: true}
	for k := range s.cl.ServiceCounts() {
		on[k] = true
	}
	var out []Layout
	for _, l := range s.cl.Layouts() {
		if !l.Has(svc) && s.c.ValidLayout(l.With(svc), on) {
			out = append(out, l)
		}
	}
	return out
}

// eachChange calls fn with each way Coopr's AddServiceChangeIterator
// tries to add svc: K nodes from the most to the least, spread over the
// expandable layouts (exp) in its walk's order. fn returns false to stop.
func eachChange(cl *ClusterLayout, c *Constraints, exp []Layout, svc string, fn func(counts []int) bool) {
	if len(exp) == 0 {
		return
	}
	caps := make([]int, len(exp))
	total := 0
	for i, l := range exp {
		caps[i] = cl.Count(l)
		total += caps[i]
	}
	most, least := total, 1
	if sc, ok := c.Services[svc]; ok {
		most = min(sc.Max, most)
		least = max(sc.Min, least)
	}
	for k := most; k >= least; k-- {
		it := newSlotted(len(exp), k, caps)
		for it.hasNext() {
			if !fn(it.next()) {
				return
			}
		}
	}
}

func (s *adder) add(queue []string) bool {
	if len(queue) == 0 {
		return true
	}
	svc := queue[0]
	exp := s.expandable(svc)
	found := false
	eachChange(s.cl, s.c, exp, svc, func(counts []int) bool {
		s.steps++
		if s.steps > s.budget.Steps {
			s.out = fmt.Errorf("%w: %d changes tried", ErrBudget, s.budget.Steps)
			return false
		}
		if s.steps&1023 == 0 && time.Now().After(s.deadline) {
			s.out = fmt.Errorf("%w: %s", ErrBudget, s.budget.Time)
			return false
		}
		var applied []Change
		for i, n := range counts {
			if n > 0 {
				ch := Change{Service: svc, From: exp[i], Count: n}
				s.cl.apply(ch)
				applied = append(applied, ch)
			}
		}
		if s.cl.Valid(s.c) {
			s.changes = append(s.changes, applied...)
			if s.add(queue[1:]) {
				found = true
				return false
			}
			s.changes = s.changes[:len(s.changes)-len(applied)]
		}
		for i := len(applied) - 1; i >= 0; i-- {
			s.cl.undo(applied[i])
		}
		return s.out == nil
	})
	return found
}

// explain says why the services cannot be added: the first one that no
// node can take alone, with each layout's broken rule, or that no
// combination works.
func (s *adder) explain(order []string) error {
	for _, svc := range order {
		exp := s.expandable(svc)
		least := 1
		sc, constrained := s.c.Services[svc]
		if constrained {
			least = max(sc.Min, 1)
		}
		can := 0
		for _, l := range exp {
			can += s.cl.Count(l)
		}
		if can >= least {
			continue
		}
		on := map[string]bool{svc: true}
		for k := range s.cl.ServiceCounts() {
			on[k] = true
		}
		var why []string
		for _, l := range s.cl.Layouts() {
			r := s.c.brokenLayoutRule(l.With(svc).Services, on)
			if r == "" {
				r = s.c.brokenTypeRule(l.With(svc))
			}
			if r == "" {
				r = "it could"
			}
			why = append(why, fmt.Sprintf("%d node(s) %s: %s", s.cl.Count(l), l, r))
		}
		if can == 0 {
			return fmt.Errorf("service %s can go on none of the %d existing nodes (adding services never adds nodes nor moves services): %s",
				svc, s.cl.Nodes(), strings.Join(why, "; "))
		}
		return fmt.Errorf("service %s needs at least %d nodes (%s) but only %d existing node(s) can take it: %s",
			svc, least, quantity(svc, sc), can, strings.Join(why, "; "))
	}
	return fmt.Errorf("no way to add %s to the %d existing nodes keeps every constraint of the template (tried every placement Coopr's search tries)",
		strings.Join(order, ", "), s.cl.Nodes())
}
