package coopr

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the Coopr loops do, for loomd's /metrics. Create it
// with NewMetrics, register Collectors in the daemon's registry, and pass
// it in Config. A nil *Metrics counts nothing.
type Metrics struct {
	registered    prometheus.Gauge
	registrations *prometheus.CounterVec
	heartbeats    *prometheus.CounterVec
	takes         *prometheus.CounterVec
	tasks         *prometheus.CounterVec
	running       *prometheus.GaugeVec
	workers       *prometheus.GaugeVec
	finishes      *prometheus.CounterVec
	retries       *prometheus.CounterVec
	pending       prometheus.Gauge
	syncs         *prometheus.CounterVec
}

// Outcomes of a take (label outcome of loom_coopr_takes_total).
const (
	takeTask    = "task"    // 200: a task to run
	takeEmpty   = "empty"   // 204: the tenant's queue is empty
	takeRefused = "refused" // 403: the server does not know this provisioner
	takeError   = "error"   // no answer, 5xx or another status
)

// Outcomes of a finish (label outcome of loom_coopr_finishes_total).
const (
	finishDelivered = "delivered" // 2xx
	finishDuplicate = "duplicate" // 417 after a retry: an earlier attempt went through
	finishRefused   = "refused"   // another 4xx (417 at once: the server timed the task out)
	finishAbandoned = "abandoned" // still failing after the server's task timeout
	finishKept      = "kept"      // loomd stopped first: kept in the state dir for the next start
	finishLost      = "lost"      // loomd stopped first, with no state dir to keep it
)

// NewMetrics creates the Coopr metrics, all named loom_coopr_*.
func NewMetrics() *Metrics {
	tenant := []string{"tenant"}
	return &Metrics{
		registered: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loom_coopr_registered",
			Help: "1 while the Coopr server knows this provisioner (registered, heartbeats answered), 0 otherwise.",
		}),
		registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_registrations_total",
			Help: "Registrations with the Coopr server (PUT /v2/provisioners/{id}), by outcome (ok, failed).",
		}, []string{"outcome"}),
		heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_heartbeats_total",
			Help: "Heartbeats to the Coopr server, by outcome (ok; unknown: a 404, the server forgot this provisioner and loomd registers again; failed: no answer or another status; the server drops a provisioner silent for 120 s).",
		}, []string{"outcome"}),
		takes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_takes_total",
			Help: "Take requests (POST /v2/tasks/take), by tenant and outcome (task, empty, refused: 403, error).",
		}, []string{"tenant", "outcome"}),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_tasks_total",
			Help: "Tasks from the Coopr server run to an outcome, by tenant and status (succeeded, failed).",
		}, []string{"tenant", "status"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loom_coopr_tasks_running",
			Help: "Tasks from the Coopr server running now, by tenant.",
		}, tenant),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loom_coopr_workers",
			Help: "Worker slots (take/finish loops) per tenant, as reported in heartbeats.",
		}, tenant),
		finishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_finishes_total",
			Help: "Results sent to the Coopr server (POST /v2/tasks/finish), by tenant and final outcome (delivered; duplicate: 417 after a retry, an earlier attempt went through; refused: another 4xx; abandoned: failing past the server's task timeout; kept: loomd stopped first and sends it at the next start; lost: stopped with no state dir).",
		}, []string{"tenant", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_finish_retries_total",
			Help: "Finish attempts that failed (no answer, 5xx, 403) and were tried again, by tenant.",
		}, tenant),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loom_coopr_finishes_pending",
			Help: "Results not yet accepted by the Coopr server (being sent or retried).",
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_coopr_resource_syncs_total",
			Help: "Resource syncs after a tenant's resources changed, by tenant and outcome (ok; failed: some resource could not be downloaded or activated, see the log).",
		}, []string{"tenant", "outcome"}),
	}
}

// Collectors are the metrics, for prometheus.Registerer.MustRegister.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.registered, m.registrations, m.heartbeats, m.takes, m.tasks, m.running, m.workers,
		m.finishes, m.retries, m.pending, m.syncs}
}

func (m *Metrics) setRegistered(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.registered.Set(1)
	} else {
		m.registered.Set(0)
	}
}

func (m *Metrics) registration(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.registrations.WithLabelValues("ok").Inc()
	} else {
		m.registrations.WithLabelValues("failed").Inc()
	}
}

func (m *Metrics) heartbeat(outcome string) {
	if m != nil {
		m.heartbeats.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) take(tenant, outcome string) {
	if m != nil {
		m.takes.WithLabelValues(tenant, outcome).Inc()
	}
}

func (m *Metrics) taskStarted(tenant string) {
	if m != nil {
		m.running.WithLabelValues(tenant).Inc()
	}
}

func (m *Metrics) taskEnded(tenant string, status int) {
	if m == nil {
		return
	}
	m.running.WithLabelValues(tenant).Dec()
	if status == 0 {
		m.tasks.WithLabelValues(tenant, "succeeded").Inc()
	} else {
		m.tasks.WithLabelValues(tenant, "failed").Inc()
	}
}

func (m *Metrics) setWorkers(tenant string, n int) {
	if m != nil {
		m.workers.WithLabelValues(tenant).Set(float64(n))
	}
}

// forgetTenant drops a deleted tenant's gauges (its counters stay).
func (m *Metrics) forgetTenant(tenant string) {
	if m != nil {
		m.workers.DeleteLabelValues(tenant)
	}
}

func (m *Metrics) finishStarted() {
	if m != nil {
		m.pending.Inc()
	}
}

func (m *Metrics) finishEnded(tenant, outcome string) {
	if m != nil {
		m.pending.Dec()
		m.finishes.WithLabelValues(tenant, outcome).Inc()
	}
}

func (m *Metrics) finishRetry(tenant string) {
	if m != nil {
		m.retries.WithLabelValues(tenant).Inc()
	}
}

func (m *Metrics) sync(tenant string, ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.syncs.WithLabelValues(tenant, "ok").Inc()
	} else {
		m.syncs.WithLabelValues(tenant, "failed").Inc()
	}
}
