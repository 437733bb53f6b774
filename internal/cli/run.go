package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/runtime"
)

type runOptions struct {
	g       *globalOptions
	file    string
	timeout time.Duration
	permit  []string
}

func (a *App) newRunCmd(g *globalOptions) *cobra.Command {
	o := &runOptions{g: g}
	cmd := &cobra.Command{
		Use:   "run TASK.json",
		Short: "Run one Coopr task from a file (or - for stdin) and print its result JSON",
		Long: `Run one Coopr task through the plugins and print Coopr's result JSON on stdout.
Logs go to stderr.

Exit status: 0 when the result's status is 0, 1 when the task failed, and 2 for
usage errors, a malformed task, or a plugin that is missing or failed to load.`,
		Example: `  loomd run examples/tasks/create.json --plugins examples/plugins
  cat task.json | loomd run - --timeout 2m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return a.runRun(cmd.Context(), o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "deadline for each hook, overriding the plugin definitions' timeouts (default: theirs, or 10m)")
	addPermitFlag(cmd, &o.permit)
	return cmd
}

// addPermitFlag adds --permit, for loomd run and loomd repl: hosts that
// every plugin may reach on top of its permissions.http allow-list.
func addPermitFlag(cmd *cobra.Command, permit *[]string) {
	cmd.Flags().StringSliceVar(permit, "permit", nil, "also let the plugins reach this host (repeat or comma-separate; \"127.0.0.1\" for a local server to debug against), on top of their permissions.http allow-lists")
}

func (a *App) runRun(ctx context.Context, o *runOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	defer a.oneShotGC()()
	logger, err := a.newLogger(o.g.log)
	if err != nil {
		return err
	}
	var data []byte
	if o.file == "-" {
		data, err = io.ReadAll(a.In)
	} else {
		data, err = os.ReadFile(o.file)
	}
	if err != nil {
		return usageErr(fmt.Errorf("reading the task: %w", err))
	}
	task, err := runtime.ParseTask(data)
	if err != nil {
		return usageErr(fmt.Errorf("%s: %w", o.file, err))
	}
	// An automator task's node: its TCP connection opens now, so that
	// sshd's start of a process for it overlaps the plugins' loading (the
	// SSH handshake still waits for the plugin; see sshb.EarlyDials).
	early := &sshb.EarlyDials{}
	defer early.Close()
	if addr := sshb.TaskNodeAddr(data); addr != "" {
		early.Start(addr, 10*time.Second)
	}
	// One task: the hooks other types (or this one) leave undefined are
	// not this run's business; a task for one fails with its own message.
	rt, err := a.newRuntime(ctx, o.g, runtimeConfig{timeout: o.timeout, logger: logger, quietMissingHooks: true, permit: o.permit, early: early})
	if err != nil {
		return err
	}
	defer rt.Close()

	// Ctrl-C cancels the hook; the result says so.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := rt.RunTask(ctx, task)
	if err := a.printOneShot(res, err); err != nil {
		return err
	}
	if res.Status != 0 {
		logger.Error("task failed", "task", task.TaskID, "status", res.Status, "message", res.Message)
		return silentExit(ExitFailure)
	}
	return nil
}

// oneShotGC raises GOGC to startGCPercent for a one-shot run and returns
// what restores it. Such a run builds its whole heap from nothing
// (plugins, a VM, the task) and ends: collecting at every doubling from
// 4 MiB took a sixth of its CPU (BOOTSTRAP+INSTALL 66 -> 54 ms). GOGC,
// when set, is left alone.
func (a *App) oneShotGC() (restore func()) {
	if a.Getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(startGCPercent)
	return func() { debug.SetGCPercent(prev) }
}

// printOneShot ends a one-shot run (loomd run, loomd call): a run that
// could not happen maps to exit 130 (interrupted) or 2, and a result is
// printed as indented JSON on stdout, whatever its status.
func (a *App) printOneShot(res any, err error) error {
	if err != nil {
		if errors.Is(err, runtime.ErrCancelled) {
			return &exitError{code: 130, err: err}
		}
		return usageErr(err)
	}
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	fmt.Fprintf(a.Out, "%s\n", out)
	return nil
}
