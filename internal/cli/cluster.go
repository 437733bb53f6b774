package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// addClusterCommands registers the cluster commands: plan, apply, destroy
// and cluster.
func (a *App) addClusterCommands(root *cobra.Command, g *globalOptions) {
	root.AddCommand(a.newPlanCmd(g), a.newApplyCmd(g), a.newDestroyCmd(g), a.newClusterCmd(g), a.newCatalogCmd(g))
}

type destroyOptions struct {
	g       *globalOptions
	cluster clusterOptions
	target  string
}

func (a *App) newDestroyCmd(g *globalOptions) *cobra.Command {
	o := &destroyOptions{g: g}
	cmd := &cobra.Command{
		Use:   "destroy NAME|SPEC",
		Short: "Stop a cluster's services (dependents first), then delete every node",
		Long: `Destroy a cluster: STOP every service (services that depend on others first), then
DELETE every node through its provider. The cluster is named, or given by its spec
file. Its state stays, as terminated, for 'loomd cluster get'; a later apply creates
it anew. Flags, exit status and resume are as for 'loomd apply'.`,
		Example: `  loomd destroy shop --local
  loomd destroy shop.yaml --server http://127.0.0.1:7070`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.target = args[0]
			return a.runDestroy(cmd.Context(), o)
		},
	}
	o.cluster.addFlags(cmd.Flags(), true)
	return cmd
}

// clusterName is a cluster name, or the name in a spec file.
func clusterName(target string) (string, error) {
	if st, err := os.Stat(target); err == nil && st.Mode().IsRegular() {
		sp, err := spec.LoadFile(target)
		if err != nil {
			return "", usageErr(err)
		}
		return sp.Name, nil
	}
	return target, nil
}

func (a *App) runDestroy(ctx context.Context, o *destroyOptions) error {
	name, err := clusterName(o.target)
	if err != nil {
		return err
	}
	st, err := a.clusterStore(ctx, &o.cluster)
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
	if len(cl.Nodes) == 0 {
		fmt.Fprintf(a.Out, "Cluster %s has no nodes: nothing to destroy.\n", name)
		return nil
	}
	sp, err := spec.Parse(cl.SpecFile+" (as last applied)", []byte(cl.Spec))
	if err != nil {
		return fmt.Errorf("cluster %s: its saved spec no longer parses: %w", name, err)
	}
	o.cluster.retry = o.cluster.retryCommand("destroy", o.target)
	step := apply.Step{Action: plan.Destroy, Spec: sp, Reason: "destroy"}
	if j := cl.LastJob(); j != nil && j.Status != state.JobComplete && j.Action == string(plan.Destroy) && j.PlannedNodes == nil {
		step.Resume = j
		step.Reason = "resume job " + j.ID
	}
	return a.runSteps(ctx, o.g, &o.cluster, st, cl, []apply.Step{step}, false)
}

func (a *App) newClusterCmd(g *globalOptions) *cobra.Command {
	o := &clusterOptions{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the clusters loomd apply manages (list, get, history)",
	}
	o.addFlags(cmd.PersistentFlags(), false)
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the clusters with their status and node count",
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
			for _, n := range names {
				cl, err := st.Get(n)
				if err != nil {
					return err
				}
				last := "-"
				if j := cl.LastJob(); j != nil {
					last = fmt.Sprintf("%s %s %s", j.ID, j.Action, j.Status)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", cl.Name, cl.Status, len(cl.Nodes), last, cl.Updated.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
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
			tw := tabwriter.NewWriter(a.Out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tACTION\tSTATUS\tSTARTED\tDURATION\tTASKS\tMESSAGE")
			for _, j := range cl.Jobs {
				dur := "-"
				if !j.Ended.IsZero() {
					dur = j.Ended.Sub(j.Started).Round(time.Millisecond).String()
				}
				done := 0
				for _, t := range j.Tasks {
					if t.Status == state.TaskDone {
						done++
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", j.ID, j.Action, j.Status, j.Started.UTC().Format(time.RFC3339), dur, done, max(j.TaskCount, len(j.Tasks)), j.Message)
			}
			return tw.Flush()
		},
	})
	return cmd
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
