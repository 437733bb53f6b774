package api

import "github.com/prometheus/client_golang/prometheus"

// TaskGatherer gathers only the task metrics (loom_tasks_total and the
// duration, queue wait and latency histograms) from the very collectors
// /metrics serves, without the scrape-time queue and runtime reads: the
// console's overview samples it.
func (m *Metrics) TaskGatherer() prometheus.Gatherer {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.tasks, m.running, m.duration, m.queueWait, m.latency)
	return reg
}
