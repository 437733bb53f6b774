package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

// clusterOptions are the flags of the commands that run cluster jobs.
type clusterOptions struct {
	stateDir    string
	local       bool
	parallelism int
	client      clientOptions
	taskTimeout time.Duration
	live        bool
	detach      bool
	// retry is the command that resumes a failed job, for the summary.
	retry string
	// specMax is --spec-max-size: a larger spec is refused before parsing.
	specMax string
}

// loadSpecFile reads the spec in path under --spec-max-size.
func (o *clusterOptions) loadSpecFile(path string) (*spec.Spec, error) {
	max := int64(spec.DefaultMaxSize)
	if o.specMax != "" {
		n, err := runtime.ParseSize(o.specMax)
		if err != nil {
			return nil, fmt.Errorf("--spec-max-size %q: want a size such as 8MiB", o.specMax)
		}
		max = n
	}
	return spec.LoadFileLimit(path, max)
}

// retryCommand is "loomd VERB TARGET" with the flags that say where the
// cluster lives.
func (o *clusterOptions) retryCommand(verb, target string) string {
	cmd := "loomd " + verb + " " + target
	if o.local {
		cmd += " --local"
	} else if o.client.server != "" && o.client.server != "http://"+api.DefaultAddr {
		cmd += " --server " + o.client.server
	}
	if o.stateDir != "" {
		cmd += " --state-dir " + o.stateDir
	}
	return cmd
}

func (o *clusterOptions) addFlags(fs *pflag.FlagSet, run bool) {
	fs.StringVar(&o.specMax, "spec-max-size", "8MiB", "largest cluster spec file read; a larger one is refused before it is parsed")
	fs.StringVar(&o.stateDir, "state-dir", "", "keep the cluster state in files in this directory instead of the loomd's store (default with --local: $XDG_STATE_HOME/loomd/clusters, ~/.local/state/loomd/clusters)")
	o.client.addFlags(fs)
	if !run {
		fs.BoolVar(&o.local, "local", false, "read the cluster state from --state-dir (where 'loomd apply --local' keeps it) instead of the loomd at --server")
		return
	}
	fs.BoolVar(&o.local, "local", false, "run the tasks in this process (plugins from --plugins) and keep the state in --state-dir, instead of on the loomd at --server and in its store")
	fs.IntVar(&o.parallelism, "parallelism", 16, "most tasks running at once (never more than one per node)")
	fs.BoolVar(&o.live, "live", true, "on a terminal, show a live view (stages, running tasks, failures) instead of log lines; --live=false or --log-format json keeps the log lines")
	fs.DurationVar(&o.taskTimeout, "task-timeout", 0, "without --local, give up waiting for one task after this long (0: the daemon's own deadlines)")
	fs.BoolVar(&o.detach, "detach", false, "submit the job to the daemon and return at once; 'loomd cluster watch NAME' follows it")
}

type applyOptions struct {
	g         *globalOptions
	cluster   clusterOptions
	file      string
	noRestart bool
	onFailure string
	tmpl      templateOptions
}

func (a *App) newApplyCmd(g *globalOptions) *cobra.Command {
	o := &applyOptions{g: g}
	cmd := &cobra.Command{
		Use:   "apply SPEC | apply --template T --size N [NAME]",
		Short: "Bring a cluster to what its spec says: create, scale, add services, reconfigure",
		Long: `Compare the cluster spec with the cluster's saved state and run the jobs that bring
the cluster there (the plan 'loomd plan SPEC' prints): create a new cluster; resume
a job an earlier apply did not finish (tasks that finished are not run again);
destroy the nodes a smaller count removed; create the nodes a larger count added;
add services added to node groups; reconfigure (with a restart of the services,
unless --no-restart) when the config, provider or services changed.

Tasks run as soon as their prerequisites finished, one at a time per node, at
most --parallelism at once: on the loomd at --server (POST /v1/tasks), or with
--local in this process through the plugins in --plugins. Each result is merged
into the node's state and the config of the node's later tasks. A failed task is
retried up to 3 attempts; a failed CONFIRM becomes DELETE, CREATE, CONFIRM, and
a failed CREATE is retried only after a DELETE of what it may have made.

Logs (stderr) get one line per task state change. The summary (stdout) names
every node with its address and every failed task. Exit status: 0 when the
cluster is as the spec says, 1 when a job failed (run apply again to resume),
2 for a bad spec or flags.

With a template spec (template: T, size: N) or --template T --size N [NAME],
Coopr's solver lays the nodes out from the catalog (--catalog) first: a new
cluster, a scale up or down that keeps the existing nodes' services, services
added to the existing nodes by Coopr's rules (docs/clusters.md).`,
		Example: `  loomd apply cluster.yaml --local
  loomd apply cluster.yaml --server http://127.0.0.1:7070 --parallelism 32
  loomd apply --template hadoop-distributed --size 5 hdp --local`,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sp, file, err := a.loadSpec(cmd, args, &o.tmpl, &o.cluster)
			if err != nil {
				return err
			}
			o.file = file
			return a.runApply(cmd.Context(), o, sp)
		},
	}
	o.cluster.addFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.noRestart, "no-restart", false, "reconfigure without stopping and starting services")
	cmd.Flags().StringVar(&o.onFailure, "on-failure", "keep", "after a failed create: keep what exists (and report it), or rollback (destroy the nodes it created)")
	o.tmpl.addFlags(cmd.Flags())
	return cmd
}

func (a *App) runApply(ctx context.Context, o *applyOptions, sp *spec.Spec) error {
	if o.onFailure != "keep" && o.onFailure != "rollback" {
		return usageErr(fmt.Errorf("--on-failure %q: want keep or rollback", o.onFailure))
	}
	req := runner.Request{Verb: runner.VerbApply, Spec: sp.Source, SpecFile: o.file, NoRestart: o.noRestart, OnFailure: o.onFailure}
	o.cluster.retry = o.cluster.retryCommand("apply", o.file)
	// A template spec is solved around the cluster's nodes first: the job
	// runs the solved spec (the daemon needs no catalog).
	prep := func(cl *state.Cluster, req *runner.Request) error {
		solved, layout, err := a.resolveSpec(sp, cl, &o.tmpl)
		if err != nil {
			return err
		}
		if layout != nil {
			if err := a.printLayout(layout); err != nil {
				return err
			}
		}
		req.Spec = solved.Source
		return nil
	}
	return a.runCluster(ctx, o.g, &o.cluster, sp.Name, req, prep)
}

// runCluster runs a request: in this process (--local, --state-dir), or
// on the daemon at --server, followed from here. prep, when set, sees the
// cluster's state first and may complete the request.
func (a *App) runCluster(ctx context.Context, g *globalOptions, o *clusterOptions, name string, req runner.Request, prep func(*state.Cluster, *runner.Request) error) error {
	req.Parallelism = o.parallelism
	req.TaskTimeoutMs = o.taskTimeout.Milliseconds()
	req.Requester = requester()
	if o.parallelism < 1 {
		return usageErr(fmt.Errorf("--parallelism %d: must be at least 1", o.parallelism))
	}
	if o.local || o.stateDir != "" {
		if o.detach {
			return usageErr(errors.New("--detach needs a daemon to run the job: drop --local and --state-dir"))
		}
		return a.runHere(ctx, g, o, name, req, prep)
	}
	return a.submitJob(ctx, g, o, name, req, prep)
}

// requester names who asks, for the job's history: user@host pid N.
func requester() string {
	host, _ := os.Hostname()
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	return fmt.Sprintf("%s@%s pid %d", who, host, os.Getpid())
}

// runHere runs the job in this process, its state in the state dir: the
// tasks run here (--local) or on the daemon at --server (--state-dir
// alone).
func (a *App) runHere(ctx context.Context, g *globalOptions, o *clusterOptions, name string, req runner.Request, prep func(*state.Cluster, *runner.Request) error) error {
	st, err := a.clusterStore(ctx, o)
	if err != nil {
		return err
	}
	unlock, err := st.Lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	cl, err := a.getCluster(st, name)
	if err != nil {
		return err
	}
	if prep != nil {
		if err := prep(cl, &req); err != nil {
			return err
		}
	}
	steps, err := runner.Plan(cl, req)
	if err != nil {
		return usageErr(err)
	}
	if len(steps) == 0 {
		if req.Verb == runner.VerbDestroy {
			fmt.Fprintf(a.Out, "Cluster %s has no nodes: nothing to destroy.\n", name)
			return nil
		}
		fmt.Fprintf(a.Out, "No changes: cluster %s is as %s says.\n\n", name, req.SpecFile)
		return a.printClusterSummary(cl, nil, nil, "")
	}
	logger, err := a.newLogger(g.log)
	if err != nil {
		return err
	}
	live := o.live && stderrTerminal(a.Err) && g.log.format != "json"
	host, _ := os.Hostname()
	who := fmt.Sprintf("loomd apply --local (%s pid %d)", host, os.Getpid())
	dir := st.(fileStore).Dir
	secrets := &joblog.Secrets{}
	secrets.Set(name, "", runner.Secrets(req, cl))
	jl := &joblog.File{Dir: dir, Source: who, Secrets: secrets}
	defer jl.Close()
	// Plugin lines go to the job log, and to stderr unless the live view
	// is there (it would scroll them away, or they it).
	quiet := &gate{}
	tee := joblog.NewTee()
	tee.SetSink(jl, who)
	pluginLogger := slog.New(tee.Handler(quiet.handler(logger.Handler())))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tasks, closeTasks, err := a.clusterRunner(ctx, g, o, pluginLogger, tee, name)
	if err != nil {
		return err
	}
	defer closeTasks()
	var first []state.Event
	if cl != nil && cl.LastJob() != nil && cl.LastJob().Status == state.JobRunning {
		// This process holds the lock: whoever ran it is gone.
		first = []state.Event{{Time: time.Now(), Kind: state.EventInterrupted, By: "loomd apply",
			Message: "the process that ran it stopped without finishing (killed, or its machine went down)"},
			{Time: time.Now(), Kind: state.EventResumed, By: who, Message: fmt.Sprintf("%s for %s", req.Verb, req.Requester)}}
	}
	var view *liveView
	eng := &runner.Engine{Store: st, Tasks: tasks, Log: jl, Who: who, Source: who}
	if !live {
		eng.Logger = logger
	}
	eng.Started = func(i int, _ runner.Step, job *state.Job, p *plan.Plan) {
		if live {
			quiet.on.Store(true)
			view = newLiveView(a.Err, p, job)
		}
	}
	eng.Observe = func(_ int, _ *state.Job, _ *plan.Plan, ev apply.Event) {
		if view != nil {
			view.observe(ev)
		}
	}
	eng.Ended = func(i int, st runner.Step, cl *state.Cluster, job *state.Job, p *plan.Plan) {
		if view != nil {
			view.close()
			view = nil
			quiet.on.Store(false)
		}
		if len(steps) > 1 {
			a.printStep(i, len(steps), st, job, p)
		}
	}
	out, err := eng.Run(ctx, name, req, &steps, first)
	if view != nil {
		view.close()
		quiet.on.Store(false)
	}
	if err != nil {
		return err
	}
	if out.Cluster == nil {
		return fmt.Errorf("%s", out.Message)
	}
	if err := a.printClusterSummary(out.Cluster, out.Job, out.Plan, o.retry); err != nil {
		return err
	}
	switch out.State {
	case runner.Complete:
		return nil
	case runner.Interrupted:
		return &exitError{code: 130, err: fmt.Errorf("interrupted: run the same command again to resume job %s", out.Job.ID)}
	}
	return silentExit(ExitFailure)
}

// gate drops the records of a handler while on (a live view is drawn).
type gate struct{ on atomic.Bool }

func (g *gate) handler(next slog.Handler) slog.Handler { return &gateHandler{g: g, next: next} }

type gateHandler struct {
	g    *gate
	next slog.Handler
}

func (h *gateHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }
func (h *gateHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.g.on.Load() {
		return nil
	}
	return h.next.Handle(ctx, r)
}
func (h *gateHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &gateHandler{g: h.g, next: h.next.WithAttrs(as)}
}
func (h *gateHandler) WithGroup(name string) slog.Handler {
	return &gateHandler{g: h.g, next: h.next.WithGroup(name)}
}

// printStep prints one step's outcome: its job; for a failed step that
// another follows (the rollback), the failed tasks too (the summary at
// the end shows the last job's).
func (a *App) printStep(i, n int, st runner.Step, job *state.Job, p *plan.Plan) {
	what := fmt.Sprintf("%s (%s)", st.Action, st.Reason)
	if st.Rollback {
		what = "--on-failure rollback: " + st.Reason
	}
	fmt.Fprintf(a.Out, "Step %d/%d, %s: job %s %s, %d/%d tasks done", i+1, n, what, job.ID, job.Status,
		job.DoneTasks(), max(job.TaskCount, len(job.Tasks)))
	if !job.Ended.IsZero() {
		fmt.Fprintf(a.Out, ", %s", job.Ended.Sub(job.Started).Round(time.Millisecond))
	}
	fmt.Fprintln(a.Out)
	if job.Status != state.JobComplete && i < n-1 {
		fmt.Fprintf(a.Out, "  Job %s failed: %s\n", job.ID, job.Message)
		a.printFailures(job, p, "    ")
	}
}

// clusterRunner is the in-process runtime (--local) or the daemon's API
// (--state-dir alone). The tasks of the cluster's jobs are registered with
// the tee while they run, so their plugin lines reach the job log.
func (a *App) clusterRunner(ctx context.Context, g *globalOptions, o *clusterOptions, logger *slog.Logger, tee *joblog.Tee, cluster string) (apply.Runner, func(), error) {
	if o.local {
		rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: logger, poolSize: o.parallelism})
		if err != nil {
			return nil, nil, err
		}
		return localRunner{rt: rt, tee: tee, cluster: cluster}, func() { rt.Close() }, nil
	}
	c, err := o.client.client()
	if err != nil {
		return nil, nil, err
	}
	return &apiRunner{c: c, timeout: o.taskTimeout, log: logger}, func() {}, nil
}

// localRunner runs tasks in this process.
type localRunner struct {
	rt      *runtime.Runtime
	tee     *joblog.Tee
	cluster string
}

func (r localRunner) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	if t, err := runtime.ParseTask(task); err == nil && t.JobID != "" {
		defer r.tee.Track(id, r.cluster, t.JobID)()
	}
	return r.rt.Run(ctx, task)
}

// apiRunner runs tasks on a loomd: POST /v1/tasks, then wait. Submitting
// an id loomd already knows queues nothing, so a resumed apply picks up a
// task it lost track of.
type apiRunner struct {
	c       *apiClient
	timeout time.Duration
	log     *slog.Logger
}

func (r *apiRunner) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	var sub api.SubmitResponse
	if err := r.c.do(ctx, "POST", "/v1/tasks", task, &sub); err != nil {
		return nil, fmt.Errorf("submitting task %s: %w", id, err)
	}
	if !sub.Served && sub.Warning != "" {
		// The apply waits on (bounded by --task-timeout): a daemon that
		// loads the plugin later runs the task.
		r.log.Warn("loomd: "+sub.Warning+"; the apply waits for it (bound the wait with --task-timeout)", "task", id)
	}
	t, err := r.c.waitTask(ctx, id, r.timeout)
	if err != nil {
		return nil, fmt.Errorf("waiting for task %s: %w", id, err)
	}
	var res runtime.Result
	if len(t.Result) > 0 {
		if err := json.Unmarshal(t.Result, &res); err != nil {
			return nil, fmt.Errorf("task %s: decoding its result: %w", id, err)
		}
	}
	if len(t.Result) == 0 || (res.Status == 0 && t.State != "succeeded") {
		res.Status = 1
		res.Message = fmt.Sprintf("task %s %s: %s", id, t.State, t.Error)
	}
	return &res, nil
}

// printClusterSummary prints every node with its address, and the failed
// tasks of the job with how to retry.
func (a *App) printClusterSummary(cl *state.Cluster, job *state.Job, p *plan.Plan, retry string) error {
	if cl == nil {
		return nil
	}
	fmt.Fprintf(a.Out, "Cluster %s: %s", cl.Name, cl.Status)
	if job != nil {
		done, total := 0, max(job.TaskCount, len(job.Tasks))
		if p != nil {
			total = len(p.Tasks)
		}
		for _, t := range job.Tasks {
			if t.Status == state.TaskDone {
				done++
			}
		}
		fmt.Fprintf(a.Out, " (job %s, %s: %s, %d/%d tasks done", job.ID, job.Action, job.Status, done, total)
		if !job.Ended.IsZero() {
			fmt.Fprintf(a.Out, ", %s", job.Ended.Sub(job.Started).Round(time.Millisecond))
		}
		fmt.Fprint(a.Out, ")")
	}
	fmt.Fprintln(a.Out)
	tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHOSTNAME\tADDRESS\tSTATE\tSERVICES")
	for _, id := range cl.NodeIDs() {
		n := cl.Nodes[id]
		addr := n.Address()
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", n.ID, n.Hostname, addr, n.State, strings.Join(n.Services, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if job == nil || job.Status == state.JobComplete {
		return nil
	}
	fmt.Fprintf(a.Out, "\nJob %s failed: %s\n", job.ID, job.Message)
	a.printFailures(job, p, "  ")
	fmt.Fprintf(a.Out, "Fix the cause, then run '%s' again: it resumes job %s where it stopped (finished tasks are not run again).\n",
		retry, job.ID)
	return nil
}

// printFailures lists a job's failed tasks with their last run and
// message: from the plan's task list when there is one, else from the
// task records (which name their task, node and service).
func (a *App) printFailures(job *state.Job, p *plan.Plan, indent string) {
	idx := make([]int, 0, len(job.Tasks))
	for i, rec := range job.Tasks {
		if rec != nil && rec.Status == state.TaskFailed {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	for _, i := range idx {
		rec := job.Tasks[i]
		name, node, svc := rec.Name, rec.Node, rec.Service
		if p != nil && i < len(p.Tasks) {
			name, node, svc = p.Tasks[i].Name, p.Tasks[i].Node, p.Tasks[i].Service
		}
		what := strings.TrimSpace(name + " " + svc)
		if len(rec.Runs) == 0 {
			fmt.Fprintf(a.Out, "%sfailed: %s on %s (never started): %s\n", indent, what, node, rec.Message)
			continue
		}
		last := rec.Runs[len(rec.Runs)-1]
		fmt.Fprintf(a.Out, "%sfailed: %s on %s (task %s, %s, %d runs): %s\n", indent, what, node, last.ID, last.Name, len(rec.Runs), last.Message)
	}
}
