package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	lua "github.com/yuin/gopher-lua"
	luar "layeh.com/gopher-luar"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/redact"
)

// vm is one warm Lua state serving one plugin type. It is driven by one
// goroutine at a time (gopher-lua states are not goroutine-safe), checked
// out of its type's pool for one task, and implements bindings.Host for
// the bindings it opens.
type vm struct {
	rt    *Runtime
	pt    *pluginType
	L     *lua.LState
	entry *lua.LTable
	// instMeta is {__index = entry}, shared by every instance.
	instMeta *lua.LTable
	// autoviv is the metatable of auto-vivifying result tables.
	autoviv *lua.LTable
	loaded  *lua.LTable
	loading map[string]bool
	env     *lua.LTable // self.env, reused across the VM's tasks
	tenant  string      // the only tenant this VM serves

	// Per-task state, set by begin and cleared by end.
	ctx        context.Context
	logger     *slog.Logger // built on first use from baseLogger and logAttrs
	baseLogger *slog.Logger
	logAttrs   [3]string // task, plugin type, hook
	workDir    string
	grants     []bindings.Grant
	taskID     string
	secrets    *redact.Set
	coroutines coroutines
	// scope holds what the task opened beyond a call (bindings.Scoped);
	// nil between tasks.
	scope *bindings.Scope
	// sensitive holds the string values of the task's sensitive fields,
	// by name, for bindings that take a key by reference
	// (bindings.SensitiveFields).
	sensitive map[string]string

	uses   int
	broken bool // timed out, hit a limit or panicked: never reuse
	// top is the stack's height when begin ran: 0 for a pooled VM, the
	// running code's for a hook nested in a session's Do (loomd test).
	top int
	// nested counts the session's Do calls running: hooks run then are
	// nested in that code and keep its state (saveState).
	nested int

	// extra are modules a session adds (Session.Preload: the REPL's
	// loom.test), resolved before the bindings.
	extra map[string]func(L *lua.LState) lua.LValue

	// names caches funcName's answers for the current task (a pcall loop
	// builds a traceback per caught error); begin clears it.
	names map[*lua.LFunction]string
}

// moduleName is what require accepts: dotted Lua identifiers.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// newVM builds a sandboxed state for pt serving tenant and provisions
// it: runs the plugin's chunks and captures the entry table.
func newVM(rt *Runtime, pt *pluginType, tenant string) (*vm, error) {
	v := &vm{rt: rt, pt: pt, tenant: tenant, loading: make(map[string]bool), secrets: redact.New()}
	v.L = newSandboxState(rt.limits, &v.coroutines)
	v.L.Options.InstructionHook = rt.opts.InstructionHook
	v.ctx = context.Background()
	v.logger = rt.logger.With("plugin", pt.name)
	v.workDir = rt.workDirFor(pt, tenant)
	L := v.L
	v.openGlobals()

	// Load-time code runs under a deadline too: a plugin that loops at its
	// top level must not hang Load or a hot reload.
	ctx, cancel := context.WithTimeout(context.Background(), rt.opts.LoadTimeout)
	defer cancel()
	L.SetContext(ctx)
	v.newScope("(loading " + pt.name + ")")
	err := v.provision()
	v.endTask()
	L.RemoveContext()
	if err != nil {
		L.Close()
		if ctx.Err() != nil {
			return nil, &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: pt.plugin.defFile,
				Message: fmt.Sprintf("loading took longer than %s: does a top-level statement loop forever?", rt.opts.LoadTimeout)}
		}
		return nil, err
	}
	v.instMeta = L.CreateTable(0, 1)
	v.instMeta.RawSetString("__index", v.entry)
	return v, nil
}

// openGlobals sets what every plugin VM has before plugin code runs:
// require, log, print (a log.info line) and the result metatable.
func (v *vm) openGlobals() {
	L := v.L
	g := L.G.Global
	v.L.Options.FuncName = v.funcName
	v.loaded = L.CreateTable(0, 8)
	g.RawSetString("require", L.NewFunction(v.require))
	logT := v.openBinding("log")
	g.RawSetString("log", logT)
	if t, ok := logT.(*lua.LTable); ok {
		info := t.RawGetString("info")
		g.RawSetString("print", L.NewFunction(func(L *lua.LState) int {
			parts := make([]string, L.GetTop())
			for i := range parts {
				parts[i] = L.ToStringMeta(L.Get(i + 1)).String()
			}
			L.Push(info)
			L.Push(lua.LString(strings.Join(parts, "\t")))
			L.Call(1, 0)
			return 0
		}))
	}
	v.autoviv = newAutovivMeta(L)
}

// provision runs the plugin's code and finds its entry table.
func (v *vm) provision() error {
	L := v.L
	p, td := v.pt.plugin, v.pt.def
	if main := td.main(p.def); main != "" {
		proto := p.protos[strings.TrimPrefix(strings.ReplaceAll(main, "\\", "/"), "./")]
		L.Push(L.NewFunctionFromProto(proto))
		if err := v.pcall(0, 1); err != nil {
			return v.loadError(err, main)
		}
		ret := L.Get(-1)
		L.Pop(1)
		t, ok := ret.(*lua.LTable)
		if !ok {
			return &LoadError{Plugin: p.def.Name, Type: v.pt.name, File: displayPath(p, main),
				Message: fmt.Sprintf("main file must return the entry table, returned %s", ret.Type())}
		}
		v.entry = t
		if td.Classname != "" {
			L.G.Global.RawSetString(td.Classname, t)
		}
		return nil
	}
	for _, f := range p.top {
		L.Push(L.NewFunctionFromProto(p.protos[f]))
		if err := v.pcall(0, 0); err != nil {
			return v.loadError(err, f)
		}
	}
	t, ok := L.G.Global.RawGetString(td.Classname).(*lua.LTable)
	if !ok {
		return &LoadError{Plugin: p.def.Name, Type: v.pt.name, File: p.defFile,
			Message: fmt.Sprintf("classname %q is not a global table after loading %s; define it, e.g. %s = require(\"loom\").%s:extend(%q)",
				td.Classname, strings.Join(p.top, ", "), td.Classname, v.pt.kind().Base, td.Classname)}
	}
	v.entry = t
	return nil
}

func (v *vm) loadError(err error, file string) *LoadError {
	msg, _, _ := describeLuaError(err)
	le := &LoadError{Plugin: v.pt.plugin.def.Name, Type: v.pt.name, File: displayPath(v.pt.plugin, file), Message: "running at load time: " + msg}
	if f, line := luaLocation(msg); f != "" {
		le.File, le.Line = f, line
		le.Message = "running at load time: " + strings.TrimSpace(strings.TrimPrefix(msg, fmt.Sprintf("%s:%d:", f, line)))
	}
	return le
}

func displayPath(p *plugin, rel string) string {
	return strings.TrimSuffix(p.display, "/") + "/" + rel
}

// pcall calls the function below nargs arguments on the stack, under the
// VM's current context.
func (v *vm) pcall(nargs, nret int) error {
	return v.L.PCall(nargs, nret, nil)
}

// require resolves, in order: Loom bindings ("loom.ssh"), the embedded
// stdlib ("loom"), then Lua files inside the plugin folder ("lib.util" is
// lib/util.lua or lib/util/init.lua). Nothing else is reachable.
func (v *vm) require(L *lua.LState) int {
	name := L.CheckString(1)
	if !moduleName.MatchString(name) {
		L.ArgError(1, fmt.Sprintf("invalid module name %q: use dotted Lua names such as \"lib.util\"", name))
	}
	if val := v.loaded.RawGetString(name); val != lua.LNil {
		L.Push(val)
		return 1
	}
	if v.loading[name] {
		L.RaiseError("require loop: module %q is already being loaded", name)
	}
	v.loading[name] = true
	defer delete(v.loading, name)

	var val lua.LValue
	switch {
	case v.extra[name] != nil:
		val = v.extra[name](L)
	case strings.HasPrefix(name, "loom.") && v.hasBinding(strings.TrimPrefix(name, "loom.")):
		val = v.openBinding(strings.TrimPrefix(name, "loom."))
	case v.rt.stdlib[name] != nil:
		val = v.runChunk(L, v.rt.stdlib[name])
	default:
		rel := strings.ReplaceAll(name, ".", "/")
		proto := v.pt.plugin.protos[rel+".lua"]
		if proto == nil {
			proto = v.pt.plugin.protos[rel+"/init.lua"]
		}
		if proto == nil {
			L.RaiseError("module %q not found: not a Loom module (%s) and no %s.lua in the plugin folder %s",
				name, strings.Join(v.rt.moduleNames(), ", "), rel, v.pt.plugin.display)
		}
		val = v.runChunk(L, proto)
	}
	if val == lua.LNil {
		val = lua.LTrue
	}
	v.loaded.RawSetString(name, val)
	L.Push(val)
	return 1
}

func (v *vm) runChunk(L *lua.LState, proto *lua.FunctionProto) lua.LValue {
	L.Push(L.NewFunctionFromProto(proto))
	L.Call(0, 1)
	val := L.Get(-1)
	L.Pop(1)
	return val
}

func (v *vm) hasBinding(name string) bool {
	if name == "host" {
		return v.rt.opts.Expose != nil
	}
	_, ok := v.rt.bindings.Lookup(name)
	return ok
}

// openBinding opens a binding's table once per VM.
func (v *vm) openBinding(name string) lua.LValue {
	key := "loom." + name
	if val := v.loaded.RawGetString(key); val != lua.LNil {
		return val
	}
	var val lua.LValue = lua.LNil
	if name == "host" {
		val = v.openHostValues()
	} else if b, ok := v.rt.bindings.Lookup(name); ok {
		val = b.Open(v.L, v)
	}
	v.loaded.RawSetString(key, val)
	return val
}

// openHostValues exposes the embedder's Go values through gopher-luar:
// an explicit opt-in (Options.Expose) for trusted host programs.
func (v *vm) openHostValues() lua.LValue {
	t := v.L.CreateTable(0, len(v.rt.opts.Expose))
	for k, val := range v.rt.opts.Expose {
		t.RawSetString(k, luar.New(v.L, val))
	}
	return t
}

// Context implements bindings.Host.
func (v *vm) Context() context.Context { return v.ctx }

// Logger implements bindings.Host. The task's logger is built on first
// use: most hooks of a busy daemon never log.
func (v *vm) Logger() *slog.Logger {
	if v.logger == nil {
		// Redacted, then counted against the task's log budget.
		h := newBudgetHandler(v.baseLogger.Handler(), MaxTaskLog)
		v.logger = slog.New(&redactHandler{h: h, secrets: v.secrets}).With(
			"task", v.logAttrs[0], "plugin", v.logAttrs[1], "hook", v.logAttrs[2])
	}
	return v.logger
}

// PluginDir implements bindings.Host.
func (v *vm) PluginDir() string { return v.pt.plugin.dir }

// WorkDir implements bindings.Host.
func (v *vm) WorkDir() string { return v.workDir }

// Grants implements bindings.Host: the other plugins' resources the
// running task names.
func (v *vm) Grants() []bindings.Grant { return v.grants }

// Permissions implements bindings.Host.
func (v *vm) Permissions() bindings.Permissions {
	p := v.pt.def.permissions(v.pt.plugin.def)
	if len(p.HTTP) > 0 && v.rt.opts.PermitHTTP != nil {
		if extra := v.rt.opts.PermitHTTP(); len(extra) > 0 {
			return bindings.Permissions{HTTP: append(append([]string(nil), p.HTTP...), extra...)}
		}
	}
	return bindings.Permissions{HTTP: p.HTTP}
}

// AddSecret implements bindings.Host.
func (v *vm) AddSecret(s string) { v.secrets.Add(s) }

// SensitiveField implements bindings.SensitiveFields: the value of a
// field the plugin's definition declares sensitive (or of type password),
// as the running task gives it.
func (v *vm) SensitiveField(name string) (string, bool) {
	s, ok := v.sensitive[name]
	return s, ok
}

// Redact implements bindings.Host.
func (v *vm) Redact(s string) string { return v.secrets.String(s) }

// TaskID implements bindings.Host.
func (v *vm) TaskID() string { return v.taskID }

// begin prepares the VM for one task: context, logger, secrets.
func (v *vm) begin(ctx context.Context, taskID, hook string, logger *slog.Logger) {
	v.uses++
	v.ctx = ctx
	v.taskID = taskID
	v.coroutines.n = 0
	clear(v.names)
	v.secrets = redact.New()
	clear(v.sensitive)
	v.logger = nil
	v.baseLogger = logger
	v.logAttrs = [3]string{taskID, v.pt.name, hook}
	v.top = v.L.GetTop()
	v.L.SetContext(ctx)
}

// end detaches the task's context. The state's stack must be empty
// again, or the VM is not reused.
func (v *vm) end() {
	v.L.RemoveContext()
	v.ctx = context.Background()
	v.grants = nil
	clear(v.sensitive)
	if v.L.GetTop() != v.top {
		v.L.SetTop(v.top)
	}
}

func (v *vm) close() { v.L.Close() }
