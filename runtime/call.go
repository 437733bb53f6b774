package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
)

// CallRequest asks a plugin type of a called kind (a cluster driver, a
// bucket provisioner ...) to run one hook with one input table.
//
//	{"callId": "c-1", "type": "gkelike", "hook": "create",
//	 "input": {"options": {"string": {"name": "prod"}}}}
type CallRequest struct {
	// CallID names the call in logs and results (a task id, for the queue).
	CallID string `json:"callId,omitempty"`
	// TenantID is the tenant whose work dir and VMs the call uses; empty
	// means the runtime's.
	TenantID string `json:"tenantId,omitempty"`
	Type     string `json:"type"`
	Hook     string `json:"hook"`
	// Kind is the type's kind. Optional: the type names it; a client
	// submitting to a daemon that does not load the type gives it.
	Kind Family `json:"kind,omitempty"`
	// Input is the hook's input table as a JSON object; absent means {}.
	Input json.RawMessage `json:"input,omitempty"`
	// Logger, when set, receives this call's plugin and runtime log lines
	// instead of the runtime's logger (a Go host's per-request logger).
	// It is not part of the JSON request.
	Logger *slog.Logger `json:"-"`
	// Secrets are values the host knows to be secret (a token it read
	// from a Kubernetes Secret for the input): like the kind's secret
	// keys, they never reach the call's messages, stderr or logs. Not
	// part of the JSON request.
	Secrets []string `json:"-"`
	// Host holds functions of the Go host program that this call's hook
	// may call as self.host.<name>(arg): an explicit opt-in, for this
	// call only, of what the host chooses to offer (machine-controller's
	// MachineUpdater, say). Not part of the JSON request.
	Host map[string]HostFunc `json:"-"`
}

// HostFunc is a function a Go host offers one call (CallRequest.Host).
// Lua calls it as self.host.<name>(arg): arg is the Lua value converted
// to Go as a hook's result is (tables become map[string]any or []any,
// nil is nil), and the returned value goes back converted as a hook's
// input is (through JSON). An error is raised into Lua as an error table
// {kind = "host", message = ...}: a plain error makes the call a retry if
// the hook does not catch it; a *CallError's class (and reason) become
// the table's class and reason, so a terminal error stays terminal.
// The function runs on the hook's goroutine; ctx is the hook's context
// (its timeout, the caller's cancellation).
type HostFunc func(ctx context.Context, arg any) (any, error)

// CallResult is what a called hook produced. Status is 0 on success and 1
// when the hook failed; Error then says how (class, reason, message). A
// partial hook (a Rancher create) may carry a Result and an Error.
type CallResult struct {
	CallID   string `json:"callId,omitempty"`
	TenantID string `json:"tenantId,omitempty"`
	Kind     Family `json:"kind"`
	Type     string `json:"type"`
	Hook     string `json:"hook"`
	Status   int    `json:"status"`
	// Result is the hook's return value, checked against the contract.
	Result any        `json:"result,omitempty"`
	Error  *CallError `json:"error,omitempty"`
	// Message repeats the error's message, for a person.
	Message string `json:"message,omitempty"`
	// Stderr holds the Lua traceback of a raised error.
	Stderr string `json:"stderr,omitempty"`
	// Defaulted is set when the plugin does not define the hook and the
	// host answered as the contract says.
	Defaulted  bool    `json:"defaulted,omitempty"`
	DurationMS float64 `json:"duration_ms"`
	Plugin     string  `json:"plugin,omitempty"`
}

// ErrInvalidCall is wrapped by every error about a call's request: a
// malformed body, a type that is not of a called kind, an unknown hook, an
// input the contract does not accept. Callers map it to exit 2 or a 400.
var ErrInvalidCall = errors.New("invalid call")

// ParseCall decodes and checks a call request's own fields. The type, hook
// and input are checked against the loaded plugins by CheckCall.
func ParseCall(data []byte) (*CallRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c CallRequest
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("%w: %s (want {\"type\": ..., \"hook\": ..., \"input\": {...}})", ErrInvalidCall, describeJSONError(data, err))
	}
	switch {
	case c.Type == "":
		return nil, fmt.Errorf("%w: missing \"type\" (the plugin type to call)", ErrInvalidCall)
	case c.Hook == "":
		return nil, fmt.Errorf("%w: missing \"hook\" (the hook of type %q to run)", ErrInvalidCall, c.Type)
	case c.TenantID != "" && !ValidTenant(c.TenantID):
		return nil, fmt.Errorf("%w: tenantId %q must be %s", ErrInvalidCall, c.TenantID, tenantRule)
	}
	return &c, nil
}

// resolved is a call checked against the loaded plugins.
type resolved struct {
	pt    *pluginType
	kind  *Kind
	hook  *Hook
	input map[string]any
}

// CheckCall checks a call against the loaded plugins without running it:
// the type exists and is of a called kind, the hook is one of the kind's,
// and the input matches the hook's input shape. Errors wrap
// ErrPluginNotFound or ErrInvalidCall.
func (rt *Runtime) CheckCall(c *CallRequest) error {
	_, err := rt.resolveCall(c)
	return err
}

func (rt *Runtime) resolveCall(c *CallRequest) (*resolved, error) {
	snap := rt.snap.Load()
	pt, ok := snap.types[c.Type]
	if !ok {
		for _, e := range snap.errors {
			if e.Type == c.Type && !e.Warning {
				return nil, fmt.Errorf("%w: type %q failed to load: %v", ErrPluginNotFound, c.Type, e)
			}
		}
		var have []string
		for n, t := range snap.types {
			if !t.kind().Coopr {
				have = append(have, n)
			}
		}
		sort.Strings(have)
		return nil, fmt.Errorf("%w: no plugin in %s declares type %q (loaded types of called kinds: %s)",
			ErrPluginNotFound, rt.opts.PluginsDir, c.Type, orNone(have))
	}
	k := pt.kind()
	if k.Coopr {
		return nil, fmt.Errorf("%w: %q is a %s type, whose hooks run from Coopr tasks: use loomd run TASK.json (or submit the task)",
			ErrInvalidCall, c.Type, k.Family)
	}
	h := k.Hook(c.Hook)
	if h == nil {
		return nil, fmt.Errorf("%w: %s has no hook %q (%s type %q; hooks: %s)", ErrInvalidCall, k.Family, c.Hook, k.Family, c.Type, strings.Join(k.HookNames(), ", "))
	}
	m, err := checkInput(h, c.Input)
	if err != nil {
		return nil, fmt.Errorf("%w: %s %s: %v (docs/kinds/%s.md)", ErrInvalidCall, c.Type, c.Hook, err, k.Family)
	}
	return &resolved{pt: pt, kind: k, hook: h, input: m}, nil
}

// Call runs one hook of a called kind and returns its result. A hook's
// failure (an error returned or raised, a timeout, a result that breaks
// the contract) is a CallResult with Status 1 and a nil error. The error
// is non-nil only when the call could not run: ErrPluginNotFound,
// ErrInvalidCall, ErrCancelled (ctx was cancelled; the call may be run
// again) or ErrClosed.
func (rt *Runtime) Call(ctx context.Context, c *CallRequest) (*CallResult, error) {
	if c.Logger != nil {
		return rt.callWith(ctx, c, c.Logger)
	}
	return rt.callWith(ctx, c, rt.logger)
}

func (rt *Runtime) callWith(ctx context.Context, c *CallRequest, logger *slog.Logger) (*CallResult, error) {
	return rt.callHeld(ctx, c, logger, nil)
}

// callHeld is callWith where a hook of held's type runs on held (a
// session's VM, inside its running code) instead of a pooled VM.
func (rt *Runtime) callHeld(ctx context.Context, c *CallRequest, logger *slog.Logger, held *vm) (*CallResult, error) {
	if rt.closed.Load() {
		return nil, ErrClosed
	}
	start := time.Now()
	r, err := rt.resolveCall(c)
	if err != nil {
		return nil, err
	}
	pt, h := r.pt, r.hook
	tenant := c.TenantID
	if tenant == "" {
		tenant = rt.opts.Tenant
	}
	res := &CallResult{CallID: c.CallID, TenantID: tenant, Kind: r.kind.Family, Type: pt.name, Hook: h.Name,
		Plugin: pt.name + "@" + pt.plugin.version}
	done := func() (*CallResult, error) {
		res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		return res, nil
	}
	fail := func(e *CallError) {
		res.Status = 1
		res.Error = e
		res.Message = e.Message
	}
	workDir := rt.workDirFor(pt, tenant)
	if err := pt.ensureWorkDir(tenant, workDir); err != nil {
		fail(&CallError{Class: ClassRetry, Message: fmt.Sprintf("creating the work dir for %s: %v (check --work-dir)", pt.name, err)})
		return done()
	}
	hooks, _, herr := pt.hookList(tenant)
	if herr != nil {
		fail(&CallError{Class: ClassRetry, Message: fmt.Sprintf("provisioning a VM for %s: %v", pt.name, herr)})
		return done()
	}
	if !contains(hooks, h.Name) {
		// The contract's answer for an absent optional hook (required
		// hooks are checked at load).
		res.Defaulted = true
		out, cerr := h.absent(r.input, func(n string) bool { return contains(hooks, n) })
		if cerr != nil {
			fail(cerr)
		} else {
			res.Result = out
		}
		return done()
	}
	timeout := rt.hookTimeout(pt, h.Name)
	hctx, cancel := rt.hookContext(ctx, timeout)
	defer cancel()
	v := held
	if v == nil || v.pt != pt || v.nested == 0 {
		var err error
		if v, err = pt.pool.get(tenant); err != nil {
			fail(&CallError{Class: ClassRetry, Message: fmt.Sprintf("starting a VM for %s: %v", pt.name, err)})
			return done()
		}
		defer pt.pool.put(v)
	} else {
		saved := v.saveState()
		defer v.restoreState(saved)
		v.newScope(c.CallID)
		defer v.endTask()
	}
	v.begin(hctx, c.CallID, h.Name, logger)
	defer v.end()
	L := v.L
	raw, _ := json.Marshal(r.input)
	inT, err := luaval.Decode(L, raw, luaval.Limits{})
	if err != nil {
		return nil, fmt.Errorf("%w: converting the input of %s %s to Lua: %v", ErrInvalidCall, pt.name, h.Name, err)
	}
	names := map[string]bool{}
	for n := range rt.snap.Load().sensitiveNames() {
		names[n] = true
	}
	for _, n := range r.kind.Secrets {
		names[n] = true
	}
	if t, ok := inT.(*lua.LTable); ok {
		v.registerNamed(names, t)
	}
	for _, s := range c.Secrets {
		v.secrets.Add(s)
	}
	inst := v.newCallInstance(c.CallID, h.Name)
	if len(c.Host) > 0 {
		inst.RawSetString("host", v.hostFuncs(hctx, c.Host))
	}
	L.Push(L.GetField(inst, h.Name))
	L.Push(inst)
	L.Push(inT)
	callErr := L.PCall(2, 2, nil)
	var ret, errv lua.LValue = lua.LNil, lua.LNil
	if callErr == nil {
		ret, errv = L.Get(-2), L.Get(-1)
		L.Pop(2)
	}
	switch {
	case callErr != nil && hctx.Err() != nil && ctx.Err() != nil:
		v.broken = true
		return nil, interrupted(fmt.Sprintf("call %s, %s %s", callLabel(c), pt.name, h.Name), callErr, context.Cause(ctx))
	case callErr != nil && hctx.Err() != nil:
		v.broken = true
		fail(&CallError{Class: ClassRetry, Reason: ReasonTimeout,
			Message: fmt.Sprintf("hook %s of %s timed out after %s (raise timeouts.%s in %s, or --timeout)", h.Name, pt.name, timeout, h.Name, pt.plugin.defFile)})
		_, trace, _ := describeLuaError(callErr)
		res.Stderr = trace
	case callErr != nil:
		v.broken = true
		msg, trace, obj := describeLuaError(callErr)
		var e *CallError
		if obj != nil {
			e = v.callError(r.kind, obj)
		} else {
			e = &CallError{Message: msg}
		}
		fail(r.kind.classify(h, e))
		res.Stderr = appendLine(msg, trace)
	case errv != lua.LNil && errv != lua.LFalse:
		var e *CallError
		if t, ok := errv.(*lua.LTable); ok {
			e = v.callError(r.kind, t)
		} else {
			e = &CallError{Message: L.ToStringMeta(errv).String()}
		}
		fail(r.kind.classify(h, e))
		if h.Partial && ret != lua.LNil {
			if out, err := v.checkResult(r, ret); err == nil {
				res.Result = out
			} else {
				res.Message += "; and the partial result is invalid: " + err.Error()
				res.Error.Message = res.Message
			}
		}
	case h.Result != nil:
		out, err := v.checkResult(r, ret)
		if err != nil {
			fail(&CallError{Class: ClassTerminal, Reason: ReasonInvalidResult,
				Message: fmt.Sprintf("%s %s returned an invalid result: %v (the %s contract: docs/kinds/%s.md)", pt.name, h.Name, err, r.kind.Family, r.kind.Family)})
		} else {
			res.Result = out
		}
	}
	if res.Error != nil {
		s := v.secrets
		res.Error.Message = s.String(res.Error.Message)
		res.Message = s.String(res.Message)
		res.Stderr = s.String(res.Stderr)
	}
	if logger.Enabled(ctx, slog.LevelDebug) {
		v.Logger().Debug("hook finished", "status", res.Status, "duration_ms", time.Since(start).Milliseconds())
	}
	return done()
}

func callLabel(c *CallRequest) string {
	if c.CallID == "" {
		return "(no callId)"
	}
	return c.CallID
}

// checkResult converts a hook's return value and checks it against the
// hook's result shape and extra rule.
func (v *vm) checkResult(r *resolved, ret lua.LValue) (any, error) {
	gv, err := luaval.ToGo(v.L, ret, luaval.Limits{MaxDepth: MaxTaskDepth})
	if err != nil {
		return nil, fmt.Errorf("result%v", prefixPath(err))
	}
	out, err := r.hook.Result.Check(gv, "result")
	if err != nil {
		return nil, err
	}
	if r.hook.verify != nil {
		if err := r.hook.verify(r.input, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func prefixPath(err error) string {
	s := err.Error()
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "[") {
		return s
	}
	return ": " + s
}

// callError reads an error table: {class=, reason=, message=, code=} or
// the kind's shorthand flags ({not_found = true}, {terminal = true,
// reason = ...}, {bucket_exists = true}). A binding's error table (kind,
// message ...) is a retry with its message.
func (v *vm) callError(k *Kind, t *lua.LTable) *CallError {
	e := &CallError{}
	str := func(key string) string {
		if s, ok := t.RawGetString(key).(lua.LString); ok {
			return string(s)
		}
		return ""
	}
	flag := func(key string) bool { return lua.LVAsBool(t.RawGetString(key)) }
	e.Message = str("message")
	if e.Message == "" {
		if s, ok := t.RawGetInt(1).(lua.LString); ok {
			e.Message = string(s)
		} else {
			e.Message = "the plugin returned an error table without a message"
		}
	}
	if n, ok := t.RawGetString("code").(lua.LNumber); ok {
		e.Code = int(n)
	}
	e.Class, e.Reason = str("class"), str("reason")
	names := make([]string, 0, len(k.Flags))
	for name := range k.Flags {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if flag(name) {
			f := k.Flags[name]
			if e.Class == "" {
				e.Class = f.Class
			}
			if e.Reason == "" {
				e.Reason = f.Reason
			}
		}
	}
	for _, c := range []string{ClassTerminal, ClassNotFound, ClassRetry} {
		if flag(c) {
			e.Class = c
			break
		}
	}
	return e
}

// newCallInstance builds self for a called hook: {env, classname} whose
// metatable is {__index = entry}. There is no task and no self.result:
// the hook returns its result.
func (v *vm) newCallInstance(callID, hook string) *lua.LTable {
	L := v.L
	inst := L.CreateTable(0, 2)
	env := v.vmEnv()
	env.RawSetString("hook", lua.LString(hook))
	env.RawSetString("call_id", lua.LString(callID))
	inst.RawSetString("env", env)
	if v.pt.def.Classname != "" {
		inst.RawSetString("classname", lua.LString(v.pt.def.Classname))
	}
	inst.Metatable = v.instMeta
	return inst
}

// hostFuncs is self.host for one call: each CallRequest.Host function as
// a Lua function.
func (v *vm) hostFuncs(ctx context.Context, funcs map[string]HostFunc) *lua.LTable {
	L := v.L
	t := L.CreateTable(0, len(funcs))
	for name, f := range funcs {
		name, f := name, f
		t.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			var arg any
			if L.GetTop() > 0 && L.Get(1) != lua.LNil {
				a, err := luaval.ToGo(L, L.Get(1), luaval.Limits{MaxDepth: MaxTaskDepth})
				if err != nil {
					L.ArgError(1, fmt.Sprintf("self.host.%s: %v", name, err))
				}
				arg = a
			}
			out, err := f(ctx, arg)
			if err != nil {
				e := &bindings.Error{Kind: "host", Message: fmt.Sprintf("self.host.%s: %v", name, err)}
				var ce *CallError
				if errors.As(err, &ce) {
					e.Message = fmt.Sprintf("self.host.%s: %s", name, ce.Message)
					e.Fields = map[string]any{"class": ce.Class}
					if ce.Reason != "" {
						e.Fields["reason"] = ce.Reason
					}
				}
				bindings.Raise(L, e)
			}
			if out == nil {
				L.Push(lua.LNil)
				return 1
			}
			raw, err := json.Marshal(out)
			if err != nil {
				L.RaiseError("self.host.%s: encoding its result: %v", name, err)
			}
			lv, err := luaval.Decode(L, raw, luaval.Limits{})
			if err != nil {
				L.RaiseError("self.host.%s: converting its result to Lua: %v", name, err)
			}
			L.Push(lv)
			return 1
		}))
	}
	return t
}

// vmEnv is self.env, built once per VM: the hook and the task or call id
// are set for each run. A VM serves one type, so one kind: a Coopr VM
// never sees call_id, nor a call VM task_id.
func (v *vm) vmEnv() *lua.LTable {
	if v.env == nil {
		L := v.L
		env := L.CreateTable(0, 8)
		env.RawSetString("work_dir", lua.LString(v.workDir))
		env.RawSetString("work_root", lua.LString(v.rt.workRoot))
		env.RawSetString("tenant", lua.LString(v.tenant))
		env.RawSetString("type", lua.LString(v.pt.name))
		env.RawSetString("family", lua.LString(string(v.pt.family)))
		env.RawSetString("plugin_dir", lua.LString(v.pt.plugin.dir))
		v.env = env
	}
	return v.env
}

// registerNamed registers, as field secrets, the values under any key in
// names anywhere in t (lists and maps under such a key: every value).
func (v *vm) registerNamed(names map[string]bool, t *lua.LTable) {
	var walk func(t *lua.LTable, depth int)
	walk = func(t *lua.LTable, depth int) {
		if depth > MaxTaskDepth {
			return
		}
		t.ForEach(func(k, val lua.LValue) {
			ks, isName := k.(lua.LString)
			sensitive := isName && names[string(ks)]
			switch x := val.(type) {
			case lua.LString:
				if sensitive {
					v.secrets.AddField(string(x))
				}
			case lua.LNumber:
				if sensitive {
					v.secrets.AddNumber(float64(x), true)
				}
			case *lua.LTable:
				if sensitive {
					v.registerAll(x, depth+1)
				}
				walk(x, depth+1)
			}
		})
	}
	walk(t, 0)
}
