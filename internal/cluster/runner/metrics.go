package runner

import "github.com/prometheus/client_golang/prometheus"

// metrics are the runner's Prometheus metrics (docs/operations.md).
type metrics struct {
	running   prometheus.Gauge
	ended     *prometheus.CounterVec
	takeovers prometheus.Counter
	lost      prometheus.Counter
	local     *prometheus.CounterVec
	journal   prometheus.GaugeFunc
}

// newMetrics makes the metrics and registers them on reg (nil: none);
// journal says whether jobs' rounds go to the state journal now.
func newMetrics(reg prometheus.Registerer, journal func() bool) *metrics {
	m := &metrics{
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loom_cluster_jobs_running",
			Help: "Cluster jobs (loomd apply, destroy) this daemon runs now.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_cluster_jobs_total",
			Help: "Cluster jobs that stopped running on this daemon, by outcome: complete, failed, cancelled, interrupted (handed over at shutdown).",
		}, []string{"outcome"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loom_cluster_job_takeovers_total",
			Help: "Cluster jobs this daemon took over from a daemon that died or shut down.",
		}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loom_cluster_job_leases_lost_total",
			Help: "Cluster jobs this daemon stopped because another daemon had taken them over (its lease had run out).",
		}),
		local: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_cluster_local_tasks_total",
			Help: "Tasks of cluster jobs this daemon ran on its own workers (loomd serve --cluster-tasks local), by outcome: succeeded, failed, interrupted (run again when the job resumes), error (no outcome).",
		}, []string{"outcome"}),
		journal: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "loom_cluster_state_journal",
			Help: "1 while the cluster jobs this daemon runs write each round of changes to the state journal (one message); 0 while a live daemon sharing the queue cannot read the journal (an older loomd) or this daemon cannot tell, when rounds go to their keys.",
		}, func() float64 {
			if journal() {
				return 1
			}
			return 0
		}),
	}
	for _, o := range []string{"succeeded", "failed", "interrupted", "error"} {
		m.local.WithLabelValues(o)
	}
	for _, o := range []string{StateComplete, StateFailed, StateCancelled, "interrupted"} {
		m.ended.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.running, m.ended, m.takeovers, m.lost, m.local, m.journal)
	}
	return m
}
