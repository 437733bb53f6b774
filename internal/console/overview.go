package console

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
)

type depthRow struct {
	Route  queue.Route
	Tasks  int
	Served bool
}

type overviewData struct {
	// Admin: the daemon-wide figures are shown (an admin token).
	Admin       bool
	Healthy     bool
	HealthError string
	Depth       []depthRow
	DepthError  string
	DepthTotal  int
	Throughput  *Throughput
	Workers     []worker.Info
	WorkersOn   bool
	Stats       runtime.Stats
	LoadErrors  int
	Failures    []api.Task
	FailError   string
	Served      []queue.Route
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	d := overviewData{Healthy: true, Admin: tokenOf(r).Admin()}
	if err := c.cfg.Queue.Health(ctx); err != nil {
		d.Healthy, d.HealthError = false, err.Error()
	}
	if !d.Admin {
		// The queue's depth, the metrics and the workers are the
		// daemon's, every tenant's: an admin token's, as /metrics is.
		page, err := c.listScoped(ctx, queue.Filter{State: queue.Failed, Limit: 10}, c.scope(r), "", 10)
		if err != nil {
			d.FailError = err.Error()
		}
		for _, rec := range page.Records {
			d.Failures = append(d.Failures, api.TaskOf(rec))
		}
		c.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Topics: []string{topicOverview}, Data: d})
		return
	}
	depth, err := c.cfg.Queue.Depth(ctx)
	if err != nil {
		d.DepthError = err.Error()
	}
	_, d.Served = c.cfg.Queue.Served(queue.Route{})
	for route, n := range depth {
		served, _ := c.cfg.Queue.Served(route)
		d.Depth = append(d.Depth, depthRow{Route: route, Tasks: n, Served: served})
		d.DepthTotal += n
	}
	sort.Slice(d.Depth, func(i, j int) bool {
		if d.Depth[i].Tasks != d.Depth[j].Tasks {
			return d.Depth[i].Tasks > d.Depth[j].Tasks
		}
		return d.Depth[i].Route.String() < d.Depth[j].Route.String()
	})
	if c.rates != nil {
		t := c.rates.throughput()
		d.Throughput = &t
	}
	if c.cfg.Workers != nil {
		d.WorkersOn = true
		d.Workers = c.cfg.Workers()
	}
	if c.cfg.Plugins != nil {
		d.Stats = c.cfg.Plugins.Stats()
		for _, e := range c.cfg.Plugins.LoadErrors() {
			if !e.Warning {
				d.LoadErrors++
			}
		}
	}
	scope := c.scope(r)
	page, err := c.listScoped(ctx, queue.Filter{State: queue.Failed, Limit: 10}, scope, "", 10)
	if err != nil {
		d.FailError = err.Error()
	}
	for _, rec := range page.Records {
		d.Failures = append(d.Failures, api.TaskOf(rec))
	}
	c.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Topics: []string{topicOverview}, Data: d})
}
