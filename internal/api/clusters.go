package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/jsretry"
)

// The cluster state loomd apply keeps in the queue's JetStream store
// (bucket LOOM_CLUSTERS, internal/cluster/state): read by people and
// tools through GET /v1/clusters..., written by loomd apply through
// /v1/clusters/{name}/state, /changes and /lock.

// maxClusterState caps a PUT of a whole cluster's state (a 1,000-node
// cluster with its jobs is a few MiB).
const maxClusterState = 64 << 20

// clusterBucket opens the bucket on first use, from a queue that exposes
// its JetStream context (*queue.Queue does).
type clusterBucket struct {
	once  sync.Once
	sem   chan struct{} // held while opening; guards store
	store *state.KVStore
	retry *jsretry.Waiter
}

type jetStreamer interface {
	JetStream() jetstream.JetStream
	Replicas() int
}

// clusterStore is the cluster state store: the daemon's (once open, see
// Late), or the bucket opened here on first use. What the NATS cluster
// cannot do right now (a server offline, an election) is tried again
// while the request lasts, LateWait at most; then the request gets 503
// with Retry-After, and the next one tries again.
func (s *Server) clusterStore(ctx context.Context) (*state.KVStore, error) {
	p, err := s.late.Wait(ctx)
	if err != nil {
		return nil, err
	}
	if p.ClusterStore != nil {
		return p.ClusterStore, nil
	}
	q, ok := s.cfg.Queue.(jetStreamer)
	if !ok {
		return nil, errors.New("this daemon's queue keeps no cluster state (it is not a JetStream queue)")
	}
	b := &s.clusters
	b.once.Do(func() {
		b.sem = make(chan struct{}, 1)
		b.retry = &jsretry.Waiter{Logger: s.log, Hint: jsretry.Hint(q.Replicas(), "--replicas")}
	})
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, &UnavailableError{What: jsretry.What("kv bucket", state.Bucket, q.Replicas()), Err: context.Cause(ctx)}
	}
	defer func() { <-b.sem }()
	if b.store != nil {
		return b.store, nil
	}
	octx, cancel := context.WithTimeout(ctx, LateWait)
	defer cancel()
	st, err := state.OpenKV(octx, q.JetStream(), q.Replicas(), b.retry)
	if err != nil {
		if jsretry.Transient(err) {
			err = &UnavailableError{What: jsretry.What("kv bucket", state.Bucket, q.Replicas()), Err: b.retry.Explain(err)}
		}
		s.log.Warn("cannot open the cluster state bucket", "err", err)
		return nil, err
	}
	b.store = st
	return st, nil
}

func (s *Server) clusterRoutes(mux *http.ServeMux) {
	mux.Handle("/v1/clusters", s.route("clusters", map[string]http.HandlerFunc{"GET": s.listClusters}))
	mux.Handle("/v1/clusters/{name}", s.route("cluster", map[string]http.HandlerFunc{"GET": s.getCluster}))
	mux.Handle("/v1/clusters/{name}/history", s.route("cluster_history", map[string]http.HandlerFunc{"GET": s.clusterHistory}))
	mux.Handle("/v1/clusters/{name}/state", s.route("cluster_state", map[string]http.HandlerFunc{"GET": s.getClusterState, "PUT": s.putClusterState, "DELETE": s.deleteClusterState}))
	mux.Handle("/v1/clusters/{name}/changes", s.route("cluster_changes", map[string]http.HandlerFunc{"POST": s.appendClusterChanges}))
	mux.Handle("/v1/clusters/{name}/lock", s.route("cluster_lock", map[string]http.HandlerFunc{"POST": s.lockCluster, "DELETE": s.unlockCluster}))
}

// ClusterSummary is one cluster in GET /v1/clusters.
type ClusterSummary struct {
	Name    string     `json:"name"`
	Status  string     `json:"status"`
	Nodes   int        `json:"nodes"`
	Created time.Time  `json:"created"`
	Updated time.Time  `json:"updated"`
	LastJob *JobReport `json:"lastJob,omitempty"`
}

// JobReport is a job and its progress.
type JobReport struct {
	ID       string     `json:"id"`
	Action   string     `json:"action"`
	Status   string     `json:"status"`
	Message  string     `json:"message,omitempty"`
	Started  time.Time  `json:"started"`
	Ended    *time.Time `json:"ended,omitempty"`
	Duration float64    `json:"durationMs,omitempty"`
	Progress Progress   `json:"progress"`
	// Runner names who runs a running job ("loomd <owner>", or the loomd
	// apply holding the cluster's lock). A job the state says is running
	// but nobody runs (its daemon or CLI died) is "interrupted", and Note
	// says what happens next.
	Runner string `json:"runner,omitempty"`
	Note   string `json:"note,omitempty"`
	// Events are the job's interruptions, resumes and takeovers
	// (history only).
	Events []state.Event `json:"events,omitempty"`
	// Running and Failed list the tasks running now and those that
	// failed (GET /v1/clusters/{name} only).
	Running []TaskReport `json:"running,omitempty"`
	Failed  []TaskReport `json:"failed,omitempty"`
}

// Progress counts a job's tasks by status.
type Progress struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Running int `json:"running"`
	Failed  int `json:"failed"`
	Pending int `json:"pending"`
	Skipped int `json:"skipped"`
	// Stage is the lowest stage with a task not finished (0 when none).
	Stage int `json:"stage,omitempty"`
}

// TaskReport is one task of a job's plan, with its last run.
type TaskReport struct {
	Index   int     `json:"index"`
	Name    string  `json:"taskName"`
	Node    string  `json:"node"`
	Service string  `json:"service,omitempty"`
	Stage   int     `json:"stage"`
	TaskID  string  `json:"taskId,omitempty"`
	Run     string  `json:"run,omitempty"` // the run's task name when not the task's own (DELETE before a retried CREATE)
	Runs    int     `json:"runs"`
	Elapsed float64 `json:"elapsedMs,omitempty"`
	Message string  `json:"message,omitempty"`
}

// ClusterReport is GET /v1/clusters/{name}: the cluster's nodes (secrets
// redacted) and its last job's live progress.
type ClusterReport struct {
	ClusterSummary
	SpecFile string        `json:"specFile,omitempty"`
	NodeList []*state.Node `json:"nodeList"`
	Jobs     int           `json:"jobs"`
	Retry    string        `json:"retry,omitempty"`
}

func jobReport(j *state.Job, detail bool, now time.Time) *JobReport {
	r := &JobReport{ID: j.ID, Action: j.Action, Status: j.Status, Message: j.Message, Started: j.Started}
	if !j.Ended.IsZero() {
		e := j.Ended
		r.Ended = &e
		r.Duration = float64(j.Ended.Sub(j.Started).Microseconds()) / 1000
	}
	idx := make([]int, 0, len(j.Tasks))
	for i := range j.Tasks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	p := &r.Progress
	for _, i := range idx {
		t := j.Tasks[i]
		p.Total++
		switch t.Status {
		case state.TaskDone:
			p.Done++
		case state.TaskSkipped:
			p.Skipped++
		case state.TaskFailed:
			p.Failed++
		case state.TaskRunning:
			p.Running++
		default:
			p.Pending++
		}
		if t.Status != state.TaskDone && t.Status != state.TaskSkipped && t.Stage > 0 && (p.Stage == 0 || t.Stage < p.Stage) {
			p.Stage = t.Stage
		}
		if !detail || (t.Status != state.TaskRunning && t.Status != state.TaskFailed) {
			continue
		}
		tr := TaskReport{Index: i, Name: t.Name, Node: t.Node, Service: t.Service, Stage: t.Stage, Runs: len(t.Runs), Message: t.Message}
		if n := len(t.Runs); n > 0 {
			last := t.Runs[n-1]
			tr.TaskID, tr.Message = last.ID, last.Message
			if last.Name != t.Name {
				tr.Run = last.Name
			}
			if t.Status == state.TaskRunning && j.Status == state.JobRunning {
				tr.Elapsed = float64(now.Sub(last.Started).Milliseconds())
			}
		}
		if t.Status == state.TaskRunning {
			r.Running = append(r.Running, tr)
		} else {
			r.Failed = append(r.Failed, tr)
		}
	}
	// Tasks not started yet may have no record.
	if j.TaskCount > p.Total {
		p.Pending += j.TaskCount - p.Total
		p.Total = j.TaskCount
	}
	return r
}

func summary(c *state.Cluster, now time.Time) ClusterSummary {
	s := ClusterSummary{Name: c.Name, Status: c.Status, Nodes: len(c.Nodes), Created: c.Created, Updated: c.Updated}
	if j := c.LastJob(); j != nil {
		s.LastJob = jobReport(j, false, now)
	}
	return s
}

// JobInterrupted is the status shown for a job the state says is running
// but that nobody runs.
const JobInterrupted = "interrupted"

// liveJob tells who runs a job the state says is running: a daemon (the
// cluster's job record) or a CLI (the cluster's lock). One nobody runs
// shows as interrupted, with what happens next.
func (s *Server) liveJob(ctx context.Context, st *state.KVStore, c *state.Cluster, r *JobReport) {
	if r == nil || r.Status != state.JobRunning {
		return
	}
	now := time.Now()
	if jobs := s.clusterJobs(); jobs != nil {
		rec, err := jobs.Job(ctx, c.Name)
		if err == nil && rec.State == runner.StateRunning {
			live := jobs.Liveness(rec)
			r.Runner = "loomd " + rec.Owner
			if !live.Running {
				r.Status, r.Note, r.Runner = JobInterrupted, live.Note, ""
			}
			return
		}
	}
	h, ok, err := st.Holder(c.Name)
	switch {
	case err != nil:
		return // unknown: leave it as the state says
	case ok && now.Before(h.Expires):
		r.Runner = fmt.Sprintf("%s (%s pid %d)", h.Owner, h.Host, h.PID)
		return
	}
	r.Status = JobInterrupted
	r.Note = fmt.Sprintf("nobody runs job %s: the loomd apply or loomd that ran it stopped without finishing; run 'loomd apply %s' (or 'loomd destroy %s') again to resume it",
		r.ID, orDash(c.SpecFile), c.Name)
}

func orDash(s string) string {
	if s == "" {
		return "SPEC"
	}
	return s
}

// clusterErr answers a store error: 404 for an unknown cluster, 400 for a
// bad name, 503 otherwise (the store is unreachable: try again).
func clusterErr(w http.ResponseWriter, err error) {
	switch {
	case writeUnavailable(w, err):
	case errors.Is(err, state.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error()+"; GET /v1/clusters lists the clusters this daemon's store holds")
	case errors.Is(err, state.ErrBadName):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "cluster state store: "+err.Error())
	}
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) {
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	names, err := st.List()
	if err != nil {
		clusterErr(w, err)
		return
	}
	out := struct {
		Clusters []ClusterSummary `json:"clusters"`
	}{Clusters: []ClusterSummary{}}
	now := time.Now()
	for _, n := range names {
		c, err := st.Get(n)
		if errors.Is(err, state.ErrNotFound) {
			continue // deleted since the listing
		}
		if err != nil {
			clusterErr(w, err)
			return
		}
		if !tokenOf(r).SeesTenant(c.Tenant, s.cfg.DefaultTenant) {
			continue
		}
		sum := summary(c, now)
		s.liveJob(r.Context(), st, c, sum.LastJob)
		out.Clusters = append(out.Clusters, sum)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) loadCluster(w http.ResponseWriter, r *http.Request) (*state.Cluster, bool) {
	return s.loadClusterView(w, r, state.View{})
}

// loadClusterView is loadCluster as v shows the cluster.
func (s *Server) loadClusterView(w http.ResponseWriter, r *http.Request, v state.View) (*state.Cluster, bool) {
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return nil, false
	}
	c, err := st.GetView(r.PathValue("name"), v)
	if err == nil && !tokenOf(r).SeesTenant(c.Tenant, s.cfg.DefaultTenant) {
		err = fmt.Errorf("cluster %s: %w", c.Name, state.ErrNotFound) // another tenant's
	}
	if err != nil {
		clusterErr(w, err)
		return nil, false
	}
	return c, true
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) {
	c, ok := s.loadCluster(w, r)
	if !ok {
		return
	}
	now := time.Now()
	red := c.Redacted()
	rep := ClusterReport{ClusterSummary: summary(c, now), SpecFile: c.SpecFile, Jobs: len(c.Jobs), NodeList: []*state.Node{}}
	for _, id := range red.NodeIDs() {
		rep.NodeList = append(rep.NodeList, red.Nodes[id])
	}
	if j := c.LastJob(); j != nil {
		rep.LastJob = jobReport(j, true, now)
		if st, err := s.clusterStore(r.Context()); err == nil {
			s.liveJob(r.Context(), st, c, rep.LastJob)
		}
		if j.Status == state.JobFailed {
			rep.Retry = fmt.Sprintf("fix the cause, then run 'loomd apply %s' again: it resumes job %s (finished tasks are not run again)", c.SpecFile, j.ID)
		}
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) clusterHistory(w http.ResponseWriter, r *http.Request) {
	c, ok := s.loadCluster(w, r)
	if !ok {
		return
	}
	out := struct {
		Cluster string       `json:"cluster"`
		Jobs    []*JobReport `json:"jobs"`
	}{Cluster: c.Name, Jobs: []*JobReport{}}
	now := time.Now()
	st, _ := s.clusterStore(r.Context())
	for i, j := range c.Jobs {
		rep := jobReport(j, false, now)
		rep.Events = j.Events
		if i == len(c.Jobs)-1 && st != nil {
			s.liveJob(r.Context(), st, c, rep)
		}
		out.Jobs = append(out.Jobs, rep)
	}
	writeJSON(w, http.StatusOK, out)
}

// getClusterState is the whole state, spec text included, for loomd
// apply to resume from. ?job=ID keeps that job alone among the jobs (none
// when the state has no such job); ?brief=true cuts the records of the
// tasks that finished well (done, skipped) to their status: what a
// summary shows. loomd apply's summary at a job's end asks for both: a
// 100-node create's whole state is about 314 KB, mostly such records.
func (s *Server) getClusterState(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	brief := false
	if v := q.Get("brief"); v != "" {
		var err error
		if brief, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("brief=%q: want true or false", v))
			return
		}
	}
	// Read as the view shows it: what it leaves out is not decoded.
	c, ok := s.loadClusterView(w, r, state.View{Job: q.Get("job"), Brief: brief})
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) putClusterState(w http.ResponseWriter, r *http.Request) {
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	body, ok := readBodyLimit(w, r, "the cluster state", maxClusterState)
	if !ok {
		return
	}
	name := r.PathValue("name")
	c, err := state.Unmarshal(name, body)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if c.Name != name {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the state is cluster %q's, not %q's", c.Name, name))
		return
	}
	if err := spec.CheckSize(c.SpecFile, int64(len(c.Spec)), s.cfg.SpecMax); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	if !s.clusterOK(w, r, name) {
		return
	}
	if c.Tenant, ok = s.submitTenant(w, r, c.Tenant, "clusters"); !ok {
		return
	}
	if err := st.Put(c); err != nil {
		clusterErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": name, "saved": true})
}

func (s *Server) deleteClusterState(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	name := r.PathValue("name")
	if jobs := s.clusterJobs(); jobs != nil {
		if err := jobs.Forget(r.Context(), name); s.jobError(w, err) {
			return
		}
	}
	if err := st.Delete(name); err != nil {
		clusterErr(w, err)
		return
	}
	if jl := s.clusterLog(); jl != nil {
		if err := jl.Purge(r.Context(), name); err != nil {
			s.log.Warn("removing a forgotten cluster's job log failed; it ages out", "cluster", name, "err", err)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": r.PathValue("name"), "deleted": true})
}

// ClusterChanges is the body of POST /v1/clusters/{name}/changes.
type ClusterChanges struct {
	Changes []state.Change `json:"changes"`
}

func (s *Server) appendClusterChanges(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	body, ok := readBodyLimit(w, r, "the changes", maxClusterState)
	if !ok {
		return
	}
	var ch ClusterChanges
	if err := json.Unmarshal(body, &ch); err != nil {
		writeError(w, http.StatusBadRequest, "decoding the changes: "+err.Error())
		return
	}
	if err := st.AppendChanges(r.PathValue("name"), ch.Changes); err != nil {
		clusterErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": r.PathValue("name"), "changes": len(ch.Changes)})
}

// LockRequest is the body of POST /v1/clusters/{name}/lock.
type LockRequest struct {
	state.Holder
	// TTLMs is the lease (default 15 s, at most 10 min).
	TTLMs int64 `json:"ttlMs,omitempty"`
	// Takeover names a holder the caller knows is dead (same host, its
	// process gone): its lease is taken at once.
	Takeover string `json:"takeover,omitempty"`
}

// LockConflict is the 409 answer: who holds the lock.
type LockConflict struct {
	Error  string       `json:"error"`
	Holder state.Holder `json:"holder"`
}

func (s *Server) lockCluster(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	body, ok := s.readBody(w, r, "the lock request")
	if !ok {
		return
	}
	var req LockRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Owner == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("want {\"owner\": ..., \"host\": ..., \"pid\": ..., \"ttlMs\": ...} (%v)", err))
		return
	}
	ttl := time.Duration(req.TTLMs) * time.Millisecond
	if ttl <= 0 {
		ttl = 15 * time.Second
	}
	ttl = min(ttl, 10*time.Minute)
	h, err := st.Lock(r.PathValue("name"), req.Holder, ttl, req.Takeover)
	var le *state.LockedError
	if errors.As(err, &le) {
		writeJSON(w, http.StatusConflict, LockConflict{Error: le.Error(), Holder: le.Holder})
		return
	}
	if err != nil {
		clusterErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

func (s *Server) unlockCluster(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	st, err := s.clusterStore(r.Context())
	if err != nil {
		clusterErr(w, err)
		return
	}
	owner := r.URL.Query().Get("owner")
	if owner == "" {
		writeError(w, http.StatusBadRequest, "DELETE /v1/clusters/{name}/lock needs ?owner=<the owner that took it>")
		return
	}
	if err := st.Unlock(r.PathValue("name"), owner); err != nil {
		clusterErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": r.PathValue("name"), "released": true})
}
