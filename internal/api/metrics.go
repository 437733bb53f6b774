package api

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// Metrics holds loomd's Prometheus metrics in a registry of its own (never
// the global default). Create it before the queue, and pass Observe as the
// queue's OnTransition.
type Metrics struct {
	reg      *prometheus.Registry
	tasks    *prometheus.CounterVec
	running  *prometheus.GaugeVec
	duration *prometheus.HistogramVec
	requests *prometheus.CounterVec
}

// NewMetrics creates the registry with the task metrics, and the Go and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_tasks_total",
			Help: "Task state changes made by this daemon, by the state entered (queued on submit; running per attempt; queued again on a retry; succeeded or failed at the end).",
		}, []string{"state", "family", "type", "hook"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loom_tasks_running",
			Help: "Tasks this daemon is running now.",
		}, []string{"family", "type", "hook"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_task_duration_seconds",
			Help:    "Run time of finished task attempts, from start to outcome, by outcome (succeeded, failed, retry).",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600},
		}, []string{"state", "family", "type", "hook"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_http_requests_total",
			Help: "HTTP API requests, by route and status code.",
		}, []string{"route", "code"}),
	}
	m.reg.MustRegister(m.tasks, m.running, m.duration, m.requests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry /metrics serves, for callers that add their own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observe records one task state change. It matches the signature of
// queue.Config.OnTransition.
func (m *Metrics) Observe(t queue.Transition) {
	r := t.Record
	labels := []string{r.Family, r.Type, r.Hook}
	if t.From == queue.Running {
		m.running.WithLabelValues(labels...).Dec()
		if r.Started != nil {
			state := string(r.State)
			if r.State == queue.Queued {
				state = "retry"
			}
			end := time.Now()
			if r.Finished != nil {
				end = *r.Finished
			}
			m.duration.WithLabelValues(append([]string{state}, labels...)...).Observe(end.Sub(*r.Started).Seconds())
		}
	}
	if r.State == queue.Running {
		m.running.WithLabelValues(labels...).Inc()
	}
	m.tasks.WithLabelValues(append([]string{string(r.State)}, labels...)...).Inc()
}

// watchSources registers the collectors that read the queue and the
// runtime at scrape time.
func (m *Metrics) watchSources(q Queue, p Plugins) {
	m.reg.MustRegister(&sourceCollector{q: q, p: p})
}

// sourceCollector reads gauges from the queue and the runtime at scrape
// time. It is unchecked (describes nothing) because the bindings' stats
// are only known when read.
type sourceCollector struct {
	q Queue
	p Plugins
}

var (
	depthDesc      = prometheus.NewDesc("loom_queue_depth", "Tasks in the stream (queued or running), by plugin family and type, including types no daemon serves.", []string{"family", "type"}, nil)
	depthErrDesc   = prometheus.NewDesc("loom_queue_up", "1 when the queue answered the last scrape, 0 when it did not.", nil, nil)
	typesDesc      = prometheus.NewDesc("loom_plugin_types", "Plugin types loaded.", nil, nil)
	loadErrsDesc   = prometheus.NewDesc("loom_plugin_load_errors", "Plugin load errors (warnings excluded) in the current plugin generation.", nil, nil)
	vmsDesc        = prometheus.NewDesc("loom_vms", "Lua VMs in the pools, by state (idle, in_use).", []string{"state"}, nil)
	vmsCreatedDesc = prometheus.NewDesc("loom_vms_created_total", "Lua VMs created since start.", nil, nil)
	vmsRetiredDesc = prometheus.NewDesc("loom_vms_retired_total", "Lua VMs discarded since start (timed out, hit a limit, or pool drained).", nil, nil)
)

func (c *sourceCollector) Describe(chan<- *prometheus.Desc) {}

func (c *sourceCollector) Collect(ch chan<- prometheus.Metric) {
	if c.q != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		d, err := c.q.Depth(ctx)
		cancel()
		up := 1.0
		if err != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(depthErrDesc, prometheus.GaugeValue, up)
		for r, n := range d {
			ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(n), r.Family, r.Type)
		}
	}
	if c.p != nil {
		s := c.p.Stats()
		ch <- prometheus.MustNewConstMetric(typesDesc, prometheus.GaugeValue, float64(s.Types))
		ch <- prometheus.MustNewConstMetric(loadErrsDesc, prometheus.GaugeValue, float64(s.LoadErrors))
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(s.VMsIdle), "idle")
		ch <- prometheus.MustNewConstMetric(vmsDesc, prometheus.GaugeValue, float64(s.VMsInUse), "in_use")
		ch <- prometheus.MustNewConstMetric(vmsCreatedDesc, prometheus.CounterValue, float64(s.VMsCreated))
		ch <- prometheus.MustNewConstMetric(vmsRetiredDesc, prometheus.CounterValue, float64(s.VMsRetired))
		for name, v := range s.Bindings {
			n := "loom_" + metricName(name)
			desc := prometheus.NewDesc(n, "Binding gauge "+name+" (for example the SSH connection pool).", nil, nil)
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v)
		}
	}
}

// metricName keeps the characters a metric name may hold.
func metricName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

// The runtime is what the daemon passes as Plugins.
var _ Plugins = (*runtime.Runtime)(nil)
