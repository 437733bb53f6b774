package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/catalog"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

type planOptions struct {
	g         *globalOptions
	target    string
	destroy   bool
	action    string
	services  []string
	nodes     []string
	json      bool
	dot       bool
	out       string
	noRestart bool
	noRemove  bool
	force     bool
	refresh   bool
	cluster   clusterOptions
	tmpl      templateOptions
}

func (a *App) newPlanCmd(g *globalOptions) *cobra.Command {
	o := &planOptions{g: g}
	cmd := &cobra.Command{
		Use:   "plan SPEC | plan --destroy NAME|SPEC | plan --template T --size N [NAME]",
		Short: "Print the job 'loomd apply' would run (a table, --json or --dot), or save it with -o; nothing runs",
		Long: `Compare the cluster spec with what the cluster's state records and print the job that
'loomd apply SPEC' would run: its steps (destroy removed nodes, remove dropped services,
create nodes and add services, reconfigure what changed), each step's tasks stage by
stage with what each waits for. Nothing runs and nothing is changed.

-o FILE saves the plan (JSON, with the spec's text: mode 0600); 'loomd apply FILE' then
runs exactly those tasks, or refuses if the cluster changed since. --json prints the
same document (without the spec's text); its "format" and "version" identify it.

--destroy plans the cluster's destruction (NAME or SPEC); --action start|stop|restart
(with --service, --node) plans a service action, as 'loomd apply --action' runs it.
--refresh first asks the provider to CONFIRM every node and runs each started
service's check action where the spec defines one: what no longer matches (a node the
provider lost, addresses that changed, a service that stopped) is drift, shown in the
plan, which repairs it (the refresh runs tasks: on the loomd at --server, or here with
--local).

A template spec (template: T, size: N; or --template T --size N) is laid out by
Coopr's solver first, around the cluster's existing nodes; the plan then starts
with the layout table: layouts × counts, and which constraint decided each.

A spec error is reported as file:line with exit status 2.`,
		Example: `  loomd plan cluster.yaml
  loomd plan cluster.yaml -o plan.json && loomd apply plan.json
  loomd plan cluster.yaml --action restart --service web
  loomd plan --destroy shop
  loomd plan cluster.yaml --dot | dot -Tsvg > plan.svg
  loomd plan --template hadoop-distributed --size 5 hdp --catalog ./catalog`,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var sp *spec.Spec
			if o.destroy && len(args) == 1 && o.tmpl.template == "" {
				if st, err := os.Stat(args[0]); err != nil || !st.Mode().IsRegular() {
					o.target = args[0] // a cluster name
					return a.runPlan(cmd.Context(), o, nil)
				}
			}
			sp, file, err := a.loadSpec(cmd, args, &o.tmpl, &o.cluster)
			if err != nil {
				if len(args) == 1 && o.tmpl.template == "" {
					return a.specErrors(cmd.Context(), o.g, &o.cluster, args[0], err)
				}
				return err
			}
			o.target = file
			return a.runPlan(cmd.Context(), o, sp)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.destroy, "destroy", false, "plan the cluster's destruction (NAME or SPEC)")
	f.StringVar(&o.action, "action", "", "plan a service action instead of the spec's changes: start, stop or restart")
	f.StringSliceVar(&o.services, "service", nil, "with --action: the services (comma-separated; default all)")
	f.StringSliceVar(&o.nodes, "node", nil, "with --action: the node ids (comma-separated)")
	f.BoolVar(&o.noRestart, "no-restart", false, "plan a reconfigure without restarting services (as 'apply --no-restart')")
	f.BoolVar(&o.noRemove, "no-remove", false, "with --destroy, or when services go away: plan no REMOVE")
	f.BoolVar(&o.force, "force", false, "with --destroy: abandon what fails for good (as 'destroy --force')")
	f.BoolVar(&o.refresh, "refresh", false, "first confirm every node with its provider and run the services' check actions; plan what drifted")
	o.cluster.addFlags(f, false)
	f.StringVarP(&o.out, "out", "o", "", "save the plan to this file, for 'loomd apply FILE'")
	f.BoolVar(&o.json, "json", false, "print the plan as JSON")
	f.BoolVar(&o.dot, "dot", false, "print the plan as a Graphviz digraph")
	o.tmpl.addFlags(f)
	return cmd
}

func (a *App) runPlan(ctx context.Context, o *planOptions, sp *spec.Spec) error {
	if o.json && o.dot {
		return usageErr(errors.New("--json and --dot exclude each other"))
	}
	req := runner.Request{Verb: runner.VerbApply, NoRestart: o.noRestart, NoRemove: o.noRemove, Force: o.force, Refresh: o.refresh}
	switch {
	case o.action != "":
		if _, err := plan.ParseServiceAction(o.action); err != nil {
			return usageErr(fmt.Errorf("--action: %w", err))
		}
		if o.destroy {
			return usageErr(errors.New("--action and --destroy exclude each other"))
		}
		req.Verb, req.Services, req.Nodes = o.action, o.services, o.nodes
	case o.services != nil || o.nodes != nil:
		return usageErr(errors.New("--service and --node go with --action start|stop|restart"))
	case o.force && !o.destroy:
		return usageErr(errors.New("--force goes with --destroy"))
	case o.destroy:
		req.Verb = runner.VerbDestroy
	}
	name := o.target
	if sp != nil {
		name, req.Spec, req.SpecFile = sp.Name, sp.Source, o.target
	}
	var layout *catalog.Resolution
	prep := func(cl *state.Cluster) error {
		if sp == nil {
			return nil
		}
		solved, l, err := a.resolveSpec(sp, cl, &o.tmpl)
		if err != nil {
			return err
		}
		req.Spec, layout = solved.Source, l
		return nil
	}
	var doc *apply.Document
	var err error
	if o.cluster.local || o.cluster.stateDir != "" {
		doc, err = a.planHere(ctx, o, name, &req, prep)
	} else {
		doc, err = a.planRemote(ctx, o, name, &req, prep)
	}
	if err != nil {
		return err
	}
	if layout != nil {
		doc.Layout = layout
		if !o.json && !o.dot {
			if err := a.printLayout(layout); err != nil {
				return err
			}
		}
	}
	if o.out != "" {
		saved := *doc
		saved.Spec.Source = req.Spec
		if saved.Spec.Source == "" && doc.Action != runner.VerbDestroy {
			return usageErr(errors.New("-o: the plan has no spec to save"))
		}
		data, err := json.MarshalIndent(&saved, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.out, append(data, '\n'), 0o600); err != nil {
			return fmt.Errorf("saving the plan: %w", err)
		}
	}
	switch {
	case o.json:
		return a.printJSON(doc)
	case o.dot:
		return writeDOT(a.Out, doc)
	}
	if err := doc.WriteTable(a.Out, o.target); err != nil {
		return err
	}
	if o.out != "" {
		fmt.Fprintf(a.Out, "\nSaved the plan to %s: 'loomd apply %s' runs exactly these tasks (it refuses if the cluster changes first).\n", o.out, o.out)
	}
	return nil
}

// planHere plans in this process, against the state files: the plugins of
// --plugins (their types checked in the spec, their resource files read
// from the work dir; without plugins, nothing is checked).
func (a *App) planHere(ctx context.Context, o *planOptions, name string, req *runner.Request, prep func(*state.Cluster) error) (*apply.Document, error) {
	st, err := a.clusterStore(ctx, &o.cluster)
	if err != nil {
		return nil, err
	}
	cl, err := a.getCluster(st, name)
	if err != nil {
		return nil, err
	}
	if cl == nil && req.Spec == "" {
		return nil, a.clusterGetErr(st, name, fmt.Errorf("cluster %s: %w", name, state.ErrNotFound))
	}
	if err := prep(cl); err != nil {
		return nil, err
	}
	var env runner.Env
	logger, err := a.newLogger(o.g.log)
	if err != nil {
		return nil, err
	}
	if req.Refresh {
		// The refresh runs tasks: here (--local) or on the daemon
		// (--state-dir alone), as apply would.
		o.cluster.parallelism = 16
		tasks, renv, closeTasks, err := a.clusterRunner(ctx, o.g, &o.cluster, logger, jobTee{}, name)
		if err != nil {
			return nil, err
		}
		defer closeTasks()
		env = renv
		if err := refreshHere(ctx, cl, req, env, tasks, logger); err != nil {
			return nil, err
		}
	} else if rt, err := a.newRuntime(ctx, o.g, runtimeConfig{logger: logger}); err != nil {
		fmt.Fprintf(a.Err, "loomd: the spec's plugin types are not checked: %v\n", err)
	} else {
		env, err = localEnv(o.g, rt.Types())
		rt.Close()
		if err != nil {
			return nil, err
		}
	}
	ch, err := runner.Plan(cl, *req, env)
	if err != nil {
		return nil, usageErr(err)
	}
	return ch.Document(req.Options(), false), nil
}

// planRemote asks the daemon at --server for the plan.
func (a *App) planRemote(ctx context.Context, o *planOptions, name string, req *runner.Request, prep func(*state.Cluster) error) (*apply.Document, error) {
	c, err := o.cluster.client.client()
	if err != nil {
		return nil, err
	}
	if err := a.checkRemoteCluster(ctx, c, name, req.Verb); err != nil {
		return nil, err
	}
	cl, err := a.remoteState(ctx, c, name)
	var ae *apiError
	if errors.As(err, &ae) && ae.code == http.StatusNotFound {
		cl, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := prep(cl); err != nil {
		return nil, err
	}
	return a.remotePlan(ctx, c, name, *req)
}

// writeDOT draws each step of a plan for Graphviz: one box per task, the
// tasks of a stage side by side, an arrow per prerequisite.
func writeDOT(w io.Writer, doc *apply.Document) error {
	var b strings.Builder
	for _, st := range doc.Steps {
		fmt.Fprintf(&b, "digraph %s {\n  label=%s;\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
			strconv.Quote(fmt.Sprintf("%s step %d", doc.Cluster, st.Index)), strconv.Quote(st.Reason))
		for si, stage := range st.Stages {
			fmt.Fprintf(&b, "  subgraph stage%d {\n    rank=same;\n", si+1)
			for _, i := range stage {
				t := st.Tasks[i]
				label := t.TaskName
				if t.Service != "" {
					label += "\\n" + t.Service
				}
				label += "\\n" + t.NodeID + "\\nstage " + strconv.Itoa(si+1)
				fmt.Fprintf(&b, "    t%d [label=\"%s\"];\n", i, strings.ReplaceAll(label, "\"", "'"))
			}
			b.WriteString("  }\n")
		}
		// A wait on the same task of many nodes (a barrier) is drawn once,
		// as a point, so big plans stay drawable.
		points := map[string]int{}
		for _, t := range st.Tasks {
			byKind := map[string][]int{}
			var kinds []string
			for _, d := range t.After {
				k := st.Tasks[d].TaskName + " " + st.Tasks[d].Service
				if _, ok := byKind[k]; !ok {
					kinds = append(kinds, k)
				}
				byKind[k] = append(byKind[k], d)
			}
			for _, k := range kinds {
				mem := byKind[k]
				if len(mem) <= 2 {
					for _, d := range mem {
						fmt.Fprintf(&b, "  t%d -> t%d;\n", d, t.Index)
					}
					continue
				}
				key := fmt.Sprint(mem)
				g, ok := points[key]
				if !ok {
					g = len(points)
					points[key] = g
					fmt.Fprintf(&b, "  g%d [shape=point, label=\"\"];\n", g)
					for _, d := range mem {
						fmt.Fprintf(&b, "  t%d -> g%d;\n", d, g)
					}
				}
				fmt.Fprintf(&b, "  g%d -> t%d;\n", g, t.Index)
			}
		}
		b.WriteString("}\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
