package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Cluster jobs run in the daemon (internal/cluster/runner): loomd apply
// and destroy submit them here and follow them through the job record,
// the per-job task view and the job log.

func (s *Server) clusterJobRoutes(mux *http.ServeMux) {
	mux.Handle("/v1/clusters/{name}/jobs", s.route("cluster_jobs", map[string]http.HandlerFunc{"POST": s.submitClusterJob}))
	mux.Handle("/v1/clusters/{name}/plan", s.route("cluster_plan", map[string]http.HandlerFunc{"POST": s.planClusterJob}))
	mux.Handle("/v1/clusters/{name}/job", s.route("cluster_job", map[string]http.HandlerFunc{"GET": s.getClusterJob}))
	mux.Handle("/v1/clusters/{name}/job/cancel", s.route("cluster_job_cancel", map[string]http.HandlerFunc{"POST": s.cancelClusterJob}))
	mux.Handle("/v1/clusters/{name}/jobs/{id}", s.route("cluster_job_step", map[string]http.HandlerFunc{"GET": s.getClusterJobStep}))
	mux.Handle("/v1/clusters/{name}/log", s.route("cluster_log", map[string]http.HandlerFunc{"GET": s.getClusterLog}))
}

// JobView is a cluster job as GET /v1/clusters/{name}/job shows it: the
// record (the spec's text left out), whether a daemon runs it now, and the
// job log's newest batch (follow the log after it).
type JobView struct {
	runner.Record
	Liveness runner.Liveness `json:"liveness"`
	LogSeq   uint64          `json:"logSeq"`
}

// JobSubmitResponse answers POST /v1/clusters/{name}/jobs.
type JobSubmitResponse struct {
	// Changes is false when the cluster already is as asked: no job.
	Changes bool `json:"changes"`
	// Job is the job submitted, or the same change already running
	// (Attached).
	Job      *JobView `json:"job,omitempty"`
	Attached bool     `json:"attached,omitempty"`
	Message  string   `json:"message,omitempty"`
	// Notes are what the plan leaves alone, and why.
	Notes []string `json:"notes,omitempty"`
}

// JobBusy is the 409 answer: the cluster runs another job.
type JobBusy struct {
	Error string   `json:"error"`
	Job   *JobView `json:"job,omitempty"`
}

// StepView is one job of the cluster's state with every task of every
// step (job-wide indexes; stages numbered on across the steps): what a
// live view draws.
type StepView struct {
	Job    *JobReport    `json:"job"`
	Action string        `json:"action"`
	Tasks  []StepTask    `json:"tasks"`
	Stages int           `json:"stages"`
	Events []state.Event `json:"events,omitempty"`
	// LogSeq is the job log's newest batch when the view was read:
	// follow the task changes after it.
	LogSeq uint64 `json:"logSeq"`
}

// StepTask is one task of a job's plan and where it is.
type StepTask struct {
	Index   int       `json:"index"`
	Name    string    `json:"taskName"`
	Node    string    `json:"node"`
	Service string    `json:"service,omitempty"`
	Stage   int       `json:"stage"`
	Status  string    `json:"status"`
	Run     string    `json:"run,omitempty"`
	TaskID  string    `json:"taskId,omitempty"`
	Runs    int       `json:"runs,omitempty"`
	Started time.Time `json:"started,omitzero"`
	Message string    `json:"message,omitempty"`
}

// LogResponse answers GET /v1/clusters/{name}/log.
type LogResponse struct {
	Cluster string     `json:"cluster"`
	Entries []LogEntry `json:"entries"`
	Next    uint64     `json:"next"`
}

// LogEntry is a job log entry with the batch it came in.
type LogEntry struct {
	Seq uint64 `json:"seq"`
	joblog.Entry
}

func (s *Server) jobsReady(w http.ResponseWriter, r *http.Request) bool {
	if !s.lateReady(w, r) {
		return false
	}
	if s.clusterJobs() == nil || s.clusterLog() == nil {
		writeError(w, http.StatusServiceUnavailable, "this loomd runs no cluster jobs (its queue keeps no cluster state)")
		return false
	}
	return true
}

func (s *Server) jobView(ctx context.Context, rec runner.Record) *JobView {
	rec.Request.Spec = ""
	v := &JobView{Record: rec, Liveness: s.clusterJobs().Liveness(rec)}
	v.LogSeq, _ = s.clusterLog().Last(ctx, rec.Cluster)
	return v
}

func (s *Server) submitClusterJob(w http.ResponseWriter, r *http.Request) {
	if !s.jobsReady(w, r) {
		return
	}
	body, ok := readBodyLimit(w, r, "the job request", maxClusterState)
	if !ok {
		return
	}
	bodyRead(w)
	var req runner.Request
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "decoding the job request: "+err.Error()+` (want {"verb": "apply", "spec": "...", ...})`)
		return
	}
	if err := spec.CheckSize(req.SpecFile, int64(len(req.Spec)), s.cfg.SpecMax); err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	name := r.PathValue("name")
	if !s.clusterOK(w, r, name) {
		return
	}
	if req.Tenant, ok = s.submitTenant(w, r, req.Tenant, "cluster jobs"); !ok {
		return
	}
	seq, _ := s.clusterLog().Last(r.Context(), name)
	acc, err := s.clusterJobs().Submit(r.Context(), name, req)
	if s.jobError(w, err) {
		return
	}
	if acc.Record == nil {
		msg := fmt.Sprintf("No changes: cluster %s is as %s says.", name, req.SpecFile)
		if req.Verb == runner.VerbDestroy {
			msg = fmt.Sprintf("Cluster %s has no nodes: nothing to destroy.", name)
		}
		var notes []string
		if acc.Change != nil {
			notes = acc.Change.Notes
		}
		writeJSON(w, http.StatusOK, JobSubmitResponse{Changes: false, Message: msg, Notes: notes})
		return
	}
	v := s.jobView(r.Context(), *acc.Record)
	code := http.StatusAccepted
	if acc.Attached {
		code = http.StatusOK
	} else {
		v.LogSeq = seq // the new job's entries all come after
	}
	writeJSON(w, code, JobSubmitResponse{Changes: true, Job: v, Attached: acc.Attached})
}

// planClusterJob answers POST /v1/clusters/{name}/plan: the plan (a
// loomd-plan document) a job request would run, made by this daemon with
// its plugins and resource files; nothing runs. Submitting the request
// with the document's expect ({"expect": ...}) runs exactly that plan, or
// is refused (412) when the cluster changed meanwhile.
func (s *Server) planClusterJob(w http.ResponseWriter, r *http.Request) {
	if !s.jobsReady(w, r) {
		return
	}
	body, ok := readBodyLimit(w, r, "the job request", maxClusterState)
	if !ok {
		return
	}
	bodyRead(w)
	var req runner.Request
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "decoding the job request: "+err.Error()+` (want {"verb": "apply", "spec": "...", ...})`)
		return
	}
	ch, _, err := s.clusterJobs().PlanJob(r.Context(), r.PathValue("name"), req)
	if s.jobError(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, ch.Document(req.Options(), false))
}

// jobError answers a runner error; false when there is none.
func (s *Server) jobError(w http.ResponseWriter, err error) bool {
	var busy *runner.BusyError
	var bad *runner.BadRequestError
	var stale *runner.StaleError
	switch {
	case err == nil:
		return false
	case errors.As(err, &stale):
		writeError(w, http.StatusPreconditionFailed, stale.Error())
	case errors.As(err, &busy):
		resp := JobBusy{Error: busy.Error()}
		if busy.Record != nil {
			resp.Job = s.jobView(context.Background(), *busy.Record)
		}
		writeJSON(w, http.StatusConflict, resp)
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, bad.Error())
	case errors.Is(err, runner.ErrNoJob):
		writeError(w, http.StatusNotFound, err.Error()+"; 'loomd apply' through this daemon runs one")
	case errors.Is(err, runner.ErrStopping):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	case errors.Is(err, state.ErrBadName):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		writeError(w, http.StatusServiceUnavailable, "cluster jobs: "+err.Error())
	}
	return true
}

func (s *Server) getClusterJob(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	if !s.jobsReady(w, r) {
		return
	}
	rec, err := s.clusterJobs().Job(r.Context(), r.PathValue("name"))
	if s.jobError(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, s.jobView(r.Context(), rec))
}

func (s *Server) cancelClusterJob(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	if !s.jobsReady(w, r) {
		return
	}
	who := r.URL.Query().Get("by")
	if who == "" {
		who = "a request to the API"
	}
	rec, err := s.clusterJobs().Cancel(r.Context(), r.PathValue("name"), who)
	if err != nil && rec.ID != "" {
		writeJSON(w, http.StatusConflict, JobBusy{Error: err.Error(), Job: s.jobView(r.Context(), rec)})
		return
	}
	if s.jobError(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, s.jobView(r.Context(), rec))
}

func (s *Server) getClusterJobStep(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	if !s.jobsReady(w, r) {
		return
	}
	c, ok := s.loadCluster(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	i := slices.IndexFunc(c.Jobs, func(j *state.Job) bool { return j.ID == id })
	if i < 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("cluster %s has no job %s; GET /v1/clusters/%s/history lists its jobs", c.Name, id, c.Name))
		return
	}
	j := c.Jobs[i]
	seq, _ := s.clusterLog().Last(r.Context(), c.Name)
	v := StepView{Job: jobReport(j, true, time.Now()), Action: j.Action, Events: j.Events, LogSeq: seq, Tasks: []StepTask{}}
	row := func(i int, name, node, svc string, stage int) StepTask {
		t := StepTask{Index: i, Name: name, Node: node, Service: svc, Stage: stage, Status: state.TaskPending}
		if rec := j.Tasks[i]; rec != nil {
			t.Status, t.Message, t.Runs = rec.Status, rec.Message, len(rec.Runs)
			if n := len(rec.Runs); n > 0 {
				last := rec.Runs[n-1]
				t.TaskID, t.Started = last.ID, last.Started
				if last.Message != "" {
					t.Message = last.Message
				}
				if last.Name != name {
					t.Run = last.Name
				}
			}
		}
		return t
	}
	// Every step's tasks, with job-wide indexes and stages numbered on
	// across steps.
	plans, err := apply.JobPlans(c, j)
	whole := err == nil && len(j.Steps) > 0
	for _, p := range plans {
		whole = whole && p != nil
	}
	if whole {
		for k, p := range plans {
			off := j.Steps[k].Offset
			for i, t := range p.Tasks {
				v.Tasks = append(v.Tasks, row(off+i, t.Name, t.Node, t.Service, v.Stages+t.Stage))
			}
			v.Stages += len(p.Stages)
		}
	} else {
		// The plan is gone (a destroy deleted its nodes): the tasks that
		// ran are on record.
		idx := make([]int, 0, len(j.Tasks))
		for i := range j.Tasks {
			idx = append(idx, i)
		}
		slices.Sort(idx)
		for _, i := range idx {
			t := j.Tasks[i]
			v.Tasks = append(v.Tasks, row(i, t.Name, t.Node, t.Service, t.Stage))
			v.Stages = max(v.Stages, t.Stage)
		}
	}
	writeJSON(w, http.StatusOK, v)
}

// maxLogBatches bounds one GET of the job log.
const maxLogBatches = 256

func (s *Server) getClusterLog(w http.ResponseWriter, r *http.Request) {
	if !s.clusterOK(w, r, r.PathValue("name")) {
		return
	}
	if !s.jobsReady(w, r) {
		return
	}
	name := r.PathValue("name")
	q := r.URL.Query()
	after, limit, wait, ok := s.logCursor(w, q, "the seq of the last entry read", "batches", maxLogBatches, maxLogBatches)
	if !ok {
		return
	}
	kinds := map[string]bool{}
	if k := q.Get("kind"); k != "" {
		for _, x := range strings.Split(k, ",") {
			kinds[x] = true
		}
	}
	job := q.Get("job")
	if _, err := s.clusterStore(r.Context()); err != nil {
		clusterErr(w, err)
		return
	}
	if !validClusterName(name) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cluster name %q: %v", name, state.ErrBadName))
		return
	}
	if wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		err := s.clusterLog().Wait(ctx, name, after)
		cancel()
		if err != nil {
			clusterErr(w, err)
			return
		}
	}
	batches, err := s.clusterLog().Read(r.Context(), name, after, limit)
	if err != nil {
		clusterErr(w, err)
		return
	}
	out := LogResponse{Cluster: name, Entries: []LogEntry{}, Next: after}
	for _, b := range batches {
		out.Next = b.Seq
		for _, e := range b.Entries {
			if (job != "" && e.Job != job) || (len(kinds) > 0 && !kinds[e.Kind]) {
				continue
			}
			out.Entries = append(out.Entries, LogEntry{Seq: b.Seq, Entry: e})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func validClusterName(name string) bool {
	if name == "" || len(name) > 32 || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
