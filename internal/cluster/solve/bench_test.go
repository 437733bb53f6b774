package solve

import (
	"slices"
	"testing"
)

// pathological is the reference's legal template that makes Coopr's walk
// visit every composition: services a, b, c, x; x can't coexist with
// each of a, b, c; x min = n. Only the last composition is valid.
func pathological(n int) (*Constraints, []string, []Layout) {
	c := &Constraints{
		CantCoexist: [][]string{{"x", "a"}, {"x", "b"}, {"x", "c"}},
		Services:    map[string]ServiceConstraint{"x": {Min: n, Max: NoMax}},
	}
	services := []string{"a", "b", "c", "x"}
	layouts, err := c.NodeLayouts(services, []string{"hw"}, []string{"img"})
	if err != nil {
		panic(err)
	}
	return c, services, layouts
}

// TestPathological checks both searches agree on the pathological
// template and how many candidates Coopr's walk visits: C(n+7, 7).
func TestPathological(t *testing.T) {
	for _, tc := range []struct{ n, visits int }{{5, 792}, {10, 19448}, {15, 170544}} {
		c, services, layouts := pathological(tc.n)
		got, _, err := FindCounts(layouts, c, services, tc.n, nil, Budget{})
		if err != nil {
			t.Fatal(err)
		}
		want, visits := CooprFindCounts(layouts, c, services, tc.n, 0)
		if !slices.Equal(got, want) || visits != tc.visits {
			t.Fatalf("n=%d: FindCounts %v, Coopr %v after %d visits (want %d)", tc.n, got, want, visits, tc.visits)
		}
	}
	// 100 nodes: Coopr's walk would visit ~2.6e10 candidates.
	c, services, layouts := pathological(100)
	p := newCountProblem(layouts, c, services, 100, nil, Budget{})
	counts, _, err := p.solve()
	if err != nil || counts[len(counts)-1] != 100 {
		t.Fatalf("n=100: %v, %v", counts, err)
	}
	if p.steps > 20 {
		t.Fatalf("n=100: %d search steps, want a handful", p.steps)
	}
}

func BenchmarkPathological15(b *testing.B) {
	c, services, layouts := pathological(15)
	b.Run("coopr-walk", func(b *testing.B) {
		for b.Loop() {
			if counts, _ := CooprFindCounts(layouts, c, services, 15, 0); counts == nil {
				b.Fatal("no layout")
			}
		}
	})
	b.Run("loom", func(b *testing.B) {
		for b.Loop() {
			if counts, _, _ := FindCounts(layouts, c, services, 15, nil, Budget{}); counts == nil {
				b.Fatal("no layout")
			}
		}
	})
}

// big is a 20-service hadoop-like template: 13 constrained services
// (masters with min/max 1, a zookeeper quorum, slaves with min 2, layout
// groups) and 7 unconstrained ones.
func big() (*Constraints, []string) {
	c := &Constraints{
		MustCoexist: [][]string{{"datanode", "nodemanager", "regionserver"}, {"namenode", "resourcemanager"}},
		CantCoexist: [][]string{{"namenode", "secondarynamenode"}, {"resourcemanager", "nodemanager"}, {"namenode", "datanode"},
			{"datanode", "mysql"}, {"hbase-master", "regionserver"}, {"zookeeper", "datanode"}, {"hive-metastore", "datanode"},
			{"oozie", "datanode"}, {"hue", "datanode"}},
		Services: map[string]ServiceConstraint{
			"namenode": {Min: 1, Max: 1}, "secondarynamenode": {Min: 1, Max: 1}, "resourcemanager": {Min: 1, Max: 1},
			"historyserver": {Min: 1, Max: 1}, "hbase-master": {Min: 1, Max: 2}, "zookeeper": {Min: 3, Max: 3},
			"hive-metastore": {Min: 0, Max: 1}, "mysql": {Min: 1, Max: 1}, "oozie": {Min: 0, Max: 1}, "hue": {Min: 0, Max: 1},
			"datanode": {Min: 2, Max: NoMax}, "nodemanager": {Min: 2, Max: NoMax}, "regionserver": {Min: 0, Max: NoMax},
		},
	}
	services := []string{"base", "firewall", "hosts", "ntp", "java", "kerberos-client", "hadoop-client",
		"namenode", "secondarynamenode", "resourcemanager", "historyserver", "hbase-master", "zookeeper",
		"hive-metastore", "mysql", "oozie", "hue", "datanode", "nodemanager", "regionserver"}
	return c, services
}

// TestBigTemplate solves the 1,000-node, 20-service template and checks
// the layout against every constraint.
func TestBigTemplate(t *testing.T) {
	c, services := big()
	sol, err := Solve(Request{Constraints: c, Services: services, Hardware: []string{"large", "medium", "small"}, Images: []string{"centos", "ubuntu"}, Size: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []Layout
	for _, n := range sol.Nodes {
		nodes = append(nodes, n.Layout)
	}
	if len(nodes) != 1000 {
		t.Fatalf("%d nodes", len(nodes))
	}
	if r := NewClusterLayout(nodes).Broken(c); r != "" {
		t.Fatalf("the layout breaks a constraint: %s", r)
	}
	t.Logf("%d layouts considered; rows %v", sol.Considered, sol.Rows)
}

func BenchmarkBigTemplate1000(b *testing.B) {
	c, services := big()
	req := Request{Constraints: c, Services: services, Hardware: []string{"large", "medium", "small"}, Images: []string{"centos", "ubuntu"}, Size: 1000}
	b.Run("solve", func(b *testing.B) {
		for b.Loop() {
			if _, err := Solve(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	layouts, err := c.NodeLayouts(services, req.Hardware, req.Images)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("coopr-walk", func(b *testing.B) {
		for b.Loop() {
			if counts, _ := CooprFindCounts(layouts, c, services, 1000, 0); counts == nil {
				b.Fatal("no layout")
			}
		}
	})
	b.Run("loom-counts", func(b *testing.B) {
		for b.Loop() {
			if counts, _, _ := FindCounts(layouts, c, services, 1000, nil, Budget{}); counts == nil {
				b.Fatal("no layout")
			}
		}
	})
}
