// Package cli holds loomd's cobra commands, one file per command. An App
// carries the IO streams and environment, so every command runs in-process
// in tests exactly as it does from a shell.
package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/term"
)

// Exit codes shared by every command.
const (
	ExitOK      = 0
	ExitFailure = 1 // the task ran and failed (status != 0), or a check found problems
	ExitUsage   = 2 // bad flags, bad input, config or plugin load errors
	ExitTimeout = 3 // gave up waiting for a task (--timeout); the task keeps going
)

// App is the environment a command runs in. NewSystemApp is the only
// place that touches the process's streams and environment.
type App struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	Getenv func(string) string
	// StdoutTTY and StdinTTY tell whether the streams are terminals
	// (human tables vs JSON; REPL line editing).
	StdoutTTY bool
	StdinTTY  bool
	// Version is the build's version string.
	Version string
	// Signals, when set, delivers SIGINT/SIGTERM to long-running commands
	// (serve, repl). Nil in tests unless a test wants to send them.
	Signals <-chan os.Signal
	// Executable is the loomd binary loomd serve starts its worker
	// processes from; empty means this process's own executable.
	Executable string
}

// signals is a.Signals, or else the process's SIGINT and SIGTERM,
// buffered for n signals; stop releases them.
func (a *App) signals(n int) (sigs <-chan os.Signal, stop func()) {
	if a.Signals != nil {
		return a.Signals, func() {}
	}
	c := make(chan os.Signal, n)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

// NewSystemApp returns an App bound to the process.
func NewSystemApp() *App {
	return &App{
		In: os.Stdin, Out: os.Stdout, Err: os.Stderr,
		Getenv:    os.Getenv,
		StdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
		StdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
		Version:   version(),
	}
}

// exitError carries an exit code up to Main, with a message already
// printed (silent) or to print.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErr marks err as a usage, input or config problem (exit 2).
func usageErr(err error) error { return &exitError{code: ExitUsage, err: err} }

// silentExit ends a command with code and no further message.
func silentExit(code int) error { return &exitError{code: code} }

func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitFailure
}

// logOptions are the logging flags shared by every command.
type logOptions struct {
	format string
	level  string
}

// newLogger builds the slog logger for the command's stderr.
func (a *App) newLogger(o logOptions) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.level)); err != nil {
		return nil, usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level))
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(o.format) {
	case "text", "":
		return slog.New(slog.NewTextHandler(a.Err, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(a.Err, hopts)), nil
	default:
		return nil, usageErr(fmt.Errorf("--log-format %q: want text or json", o.format))
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
