package coopr_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/coopr/coopfake"
)

// metric reads one series from reg: name and its label values in label
// order ("tenant", "outcome"...); -1 when absent.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// TestMetrics: the Coopr loops' counters follow what happened: takes,
// tasks, finishes by outcome (a 503 retried, a dropped answer that turns
// into a 417 duplicate), heartbeats, registration, resource syncs, and
// the per-tenant worker gauge, which goes with a deleted tenant.
func TestMetrics(t *testing.T) {
	m := coopr.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	var logs syncBuffer
	srv, p := start(t, coopr.Config{Runner: &runner{}, Tenants: map[string]int{"t": 1}, Metrics: m, Logger: logTo(&logs), WorkDir: t.TempDir()})
	defer func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	}()
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", Status: 503})
	srv.Enqueue("t", task("m-1"))
	if _, err := srv.WaitFinished(ctx(t), "m-1"); err != nil {
		t.Fatal(err)
	}
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", DropAfter: true})
	srv.Enqueue("t", task("m-2"))
	if _, err := srv.WaitFinished(ctx(t), "m-2"); err != nil {
		t.Fatal(err)
	}
	tenant := func(kv ...string) map[string]string {
		l := map[string]string{"tenant": "t"}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	eventually(t, "the duplicate finish counted", func() bool {
		return metric(t, reg, "loom_coopr_finishes_total", tenant("outcome", "duplicate")) == 1
	})
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"loom_coopr_takes_total", tenant("outcome", "task"), 2},
		{"loom_coopr_tasks_total", tenant("status", "succeeded"), 2},
		{"loom_coopr_tasks_running", tenant(), 0},
		{"loom_coopr_finishes_total", tenant("outcome", "delivered"), 1},
		{"loom_coopr_finish_retries_total", tenant(), 2},
		{"loom_coopr_finishes_pending", nil, 0},
		{"loom_coopr_workers", tenant(), 1},
		{"loom_coopr_registered", nil, 1},
	} {
		if got := metric(t, reg, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// A take racing the first registration gets 403 and registers again.
	if metric(t, reg, "loom_coopr_registrations_total", map[string]string{"outcome": "ok"}) < 1 {
		t.Error("no registration counted")
	}
	if metric(t, reg, "loom_coopr_takes_total", tenant("outcome", "empty")) < 1 {
		t.Error("no empty take counted")
	}
	eventually(t, "a heartbeat counted", func() bool {
		return metric(t, reg, "loom_coopr_heartbeats_total", map[string]string{"outcome": "ok"}) >= 1
	})

	// A sync naming a resource the server does not have fails (and says
	// so in the log); one it has succeeds.
	api := "http://" + p.APIAddr()
	srv.SetResource("t", "automatortypes", "shell", "scripts", "ok.sh", 1, []byte("#!/bin/sh\n"))
	res := func(name string) map[string]any {
		return map[string]any{"automatortypes": map[string]any{"shell": map[string]any{"scripts": map[string]any{
			"format": "file", "active": []any{map[string]any{"name": name, "version": 1}}}}}}
	}
	if _, err := coopfake.PutTenant(ctx(t), api, "t", 1, res("missing.sh")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failed sync counted", func() bool {
		return metric(t, reg, "loom_coopr_resource_syncs_total", tenant("outcome", "failed")) == 1
	})
	if _, err := coopfake.PutTenant(ctx(t), api, "t", 2, res("ok.sh")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sync counted", func() bool { return metric(t, reg, "loom_coopr_resource_syncs_total", tenant("outcome", "ok")) == 1 })
	eventually(t, "2 workers", func() bool { return metric(t, reg, "loom_coopr_workers", tenant()) == 2 })
	if _, err := coopfake.DeleteTenant(ctx(t), api, "t"); err != nil {
		t.Fatal(err)
	}
	if got := metric(t, reg, "loom_coopr_workers", tenant()); got != -1 {
		t.Errorf("a deleted tenant's worker gauge stays at %v", got)
	}
	if strings.Contains(strings.Join(srv.Log(), "\n"), "-> 400") {
		t.Errorf("the server refused requests:\n%s", strings.Join(srv.Log(), "\n"))
	}
}

// TestTenantDeletedDuringSync: a tenant the server deletes while its
// resources are still downloading never starts its slots (before, the
// sync's end started them for a tenant no heartbeat reported).
func TestTenantDeletedDuringSync(t *testing.T) {
	var logs syncBuffer
	srv, p := start(t, coopr.Config{Runner: &runner{}, WorkDir: t.TempDir(), Logger: logTo(&logs)})
	srv.SetResource("x", "automatortypes", "shell", "scripts", "a.sh", 1, []byte("#!/bin/sh\n"))
	srv.AddFault(coopfake.Fault{Path: "/v2/tenants/x/", Delay: 300 * time.Millisecond})
	api := "http://" + p.APIAddr()
	res := map[string]any{"automatortypes": map[string]any{"shell": map[string]any{"scripts": map[string]any{
		"format": "file", "active": []any{map[string]any{"name": "a.sh", "version": 1}}}}}}
	if _, err := coopfake.PutTenant(ctx(t), api, "x", 2, res); err != nil {
		t.Fatal(err)
	}
	if _, err := coopfake.DeleteTenant(ctx(t), api, "x"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sync to end", func() bool { return strings.Contains(logs.String(), "resources synced") })
	srv.Enqueue("x", task("after-delete"))
	time.Sleep(200 * time.Millisecond) // several polls' worth: a slot would have taken it
	if n := srv.Takes("after-delete"); n != 0 {
		t.Errorf("a deleted tenant's slots took a task (%d times)", n)
	}
	pr, _ := srv.Provisioner("loom-test")
	if pr.Usage["x"] != 0 {
		t.Errorf("usage %v", pr.Usage)
	}
}
