// Package repl is loomd's plugin REPL: a Lua prompt on a runtime Session,
// so a plugin author can load a plugin, give it a task, call its hooks,
// read what they logged and returned, fix the code, reload and call again,
// in exactly the sandbox and with exactly the bindings loomd gives plugins.
//
// It has two modes. Interactive mode (a terminal) edits lines with
// github.com/chzyer/readline: persistent history, Ctrl-R search, tab
// completion. Piped mode reads statements line by line, prints results on
// Out and errors on Err, and reports whether any statement failed, for
// scripted debugging and CI. All IO is injected through Options.
package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/internal/plugtest"
	"github.com/loomrt/loom/runtime"
)

// Errors Run returns; the CLI maps them to exit codes.
var (
	// ErrFailed: at least one statement or command failed in piped mode.
	ErrFailed = errors.New("a statement failed")
	// ErrInterrupted: a signal ended the REPL while it waited for input.
	ErrInterrupted = errors.New("interrupted")
)

// Causes of a cancelled statement, as shown to the user.
var (
	errCtrlC      = errors.New("Ctrl-C")
	errTerminated = errors.New("terminated by a signal")
)

// Options configure a REPL.
type Options struct {
	// Runtime is a loaded runtime; the REPL opens its session on it.
	Runtime *runtime.Runtime
	// Type is the plugin type to load first; "" starts a bare sandbox.
	Type string
	// In, Out and Err are the REPL's streams.
	In       io.Reader
	Out, Err io.Writer
	// Interactive selects line editing (In and Out are a terminal).
	Interactive bool
	// TerminalFd is the terminal's file descriptor, used in interactive
	// mode to switch it to raw mode and read its width; -1 when unknown.
	TerminalFd int
	// HistoryFile persists interactive history; "" keeps none.
	HistoryFile string
	// Timeout is the initial deadline of each statement and :run (0: none).
	Timeout time.Duration
	// LogLevel is the lowest level of plugin log lines shown. Default info.
	LogLevel slog.Leveler
	// Signals delivers SIGINT (cancel the running statement) and SIGTERM
	// (cancel and quit). Nil disables signal handling.
	Signals <-chan os.Signal
	// Modules documents the loom.* bindings, for completion.
	Modules []bindings.ModuleSpec
	// Kit, when set, is loomd test's kit at the prompt: :fake http HOST,
	// :fake ssh HOST, require("loom.test"), and :run serving the fakes'
	// Lua handlers. The runtime must route loom.http and loom.ssh through
	// it (plugtest.Kit's Intercept, Dial, InstructionHook).
	Kit *plugtest.Kit
}

// REPL is one plugin REPL. It is used by one goroutine; the completer runs
// on readline's goroutine while that one waits for input.
type REPL struct {
	opts    Options
	rt      *runtime.Runtime
	out     io.Writer
	errw    io.Writer
	logger  *slog.Logger
	timeout time.Duration

	mu   sync.Mutex // guards s and its Lua state against the completer
	s    *runtime.Session
	last *runtime.Result
	help *helpTopics

	failed bool
	// at is "stdin:N: " while piped input line N's command or statement
	// runs, so that errors say which line of a script failed.
	at        string
	atCommand bool

	sigMu  sync.Mutex
	cancel context.CancelCauseFunc // of the running statement, or nil
	quit   bool                    // a signal asked to quit
}

// New opens a session on opts.Type (or a bare sandbox).
func New(opts Options) (*REPL, error) {
	if opts.Runtime == nil {
		return nil, errors.New("repl: a runtime is required")
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Err == nil {
		opts.Err = opts.Out
	}
	if opts.In == nil {
		opts.In = strings.NewReader("")
	}
	if opts.LogLevel == nil {
		opts.LogLevel = slog.LevelInfo
	}
	if err := checkType(opts.Runtime, opts.Type); err != nil {
		return nil, err
	}
	s, err := opts.Runtime.NewSession(opts.Type)
	if err != nil {
		return nil, fmt.Errorf("opening a session on %q: %w", opts.Type, err)
	}
	r := &REPL{
		opts:    opts,
		rt:      opts.Runtime,
		out:     opts.Out,
		errw:    opts.Err,
		logger:  slog.New(newLineHandler(opts.Out, opts.LogLevel)),
		timeout: opts.Timeout,
		s:       s,
		help:    newHelpTopics(opts.Modules),
	}
	r.attachKit()
	return r, nil
}

// attachKit gives the session's current VM the kit (require("loom.test"))
// after the session opened or replaced it; fakes of a replaced VM close.
func (r *REPL) attachKit() {
	k := r.opts.Kit
	if k == nil {
		return
	}
	r.s.Preload("loom.test", k.Module)
	if note := k.Attach(r.rt, r.s, r.logger); note != "" {
		fmt.Fprintf(r.errw, "note: %s\n", note)
	}
}

// Close releases the session.
func (r *REPL) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.s.Close()
}

// lineSource reads statements: a readline terminal or a pipe.
type lineSource interface {
	// ReadLine returns one line without its newline, io.EOF at the end,
	// or errPromptInterrupt when Ctrl-C was typed at the prompt.
	ReadLine(prompt string) (string, error)
	// SaveHistory records a complete statement.
	SaveHistory(stmt string)
	// Close stops reading; a blocked ReadLine returns.
	Close() error
}

// errPromptInterrupt: Ctrl-C at the prompt discards the pending input.
var errPromptInterrupt = errors.New("interrupt at the prompt")

// Run reads and runs statements until EOF (Ctrl-D), :quit or SIGTERM. In
// piped mode it returns ErrFailed when any statement failed.
func (r *REPL) Run(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var src lineSource
	if r.opts.Interactive {
		ts, err := newTermSource(r.opts, &completer{r: r})
		if err != nil {
			return err
		}
		src = ts
	} else {
		src = newPipedSource(r.opts.In)
	}
	defer src.Close()
	stop := r.watchSignals(src)
	defer stop()
	if r.opts.Interactive {
		r.banner()
	}
	var pending []string
	lineNo, startLine := 0, 0 // input lines read; the pending statement's first
	for {
		prompt := r.prompt()
		if len(pending) > 0 {
			prompt = strings.Repeat(".", len(prompt)-2) + "> "
		}
		line, err := src.ReadLine(prompt)
		switch {
		case errors.Is(err, errPromptInterrupt):
			pending = nil
			continue
		case err != nil:
			if r.quitRequested() {
				return ErrInterrupted
			}
			if len(pending) > 0 && !r.opts.Interactive {
				// The input ended inside a statement: report its error.
				r.evalAndPrint(ctx, strings.Join(pending, "\n"), startLine)
			}
			return r.result()
		}
		lineNo++
		if len(pending) == 0 {
			startLine = lineNo
			trimmed := strings.TrimSpace(line)
			if trimmed == "" {
				continue
			}
			if strings.HasPrefix(trimmed, ":") {
				src.SaveHistory(trimmed)
				r.setAt(lineNo, true)
				quit := r.command(ctx, trimmed)
				r.setAt(0, false)
				if quit {
					return r.result()
				}
				if r.quitRequested() {
					return ErrInterrupted
				}
				continue
			}
		}
		pending = append(pending, line)
		code := strings.Join(pending, "\n")
		if runtime.IsIncomplete(code) {
			continue
		}
		saveStatement(src, pending)
		pending = nil
		r.setAt(startLine, false)
		r.evalAndPrint(ctx, code, startLine)
		r.setAt(0, false)
		if r.quitRequested() {
			return ErrInterrupted
		}
	}
}

// saveStatement records a statement in the history as one line (joined
// with spaces) unless a comment would swallow the lines after it.
func saveStatement(src lineSource, lines []string) {
	for _, l := range lines[:len(lines)-1] {
		if strings.Contains(l, "--") {
			for _, l := range lines {
				src.SaveHistory(l)
			}
			return
		}
	}
	parts := make([]string, len(lines))
	for i, l := range lines {
		parts[i] = strings.TrimSpace(l)
	}
	src.SaveHistory(strings.Join(parts, " "))
}

func (r *REPL) result() error {
	if r.failed && !r.opts.Interactive {
		return ErrFailed
	}
	return nil
}

func (r *REPL) prompt() string {
	if t := r.s.Type(); t != "" {
		return t + "> "
	}
	return "loom> "
}

func (r *REPL) banner() {
	what := "a bare sandbox (no plugin; :load TYPE to load one)"
	if t := r.s.Type(); t != "" {
		what = "plugin type " + t
	}
	fmt.Fprintf(r.out, "Loom REPL on %s. :help lists commands, Ctrl-D exits.\n", what)
	if n := countErrors(r.rt.LoadErrors()); n > 0 {
		fmt.Fprintf(r.out, "%d plugin load error(s): :plugins shows them.\n", n)
	}
}

func countErrors(errs []*runtime.LoadError) int {
	n := 0
	for _, e := range errs {
		if !e.Warning {
			n++
		}
	}
	return n
}

// watchSignals cancels the running statement on SIGINT, and quits on
// SIGTERM (or SIGINT while a pipe is being read).
func (r *REPL) watchSignals(src lineSource) func() {
	if r.opts.Signals == nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case sig, ok := <-r.opts.Signals:
				if !ok {
					return
				}
				r.onSignal(sig, src)
			}
		}
	}()
	return func() { close(done) }
}

func (r *REPL) onSignal(sig os.Signal, src lineSource) {
	r.sigMu.Lock()
	term := sig != os.Interrupt
	if term {
		r.quit = true
	}
	if r.cancel != nil {
		cause := errCtrlC
		if term {
			cause = errTerminated
		}
		r.cancel(cause)
		r.sigMu.Unlock()
		return
	}
	// Idle: an interactive prompt reads Ctrl-C itself (raw mode), so a
	// stray SIGINT is ignored; a pipe has no prompt to return to.
	stop := term || !r.opts.Interactive
	if stop {
		r.quit = true
	}
	r.sigMu.Unlock()
	if stop {
		// Outside the lock: closing waits for the reader, which may be
		// checking quitRequested.
		src.Close()
	}
}

func (r *REPL) quitRequested() bool {
	r.sigMu.Lock()
	defer r.sigMu.Unlock()
	return r.quit
}

// begin derives the context of one statement: cancellable by Ctrl-C and
// bounded by :timeout.
func (r *REPL) begin(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	stopTimer := context.CancelFunc(func() {})
	if r.timeout > 0 {
		ctx, stopTimer = context.WithTimeoutCause(ctx, r.timeout, fmt.Errorf("timed out after %s (:timeout)", r.timeout))
	}
	r.sigMu.Lock()
	r.cancel = cancel
	r.sigMu.Unlock()
	return ctx, func() {
		r.sigMu.Lock()
		r.cancel = nil
		r.sigMu.Unlock()
		stopTimer()
		cancel(nil)
	}
}

// evalAndPrint runs one Lua statement or expression and prints its values.
// line is the statement's first input line: piped input names its errors
// stdin:LINE, counting every line read; at a terminal each statement is
// its own chunk, repl:1 onwards.
func (r *REPL) evalAndPrint(parent context.Context, code string, line int) {
	ctx, done := r.begin(parent)
	defer done()
	source := "stdin"
	if r.opts.Interactive {
		source, line = "repl", 1
	}
	r.mu.Lock()
	vals, err := r.s.EvalAt(ctx, code, source, line, r.logger)
	var b strings.Builder
	if err == nil {
		for _, v := range vals {
			b.WriteString(r.s.Redact(Format(v)))
			b.WriteByte('\n')
		}
	}
	r.mu.Unlock()
	if err != nil {
		r.fail(err)
		if ctx.Err() != nil {
			r.noteReset()
		}
		return
	}
	io.WriteString(r.out, b.String())
}

// setAt records the piped input line being run (0: none). A command's
// errors always get the line; a statement's Lua errors already name it
// (stdin:N or the plugin file), so only its other errors do.
func (r *REPL) setAt(line int, command bool) {
	r.at, r.atCommand = "", command
	if line > 0 && !r.opts.Interactive {
		r.at = fmt.Sprintf("stdin:%d: ", line)
	}
}

// fail reports an error and marks the session as having failed.
func (r *REPL) fail(err error) {
	r.failed = true
	var ee *runtime.EvalError
	if errors.As(err, &ee) {
		at := ""
		if r.atCommand {
			at = r.at
		}
		fmt.Fprintf(r.errw, "error: %s%s\n", at, ee.Message)
		if tb := strings.TrimSpace(ee.Traceback); tb != "" {
			for _, l := range strings.Split(tb, "\n") {
				l = strings.TrimSpace(l)
				if strings.HasSuffix(l, ":") {
					fmt.Fprintf(r.errw, "  %s\n", l)
				} else {
					fmt.Fprintf(r.errw, "    %s\n", l)
				}
			}
		}
		return
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "stdin:") {
		msg = r.at + msg
	}
	fmt.Fprintf(r.errw, "error: %s\n", msg)
}

func (r *REPL) noteReset() {
	fmt.Fprintln(r.errw, "note: the interrupted VM was replaced by a fresh one: globals set at the prompt are gone, the task is kept")
	r.mu.Lock()
	r.attachKit()
	r.mu.Unlock()
}

// commandHelp is the :help text, one command per line.
const commandHelp = `Commands:
  :help [TOPIC]       this list; with TOPIC, a command (:help run), a loom module or function
                      (:help loom.ssh, :help loom.ssh.connect, :help conn:exec), or a base table
                      (:help loom.Provider, :help fail); :help loom lists the modules
  :plugins            plugin types, their hooks, and load errors
  :load TYPE          make TYPE's plugin environment current (self is a fresh instance)
  :task FILE|JSON     set the current task (a file, or JSON on one line)
  :task               show the current task
  :set PATH VALUE     edit the task, e.g. :set config.ipaddresses.access_v4 127.0.0.1
                      (VALUE is JSON when it parses, else a string; array indexes count from 1)
  :run [HOOK]         call HOOK on the task; without HOOK, dispatch by taskName as loomd run does
  :call HOOK [JSON]   call HOOK of the loaded cluster driver, bucket provisioner, cloud
                      provider or Kloud provider with JSON as its input, as loomd call does
                      (in a pooled VM: globals set at the prompt are not seen)
  :result             show the last :run result (Lua sees it as _ and self.result)
  :test [PATTERN]     run the current plugin's *_test.lua files from disk, as loomd test does
                      (only the tests whose name matches the PATTERN regexp, when given)
  :fake http HOST [permit]  open an HTTP fake that loom.http reaches for HOST instead of the network
                      (in the global fake: fake:route("GET", "/v1/x", {json = {...}}), handlers too;
                      permit also lets plugins reach the fake's own 127.0.0.1 address)
  :fake ssh HOST      open an SSH fake host that loom.ssh reaches instead of HOST (in fake;
                      fake:on("uptime", "up 3 days"), fake:file(path)); :fake lists the fakes
  :reload             re-read the plugins from disk, keeping the task
  :timeout [D]        show or set the deadline of each statement and :run (e.g. 30s; 0 for none)
  :quit               leave (Ctrl-D does too)
Lua: type a statement or an expression (=expr works too); an incomplete one
continues on the next line. Ctrl-C interrupts a running statement or hook.`

// commandNames lists the commands, for completion.
func commandNames() []string {
	return []string{":call", ":fake", ":help", ":load", ":plugins", ":quit", ":reload", ":result", ":run", ":set", ":task", ":test", ":timeout"}
}

// command runs one :command; it reports whether to quit.
func (r *REPL) command(ctx context.Context, line string) bool {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	var err error
	switch name {
	case ":help", ":h", ":?":
		err = r.help.write(r.out, arg)
		if err != nil && r.liveHelp(arg) {
			err = nil
		}
	case ":plugins":
		r.cmdPlugins()
	case ":load":
		err = r.cmdLoad(arg)
	case ":task":
		err = r.cmdTask(arg)
	case ":set":
		err = r.cmdSet(arg)
	case ":run":
		err = r.cmdRun(ctx, arg)
	case ":call":
		err = r.cmdCall(ctx, arg)
	case ":fake":
		err = r.cmdFake(arg)
	case ":result":
		err = r.cmdResult()
	case ":test":
		err = r.cmdTest(ctx, arg)
	case ":reload":
		err = r.cmdReload(ctx)
	case ":timeout":
		err = r.cmdTimeout(arg)
	case ":quit", ":q", ":exit":
		return true
	default:
		err = fmt.Errorf("unknown command %s (:help lists them)", name)
	}
	if err != nil {
		r.fail(err)
	}
	return false
}

// checkType fails with the loaded types listed when name is not one.
func checkType(rt *runtime.Runtime, name string) error {
	if name == "" {
		return nil
	}
	var names []string
	for _, t := range rt.Types() {
		if t.Name == name {
			return nil
		}
		names = append(names, t.Name)
	}
	sort.Strings(names)
	loaded := strings.Join(names, ", ")
	if loaded == "" {
		loaded = "none"
	}
	msg := fmt.Sprintf("no plugin type %q (loaded: %s)", name, loaded)
	if n := countErrors(rt.LoadErrors()); n > 0 {
		msg += fmt.Sprintf("; %d plugin(s) failed to load, :plugins shows why", n)
	}
	return errors.New(msg)
}

func (r *REPL) typeInfo(name string) (runtime.TypeInfo, bool) {
	for _, t := range r.rt.Types() {
		if t.Name == name {
			return t, true
		}
	}
	return runtime.TypeInfo{}, false
}

func (r *REPL) cmdPlugins() {
	types := r.rt.Types()
	sort.Slice(types, func(i, j int) bool { return types[i].Name < types[j].Name })
	if len(types) == 0 {
		fmt.Fprintln(r.out, "no plugin types loaded")
	}
	cur := r.s.Type()
	for _, t := range types {
		mark := " "
		if t.Name == cur {
			mark = "*"
		}
		fmt.Fprintf(r.out, "%s %-12s %-9s hooks: %s", mark, t.Name, t.Family, strings.Join(t.Hooks, ", "))
		if len(t.Missing) > 0 {
			fmt.Fprintf(r.out, "  (missing: %s)", strings.Join(t.Missing, ", "))
		}
		fmt.Fprintf(r.out, "  [%s %s]\n", t.Plugin, t.Dir)
	}
	for _, e := range r.rt.LoadErrors() {
		kind := "error"
		if e.Warning {
			kind = "warning"
		}
		fmt.Fprintf(r.out, "%s: %v\n", kind, e)
	}
}

func (r *REPL) cmdLoad(name string) error {
	if name == "" {
		return errors.New("usage: :load TYPE (:plugins lists the types)")
	}
	if err := checkType(r.rt, name); err != nil {
		return err
	}
	ns, err := r.rt.NewSession(name)
	if err != nil {
		return err
	}
	r.mu.Lock()
	if t := r.s.Task(); t != nil {
		if err := ns.SetTask(t.Raw()); err != nil {
			r.mu.Unlock()
			ns.Close()
			return fmt.Errorf("carrying the task over to %s: %w", name, err)
		}
	}
	r.s.Close()
	r.s = ns
	r.attachKit()
	r.mu.Unlock()
	info, _ := r.typeInfo(name)
	fmt.Fprintf(r.out, "loaded %s (%s, plugin %s): hooks %s; self is a fresh instance\n",
		name, info.Family, info.Plugin, strings.Join(info.Hooks, ", "))
	return nil
}

func (r *REPL) cmdTask(arg string) error {
	if arg == "" {
		t := r.s.Task()
		if t == nil {
			fmt.Fprintln(r.out, "no task: set one with :task FILE or :task {json}")
			return nil
		}
		// Redacted as everything the REPL prints: the sensitive fields'
		// values (and credential-like keys) are not shown.
		raw := r.rt.RedactTask(t.Raw())
		var b bytes.Buffer
		if err := json.Indent(&b, raw, "", "  "); err != nil {
			b.Reset()
			b.Write(raw)
		}
		fmt.Fprintln(r.out, strings.TrimRight(b.String(), "\n"))
		return nil
	}
	data := []byte(arg)
	if !strings.HasPrefix(arg, "{") {
		var err error
		if data, err = os.ReadFile(arg); err != nil {
			return fmt.Errorf("reading the task: %w", err)
		}
	}
	r.mu.Lock()
	err := r.s.SetTask(data)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.describeTask()
	return nil
}

// describeTask prints what :run would do with the current task.
func (r *REPL) describeTask() {
	t := r.s.Task()
	types := t.Types()
	fmt.Fprintf(r.out, "task %s: %s -> %s %s", t.TaskID, t.TaskName, strings.Join(types, ", "), t.Hook())
	if cur := r.s.Type(); cur != "" && (len(types) != 1 || types[0] != cur) {
		fmt.Fprintf(r.out, " (:run dispatches it there; the session holds %s)", cur)
	}
	fmt.Fprintln(r.out)
}

func (r *REPL) cmdSet(arg string) error {
	path, val, ok := strings.Cut(arg, " ")
	val = strings.TrimSpace(val)
	if !ok || path == "" || val == "" {
		return errors.New("usage: :set PATH VALUE, e.g. :set config.ipaddresses.access_v4 127.0.0.1")
	}
	t := r.s.Task()
	if t == nil {
		return errors.New("no task to edit: set one with :task FILE or :task {json}")
	}
	var doc any
	if err := decodeJSON([]byte(t.Raw()), &doc); err != nil {
		return fmt.Errorf("reading the current task: %w", err)
	}
	var v any
	if err := decodeJSON([]byte(val), &v); err != nil {
		v = val
	}
	if err := r.checkSet(t, path, v); err != nil {
		return fmt.Errorf("not set: %w", err)
	}
	doc, err := setPath(doc, strings.Split(path, "."), v, "")
	if err != nil {
		return err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encoding the task: %w", err)
	}
	r.mu.Lock()
	err = r.s.SetTask(bytes.TrimSpace(b.Bytes()))
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("the edit would make the task invalid, so it was not applied: %w", err)
	}
	shown, _ := json.Marshal(v)
	fmt.Fprintf(r.out, "%s = %s\n", path, shown)
	return nil
}

// decodeJSON decodes one JSON value, keeping numbers exact, and rejects
// trailing data.
func decodeJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// setPath sets the value at a dotted path in a JSON document, creating
// objects on the way. Array elements are addressed from 1, as in Lua.
func setPath(node any, path []string, v any, at string) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	seg := path[0]
	if seg == "" {
		return nil, fmt.Errorf("empty segment in the path after %q", at)
	}
	here := strings.TrimPrefix(at+"."+seg, ".")
	switch n := node.(type) {
	case map[string]any:
		child, err := setPath(n[seg], path[1:], v, here)
		if err != nil {
			return nil, err
		}
		n[seg] = child
		return n, nil
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 1 || i > len(n)+1 {
			return nil, fmt.Errorf("%s is an array of %d: index it with 1..%d", strings.TrimPrefix(at, "."), len(n), len(n)+1)
		}
		if i == len(n)+1 {
			n = append(n, nil)
		}
		child, err := setPath(n[i-1], path[1:], v, here)
		if err != nil {
			return nil, err
		}
		n[i-1] = child
		return n, nil
	case nil:
		child, err := setPath(nil, path[1:], v, here)
		if err != nil {
			return nil, err
		}
		return map[string]any{seg: child}, nil
	default:
		return nil, fmt.Errorf("%s is a %T, not an object: cannot set %s in it", at, n, seg)
	}
}

func (r *REPL) cmdRun(parent context.Context, hook string) error {
	ctx, done := r.begin(parent)
	defer done()
	start := time.Now()
	r.mu.Lock()
	var res *runtime.Result
	var err error
	if k := r.opts.Kit; k != nil {
		// The hook runs while the fakes' Lua handlers are served.
		unmatched, herr := k.Run(ctx, func() { res, err = r.s.Run(ctx, hook, r.logger) })
		r.attachKit()
		for _, u := range unmatched {
			fmt.Fprintf(r.errw, "note: %s\n", u)
		}
		if herr != nil {
			fmt.Fprintf(r.errw, "note: %v\n", herr)
		}
	} else {
		res, err = r.s.Run(ctx, hook, r.logger)
	}
	r.mu.Unlock()
	took := time.Since(start)
	if err != nil {
		if ctx.Err() != nil {
			r.fail(err)
			r.noteReset()
			return nil
		}
		return err
	}
	r.last = res
	if err := r.printResult(res); err != nil {
		return err
	}
	what := hook
	if what == "" {
		t := r.s.Task()
		what = t.TaskName + " (" + strings.Join(t.Types(), ", ") + " " + t.Hook() + ")"
	}
	fmt.Fprintf(r.out, "-- %s: status %d in %s\n", what, res.Status, roundDuration(took))
	if res.Status != 0 {
		// The message, then the traceback or output the hook left, readable.
		detail := strings.TrimPrefix(strings.TrimPrefix(res.Stderr, res.Message), "\n")
		return &runtime.EvalError{Message: fmt.Sprintf("%s failed with status %d: %s", what, res.Status, res.Message), Traceback: detail}
	}
	return nil
}

// cmdCall runs one hook of the loaded type of a called kind.
func (r *REPL) cmdCall(parent context.Context, arg string) error {
	hook, input, _ := strings.Cut(arg, " ")
	typ := r.s.Type()
	if typ == "" {
		return fmt.Errorf("no plugin loaded: :load TYPE first (a cluster driver, bucket provisioner, cloud provider or Kloud provider)")
	}
	if hook == "" {
		hooks := ""
		if info, ok := r.typeInfo(typ); ok {
			if k := runtime.KindOf(info.Family); k != nil {
				hooks = ": " + strings.Join(k.HookNames(), ", ")
			}
		}
		return fmt.Errorf("usage: :call HOOK [JSON input]%s", hooks)
	}
	ctx, done := r.begin(parent)
	defer done()
	start := time.Now()
	res, err := r.rt.Call(ctx, &runtime.CallRequest{CallID: "repl", Type: typ, Hook: hook, Input: json.RawMessage(strings.TrimSpace(input))})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	fmt.Fprintf(r.out, "%s\n-- call %s: status %d in %s\n", b, hook, res.Status, roundDuration(time.Since(start)))
	if res.Status != 0 {
		return &runtime.EvalError{Message: fmt.Sprintf("%s %s failed (%s): %s", typ, hook, res.Error.Class, res.Message), Traceback: res.Stderr}
	}
	return nil
}

// roundDuration keeps a duration readable: 3ms, 1.25s, 420µs.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}

func (r *REPL) printResult(res *runtime.Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	fmt.Fprintf(r.out, "%s\n", b)
	return nil
}

func (r *REPL) cmdResult() error {
	if r.last == nil {
		fmt.Fprintln(r.out, "no result yet: :run a hook first")
		return nil
	}
	return r.printResult(r.last)
}

func (r *REPL) cmdReload(ctx context.Context) error {
	r.mu.Lock()
	rep, err := r.s.Reload(ctx)
	r.mu.Unlock()
	for _, e := range rep.Errors {
		if !e.Warning {
			fmt.Fprintf(r.errw, "load error: %v\n", e)
		}
	}
	if err != nil {
		return err
	}
	var parts []string
	for _, p := range []struct {
		what  string
		types []string
	}{{"added", rep.Added}, {"updated", rep.Updated}, {"removed", rep.Removed}, {"kept the previous version of", rep.Kept}} {
		if len(p.types) > 0 {
			parts = append(parts, p.what+" "+strings.Join(p.types, ", "))
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no plugin changed on disk")
	}
	fmt.Fprintf(r.out, "reloaded: %s; self is a fresh instance", strings.Join(parts, "; "))
	if t := r.s.Task(); t != nil {
		fmt.Fprintf(r.out, " with task %s", t.TaskID)
	}
	fmt.Fprintln(r.out)
	return nil
}

func (r *REPL) cmdTimeout(arg string) error {
	if arg == "" {
		if r.timeout == 0 {
			fmt.Fprintln(r.out, "timeout: none (hooks keep their plugin's own timeouts)")
		} else {
			fmt.Fprintf(r.out, "timeout: %s\n", r.timeout)
		}
		return nil
	}
	if arg == "off" || arg == "none" {
		arg = "0"
	}
	d, err := time.ParseDuration(arg)
	if err != nil && arg == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return fmt.Errorf("timeout %q: want a duration such as 30s or 2m, or 0 for none", arg)
	}
	r.timeout = d
	if d == 0 {
		fmt.Fprintln(r.out, "timeout: none")
	} else {
		fmt.Fprintf(r.out, "timeout: %s for each statement and :run (a plugin's shorter hook timeouts still apply)\n", d)
	}
	return nil
}

// pluginModules lists the Lua modules of the current plugin's folder, for
// completing require("...").
func (r *REPL) pluginModules() []string {
	info, ok := r.typeInfo(r.s.Type())
	if !ok || info.Dir == "" {
		return nil
	}
	var out []string
	_ = filepath.WalkDir(info.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".lua") {
			return nil
		}
		rel, err := filepath.Rel(info.Dir, p)
		if err != nil {
			return nil
		}
		mod := strings.TrimSuffix(filepath.ToSlash(rel), ".lua")
		mod = strings.TrimSuffix(mod, "/init")
		out = append(out, strings.ReplaceAll(mod, "/", "."))
		return nil
	})
	return out
}

// cmdTest runs the current plugin's test files with loomd test's runner:
// from disk, in fresh VMs (functions redefined at the prompt are not
// seen; :reload is not needed), with TAP progress on the REPL's output.
func (r *REPL) cmdTest(parent context.Context, arg string) error {
	typ := r.s.Type()
	if typ == "" {
		return errors.New("no plugin loaded: :load TYPE first, then :test runs that plugin's *_test.lua files")
	}
	info, ok := r.typeInfo(typ)
	if !ok || info.Dir == "" {
		return fmt.Errorf("plugin type %s has no folder on disk to find tests in", typ)
	}
	opts := plugtest.Options{Dirs: []string{info.Dir}, Out: r.out, Timeout: r.timeout}
	if arg != "" {
		re, err := regexp.Compile(arg)
		if err != nil {
			return fmt.Errorf(":test %s: the pattern is not a regexp: %w", arg, err)
		}
		opts.Match = re
	}
	ctx, done := r.begin(parent)
	defer done()
	rep, err := plugtest.Run(ctx, opts)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("tests interrupted: %v", context.Cause(ctx))
	}
	if !rep.OK() {
		return fmt.Errorf("%s: %d test(s) failed, %d passed (the failures are above)", info.Plugin, rep.Failed, rep.Passed)
	}
	if opts.Match != nil && rep.Passed+rep.Pending == 0 {
		return fmt.Errorf("no test name matches %q (names are the describe and it texts joined by spaces; the pattern is a case-sensitive regexp)", arg)
	}
	return nil
}

// cmdFake is :fake http HOST [permit], :fake ssh HOST, and :fake (list).
func (r *REPL) cmdFake(arg string) error {
	k := r.opts.Kit
	if k == nil {
		return errors.New("no test kit in this REPL")
	}
	f := strings.Fields(arg)
	if len(f) == 0 {
		list := k.Fakes()
		if len(list) == 0 {
			fmt.Fprintln(r.out, "no fakes: :fake http HOST or :fake ssh HOST opens one")
		}
		for _, l := range list {
			fmt.Fprintln(r.out, l)
		}
		return nil
	}
	if len(f) < 2 || (f[0] != "http" && f[0] != "ssh") || len(f) > 3 || (len(f) == 3 && (f[0] != "http" || f[2] != "permit")) {
		return errors.New("usage: :fake http HOST [permit] | :fake ssh HOST | :fake")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	L := r.s.State()
	var v lua.LValue
	var err error
	if f[0] == "http" {
		v, err = k.NewHTTPFake(L, f[1], len(f) == 3)
	} else {
		v, err = k.NewSSHFake(L, f[1])
	}
	if err != nil {
		return err
	}
	L.SetGlobal("fake", v)
	if f[0] == "http" {
		fmt.Fprintf(r.out, "fake: an HTTP fake for %s (loom.http reaches it instead of the network); it answers 404 until you add routes: fake:route(\"GET\", \"/path\", {json = {...}}) or a handler function(req)\n", f[1])
	} else {
		fmt.Fprintf(r.out, "fake: an SSH fake host for %s (loom.ssh reaches it instead of the network; any credentials log in); a command it has no answer for exits 127: fake:on(\"uptime\", \"up 3 days\")\n", f[1])
	}
	return nil
}

// taskStringKeys are the Coopr task keys that hold strings.
var taskStringKeys = map[string]bool{
	"taskId": true, "jobId": true, "clusterId": true, "nodeId": true, "taskName": true, "tenantId": true,
	"config.hostname": true, "config.providerid": true, "config.flavor": true, "config.image": true,
	"config.ipaddresses.access_v4": true, "config.ipaddresses.bind_v4": true, "config.ipaddresses.access_v6": true,
	"config.provider.providertype": true, "config.service.name": true, "config.service.action.type": true,
	"config.ssh-auth.user": true, "config.ssh-auth.password": true, "config.ssh-auth.identityfile": true,
}

// checkSet checks a :set value against the contract: the Coopr task's
// string keys, and a plugin field's type in its definition (a text or
// password field holds a string, a checkbox a boolean, a number field a
// number, a select one of its options); an unknown field is refused with
// a "did you mean".
func (r *REPL) checkSet(t *runtime.Task, path string, v any) error {
	quoteHint := func(what string) error {
		return fmt.Errorf("%s holds a string, and %s is a %s: quote it to set the string, :set %s \"%v\"", what, jsonText(v), jsonKind(v), path, v)
	}
	if taskStringKeys[path] {
		if _, ok := v.(string); !ok {
			return quoteHint(path)
		}
		return nil
	}
	var typ, field string
	switch {
	case strings.HasPrefix(path, "config.provider.provisioner."):
		typ, field = taskValue(t, "config", "provider", "providertype"), strings.TrimPrefix(path, "config.provider.provisioner.")
	case strings.HasPrefix(path, "config.service.action.fields."):
		typ, field = taskValue(t, "config", "service", "action", "type"), strings.TrimPrefix(path, "config.service.action.fields.")
	default:
		return nil
	}
	if typ == "" || strings.Contains(field, ".") {
		return nil
	}
	fields := r.rt.TypeFields(typ)
	if fields == nil {
		return nil
	}
	def, ok := fields[field]
	if !ok {
		var names []string
		for n := range fields {
			names = append(names, n)
		}
		sort.Strings(names)
		return fmt.Errorf("%s declares no field %q%s: its hooks never see it (fields: %s)", typ, field, runtime.DidYouMean(field, names), strings.Join(names, ", "))
	}
	what := fmt.Sprintf("%s's field %s (%s)", typ, field, orText(def.Type))
	switch def.Type {
	case "checkbox":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s holds true or false, and %s is a %s", what, jsonText(v), jsonKind(v))
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			return fmt.Errorf("%s holds a number, and %s is a %s", what, jsonText(v), jsonKind(v))
		}
	case "list":
	default:
		s, ok := v.(string)
		if !ok {
			return quoteHint(what)
		}
		if def.Type == "select" && len(def.Options) > 0 {
			for _, o := range def.Options {
				if fmt.Sprint(o) == s {
					return nil
				}
			}
			return fmt.Errorf("%s is one of %s, not %q", what, jsonText(def.Options), s)
		}
	}
	return nil
}

func orText(t string) string {
	if t == "" {
		return "text"
	}
	return t
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	case []any:
		return "list"
	}
	return "object"
}

// taskValue is the string at a path of the task, or "".
func taskValue(t *runtime.Task, path ...string) string {
	var doc any
	if decodeJSON(t.Raw(), &doc) != nil {
		return ""
	}
	for _, p := range path {
		m, ok := doc.(map[string]any)
		if !ok {
			return ""
		}
		doc = m[p]
	}
	s, _ := doc.(string)
	return s
}
