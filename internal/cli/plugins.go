package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
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
	check := &cobra.Command{
		Use:   "check [DIR]",
		Short: "Validate plugin definitions and compile their Lua without running any hook",
		Long: `Validate every plugin definition and compile (and load) its Lua, running no hook.
Every problem is printed as file:line: message. Warnings (a hook the entry
table does not define) do not fail the check; errors exit 1. What a Coopr
server would refuse when loomd registers a type (an unknown parameter
group, a required field that is not declared, a resource format other than
file or archive, permissions on an archive...) is an error here, though
loomd still serves the type from its own queue.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				g.pluginsDir = args[0]
			}
			return a.runPluginsCheck(cmd.Context(), g)
		},
	}
	cmd.AddCommand(list, check)
	return cmd
}

func (a *App) runPluginsList(ctx context.Context, g *globalOptions, asJSON bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	logger, err := a.newLogger(logOptions{format: g.log.format, level: "error"})
	if err != nil {
		return err
	}
	rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: logger})
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
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			fmt.Fprintf(a.Err, "error: %v\n", e)
		}
	}
	return nil
}

func (a *App) runPluginsCheck(ctx context.Context, g *globalOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// Load problems are printed below, not logged as well.
	rt, err := a.newRuntime(ctx, g, runtimeConfig{logger: discardLogger()})
	if err != nil {
		return err
	}
	defer rt.Close()
	errs, warns := 0, 0
	for _, e := range rt.LoadErrors() {
		kind := "error"
		if e.Coopr {
			// A Coopr server would refuse it: the check fails, as a
			// server would (serve keeps serving it from its own queue).
			errs++
		} else if e.Warning {
			kind = "warning"
			warns++
		} else {
			errs++
		}
		fmt.Fprintf(a.Out, "%s: %v\n", kind, e)
	}
	fmt.Fprintf(a.Out, "%d plugin types OK, %d errors, %d warnings in %s\n", len(rt.Types()), errs, warns, g.pluginsDir)
	if errs > 0 {
		return silentExit(ExitFailure)
	}
	return nil
}
