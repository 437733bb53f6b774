package solve

// Coopr's own solver tests (cdapio/coopr, coopr-server/src/test/java/
// co/cask/coopr/layout/), ported as table tests with their expected
// layouts.

import (
	"fmt"
	"slices"
	"testing"
)

func set(s ...string) []string { return s }

// reactorTemplate is BaseSolverTest's reactor-medium template.
func reactorConstraints() *Constraints {
	return &Constraints{
		MustCoexist: [][]string{{"datanode", "nodemanager", "regionserver"}, {"namenode", "resourcemanager", "hbasemaster"}},
		CantCoexist: [][]string{{"datanode", "namenode"}, {"datanode", "zookeeper"}, {"namenode", "zookeeper"}, {"datanode", "reactor"}, {"namenode", "reactor"}},
		Services: map[string]ServiceConstraint{
			"namenode":  {Min: 1, Max: 1, HardwareTypes: set("large-mem"), ImageTypes: set("centos6", "ubuntu12")},
			"datanode":  {Min: 1, Max: 50, HardwareTypes: set("medium", "large-cpu"), ImageTypes: set("centos6", "ubuntu12")},
			"zookeeper": {Min: 1, Max: 5, HardwareTypes: set("small", "medium"), ImageTypes: set("centos6")},
			"reactor":   {Min: 1, Max: 5, HardwareTypes: set("medium", "large")},
		},
	}
}

var reactorServices = set("namenode", "datanode", "resourcemanager", "nodemanager", "hbasemaster", "regionserver", "zookeeper", "reactor")

// reactor2Constraints is Entities.ClusterTemplateExample.REACTOR2.
func reactor2Constraints() (*Constraints, []string) {
	return &Constraints{
			MustCoexist: [][]string{{"hadoop-hdfs-datanode", "hadoop-yarn-nodemanager", "hbase-regionserver"}},
			CantCoexist: [][]string{{"hadoop-hdfs-namenode", "hadoop-hdfs-secondarynamenode"}, {"hadoop-yarn-resourcemanager", "hadoop-yarn-nodemanager"},
				{"hadoop-hdfs-namenode", "hadoop-hdfs-datanode"}, {"hadoop-hdfs-datanode", "mysql-server"}, {"hbase-master", "hbase-regionserver"}},
			Services: map[string]ServiceConstraint{
				"hadoop-hdfs-namenode":        {Min: 1, Max: 1},
				"hadoop-yarn-resourcemanager": {Min: 1, Max: 1},
				"zookeeper-server":            {Min: 1, Max: 1},
				"hbase-master":                {Min: 0, Max: 1},
				"reactor":                     {Min: 0, Max: 1},
			},
		}, set("firewall", "hosts", "hadoop-hdfs-datanode", "hadoop-hdfs-namenode", "hadoop-yarn-nodemanager", "hadoop-yarn-resourcemanager",
			"zookeeper-server", "hbase-master", "hbase-regionserver", "reactor")
}

// hadoopDistributedConstraints is Entities.ClusterTemplateExample.HADOOP_DISTRIBUTED.
func hadoopDistributedConstraints() *Constraints {
	return &Constraints{
		MustCoexist: [][]string{{"datanode", "nodemanager", "regionserver"}},
		CantCoexist: [][]string{{"namenode", "secondarynamenode"}, {"resourcemanager", "nodemanager"}, {"namenode", "datanode"},
			{"datanode", "mysql-server"}, {"datanode", "reactor"}, {"hbasemaster", "regionserver"}},
		Services: map[string]ServiceConstraint{
			"namenode": {Min: 1, Max: 1}, "resourcemanager": {Min: 1, Max: 1}, "zookeeper": {Min: 1, Max: 1},
			"hbasemaster": {Min: 0, Max: NoMax}, "reactor": {Min: 0, Max: 1},
		},
	}
}

func lay(hw, img string, s ...string) Layout { return NewLayout(hw, img, s) }

// NodeLayoutGeneratorTest#testIsValidServiceSet
func TestCooprIsValidServiceSet(t *testing.T) {
	c := reactorConstraints()
	on := map[string]bool{}
	for _, s := range set("namenode", "datanode", "regionserver", "nodemanager", "hbasemaster", "reactor", "zookeeper") {
		on[s] = true
	}
	for _, tc := range []struct {
		set  []string
		want bool
	}{
		{set("datanode", "regionserver", "nodemanager"), true},
		{set("namenode", "resourcemanager", "hbasemaster"), true},
		{set("reactor", "zookeeper"), true},
		{set("reactor"), true},
		{set("zookeeper"), true},
		{set("datanode"), false},
		{set("datanode", "nodemanager"), false},
		{set("namenode"), false},
		{set("namenode", "resourcemanager"), false},
		{set("namenode", "datanode"), false},
		{set("reactor", "datanode"), false},
		{set("zookeeper", "datanode"), false},
	} {
		if got := c.ValidServiceSet(tc.set, on); got != tc.want {
			t.Errorf("ValidServiceSet(%v) = %v, want %v", tc.set, got, tc.want)
		}
	}
}

// NodeLayoutGeneratorTest#testIsValidNodeLayout
func TestCooprIsValidNodeLayout(t *testing.T) {
	c := reactorConstraints()
	master, slave := set("namenode", "resourcemanager", "hbasemaster"), set("datanode", "nodemanager", "regionserver")
	for _, tc := range []struct {
		l    Layout
		want bool
	}{
		{lay("large-mem", "centos6", master...), true},
		{lay("large-mem", "ubuntu12", master...), true},
		{lay("medium", "centos6", slave...), true},
		{lay("medium", "ubuntu12", slave...), true},
		{lay("large-cpu", "centos6", slave...), true},
		{lay("large-cpu", "ubuntu12", slave...), true},
		{lay("small", "centos6", "zookeeper"), true},
		{lay("medium", "centos6", "zookeeper"), true},
		{lay("large", "centos6", "reactor"), true},
		{lay("medium", "centos6", "reactor"), true},
		{lay("large", "ubuntu12", "reactor"), true},
		{lay("medium", "ubuntu12", "reactor"), true},
		{lay("medium", "asdf", "reactor"), true}, // no image constraint for reactor
		{lay("medium", "centos6", "reactor", "zookeeper"), true},
		{lay("large", "centos6", master...), false},
		{lay("large", "asdf", master...), false},
		{lay("large-mem", "ubuntu12", "reactor", "zookeeper"), false},
	} {
		if got := c.SatisfiesServiceConstraints(tc.l); got != tc.want {
			t.Errorf("SatisfiesServiceConstraints(%v) = %v, want %v", tc.l, got, tc.want)
		}
	}
}

// NodeLayoutGeneratorTest#testGetValidServiceSets
func TestCooprValidServiceSets(t *testing.T) {
	sets, err := reactorConstraints().ServiceSets(reactorServices)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"datanode", "nodemanager", "regionserver"}, {"hbasemaster", "namenode", "resourcemanager"},
		{"reactor", "zookeeper"}, {"reactor"}, {"zookeeper"},
	}
	if fmt.Sprint(sets) != fmt.Sprint(want) {
		t.Fatalf("ServiceSets = %v, want %v", sets, want)
	}
}

// NodeLayoutGeneratorTest#testGetValidNodeLayouts
func TestCooprValidNodeLayouts(t *testing.T) {
	c := reactorConstraints()
	sets, _ := c.ServiceSets(reactorServices)
	got := c.ValidLayouts(sets, set("small", "medium", "large", "large-cpu", "large-mem"), set("centos6", "ubuntu12", "sl6"))
	want := []Layout{
		lay("large-mem", "centos6", "namenode", "resourcemanager", "hbasemaster"),
		lay("large-mem", "ubuntu12", "namenode", "resourcemanager", "hbasemaster"),
		lay("medium", "centos6", "datanode", "nodemanager", "regionserver"),
		lay("medium", "ubuntu12", "datanode", "nodemanager", "regionserver"),
		lay("large-cpu", "centos6", "datanode", "nodemanager", "regionserver"),
		lay("large-cpu", "ubuntu12", "datanode", "nodemanager", "regionserver"),
		lay("medium", "centos6", "reactor", "zookeeper"),
		lay("small", "centos6", "zookeeper"),
		lay("medium", "centos6", "zookeeper"),
		lay("medium", "centos6", "reactor"),
		lay("large", "centos6", "reactor"),
		lay("medium", "ubuntu12", "reactor"),
		lay("large", "ubuntu12", "reactor"),
		lay("medium", "sl6", "reactor"),
		lay("large", "sl6", "reactor"),
	}
	keys := func(ls []Layout) []string {
		var k []string
		for _, l := range ls {
			k = append(k, l.String())
		}
		slices.Sort(k)
		return k
	}
	if !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("ValidLayouts =\n%v\nwant\n%v", keys(got), keys(want))
	}
}

// NodeLayoutGeneratorTest#testNarrowNodeLayouts
func TestCooprNarrowNodeLayouts(t *testing.T) {
	m := set("namenode", "resourcemanager", "hbasemaster")
	input := []Layout{
		lay("medium", "centos6", m...), lay("medium", "sl6", m...), lay("large", "centos6", m...),
		lay("large", "ubuntu12", m...), lay("large", "sl6", m...),
		lay("small", "centos6", "zookeeper"), lay("medium", "centos6", "zookeeper"), lay("large", "centos6", "zookeeper"),
		lay("huge", "centos6", "zookeeper"), lay("huge", "ubuntu12", "zookeeper"), lay("small", "ubuntu12", "zookeeper"),
		lay("small", "sl6", "zookeeper"),
	}
	for _, tc := range []struct {
		cmp  Comparator
		want []Layout
	}{
		{Comparator{}, []Layout{lay("large", "centos6", m...), lay("huge", "centos6", "zookeeper")}},
		{Comparator{HardwarePreference: set("small", "medium")}, []Layout{lay("medium", "centos6", m...), lay("small", "centos6", "zookeeper")}},
		{Comparator{ImagePreference: set("sl6", "ubuntu12")}, []Layout{lay("large", "sl6", m...), lay("small", "sl6", "zookeeper")}},
		{Comparator{HardwarePreference: set("small", "medium", "large", "huge"), ImagePreference: set("ubuntu12", "sl6", "centos6")},
			[]Layout{lay("medium", "sl6", m...), lay("small", "ubuntu12", "zookeeper")}},
	} {
		if got := Narrow(input, tc.cmp); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Narrow(%+v) = %v, want %v", tc.cmp, got, tc.want)
		}
	}
}

// NodeLayoutGeneratorTest#testGetUnconstrainedService
func TestCooprUnconstrainedServices(t *testing.T) {
	c, services := reactor2Constraints()
	if got := c.Unconstrained(services); !slices.Equal(got, set("firewall", "hosts")) {
		t.Fatalf("Unconstrained = %v, want [firewall hosts]", got)
	}
}

// NodeLayoutGeneratorTest#testNodesMustHaveServices and
// ClusterLayoutFinderTest#testNoSolutionReturnsNull
func TestCooprNodesMustHaveServices(t *testing.T) {
	c := &Constraints{MustCoexist: [][]string{{"svc1", "svc2", "svc3"}}, Services: map[string]ServiceConstraint{"svc1": {Min: 1, Max: 1}}}
	services := set("svc1", "svc2", "svc3")
	layouts, err := c.NodeLayouts(services, set("small"), set("centos6"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Layout{lay("small", "centos6", "svc1", "svc2", "svc3")}; fmt.Sprint(layouts) != fmt.Sprint(want) {
		t.Fatalf("NodeLayouts = %v, want %v", layouts, want)
	}
	counts, _, err := FindCounts(layouts, c, services, 2, nil, Budget{})
	if err != nil || counts != nil {
		t.Fatalf("FindCounts(2 nodes) = %v, %v; want no layout", counts, err)
	}
	msg := Diagnose(layouts, c, services, 2, nil, set("small"), set("centos6"), Budget{})
	if want := "no layout of 2 nodes: constraint svc1 max 1 cannot hold with 2 nodes because every node layout the layout rules allow carries svc1, so all 2 new nodes would"; msg != want {
		t.Fatalf("Diagnose = %q\nwant %q", msg, want)
	}
}

var finderLayouts = []Layout{
	lay("large-mem", "centos6", "namenode", "resourcemanager", "hbasemaster"),
	lay("large-cpu", "centos6", "datanode", "nodemanager", "regionserver"),
	lay("medium", "centos6", "reactor", "zookeeper"),
	lay("medium", "centos6", "zookeeper"),
	lay("large", "centos6", "reactor"),
}

// ClusterLayoutFinderTest#testIsValidCluster (quantities only, as Coopr's
// isValidCluster).
func TestCooprIsValidCluster(t *testing.T) {
	c := reactorConstraints()
	for _, tc := range []struct {
		counts []int
		n      int
		want   bool
	}{
		{[]int{1, 1, 1, 0, 0}, 3, true}, {[]int{1, 1, 0, 1, 1}, 4, true}, {[]int{1, 3, 1, 0, 0}, 5, true},
		{[]int{1, 2, 0, 1, 1}, 5, true}, {[]int{1, 1, 0, 1, 2}, 5, true}, {[]int{1, 5, 1, 0, 0}, 7, true},
		{[]int{1, 4, 0, 1, 1}, 7, true}, {[]int{1, 3, 0, 1, 2}, 7, true}, {[]int{1, 2, 0, 1, 3}, 7, true},
		{[]int{1, 1, 0, 1, 4}, 7, true}, {[]int{1, 3, 3, 0, 0}, 7, true}, {[]int{1, 1, 5, 0, 0}, 7, true},
		{[]int{1, 50, 3, 0, 0}, 54, true},
		{[]int{1, 1, 0, 1, 0}, 3, false},   // reactor min
		{[]int{1, 1, 0, 0, 1}, 3, false},   // zookeeper min
		{[]int{0, 1, 0, 1, 1}, 3, false},   // namenode min
		{[]int{1, 0, 1, 0, 1}, 3, false},   // datanode min
		{[]int{2, 1, 1, 0, 0}, 4, false},   // namenode max
		{[]int{1, 4, 10, 0, 0}, 15, false}, // zookeeper max
		{[]int{1, 52, 1, 0, 0}, 54, false}, // datanode max
	} {
		if got := newChecker(finderLayouts, c, reactorServices, tc.n).valid(tc.counts); got != tc.want {
			t.Errorf("%v on %d nodes: valid = %v, want %v", tc.counts, tc.n, got, tc.want)
		}
	}
}

// ClusterLayoutFinderTest#testGetClusterNodes: the layouts in the test's
// own order.
func TestCooprGetClusterNodes(t *testing.T) {
	c := reactorConstraints()
	for _, tc := range []struct {
		n    int
		want []int
	}{{5, []int{1, 3, 1, 0, 0}}, {10, []int{1, 8, 1, 0, 0}}, {54, []int{1, 50, 3, 0, 0}}} {
		got, _, err := FindCounts(finderLayouts, c, reactorServices, tc.n, nil, Budget{})
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("FindCounts(%d) = %v, %v; want %v", tc.n, got, err, tc.want)
		}
		if cc, _ := CooprFindCounts(finderLayouts, c, reactorServices, tc.n, 0); !slices.Equal(cc, tc.want) {
			t.Errorf("CooprFindCounts(%d) = %v, want %v", tc.n, cc, tc.want)
		}
	}
}

// countSets tallies a solution's nodes by service set.
func countSets(sol *Solution) map[string]int {
	out := map[string]int{}
	for _, n := range sol.Nodes {
		out[fmt.Sprint(n.Layout.Services)]++
	}
	return out
}

// SolverTest#testEndToEnd, testServiceConstraintsDontApplyWhenServiceNotOnCluster, testSolveReactor
func TestCooprSolve(t *testing.T) {
	r2, r2services := reactor2Constraints()
	for _, tc := range []struct {
		name     string
		c        *Constraints
		services []string
		hw, img  []string
		n        int
		want     map[string]int
	}{
		{"testEndToEnd", reactorConstraints(), reactorServices, set("small", "medium", "large-mem", "large-cpu"), set("centos6", "ubuntu12"), 5,
			map[string]int{"[hbasemaster namenode resourcemanager]": 1, "[datanode nodemanager regionserver]": 3, "[reactor zookeeper]": 1}},
		{"testServiceConstraintsDontApplyWhenServiceNotOnCluster", hadoopDistributedConstraints(),
			set("firewall", "hosts", "namenode", "datanode", "nodemanager", "resourcemanager"), set("medium"), set("ubuntu12"), 3,
			map[string]int{"[firewall hosts namenode resourcemanager]": 1, "[datanode firewall hosts nodemanager]": 2}},
		{"testSolveReactor", r2, r2services, set("small", "medium", "large"), set("centos6", "ubuntu12"), 200,
			map[string]int{
				"[firewall hadoop-hdfs-datanode hadoop-yarn-nodemanager hbase-regionserver hosts]":                          198,
				"[firewall hadoop-hdfs-datanode hadoop-yarn-nodemanager hbase-regionserver hosts reactor zookeeper-server]": 1,
				"[firewall hadoop-hdfs-namenode hadoop-yarn-resourcemanager hbase-master hosts]":                            1,
			}},
		{"docs example (implementation.rst)", &Constraints{
			CantCoexist: [][]string{{"s1", "s2"}, {"s2", "s3"}}, MustCoexist: [][]string{{"s1", "s3"}},
			Services: map[string]ServiceConstraint{"s1": {Min: 0, Max: 1}, "s2": {Min: 1, Max: NoMax}},
		}, set("s1", "s2", "s3"), set("hw"), set("img"), 5, map[string]int{"[s1 s3]": 1, "[s2]": 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sol, err := Solve(Request{Constraints: tc.c, Services: tc.services, Hardware: tc.hw, Images: tc.img, Size: tc.n})
			if err != nil {
				t.Fatal(err)
			}
			if got := countSets(sol); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("layout %v, want %v", got, tc.want)
			}
		})
	}
}

// hadoop51 is ClusterLayoutUpdaterTest's cluster: 1 namenode on
// large-mem, 50 datanodes on medium, all centos6.
func hadoop51() []Node {
	nodes := []Node{{Num: 1000, Layout: lay("large-mem", "centos6", "namenode")}}
	for i := range 50 {
		nodes = append(nodes, Node{Num: 1001 + i, Layout: lay("medium", "centos6", "datanode")})
	}
	return nodes
}

// ClusterLayoutUpdaterTest (add services to a running cluster)
func TestCooprAddServices(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  []string
		want map[string]int // nil: no solution
	}{
		{"testAddService", set("resourcemanager"), map[string]int{"[namenode resourcemanager]": 1, "[datanode]": 50}},
		{"testAddServices", set("resourcemanager", "nodemanager", "hbasemaster", "regionserver"),
			map[string]int{"[hbasemaster namenode resourcemanager]": 1, "[datanode nodemanager regionserver]": 50}},
		{"testNoSolutionReturnsNull", set("zookeeper"), nil},
		{"testNoSolutionWithMixedServicesReturnsNull", set("resourcemanager", "nodemanager", "zookeeper"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			services := append(set("namenode", "datanode"), tc.add...)
			sol, err := Solve(Request{Constraints: reactorConstraints(), Services: services, Size: 51, Existing: hadoop51()})
			if tc.want == nil {
				if err == nil {
					t.Fatalf("want no solution, got %v", countSets(sol))
				}
				t.Log(err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := countSets(sol); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("layout %v, want %v", got, tc.want)
			}
			for _, n := range sol.Nodes {
				if n.Num == 0 {
					t.Fatalf("adding services added node %v", n)
				}
			}
		})
	}
}

// AddServiceChangeIteratorTest: the changes Coopr tries, in order.
func TestCooprAddServiceChangeOrder(t *testing.T) {
	c := &Constraints{
		MustCoexist: [][]string{{"slave1", "slave2"}},
		CantCoexist: [][]string{{"master1", "slave1"}, {"master1", "slave2"}},
		Services: map[string]ServiceConstraint{
			"master1": {Min: 1, Max: 1, HardwareTypes: set("large"), ImageTypes: set("centos6", "ubuntu12")},
			"slave1":  {Min: 1, Max: 50, HardwareTypes: set("medium"), ImageTypes: set("centos6", "ubuntu12")},
			"slave2":  {Min: 1, Max: 50, HardwareTypes: set("medium"), ImageTypes: set("centos6", "ubuntu12")},
			"base":    {Min: 0, Max: 50, ImageTypes: set("centos6", "ubuntu12")},
			"app":     {Min: 1, Max: 50, HardwareTypes: set("medium"), ImageTypes: set("centos6", "ubuntu12")},
		},
	}
	master := lay("large", "centos6", "master1")
	changes := func(nodes []Layout, svc string) []string {
		cl := NewClusterLayout(nodes)
		s := &adder{cl: cl, c: c}
		exp := s.expandable(svc)
		var out []string
		eachChange(cl, c, exp, svc, func(counts []int) bool {
			var parts []string
			for i, k := range counts {
				parts = append(parts, fmt.Sprintf("%s:%d", exp[i].Services, k))
			}
			out = append(out, fmt.Sprint(parts))
			return true
		})
		return out
	}
	slave := lay("medium", "centos6", "slave1")
	if got := changes([]Layout{master, slave}, "slave2"); fmt.Sprint(got) != "[[[slave1]:1]]" {
		t.Errorf("testSimpleIterator: %v", got)
	}
	if got := changes([]Layout{master, slave, slave, slave, slave, slave}, "slave2"); fmt.Sprint(got) != "[[[slave1]:5] [[slave1]:4] [[slave1]:3] [[slave1]:2] [[slave1]:1]]" {
		t.Errorf("testMultiSlaveNodeIterator: %v", got)
	}
	slaves := lay("medium", "centos6", "slave1", "slave2")
	app := lay("medium", "centos6", "app")
	got := changes([]Layout{master, slaves, slaves, slaves, app, app}, "base")
	// slave, master, app
	want := [][3]int{
		{3, 1, 2},
		{3, 1, 1}, {3, 0, 2}, {2, 1, 2},
		{3, 1, 0}, {3, 0, 1}, {2, 1, 1}, {2, 0, 2}, {1, 1, 2},
		{3, 0, 0}, {2, 1, 0}, {2, 0, 1}, {1, 1, 1}, {1, 0, 2}, {0, 1, 2},
		{2, 0, 0}, {1, 1, 0}, {1, 0, 1}, {0, 1, 1}, {0, 0, 2},
		{1, 0, 0}, {0, 1, 0}, {0, 0, 1},
	}
	var ws []string
	for _, w := range want {
		ws = append(ws, fmt.Sprint([]string{fmt.Sprintf("[slave1 slave2]:%d", w[0]), fmt.Sprintf("[master1]:%d", w[1]), fmt.Sprintf("[app]:%d", w[2])}))
	}
	if fmt.Sprint(got) != fmt.Sprint(ws) {
		t.Errorf("testMultiNodeIterator:\n got %v\nwant %v", got, ws)
	}
}

// SlottedCombinationIteratorTest
func TestCooprSlottedIterator(t *testing.T) {
	all := func(it *slottedIterator) string {
		var out [][]int
		for it.hasNext() {
			out = append(out, it.next())
		}
		return fmt.Sprint(out)
	}
	nomax := func(n int) []int {
		m := make([]int, n)
		for i := range m {
			m[i] = NoMax
		}
		return m
	}
	for _, tc := range []struct {
		name string
		it   *slottedIterator
		want string
	}{
		{"testTwoSlotsWithoutMaxCounts", newSlotted(2, 4, nomax(2)), "[[4 0] [3 1] [2 2] [1 3] [0 4]]"},
		{"testThreeSlotsWithoutMaxCounts", newSlotted(3, 3, nomax(3)), "[[3 0 0] [2 1 0] [2 0 1] [1 2 0] [1 1 1] [1 0 2] [0 3 0] [0 2 1] [0 1 2] [0 0 3]]"},
		{"testThreeSlotsWithMaxCounts", newSlotted(3, 3, []int{5, 1, 5}), "[[3 0 0] [2 1 0] [2 0 1] [1 1 1] [1 0 2] [0 1 2] [0 0 3]]"},
		{"testMaxCountZero", newSlotted(5, 2, []int{0, 2, 1, 0, 0}), "[[0 2 0 0 0] [0 1 1 0 0]]"},
		{"testCarryAndSkipWithZero", newSlotted(4, 5, []int{100, 1, 2, 0}), "[[5 0 0 0] [4 1 0 0] [4 0 1 0] [3 1 1 0] [3 0 2 0] [2 1 2 0]]"},
		{"testCarryAndSkipWithZeroAndInitialState", newSlottedFrom([]int{3, 1, 1, 0}, []int{100, 1, 2, 0}), "[[3 1 1 0] [3 0 2 0] [2 1 2 0]]"},
		{"testInitialStateNotUsedEvenWhenInvalid", newSlottedFrom([]int{5, 0}, []int{1, 5}), "[[1 4] [0 5]]"},
		{"testWrapAround", newSlotted(6, 3, []int{1, 1, 1, 1, 1, 1}), "[[1 1 1 0 0 0] [1 1 0 1 0 0] [1 1 0 0 1 0] [1 1 0 0 0 1] [1 0 1 1 0 0] [1 0 1 0 1 0] [1 0 1 0 0 1] [1 0 0 1 1 0] [1 0 0 1 0 1] [1 0 0 0 1 1] [0 1 1 1 0 0] [0 1 1 0 1 0] [0 1 1 0 0 1] [0 1 0 1 1 0] [0 1 0 1 0 1] [0 1 0 0 1 1] [0 0 1 1 1 0] [0 0 1 1 0 1] [0 0 1 0 1 1] [0 0 0 1 1 1]]"},
	} {
		if got := all(tc.it); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
