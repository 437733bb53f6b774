package apply

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

// perfSpec is nodes nodes carrying services services s0..sN, each
// requiring the previous one at install time and at runtime, every action
// defined; tag goes into s0's configure fields.
func perfSpec(tb testing.TB, nodes, services int, tag string) *spec.Spec {
	tb.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: perf\nprovider: {type: p}\nconfig: {region: r1}\nnodegroups:\n  - name: n\n    count: %d\n    services: [", nodes)
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
		for _, a := range []string{"install", "configure", "start", "stop", "remove"} {
			args := ""
			if a == "configure" && i == services-1 {
				args = ", args: " + tag
			}
			fmt.Fprintf(&b, "      %s: {type: sh, fields: {script: s%d.sh%s}}\n", a, i, args)
		}
	}
	sp, err := spec.Parse("perf.yaml", []byte(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return sp
}

// applied is the state of a perfSpec cluster after its create.
func applied(tb testing.TB, nodes, services int) (*state.Cluster, *spec.Spec) {
	tb.Helper()
	sp := perfSpec(tb, nodes, services, "a")
	ch, err := Plan(Input{Spec: sp})
	if err != nil {
		tb.Fatal(err)
	}
	cl, job := Begin(nil, ch, time.Now())
	if err := Run(context.Background(), cl, job, Options{Runner: perfRunner{}, Parallelism: 64}); err != nil || job.Status != state.JobComplete {
		tb.Fatalf("create: %v %s", err, job.Message)
	}
	return cl, sp
}

// perfRunner answers every task at once, keeping nothing (a task holds
// every node's properties: keeping 43,000 of them takes gigabytes).
type perfRunner struct{}

func (perfRunner) Run(_ context.Context, id string, data []byte) (*runtime.Result, error) {
	// The task's head (taskBuilder writes taskId, jobId, clusterId,
	// taskName, nodeId first) is enough: decoding the whole task (every
	// node's properties) 43,000 times is what would take the time.
	head := data[:min(len(data), 512)]
	field := func(k string) string {
		_, rest, ok := bytes.Cut(head, []byte(`"`+k+`":"`))
		if !ok {
			return ""
		}
		v, _, _ := bytes.Cut(rest, []byte(`"`))
		return string(v)
	}
	res := &runtime.Result{Result: map[string]any{}}
	switch field("taskName") {
	case "CREATE":
		res.Result["providerid"] = "vm-" + field("nodeId")
	case "CONFIRM":
		res.IPAddresses = map[string]any{"access_v4": "10.0.0.1"}
	}
	return res, nil
}

// TestOneFieldOnHundredNodes: one field of one service (the last of the
// chain: nothing depends on it) changed on 100 nodes runs that service's
// STOP, CONFIGURE and START on each node, and nothing else.
func TestOneFieldOnHundredNodes(t *testing.T) {
	cl, _ := applied(t, 100, 3)
	changed := perfSpec(t, 100, 3, "b")
	ch, err := Plan(Input{Cluster: cl, Spec: changed})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Tasks() != 300 || len(ch.Steps) != 1 {
		t.Fatalf("%d tasks in %d steps, want 300 in 1: %s", ch.Tasks(), len(ch.Steps), ch.Reason)
	}
	for _, tk := range ch.Steps[0].Plan.Tasks {
		if tk.Service != "s2" {
			t.Fatalf("the change runs %s of %s", tk.Name, tk.Service)
		}
	}
	f := &fakeRunner{running: map[string]bool{}}
	cl, job := Begin(cl, ch, time.Now())
	if err := Run(context.Background(), cl, job, Options{Runner: f, Parallelism: 64}); err != nil || job.Status != state.JobComplete {
		t.Fatalf("%v %s", err, job.Message)
	}
	if len(f.log) != 300 {
		t.Errorf("ran %d tasks, want 300", len(f.log))
	}
	if ch := planChange(t, cl, changed, PlanOptions{}); !ch.Empty() {
		t.Errorf("after the change: %s", describe(ch))
	}
}

func benchPlanChange(b *testing.B, nodes int) {
	cl, _ := applied(b, nodes, 10)
	changed := perfSpec(b, nodes, 10, "b")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ch, err := Plan(Input{Cluster: cl, Spec: changed})
		if err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			b.ReportMetric(float64(ch.Tasks()), "tasks")
		}
	}
}

// BenchmarkPlanChange100x10 is the baseline of the 1,000-node figure.
func BenchmarkPlanChange100x10(b *testing.B) { benchPlanChange(b, 100) }

// BenchmarkPlanChange1000x10 plans one field's change against the state of
// a 1,000-node, 10-service cluster (digests of every service on every
// node compared): issue 21's target is ≤ 1 s.
func BenchmarkPlanChange1000x10(b *testing.B) { benchPlanChange(b, 1000) }
