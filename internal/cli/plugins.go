package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/runtime"
)

func (a *App) newPluginsCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List and check plugins",
	}
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List plugin types: family, folder, hooks and version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runPluginsList(cmd.Context(), g, asJSON)
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	var strict bool
	var checkJSON bool
	check := &cobra.Command{
		Use:   "check [DIR]",
		Short: "Validate plugin definitions and compile their Lua without running any hook",
		Long: `Validate plugin definitions and compile (and load) their Lua, running no hook.
DIR is a plugin folder (only that plugin is checked) or a folder of plugin
folders (default: --plugins). Every problem is printed as file:line: message.

Errors exit 1: what stops a plugin from loading; keys a definition does not
know ("defualt"), which loading would silently ignore; defaults that do not
fit their field (an object, a checkbox's "yes", a select's value not among
its options); a function named like a hook ("comfirm") when the hook itself
is missing; and what a Coopr server would refuse when loomd registers a type
(an unknown parameter group, a required field that is not declared, a
resource format other than file or archive...), though loomd still serves
such a type from its own queue.

Warnings (a hook the entry table does not define, a near-hook name next to
the real hook, a field type a Coopr UI does not know) exit 0, or 1 with
--strict.`,
		Example: `  loomd plugins check plugins/digitalocean
  loomd plugins check --json --strict plugins`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var folders []string
			if len(args) == 1 {
				if runtime.IsPluginFolder(args[0]) {
					folders = []string{filepath.Clean(args[0])}
					g.pluginsDir = filepath.Dir(filepath.Clean(args[0]))
				} else {
					g.pluginsDir = args[0]
				}
			}
			return a.runPluginsCheck(cmd.Context(), g, folders, checkJSON, strict)
		},
	}
	check.Flags().BoolVar(&strict, "strict", false, "exit 1 on warnings too")
	check.Flags().BoolVar(&checkJSON, "json", false, "print the problems as JSON")
	cmd.AddCommand(list, check)
	return cmd
}

func (a *App) runPluginsList(ctx context.Context, g *globalOptions, asJSON bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Load errors are printed below (once), not logged as well.
	rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: discardLogger()})
	if err != nil {
		return err
	}
	defer rt.Close()
	types := rt.Types()
	if asJSON {
		out := struct {
			Types  any `json:"types"`
			Errors any `json:"errors"`
		}{types, rt.LoadErrors()}
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Fprintf(a.Out, "%s\n", b)
		return nil
	}
	tw := tabwriter.NewWriter(a.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tFAMILY\tPLUGIN\tVERSION\tHOOKS\tDIR")
	for _, t := range types {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Family, t.Plugin, t.Version, strings.Join(t.Hooks, ","), t.Dir)
	}
	tw.Flush()
	failed := false
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			failed = true
			fmt.Fprintf(a.Err, "error: %v\n", e)
		}
	}
	if failed {
		// Some plugin did not load: say so in the exit status too.
		return silentExit(ExitFailure)
	}
	return nil
}

// checkProblem is one problem in plugins check --json.
type checkProblem struct {
	Severity string `json:"severity"`
	*runtime.LoadError
}

func (a *App) runPluginsCheck(ctx context.Context, g *globalOptions, folders []string, asJSON, strict bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Load problems are printed below, not logged as well.
	rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: discardLogger(), folders: folders})
	if err != nil {
		return err
	}
	defer rt.Close()
	errs, warns := 0, 0
	problems := []checkProblem{}
	all := append(rt.LoadErrors(), rt.LintWith(runtime.LintOptions{Strict: strict})...)
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].File != all[j].File {
			return all[i].File < all[j].File
		}
		return all[i].Line < all[j].Line
	})
	for _, e := range all {
		// What a Coopr server would refuse fails the check, as a
		// server would (serve keeps serving it from its own queue).
		sev := "error"
		if e.Warning && !e.Coopr {
			sev = "warning"
			warns++
		} else {
			errs++
		}
		problems = append(problems, checkProblem{Severity: sev, LoadError: e})
	}
	where := g.pluginsDir
	if len(folders) > 0 {
		where = folders[0]
	}
	types := rt.Types()
	if asJSON {
		names := make([]string, len(types))
		for i, t := range types {
			names[i] = t.Name
		}
		b, _ := json.MarshalIndent(map[string]any{
			"ok": errs == 0 && (!strict || warns == 0), "dir": where, "types": names,
			"errors": errs, "warnings": warns, "problems": problems,
		}, "", "  ")
		fmt.Fprintf(a.Out, "%s\n", b)
	} else {
		for _, p := range problems {
			fmt.Fprintf(a.Out, "%s: %v\n", p.Severity, p.LoadError)
		}
		fmt.Fprintf(a.Out, "%d plugin types OK, %d errors, %d warnings in %s\n", len(types), errs, warns, where)
	}
	if errs > 0 || (strict && warns > 0) {
		return silentExit(ExitFailure)
	}
	return nil
}
