package plan

import (
	"fmt"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// bigSpec is nodes nodes in one group carrying services services, each
// service requiring the previous one at install time and at runtime, and
// defining every action: the densest dependency shape per node.
func bigSpec(tb testing.TB, nodes, services int) *spec.Spec {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: big\nprovider: {type: static}\nnodegroups:\n  - name: n\n    count: %d\n    services: [", nodes)
	for i := 0; i < services; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "s%d", i)
	}
	b.WriteString("]\nservices:\n")
	for i := 0; i < services; i++ {
		fmt.Fprintf(&b, "  s%d:\n", i)
		if i > 0 {
			fmt.Fprintf(&b, "    install: {requires: [s%d]}\n    runtime: {requires: [s%d]}\n", i-1, i-1)
		}
		b.WriteString("    actions:\n")
		for _, a := range spec.ServiceActions {
			fmt.Fprintf(&b, "      %s: {type: shell, fields: {script: %s.sh}}\n", a, a)
		}
	}
	s, err := spec.Parse("big.yaml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func benchCreate(b *testing.B, nodes, services int) {
	s := bigSpec(b, nodes, services)
	ns := s.Nodes()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w, err := CooprWork(s, ns, Create, nil)
		if err != nil {
			b.Fatal(err)
		}
		p, err := Build(Input{Spec: s, Nodes: ns, Action: Create, Work: w})
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			b.ReportMetric(float64(len(p.Tasks)), "tasks")
			b.ReportMetric(float64(p.Edges), "edges")
		}
	}
}

// BenchmarkPlanCreate100x10 is the baseline for the 1,000-node figure.
func BenchmarkPlanCreate100x10(b *testing.B) { benchCreate(b, 100, 10) }

// BenchmarkPlanCreate1000x10 is issue 12's target: ≤ 1 s.
func BenchmarkPlanCreate1000x10(b *testing.B) { benchCreate(b, 1000, 10) }

// TestBigPlanShape checks the big plan is what the benchmark claims.
func TestBigPlanShape(t *testing.T) {
	s := bigSpec(t, 50, 10)
	p := cooprPlan(t, s, s.Nodes(), Create, nil)
	// 3 hardware tasks + 4 service tasks × 10 services per node.
	if want := 50 * (3 + 4*10); len(p.Tasks) != want {
		t.Errorf("%d tasks, want %d", len(p.Tasks), want)
	}
	// Levels: CREATE, CONFIRM, BOOTSTRAP, INSTALL s0..s9 (10), CONFIGURE
	// of s9 right after its INSTALL, then INITIALIZE/START chains.
	for _, st := range p.Stages {
		seen := map[string]bool{}
		for _, i := range st {
			if seen[p.Tasks[i].Node] {
				t.Fatalf("stage holds two tasks of node %s", p.Tasks[i].Node)
			}
			seen[p.Tasks[i].Node] = true
		}
	}
	for i, tk := range p.Tasks {
		for _, d := range p.Prereqs(i) {
			if p.Tasks[d].Level >= tk.Level {
				t.Fatalf("task %d (level %d) depends on task %d (level %d)", i, tk.Level, d, p.Tasks[d].Level)
			}
		}
	}
}
