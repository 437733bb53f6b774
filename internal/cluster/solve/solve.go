package solve

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Request is one solve: the template's constraints, the services the
// cluster carries, the usable hardware and image types, the wanted size
// and the nodes the cluster has now.
type Request struct {
	Constraints *Constraints
	// Services on the cluster once solved (a service on an existing node
	// stays on the cluster).
	Services []string
	// Hardware and Images are the usable type names.
	Hardware, Images []string
	// Size is the number of nodes wanted.
	Size int
	// Existing are the cluster's nodes now.
	Existing []Node
	Budget   Budget
}

// Node is one node of a solved cluster.
type Node struct {
	// Num is Coopr's nodenum; 0 for a new node until numbered.
	Num    int    `json:"nodenum"`
	Layout Layout `json:"layout"`
	// Added are the services added to an existing node.
	Added []string `json:"added,omitempty"`
}

// Solution is a solved cluster.
type Solution struct {
	// Nodes are the nodes the cluster keeps (with any added services),
	// then the new ones (Num 0) in layout preference order.
	Nodes []Node `json:"nodes"`
	// Removed are the nodenums of existing nodes to remove (newest first).
	Removed []int `json:"removed,omitempty"`
	// Changes are the services added to existing nodes.
	Changes []Change `json:"changes,omitempty"`
	// Rows are the layouts × counts table, with why each count.
	Rows []Row `json:"layouts"`
	// Considered is the number of node layouts the count search chose
	// among (0 when no new node was placed).
	Considered int `json:"considered"`
}

// Row is one layout of the solution.
type Row struct {
	Layout Layout `json:"layout"`
	// Kept is how many existing nodes keep it, New how many new nodes
	// get it, Removed how many existing nodes with it go.
	Kept    int `json:"kept"`
	New     int `json:"new"`
	Removed int `json:"removed,omitempty"`
	// Why says which constraint decided the new count (or the change).
	Why string `json:"why"`
}

// Solve lays the cluster out. Existing nodes first get the services the
// request adds (AddServices, Coopr's rules; if they cannot take them and
// the cluster grows, the new nodes carry them instead); then a larger
// size places new nodes around the existing ones (FindCounts with their
// counts as a base), and a smaller one removes nodes, newest first, so
// that what stays satisfies the constraints. A node keeps its services.
func Solve(req Request) (*Solution, error) {
	c := req.Constraints
	if c == nil {
		c = &Constraints{}
	}
	if req.Size < 0 {
		return nil, fmt.Errorf("the size must be 0 or more, not %d", req.Size)
	}
	sol := &Solution{}
	existing := slices.Clone(req.Existing)
	sort.Slice(existing, func(i, j int) bool { return existing[i].Num < existing[j].Num })
	on := map[string]bool{}
	for _, n := range existing {
		for _, s := range n.Layout.Services {
			on[s] = true
		}
	}
	var toAdd []string
	for _, s := range req.Services {
		if !on[s] {
			toAdd = append(toAdd, s)
		}
	}
	services := slices.Clone(req.Services)
	for s := range on {
		if !slices.Contains(services, s) {
			services = append(services, s)
		}
	}
	sort.Strings(services)
	services = slices.Compact(services)
	why := map[string]string{}

	if len(existing) > 0 && len(toAdd) > 0 {
		layouts := make([]Layout, len(existing))
		for i, n := range existing {
			layouts[i] = n.Layout
		}
		cl := NewClusterLayout(layouts)
		changes, err := AddServices(cl, c, toAdd, req.Budget)
		switch {
		case err == nil:
			sol.Changes = changes
			existing = applyChanges(existing, changes)
			for _, ch := range changes {
				why[ch.From.With(ch.Service).Key()] = fmt.Sprintf("added %s to %d existing node(s)", ch.Service, ch.Count)
			}
		case errors.Is(err, ErrBudget) || req.Size <= len(existing):
			return nil, fmt.Errorf("cannot add %s to the existing nodes: %w", strings.Join(toAdd, ", "), err)
		default:
			// The new nodes must carry them: fall through to the
			// scale-up with the existing nodes as they are.
			why[""] = err.Error()
		}
	}

	switch {
	case req.Size > len(existing):
		layouts, err := c.NodeLayouts(services, req.Hardware, req.Images)
		if err != nil {
			return nil, err
		}
		base := usage(existing)
		n := req.Size - len(existing)
		counts, choices, err := FindCounts(layouts, c, services, n, base, req.Budget)
		if err != nil {
			return nil, fmt.Errorf("laying out %d node(s): %w", n, err)
		}
		if counts == nil {
			msg := Diagnose(layouts, c, services, req.Size, base, req.Hardware, req.Images, req.Budget)
			if w := why[""]; w != "" {
				msg += " (and the existing nodes cannot take the new services: " + w + ")"
			}
			return nil, errors.New(msg)
		}
		sol.Considered = len(layouts)
		sol.Nodes = existing
		for i, k := range counts {
			for range k {
				sol.Nodes = append(sol.Nodes, Node{Layout: layouts[i]})
			}
			if k > 0 {
				why[layouts[i].Key()] = describe(choices[i], k)
			}
		}
	case req.Size < len(existing):
		keep, removed, err := shrink(existing, c, services, req.Size, req.Budget)
		if err != nil {
			return nil, err
		}
		sol.Nodes, sol.Removed = keep, removed
	default:
		sol.Nodes = existing
	}
	// Whatever the path, what is returned satisfies every constraint: an
	// existing node may break a must-coexist group once a new service
	// of the group is on the cluster (the new nodes cannot fix that).
	final := make([]Layout, len(sol.Nodes))
	for i, n := range sol.Nodes {
		final[i] = n.Layout
	}
	if r := NewClusterLayout(final).Broken(c); r != "" {
		msg := fmt.Sprintf("no layout of %d nodes keeps the existing nodes' services: %s", req.Size, r)
		if w := why[""]; w != "" {
			msg += " (and the existing nodes cannot take the new services: " + w + ")"
		}
		return nil, errors.New(msg)
	}
	sol.Rows = rows(sol, existing, why)
	return sol, nil
}

// applyChanges gives each change's service to the first nodes (by
// nodenum) with its layout, as Coopr's AddServicesChange did.
func applyChanges(nodes []Node, changes []Change) []Node {
	out := slices.Clone(nodes)
	for _, ch := range changes {
		left := ch.Count
		for i := range out {
			if left == 0 {
				break
			}
			if out[i].Layout.Key() == ch.From.Key() {
				out[i].Layout = out[i].Layout.With(ch.Service)
				out[i].Added = append(out[i].Added, ch.Service)
				left--
			}
		}
	}
	return out
}

func usage(nodes []Node) *Usage {
	u := &Usage{Nodes: len(nodes), Services: map[string]int{}}
	for _, n := range nodes {
		for _, s := range n.Layout.Services {
			u.Services[s]++
		}
	}
	return u
}

// describe turns a count's Choice into words.
func describe(ch Choice, k int) string {
	switch ch.Kind {
	case "max":
		return fmt.Sprintf("%s max: %d more node(s) may carry it", ch.Service, ch.Bound)
	case "min":
		return fmt.Sprintf("%s min: the nodes %s still needs elsewhere leave %d", ch.Service, ch.Service, ch.Bound)
	case "cap":
		return fmt.Sprintf("layout limit %d", ch.Bound)
	case "rest":
		return "the remaining nodes"
	case "search":
		return fmt.Sprintf("%d fit, but more leaves no valid layout for the rest (found by search)", ch.Bound)
	}
	return ""
}

// shrink removes len(nodes)-size nodes, newest first as far as the
// constraints allow: the most removed from the layout holding the newest
// node, and so on, every service on the cluster left on at least one
// node and the quantities held.
func shrink(nodes []Node, c *Constraints, services []string, size int, b Budget) ([]Node, []int, error) {
	// Layout groups, by their newest node, newest first.
	type group struct {
		l    Layout
		nums []int // ascending
	}
	byKey := map[string]*group{}
	var groups []*group
	for _, n := range nodes {
		g := byKey[n.Layout.Key()]
		if g == nil {
			g = &group{l: n.Layout}
			byKey[n.Layout.Key()] = g
			groups = append(groups, g)
		}
		g.nums = append(g.nums, n.Num)
	}
	sort.Slice(groups, func(i, j int) bool {
		return groups[i].nums[len(groups[i].nums)-1] > groups[j].nums[len(groups[j].nums)-1]
	})
	idx := map[string]int{}
	for i, s := range services {
		idx[s] = i
	}
	have := usage(nodes).Services
	p := &countProblem{total: len(nodes) - size, names: services, budget: b}
	p.lo, p.hi = make([]int, len(services)), make([]int, len(services))
	for j, s := range services {
		lo, hi := 1, size // a service on the cluster stays on it
		if sc, ok := c.Services[s]; ok {
			lo, hi = max(sc.Min, 1), min(sc.Max, size)
		}
		// removed R_s: have-hi ≤ R_s ≤ have-lo
		p.lo[j], p.hi[j] = have[s]-hi, have[s]-lo
	}
	for _, g := range groups {
		var slot []int
		for _, s := range g.l.Services {
			if j, ok := idx[s]; ok {
				slot = append(slot, j)
			}
		}
		p.slots = append(p.slots, slot)
		p.cap = append(p.cap, len(g.nums))
	}
	counts, _, err := p.solve()
	if err != nil {
		return nil, nil, fmt.Errorf("choosing nodes to remove: %w", err)
	}
	if counts == nil {
		var bounds []string
		for _, s := range services {
			if sc, ok := c.Services[s]; ok {
				bounds = append(bounds, fmt.Sprintf("%s on %d node(s) now, %s", s, have[s], quantity(s, sc)))
			}
		}
		return nil, nil, fmt.Errorf("no %d of the %d nodes satisfy the template's constraints (every service on the cluster stays on at least one node; removing a service is not supported): %s",
			size, len(nodes), strings.Join(bounds, "; "))
	}
	gone := map[int]bool{}
	var removed []int
	for i, g := range groups {
		for k := 0; k < counts[i]; k++ {
			num := g.nums[len(g.nums)-1-k]
			gone[num] = true
			removed = append(removed, num)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(removed)))
	var keep []Node
	for _, n := range nodes {
		if !gone[n.Num] {
			keep = append(keep, n)
		}
	}
	return keep, removed, nil
}

// rows builds the layouts × counts table.
func rows(sol *Solution, before []Node, why map[string]string) []Row {
	byKey := map[string]*Row{}
	var out []*Row
	row := func(l Layout) *Row {
		r := byKey[l.Key()]
		if r == nil {
			r = &Row{Layout: l, Why: why[l.Key()]}
			byKey[l.Key()] = r
			out = append(out, r)
		}
		return r
	}
	for _, n := range sol.Nodes {
		if n.Num == 0 {
			row(n.Layout).New++
		} else {
			row(n.Layout).Kept++
		}
	}
	gone := map[int]bool{}
	for _, num := range sol.Removed {
		gone[num] = true
	}
	for _, n := range before {
		if gone[n.Num] {
			r := row(n.Layout)
			r.Removed++
			r.Why = "scale down: newest nodes first, as the constraints allow"
		}
	}
	slices.SortStableFunc(out, func(a, b *Row) int { return Comparator{}.Compare(a.Layout, b.Layout) })
	res := make([]Row, len(out))
	for i, r := range out {
		if r.Why == "" && r.New == 0 {
			r.Why = "existing nodes"
		}
		res[i] = *r
	}
	return res
}
