package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
)

// addClusterCommands registers the cluster commands: plan, apply, destroy
// and cluster.
func (a *App) addClusterCommands(root *cobra.Command, g *globalOptions) {
	root.AddCommand(a.newPlanCmd(g), a.newApplyCmd(g), a.newDestroyCmd(g), a.newClusterCmd(g), a.newCatalogCmd(g))
}

type destroyOptions struct {
	g        *globalOptions
	cluster  clusterOptions
	target   string
	force    bool
	noRemove bool
	yes      bool
}

func (a *App) newDestroyCmd(g *globalOptions) *cobra.Command {
	o := &destroyOptions{g: g}
	cmd := &cobra.Command{
		Use:   "destroy NAME|SPEC",
		Short: "Stop what runs, remove what is installed, delete every node: always to the end",
		Long: `Destroy a cluster, acting on what its state says exists: STOP every service a START ran
for (dependents first), REMOVE every service an INSTALL ran for (--no-remove skips it),
then DELETE every node a CREATE ran for, by its provider id, or without one through the
provider's own lookup (the static provider's claims, DigitalOcean's tags). Nothing runs
on a node that never got an address; a node never created is simply dropped. Resources
that changed since the last job are shipped first (a fixed stop script reaches the
destroy). Given a SPEC, its service definitions are used; given a NAME, those recorded
with the cluster.

A task that fails stops the destroy (fix the cause and run it again: it resumes);
--force abandons what fails for good (an unreachable node, a broken script, a DELETE
the provider refuses) and goes on, listing what it abandoned. The cluster ends
terminated: 'loomd cluster list' hides it (--all shows it), 'loomd cluster forget'
removes its record. The destroy is shown and confirmed as for 'loomd apply' (--yes);
'loomd plan --destroy NAME -o FILE' saves it for 'loomd apply FILE'. Where it runs,
how it is followed, exit status and resume are as for 'loomd apply'.`,
		Example: `  loomd destroy shop --local
  loomd destroy shop.yaml --server http://127.0.0.1:7070 --yes
  loomd destroy shop --force --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.target = args[0]
			return a.runDestroy(cmd.Context(), o)
		},
	}
	o.cluster.addFlags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&o.force, "force", false, "abandon what fails for good (listing it) and go on to the end")
	cmd.Flags().BoolVar(&o.noRemove, "no-remove", false, "do not run the services' remove actions")
	cmd.Flags().BoolVarP(&o.yes, "yes", "y", false, "destroy without showing the plan and asking for confirmation")
	return cmd
}

func (a *App) runDestroy(ctx context.Context, o *destroyOptions) error {
	req := runner.Request{Verb: runner.VerbDestroy, Force: o.force, NoRemove: o.noRemove}
	name := o.target
	var prep func(*state.Cluster, *runner.Request) error
	if st, err := os.Stat(o.target); err == nil && st.Mode().IsRegular() {
		sp, err := o.cluster.loadSpecFile(o.target)
		if err != nil {
			return a.specErrors(ctx, o.g, &o.cluster, o.target, usageErr(err))
		}
		name, req.SpecFile = sp.Name, o.target
		// The spec's definitions stop and remove the services (a fixed
		// stop script reaches the destroy); a template spec is solved
		// around the nodes first.
		prep = func(cl *state.Cluster, req *runner.Request) error {
			solved, _, err := a.resolveSpec(sp, cl, &templateOptions{size: -1})
			if err != nil {
				return err
			}
			req.Spec = solved.Source
			return nil
		}
	}
	o.cluster.retry = o.cluster.retryCommand("destroy", o.target)
	return a.runCluster(ctx, o.g, &o.cluster, name, req, prep, confirmation{yes: o.yes, verb: "destroy", target: name})
}

func (a *App) newClusterCmd(g *globalOptions) *cobra.Command {
	o := &clusterOptions{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show and follow the clusters loomd apply manages (list, get, history, watch, logs, cancel, import)",
	}
	o.addFlags(cmd.PersistentFlags(), false)
	// No cluster subcommand reads a spec file.
	_ = cmd.PersistentFlags().MarkHidden("spec-max-size")
	var all bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List the clusters with their status and node count (terminated ones with --all)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := a.clusterStore(cmd.Context(), o)
			if err != nil {
				return err
			}
			names, err := st.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATUS\tNODES\tLAST JOB\tUPDATED")
			hidden := 0
			for _, n := range names {
				cl, err := st.Get(n)
				if err != nil {
					return err
				}
				if cl.Status == state.Terminated && len(cl.Nodes) == 0 && !all {
					hidden++
					continue
				}
				last := "-"
				if j := cl.LastJob(); j != nil {
					last = fmt.Sprintf("%s %s %s", j.ID, j.Action, j.Status)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cl.Name, cl.Status, len(cl.Nodes), last, cl.Updated.UTC().Format(time.RFC3339))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if hidden > 0 {
				fmt.Fprintf(a.Out, "(%d terminated cluster(s) not shown: --all shows them, 'loomd cluster forget NAME' removes one)\n", hidden)
			}
			return nil
		},
	}
	list.Flags().BoolVar(&all, "all", false, "show terminated clusters too")
	cmd.AddCommand(list)
	cmd.AddCommand(&cobra.Command{
		Use:   "forget NAME",
		Short: "Remove a terminated cluster's record (its state, history and job log) from the store",
		Long: `Remove the record of a cluster that was destroyed: it leaves 'loomd cluster list --all',
and its history, state and job log are gone. Only a terminated cluster with no node left
and no job running is forgotten: destroy it first ('loomd destroy NAME', with --force if
a node cannot be reached).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.forgetCluster(cmd.Context(), o, args[0])
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "get NAME",
		Short: "Print a cluster's state as JSON: nodes with their properties and results, jobs (secrets redacted)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.loadCluster(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			return a.printJSON(cl.Redacted())
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "import NAME",
		Short: "Move a cluster's state from state files (--local) to the loomd at --server",
		Long: `Copy a cluster's state from the state files of 'loomd apply --local' (--state-dir, or
the default state dir) into the store of the loomd at --server, so that later applies
run through the daemon. The cluster must not be in the daemon's store yet. The files
are left in place: remove them once the daemon has the cluster (they are no longer
read without --local).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.importCluster(cmd.Context(), o, args[0])
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "history NAME",
		Short: "List a cluster's jobs, one line each, oldest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cl, err := a.loadCluster(cmd.Context(), o, args[0])
			if err != nil {
				return err
			}
			return a.printHistory(cl)
		},
	})
	watchLive := true
	watch := &cobra.Command{
		Use:   "watch NAME",
		Short: "Follow the cluster's job the daemon runs (live view on a terminal), or show how the last one ended",
		Long: `Re-attach to the job a loomd runs for the cluster (submitted by 'loomd apply' or
'loomd destroy', whether that command was detached, interrupted or killed): on a
terminal the live view, else the job log's lines, each step's summary as it ends and
the cluster's at the end. Ctrl-C detaches again; the job goes on. A job that ended
is summarized. Exit status: 0 when the job completed, 1 when it failed or was
cancelled, 130 after Ctrl-C.`,
		Example: `  loomd cluster watch shop
  loomd cluster watch shop --server http://10.0.0.5:7070,http://10.0.0.6:7070`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.live = watchLive
			return a.runWatch(cmd.Context(), g, o, args[0])
		},
	}
	watch.Flags().BoolVar(&watchLive, "live", true, "on a terminal, show a live view instead of the job log's lines")
	var follow, asJSON bool
	var logJob string
	logs := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the cluster's job log: the executor's and the plugins' lines, job events",
		Long: `Print the job log of a cluster: each job's lines (task started, finished, failed,
retried), the log lines its plugins wrote while running its tasks (on whichever daemon
ran them; secrets redacted), and the job's events (steps, interruptions, takeovers).
The log is bounded (per entry, per cluster and in all; docs/clusters.md). With --local,
the log of 'loomd apply --local' beside its state files.`,
		Example: `  loomd cluster logs shop --follow
  loomd cluster logs shop --job shop-004 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runLogs(cmd.Context(), o, args[0], follow, asJSON, logJob)
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until Ctrl-C")
	logs.Flags().BoolVar(&asJSON, "json", false, "print each entry as a JSON object, one per line")
	logs.Flags().StringVar(&logJob, "job", "", "only this job's lines (e.g. shop-004)")
	cmd.AddCommand(watch, logs, &cobra.Command{
		Use:   "cancel NAME",
		Short: "Stop the cluster's job a loomd runs (its running tasks end first; apply again resumes it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runCancel(cmd.Context(), o, args[0])
		},
	})
	return cmd
}

// printHistory prints one line per job, oldest first, and under it one
// line per event (started, interrupted, resumed, taken over: who, when).
func (a *App) printHistory(cl *state.Cluster) error {
	tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tACTION\tSTATUS\tSTARTED\tDURATION\tTASKS\tMESSAGE")
	for _, j := range cl.Jobs {
		dur := "-"
		if !j.Ended.IsZero() {
			dur = j.Ended.Sub(j.Started).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", j.ID, j.Action, j.Status, j.Started.UTC().Format(time.RFC3339), dur, j.DoneTasks(), max(j.TaskCount, len(j.Tasks)), j.Message)
		for _, ev := range j.Events {
			tasks := "-"
			if ev.Done > 0 || ev.Kind != state.EventStarted {
				tasks = fmt.Sprintf("%d done", ev.Done)
			}
			fmt.Fprintf(tw, "\t\u21b3 %s\t\t%s\t\t%s\t%s\n", ev.Kind, ev.Time.UTC().Format(time.RFC3339), tasks, strings.TrimSpace(ev.By+": "+ev.Message))
		}
	}
	return tw.Flush()
}

// loadCluster reads a cluster's state; an unknown name is a usage error.
func (a *App) loadCluster(ctx context.Context, o *clusterOptions, name string) (*state.Cluster, error) {
	st, err := a.clusterStore(ctx, o)
	if err != nil {
		return nil, err
	}
	cl, err := st.Get(name)
	if err != nil {
		return nil, a.clusterGetErr(st, name, err)
	}
	return cl, nil
}

// clusterGetErr says where an unknown cluster was looked for (a usage
// error); other errors pass.
func (a *App) clusterGetErr(st clusterStore, name string, err error) error {
	if hint := a.stateFileHint(st, name); hint != "" && errors.Is(err, state.ErrNotFound) {
		return usageErr(errors.New(hint))
	}
	if errors.Is(err, state.ErrNotFound) || errors.Is(err, state.ErrBadName) {
		return usageErr(fmt.Errorf("%w: 'loomd cluster list' shows the clusters %s knows", err, st.Where()))
	}
	return err
}

// importCluster copies a cluster's state files into the daemon's store.
func (a *App) importCluster(ctx context.Context, o *clusterOptions, name string) error {
	dir := o.stateDir
	if dir == "" {
		var err error
		if dir, err = a.defaultStateDir(); err != nil {
			return err
		}
	}
	from := &state.FileStore{Dir: dir}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	to := &apiStore{c: c, ctx: ctx, warn: func(msg string) { fmt.Fprintln(a.Err, "loomd: "+msg) }}
	unlockFrom, err := from.Lock(name)
	if err != nil {
		return err
	}
	defer unlockFrom()
	cl, err := from.Get(name)
	if err != nil {
		return usageErr(fmt.Errorf("%w: 'loomd cluster list --state-dir %s' shows the clusters there", err, dir))
	}
	unlock, err := to.Lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := to.Get(name); err == nil {
		return usageErr(fmt.Errorf("cluster %s is already in the store of the loomd at %s: nothing imported (compare 'loomd cluster get %s' with and without --local)", name, c.base, name))
	} else if !errors.Is(err, state.ErrNotFound) {
		return err
	}
	if err := to.Put(cl); err != nil {
		return fmt.Errorf("cluster %s: importing into the loomd at %s: %w", name, c.base, err)
	}
	fmt.Fprintf(a.Out, "Cluster %s (%s, %d nodes, %d jobs) imported from %s into the loomd at %s.\nThe state files there are no longer read without --local: remove %s once you have checked 'loomd cluster get %s'.\n",
		name, cl.Status, len(cl.Nodes), len(cl.Jobs), dir, c.base, filepath.Join(dir, name+".json"), name)
	return nil
}

// forgetCluster removes a terminated cluster's record.
func (a *App) forgetCluster(ctx context.Context, o *clusterOptions, name string) error {
	st, err := a.clusterStore(ctx, o)
	if err != nil {
		return err
	}
	unlock, err := st.Lock(name)
	if err != nil {
		return err
	}
	defer unlock()
	cl, err := st.Get(name)
	if err != nil {
		return a.clusterGetErr(st, name, err)
	}
	if len(cl.Nodes) > 0 || cl.Status != state.Terminated {
		return usageErr(fmt.Errorf("cluster %s is %s with %d node(s): only a destroyed (terminated) cluster is forgotten; run 'loomd destroy %s' first", name, cl.Status, len(cl.Nodes), name))
	}
	if j := cl.LastJob(); j != nil && j.Status == state.JobRunning {
		return usageErr(fmt.Errorf("cluster %s: job %s is running: wait for it to end", name, j.ID))
	}
	if err := st.Delete(name); err != nil {
		return err
	}
	if fs, ok := st.(fileStore); ok {
		// The job log of --local beside the state.
		_ = os.Remove(filepath.Join(fs.Dir, name+".log"))
		_ = os.Remove(filepath.Join(fs.Dir, name+".log.1"))
	}
	fmt.Fprintf(a.Out, "Cluster %s forgotten (%d job(s) of history removed).\n", name, len(cl.Jobs))
	return nil
}
