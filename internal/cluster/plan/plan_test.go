package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// cooprPlan builds the plan of one of Coopr's cluster actions.
func cooprPlan(t testing.TB, s *spec.Spec, nodes []spec.Node, action Action, services []string) *Plan {
	t.Helper()
	w, err := CooprWork(s, nodes, action, services)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(Input{Spec: s, Nodes: nodes, Action: action, Work: w})
	if err != nil {
		t.Fatalf("%s %v: %v", action, services, err)
	}
	return p
}

func load(t testing.TB, file string) *spec.Spec {
	t.Helper()
	s, err := spec.LoadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// short renders a stage as "INSTALL dn@2" words: node = last id part,
// services abbreviated.
func short(p *Plan, stage []int) string {
	abbrev := map[string]string{"base": "base", "zookeeper-server": "zk", "hadoop-hdfs-namenode": "nn", "hadoop-hdfs-datanode": "dn"}
	var parts []string
	for _, i := range stage {
		t := p.Tasks[i]
		node := map[string]string{"hdfs-demo-master-1": "N1", "hdfs-demo-data-1": "N2", "hdfs-demo-data-2": "N3"}[t.Node]
		if t.Service != "" {
			parts = append(parts, fmt.Sprintf("%s %s %s", t.Name, abbrev[t.Service], node))
		} else {
			parts = append(parts, fmt.Sprintf("%s %s", t.Name, node))
		}
	}
	return strings.Join(parts, ", ")
}

// TestCooprWorkedExample checks the planner against the worked example of
// reference/coopr-server.md §4.6: 28 tasks, 39 edges, 9 levels, 13 stages
// for CLUSTER_CREATE, and the stage counts of the other jobs.
func TestCooprWorkedExample(t *testing.T) {
	s := load(t, "testdata/hdfs.yaml")
	nodes := s.Nodes()
	p := cooprPlan(t, s, nodes, Create, nil)
	if len(p.Tasks) != 28 || p.Edges != 39 || p.Levels != 9 || len(p.Stages) != 13 {
		t.Errorf("create: %d tasks, %d edges, %d levels, %d stages; want 28, 39, 9, 13", len(p.Tasks), p.Edges, p.Levels, len(p.Stages))
	}
	want := []string{
		"CREATE N1, CREATE N2, CREATE N3",
		"CONFIRM N1, CONFIRM N2, CONFIRM N3",
		"BOOTSTRAP N1, BOOTSTRAP N2, BOOTSTRAP N3",
		"INSTALL base N1, INSTALL base N2, INSTALL base N3",
		"INSTALL dn N2, INSTALL dn N3, INSTALL nn N1",
		"INSTALL zk N1, CONFIGURE base N2, CONFIGURE base N3",
		"CONFIGURE base N1",
		"CONFIGURE dn N2, CONFIGURE dn N3, CONFIGURE nn N1",
		"CONFIGURE zk N1",
		"INITIALIZE nn N1",
		"START zk N1",
		"START nn N1",
		"START dn N2, START dn N3",
	}
	for i, st := range p.Stages {
		if i < len(want) && short(p, st) != want[i] {
			t.Errorf("create stage %d: %s\nwant %s", i+1, short(p, st), want[i])
		}
	}

	for _, c := range []struct {
		action   Action
		services []string
		stages   []string
	}{
		{Delete, nil, []string{"DELETE N1, DELETE N2, DELETE N3"}},
		{Configure, nil, []string{
			"BOOTSTRAP N1, BOOTSTRAP N2, BOOTSTRAP N3",
			"CONFIGURE base N1, CONFIGURE base N2, CONFIGURE base N3",
			"CONFIGURE dn N2, CONFIGURE dn N3, CONFIGURE nn N1",
			"CONFIGURE zk N1"}},
		{ConfigureRestart, nil, []string{
			"BOOTSTRAP N1, BOOTSTRAP N2, BOOTSTRAP N3",
			"CONFIGURE base N1, CONFIGURE base N2, CONFIGURE base N3",
			"STOP dn N2, STOP dn N3, STOP zk N1",
			"CONFIGURE dn N2, CONFIGURE dn N3, CONFIGURE zk N1",
			"STOP nn N1",
			"CONFIGURE nn N1",
			"START zk N1",
			"START nn N1",
			"START dn N2, START dn N3"}},
		{Stop, nil, []string{"STOP dn N2, STOP dn N3, STOP zk N1", "STOP nn N1"}},
		{Start, nil, []string{"START nn N1", "START zk N1", "START dn N2, START dn N3"}},
		{Restart, nil, []string{"STOP dn N2, STOP dn N3, STOP zk N1", "START zk N1", "STOP nn N1", "START nn N1", "START dn N2, START dn N3"}},
		{Stop, []string{"hadoop-hdfs-namenode"}, []string{"STOP dn N2, STOP dn N3", "STOP nn N1"}},
		{Restart, []string{"hadoop-hdfs-datanode"}, []string{"START nn N1, STOP dn N2, STOP dn N3", "START dn N2, START dn N3"}},
	} {
		p := cooprPlan(t, s, nodes, c.action, c.services)
		var got []string
		for _, st := range p.Stages {
			got = append(got, short(p, st))
		}
		if strings.Join(got, " | ") != strings.Join(c.stages, " | ") {
			t.Errorf("%s %v stages:\n got %s\nwant %s", c.action, c.services, strings.Join(got, " | "), strings.Join(c.stages, " | "))
		}
	}
}

// TestDestroyOrder: a destroy's work (STOP of what runs, REMOVE of what is
// installed, DELETE) is ordered dependents first, each node deleted once
// its own services are stopped and removed.
func TestDestroyOrder(t *testing.T) {
	s := load(t, "testdata/hdfs.yaml")
	nodes := s.Nodes()
	all := []string{"hdfs-demo-master-1", "hdfs-demo-data-1", "hdfs-demo-data-2"}
	work := []Work{
		{Task: "STOP", Service: "hadoop-hdfs-datanode", Nodes: all[1:]},
		{Task: "STOP", Service: "hadoop-hdfs-namenode", Nodes: all[:1]},
		{Task: "STOP", Service: "zookeeper-server", Nodes: all[:1]},
		{Task: "DELETE", Nodes: all},
	}
	p, err := Build(Input{Spec: s, Nodes: nodes, Action: Destroy, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range p.Stages {
		got = append(got, short(p, st))
	}
	want := "STOP dn N2, STOP dn N3, STOP zk N1 | STOP nn N1, DELETE N2, DELETE N3 | DELETE N1"
	if strings.Join(got, " | ") != want {
		t.Errorf("destroy stages:\n got %s\nwant %s", strings.Join(got, " | "), want)
	}
	// The same work in another order is the same plan.
	work[0], work[3] = work[3], work[0]
	p2, err := Build(Input{Spec: s, Nodes: nodes, Action: Destroy, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	if p.Digest() != p2.Digest() {
		t.Errorf("the same work in another order gave another plan")
	}
}

// TestRemoveOrder: removing services removes dependents first (the reverse
// of INSTALL's order), each after its own STOP.
func TestRemoveOrder(t *testing.T) {
	s := load(t, "testdata/hdfs.yaml")
	for _, svc := range s.Services {
		svc.Actions["remove"] = svc.Actions["install"]
	}
	nodes := s.Nodes()
	all := []string{"hdfs-demo-master-1", "hdfs-demo-data-1", "hdfs-demo-data-2"}
	work := []Work{
		{Task: "STOP", Service: "hadoop-hdfs-datanode", Nodes: all[1:]},
		{Task: "REMOVE", Service: "hadoop-hdfs-datanode", Nodes: all[1:]},
		{Task: "REMOVE", Service: "base", Nodes: all},
	}
	p, err := Build(Input{Spec: s, Nodes: nodes, Action: RemoveServices, Work: work})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range p.Stages {
		got = append(got, short(p, st))
	}
	want := "STOP dn N2, STOP dn N3 | REMOVE dn N2, REMOVE dn N3 | REMOVE base N1, REMOVE base N2, REMOVE base N3"
	if strings.Join(got, " | ") != want {
		t.Errorf("remove stages:\n got %s\nwant %s", strings.Join(got, " | "), want)
	}
}
