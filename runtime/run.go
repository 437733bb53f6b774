package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/bindings/redact"
)

// Run parses a Coopr task and runs it. See RunTask.
func (rt *Runtime) Run(ctx context.Context, data []byte) (*Result, error) {
	task, err := ParseTask(data)
	if err != nil {
		return nil, err
	}
	return rt.RunTask(ctx, task)
}

// RunTask runs a task through its plugin's hook and returns Coopr's
// result. A plugin failure (an error raised, a non-zero status, a timeout)
// is a Result with a non-zero Status and a nil error. The error is non-nil
// only when the task could not be run at all: ErrPluginNotFound when no
// plugin serves its type, ErrCancelled when ctx was cancelled (the task
// may be run again), ErrClosed after Close.
//
// BOOTSTRAP runs every automator in config.automators in order, merging
// their results; it stops at the first that fails.
func (rt *Runtime) RunTask(ctx context.Context, task *Task) (*Result, error) {
	return rt.runTaskWith(ctx, task, rt.logger)
}

func (rt *Runtime) runTaskWith(ctx context.Context, task *Task, logger *slog.Logger) (*Result, error) {
	return rt.runTaskHeld(ctx, task, logger, nil)
}

// runTaskHeld is runTaskWith where the hooks of held's type run on held
// (a session's VM) instead of a pooled VM.
func (rt *Runtime) runTaskHeld(ctx context.Context, task *Task, logger *slog.Logger, held *vm) (*Result, error) {
	if rt.closed.Load() {
		return nil, ErrClosed
	}
	if task.call != nil {
		return rt.runCallTask(ctx, task, logger)
	}
	start := time.Now()
	snap := rt.snap.Load()
	names := task.Types()
	pts := make([]*pluginType, len(names))
	for i, name := range names {
		pt, ok := snap.types[name]
		if !ok {
			return nil, rt.notFound(snap, task, name)
		}
		if pt.family != task.Family() {
			return nil, fmt.Errorf("%w: task %s (%s) needs a %s type, but %q is a %s type (%s)",
				ErrPluginNotFound, task.label(), task.TaskName, task.Family(), name, pt.family, pt.plugin.defFile)
		}
		pts[i] = pt
	}
	res := &Result{TaskID: task.TaskID, TenantID: rt.tenantOf(task), ProvisionerID: rt.opts.ProvisionerID, WorkerID: rt.opts.WorkerID}
	if len(pts) == 0 {
		// A BOOTSTRAP with no automators: Coopr ran nothing and finished
		// the task (its result then lacked a status, which the server
		// refused with 400; Loom sends 0).
		res.Message = "BOOTSTRAP: config.automators is empty, nothing to bootstrap"
	}
	var plugins []string
	for _, pt := range pts {
		var h *vm
		if held != nil && held.pt == pt {
			h = held
		}
		r, err := rt.runHookWith(ctx, pt, task, task.Hook(), logger, h)
		if err != nil {
			return nil, err
		}
		plugins = append(plugins, pt.name+"@"+pt.plugin.version)
		mergeResult(res, r)
		if r.Status != 0 {
			break
		}
	}
	res.Plugin = strings.Join(plugins, ",")
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}

func (rt *Runtime) notFound(snap *snapshot, task *Task, name string) error {
	for _, e := range snap.errors {
		if e.Type == name && !e.Warning {
			return fmt.Errorf("%w: task %s needs %s type %q, which failed to load: %v", ErrPluginNotFound, task.label(), task.Family(), name, e)
		}
	}
	var have []string
	for n, pt := range snap.types {
		if pt.family == task.Family() {
			have = append(have, n)
		}
	}
	sort.Strings(have)
	return fmt.Errorf("%w: task %s (%s) needs %s type %q, but no plugin in %s declares it (loaded %s types: %s)",
		ErrPluginNotFound, task.label(), task.TaskName, task.Family(), name, rt.opts.PluginsDir, task.Family(), orNone(have))
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// mergeResult folds one automator's result into a BOOTSTRAP's.
func mergeResult(dst, src *Result) {
	if dst.Status == 0 {
		dst.Status = src.Status
	}
	join := func(a, b string) string {
		switch {
		case a == "":
			return b
		case b == "":
			return a
		}
		return a + "\n" + b
	}
	dst.Message = join(dst.Message, src.Message)
	dst.Stdout = join(dst.Stdout, src.Stdout)
	dst.Stderr = join(dst.Stderr, src.Stderr)
	if src.Hostname != "" {
		dst.Hostname = src.Hostname
	}
	dst.Result = deepMerge(dst.Result, src.Result)
	dst.IPAddresses = deepMerge(dst.IPAddresses, src.IPAddresses)
	dst.Extra = deepMerge(dst.Extra, src.Extra)
	if src.Error != nil {
		dst.Error = src.Error
	}
}

func deepMerge(dst, src map[string]any) map[string]any {
	if dst == nil {
		return src
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = deepMerge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

// hookContext is the context of a hook whose deadline is timeout.
func (rt *Runtime) hookContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if rt.opts.HookContext != nil {
		return rt.opts.HookContext(ctx, timeout)
	}
	return context.WithTimeout(ctx, timeout)
}

// hookTimeout is the hook's deadline: --timeout, else the definition's
// timeouts, else the default.
func (rt *Runtime) hookTimeout(pt *pluginType, hook string) time.Duration {
	if rt.opts.Timeout > 0 {
		return rt.opts.Timeout
	}
	return pt.def.timeout(pt.plugin.def, hook, rt.opts.DefaultTimeout)
}

// TaskTimeout is the longest the task may run: the sum of the deadlines
// of the hooks it runs (one per type; BOOTSTRAP runs several), or 0 when
// a type is not loaded. A supervisor running tasks out of process uses it
// as a backstop.
func (rt *Runtime) TaskTimeout(task *Task) time.Duration {
	snap := rt.snap.Load()
	var total time.Duration
	for _, name := range task.Types() {
		pt, ok := snap.types[name]
		if !ok {
			return 0
		}
		total += rt.hookTimeout(pt, task.Hook())
	}
	return total
}

// ensureWorkDir creates the type's work dir for a tenant, once per
// version and tenant, and again if it disappeared.
func (pt *pluginType) ensureWorkDir(tenant, dir string) error {
	if _, ok := pt.workDirs.Load(tenant); ok {
		if _, err := os.Stat(dir); err == nil {
			return nil
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	pt.workDirs.Store(tenant, true)
	return nil
}

// decodeTask converts the task JSON to Lua tables in L.
func decodeTask(L *lua.LState, task *Task) (lua.LValue, error) {
	return luaval.Decode(L, task.raw, luaval.Limits{})
}

// decodeTaskLazy is decodeTask for a hook: config.nodes, which holds every
// node of the cluster (Coopr's cluster tasks carry it) and which most hooks
// never read, is decoded when the hook first reads it (luaval.SetLazy), not
// for every task; the sensitive fields in it are registered as secrets
// then.
func (v *vm) decodeTaskLazy(task *Task, snap *snapshot) (lua.LValue, error) {
	n := task.route.nodes
	if n[0] <= 0 || n[1] <= n[0] {
		return decodeTask(v.L, task)
	}
	raw := task.raw
	stripped := make([]byte, 0, len(raw)-(n[1]-n[0])+4)
	stripped = append(stripped, raw[:n[0]]...)
	stripped = append(stripped, "null"...)
	stripped = append(stripped, raw[n[1]:]...)
	tv, err := luaval.Decode(v.L, stripped, luaval.Limits{})
	if err != nil {
		return tv, err
	}
	tt, _ := tv.(*lua.LTable)
	var config *lua.LTable
	if tt != nil {
		config, _ = tt.RawGetString("config").(*lua.LTable)
	}
	register := func(_ string, val lua.LValue) {
		if t, ok := val.(*lua.LTable); ok {
			if names := snap.sensitiveNames(); len(names) > 0 {
				v.registerNamed(names, t)
			}
		}
	}
	if config == nil || !luaval.SetLazy(v.L, config, "nodes", raw[n[0]:n[1]], luaval.Limits{}, register) {
		return decodeTask(v.L, task)
	}
	return tv, nil
}

// runHookWith is runHook with a caller's logger and, for the REPL, a VM
// the caller holds (nil means check one out of the pool).
func (rt *Runtime) runHookWith(ctx context.Context, pt *pluginType, task *Task, hook string, logger *slog.Logger, held *vm) (*Result, error) {
	start := time.Now()
	if held != nil && held.nested > 0 {
		// A hook run from inside the session's own running code (loomd
		// test): what that code's call holds comes back when the hook
		// ends.
		saved := held.saveState()
		defer held.restoreState(saved)
	}
	timeout := rt.hookTimeout(pt, hook)
	hctx, cancel := rt.hookContext(ctx, timeout)
	defer cancel()
	res := &Result{TaskID: task.TaskID}
	fail := func(status int, format string, args ...any) (*Result, error) {
		res.Status = status
		res.Message = fmt.Sprintf(format, args...)
		return res, nil
	}
	tenant := rt.tenantOf(task)
	workDir := rt.workDirFor(pt, tenant)
	if err := pt.ensureWorkDir(tenant, workDir); err != nil {
		return fail(1, "creating the work dir for %s: %v (check --work-dir)", pt.name, err)
	}
	v := held
	if v == nil {
		var err error
		if v, err = pt.pool.get(tenant); err != nil {
			return fail(1, "starting a VM for %s: %v", pt.name, err)
		}
		defer pt.pool.put(v)
	} else if v.tenant != tenant {
		return fail(1, "task %s is for tenant %q, but this session serves tenant %q (restart it with --tenant %s)", task.label(), tenant, v.tenant, tenant)
	}
	v.begin(hctx, task.TaskID, hook, logger)
	defer v.end()
	if held == nil || held.nested > 0 {
		// What the task opened ends with its hook. (A REPL session's
		// scope spans its prompt and hooks: the session ends it.)
		v.newScope(task.TaskID)
		defer v.endTask()
	}
	L := v.L

	snap := rt.snap.Load()
	taskT, err := v.decodeTaskLazy(task, snap)
	if err != nil {
		return fail(1, "converting task %s to Lua: %v", task.label(), err)
	}
	tt, _ := taskT.(*lua.LTable)
	v.registerTaskSecrets(snap, tt)
	v.grants = rt.grantsFor(snap, task, tenant, workDir, pt.plugin.dir, namedPaths(tt))
	input, missing := v.buildInput(task, tt)
	if missing != "" {
		return fail(1, "%s", missing)
	}
	inst := v.newInstance(tt, task, hook)
	fn := L.GetField(inst, hook)
	if _, ok := fn.(*lua.LFunction); !ok {
		return fail(1, "unimplemented %s in %s", hook, pt.def.Classname)
	}
	L.Push(fn)
	L.Push(inst)
	L.Push(input)
	callErr := L.PCall(2, 0, nil)

	collectErr := v.collectResult(inst.RawGetString("result"), res)
	switch {
	case callErr != nil && hctx.Err() != nil && ctx.Err() != nil:
		v.broken = true
		return nil, interrupted(fmt.Sprintf("task %s, %s %s", task.label(), pt.name, hook), callErr, context.Cause(ctx))
	case callErr != nil && hctx.Err() != nil:
		v.broken = true
		res.Status = 1
		res.Message = fmt.Sprintf("hook %s of %s timed out after %s (raise timeouts.%s in %s, or loomd run --timeout)",
			hook, pt.name, timeout, hook, pt.plugin.defFile)
		res.Error = map[string]any{"kind": "timeout", "message": res.Message}
		_, trace, _ := describeLuaError(callErr)
		res.Stderr = appendLine(res.Stderr, trace)
	case callErr != nil:
		v.broken = true
		msg, trace, obj := describeLuaError(callErr)
		// An error message is a summary: error(string.rep("e", 15e6))
		// must not carry 15 MB (twice, with stderr) through the daemon
		// and the record. The cut ends in "...", where redaction also
		// removes the start of a secret it may have split.
		msg = capMessage(msg)
		if res.Status == 0 {
			res.Status = 1
		}
		res.Message = msg
		if obj != nil {
			if ev, err := luaval.ToGo(L, obj, luaval.Limits{MaxDepth: 16, MaxNodes: 10000}); err == nil {
				res.Error, _ = ev.(map[string]any)
			} else {
				res.Error = map[string]any{"message": msg, "unconvertible": err.Error()}
			}
			// A command error carries the remote output: the thing a
			// failed task most needs to show (Coopr meant to, and never did).
			if kind, _ := obj.RawGetString("kind").(lua.LString); kind == "command" {
				if s, ok := obj.RawGetString("stdout").(lua.LString); ok && res.Stdout == "" {
					res.Stdout = string(s)
				}
				if s, ok := obj.RawGetString("stderr").(lua.LString); ok && res.Stderr == "" {
					res.Stderr = string(s)
				}
			}
		}
		res.Stderr = appendLine(res.Stderr, msg+"\n"+trace)
	case collectErr != nil:
		res.Status = 1
		res.Message = fmt.Sprintf("%s %s returned an invalid result: %v", pt.name, hook, collectErr)
	}
	v.redactResult(res)
	if logger.Enabled(ctx, slog.LevelDebug) {
		v.Logger().Debug("hook finished", "status", res.Status, "duration_ms", time.Since(start).Milliseconds())
	}
	return res, nil
}

// MaxErrorMessage caps the message of a hook's error in its result.
const MaxErrorMessage = 64 << 10

func capMessage(s string) string {
	if len(s) <= MaxErrorMessage {
		return s
	}
	cut := MaxErrorMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... [%d more bytes cut]", len(s)-cut)
}

func appendLine(a, b string) string {
	if a == "" {
		return b
	}
	if b == "" {
		return a
	}
	return a + "\n" + b
}

// redactResult removes the task's secrets from a result. Every secret
// leaves the human-readable parts (message, output, error table). Result
// data (result, ipaddresses, extra keys) is what the next tasks need: a
// provider legitimately hands on credentials in result["ssh-auth"], which
// is left alone; elsewhere only the values of sensitive definition fields
// are removed.
func (v *vm) redactResult(r *Result) {
	s := v.secrets
	if s.Empty() {
		return
	}
	r.Message = s.String(r.Message)
	r.Stdout = s.String(r.Stdout)
	r.Stderr = s.String(r.Stderr)
	r.Hostname = s.Data(r.Hostname)
	r.Error = redactMap(s, r.Error, false)
	// ssh-auth is the channel Coopr defined for handing credentials to the
	// node's next tasks (a static provider returns its sensitive default
	// password there), so it passes as it is.
	auth, hasAuth := r.Result["ssh-auth"]
	r.Result = redactMap(s, r.Result, true)
	if hasAuth {
		r.Result["ssh-auth"] = auth
	}
	r.IPAddresses = redactMap(s, r.IPAddresses, true)
	r.Extra = redactMap(s, r.Extra, true)
}

func redactMap(s *redact.Set, m map[string]any, fieldsOnly bool) map[string]any {
	if m == nil {
		return nil
	}
	out, _ := s.Value(m, fieldsOnly).(map[string]any)
	return out
}

// registerTaskSecrets registers, as field secrets, the values of every key
// anywhere in the task that some loaded definition declares sensitive (or
// of type password): an automator task carries its provider's fields, and
// the provider's api_token must be redacted there too. Numbers count.
func (v *vm) registerTaskSecrets(snap *snapshot, taskT *lua.LTable) {
	names := snap.sensitiveNames()
	if len(names) == 0 || taskT == nil {
		return
	}
	v.registerNamed(names, taskT)
}

// registerAll registers every string and number in t as a field secret.
func (v *vm) registerAll(t *lua.LTable, depth int) {
	if depth > MaxTaskDepth {
		return
	}
	t.ForEach(func(_, val lua.LValue) {
		switch x := val.(type) {
		case lua.LString:
			v.secrets.AddField(string(x))
		case lua.LNumber:
			v.secrets.AddNumber(float64(x), true)
		case *lua.LTable:
			v.registerAll(x, depth+1)
		}
	})
}

// newInstance builds self: {task, result, env, classname} whose metatable
// is {__index = entry}, the Lua twin of Ruby's new(env, task).
func (v *vm) newInstance(taskT *lua.LTable, task *Task, hook string) *lua.LTable {
	L := v.L
	inst := L.CreateTable(0, 4)
	inst.RawSetString("task", taskT)
	inst.RawSetString("result", v.newAutoviv())
	env := v.vmEnv()
	env.RawSetString("hook", lua.LString(hook))
	env.RawSetString("task_id", lua.LString(task.TaskID))
	inst.RawSetString("env", env)
	if v.pt.def.Classname != "" {
		inst.RawSetString("classname", lua.LString(v.pt.def.Classname))
	}
	inst.Metatable = v.instMeta
	return inst
}

// buildInput builds the hook's input map (Coopr §3.3), applies parameter
// defaults to fields and checks required sets. missing is a user-facing
// message when required fields are absent.
func (v *vm) buildInput(task *Task, taskT *lua.LTable) (input *lua.LTable, missing string) {
	L := v.L
	config, _ := taskT.RawGetString("config").(*lua.LTable)
	if config == nil {
		config = L.CreateTable(0, 0)
	}
	get := func(t *lua.LTable, keys ...string) lua.LValue {
		var cur lua.LValue = t
		for _, k := range keys {
			ct, ok := cur.(*lua.LTable)
			if !ok {
				return lua.LNil
			}
			cur = ct.RawGetString(k)
		}
		return cur
	}
	input = L.CreateTable(0, 4)
	var fieldsSrc lua.LValue = lua.LNil
	withFields := true
	switch hook := task.Hook(); {
	case hook == "create":
		input.RawSetString("flavor", config.RawGetString("flavor"))
		input.RawSetString("image", config.RawGetString("image"))
		input.RawSetString("hostname", config.RawGetString("hostname"))
		fieldsSrc = get(config, "provider", "provisioner")
	case task.Family() == Provider:
		input.RawSetString("providerid", config.RawGetString("providerid"))
		fieldsSrc = get(config, "provider", "provisioner")
	default:
		input.RawSetString("hostname", config.RawGetString("hostname"))
		ip := get(config, "ipaddresses", "access_v4")
		if ip == lua.LNil {
			ip = config.RawGetString("ipaddress")
		}
		input.RawSetString("ipaddress", ip)
		input.RawSetString("sshauth", config.RawGetString("ssh-auth"))
		if hook == "bootstrap" {
			withFields = false
		} else {
			fieldsSrc = get(config, "service", "action", "fields")
		}
	}
	if s, ok := get(config, "ssh-auth", "password").(lua.LString); ok {
		v.secrets.Add(string(s))
	}
	if !withFields {
		return input, ""
	}
	// A shallow copy, so defaults do not change self.task.
	fields := L.CreateTable(0, 8)
	if src, ok := fieldsSrc.(*lua.LTable); ok {
		src.ForEach(func(k, val lua.LValue) { fields.RawSet(k, val) })
	}
	// Required sets are checked where Coopr checked them: a provider's
	// at CREATE (the server refused a cluster create missing them) and a
	// service action's (Coopr's automators raised on a missing field),
	// never on CONFIRM or DELETE, which must be able to clean up a node
	// whatever its provider's configuration has become.
	checkRequired := task.Hook() == "create" || task.Family() == Automator
	missing = v.applyParameters(fields, checkRequired)
	input.RawSetString("fields", fields)
	return input, missing
}

// applyParameters fills declared defaults into absent fields, registers
// the values of sensitive fields as secrets, and, when checkRequired,
// checks the required sets.
func (v *vm) applyParameters(fields *lua.LTable, checkRequired bool) string {
	td := v.pt.def
	groups := make([]string, 0, len(td.Parameters))
	for g := range td.Parameters {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	// A field is present when the task has its key, even as "": Coopr's
	// server checked required sets by key (an admin may clear a field on
	// purpose), and its UI filled defaults only into absent fields.
	present := func(name string) bool { return fields.RawGetString(name) != lua.LNil }
	var problems []string
	for _, g := range groups {
		pg := td.Parameters[g]
		if pg == nil {
			continue
		}
		for name, f := range pg.Fields {
			if f == nil {
				continue
			}
			if f.Default != nil && !present(name) {
				fields.RawSetString(name, luaval.FromGo(v.L, f.Default))
			}
			if f.Sensitive || f.Type == "password" {
				switch x := fields.RawGetString(name).(type) {
				case lua.LString:
					v.secrets.AddField(string(x))
					if v.sensitive == nil {
						v.sensitive = map[string]string{}
					}
					v.sensitive[name] = string(x)
				case lua.LNumber:
					v.secrets.AddNumber(float64(x), true)
				}
			}
		}
		if len(pg.Required) == 0 || !checkRequired {
			continue
		}
		satisfied := false
		var best []string
		for _, set := range pg.Required {
			var miss []string
			for _, name := range set {
				if !present(name) {
					miss = append(miss, name)
				}
			}
			if len(miss) == 0 {
				satisfied = true
				break
			}
			if best == nil || len(miss) < len(best) {
				best = miss
			}
		}
		if !satisfied {
			alts := make([]string, len(pg.Required))
			for i, set := range pg.Required {
				alts[i] = "[" + strings.Join(set, ", ") + "]"
			}
			msg := fmt.Sprintf("missing required %s fields for %s: %s", g, v.pt.name, strings.Join(best, ", "))
			if len(alts) > 1 {
				msg += " (fill every field of one of: " + strings.Join(alts, " or ") + ")"
			}
			problems = append(problems, msg)
		}
	}
	return strings.Join(problems, "; ")
}
