package solve

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// randomTemplate makes a small template: 2-5 services, a few must- and
// cant-coexist groups, quantities, and type whitelists.
func randomTemplate(r *rand.Rand) (*Constraints, []string, []string, []string) {
	all := []string{"a", "b", "c", "d", "e"}
	services := all[:2+r.Intn(4)]
	c := &Constraints{Services: map[string]ServiceConstraint{}}
	pick := func() []string {
		g := []string{}
		for _, s := range services {
			if r.Intn(3) == 0 {
				g = append(g, s)
			}
		}
		if len(g) < 2 {
			g = []string{services[r.Intn(len(services))], services[r.Intn(len(services))]}
			g = slices.Compact(g)
		}
		return g
	}
	for range r.Intn(3) {
		c.CantCoexist = append(c.CantCoexist, pick())
	}
	for range r.Intn(2) {
		c.MustCoexist = append(c.MustCoexist, pick())
	}
	hw, img := []string{"h1", "h2"}[:1+r.Intn(2)], []string{"i1", "i2"}[:1+r.Intn(2)]
	for _, s := range services {
		if r.Intn(2) == 0 {
			continue
		}
		sc := ServiceConstraint{Min: r.Intn(3), Max: NoMax}
		if r.Intn(2) == 0 {
			sc.Max = sc.Min + r.Intn(3)
		}
		if r.Intn(4) == 0 {
			sc.HardwareTypes = []string{hw[r.Intn(len(hw))]}
		}
		if r.Intn(5) == 0 {
			sc.ImageTypes = []string{"i2"}
		}
		c.Services[s] = sc
	}
	return c, services, hw, img
}

// bruteForce returns every composition of n over the layouts that
// satisfies every constraint, in lexicographically decreasing order.
func bruteForce(layouts []Layout, c *Constraints, services []string, n int) [][]int {
	check := newChecker(layouts, c, services, n)
	var out [][]int
	cur := make([]int, len(layouts))
	var rec func(i, r int)
	rec = func(i, r int) {
		if i == len(layouts)-1 {
			cur[i] = r
			if check.valid(cur) {
				out = append(out, slices.Clone(cur))
			}
			return
		}
		for v := r; v >= 0; v-- {
			cur[i] = v
			rec(i+1, r-v)
		}
	}
	if len(layouts) > 0 {
		rec(0, n)
	}
	return out
}

// checker checks a cluster against every constraint, independently of
// the solver: each used layout's service set and types, and each quantity.
type checker struct {
	ok     []bool
	svc    [][]int
	lo, hi []int
	n      int
	per    []int
}

func newChecker(layouts []Layout, c *Constraints, services []string, n int) *checker {
	cluster := map[string]bool{}
	idx := map[string]int{}
	ch := &checker{n: n, per: make([]int, len(services))}
	for i, s := range services {
		cluster[s] = true
		idx[s] = i
		sc, ok := c.Services[s]
		if !ok {
			sc = ServiceConstraint{Max: NoMax}
		}
		ch.lo, ch.hi = append(ch.lo, sc.Min), append(ch.hi, min(sc.Max, n))
	}
	for _, l := range layouts {
		ch.ok = append(ch.ok, c.ValidLayout(l, cluster))
		var sv []int
		for _, s := range l.Services {
			sv = append(sv, idx[s])
		}
		ch.svc = append(ch.svc, sv)
	}
	return ch
}

func (ch *checker) valid(counts []int) bool {
	clear(ch.per)
	total := 0
	for i, k := range counts {
		if k == 0 {
			continue
		}
		if !ch.ok[i] {
			return false
		}
		total += k
		for _, j := range ch.svc[i] {
			ch.per[j] += k
		}
	}
	if total != ch.n {
		return false
	}
	for j, v := range ch.per {
		if v < ch.lo[j] || v > ch.hi[j] {
			return false
		}
	}
	return true
}

func validCounts(layouts []Layout, counts []int, c *Constraints, services []string, n int) bool {
	return newChecker(layouts, c, services, n).valid(counts)
}

// testSeed is LOOM_SOLVE_SEED, or the clock.
func testSeed(t *testing.T) int64 {
	seed := time.Now().UnixNano()
	if s := os.Getenv("LOOM_SOLVE_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("LOOM_SOLVE_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (LOOM_SOLVE_SEED=%d replays it)", seed, seed)
	return seed
}

func TestFindCountsAgainstBruteForce(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewSource(seed))
	found, none, cooprMissed := 0, 0, 0
	for iter := 0; iter < 1500; iter++ {
		c, services, hw, img := randomTemplate(r)
		layouts, err := c.NodeLayouts(services, hw, img)
		if err != nil {
			t.Fatal(err)
		}
		n := 1 + r.Intn(6)
		desc := fmt.Sprintf("seed %d iter %d: constraints %+v services %v n %d layouts %v", seed, iter, *c, services, n, layouts)
		all := bruteForce(layouts, c, services, n)
		counts, _, err := FindCounts(layouts, c, services, n, nil, Budget{})
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		if len(all) == 0 {
			if counts != nil {
				t.Fatalf("%s: brute force finds no layout, FindCounts returned %v", desc, counts)
			}
			none++
			continue
		}
		found++
		if counts == nil {
			t.Fatalf("%s: brute force finds %v, FindCounts none", desc, all[0])
		}
		if !validCounts(layouts, counts, c, services, n) {
			t.Fatalf("%s: FindCounts returned %v, which breaks a constraint", desc, counts)
		}
		if !slices.Equal(counts, all[0]) {
			t.Fatalf("%s: FindCounts returned %v, want the first in Coopr's order %v", desc, counts, all[0])
		}
		cc, _ := CooprFindCounts(layouts, c, services, n, 0)
		if cc == nil {
			cooprMissed++
		} else if !slices.Equal(cc, counts) {
			t.Fatalf("%s: Coopr's walk returns %v, FindCounts %v", desc, cc, counts)
		}
	}
	t.Logf("%d with a layout (%d of them Coopr's greedy start missed), %d without", found, cooprMissed, none)
}

// TestSolveSequences grows, shrinks and adds services to random clusters
// and checks the invariants after every step: the cluster satisfies every
// constraint, a node that stays keeps its services (plus any added), no
// node is added by adding services alone, and when a step is refused the
// brute force agrees for a plain create.
func TestSolveSequences(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewSource(seed))
	for iter := 0; iter < 300; iter++ {
		c, services, hw, img := randomTemplate(r)
		on := services[:1+r.Intn(len(services))]
		size := 1 + r.Intn(6)
		sol, err := Solve(Request{Constraints: c, Services: on, Hardware: hw, Images: img, Size: size})
		if err != nil {
			layouts, _ := c.NodeLayouts(on, hw, img)
			if len(bruteForce(layouts, c, on, size)) > 0 {
				t.Fatalf("seed %d iter %d: Solve refused %d nodes but brute force finds a layout: %v", seed, iter, size, err)
			}
			continue
		}
		nodes := number(sol.Nodes, 1000)
		for step := 0; step < 4; step++ {
			check(t, fmt.Sprintf("seed %d iter %d step %d", seed, iter, step), c, on, nodes)
			next := max(1, len(nodes)+r.Intn(5)-2)
			add := on
			if r.Intn(3) == 0 {
				add = services
			}
			sol, err := Solve(Request{Constraints: c, Services: add, Hardware: hw, Images: img, Size: next, Existing: nodes})
			if err != nil {
				if strings.Contains(err.Error(), "budget") {
					t.Fatalf("seed %d iter %d step %d: %v", seed, iter, step, err)
				}
				continue // refused: the cluster stays as it is
			}
			before := map[int][]string{}
			for _, n := range nodes {
				before[n.Num] = n.Layout.Services
			}
			top := 1000
			for _, n := range nodes {
				top = max(top, n.Num+1)
			}
			for _, n := range sol.Nodes {
				if old, ok := before[n.Num]; ok && n.Num != 0 {
					for _, s := range old {
						if !n.Layout.Has(s) {
							t.Fatalf("seed %d iter %d step %d: node %d lost %s", seed, iter, step, n.Num, s)
						}
					}
				}
			}
			if next == len(nodes) && len(sol.Nodes) != len(nodes) {
				t.Fatalf("seed %d iter %d step %d: adding services changed the node count", seed, iter, step)
			}
			nodes = number(sol.Nodes, top)
			on = add
		}
	}
}

func number(nodes []Node, next int) []Node {
	out := slices.Clone(nodes)
	for i := range out {
		if out[i].Num == 0 {
			out[i].Num = next
			next++
		}
	}
	return out
}

func check(t *testing.T, where string, c *Constraints, services []string, nodes []Node) {
	t.Helper()
	var ls []Layout
	for _, n := range nodes {
		ls = append(ls, n.Layout)
	}
	cl := NewClusterLayout(ls)
	if r := cl.Broken(c); r != "" {
		t.Fatalf("%s: the cluster breaks a constraint: %s", where, r)
	}
	counts := cl.ServiceCounts()
	for _, s := range services {
		if sc, ok := c.Services[s]; ok && counts[s] < sc.Min {
			t.Fatalf("%s: %s on %d nodes, min %d", where, s, counts[s], sc.Min)
		}
	}
}
