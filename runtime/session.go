package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/bindings/redact"
)

// Session is an interactive hold on one VM, for the REPL: the same
// sandbox, bindings and plugin environment that tasks get, kept across
// statements so an author can inspect and poke at it.
//
// A Session is not safe for concurrent use.
type Session struct {
	rt   *Runtime
	pt   *pluginType
	v    *vm
	task *Task
	// hook is the thread nested hooks run on (HookThread), of hookOf.
	hook   *lua.LState
	hookOf *vm
	// extra are the modules Preload added, given to every VM the
	// session opens.
	extra map[string]func(L *lua.LState) lua.LValue
}

// Preload makes require(name) in the session's VM (the prompt's code, and
// hooks run from it) return what open builds, once per VM, before the
// bindings are looked at: the REPL's loom.test.
func (s *Session) Preload(name string, open func(L *lua.LState) lua.LValue) {
	if s.extra == nil {
		s.extra = map[string]func(L *lua.LState) lua.LValue{}
	}
	s.extra[name] = open
	s.v.extra = s.extra
}

// NewSession opens a session on a plugin type, or on a bare sandbox with
// no plugin when typeName is empty.
func (rt *Runtime) NewSession(typeName string) (*Session, error) {
	s := &Session{rt: rt}
	if err := s.open(typeName); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Session) open(typeName string) error {
	var pt *pluginType
	if typeName == "" {
		pt = &pluginType{name: "repl", family: Automator,
			plugin: &plugin{dir: s.rt.opts.PluginsDir, display: s.rt.opts.PluginsDir, def: &Definition{Name: "repl"}, protos: map[string]*lua.FunctionProto{}},
			def:    &TypeDef{Name: "repl"}}
	} else {
		var ok bool
		if pt, ok = s.rt.snap.Load().types[typeName]; !ok {
			return s.rt.notFound(s.rt.snap.Load(), &Task{TaskID: "(repl)", TaskName: "INSTALL"}, typeName)
		}
	}
	v, err := newSessionVM(s.rt, pt)
	if err != nil {
		return err
	}
	// What the prompt and the hooks it runs open lives until the session
	// loads another task or ends.
	v.newScope("(repl)")
	if s.v != nil {
		s.v.endTask()
		s.v.close()
	}
	v.extra = s.extra
	s.pt, s.v = pt, v
	s.refreshSelf()
	return nil
}

func newSessionVM(rt *Runtime, pt *pluginType) (*vm, error) {
	if pt.def.Classname == "" && pt.def.Main == "" && len(pt.plugin.top) == 0 {
		// A bare sandbox: no plugin code, an empty entry table.
		v := &vm{rt: rt, pt: pt, tenant: rt.opts.Tenant, loading: map[string]bool{}, secrets: redact.New()}
		v.L = newSandboxState(rt.limits, &v.coroutines)
		v.ctx = context.Background()
		v.logger = rt.logger
		v.workDir = rt.workDirFor(pt, rt.opts.Tenant)
		v.openGlobals()
		v.entry = v.L.CreateTable(0, 0)
		v.instMeta = v.L.CreateTable(0, 1)
		v.instMeta.RawSetString("__index", v.entry)
		// The bare sandbox has loom loaded, as a plugin would after
		// require("loom"): loom.<Tab> completes at once.
		if err := v.L.CallByParam(lua.P{Fn: v.L.GetGlobal("require"), NRet: 1, Protect: true}, lua.LString("loom")); err == nil {
			v.L.SetGlobal("loom", v.L.Get(-1))
			v.L.Pop(1)
		}
		return v, nil
	}
	return newVM(rt, pt, rt.opts.Tenant)
}

// Type is the session's plugin type name ("" for a bare sandbox).
func (s *Session) Type() string {
	if s.pt.def.Classname == "" && s.pt.name == "repl" {
		return ""
	}
	return s.pt.name
}

// State exposes the session's Lua state, for completion and printing.
func (s *Session) State() *lua.LState { return s.v.L }

// Task returns the current task, or nil.
func (s *Session) Task() *Task { return s.task }

// SetTask parses and sets the current task, and rebuilds self.
func (s *Session) SetTask(data []byte) error {
	t, err := ParseTask(data)
	if err != nil {
		return err
	}
	s.task = t
	s.v.newScope(t.TaskID)
	s.refreshSelf()
	return nil
}

// refreshSelf sets the global self to a fresh instance with the current
// task (an empty task table when none is set).
func (s *Session) refreshSelf() {
	L := s.v.L
	var taskT lua.LValue = L.CreateTable(0, 0)
	id := ""
	if s.task != nil {
		id = s.task.TaskID
		if tv, err := decodeTask(L, s.task); err == nil {
			taskT = tv
		}
	}
	tt, _ := taskT.(*lua.LTable)
	t := s.task
	if t == nil {
		t = &Task{TaskID: id}
	}
	L.G.Global.RawSetString("self", s.v.newInstance(tt, t, ""))
}

// Eval runs a chunk of Lua in the session's VM under ctx. An expression
// ("1+1", "self.task") returns its values; a statement returns none.
// Errors carry the message and a traceback.
func (s *Session) Eval(ctx context.Context, code string, logger *slog.Logger) ([]lua.LValue, error) {
	return s.EvalAt(ctx, code, "repl", 1, logger)
}

// EvalAt is Eval for code read from source starting at line firstLine:
// errors and tracebacks name "source:line" of the input ("stdin:12"),
// for a script piped into the REPL.
func (s *Session) EvalAt(ctx context.Context, code, source string, firstLine int, logger *slog.Logger) ([]lua.LValue, error) {
	proto, err := compileREPL(code, source, firstLine)
	if err != nil {
		return nil, err
	}
	v := s.v
	v.begin(ctx, s.taskID(), "repl", logger)
	defer v.end()
	L := v.L
	// What the REPL prints is redacted as a result is: the task's
	// sensitive values are secrets here too.
	if self, ok := L.GetGlobal("self").(*lua.LTable); ok {
		if tt, ok := self.RawGetString("task").(*lua.LTable); ok {
			v.registerTaskSecrets(s.rt.snap.Load(), tt)
		}
	}
	top := L.GetTop()
	L.Push(L.NewFunctionFromProto(proto))
	if err := L.PCall(0, lua.MultRet, nil); err != nil {
		if ctx.Err() != nil {
			s.recover()
			return nil, fmt.Errorf("interrupted: %v", context.Cause(ctx))
		}
		msg, trace, _ := describeLuaError(err)
		return nil, &EvalError{Message: v.secrets.String(msg), Traceback: trace}
	}
	n := L.GetTop() - top
	out := make([]lua.LValue, n)
	for i := 0; i < n; i++ {
		out[i] = L.Get(top + 1 + i)
	}
	L.SetTop(top)
	return out, nil
}

// Redact removes the secrets known to the session (the current task's
// sensitive values, credentials bindings registered in the last Eval or
// Run) from s: the REPL passes everything it prints through it.
func (s *Session) Redact(str string) string { return s.v.secrets.String(str) }

// recover replaces a VM whose statement was interrupted: its globals may
// be half-updated, exactly as after a hook timeout.
func (s *Session) recover() {
	if nv, err := newSessionVM(s.rt, s.pt); err == nil {
		nv.extra = s.extra
		s.v.close()
		s.v = nv
		s.refreshSelf()
	}
}

func (s *Session) taskID() string {
	if s.task == nil {
		return "repl"
	}
	return s.task.TaskID
}

// EvalError is a Lua error raised by a REPL statement.
type EvalError struct {
	Message   string
	Traceback string
}

func (e *EvalError) Error() string { return e.Message }

// IsIncomplete reports whether code is a prefix of a valid chunk (an open
// function, if, table or string), so the REPL should read another line.
func IsIncomplete(code string) bool {
	if _, err := compileREPL(code, "repl", 1); err == nil {
		return false
	}
	_, err := parse.Parse(bytes.NewReader([]byte(code)), "repl")
	if pe, ok := err.(*parse.Error); ok {
		return pe.Pos.Line == parse.EOF || pe.Token == "<eof>" || isUnfinishedString(pe.Message)
	}
	return false
}

func isUnfinishedString(msg string) bool {
	return bytes.Contains([]byte(msg), []byte("unterminated string")) || bytes.Contains([]byte(msg), []byte("unfinished"))
}

// compileREPL compiles "return <code>" when it parses, so bare expressions
// print their values, and the code as statements otherwise. A leading "="
// is Lua's classic REPL shorthand for return.
//
// A line that starts with a local declaration ("local x = 1", "local
// function f") declares a global instead: each line is its own chunk, so a
// local would vanish before the next prompt, which is never what an author
// debugging a plugin wants.
//
// The chunk is named source and its lines are numbered from firstLine
// (the code is compiled after firstLine-1 empty lines, so every line
// number the compiler records, nested functions included, is the input's).
func compileREPL(code, source string, firstLine int) (*lua.FunctionProto, error) {
	if len(code) > 0 && code[0] == '=' {
		code = code[1:]
	}
	pad := ""
	if firstLine > 1 {
		pad = strings.Repeat("\n", firstLine-1)
	}
	if g := globalizeLocal(code); g != code {
		if proto, lerr := compileChunk([]byte(pad+g), source); lerr == nil {
			return proto, nil
		}
	}
	if proto, lerr := compileChunk([]byte(pad+"return "+code), source); lerr == nil {
		return proto, nil
	}
	proto, lerr := compileChunk([]byte(pad+code), source)
	if lerr != nil {
		if lerr.Line > 0 {
			return nil, fmt.Errorf("%s:%d: %s", source, lerr.Line, lerr.Message)
		}
		return nil, fmt.Errorf("%s", lerr.Message)
	}
	return proto, nil
}

var (
	replLocalFunc = regexp.MustCompile(`^(\s*)local\s+function\s+`)
	replLocalVars = regexp.MustCompile(`^(\s*)local\s+([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*[A-Za-z_][A-Za-z0-9_]*)*)\s*(=|$|;)`)
)

// globalizeLocal rewrites a leading "local" declaration of a REPL line.
func globalizeLocal(code string) string {
	if m := replLocalFunc.FindStringSubmatchIndex(code); m != nil {
		return code[:m[3]] + "function " + code[m[1]:]
	}
	if m := replLocalVars.FindStringSubmatch(code); m != nil {
		rest := code[len(m[0]):]
		if m[3] == "=" {
			return m[1] + m[2] + " =" + rest
		}
		return m[1] + m[2] + " = nil" + m[3] + rest
	}
	return code
}

// Run calls a hook on the current task and returns its result. With an
// empty hook it dispatches by taskName exactly as loomd run does. A hook
// of the session's own type runs on the session's VM, so functions the
// author redefined at the prompt take effect.
func (s *Session) Run(ctx context.Context, hook string, logger *slog.Logger) (*Result, error) {
	if s.task == nil {
		return nil, fmt.Errorf("no task: set one with :task FILE or :task {json}")
	}
	if hook == "" {
		if types := s.task.Types(); len(types) != 1 || types[0] != s.pt.name {
			return s.rt.runTaskWith(ctx, s.task, logger)
		}
		hook = s.task.Hook()
	}
	if s.Type() == "" {
		return nil, fmt.Errorf("no plugin loaded: use :load TYPE first")
	}
	if !isCooprHook(hook) {
		return nil, fmt.Errorf("unknown hook %q (a task runs one of %s)", hook, strings.Join(append(append([]string{}, ProviderHooks...), AutomatorHooks...), ", "))
	}
	start := time.Now()
	res, err := s.rt.runHookWith(ctx, s.pt, s.task, hook, logger, s.v)
	if res != nil {
		// As runTaskWith does: loomd run's result has both.
		res.Plugin = s.pt.name + "@" + s.pt.plugin.version
		res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	}
	if s.v.broken {
		s.recover()
	} else {
		s.refreshSelf()
	}
	s.keepResult(res)
	return res, err
}

// keepResult makes the last run's result visible to Lua: as the global _,
// and as self.result of the fresh self, so an author can inspect what the
// hook returned (self.result.result.providerid) right after :run.
func (s *Session) keepResult(res *Result) {
	if res == nil {
		return
	}
	b, err := json.Marshal(res)
	if err != nil {
		return
	}
	L := s.v.L
	v, err := luaval.Decode(L, b, luaval.Limits{})
	if err != nil {
		return
	}
	L.SetGlobal("_", v)
	if self, ok := L.GetGlobal("self").(*lua.LTable); ok {
		self.RawSetString("result", v)
	}
}

// Reload re-reads the plugins from disk and reopens the session's type on
// its new version, keeping the task.
func (s *Session) Reload(ctx context.Context) (ReloadReport, error) {
	rep, err := s.rt.Reload(ctx)
	if err != nil {
		return rep, err
	}
	name := s.Type()
	for _, e := range rep.Errors {
		if name != "" && e.Type == name && !e.Warning {
			return rep, fmt.Errorf("reloading %s: %v (the previous version stays loaded)", name, e)
		}
	}
	if err := s.open(name); err != nil {
		return rep, err
	}
	return rep, nil
}

// Close releases what the session opened and its VM.
func (s *Session) Close() {
	s.v.endTask()
	s.v.close()
}

// WorkDir is the session's work dir.
func (s *Session) WorkDir() string { return s.v.workDir }

// Do runs fn with the session's Lua state under ctx, as Eval runs a
// statement: the VM's context, task id and logger are set for the call,
// so bindings required by the code fn runs work as in a hook. loomd test
// uses it to run a test file and its test functions. The state's stack
// is reset afterwards. Do is not for concurrent use.
func (s *Session) Do(ctx context.Context, logger *slog.Logger, fn func(L *lua.LState) error) error {
	v := s.v
	v.begin(ctx, s.taskID(), "test", logger)
	defer v.end()
	v.nested++
	defer func() { v.nested-- }()
	return fn(v.L)
}

// SetContext replaces the context of the code running in a Do call
// (a per-test deadline inside one Do), for the Lua state and the
// bindings alike.
func (s *Session) SetContext(ctx context.Context) {
	s.v.ctx = ctx
	s.v.L.SetContext(ctx)
}

// Modules is the session VM's table of loaded modules (what require
// returns for each name): loomd test's insulate blocks put it back as it
// was, so a module first required inside one is loaded afresh later.
func (s *Session) Modules() *lua.LTable { return s.v.loaded }

// TypeFields returns the parameter fields a loaded type declares (every
// group's), by name, or nil when no type has that name: the REPL's :set
// checks values against them.
func (rt *Runtime) TypeFields(name string) map[string]Field {
	pt, ok := rt.snap.Load().types[name]
	if !ok {
		return nil
	}
	out := map[string]Field{}
	for _, g := range pt.def.Parameters {
		if g == nil {
			continue
		}
		for n, f := range g.Fields {
			if f != nil {
				out[n] = *f
			}
		}
	}
	return out
}
