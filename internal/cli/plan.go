package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/catalog"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
)

type planOptions struct {
	g         *globalOptions
	file      string
	action    string
	services  []string
	nodes     []string
	json      bool
	dot       bool
	noRestart bool
	cluster   clusterOptions
	tmpl      templateOptions
}

func (a *App) newPlanCmd(g *globalOptions) *cobra.Command {
	o := &planOptions{g: g}
	cmd := &cobra.Command{
		Use:   "plan SPEC | plan --template T --size N [NAME]",
		Short: "Print the task plan of a cluster spec (a table, --json or --dot) without running anything",
		Long: `Read a cluster spec (YAML or JSON; see docs/clusters.md), build the task DAG of
the jobs 'loomd apply' would run, with Coopr's dependency rules, cut it into stages,
and print it. Nothing runs and nothing is changed.

Against a cluster with saved state (--state-dir), the plan is the diff: resume an
unfinished job, scale node groups down or up, add services, reconfigure. Without
state it creates the cluster.

--action plans one cluster action instead: create, delete (Coopr's: DELETE
every node), destroy (stop services, dependents first, then DELETE), add-services,
configure, configure-restart, start, stop, restart. --services limits start,
stop, restart and add-services to some services (start adds what they depend
on; stop and restart add what depends on them). --nodes limits the plan to
some node ids.

A template spec (template: T, size: N; or --template T --size N) is laid out by
Coopr's solver first, around the cluster's existing nodes; the plan then starts
with the layout table: layouts × counts, and which constraint decided each.

A spec error is reported as file:line with exit status 2.`,
		Example: `  loomd plan cluster.yaml
  loomd plan cluster.yaml --action restart --services web
  loomd plan cluster.yaml --dot | dot -Tsvg > plan.svg
  loomd plan --template hadoop-distributed --size 5 hdp --catalog ./catalog`,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sp, file, err := a.loadSpec(cmd, args, &o.tmpl, &o.cluster)
			if err != nil {
				return err
			}
			o.file = file
			return a.runPlan(cmd.Context(), o, sp)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.action, "action", "", "plan this cluster action instead of the diff against the saved state: create, delete, destroy, add-services, configure, configure-restart, start, stop or restart")
	f.BoolVar(&o.noRestart, "no-restart", false, "plan a reconfigure without restarting services (as 'apply --no-restart')")
	o.cluster.addFlags(f, false)
	f.StringSliceVar(&o.services, "services", nil, "plan only these services (comma-separated)")
	f.StringSliceVar(&o.nodes, "nodes", nil, "plan only these node ids (comma-separated)")
	f.BoolVar(&o.json, "json", false, "print the plan as JSON")
	f.BoolVar(&o.dot, "dot", false, "print the plan as a Graphviz digraph")
	o.tmpl.addFlags(f)
	return cmd
}

func (a *App) runPlan(ctx context.Context, o *planOptions, sp *spec.Spec) error {
	if o.json && o.dot {
		return usageErr(errors.New("--json and --dot exclude each other"))
	}
	st, err := a.clusterStore(ctx, &o.cluster)
	if err != nil {
		return err
	}
	cl, err := a.getCluster(st, sp.Name)
	if err != nil {
		return err
	}
	sp, layout, err := a.resolveSpec(sp, cl, &o.tmpl)
	if err != nil {
		return err
	}
	var steps []apply.Step
	if o.action != "" {
		act, err := plan.ParseAction(o.action)
		if err != nil {
			return usageErr(fmt.Errorf("--action: %w", err))
		}
		steps = []apply.Step{{Action: act, Services: o.services, PlannedNodes: o.nodes, Spec: sp, Reason: "--action " + o.action}}
	} else {
		if steps, err = apply.Diff(cl, sp, apply.DiffOptions{NoRestart: o.noRestart}); err != nil {
			return usageErr(err)
		}
	}
	plans := make([]*plan.Plan, len(steps))
	for i, step := range steps {
		if plans[i], err = apply.PlanStep(cl, step); err != nil {
			return usageErr(err)
		}
	}
	switch {
	case o.json:
		type jsonStep struct {
			Reason string          `json:"reason"`
			Plan   json.RawMessage `json:"plan"`
		}
		out := struct {
			Cluster string              `json:"cluster"`
			Layout  *catalog.Resolution `json:"layout,omitempty"`
			Steps   []jsonStep          `json:"steps"`
		}{Cluster: sp.Name, Layout: layout, Steps: []jsonStep{}}
		for i, p := range plans {
			var b bytes.Buffer
			if err := p.WriteJSON(&b); err != nil {
				return err
			}
			out.Steps = append(out.Steps, jsonStep{Reason: steps[i].Reason, Plan: b.Bytes()})
		}
		return a.printJSON(out)
	case o.dot:
		for _, p := range plans {
			if err := p.WriteDOT(a.Out); err != nil {
				return err
			}
		}
		return nil
	}
	if layout != nil {
		if err := a.printLayout(layout); err != nil {
			return err
		}
	}
	if len(plans) == 0 {
		fmt.Fprintf(a.Out, "No changes: cluster %s is as %s says.\n", sp.Name, o.file)
		return nil
	}
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(a.Out)
		}
		if len(plans) > 1 || cl != nil {
			fmt.Fprintf(a.Out, "Step %d of %d: %s\n", i+1, len(plans), steps[i].Reason)
		}
		if err := p.WriteTable(a.Out); err != nil {
			return err
		}
	}
	return nil
}
