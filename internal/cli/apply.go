package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/plan"
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
	// retry is the command that resumes a failed job, for the summary.
	retry string
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
			sp, file, err := a.loadSpec(cmd, args, &o.tmpl)
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
	st, err := a.clusterStore(ctx, &o.cluster)
	if err != nil {
		return err
	}
	unlock, err := st.Lock(sp.Name)
	if err != nil {
		return err
	}
	defer unlock()
	cl, err := a.getCluster(st, sp.Name)
	if err != nil {
		return err
	}
	sp, layout, err := a.resolveSpec(sp, cl, &o.tmpl)
	if err != nil {
		return err
	}
	if layout != nil {
		if err := a.printLayout(layout); err != nil {
			return err
		}
	}
	steps, err := apply.Diff(cl, sp, apply.DiffOptions{NoRestart: o.noRestart})
	if err != nil {
		return usageErr(err)
	}
	o.cluster.retry = o.cluster.retryCommand("apply", o.file)
	if len(steps) == 0 {
		fmt.Fprintf(a.Out, "No changes: cluster %s is as %s says.\n\n", sp.Name, o.file)
		return a.printClusterSummary(cl, nil, nil, "")
	}
	return a.runSteps(ctx, o.g, &o.cluster, st, cl, steps, o.onFailure == "rollback")
}

// runSteps runs the jobs in order, stopping at the first that fails.
func (a *App) runSteps(ctx context.Context, g *globalOptions, o *clusterOptions, st clusterStore, cl *state.Cluster, steps []apply.Step, rollback bool) error {
	logger, err := a.newLogger(g.log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	runner, closeRunner, err := a.clusterRunner(ctx, g, o, logger)
	if err != nil {
		return err
	}
	defer closeRunner()
	var job *state.Job
	var p *plan.Plan
	live := o.live && stderrTerminal(a.Err) && g.log.format != "json"
	run := func(step apply.Step) error {
		cl, job = apply.Begin(cl, step, time.Now())
		p, err = apply.PlanStep(cl, step)
		if err != nil {
			return usageErr(fmt.Errorf("planning %s of cluster %s: %w", step.Action, cl.Name, err))
		}
		logger.Info("applying", "cluster", cl.Name, "job", job.ID, "why", step.Reason, "plan", p.Summary())
		opts := apply.Options{Runner: runner, Parallelism: o.parallelism, Logger: logger, Save: st.Put, Journal: st.Append}
		if live {
			// On a terminal the live view is the progress; the log
			// lines would scroll it away (warnings and errors stay
			// in the view and the summary).
			v := newLiveView(a.Err, p, job)
			opts.Observe, opts.Logger = v.observe, discardLogger()
			defer v.close()
		}
		return apply.Execute(ctx, cl, step.Spec, p, job, opts)
	}
	for _, step := range steps {
		if err := run(step); err != nil {
			return err
		}
		if job.Status != state.JobComplete {
			if rb := apply.Rollback(cl, job, step.Spec); rollback && rb != nil && ctx.Err() == nil {
				// Report the failure, then undo it.
				if err := a.printClusterSummary(cl, job, p, o.retry); err != nil {
					return err
				}
				fmt.Fprintf(a.Out, "\n--on-failure rollback: %s\n", rb.Reason)
				if err := run(*rb); err != nil {
					return err
				}
				if err := a.printClusterSummary(cl, job, p, o.retry); err != nil {
					return err
				}
				return silentExit(ExitFailure)
			}
			break
		}
	}
	if err := a.printClusterSummary(cl, job, p, o.retry); err != nil {
		return err
	}
	if job.Status != state.JobComplete {
		if ctx.Err() != nil {
			return &exitError{code: 130, err: fmt.Errorf("interrupted: run the same command again to resume job %s", job.ID)}
		}
		return silentExit(ExitFailure)
	}
	return nil
}

// clusterRunner is the in-process runtime (--local) or the daemon's API.
func (a *App) clusterRunner(ctx context.Context, g *globalOptions, o *clusterOptions, logger *slog.Logger) (apply.Runner, func(), error) {
	if o.local {
		rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: logger, poolSize: o.parallelism})
		if err != nil {
			return nil, nil, err
		}
		return localRunner{rt}, func() { rt.Close() }, nil
	}
	c, err := o.client.client()
	if err != nil {
		return nil, nil, err
	}
	return &apiRunner{c: c, timeout: o.taskTimeout, log: logger}, func() {}, nil
}

// localRunner runs tasks in this process.
type localRunner struct{ rt *runtime.Runtime }

func (r localRunner) Run(ctx context.Context, _ string, task []byte) (*runtime.Result, error) {
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
		done, total := 0, 0
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
	if p != nil {
		for i, t := range p.Tasks {
			rec := job.Tasks[i]
			if rec == nil || rec.Status != state.TaskFailed {
				continue
			}
			what := t.Name
			if t.Service != "" {
				what += " " + t.Service
			}
			if len(rec.Runs) == 0 {
				fmt.Fprintf(a.Out, "  failed: %s on %s (never started): %s\n", what, t.Node, rec.Message)
				continue
			}
			last := rec.Runs[len(rec.Runs)-1]
			fmt.Fprintf(a.Out, "  failed: %s on %s (task %s, %s, %d runs): %s\n", what, t.Node, last.ID, last.Name, len(rec.Runs), last.Message)
		}
	}
	fmt.Fprintf(a.Out, "Fix the cause, then run '%s' again: it resumes job %s where it stopped (finished tasks are not run again).\n",
		retry, job.ID)
	return nil
}
