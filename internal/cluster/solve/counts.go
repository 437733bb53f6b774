package solve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Budget bounds one search. A search that runs out says so and names the
// budget: it never pins a thread as Coopr's unbounded walk could.
type Budget struct {
	// Steps is the most search nodes visited (0: DefaultBudget's).
	Steps int
	// Time is the most wall time (0: DefaultBudget's).
	Time time.Duration
}

// DefaultBudget is what a solve may spend unless told otherwise.
var DefaultBudget = Budget{Steps: 20_000_000, Time: 20 * time.Second}

func (b Budget) orDefault() Budget {
	if b.Steps <= 0 {
		b.Steps = DefaultBudget.Steps
	}
	if b.Time <= 0 {
		b.Time = DefaultBudget.Time
	}
	return b
}

// ErrBudget is wrapped by the error of a search that ran out of budget.
var ErrBudget = errors.New("the search ran out of budget")

// Choice says why a slot got its count: the bound that capped it.
type Choice struct {
	// Kind is "max" (Service reached its max), "min" (Service needs the
	// remaining nodes elsewhere), "cap" (the slot's own limit), "rest"
	// (every node left), "none" (no node left), or "search" (a larger
	// count left no valid layout for the rest: found by search).
	Kind    string `json:"kind"`
	Service string `json:"service,omitempty"`
	// Bound is the value of the bound.
	Bound int `json:"bound"`
}

// countProblem: choose counts[i] ≥ 0 for each slot with Σ counts = total,
// counts[i] ≤ cap[i], and for every service j lo[j] ≤ Σ_{i ∋ j} counts[i]
// ≤ hi[j]; the lexicographically greatest such vector (slots in
// preference order), which is the first Coopr's walk accepts.
type countProblem struct {
	slots  [][]int // service indices per slot
	cap    []int   // per-slot limit (NoMax: none)
	lo, hi []int   // per-service bounds on the slots' sum
	total  int
	names  []string // service names, for Choice
	budget Budget

	// search state
	steps    int
	deadline time.Time
	out      error
	counts   []int
	choices  []Choice
	last     []int  // last slot holding each service (-1: none)
	inSlot   []bool // scratch: services of the current slot
	capAfter []int  // Σ cap of slots ≥ i (saturating at NoMax)
	failed   map[string]struct{}
	key      []byte
}

const maxMemo = 1 << 20

func (p *countProblem) solve() ([]int, []Choice, error) {
	m, k := len(p.slots), len(p.lo)
	p.budget = p.budget.orDefault()
	p.deadline = time.Now().Add(p.budget.Time)
	p.counts = make([]int, m)
	p.choices = make([]Choice, m)
	p.inSlot = make([]bool, k)
	p.last = make([]int, k)
	for j := range p.last {
		p.last[j] = -1
	}
	for i, s := range p.slots {
		for _, j := range s {
			p.last[j] = i
		}
	}
	p.capAfter = make([]int, m+1)
	for i := m - 1; i >= 0; i-- {
		p.capAfter[i] = min(NoMax, p.capAfter[i+1]+p.slotCap(i))
	}
	p.failed = map[string]struct{}{}
	lo, hi := append([]int(nil), p.lo...), append([]int(nil), p.hi...)
	for j := range hi {
		if hi[j] < 0 || lo[j] > hi[j] {
			return nil, nil, nil
		}
	}
	if p.dfs(0, p.total, lo, hi) {
		return p.counts, p.choices, nil
	}
	return nil, nil, p.out
}

// slotCap is slot i's static limit: its own cap and every service's max.
func (p *countProblem) slotCap(i int) int {
	c := p.cap[i]
	for _, j := range p.slots[i] {
		c = min(c, max(p.hi[j], 0))
	}
	return c
}

// stateKey identifies a search state: the slot, the nodes left and what
// each service may still take (which, less its fixed min-max span, is
// also what it still needs).
func (p *countProblem) stateKey(i, r int, hi []int) string {
	b := p.key[:0]
	b = binary.AppendUvarint(b, uint64(i))
	b = binary.AppendUvarint(b, uint64(r))
	for _, v := range hi {
		b = binary.AppendVarint(b, int64(v))
	}
	p.key = b
	return string(b)
}

// dfs fills slots i.. with r nodes; lo/hi are what each service still
// needs and may still take.
func (p *countProblem) dfs(i, r int, lo, hi []int) bool {
	if p.out != nil {
		return false
	}
	p.steps++
	if p.steps > p.budget.Steps {
		p.out = fmt.Errorf("%w: %d search steps", ErrBudget, p.budget.Steps)
		return false
	}
	if p.steps&4095 == 0 && time.Now().After(p.deadline) {
		p.out = fmt.Errorf("%w: %s", ErrBudget, p.budget.Time)
		return false
	}
	m := len(p.slots)
	if r == 0 {
		for j := range lo {
			if lo[j] > 0 {
				return false
			}
		}
		for x := i; x < m; x++ {
			p.counts[x], p.choices[x] = 0, Choice{Kind: "none"}
		}
		return true
	}
	if i == m || p.capAfter[i] < r {
		return false
	}
	for j := range lo {
		if lo[j] > 0 && (p.last[j] < i || lo[j] > r) {
			return false
		}
	}
	var key string
	if len(p.failed) < maxMemo {
		key = p.stateKey(i, r, hi)
		if _, seen := p.failed[key]; seen {
			return false
		}
	}
	slot := p.slots[i]
	for _, j := range slot {
		p.inSlot[j] = true
	}
	ub, why := r, Choice{Kind: "rest", Bound: r}
	if p.cap[i] < ub {
		ub, why = p.cap[i], Choice{Kind: "cap", Bound: p.cap[i]}
	}
	lb := 0
	for j := range lo {
		if p.inSlot[j] {
			if hi[j] < ub {
				ub, why = hi[j], Choice{Kind: "max", Service: p.names[j], Bound: hi[j]}
			}
			if lo[j] > 0 && p.last[j] == i {
				lb = max(lb, lo[j])
			}
		} else if lo[j] > 0 && r-lo[j] < ub {
			ub, why = r-lo[j], Choice{Kind: "min", Service: p.names[j], Bound: r - lo[j]}
		}
	}
	for _, j := range slot {
		p.inSlot[j] = false
	}
	if rest := p.capAfter[i+1]; rest < NoMax {
		lb = max(lb, r-rest)
	}
	for v := ub; v >= lb && v >= 0; v-- {
		for _, j := range slot {
			lo[j] -= v
			hi[j] -= v
		}
		ok := p.dfs(i+1, r-v, lo, hi)
		for _, j := range slot {
			lo[j] += v
			hi[j] += v
		}
		if ok {
			p.counts[i] = v
			if v < ub {
				why = Choice{Kind: "search", Bound: ub}
			}
			p.choices[i] = why
			return true
		}
		if p.out != nil {
			return false
		}
	}
	if key != "" && len(p.failed) < maxMemo {
		p.failed[key] = struct{}{}
	}
	return false
}

// indexServices numbers the constrained services on the cluster.
func indexServices(c *Constraints, services []string) ([]string, map[string]int) {
	var names []string
	for _, s := range services {
		if _, ok := c.Services[s]; ok {
			names = append(names, s)
		}
	}
	idx := map[string]int{}
	for i, s := range names {
		idx[s] = i
	}
	return names, idx
}

// Usage is what existing nodes already take: their number and how many
// carry each service.
type Usage struct {
	Nodes    int
	Services map[string]int
}

// FindCounts is Coopr's ClusterLayoutFinder: how many nodes of each
// layout (in preference order) make n nodes whose service counts, added
// to the existing nodes' (base, nil: none), satisfy the quantities of the
// services on the cluster. Nil counts and a nil error: no layout exists.
func FindCounts(layouts []Layout, c *Constraints, services []string, n int, base *Usage, b Budget) ([]int, []Choice, error) {
	return newCountProblem(layouts, c, services, n, base, b).solve()
}

func newCountProblem(layouts []Layout, c *Constraints, services []string, n int, base *Usage, b Budget) *countProblem {
	if base == nil {
		base = &Usage{}
	}
	names, idx := indexServices(c, services)
	p := &countProblem{total: n, names: names, budget: b}
	p.lo, p.hi = make([]int, len(names)), make([]int, len(names))
	size := n + base.Nodes // Coopr also bounds a service by the cluster size
	for j, s := range names {
		sc := c.Services[s]
		p.lo[j] = sc.Min - base.Services[s]
		p.hi[j] = min(sc.Max, size) - base.Services[s]
	}
	for _, l := range layouts {
		var slot []int
		for _, s := range l.Services {
			if j, ok := idx[s]; ok {
				slot = append(slot, j)
			}
		}
		p.slots = append(p.slots, slot)
		p.cap = append(p.cap, NoMax)
	}
	return p
}
