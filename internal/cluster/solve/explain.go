package solve

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// bound is one service quantity bound, for Diagnose's deletion filter.
type bound struct {
	service string
	min     bool
	value   int
}

func (b bound) String() string {
	if b.min {
		return fmt.Sprintf("%s min %d", b.service, b.value)
	}
	return fmt.Sprintf("%s max %d", b.service, b.value)
}

// Diagnose says why no layout of size nodes exists ("no layout: …"),
// naming the constraints that cannot hold together and the numbers: a
// service whose min exceeds the size, a service no node layout can
// carry (and the rule that stops it), existing nodes already past a max,
// or the smallest set of quantity bounds that cannot all hold (found by
// dropping one bound at a time and solving again), with the node layouts
// the layout rules allow.
func Diagnose(layouts []Layout, c *Constraints, services []string, size int, base *Usage, hardware, images []string, b Budget) string {
	if base == nil {
		base = &Usage{}
	}
	head := fmt.Sprintf("no layout of %d nodes", size)
	if base.Nodes > 0 {
		head = fmt.Sprintf("no layout of %d nodes (%d existing, keeping their services)", size, base.Nodes)
	}
	names, _ := indexServices(c, services)
	for _, s := range names {
		sc := c.Services[s]
		if sc.Min > size {
			return fmt.Sprintf("%s: constraint %s cannot hold with %d nodes: it needs %d nodes carrying %s", head, quantity(s, sc), size, sc.Min, s)
		}
		if base.Services[s] > sc.Max {
			return fmt.Sprintf("%s: constraint %s cannot hold: the existing nodes already carry %s on %d nodes", head, quantity(s, sc), s, base.Services[s])
		}
		if sc.Min > base.Services[s] && !slices.ContainsFunc(layouts, func(l Layout) bool { return l.Has(s) }) {
			return fmt.Sprintf("%s: constraint %s cannot hold: no node layout can carry %s (%s)", head, quantity(s, sc), s, whyNoLayout(c, s, services, hardware, images))
		}
	}
	if len(layouts) == 0 {
		return fmt.Sprintf("%s: the layout constraints and the usable hardware [%s] and image types [%s] allow no node layout at all",
			head, strings.Join(hardware, ", "), strings.Join(images, ", "))
	}
	var bounds []bound
	for _, s := range names {
		sc := c.Services[s]
		if sc.Min > 0 {
			bounds = append(bounds, bound{s, true, sc.Min})
		}
		if sc.Max < NoMax {
			bounds = append(bounds, bound{s, false, sc.Max})
		}
	}
	// Deletion filter: drop a bound when the rest is still infeasible.
	small := Budget{Steps: max(b.orDefault().Steps/(2*len(bounds)+2), 1000), Time: b.orDefault().Time / 4}
	feasible := func(keep []bound) (bool, bool) {
		cc := &Constraints{MustCoexist: c.MustCoexist, CantCoexist: c.CantCoexist, Services: map[string]ServiceConstraint{}}
		for s, sc := range c.Services {
			cc.Services[s] = ServiceConstraint{Min: 0, Max: NoMax, HardwareTypes: sc.HardwareTypes, ImageTypes: sc.ImageTypes}
		}
		for _, bd := range keep {
			sc := cc.Services[bd.service]
			if bd.min {
				sc.Min = bd.value
			} else {
				sc.Max = bd.value
			}
			cc.Services[bd.service] = sc
		}
		counts, _, err := FindCounts(layouts, cc, services, size-base.Nodes, base, small)
		return counts != nil, err == nil
	}
	core := slices.Clone(bounds)
	exact := true
	for i := 0; i < len(core); {
		trial := slices.Delete(slices.Clone(core), i, i+1)
		ok, done := feasible(trial)
		exact = exact && done
		if !ok && done {
			core = trial
			continue
		}
		i++
	}
	var list []string
	for _, bd := range core {
		list = append(list, bd.String())
	}
	var shapes []string
	for i, l := range layouts {
		if i == 8 {
			shapes = append(shapes, fmt.Sprintf("and %d more", len(layouts)-8))
			break
		}
		shapes = append(shapes, "{"+strings.Join(l.Services, ",")+"}")
	}
	because := fmt.Sprintf("the layout rules allow only the node layouts %s", strings.Join(shapes, " "))
	if r := coverReason(layouts, core, size-base.Nodes); r != "" {
		because = r
	}
	what := "constraints " + strings.Join(list, ", ") + " cannot all hold"
	if len(core) == 1 {
		what = "constraint " + list[0] + " cannot hold"
	}
	msg := fmt.Sprintf("%s: %s with %d nodes because %s", head, what, size, because)
	if !exact {
		msg += " (the search to narrow the constraints down ran out of budget: the list may hold more than needed)"
	}
	return msg
}

// coverReason explains a set of max bounds that every layout is under:
// each node must carry one of those services, and their maxes add up to
// fewer nodes than needed.
func coverReason(layouts []Layout, core []bound, n int) string {
	var maxes []bound
	for _, b := range core {
		if b.min {
			return ""
		}
		maxes = append(maxes, b)
	}
	if len(maxes) == 0 {
		return ""
	}
	sum := 0
	var names []string
	for _, b := range maxes {
		sum += b.value
		names = append(names, b.service)
	}
	for _, l := range layouts {
		if !slices.ContainsFunc(names, l.Has) {
			return ""
		}
	}
	if len(names) == 1 {
		return fmt.Sprintf("every node layout the layout rules allow carries %s, so all %d new nodes would", names[0], n)
	}
	return fmt.Sprintf("every node layout the layout rules allow carries one of %s, which together may be on at most %d nodes", strings.Join(names, ", "), sum)
}

// whyNoLayout says why no node layout carries s: the layout rules stop
// every set of services holding it, or its type whitelists match none of
// the usable types.
func whyNoLayout(c *Constraints, s string, services, hardware, images []string) string {
	sets, err := c.ServiceSets(services)
	if err != nil {
		return err.Error()
	}
	if !slices.ContainsFunc(sets, func(set []string) bool { return slices.Contains(set, s) }) {
		on := map[string]bool{}
		for _, x := range services {
			on[x] = true
		}
		rule := c.brokenLayoutRule([]string{s}, on)
		if rule == "" {
			rule = "the must- and cant-coexist groups together"
		}
		return fmt.Sprintf("every node holding %s breaks a layout rule, e.g. %s on a node of its own", s, rule)
	}
	sc := c.Services[s]
	hw, img := slices.Clone(hardware), slices.Clone(images)
	sort.Strings(hw)
	sort.Strings(img)
	return fmt.Sprintf("it allows hardware types [%s] and image types [%s]; the usable ones for this provider are [%s] and [%s], and no combination suits every service it must share a node with",
		strings.Join(sc.HardwareTypes, ", "), strings.Join(sc.ImageTypes, ", "), strings.Join(hw, ", "), strings.Join(img, ", "))
}
