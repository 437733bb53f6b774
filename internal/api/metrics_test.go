package api

import (
	"fmt"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/loomrt/loom/internal/queue"
)

// family returns the gathered metric family name, or fails.
func gather(t *testing.T, m *Metrics, name string) []*dto.Metric {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// The three latency histograms take their values from the record's own
// times: submit -> claim, claim -> outcome, submit -> outcome.
func TestObserveHistograms(t *testing.T) {
	m := NewMetrics()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claim, done := t0.Add(2*time.Second), t0.Add(5*time.Second)
	rec := queue.Record{TaskID: "h-1", State: queue.Queued, Family: "automator", Type: "shell", Hook: "install", Created: t0}
	m.Observe(queue.Transition{Record: rec})
	rec.State, rec.Attempts, rec.Started = queue.Running, 1, &claim
	m.Observe(queue.Transition{From: queue.Queued, Record: rec})
	rec.State, rec.Finished = queue.Succeeded, &done
	m.Observe(queue.Transition{From: queue.Running, Record: rec})

	for name, want := range map[string]float64{
		"loom_task_queue_wait_seconds": 2,
		"loom_task_duration_seconds":   3,
		"loom_task_latency_seconds":    5,
	} {
		got := gather(t, m, name)
		if len(got) != 1 || got[0].GetHistogram().GetSampleCount() != 1 || got[0].GetHistogram().GetSampleSum() != want {
			t.Errorf("%s = %v, want one sample of %vs", name, got, want)
			continue
		}
		if l := label(got[0], "type"); l != "shell" {
			t.Errorf("%s type label = %q", name, l)
		}
		if name != "loom_task_queue_wait_seconds" && label(got[0], "state") != "succeeded" {
			t.Errorf("%s state label = %q, want succeeded", name, label(got[0], "state"))
		}
	}
	for _, g := range gather(t, m, "loom_tasks_running") {
		if g.GetGauge().GetValue() != 0 {
			t.Errorf("loom_tasks_running = %v after the task finished", g.GetGauge().GetValue())
		}
	}
}

// A transition away from running that this process did not claim (the
// max-deliveries fail of a dead daemon's task) moves neither the running
// gauge nor the run-time histogram.
func TestObserveRunningOnlyOwnAttempts(t *testing.T) {
	m := NewMetrics()
	now := time.Now()
	rec := queue.Record{TaskID: "o-1", State: queue.Failed, Family: "automator", Type: "shell", Hook: "install",
		Attempts: 3, Created: now, Started: &now, Finished: &now}
	m.Observe(queue.Transition{From: queue.Running, Record: rec})
	for _, g := range gather(t, m, "loom_tasks_running") {
		if v := g.GetGauge().GetValue(); v != 0 {
			t.Errorf("loom_tasks_running = %v, want 0: the attempt was another daemon's", v)
		}
	}
	if got := gather(t, m, "loom_task_duration_seconds"); len(got) != 0 {
		t.Errorf("run time observed for another daemon's attempt: %v", got)
	}
	if got := gather(t, m, "loom_task_latency_seconds"); len(got) != 1 {
		t.Errorf("submit-to-result = %v, want one sample for the failure recorded here", got)
	}
}

// Submits may name any plugin type; the type label stays bounded.
func TestObserveBoundsTypeLabels(t *testing.T) {
	m := NewMetrics()
	for i := range maxTypeLabels + 50 {
		m.Observe(queue.Transition{Record: queue.Record{TaskID: fmt.Sprint("c-", i), State: queue.Queued,
			Family: "automator", Type: fmt.Sprint("t", i), Hook: "install", Created: time.Now()}})
	}
	got := gather(t, m, "loom_tasks_total")
	if len(got) != maxTypeLabels+1 {
		t.Fatalf("%d series, want %d types and %s", len(got), maxTypeLabels, OtherType)
	}
	var other float64
	for _, s := range got {
		if label(s, "type") == OtherType {
			other = s.GetCounter().GetValue()
		}
	}
	if other != 50 {
		t.Errorf("%s counted %v tasks, want 50", OtherType, other)
	}
}

// An attempt that lost its claim stops counting as running here.
func TestObserveLostAttempt(t *testing.T) {
	m := NewMetrics()
	now := time.Now()
	rec := queue.Record{TaskID: "l-1", State: queue.Running, Family: "automator", Type: "shell", Hook: "install", Attempts: 1, Created: now, Started: &now}
	m.Observe(queue.Transition{From: queue.Queued, Record: rec})
	m.Observe(queue.Transition{From: queue.Running, Record: rec, Lost: true})
	for _, g := range gather(t, m, "loom_tasks_running") {
		if v := g.GetGauge().GetValue(); v != 0 {
			t.Errorf("loom_tasks_running = %v after the attempt was lost, want 0", v)
		}
	}
	if got := gather(t, m, "loom_task_duration_seconds"); len(got) != 0 {
		t.Errorf("run time observed for a lost attempt: %v", got)
	}
	for _, c := range gather(t, m, "loom_tasks_total") {
		if label(c, "state") != "running" {
			t.Errorf("a lost attempt counted a state change: %v", c)
		}
	}
}

// Many tasks through the same label sets (their children kept between
// transitions), one retried: every count lands in its own series, and no
// series appears for a state nothing reached.
func TestObserveSeriesKept(t *testing.T) {
	m := NewMetrics()
	now := time.Now()
	for i := range 200 {
		rec := queue.Record{TaskID: fmt.Sprint("k-", i), State: queue.Queued, Family: "automator", Type: "shell",
			Hook: []string{"install", "configure"}[i%2], Created: now}
		m.Observe(queue.Transition{Record: rec})
		rec.State, rec.Attempts, rec.Started = queue.Running, 1, &now
		m.Observe(queue.Transition{From: queue.Queued, Record: rec})
		if i == 7 {
			rec.State = queue.Queued
			m.Observe(queue.Transition{From: queue.Running, Record: rec}) // retried
			rec.State, rec.Attempts = queue.Running, 2
			m.Observe(queue.Transition{From: queue.Queued, Record: rec})
		}
		rec.State, rec.Finished = queue.Succeeded, &now
		m.Observe(queue.Transition{From: queue.Running, Record: rec})
	}
	want := map[string]float64{"queued/install": 100, "queued/configure": 101, "running/install": 100, "running/configure": 101,
		"succeeded/install": 100, "succeeded/configure": 100}
	got := map[string]float64{}
	for _, c := range gather(t, m, "loom_tasks_total") {
		got[label(c, "state")+"/"+label(c, "hook")] = c.GetCounter().GetValue()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("loom_tasks_total = %v, want %v", got, want)
	}
	for _, g := range gather(t, m, "loom_tasks_running") {
		if v := g.GetGauge().GetValue(); v != 0 {
			t.Errorf("loom_tasks_running{hook=%s} = %v after every task finished, want 0", label(g, "hook"), v)
		}
	}
	runs := map[string]uint64{}
	for _, h := range gather(t, m, "loom_task_duration_seconds") {
		runs[label(h, "state")+"/"+label(h, "hook")] = h.GetHistogram().GetSampleCount()
	}
	if want := map[string]uint64{"retry/configure": 1, "succeeded/install": 100, "succeeded/configure": 100}; fmt.Sprint(runs) != fmt.Sprint(want) {
		t.Errorf("loom_task_duration_seconds counts = %v, want %v", runs, want)
	}
	if got := gather(t, m, "loom_task_queue_wait_seconds"); len(got) != 2 || got[0].GetHistogram().GetSampleCount()+got[1].GetHistogram().GetSampleCount() != 200 {
		t.Errorf("loom_task_queue_wait_seconds = %v, want 200 first attempts in 2 series", got)
	}
}

// BenchmarkObserve is one task's three transitions (submit, claim,
// success) through the task metrics.
//
//	go test -run '^$' -bench Observe ./internal/api/
func BenchmarkObserve(b *testing.B) {
	m := NewMetrics()
	now := time.Now()
	i := 0
	for b.Loop() {
		i++
		rec := queue.Record{TaskID: fmt.Sprint("b-", i%1000), State: queue.Queued, Family: "automator", Type: "shell", Hook: "install", Created: now}
		m.Observe(queue.Transition{Record: rec})
		rec.State, rec.Attempts, rec.Started = queue.Running, 1, &now
		m.Observe(queue.Transition{From: queue.Queued, Record: rec})
		rec.State, rec.Finished = queue.Succeeded, &now
		m.Observe(queue.Transition{From: queue.Running, Record: rec})
	}
}
