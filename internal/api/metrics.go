package api

import (
	"context"
	"strings"
	"sync"
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
	reg       *prometheus.Registry
	tasks     *prometheus.CounterVec
	running   *prometheus.GaugeVec
	duration  *prometheus.HistogramVec
	queueWait *prometheus.HistogramVec
	latency   *prometheus.HistogramVec
	requests  *prometheus.CounterVec

	mu     sync.Mutex
	mine   map[string]*taskSeries    // tasks this process counts as running: id -> their series
	types  map[[2]string]bool        // family/type label pairs in use, at most maxTypeLabels
	series map[[3]string]*taskSeries // by family, type and hook label; at most maxSeries
}

// taskSeries holds the task metrics' children of one family, type and
// hook label set, each made when first used: WithLabelValues hashes and
// checks every label value on each call (three transitions per task),
// and a child made in advance would show a series nothing counted.
type taskSeries struct {
	labels    []string
	running   prometheus.Gauge
	queueWait prometheus.Observer
	tasks     map[string]prometheus.Counter  // by state
	duration  map[string]prometheus.Observer // by state (retry for a requeue)
	latency   map[string]prometheus.Observer // by state
}

// maxSeries bounds Metrics.series; label sets past it are looked up in
// the vectors on each use, as before.
const maxSeries = 4096

func (s *taskSeries) runningGauge(m *Metrics) prometheus.Gauge {
	if s.running == nil {
		s.running = m.running.WithLabelValues(s.labels...)
	}
	return s.running
}

func (s *taskSeries) queueWaitObserver(m *Metrics) prometheus.Observer {
	if s.queueWait == nil {
		s.queueWait = m.queueWait.WithLabelValues(s.labels...)
	}
	return s.queueWait
}

func (s *taskSeries) tasksCounter(m *Metrics, state string) prometheus.Counter {
	c, ok := s.tasks[state]
	if !ok {
		c = m.tasks.WithLabelValues(append([]string{state}, s.labels...)...)
		s.tasks[state] = c
	}
	return c
}

func stateObserver(vec *prometheus.HistogramVec, byState map[string]prometheus.Observer, state string, labels []string) prometheus.Observer {
	o, ok := byState[state]
	if !ok {
		o = vec.WithLabelValues(append([]string{state}, labels...)...)
		byState[state] = o
	}
	return o
}

// maxTypeLabels bounds the plugin types the task metrics keep apart.
// Submits may name any type (served or not); past this many distinct
// family/type pairs, new ones share the type label "_other", so a client
// cannot grow the series without bound.
const maxTypeLabels = 256

// OtherType is the type label of the plugin types past maxTypeLabels.
const OtherType = "_other"

// taskBuckets cover hooks from a millisecond to an hour.
var taskBuckets = []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600}

// NewMetrics creates the registry with the task metrics, and the Go and
// process collectors.
func NewMetrics() *Metrics {
	labels := []string{"family", "type", "hook"}
	withState := append([]string{"state"}, labels...)
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_tasks_total",
			Help: "Task state changes made by this daemon, by the state entered (queued on submit; running per attempt; queued again on a retry; succeeded or failed at the end).",
		}, withState),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loom_tasks_running",
			Help: "Tasks this daemon is running now.",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_task_duration_seconds",
			Help:    "Run time of this daemon's task attempts, from claim to outcome, by outcome (state: succeeded, failed, retry).",
			Buckets: taskBuckets,
		}, withState),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_task_queue_wait_seconds",
			Help:    "Time tasks waited in the queue, from submit to the claim of their first attempt.",
			Buckets: taskBuckets,
		}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loom_task_latency_seconds",
			Help:    "Time from submit to the recorded final outcome (state: succeeded, failed), retries included.",
			Buckets: taskBuckets,
		}, withState),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loom_http_requests_total",
			Help: "HTTP API requests, by route and status code.",
		}, []string{"route", "code"}),
		mine:   map[string]*taskSeries{},
		types:  map[[2]string]bool{},
		series: map[[3]string]*taskSeries{},
	}
	m.reg.MustRegister(m.tasks, m.running, m.duration, m.queueWait, m.latency, m.requests,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry /metrics serves, for callers that add their own
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Observe records one task state change. It matches the signature of
// queue.Config.OnTransition. The running gauge and the run-time histogram
// follow only the attempts this process claimed: a task taken over from a
// silent daemon, or failed here after another daemon's attempts ran out,
// is not this process's to count down.
func (m *Metrics) Observe(t queue.Transition) {
	r := t.Record
	m.mu.Lock()
	defer m.mu.Unlock()
	if t.Lost { // the attempt ended here without a state change
		if prev, ok := m.mine[r.TaskID]; ok {
			delete(m.mine, r.TaskID)
			prev.runningGauge(m).Dec()
		}
		return
	}
	ser := m.seriesLocked(r)
	now := time.Now()
	end := now
	if r.Finished != nil {
		end = *r.Finished
	}
	if prev, ok := m.mine[r.TaskID]; ok && t.From == queue.Running {
		delete(m.mine, r.TaskID)
		prev.runningGauge(m).Dec()
		if r.State != queue.Running && r.Started != nil {
			state := string(r.State)
			if r.State == queue.Queued {
				state = "retry"
			}
			stateObserver(m.duration, prev.duration, state, prev.labels).Observe(seconds(end.Sub(*r.Started)))
		}
	}
	if r.State == queue.Running {
		m.mine[r.TaskID] = ser
		ser.runningGauge(m).Inc()
		if r.Attempts == 1 && r.Started != nil && !r.Created.IsZero() {
			ser.queueWaitObserver(m).Observe(seconds(r.Started.Sub(r.Created)))
		}
	}
	if r.State.Terminal() && t.From != r.State && !r.Created.IsZero() {
		stateObserver(m.latency, ser.latency, string(r.State), ser.labels).Observe(seconds(end.Sub(r.Created)))
	}
	ser.tasksCounter(m, string(r.State)).Inc()
}

// seriesLocked is the series of a record's labels (see labelsLocked).
func (m *Metrics) seriesLocked(r queue.Record) *taskSeries {
	labels := m.labelsLocked(r)
	key := [3]string{labels[0], labels[1], labels[2]}
	if s, ok := m.series[key]; ok {
		return s
	}
	s := &taskSeries{labels: labels, tasks: map[string]prometheus.Counter{}, duration: map[string]prometheus.Observer{},
		latency: map[string]prometheus.Observer{}}
	if len(m.series) < maxSeries {
		m.series[key] = s
	}
	return s
}

// labelsLocked is the family, type and hook labels of a record, with the
// type folded into OtherType past maxTypeLabels distinct types.
func (m *Metrics) labelsLocked(r queue.Record) []string {
	key := [2]string{r.Family, r.Type}
	typ := r.Type
	if !m.types[key] {
		if len(m.types) < maxTypeLabels {
			m.types[key] = true
		} else {
			typ = OtherType
		}
	}
	return []string{r.Family, typ, r.Hook}
}

// seconds is d in seconds, never negative (clocks of two daemons may
// disagree on when a task was submitted).
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }

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
