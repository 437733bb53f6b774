package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
)

type planOptions struct {
	g        *globalOptions
	file     string
	action   string
	services []string
	nodes    []string
	json     bool
	dot      bool
}

func (a *App) newPlanCmd(g *globalOptions) *cobra.Command {
	o := &planOptions{g: g}
	cmd := &cobra.Command{
		Use:   "plan SPEC",
		Short: "Print the task plan of a cluster spec (a table, --json or --dot) without running anything",
		Long: `Read a cluster spec (YAML or JSON; see docs/clusters.md), build the task DAG of a
cluster action with Coopr's dependency rules, cut it into stages, and print it.
Nothing runs and nothing is changed.

--action picks the cluster action: create (default), delete (Coopr's: DELETE
every node), destroy (stop services, dependents first, then DELETE), add-services,
configure, configure-restart, start, stop, restart. --services limits start,
stop, restart and add-services to some services (start adds what they depend
on; stop and restart add what depends on them). --nodes limits the plan to
some node ids.

A spec error is reported as file:line with exit status 2.`,
		Example: `  loomd plan cluster.yaml
  loomd plan cluster.yaml --action restart --services web
  loomd plan cluster.yaml --dot | dot -Tsvg > plan.svg`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return a.runPlan(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.action, "action", "create", "cluster action to plan: create, delete, destroy, add-services, configure, configure-restart, start, stop or restart")
	f.StringSliceVar(&o.services, "services", nil, "plan only these services (comma-separated)")
	f.StringSliceVar(&o.nodes, "nodes", nil, "plan only these node ids (comma-separated)")
	f.BoolVar(&o.json, "json", false, "print the plan as JSON")
	f.BoolVar(&o.dot, "dot", false, "print the plan as a Graphviz digraph")
	return cmd
}

func (a *App) runPlan(_ context.Context, o *planOptions) error {
	if o.json && o.dot {
		return usageErr(errors.New("--json and --dot exclude each other"))
	}
	s, err := spec.LoadFile(o.file)
	if err != nil {
		return usageErr(err)
	}
	act, err := plan.ParseAction(o.action)
	if err != nil {
		return usageErr(fmt.Errorf("--action: %w", err))
	}
	p, err := plan.Build(plan.Input{Spec: s, Nodes: s.Nodes(), Action: act, Services: o.services, PlannedNodes: o.nodes})
	if err != nil {
		return usageErr(err)
	}
	switch {
	case o.json:
		return p.WriteJSON(a.Out)
	case o.dot:
		return p.WriteDOT(a.Out)
	}
	return p.WriteTable(a.Out)
}
