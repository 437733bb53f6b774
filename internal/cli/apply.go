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
	"sync/atomic"
	"syscall"
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
	"github.com/loomrt/loom/internal/logstream"
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
	max, err := o.specMaxBytes()
	if err != nil {
		return nil, err
	}
	return spec.LoadFileLimit(path, max)
}

// specMaxBytes is --spec-max-size in bytes.
func (o *clusterOptions) specMaxBytes() (int64, error) {
	if o.specMax == "" {
		return spec.DefaultMaxSize, nil
	}
	n, err := runtime.ParseSize(o.specMax)
	if err != nil {
		return 0, fmt.Errorf("--spec-max-size %q: want a size such as 8MiB", o.specMax)
	}
	return n, nil
}

// savedPlan reads path when it is a saved plan (nil otherwise, and for
// anything larger than a spec may be: a plan holds its spec and tasks).
func (o *clusterOptions) savedPlan(path string) []byte {
	max, err := o.specMaxBytes()
	if err != nil {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Size() > 8*max {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil || !apply.IsDocument(data) {
		return nil
	}
	return data
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
	tmpl      templateOptions
	file      string
	noRestart bool
	noRemove  bool
	onFailure string
	yes       bool
	refresh   bool
	action    string
	services  []string
	nodes     []string
}

func (a *App) newApplyCmd(g *globalOptions) *cobra.Command {
	o := &applyOptions{g: g}
	cmd := &cobra.Command{
		Use:   "apply SPEC|PLAN | apply --template T --size N [NAME]",
		Short: "Bring a cluster to what its spec says (or run a saved plan, or a service action)",
		Long: `Compare the cluster spec with what the cluster's state records (every node, what
every service on it went through, the inputs each action last ran with) and run the
job that closes the gap: the plan 'loomd plan SPEC' prints, exactly. A job is one
or more steps, all recorded before its first task runs: destroy the nodes a smaller
count removed; stop and remove services the spec dropped; create new nodes and add
services; reconfigure only the services whose inputs changed (their cluster config,
fields with macros expanded, the scripts they use), restarting them and what depends
on them at runtime. An unfinished job is resumed when nothing it was planned from
changed, else planned anew from what ran.

PLAN is a file 'loomd plan SPEC -o PLAN' saved: apply runs exactly its tasks, or
refuses when the cluster changed since the plan was made. A saved plan is applied
without asking; otherwise apply shows the plan and asks for 'yes' on a terminal,
and refuses without a terminal unless --yes.

--action start|stop|restart runs a service action instead: on --service (all when
none), on --node (all carrying it when none); start also starts what they depend
on that is not running, stop and restart also stop (restart) what depends on them.
A stopped service stays stopped across applies until started again.

The job runs in the loomd at --server, which keeps it going if this command is
interrupted (Ctrl-C detaches; --detach returns at once; 'loomd cluster watch NAME'
follows it again), or with --local in this process, through the plugins in
--plugins. Tasks run as soon as their prerequisites finished, one at a time per
node, at most --parallelism at once.

With a template spec (template: T, size: N) or --template T --size N [NAME],
Coopr's solver lays the nodes out from the catalog (--catalog) first: a new
cluster, a scale up or down that keeps the existing nodes' services, services
added to the existing nodes by Coopr's rules (docs/clusters.md).

Exit status: 0 when the cluster is as the spec says; 1 when a job failed (run
apply again to resume) or the plan was not confirmed; 2 for a bad spec, plan or
flags, or a saved plan the cluster no longer matches; 130 after Ctrl-C.`,
		Example: `  loomd apply cluster.yaml --local
  loomd apply cluster.yaml --server http://127.0.0.1:7070 --parallelism 32 --yes
  loomd plan cluster.yaml -o plan.json && loomd apply plan.json
  loomd apply cluster.yaml --action restart --service web --node shop-web-2 --yes
  loomd apply --template hadoop-distributed --size 5 hdp --local`,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.tmpl.template == "" && len(args) == 1 {
				if data := o.cluster.savedPlan(args[0]); data != nil {
					o.file = args[0]
					return a.runApplyDocument(cmd.Context(), o, data)
				}
			}
			sp, file, err := a.loadSpec(cmd, args, &o.tmpl, &o.cluster)
			if err != nil {
				if len(args) == 1 && o.tmpl.template == "" {
					return a.specErrors(cmd.Context(), o.g, &o.cluster, args[0], err)
				}
				return err
			}
			o.file = file
			return a.runApply(cmd.Context(), o, sp)
		},
	}
	o.cluster.addFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.noRestart, "no-restart", false, "reconfigure without stopping and starting services")
	cmd.Flags().BoolVar(&o.noRemove, "no-remove", false, "services the spec dropped are stopped, not removed (no REMOVE)")
	cmd.Flags().StringVar(&o.onFailure, "on-failure", "keep", "when a step that creates nodes fails: keep what exists (and report it), or rollback (destroy the nodes it created)")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "apply without showing the plan and asking for confirmation")
	cmd.Flags().BoolVar(&o.refresh, "refresh", false, "first confirm every node with its provider and run the services' check actions; the plan repairs what drifted")
	cmd.Flags().StringVar(&o.action, "action", "", "run a service action instead of the spec's changes: start, stop or restart")
	cmd.Flags().StringSliceVar(&o.services, "service", nil, "with --action: the services (comma-separated; default all)")
	cmd.Flags().StringSliceVar(&o.nodes, "node", nil, "with --action: the node ids (comma-separated; default every node carrying the services)")
	o.tmpl.addFlags(cmd.Flags())
	return cmd
}

// request reads apply's flags into a job request.
func (o *applyOptions) request() (runner.Request, error) {
	if o.onFailure != "keep" && o.onFailure != "rollback" {
		return runner.Request{}, usageErr(fmt.Errorf("--on-failure %q: want keep or rollback", o.onFailure))
	}
	req := runner.Request{Verb: runner.VerbApply, SpecFile: o.file, NoRestart: o.noRestart, NoRemove: o.noRemove, OnFailure: o.onFailure, Refresh: o.refresh}
	switch {
	case o.action != "":
		if _, err := plan.ParseServiceAction(o.action); err != nil {
			return req, usageErr(fmt.Errorf("--action: %w", err))
		}
		req.Verb, req.Services, req.Nodes = o.action, o.services, o.nodes
	case o.services != nil || o.nodes != nil:
		return req, usageErr(errors.New("--service and --node go with --action start|stop|restart"))
	}
	return req, nil
}

func (a *App) runApply(ctx context.Context, o *applyOptions, sp *spec.Spec) error {
	req, err := o.request()
	if err != nil {
		return err
	}
	req.Spec = sp.Source
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
	verb := "apply"
	if o.action != "" {
		verb = o.action
	}
	return a.runCluster(ctx, o.g, &o.cluster, sp.Name, req, prep, confirmation{yes: o.yes, verb: verb, target: o.file})
}

// runApplyDocument runs a saved plan: the job runs only if planning again
// (from the plan's own spec, options and drift, against the cluster as it
// is now) gives that plan exactly.
func (a *App) runApplyDocument(ctx context.Context, o *applyOptions, data []byte) error {
	if o.action != "" || o.noRestart || o.noRemove || o.refresh || o.services != nil || o.nodes != nil {
		return usageErr(errors.New("a saved plan carries its own options: --action, --service, --node, --refresh, --no-restart and --no-remove go to 'loomd plan'"))
	}
	if o.onFailure != "keep" && o.onFailure != "rollback" {
		return usageErr(fmt.Errorf("--on-failure %q: want keep or rollback", o.onFailure))
	}
	doc, err := apply.ReadDocument(data)
	if err != nil {
		return usageErr(fmt.Errorf("%s: %w", o.file, err))
	}
	req := requestOf(doc)
	req.OnFailure = o.onFailure
	o.cluster.retry = retryOf(&o.cluster, runner.Record{Cluster: doc.Cluster, Request: req})
	return a.runCluster(ctx, o.g, &o.cluster, doc.Cluster, req, nil, confirmation{yes: true, verb: "apply", target: o.file})
}

// requestOf is the job request of a saved plan, expecting that plan.
func requestOf(doc *apply.Document) runner.Request {
	o := doc.PlanOptions()
	req := runner.Request{Verb: doc.Action, Spec: doc.Spec.Source, SpecFile: doc.Spec.File, NoRestart: o.NoRestart, NoRemove: o.NoRemove,
		Force: o.Force, Drift: doc.Drift, Expect: doc.Expect()}
	if doc.ServiceAction != nil {
		req.Verb, req.Services, req.Nodes = doc.ServiceAction.Action, doc.ServiceAction.Services, doc.ServiceAction.Nodes
	}
	return req
}

// confirmation is how a command asks before it runs a job.
type confirmation struct {
	// yes skips the question (--yes, or a saved plan: the job then runs
	// only as planned).
	yes bool
	// verb names the command (apply, destroy, start...); target what it
	// acts on (the spec file, the cluster).
	verb, target string
}

// runCluster runs a request: in this process (--local, --state-dir), or
// on the daemon at --server, followed from here. prep, when set, sees the
// cluster's state first and may complete the request. The plan is shown
// and confirmed first (unless cf.yes), and the job runs only as shown.
func (a *App) runCluster(ctx context.Context, g *globalOptions, o *clusterOptions, name string, req runner.Request, prep func(*state.Cluster, *runner.Request) error, cf confirmation) error {
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
		return a.runHere(ctx, g, o, name, req, prep, cf)
	}
	return a.submitJob(ctx, g, o, name, req, prep, cf)
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
func (a *App) runHere(ctx context.Context, g *globalOptions, o *clusterOptions, name string, req runner.Request, prep func(*state.Cluster, *runner.Request) error, cf confirmation) error {
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
	if req.Verb == runner.VerbDestroy && cl == nil {
		return a.clusterGetErr(st, name, fmt.Errorf("cluster %s: %w", name, state.ErrNotFound))
	}
	if prep != nil {
		if err := prep(cl, &req); err != nil {
			return err
		}
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
	tee := logstream.NewTee()
	pluginLogger := slog.New(tee.Handler(quiet.handler(logger.Handler())))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tasks, env, closeTasks, err := a.clusterRunner(ctx, g, o, pluginLogger, jobTee{tee: tee, sink: jl, who: who}, name)
	if err != nil {
		return err
	}
	defer closeTasks()
	if err := refreshHere(ctx, cl, &req, env, tasks, logger); err != nil {
		return err
	}
	ch, err := runner.Plan(cl, req, env)
	if err != nil {
		return usageErr(err)
	}
	if ch.Empty() && ch.Resume == nil {
		if req.Verb == runner.VerbDestroy {
			fmt.Fprintf(a.Out, "Cluster %s has no nodes: nothing to destroy.\n", name)
			return nil
		}
		fmt.Fprintf(a.Out, "No changes: cluster %s is as %s says.\n", name, req.SpecFile)
		for _, n := range ch.Notes {
			fmt.Fprintf(a.Out, "Note: %s\n", n)
		}
		fmt.Fprintln(a.Out)
		return a.printClusterSummary(cl, nil, "")
	}
	if req.Expect == nil {
		if err := a.confirm(ch.Document(req.Options(), false), cf); err != nil {
			return err
		}
	}
	var first []state.Event
	if j := unfinishedJob(cl); j != nil && j.Status == state.JobRunning && ch.Resume == j {
		// This process holds the lock: whoever ran it is gone.
		first = []state.Event{{Time: time.Now(), Kind: state.EventInterrupted, By: "loomd apply",
			Message: "the process that ran it stopped without finishing (killed, or its machine went down)"},
			{Time: time.Now(), Kind: state.EventResumed, By: who, Message: fmt.Sprintf("%s for %s", req.Verb, req.Requester)}}
	}
	cl, job := apply.Begin(cl, ch, time.Now())
	if err := st.Put(cl); err != nil {
		return fmt.Errorf("cluster %s: recording job %s: %w", name, job.ID, err)
	}
	var view *liveView
	eng := &runner.Engine{Store: st, Tasks: tasks, Log: jl, Who: who, Source: who, Requester: req.Requester, Parallelism: o.parallelism}
	if !live {
		eng.Logger = logger
	}
	if live {
		quiet.on.Store(true)
		view = newJobView(a.Err, cl, job)
	}
	eng.Observe = func(_ *state.Job, ev apply.Event) {
		if view != nil {
			view.observe(ev)
		}
	}
	eng.Ended = func(k int, steps []runner.Step, cl *state.Cluster, job *state.Job, p *plan.Plan) {
		// A rollback step may follow a failed one: its summary too.
		if (len(steps) > 1 || steps[k].Status == runner.StepFailed && job.Options.Rollback) && view == nil {
			a.printStep(k, steps[k], job)
		}
	}
	out, err := eng.Run(ctx, name, job.ID, first)
	if view != nil {
		view.close()
		quiet.on.Store(false)
		if len(job.Steps) > 1 {
			for k, st := range runner.StepsOf(job) {
				if st.Status == runner.StepComplete || st.Status == runner.StepFailed {
					a.printStep(k, st, job)
				}
			}
		}
	}
	if err != nil {
		return err
	}
	if err := a.printClusterSummary(out.Cluster, out.Job, o.retry); err != nil {
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

// unfinishedJob is the cluster's last job when it did not finish.
func unfinishedJob(cl *state.Cluster) *state.Job {
	if cl == nil {
		return nil
	}
	if j := cl.LastJob(); j != nil && !j.Finished() {
		return j
	}
	return nil
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

// printStep prints one step's outcome.
func (a *App) printStep(k int, st runner.Step, job *state.Job) {
	what := st.Reason
	if st.Rollback {
		what = "--on-failure rollback: " + st.Reason
	}
	done := 0
	if k < len(job.Steps) {
		js := job.Steps[k]
		for i := js.Offset; i < js.Offset+js.Tasks; i++ {
			if t := job.Tasks[i]; t != nil && t.Status == state.TaskDone {
				done++
			}
		}
	}
	fmt.Fprintf(a.Out, "Step %d/%d, %s (%s): %s, %d/%d tasks done\n", k+1, len(job.Steps), st.Action, what, orDash(st.Status), done, st.Tasks)
}

// clusterRunner is the in-process runtime (--local) or the daemon's API
// (--state-dir alone), with what the job is planned with (the plugins;
// with --local, the resource files of this machine's work dir). The tasks
// of the cluster's jobs are registered with the tee while they run, so
// their plugin lines reach the job log.
func (a *App) clusterRunner(ctx context.Context, g *globalOptions, o *clusterOptions, logger *slog.Logger, tee jobTee, cluster string) (apply.Runner, runner.Env, func(), error) {
	if o.local {
		rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: logger, poolSize: o.parallelism})
		if err != nil {
			return nil, runner.Env{}, nil, err
		}
		env, err := localEnv(g, rt.Types())
		if err != nil {
			rt.Close()
			return nil, runner.Env{}, nil, err
		}
		return localRunner{rt: rt, tee: tee, cluster: cluster}, env, func() { rt.Close() }, nil
	}
	c, err := o.client.client()
	if err != nil {
		return nil, runner.Env{}, nil, err
	}
	return &apiRunner{c: c, timeout: o.taskTimeout, log: logger}, a.remoteEnv(ctx, c), func() {}, nil
}

// jobTee copies the plugin lines of a job's tasks into the job's log.
type jobTee struct {
	tee  *logstream.Tee
	sink joblog.Sink
	who  string
}

// localRunner runs tasks in this process.
type localRunner struct {
	rt      *runtime.Runtime
	tee     jobTee
	cluster string
}

func (r localRunner) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	if t, err := runtime.ParseTask(task); err == nil && t.JobID != "" && r.tee.tee != nil {
		defer r.tee.tee.Track(id, joblog.Copy(r.tee.sink, r.tee.who, r.cluster, t.JobID))()
	}
	return r.rt.Run(ctx, task)
}

// apiRunner runs tasks on a loomd: POST /v1/tasks?wait=, then GET ?wait=
// while the task is not finished. Submitting an id loomd already knows
// queues nothing, so a resumed apply picks up a task it lost track of.
type apiRunner struct {
	c       *apiClient
	timeout time.Duration
	log     *slog.Logger
}

func (r *apiRunner) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	t, err := r.c.submitWait(ctx, task, r.timeout, func(warning string) {
		// The apply waits on (bounded by --task-timeout): a daemon that
		// loads the plugin later runs the task.
		r.log.Warn("loomd: "+warning+"; the apply waits for it (bound the wait with --task-timeout)", "task", id)
	})
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", id, err)
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

// refreshHere runs a request's refresh in this process: the drift goes
// into the request, which then plans it.
func refreshHere(ctx context.Context, cl *state.Cluster, req *runner.Request, env runner.Env, tasks apply.Runner, logger *slog.Logger) error {
	if !req.Refresh || cl == nil {
		return nil
	}
	text, file := req.Spec, req.SpecFile
	if text == "" {
		text, file = cl.Spec, cl.SpecFile
	}
	sp, err := spec.ParseWith(file, []byte(text), spec.Options{Plugins: env.Plugins})
	if err != nil {
		return usageErr(err)
	}
	drift, err := apply.Refresh(ctx, cl, sp, tasks, apply.RefreshOptions{Parallelism: req.Parallelism, Logger: logger})
	if err != nil {
		return err
	}
	req.Drift, req.Refresh = drift, false
	return nil
}
