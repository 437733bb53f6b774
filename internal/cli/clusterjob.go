package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

// localEnv is what a job is planned with in this process: the loaded
// plugin types, and the resource files of their folders in the work dir.
func localEnv(g *globalOptions, types []runtime.TypeInfo) (runner.Env, error) {
	res, err := readResources(g.workDir, g.tenant, types)
	if err != nil {
		return runner.Env{}, err
	}
	return runner.Env{Plugins: pluginsOf(types, "the plugins in "+g.pluginsDir), Resources: res}, nil
}

// remoteEnv is what the daemon at c plans with, as far as this process
// can see: its plugin types (its resource files are its own).
func (a *App) remoteEnv(ctx context.Context, c *apiClient) runner.Env {
	var pr api.PluginsResponse
	if err := c.do(ctx, "GET", "/v1/plugins", nil, &pr); err != nil {
		return runner.Env{}
	}
	return runner.Env{Plugins: pluginsOf(pr.Types, "the plugins of the loomd at "+c.base)}
}

// pluginsOf is the catalog a spec is checked against (nil when no plugin
// is loaded: nothing is checked).
func pluginsOf(types []runtime.TypeInfo, where string) *spec.Plugins {
	if len(types) == 0 {
		return nil
	}
	p := &spec.Plugins{Where: where}
	for _, t := range types {
		switch t.Family {
		case runtime.Provider:
			p.Providers = append(p.Providers, t.Name)
		case runtime.Automator:
			p.Automators = append(p.Automators, t.Name)
		}
	}
	return p
}

// readResources hashes the resource folders (resourceTypes) of the
// automator types in the work dir.
func readResources(workDir, tenant string, types []runtime.TypeInfo) (*apply.Resources, error) {
	folders := map[string][]string{}
	for _, t := range types {
		if t.Family != runtime.Automator {
			continue
		}
		var def struct {
			ResourceTypes map[string]json.RawMessage `json:"resourceTypes"`
		}
		if len(t.Raw) > 0 && json.Unmarshal(t.Raw, &def) == nil {
			for r := range def.ResourceTypes {
				folders[t.Name] = append(folders[t.Name], r)
			}
			sort.Strings(folders[t.Name])
		}
	}
	return apply.ReadResources(workDir, tenant, folders)
}

// confirm shows the plan and asks for a yes, unless cf.yes. Without a
// terminal on stdin there is no one to ask: it refuses, saying how to go
// on (--yes, or a saved plan).
func (a *App) confirm(doc *apply.Document, cf confirmation) error {
	if cf.yes {
		return nil
	}
	if !a.StdinTTY {
		return usageErr(fmt.Errorf("%s would run %d task(s) (%s), and stdin is not a terminal, so no one can confirm: "+
			"add --yes to %s without confirmation, or save the plan with 'loomd plan ... -o plan.json', review it, and run 'loomd apply plan.json'",
			cf.verb, doc.Tasks, doc.Reason, cf.verb))
	}
	if doc.Tasks <= 200 {
		if err := doc.WriteTable(a.Out, cf.target); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(a.Out, "Plan: %s %s: %s (%d task(s) in %d step(s); 'loomd plan' lists every task)\n", doc.Action, doc.Cluster, doc.Reason, doc.Tasks, len(doc.Steps))
		for _, st := range doc.Steps {
			fmt.Fprintf(a.Out, "  step %d: %s (%d tasks)\n", st.Index, st.Reason, len(st.Tasks))
		}
		for _, n := range doc.Notes {
			fmt.Fprintf(a.Out, "Note: %s\n", n)
		}
	}
	fmt.Fprintf(a.Err, "\n%s cluster %s as planned above? Only 'yes' is accepted: ", strings.ToUpper(cf.verb[:1])+cf.verb[1:], doc.Cluster)
	line, _ := bufio.NewReader(a.In).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		fmt.Fprintf(a.Err, "Cancelled: nothing was run.\n")
		return silentExit(ExitFailure)
	}
	return nil
}

// printClusterSummary prints every node with its address, and what the
// job did not do: its failed tasks with how to go on, what it abandoned.
func (a *App) printClusterSummary(cl *state.Cluster, job *state.Job, retry string) error {
	if cl == nil {
		return nil
	}
	fmt.Fprintf(a.Out, "Cluster %s: %s", cl.Name, cl.Status)
	if job != nil {
		fmt.Fprintf(a.Out, " (job %s, %s: %s, %d/%d tasks done", job.ID, job.Action, job.Status, job.DoneTasks(), max(job.TaskCount, len(job.Tasks)))
		if !job.Ended.IsZero() {
			fmt.Fprintf(a.Out, ", %s", job.Ended.Sub(job.Started).Round(time.Millisecond))
		}
		fmt.Fprint(a.Out, ")")
	}
	fmt.Fprintln(a.Out)
	if job != nil && len(job.Steps) > 1 {
		for i, st := range job.Steps {
			status := st.Status
			if status == "" {
				status = "pending"
			}
			fmt.Fprintf(a.Out, "  step %d: %s: %s\n", i+1, st.Reason, status)
		}
	}
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
	if job == nil {
		return nil
	}
	if len(job.Abandoned) > 0 {
		fmt.Fprintf(a.Out, "\nAbandoned (--force): what could not be done, left for you to check by hand:\n")
		for _, ab := range job.Abandoned {
			what := strings.TrimSpace(ab.Task + " " + ab.Service)
			if ab.ProviderID != "" {
				fmt.Fprintf(a.Out, "  %s on %s (providerid %s: the machine may still exist): %s\n", what, ab.Node, ab.ProviderID, ab.Message)
			} else {
				fmt.Fprintf(a.Out, "  %s on %s: %s\n", what, ab.Node, ab.Message)
			}
		}
	}
	if job.Status == state.JobComplete {
		return nil
	}
	fmt.Fprintf(a.Out, "\nJob %s %s: %s\n", job.ID, job.Status, job.Message)
	a.printFailures(job, "  ")
	if job.Status == state.JobRolledBack {
		fmt.Fprintf(a.Out, "Everything the job created was destroyed. Fix the cause, then run '%s' again: it plans the cluster anew.\n", retry)
		return nil
	}
	fmt.Fprintf(a.Out, "Fix the cause, then run '%s' again: it resumes job %s where it stopped (finished tasks are not run again; "+
		"changed scripts are shipped first, and a changed spec is planned anew from what ran).\n", retry, job.ID)
	if job.Action == apply.JobDestroy && !job.Options.Force {
		fmt.Fprintf(a.Out, "If a node cannot be reached any more, 'loomd destroy %s --force' abandons what fails and lists it.\n", cl.Name)
	}
	return nil
}

// printFailures lists a job's failed tasks with their last run and
// message (the task records name their task, node and service).
func (a *App) printFailures(job *state.Job, indent string) {
	idx := make([]int, 0, len(job.Tasks))
	for i, rec := range job.Tasks {
		if rec != nil && rec.Status == state.TaskFailed {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		rec := job.Tasks[i]
		what := strings.TrimSpace(rec.Name + " " + rec.Service)
		if len(rec.Runs) == 0 {
			fmt.Fprintf(a.Out, "%sfailed: %s on %s (never started): %s\n", indent, what, rec.Node, rec.Message)
			continue
		}
		last := rec.Runs[len(rec.Runs)-1]
		fmt.Fprintf(a.Out, "%sfailed: %s on %s (task %s, %s, %d runs): %s\n", indent, what, rec.Node, last.ID, last.Name, len(rec.Runs), last.Message)
	}
}

// specErrors completes the problems of a spec that failed to load with
// those only the plugins show (an unknown provider or automator type), so
// every problem is reported at once: the plugins are read as the command
// would (--local: from --plugins; else from the loomd at --server).
func (a *App) specErrors(ctx context.Context, g *globalOptions, o *clusterOptions, file string, err error) error {
	var se *spec.Error
	if !errors.As(err, &se) || file == "" {
		return err
	}
	var plugins *spec.Plugins
	if o.local || o.stateDir != "" {
		logger, lerr := a.newLogger(g.log)
		if lerr != nil {
			return err
		}
		rt, rerr := a.newRuntime(ctx, g, runtimeConfig{logger: logger})
		if rerr != nil {
			return err
		}
		plugins = pluginsOf(rt.Types(), "the plugins in "+g.pluginsDir)
		rt.Close()
	} else if c, cerr := o.client.client(); cerr == nil {
		plugins = a.remoteEnv(ctx, c).Plugins
	}
	if plugins == nil {
		return err
	}
	max, merr := o.specMaxBytes()
	if merr != nil {
		return err
	}
	if st, serr := os.Stat(file); serr != nil || st.Size() > max {
		return err
	}
	data, rerr := os.ReadFile(file)
	if rerr != nil {
		return err
	}
	if _, perr := spec.ParseWith(file, data, spec.Options{Plugins: plugins}); perr != nil {
		return usageErr(perr)
	}
	return err
}
