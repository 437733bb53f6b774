package solve

import (
	"strings"
	"testing"
)

// TestDiagnose: the reasons given when no layout exists name the
// constraints and the numbers.
func TestDiagnose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        *Constraints
		services []string
		n        int
		want     string
	}{
		{"min above size", &Constraints{Services: map[string]ServiceConstraint{"zk": {Min: 3, Max: NoMax}}}, []string{"zk", "web"}, 2,
			"no layout of 2 nodes: constraint zk min 3 cannot hold with 2 nodes: it needs 3 nodes carrying zk"},
		{"no layout carries it", &Constraints{MustCoexist: [][]string{{"x", "y"}}, CantCoexist: [][]string{{"x", "y"}},
			Services: map[string]ServiceConstraint{"x": {Min: 1, Max: NoMax}}}, []string{"x", "y"}, 2,
			"no layout of 2 nodes: constraint x min 1 cannot hold: no node layout can carry x (every node holding x breaks a layout rule, e.g. mustcoexist [x, y] on a node of its own)"},
		{"maxes cover every layout", &Constraints{CantCoexist: [][]string{{"a", "b"}},
			Services: map[string]ServiceConstraint{"a": {Min: 0, Max: 1}, "b": {Min: 0, Max: 1}}}, []string{"a", "b"}, 3,
			"no layout of 3 nodes: constraints a max 1, b max 1 cannot all hold with 3 nodes because every node layout the layout rules allow carries one of a, b, which together may be on at most 2 nodes"},
		{"min and max", &Constraints{CantCoexist: [][]string{{"a", "b"}},
			Services: map[string]ServiceConstraint{"a": {Min: 2, Max: NoMax}, "b": {Min: 2, Max: NoMax}, "c": {Min: 0, Max: 1}}}, []string{"a", "b", "c"}, 3,
			"no layout of 3 nodes: constraints a min 2, b min 2 cannot all hold with 3 nodes because the layout rules allow only the node layouts {a,c} {b,c} {a} {b} {c}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			layouts, err := tc.c.NodeLayouts(tc.services, []string{"hw"}, []string{"img"})
			if err != nil {
				t.Fatal(err)
			}
			if counts, _, _ := FindCounts(layouts, tc.c, tc.services, tc.n, nil, Budget{}); counts != nil {
				t.Fatalf("found %v", counts)
			}
			got := Diagnose(layouts, tc.c, tc.services, tc.n, nil, []string{"hw"}, []string{"img"}, Budget{})
			if !strings.Contains(got, tc.want) {
				t.Fatalf("Diagnose:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
