package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/jsretry"
)

// clusterState opens the cluster bucket on first use, from a queue that
// exposes its JetStream context (*queue.Queue does), as the API does:
// what the NATS cluster cannot do right now is tried again while ctx
// lasts (api.LateWait at most), and the next page tries again.
func (c *Console) clusterState(ctx context.Context) (*state.KVStore, error) {
	if c.clusterSem == nil {
		return nil, errors.New("the console is not set up (console.New)")
	}
	select {
	case c.clusterSem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("the cluster state bucket is still being opened: %w", context.Cause(ctx))
	}
	defer func() { <-c.clusterSem }()
	if c.clusterStore != nil {
		return c.clusterStore, nil
	}
	if c.cfg.Clusters != nil {
		c.clusterStore = c.cfg.Clusters
		return c.clusterStore, nil
	}
	q, ok := c.cfg.Queue.(interface {
		JetStream() jetstream.JetStream
		Replicas() int
	})
	if !ok {
		return nil, errors.New("this daemon's queue keeps no cluster state (it is not a JetStream queue)")
	}
	retry := &jsretry.Waiter{Logger: c.log, Hint: jsretry.Hint(q.Replicas(), "--replicas")}
	octx, cancel := context.WithTimeout(ctx, api.LateWait)
	defer cancel()
	st, err := state.OpenKV(octx, q.JetStream(), q.Replicas(), retry)
	if err != nil {
		err = retry.Explain(err)
		if jsretry.Transient(err) {
			err = fmt.Errorf("the NATS cluster cannot create or open %s right now: %w; reload the page to try again", jsretry.What("kv bucket", state.Bucket, q.Replicas()), err)
		}
		c.log.Warn("cannot open the cluster state bucket", "err", err)
		return nil, err
	}
	c.clusterStore = st
	return st, nil
}

type clusterRow struct {
	Name     string
	Status   string
	Nodes    int
	Active   int
	Updated  time.Time
	Job      *state.Job
	Progress progress
}

// progress counts a job's tasks by status.
type progress struct {
	Total, Done, Running, Failed, Pending, Skipped int
}

func progressOf(j *state.Job) progress {
	var p progress
	for _, t := range j.Tasks {
		p.Total++
		switch t.Status {
		case state.TaskDone:
			p.Done++
		case state.TaskRunning:
			p.Running++
		case state.TaskFailed:
			p.Failed++
		case state.TaskSkipped:
			p.Skipped++
		default:
			p.Pending++
		}
	}
	if j.TaskCount > p.Total {
		p.Pending += j.TaskCount - p.Total
		p.Total = j.TaskCount
	}
	return p
}

func (c *Console) clusters(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d := struct {
		Clusters []clusterRow
		Error    string
	}{}
	st, err := c.clusterState(ctx)
	var names []string
	if err == nil {
		names, err = st.List()
	}
	for _, n := range names {
		cl, gerr := st.Get(n)
		if errors.Is(gerr, state.ErrNotFound) {
			continue
		}
		if gerr != nil {
			err = gerr
			break
		}
		if !c.scope(r).allows(cl.Tenant) {
			continue
		}
		row := clusterRow{Name: cl.Name, Status: cl.Status, Nodes: len(cl.Nodes), Updated: cl.Updated, Job: cl.LastJob()}
		for _, node := range cl.Nodes {
			if node.State == state.NodeActive {
				row.Active++
			}
		}
		if row.Job != nil {
			row.Progress = progressOf(row.Job)
		}
		d.Clusters = append(d.Clusters, row)
	}
	code := http.StatusOK
	if err != nil {
		d.Error, code = "Reading the clusters failed: "+err.Error(), http.StatusServiceUnavailable
	}
	c.render(w, r, code, "clusters", &view{Title: "Clusters", Nav: "clusters", Topics: []string{topicClusters}, Data: d})
}

// stageView is a job drawn as its stages: what runs, what waits on what
// (a stage waits on the ones before it), what failed and why.
type stageView struct {
	Job      *state.Job
	Progress progress
	Stages   []stage
	// Unplanned is set when the plan could not be rebuilt (a destroy
	// removed its nodes, or the spec no longer parses): the stages then
	// hold only the tasks that ran.
	Unplanned string
}

type stage struct {
	N     int
	Tasks []stageTask
	// Status sums the stage up: done, running, failed, waiting.
	Status string
}

type stageTask struct {
	// Waits names the unfinished tasks a waiting task waits for (its
	// node's previous task, and every task of a service action it needs
	// across the nodes), the first few of them.
	Waits   string
	Index   int
	Name    string
	Node    string
	Service string
	Status  string
	TaskID  string
	Runs    int
	Message string
	Stderr  string
	Started time.Time
	Elapsed time.Duration
}

func buildStages(cl *state.Cluster, job *state.Job, now time.Time) stageView {
	v := stageView{Job: job, Progress: progressOf(job)}
	byStage := map[int][]stageTask{}
	row := func(i int, name, node, svc string, st int) {
		t := stageTask{Index: i, Name: name, Node: node, Service: svc, Status: state.TaskPending}
		if rec := job.Tasks[i]; rec != nil {
			t.Status, t.Message, t.Runs = rec.Status, rec.Message, len(rec.Runs)
			if n := len(rec.Runs); n > 0 {
				last := rec.Runs[n-1]
				t.TaskID, t.Started, t.Stderr = last.ID, last.Started, last.Stderr
				if last.Message != "" {
					t.Message = last.Message
				}
				if t.Status == state.TaskRunning && job.Status == state.JobRunning {
					t.Elapsed = now.Sub(last.Started)
				}
			}
		}
		byStage[st] = append(byStage[st], t)
	}
	// Every step's tasks, job-wide indexes, stages numbered on across
	// the steps.
	plans, err := apply.JobPlans(cl, job)
	whole := err == nil && len(job.Steps) > 0
	for _, p := range plans {
		whole = whole && p != nil
	}
	if whole {
		base := 0
		for k, p := range plans {
			off := job.Steps[k].Offset
			for i, t := range p.Tasks {
				row(off+i, t.Name, t.Node, t.Service, base+t.Stage)
				st := &byStage[base+t.Stage][len(byStage[base+t.Stage])-1]
				if st.Status == state.TaskPending {
					st.Waits = waitsFor(job, p, off, i)
				}
			}
			base += len(p.Stages)
		}
	} else {
		if err != nil {
			v.Unplanned = err.Error()
		} else {
			v.Unplanned = "a step's plan no longer rebuilds from the state (its nodes are gone): the tasks that ran are listed"
		}
		idx := make([]int, 0, len(job.Tasks))
		for i := range job.Tasks {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			t := job.Tasks[i]
			row(i, t.Name, t.Node, t.Service, t.Stage)
		}
	}
	nums := make([]int, 0, len(byStage))
	for n := range byStage {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for _, n := range nums {
		s := stage{N: n, Tasks: byStage[n], Status: "done"}
		counts := map[string]int{}
		for _, t := range s.Tasks {
			counts[t.Status]++
		}
		switch {
		case counts[state.TaskFailed] > 0:
			s.Status = "failed"
		case counts[state.TaskRunning] > 0:
			s.Status = "running"
		case counts[state.TaskPending] > 0:
			s.Status = "waiting"
		}
		v.Stages = append(v.Stages, s)
	}
	return v
}

type nodeRow struct {
	*state.Node
	Address string
}

type clusterData struct {
	// Services are the services the nodes carry, for the service
	// action form.
	Services []string
	// Record is the daemon's record of the cluster's current or last
	// job (nil when none ran through a daemon).
	Record   *runner.Record
	Liveness runner.Liveness
	Actions  bool
	Running  bool
	Cluster  *state.Cluster
	Nodes    []nodeRow
	Current  *stageView
	Jobs     []jobRow
	Commands []command
	Retry    string
}

type jobRow struct {
	*state.Job
	Progress progress
}

// command is a CLI equivalent of an action on the page.
type command struct {
	What, CLI string
}

func (c *Console) loadCluster(w http.ResponseWriter, r *http.Request) (*state.Cluster, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	st, err := c.clusterState(ctx)
	if err != nil {
		c.unavailable(w, r, "opening the cluster store", err)
		return nil, false
	}
	name := r.PathValue("name")
	cl, err := st.Get(name)
	switch {
	case errors.Is(err, state.ErrNotFound) && c.jobStarting(r.Context(), name):
		// A job was just submitted for a new cluster: the runner writes
		// its state as it begins. The page shows it empty and fills in.
		return &state.Cluster{Name: name, Status: state.Pending, Nodes: map[string]*state.Node{}}, true
	case errors.Is(err, state.ErrNotFound), errors.Is(err, state.ErrBadName):
		c.notFound(w, r, fmt.Sprintf("loomd's store holds no cluster %q.", name))
		return nil, false
	case err != nil:
		c.unavailable(w, r, "reading cluster "+name, err)
		return nil, false
	case !c.scope(r).allows(cl.Tenant):
		c.notFound(w, r, fmt.Sprintf("loomd's store holds no cluster %q.", name))
		return nil, false
	}
	return cl, true
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request) {
	cl, ok := c.loadCluster(w, r)
	if !ok {
		return
	}
	now := c.cfg.Now()
	red := cl.Redacted()
	d := clusterData{Cluster: red}
	seen := map[string]bool{}
	for _, id := range red.NodeIDs() {
		n := red.Nodes[id]
		d.Nodes = append(d.Nodes, nodeRow{Node: n, Address: n.Address()})
		for _, svc := range n.Services {
			if !seen[svc] {
				seen[svc] = true
				d.Services = append(d.Services, svc)
			}
		}
	}
	sort.Strings(d.Services)
	if j := cl.LastJob(); j != nil {
		v := buildStages(cl, j, now)
		d.Current = &v
		if j.Status == state.JobFailed {
			d.Retry = fmt.Sprintf("Fix the cause, then run 'loomd apply %s' again: it resumes job %s (finished tasks are not run again).", cl.SpecFile, j.ID)
		}
	}
	for i := len(cl.Jobs) - 1; i >= 0; i-- {
		d.Jobs = append(d.Jobs, jobRow{Job: cl.Jobs[i], Progress: progressOf(cl.Jobs[i])})
	}
	if c.cfg.Jobs != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		if rec, err := c.cfg.Jobs.Job(ctx, cl.Name); err == nil {
			d.Record = &rec
			d.Running = !rec.Done()
			if lv, ok := c.cfg.Jobs.(interface {
				Liveness(runner.Record) runner.Liveness
			}); ok {
				d.Liveness = lv.Liveness(rec)
			}
		}
		cancel()
		d.Actions = !c.readOnly(r)
	}
	srv := c.cliServer(r)
	spec := cl.SpecFile
	if spec == "" {
		spec = "SPEC"
	}
	d.Commands = []command{
		{"Show the plan of the spec against this cluster", "loomd plan " + shellQuote(spec) + srv},
		{"Apply the spec (create, change, or resume a failed job)", "loomd apply " + shellQuote(spec) + srv},
		{"Restart a service on every node carrying it (or start, stop)", "loomd apply " + shellQuote(spec) + " --action restart --services SERVICE" + srv},
		{"Destroy the cluster (delete every node)", "loomd destroy " + shellQuote(cl.Name) + srv},
		{"The job history", "loomd cluster history " + shellQuote(cl.Name) + srv},
	}
	c.render(w, r, http.StatusOK, "cluster", &view{Title: "Cluster " + cl.Name, Nav: "clusters", Topics: []string{"cluster:" + cl.Name}, Data: d})
}

func (c *Console) clusterJob(w http.ResponseWriter, r *http.Request) {
	cl, ok := c.loadCluster(w, r)
	if !ok {
		return
	}
	id := r.PathValue("job")
	for _, j := range cl.Jobs {
		if j.ID == id {
			v := buildStages(cl, j, c.cfg.Now())
			c.render(w, r, http.StatusOK, "job", &view{Title: "Job " + j.ID, Nav: "clusters", Topics: []string{"cluster:" + cl.Name},
				Data: map[string]any{"Cluster": cl.Name, "View": v}})
			return
		}
	}
	c.notFound(w, r, fmt.Sprintf("Cluster %s has no job %q.", cl.Name, id))
}

// jobStarting reports whether a daemon runs a job for a cluster whose
// state is not written yet.
func (c *Console) jobStarting(ctx context.Context, name string) bool {
	if c.cfg.Jobs == nil {
		return false
	}
	rec, err := c.cfg.Jobs.Job(ctx, name)
	return err == nil && !rec.Done()
}

// waitsFor names the unfinished prerequisites of task i of a step's plan
// (job-wide index off+i): its direct dependencies and the members of the
// barrier groups it waits on.
func waitsFor(job *state.Job, p *plan.Plan, off, i int) string {
	done := func(j int) bool {
		t := job.Tasks[off+j]
		return t != nil && (t.Status == state.TaskDone || t.Status == state.TaskSkipped)
	}
	seen := map[int]bool{}
	var names []string
	n := 0
	add := func(j int) {
		if seen[j] || done(j) || j == i {
			return
		}
		seen[j] = true
		n++
		if len(names) < 3 {
			t := p.Tasks[j]
			name := t.Name
			if t.Service != "" {
				name += " " + t.Service
			}
			names = append(names, name+" on "+t.Node)
		}
	}
	t := p.Tasks[i]
	for _, d := range t.Deps {
		add(d)
	}
	for _, g := range t.Groups {
		if g >= 0 && g < len(p.Groups) {
			for _, m := range p.Groups[g] {
				add(m)
			}
		}
	}
	if n == 0 {
		return ""
	}
	out := strings.Join(names, ", ")
	if n > len(names) {
		out += fmt.Sprintf(" and %d more", n-len(names))
	}
	return out
}
