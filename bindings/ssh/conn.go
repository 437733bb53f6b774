package ssh

import (
	"errors"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// connTypeName names the metatable of connection userdata.
const connTypeName = "loom.ssh.conn"

// luaConn is what ssh.connect returns: a handle on a pool key. The SSH
// connection itself lives in the pool and is borrowed per call, so a
// handle stays valid across reconnects, and conn:close() only closes the
// underlying connection for private (reuse=false) handles.
type luaConn struct {
	m      *module
	cfg    *connConfig
	key    string
	closed bool
	// scope is the task that opened the handle (nil without one): the
	// handle ends with it. release gives back a private connection.
	scope   *bindings.Scope
	release func()
}

func registerConnType(L *lua.LState) {
	mt := L.NewTypeMetatable(connTypeName)
	if mt.RawGetString("__index") != lua.LNil {
		return
	}
	methods := L.NewTable()
	L.SetFuncs(methods, map[string]lua.LGFunction{
		"exec":       connExec,
		"upload":     connUpload,
		"upload_dir": connUploadDir,
		"download":   connDownload,
		"write":      connWrite,
		"read":       connRead,
		"close":      connClose,
	})
	mt.RawSetString("__index", methods)
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		c := checkConn(L, 1, "tostring", true)
		L.Push(lua.LString("ssh.conn(" + c.cfg.String() + ")"))
		return 1
	}))
	mt.RawSetString("__metatable", lua.LString("locked"))
}

// checkConn returns the connection receiver or raises.
func checkConn(L *lua.LState, n int, method string, allowClosed bool) *luaConn {
	ud, ok := L.Get(n).(*lua.LUserData)
	var c *luaConn
	if ok {
		c, ok = ud.Value.(*luaConn)
	}
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "conn:%s: called without a connection (use conn:%s(...), not conn.%s(...))", method, method, method))
	}
	if c.closed && !allowClosed {
		bindings.Raise(L, bindings.Errorf("config", "conn:%s: %s is closed", method, c.cfg))
	}
	if c.scope.Closed() && !allowClosed {
		bindings.Raise(L, bindings.Errorf("config", "conn:%s: %s was opened by task %s, which has ended: a handle lives as long as the task that opened it; connect again (the pool reuses a shared connection)", method, c.cfg, c.scope.Task()))
	}
	return c
}

// connect is ssh.connect{...}.
func (m *module) connect(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "ssh.connect: want a table of options, got %s", L.Get(1).Type()))
	}
	cfg, err := m.parseConnConfig(t, "ssh.connect", 0)
	if err != nil {
		bindings.Raise(L, err)
	}
	return m.open(L, cfg)
}

// open makes the handle and proves the connection works (dial or reuse),
// so that bad credentials or host keys fail here and not at first use.
func (m *module) open(L *lua.LState, cfg *connConfig) int {
	key := cfg.poolKey(m.b.pool.salt)
	if cfg.private {
		key += " private=" + randToken()
	}
	for cc := cfg; cc != nil; cc = cc.jump {
		if cc.hostKey.policy == policyInsecure {
			m.h.Logger().Warn("ssh: host key checking is DISABLED for this connection (insecure policy)", "conn", cc.String())
		}
	}
	scope, release, err := m.hold(cfg, key)
	if err != nil {
		bindings.Raise(L, err)
	}
	pc, err := m.b.pool.acquire(m.h.Context(), cfg, key, m.b, m.h.Logger())
	if err != nil {
		if release != nil {
			release()
		}
		bindings.Raise(L, err)
	}
	m.b.pool.release(pc)
	ud := L.NewUserData()
	ud.Value = &luaConn{m: m, cfg: cfg, key: key, scope: scope, release: release}
	L.SetMetatable(ud, L.GetTypeMetatable(connTypeName))
	L.Push(ud)
	return 1
}

// connClose is conn:close(). Pooled connections stay in the pool for the
// next hook; a private one is closed.
func connClose(L *lua.LState) int {
	c := checkConn(L, 1, "close", true)
	switch {
	case c.closed:
	case c.release != nil:
		c.release() // closes the connection, and the task holds one less
	case c.cfg.private:
		c.m.b.pool.closeKey(c.key)
	}
	c.closed = true
	return 0
}

// fromInput is ssh.from_input(input, task, opts): a connection built from
// an automator hook's input (ipaddress, sshauth) and the task's pinned
// host keys (config.ssh_host_keys), as Coopr hands them over.
func (m *module) fromInput(L *lua.LState) int {
	input := optTable(L, 1, "ssh.from_input")
	task := optTable(L, 2, "ssh.from_input")
	opts := optTable(L, 3, "ssh.from_input")
	if input == nil {
		bindings.Raise(L, bindings.Errorf("config", "ssh.from_input: the hook input is required"))
	}
	var config *lua.LTable
	if task != nil {
		config, _ = task.RawGetString("config").(*lua.LTable)
	}
	get := func(t *lua.LTable, path ...string) lua.LValue {
		var v lua.LValue = t
		for _, k := range path {
			tt, ok := v.(*lua.LTable)
			if !ok || tt == nil {
				return lua.LNil
			}
			v = tt.RawGetString(k)
		}
		return v
	}
	str := func(v lua.LValue) string {
		if s, ok := v.(lua.LString); ok {
			return string(s)
		}
		return ""
	}

	t := L.NewTable()
	host := str(get(input, "ipaddress"))
	if host == "" {
		host = str(get(config, "ipaddresses", "access_v4"))
	}
	if host == "" {
		host = str(get(config, "ipaddress")) // old Coopr fixtures
	}
	if host == "" {
		bindings.Raise(L, bindings.Errorf("config", "ssh.from_input: no address: input.ipaddress and task.config.ipaddresses.access_v4 are empty"))
	}
	t.RawSetString("host", lua.LString(host))

	auth, _ := get(input, "sshauth").(*lua.LTable)
	if auth == nil {
		auth, _ = get(config, "ssh-auth").(*lua.LTable)
	}
	user := "root"
	if u := str(get(config, "sshuser")); u != "" {
		user = u
	}
	if auth != nil {
		// Coopr's set_credentials: any key naming a password or an
		// identity file counts.
		auth.ForEach(func(k, v lua.LValue) {
			name := strings.ToLower(k.String())
			if name == "port" {
				// A provider may hand out a non-standard port (a static
				// inventory host on 2222): a number, or a string of one.
				switch p := v.(type) {
				case lua.LNumber:
					t.RawSetString("port", p)
				case lua.LString:
					if n, err := strconv.Atoi(strings.TrimSpace(string(p))); err == nil {
						t.RawSetString("port", lua.LNumber(n))
					}
				}
				return
			}
			val, ok := v.(lua.LString)
			if !ok || val == "" {
				return
			}
			switch {
			case name == "user":
				user = string(val)
			case strings.Contains(name, "password"):
				m.addSecret(string(val))
				t.RawSetString("password", val)
			case strings.Contains(name, "identityfile"):
				t.RawSetString("key_file", val)
			}
		})
	}
	t.RawSetString("user", lua.LString(user))

	var pins []string
	if keys, ok := get(config, "ssh_host_keys").(*lua.LTable); ok {
		var err error
		if pins, err = pinsFromMap(keys); err != nil {
			bindings.Raise(L, bindings.Errorf("config", "ssh.from_input: task.config.%v", err))
		}
	}
	var hk *lua.LTable
	if opts != nil {
		opts.ForEach(func(k, v lua.LValue) {
			if k.String() == "host_key" {
				if src, ok := v.(*lua.LTable); ok {
					hk = L.NewTable()
					src.ForEach(func(k, v lua.LValue) { hk.RawSet(k, v) })
					return
				}
			}
			t.RawSet(k, v)
		})
	}
	if len(pins) > 0 {
		if hk == nil {
			hk = L.NewTable()
		}
		list := L.NewTable()
		switch p := hk.RawGetString("pinned").(type) {
		case lua.LString:
			list.Append(p)
		case *lua.LTable:
			p.ForEach(func(_, v lua.LValue) { list.Append(v) })
		}
		for _, p := range pins {
			list.Append(lua.LString(p))
		}
		hk.RawSetString("pinned", list)
	}
	if hk != nil {
		t.RawSetString("host_key", hk)
	}
	cfg, err := m.parseConnConfig(t, "ssh.from_input", 0)
	if err != nil {
		bindings.Raise(L, err)
	}
	return m.open(L, cfg)
}

// raiseCallback rethrows the error a Lua callback raised, as it was.
func raiseCallback(L *lua.LState, err error) {
	var ce callbackError
	if errors.As(err, &ce) {
		var ae *lua.ApiError
		if errors.As(ce.err, &ae) && ae.Object != nil {
			L.Error(ae.Object, 0)
		}
		L.RaiseError("%v", ce.err)
	}
	bindings.Raise(L, err)
}

// connExec is conn:exec(cmd, opts).
func connExec(L *lua.LState) int {
	c := checkConn(L, 1, "exec", false)
	cmd := checkString(L, 2, "conn:exec", "cmd")
	f := newFields(optTable(L, 3, "conn:exec"), "conn:exec")
	check := f.boolean("check", false)
	spec := execSpec{
		cmd:        cmd,
		timeout:    f.duration("timeout", 0),
		grace:      f.duration("kill_grace", 0),
		env:        f.stringMap("env"),
		pty:        f.boolean("pty", false),
		maxCapture: f.size("max_capture", defaultMaxCapture),
		cleanup:    f.str("cleanup"),
		loginEnv:   f.boolean("login_env", false),
		shell:      f.str("shell"),
	}
	if v := f.value("stdin"); v != lua.LNil {
		s, ok := v.(lua.LString)
		if !ok {
			bindings.Raise(L, bindings.Errorf("config", "conn:exec: option \"stdin\": want a string, got %s", v.Type()))
		}
		spec.stdin = strings.NewReader(string(s))
	}
	if strings.ContainsAny(spec.shell, "\x00\n") {
		bindings.Raise(L, bindings.Errorf("config", "conn:exec: option \"shell\": %q is not a shell's path or name", spec.shell))
	}
	spec.sudo = c.m.sudoOption(f, "sudo")
	for _, cb := range []struct {
		key string
		dst *func(string) error
	}{{"on_stdout", &spec.onStdout}, {"on_stderr", &spec.onStderr}} {
		if fn := f.function(cb.key); fn != nil {
			*cb.dst = func(line string) error {
				return L.CallByParam(lua.P{Fn: fn, NRet: 0, Protect: true}, lua.LString(line))
			}
		}
	}
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	h := c.m.h
	h.Logger().Debug("ssh exec", "conn", c.cfg.String(), "cmd", shorten(cmd), "sudo", spec.sudo != nil)
	res, err := c.m.b.run(h.Context(), c.cfg, c.key, h.Logger(), spec)
	if err != nil {
		raiseCallback(L, err)
	}
	if check && (res.exitCode != 0 || res.timedOut) {
		kind, what := "command", "exited with status "+strconv.Itoa(res.exitCode)
		if res.signal != "" {
			what += " (signal " + res.signal + ")"
		}
		if res.timedOut {
			kind, what = "timeout", "timed out after "+spec.timeout.String()+"; "+res.stopped
		}
		e := c.cfg.connError(kind, "command %s %s", shorten(cmd), what)
		e.Fields["command"] = cmd
		e.Fields["stdout"] = string(res.stdout)
		e.Fields["stderr"] = string(res.stderr)
		e.Fields["exit_code"] = res.exitCode
		if res.signal != "" {
			e.Fields["signal"] = res.signal
		}
		e.Fields["timed_out"] = res.timedOut
		if res.stopped != "" {
			e.Fields["stopped"] = res.stopped
		}
		bindings.Raise(L, e)
	}
	t := L.CreateTable(0, 8)
	t.RawSetString("stdout", lua.LString(res.stdout))
	t.RawSetString("stderr", lua.LString(res.stderr))
	t.RawSetString("exit_code", lua.LNumber(res.exitCode))
	if res.signal != "" {
		t.RawSetString("signal", lua.LString(res.signal))
	}
	t.RawSetString("timed_out", lua.LBool(res.timedOut))
	if res.stopped != "" {
		t.RawSetString("stopped", lua.LString(res.stopped))
	}
	t.RawSetString("truncated", lua.LBool(res.truncated))
	t.RawSetString("duration_ms", lua.LNumber(res.duration.Milliseconds()))
	t.RawSetString("ok", lua.LBool(res.exitCode == 0 && !res.timedOut))
	L.Push(t)
	return 1
}

// sudoOption reads sudo = true | {user=, password=}. The password is
// registered as a secret.
func (m *module) sudoOption(f *fields, key string) *sudoSpec {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return nil
	case lua.LBool:
		if !v {
			return nil
		}
		return &sudoSpec{user: "root"}
	case *lua.LTable:
		if pw, ok := v.RawGetString("password").(lua.LString); ok {
			m.addSecret(string(pw))
		}
		sf := newFields(v, f.where+".sudo")
		s := &sudoSpec{user: sf.str("user"), password: sf.str("password")}
		if err := sf.done(); err != nil && f.err == nil {
			f.err = err
		}
		if s.user == "" {
			s.user = "root"
		}
		return s
	default:
		f.fail(key, "want true or {user=..., password=...}, got %s", v.Type())
		return nil
	}
}
