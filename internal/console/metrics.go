package console

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The overview's throughput and latency come from the task metrics that
// /metrics serves (this daemon's counts): samples of the counters and
// histograms, taken while someone looks and kept for window, give rates
// and quantiles over the last minutes, computed as Prometheus' rate() and
// histogram_quantile() would.
const (
	window    = 5 * time.Minute
	maxSample = 64
)

// hist is a histogram summed over its label sets: cumulative counts per
// upper bound.
type hist struct {
	bounds []float64
	cum    []float64
	count  float64
	sum    float64
}

type sample struct {
	at        time.Time
	succeeded float64
	failed    float64
	latency   hist // loom_task_latency_seconds: submit to outcome
	duration  hist // loom_task_duration_seconds: one attempt's run
	wait      hist // loom_task_queue_wait_seconds
}

type rateSampler struct {
	g   prometheus.Gatherer
	now func() time.Time

	mu   sync.Mutex
	ring []sample
}

func newRateSampler(g prometheus.Gatherer, now func() time.Time) *rateSampler {
	return &rateSampler{g: g, now: now}
}

// run samples every interval while active says someone looks, calling
// sampled after each.
func (s *rateSampler) run(stop <-chan struct{}, every time.Duration, active func() bool, sampled func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if active() {
				s.record()
				sampled()
			}
		}
	}
}

func (s *rateSampler) take() (sample, error) {
	mfs, err := s.g.Gather()
	if err != nil {
		return sample{}, err
	}
	out := sample{at: s.now()}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "loom_tasks_total":
			for _, m := range mf.GetMetric() {
				switch label(m, "state") {
				case "succeeded":
					out.succeeded += m.GetCounter().GetValue()
				case "failed":
					out.failed += m.GetCounter().GetValue()
				}
			}
		case "loom_task_latency_seconds":
			out.latency = sumHist(mf)
		case "loom_task_duration_seconds":
			out.duration = sumHist(mf)
		case "loom_task_queue_wait_seconds":
			out.wait = sumHist(mf)
		}
	}
	return out, nil
}

// record keeps a sample, at most one per 5 s.
func (s *rateSampler) record() sample {
	cur, err := s.take()
	if err != nil {
		return cur
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.ring); n == 0 || cur.at.Sub(s.ring[n-1].at) >= 5*time.Second {
		s.ring = append(s.ring, cur)
		if len(s.ring) > maxSample {
			s.ring = s.ring[len(s.ring)-maxSample:]
		}
	}
	return cur
}

// Throughput is the overview's figures.
type Throughput struct {
	// Window is what the rates cover: the last few minutes, or less
	// right after the first look.
	Window time.Duration
	// Succeeded and Failed are outcomes per second in the window.
	Succeeded, Failed float64
	// Outcomes counts them in the window.
	Outcomes int
	// Latency (submit to outcome), Duration (one attempt) and Wait
	// (submit to first start): 50th, 95th and 99th percentiles in
	// seconds over the window; NaN without observations.
	Latency, Duration, Wait [3]float64
	// Total counts since the daemon started.
	TotalSucceeded, TotalFailed int
	// Since is true when the window starts at the daemon's start (no
	// older sample yet).
	Since bool
}

var quantiles = [3]float64{0.5, 0.95, 0.99}

// throughput compares a fresh sample with the oldest one in the window.
func (s *rateSampler) throughput() Throughput {
	cur := s.record()
	s.mu.Lock()
	var base *sample
	for i := range s.ring {
		if cur.at.Sub(s.ring[i].at) <= window && cur.at.Sub(s.ring[i].at) >= 5*time.Second {
			base = &s.ring[i]
			break
		}
	}
	var b sample
	if base != nil {
		b = *base
	}
	s.mu.Unlock()
	t := Throughput{TotalSucceeded: int(cur.succeeded), TotalFailed: int(cur.failed), Since: base == nil}
	if base != nil {
		t.Window = cur.at.Sub(b.at)
		secs := t.Window.Seconds()
		t.Succeeded = (cur.succeeded - b.succeeded) / secs
		t.Failed = (cur.failed - b.failed) / secs
		t.Outcomes = int(cur.succeeded - b.succeeded + cur.failed - b.failed)
	} else {
		t.Outcomes = int(cur.succeeded + cur.failed)
	}
	for i, q := range quantiles {
		t.Latency[i] = quantile(q, cur.latency, b.latency)
		t.Duration[i] = quantile(q, cur.duration, b.duration)
		t.Wait[i] = quantile(q, cur.wait, b.wait)
	}
	return t
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sumHist adds up a histogram family's label sets.
func sumHist(mf *dto.MetricFamily) hist {
	var h hist
	idx := map[float64]int{}
	for _, m := range mf.GetMetric() {
		ph := m.GetHistogram()
		if ph == nil {
			continue
		}
		h.count += float64(ph.GetSampleCount())
		h.sum += ph.GetSampleSum()
		for _, b := range ph.GetBucket() {
			ub := b.GetUpperBound()
			i, ok := idx[ub]
			if !ok {
				i = len(h.bounds)
				idx[ub] = i
				h.bounds = append(h.bounds, ub)
				h.cum = append(h.cum, 0)
			}
			h.cum[i] += float64(b.GetCumulativeCount())
		}
	}
	// Buckets are the same for every label set; keep them ordered.
	order := make([]int, len(h.bounds))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return h.bounds[order[a]] < h.bounds[order[b]] })
	bounds, cum := make([]float64, len(order)), make([]float64, len(order))
	for i, j := range order {
		bounds[i], cum[i] = h.bounds[j], h.cum[j]
	}
	h.bounds, h.cum = bounds, cum
	return h
}

// quantile is histogram_quantile(q) of cur minus base: linear within the
// bucket holding the rank; the highest finite bound when the rank falls in
// the +Inf bucket; NaN without observations.
func quantile(q float64, cur, base hist) float64 {
	count := cur.count - base.count
	if count <= 0 || len(cur.bounds) == 0 {
		return math.NaN()
	}
	baseCum := func(i int) float64 {
		if i < len(base.cum) && base.bounds[i] == cur.bounds[i] {
			return base.cum[i]
		}
		return 0
	}
	rank := q * count
	prevBound, prevCum := 0.0, 0.0
	for i, ub := range cur.bounds {
		c := cur.cum[i] - baseCum(i)
		if c >= rank {
			if c == prevCum {
				return ub
			}
			return prevBound + (ub-prevBound)*(rank-prevCum)/(c-prevCum)
		}
		prevBound, prevCum = ub, c
	}
	return prevBound // the rank is past the last finite bound
}
