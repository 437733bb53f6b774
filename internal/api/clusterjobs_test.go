package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/queue"
)

// newJobsFixture is newFixture with cluster jobs: a runner and a job log
// over the queue's JetStream, and a worker serving the provider type p
// as well as the automator shell.
func newJobsFixture(t *testing.T) *fixture { return newJobsFixtureWith(t, nil) }

// newJobsFixtureWith is newJobsFixture with the API's Config changed by
// edit first.
func newJobsFixtureWith(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	m := NewMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), AckWait: time.Second, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), OnTransition: m.Observe})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	if err := q.SetTypes(ctx, []queue.Route{{Family: "automator", Type: "shell"}, {Family: "provider", Type: "p"}}); err != nil {
		t.Fatal(err)
	}
	r := &runs{n: map[string]int{}}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Serve(sctx, r, 4); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	st, err := state.OpenKV(ctx, q.JetStream(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	jl, err := joblog.OpenStream(ctx, q.JetStream(), joblog.StreamOptions{Source: "d1", FlushEvery: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(jl.Close)
	jobs, err := runner.New(ctx, runner.Config{Store: st, JS: q.JetStream(), Queue: q, Log: jl, Owner: "d1", Host: "h", PID: 1,
		Live: q.OwnerLive, Trouble: q.RecentTrouble, Registerer: m.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		jobs.Stop(sctx)
		cancel()
	})
	cfg := Config{Addr: "127.0.0.1:0", Queue: q, Plugins: fakePlugins{}, Metrics: m, ClusterStore: st, ClusterJobs: jobs, ClusterLog: jl}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, h: s.Handler(), q: q, runs: r}
}

const jobSpec = `name: shop
provider: {type: p, fields: {api_token: s3cret-api-token}}
nodegroups: [{name: n, count: 2, services: [s]}]
services:
  s: {actions: {install: {type: shell}, configure: {type: shell}, start: {type: shell}}}
`

// TestClusterJobEndpoints: a job submitted to the daemon runs there; its
// record, its step's tasks and its log are served; the same spec again
// has no changes; bad requests are 400 with the reason, unknown jobs 404;
// forgetting the cluster removes its job and log; the metrics count it.
func TestClusterJobEndpoints(t *testing.T) {
	f := newJobsFixture(t)
	body := func(verb, spec string) string {
		data, _ := json.Marshal(runner.Request{Verb: verb, Spec: spec, SpecFile: "shop.yaml", Requester: "tester"})
		return string(data)
	}
	for _, c := range []struct{ body, want string }{
		{`{"verb":`, "decoding the job request"},
		{body("explode", jobSpec), `verb "explode": want apply, destroy, start, stop or restart`},
		{body("apply", "name: shop\nprovider: {type: p}\nnodegroups: [{name: n, count: 1, services: [x]}]\n"), `shop.yaml:3: node group "n" lists service "x"`},
		{body("apply", strings.Replace(jobSpec, "name: shop", "name: blog", 1)), `the spec is cluster "blog"'s, not "shop"'s`},
	} {
		if code, b := f.do("POST", "/v1/clusters/shop/jobs", c.body); code != http.StatusBadRequest || !strings.Contains(decode[Error](t, b).Error, c.want) {
			t.Errorf("POST %.40s: %d %s", c.body, code, b)
		}
	}
	if code, b := f.do("GET", "/v1/clusters/shop/job", ""); code != http.StatusNotFound {
		t.Errorf("job of an unknown cluster: %d %s", code, b)
	}
	code, b := f.do("POST", "/v1/clusters/shop/jobs", body("apply", jobSpec))
	sub := decode[JobSubmitResponse](t, b)
	if code != http.StatusAccepted || !sub.Changes || sub.Job == nil || sub.Job.ID != "shop-001" || sub.Job.Owner != "d1" ||
		len(sub.Job.Steps) != 1 || sub.Job.Request.Spec != "" || strings.Contains(string(b), "s3cret") {
		t.Fatalf("submit: %d %s", code, b)
	}
	var jv JobView
	end := time.Now().Add(30 * time.Second)
	for {
		_, b = f.do("GET", "/v1/clusters/shop/job", "")
		jv = decode[JobView](t, b)
		if jv.State != runner.StateRunning || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if jv.State != runner.StateComplete || jv.Steps[0].Status != runner.StepComplete || jv.LogSeq == 0 {
		t.Fatalf("job: %s", b)
	}
	code, b = f.do("GET", "/v1/clusters/shop/jobs/shop-001", "")
	sv := decode[StepView](t, b)
	if code != http.StatusOK || len(sv.Tasks) != 2*6 || sv.Stages == 0 || sv.Job.Progress.Done != 12 || sv.Tasks[0].Name != "CREATE" || sv.Tasks[0].Status != "done" {
		t.Fatalf("step view: %d %s", code, b)
	}
	if code, _ := f.do("GET", "/v1/clusters/shop/jobs/shop-009", ""); code != http.StatusNotFound {
		t.Errorf("unknown job: %d", code)
	}
	code, b = f.do("GET", "/v1/clusters/shop/log?after=0", "")
	lr := decode[LogResponse](t, b)
	if code != http.StatusOK || lr.Next == 0 || !strings.Contains(string(b), `"msg":"task started"`) || !strings.Contains(string(b), `"kind":"task"`) ||
		strings.Contains(string(b), "s3cret") {
		t.Fatalf("log: %d %s", code, b)
	}
	_, b = f.do("GET", "/v1/clusters/shop/log?after=0&kind=job", "")
	for _, e := range decode[LogResponse](t, b).Entries {
		if e.Kind != joblog.KindJob {
			t.Errorf("kind=job returned a %s entry", e.Kind)
		}
	}
	if code, b := f.do("GET", "/v1/clusters/shop/log?after="+strconv.FormatUint(lr.Next, 10)+"&wait=100ms", ""); code != http.StatusOK || len(decode[LogResponse](t, b).Entries) != 0 {
		t.Errorf("log after the end: %d %s", code, b)
	}
	if code, _ := f.do("GET", "/v1/clusters/shop/log?after=x", ""); code != http.StatusBadRequest {
		t.Errorf("bad cursor: %d", code)
	}
	code, b = f.do("POST", "/v1/clusters/shop/jobs", body("apply", jobSpec))
	if sub := decode[JobSubmitResponse](t, b); code != http.StatusOK || sub.Changes || !strings.Contains(sub.Message, "No changes") {
		t.Errorf("same spec again: %d %s", code, b)
	}
	if code, b := f.do("POST", "/v1/clusters/shop/job/cancel", ""); code != http.StatusConflict || !strings.Contains(string(b), "not running") {
		t.Errorf("cancel of a finished job: %d %s", code, b)
	}
	if code, b := f.do("GET", "/metrics", ""); code != http.StatusOK || !strings.Contains(string(b), `loom_cluster_jobs_total{outcome="complete"} 1`) ||
		!strings.Contains(string(b), "loom_cluster_jobs_running 0") {
		t.Errorf("metrics: %d\n%s", code, b)
	}
	if code, b := f.do("DELETE", "/v1/clusters/shop/state", ""); code != http.StatusOK {
		t.Fatalf("forget: %d %s", code, b)
	}
	if code, _ := f.do("GET", "/v1/clusters/shop/job", ""); code != http.StatusNotFound {
		t.Errorf("job after forget: %d", code)
	}
	if _, b := f.do("GET", "/v1/clusters/shop/log?after=0", ""); len(decode[LogResponse](t, b).Entries) != 0 {
		t.Errorf("log after forget: %s", b)
	}
}
