package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/runtime"
)

// addKindCommands registers the commands of the called plugin kinds.
func (a *App) addKindCommands(root *cobra.Command, g *globalOptions) {
	root.AddCommand(a.newCallCmd(g), a.newKindsCmd())
}

type callOptions struct {
	g       *globalOptions
	typ     string
	hook    string
	file    string
	id      string
	timeout time.Duration
}

func (a *App) newCallCmd(g *globalOptions) *cobra.Command {
	o := &callOptions{g: g}
	cmd := &cobra.Command{
		Use:   "call TYPE HOOK [INPUT.json]",
		Short: "Run one hook of a cluster driver, bucket provisioner, cloud provider or Kloud provider and print its result JSON",
		Long: `Run one hook of a plugin type of a called kind (clusterdrivers, bucketprovisioners,
cloudproviders, kloudproviders) in-process, and print the call's result JSON on stdout:
{"kind", "type", "hook", "status", "result", "error": {"class", "reason", "message"}, ...}.
The input is a JSON object from INPUT.json, - for stdin, or {} when omitted; it is
checked against the hook's input shape before any Lua runs (docs/kinds/<kind>.md).
Logs go to stderr. Provider and automator types run Coopr tasks: use loomd run.

Exit status: 0 when the hook succeeded, 1 when it failed (the result says how),
2 for usage errors, a malformed or invalid input, an unknown type or hook, or a
plugin that failed to load, and 130 when interrupted.`,
		Example: `  loomd call gkelike create_options --plugins examples/kinds
  loomd call gkelike create cluster.json
  echo '{"machine": {"metadata": {"uid": "u1"}}}' | loomd call fakecloud get -`,
		Args: cobra.RangeArgs(2, 3),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.typ, o.hook = args[0], args[1]
			if len(args) == 3 {
				o.file = args[2]
			}
			return a.runCall(cmd.Context(), o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "deadline of the hook, overriding the plugin definition's timeouts (default: theirs, or 10m)")
	cmd.Flags().StringVar(&o.id, "id", "", "call id for logs and the result (default: generated)")
	return cmd
}

func (a *App) runCall(ctx context.Context, o *callOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	logger, err := a.newLogger(o.g.log)
	if err != nil {
		return err
	}
	var input []byte
	switch o.file {
	case "":
	case "-":
		input, err = io.ReadAll(a.In)
	default:
		input, err = os.ReadFile(o.file)
	}
	if err != nil {
		return usageErr(fmt.Errorf("reading the input: %w", err))
	}
	id := o.id
	if id == "" {
		id = fmt.Sprintf("call-%d", time.Now().UnixNano())
	}
	req := &runtime.CallRequest{CallID: id, Type: o.typ, Hook: o.hook, Input: input}
	if len(input) > 0 && !json.Valid(input) {
		var v any
		jerr := json.Unmarshal(input, &v)
		return usageErr(fmt.Errorf("%s: the input is not valid JSON: %v", o.file, jerr))
	}
	// One call: hooks other types leave undefined are not its business.
	rt, err := a.newRuntime(ctx, o.g, runtimeConfig{timeout: o.timeout, logger: logger, quietMissingHooks: true})
	if err != nil {
		return err
	}
	defer rt.Close()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := rt.Call(ctx, req)
	if err := a.printOneShot(res, err); err != nil {
		return err
	}
	if res.Status != 0 {
		logger.Error("call failed", "call", id, "type", o.typ, "hook", o.hook, "class", res.Error.Class, "message", res.Message)
		return silentExit(ExitFailure)
	}
	return nil
}

func (a *App) newKindsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "kinds [KIND]",
		Short: "List the plugin kinds and their contracts (hooks, inputs, results, error classes)",
		Long: `Without KIND, list the six plugin kinds: family, definition key, base table and hooks.
With KIND (a family such as clusterdriver, or a key such as clusterdrivers), print
its contract as Markdown (the text of docs/kinds/<kind>.md), or as JSON with --json.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if asJSON {
					b, _ := json.MarshalIndent(runtime.Kinds(), "", "  ")
					fmt.Fprintf(a.Out, "%s\n", b)
					return nil
				}
				fmt.Fprint(a.Out, renderKindList(runtime.Kinds()))
				return nil
			}
			k := runtime.KindOf(runtime.Family(args[0]))
			if k == nil {
				k = runtime.KindByKey(args[0])
			}
			if k == nil {
				return usageErr(fmt.Errorf("unknown kind %q (run loomd kinds for the list)", args[0]))
			}
			if asJSON {
				b, _ := json.MarshalIndent(k, "", "  ")
				fmt.Fprintf(a.Out, "%s\n", b)
				return nil
			}
			fmt.Fprint(a.Out, runtime.KindMarkdown(k))
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// renderKindList prints one line per kind.
func renderKindList(kinds []*runtime.Kind) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAMILY\tKEY\tBASE\tRUNS FROM\tHOOKS (* required)")
	for _, k := range kinds {
		from := "calls"
		if k.Coopr {
			from = "Coopr tasks"
		}
		hooks := make([]string, len(k.Hooks))
		for i, h := range k.Hooks {
			hooks[i] = h.Name
			if h.Required {
				hooks[i] += "*"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.Family, k.Key, k.Base, from, strings.Join(hooks, ","))
	}
	tw.Flush()
	return b.String()
}
