// Package solve is Coopr's layout solver (reference/coopr-server.md §3):
// from a cluster template's constraints, the services to place, the
// usable hardware and image types and a number of nodes, it decides which
// node carries which services on which hardware and image; it grows and
// shrinks a cluster keeping its nodes' services, and adds services to the
// nodes of a running cluster by Coopr's rules.
//
// The node layouts and their preference order are Coopr's exactly. The
// count search returns the layout Coopr's walk would have returned (the
// first valid composition in its lexicographically decreasing order), but
// as a depth-first search that bounds every count by what the service
// quantities still allow, so a template that made Coopr visit every one
// of C(n+m-1, m-1) compositions is solved in a few steps. It has a budget
// of search steps and wall time, and when no layout exists it names the
// constraints that cannot hold together and the numbers.
package solve

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// NoMax is a service quantity without an upper bound.
const NoMax = math.MaxInt32

// Constraints are a template's layout and service constraints.
type Constraints struct {
	// MustCoexist: a node carrying one member of a group carries every
	// member that is on the cluster.
	MustCoexist [][]string
	// CantCoexist: no node carries a whole group.
	CantCoexist [][]string
	// Services bound how many nodes carry a service and on which
	// hardware and image types.
	Services map[string]ServiceConstraint
}

// ServiceConstraint is Coopr's per-service constraint.
type ServiceConstraint struct {
	// Min and Max bound the number of nodes carrying the service (Max
	// NoMax: no bound).
	Min, Max int
	// HardwareTypes and ImageTypes, when not empty, are the only types a
	// node carrying the service may use.
	HardwareTypes, ImageTypes []string
}

// Layout is a node layout: a set of services on a hardware and image type.
type Layout struct {
	// Services are sorted.
	Services     []string `json:"services"`
	HardwareType string   `json:"hardwaretype"`
	ImageType    string   `json:"imagetype"`
}

// NewLayout returns the layout with the services sorted and deduplicated.
func NewLayout(hw, img string, services []string) Layout {
	s := slices.Clone(services)
	sort.Strings(s)
	return Layout{Services: slices.Compact(s), HardwareType: hw, ImageType: img}
}

// Key identifies the layout (for maps).
func (l Layout) Key() string {
	return l.HardwareType + "\x00" + l.ImageType + "\x00" + strings.Join(l.Services, "\x00")
}

// String is "{a,b} on hw/img".
func (l Layout) String() string {
	return "{" + strings.Join(l.Services, ",") + "} on " + l.HardwareType + "/" + l.ImageType
}

// Has reports whether the layout carries service s.
func (l Layout) Has(s string) bool {
	_, ok := slices.BinarySearch(l.Services, s)
	return ok
}

// With is the layout with service s added.
func (l Layout) With(s string) Layout {
	return NewLayout(l.HardwareType, l.ImageType, append(slices.Clone(l.Services), s))
}

// ValidServiceSet applies the layout constraints to one node's services:
// it holds no whole cant-coexist group, and for every must-coexist group,
// restricted to the services on the cluster, it holds all of it or none.
func (c *Constraints) ValidServiceSet(set []string, clusterServices map[string]bool) bool {
	return c.brokenLayoutRule(set, clusterServices) == ""
}

// brokenLayoutRule names the first layout rule the set breaks, or "".
func (c *Constraints) brokenLayoutRule(set []string, clusterServices map[string]bool) string {
	has := func(s string) bool { return slices.Contains(set, s) }
	for _, g := range c.CantCoexist {
		if len(g) == 0 {
			continue
		}
		all := true
		for _, s := range g {
			all = all && has(s)
		}
		if all {
			return fmt.Sprintf("cantcoexist [%s]", strings.Join(g, ", "))
		}
	}
	for _, g := range c.MustCoexist {
		some, every := false, true
		for _, s := range g {
			if !clusterServices[s] {
				continue
			}
			if has(s) {
				some = true
			} else {
				every = false
			}
		}
		if some && !every {
			return fmt.Sprintf("mustcoexist [%s]", strings.Join(g, ", "))
		}
	}
	return ""
}

// SatisfiesServiceConstraints reports whether the layout's hardware and
// image types are allowed for every service it carries.
func (c *Constraints) SatisfiesServiceConstraints(l Layout) bool {
	return c.brokenTypeRule(l) == ""
}

func (c *Constraints) brokenTypeRule(l Layout) string {
	for _, s := range l.Services {
		sc, ok := c.Services[s]
		if !ok {
			continue
		}
		if len(sc.HardwareTypes) > 0 && !slices.Contains(sc.HardwareTypes, l.HardwareType) {
			return fmt.Sprintf("%s allows hardware types [%s] only", s, strings.Join(sc.HardwareTypes, ", "))
		}
		if len(sc.ImageTypes) > 0 && !slices.Contains(sc.ImageTypes, l.ImageType) {
			return fmt.Sprintf("%s allows image types [%s] only", s, strings.Join(sc.ImageTypes, ", "))
		}
	}
	return ""
}

// ValidLayout is ValidServiceSet and SatisfiesServiceConstraints.
func (c *Constraints) ValidLayout(l Layout, clusterServices map[string]bool) bool {
	return c.ValidServiceSet(l.Services, clusterServices) && c.SatisfiesServiceConstraints(l)
}

// inGroup reports whether s is in some must- or cant-coexist group.
func (c *Constraints) inGroup(s string) bool {
	for _, list := range [][][]string{c.MustCoexist, c.CantCoexist} {
		for _, g := range list {
			if slices.Contains(g, s) {
				return true
			}
		}
	}
	return false
}

// Unconstrained lists the services (of those given) with no service
// constraint that are in no must- or cant-coexist group, sorted: Coopr
// puts them on every node.
func (c *Constraints) Unconstrained(services []string) []string {
	var out []string
	for _, s := range services {
		if _, ok := c.Services[s]; !ok && !c.inGroup(s) {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// maxConstrained bounds the constrained services a template may have:
// Coopr enumerates every subset of them (2^k).
const maxConstrained = 22

// ServiceSets are Coopr's valid service sets (NodeLayoutGenerator): every
// subset of the constrained services that breaks no layout rule, each
// with the unconstrained services added, and the unconstrained services
// alone. Each set is sorted; the list is sorted by size then names.
func (c *Constraints) ServiceSets(services []string) ([][]string, error) {
	cluster := map[string]bool{}
	for _, s := range services {
		cluster[s] = true
	}
	free := c.Unconstrained(services)
	var constrained []string
	for _, s := range services {
		if !slices.Contains(free, s) {
			constrained = append(constrained, s)
		}
	}
	sort.Strings(constrained)
	constrained = slices.Compact(constrained)
	if len(constrained) > maxConstrained {
		return nil, fmt.Errorf("%d services have constraints (%s): the solver enumerates every subset of them and allows at most %d",
			len(constrained), strings.Join(constrained, ", "), maxConstrained)
	}
	// Cant-coexist groups as bit masks prune the subset walk: a set
	// holding a whole group has no valid superset.
	idx := map[string]int{}
	for i, s := range constrained {
		idx[s] = i
	}
	var cant []uint32
	for _, g := range c.CantCoexist {
		var m uint32
		ok := len(g) > 0
		for _, s := range g {
			i, in := idx[s]
			if !in {
				ok = false // a member not on the cluster: the group never completes
				break
			}
			m |= 1 << i
		}
		if ok {
			cant = append(cant, m)
		}
	}
	var sets [][]string
	var walk func(i int, m uint32)
	walk = func(i int, m uint32) {
		for _, g := range cant {
			if m&g == g {
				return
			}
		}
		if i == len(constrained) {
			if m == 0 {
				return
			}
			var set []string
			for j, s := range constrained {
				if m&(1<<j) != 0 {
					set = append(set, s)
				}
			}
			if c.ValidServiceSet(set, cluster) {
				sets = append(sets, append(set, free...))
			}
			return
		}
		walk(i+1, m|1<<i)
		walk(i+1, m)
	}
	if len(constrained) > 0 {
		walk(0, 0)
	}
	if len(free) > 0 {
		sets = append(sets, slices.Clone(free))
	}
	for _, s := range sets {
		sort.Strings(s)
	}
	sort.Slice(sets, func(i, j int) bool {
		if len(sets[i]) != len(sets[j]) {
			return len(sets[i]) > len(sets[j])
		}
		return slices.Compare(sets[i], sets[j]) < 0
	})
	return sets, nil
}

// Comparator is Coopr's NodeLayoutComparator: more services first, then
// the hardware then image type's rank in the preference lists (nil: all
// equal), then hardware and image type names, then the sorted service
// names element-wise.
type Comparator struct {
	HardwarePreference, ImagePreference []string
}

func rank(v string, prefs []string) int {
	if i := slices.Index(prefs, v); i >= 0 {
		return i
	}
	return math.MaxInt
}

// Compare orders a before b (negative) when a is preferred.
func (cmp Comparator) Compare(a, b Layout) int {
	if len(a.Services) != len(b.Services) {
		return len(b.Services) - len(a.Services)
	}
	if ra, rb := rank(a.HardwareType, cmp.HardwarePreference), rank(b.HardwareType, cmp.HardwarePreference); ra != rb {
		if ra < rb {
			return -1
		}
		return 1
	}
	if ra, rb := rank(a.ImageType, cmp.ImagePreference), rank(b.ImageType, cmp.ImagePreference); ra != rb {
		if ra < rb {
			return -1
		}
		return 1
	}
	if c := strings.Compare(a.HardwareType, b.HardwareType); c != 0 {
		return c
	}
	if c := strings.Compare(a.ImageType, b.ImageType); c != 0 {
		return c
	}
	return slices.Compare(a.Services, b.Services)
}

// ValidLayouts are the layouts (service set × hardware × image) whose
// types every service on them allows (Coopr's findValidNodeLayouts).
func (c *Constraints) ValidLayouts(sets [][]string, hardware, images []string) []Layout {
	var out []Layout
	for _, hw := range hardware {
		for _, img := range images {
			for _, set := range sets {
				l := NewLayout(hw, img, set)
				if c.SatisfiesServiceConstraints(l) {
					out = append(out, l)
				}
			}
		}
	}
	return out
}

// Narrow keeps the preferred layout of each service set and sorts them by
// preference (Coopr's narrowNodeLayouts).
func Narrow(layouts []Layout, cmp Comparator) []Layout {
	best := map[string]Layout{}
	for _, l := range layouts {
		k := strings.Join(l.Services, "\x00")
		if cur, ok := best[k]; !ok || cmp.Compare(l, cur) < 0 {
			best[k] = l
		}
	}
	out := make([]Layout, 0, len(best))
	for _, l := range best {
		out = append(out, l)
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// NodeLayouts is Coopr's generateNodeLayoutPreferences: the node layouts
// a cluster of these services may use, one per valid service set, most
// preferred first.
func (c *Constraints) NodeLayouts(services, hardware, images []string) ([]Layout, error) {
	sets, err := c.ServiceSets(services)
	if err != nil {
		return nil, err
	}
	hw, img := slices.Clone(hardware), slices.Clone(images)
	sort.Strings(hw)
	sort.Strings(img)
	return Narrow(c.ValidLayouts(sets, hw, img), Comparator{}), nil
}
