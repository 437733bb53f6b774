package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/internal/plugtest"
	"github.com/loomrt/loom/internal/repl"
)

type replOptions struct {
	g        *globalOptions
	typeName string
	timeout  time.Duration
	permit   []string
}

func (a *App) newReplCmd(g *globalOptions) *cobra.Command {
	o := &replOptions{g: g}
	cmd := &cobra.Command{
		Use:   "repl [TYPE]",
		Short: "Debug plugins at a Lua prompt: load a type, set a task, run hooks, reload",
		Long: `Start a Lua prompt in the plugin sandbox, on plugin type TYPE (or a bare
sandbox). The prompt runs with exactly the sandbox and bindings loomd gives
plugins. Type :help at the prompt for its commands (:load, :task, :set, :run,
:call, :result, :test, :reload, :timeout, :plugins, :quit); :help TOPIC
documents a binding (:help loom.ssh.connect) or a base table (:help loom.Provider).

On a terminal it edits lines (history in $XDG_STATE_HOME/loom/repl_history or
~/.local/state/loom/repl_history, or $LOOM_REPL_HISTORY; Ctrl-R searches it;
Tab completes). Ctrl-C interrupts a running statement, Ctrl-D exits.

When stdin is not a terminal, statements are read line by line: results go to
stdout, errors to stderr, and the exit status is 1 if any statement failed.`,
		Example: `  loomd repl --plugins examples/plugins hello
  printf ':load hello\n:task examples/tasks/install.json\n:run\n' | loomd repl --plugins examples/plugins`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				o.typeName = args[0]
			}
			return a.runRepl(cmd.Context(), o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "deadline for each statement and hook, overriding the plugins' own timeouts (default: none for statements, the plugins' for hooks)")
	addPermitFlag(cmd, &o.permit)
	return cmd
}

func (a *App) runRepl(ctx context.Context, o *replOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.g.log.level)); err != nil {
		return usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", o.g.log.level))
	}
	// No plugins folder (the default "plugins" in some other directory):
	// start a bare sandbox to try the bindings in, rather than refuse.
	if _, err := os.Stat(o.g.pluginsDir); errors.Is(err, fs.ErrNotExist) && o.typeName == "" {
		empty, err := os.MkdirTemp("", "loomd-repl-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(empty)
		fmt.Fprintf(a.Err, "loomd: no plugins folder at %s: a bare sandbox with the loom modules (set --plugins to load plugins)\n", o.g.pluginsDir)
		g := *o.g
		g.pluginsDir = empty
		o.g = &g
	}
	// The test kit: fakes the prompt opens (:fake http HOST, loom.test).
	kit, err := plugtest.NewKit(nil)
	if err != nil {
		return err
	}
	defer kit.Close()
	// Load problems are shown by the REPL (banner, :plugins, :reload).
	rt, err := a.newRuntime(ctx, o.g, runtimeConfig{timeout: o.timeout, logger: discardLogger(), permit: o.permit, kit: kit})
	if err != nil {
		return err
	}
	defer rt.Close()

	fd := -1
	if f, ok := a.In.(*os.File); ok {
		fd = int(f.Fd())
	}
	var history string
	if a.StdinTTY {
		if history, err = repl.HistoryPath(a.Getenv); err != nil {
			fmt.Fprintf(a.Err, "loomd: %v; history will not be saved\n", err)
		}
	}
	sigs, stopSignals := a.signals(1)
	defer stopSignals()
	r, err := repl.New(repl.Options{
		Runtime:     rt,
		Type:        o.typeName,
		In:          a.In,
		Out:         a.Out,
		Err:         a.Err,
		Interactive: a.StdinTTY,
		TerminalFd:  fd,
		HistoryFile: history,
		Timeout:     o.timeout,
		LogLevel:    level,
		Signals:     sigs,
		Modules:     a.moduleSpecs(o.g),
		Kit:         kit,
	})
	if err != nil {
		return usageErr(err)
	}
	defer r.Close()
	switch err := r.Run(ctx); {
	case errors.Is(err, repl.ErrFailed):
		return silentExit(ExitFailure)
	case errors.Is(err, repl.ErrInterrupted):
		return silentExit(130)
	default:
		return err
	}
}

// moduleSpecs documents the loom.* bindings for the REPL's completion.
func (a *App) moduleSpecs(g *globalOptions) []bindings.ModuleSpec {
	reg := a.newBindings(g, discardLogger())
	defer reg.Close()
	var specs []bindings.ModuleSpec
	for _, n := range reg.Names() {
		if b, ok := reg.Lookup(n); ok {
			specs = append(specs, b.Spec())
		}
	}
	return specs
}
