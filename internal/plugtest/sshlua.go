package plugtest

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/runtime"
)

const sshFakeTypeName = "loom.test.ssh_fake"

var sshFakeOptionNames = []string{"host", "hosts", "port", "user", "password", "keys", "sudo", "strict", "known", "tar", "commands", "files", "env"}

// newSSHFakeLua is loom.test.ssh{host = "10.0.0.5", commands = {...}}.
func (f *fileRun) newSSHFakeLua(L *lua.LState) int {
	opts := L.OptTable(1, L.CreateTable(0, 0))
	fk, err := newSSHFake(f.sshRouter, f.pump)
	if err != nil {
		L.RaiseError("loom.test.ssh: %v", err)
	}
	fk.where = strings.TrimSuffix(L.Where(1), ":")
	var commands, files *lua.LTable
	for _, k := range fakeKeys(opts) {
		v := opts.RawGetString(k)
		str := func() string {
			s, ok := v.(lua.LString)
			if !ok {
				L.ArgError(1, k+" must be a string")
			}
			return string(s)
		}
		switch k {
		case "host":
			fk.hosts = append(fk.hosts, strings.ToLower(str()))
		case "hosts":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "hosts must be a list of host names or addresses")
			}
			t.ForEach(func(_, h lua.LValue) { fk.hosts = append(fk.hosts, strings.ToLower(h.String())) })
		case "port":
			n, ok := v.(lua.LNumber)
			if !ok || n < 1 || n > 65535 {
				L.ArgError(1, "port must be a number from 1 to 65535")
			}
			fk.port = int(n)
		case "user":
			fk.user = str()
		case "password":
			fk.pass = str()
		case "keys":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "keys must be a list of authorized public keys (\"ssh-ed25519 AAAA...\")")
			}
			t.ForEach(func(_, kv lua.LValue) {
				pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(kv.String()))
				if err != nil {
					L.ArgError(1, fmt.Sprintf("keys: %q is not a public key line: %v", brief(kv), err))
				}
				fk.keys = append(fk.keys, pk)
			})
		case "sudo":
			switch x := v.(type) {
			case lua.LBool:
				fk.sudo = bool(x)
			case *lua.LTable:
				pw, ok := x.RawGetString("password").(lua.LString)
				if !ok {
					L.ArgError(1, "sudo must be true, false or {password = \"...\"}")
				}
				fk.sudoPW = string(pw)
			default:
				L.ArgError(1, "sudo must be true, false or {password = \"...\"}")
			}
		case "env":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "env must be a table {NAME = \"value\"}")
			}
			fk.env = map[string]string{}
			t.ForEach(func(k, v lua.LValue) { fk.env[k.String()] = v.String() })
		case "strict":
			fk.strict = lua.LVAsBool(v)
		case "known":
			fk.known = lua.LVAsBool(v)
		case "tar":
			fk.hasTar = lua.LVAsBool(v)
		case "commands":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "commands must be a table {[\"command\"] = answer}")
			}
			commands = t
		case "files":
			t, ok := v.(*lua.LTable)
			if !ok {
				L.ArgError(1, "files must be a table {[\"/path\"] = content or {content =, mode =, owner =, group =}}")
			}
			files = t
		default:
			L.ArgError(1, fmt.Sprintf("unknown option %q%s: options are %s", k, runtime.DidYouMean(k, sshFakeOptionNames), strings.Join(sshFakeOptionNames, ", ")))
		}
	}
	if len(fk.hosts) == 0 {
		fk.hosts = []string{"127.0.0.1"}
	}
	if commands != nil {
		for _, k := range fakeKeys(commands) {
			addExpect(L, fk, k, commands.RawGetString(k))
		}
	}
	if files != nil {
		for _, k := range fakeKeys(files) {
			seedFile(L, fk, k, files.RawGetString(k))
		}
	}
	if err := f.sshRouter.add(fk); err != nil {
		L.RaiseError("loom.test.ssh: %v", err)
	}
	if f.inTest {
		f.testSSH = append(f.testSSH, fk)
	} else {
		f.fileSSH = append(f.fileSSH, fk)
	}
	ud := L.NewUserData()
	ud.Value = fk
	L.SetMetatable(ud, f.sshFakeMeta(L))
	L.Push(ud)
	return 1
}

func checkSSHFake(L *lua.LState) *sshFake {
	ud := L.CheckUserData(1)
	fk, ok := ud.Value.(*sshFake)
	if !ok {
		L.ArgError(1, "want an SSH fake (call methods with a colon: host:on(...))")
	}
	return fk
}

var sshResponseKeys = []string{"stdout", "stderr", "exit_code", "delay", "signal"}

// sshResponseFrom converts an answer: a table {stdout, stderr,
// exit_code, delay, signal}, an exit code, or a stdout string.
func sshResponseFrom(L *lua.LState, v lua.LValue) *sshResponse {
	r := &sshResponse{}
	switch x := v.(type) {
	case lua.LNumber:
		r.exit = int(x)
		return r
	case lua.LString:
		r.stdout = []byte(x)
		return r
	case *lua.LNilType:
		return r
	case *lua.LTable:
	default:
		L.RaiseError("an SSH fake answer must be a table {stdout = \"...\", exit_code = 0}, an exit code or a stdout string, not %s", v.Type())
	}
	t := v.(*lua.LTable)
	for _, k := range fakeKeys(t) {
		if !contains(sshResponseKeys, k) {
			L.RaiseError("unknown answer key %q%s: keys are %s", k, runtime.DidYouMean(k, sshResponseKeys), strings.Join(sshResponseKeys, ", "))
		}
	}
	if s, ok := t.RawGetString("stdout").(lua.LString); ok {
		r.stdout = []byte(s)
	}
	if s, ok := t.RawGetString("stderr").(lua.LString); ok {
		r.stderr = []byte(s)
	}
	if n, ok := t.RawGetString("exit_code").(lua.LNumber); ok {
		r.exit = int(n)
	}
	if d, ok := t.RawGetString("delay").(lua.LNumber); ok {
		r.delay = time.Duration(float64(d) * float64(time.Second))
	}
	if s, ok := t.RawGetString("signal").(lua.LString); ok {
		r.signal = strings.TrimPrefix(strings.ToUpper(string(s)), "SIG")
	}
	return r
}

// addExpect adds an expectation: an answer, a list of answers given in
// turn (the last repeats), or a handler.
func addExpect(L *lua.LState, fk *sshFake, match string, v lua.LValue) {
	m, err := newCmdMatcher(match)
	if err != nil {
		L.RaiseError("loom.test.ssh: %v", err)
	}
	e := &sshExpect{m: m}
	switch x := v.(type) {
	case *lua.LFunction:
		e.handler = x
	case *lua.LTable:
		if first, ok := x.RawGetInt(1).(*lua.LTable); ok && first != nil {
			for i := 1; i <= x.Len(); i++ {
				e.canned = append(e.canned, sshResponseFrom(L, x.RawGetInt(i)))
			}
		} else {
			e.canned = []*sshResponse{sshResponseFrom(L, x)}
		}
	default:
		e.canned = []*sshResponse{sshResponseFrom(L, v)}
	}
	fk.mu.Lock()
	fk.expects = append(fk.expects, e)
	fk.mu.Unlock()
}

// seedFile puts a file on the fake: content, or {content, mode, owner,
// group}.
func seedFile(L *lua.LState, fk *sshFake, p string, v lua.LValue) {
	if !strings.HasPrefix(p, "/") {
		L.RaiseError("loom.test.ssh: file %q: paths on the fake host are absolute", p)
	}
	content, mode, owner, group := "", fs.FileMode(0o644), "root", "root"
	switch x := v.(type) {
	case lua.LString:
		content = string(x)
	case *lua.LTable:
		for _, k := range fakeKeys(x) {
			if !contains([]string{"content", "mode", "owner", "group"}, k) {
				L.RaiseError("loom.test.ssh: file %q: unknown key %q (keys: content, mode, owner, group)", p, k)
			}
		}
		content = lua.LVAsString(x.RawGetString("content"))
		if m := x.RawGetString("mode"); m != lua.LNil {
			n, err := strconv.ParseUint(strings.TrimPrefix(m.String(), "0o"), 8, 32)
			if err != nil || n > 0o7777 {
				L.RaiseError("loom.test.ssh: file %q: mode %q is not octal such as \"0640\"", p, m.String())
			}
			mode = fs.FileMode(n)
		}
		if o, ok := x.RawGetString("owner").(lua.LString); ok {
			owner, group = string(o), string(o)
		}
		if g, ok := x.RawGetString("group").(lua.LString); ok {
			group = string(g)
		}
	default:
		L.RaiseError("loom.test.ssh: file %q: want content (a string) or {content =, mode =, owner =, group =}", p)
	}
	if err := fk.fs.put(p, []byte(content), mode, owner, group); err != nil {
		L.RaiseError("loom.test.ssh: file %q: %v", p, err)
	}
}

// runHandler runs a command handler on the test's goroutine; it replies
// exit 1 and returns the error when the handler raised.
func (f *sshFake) runHandler(L *lua.LState, e *sshExpect, rec *sshRecord, reply chan *sshResponse) lua.LValue {
	top := L.GetTop()
	defer L.SetTop(top)
	L.Push(e.handler)
	L.Push(sshRecordToLua(L, rec))
	if err := L.PCall(1, 1, nil); err != nil {
		obj := errorObject(err)
		reply <- &sshResponse{exit: 1, stderr: []byte("loomd test: the SSH fake's handler for " + e.m.text + " raised an error: " + errorMessage(obj) + "\n")}
		return obj
	}
	var resp *sshResponse
	var bad lua.LValue
	func() {
		defer func() {
			if r := recover(); r != nil {
				bad = lua.LString(fmt.Sprintf("the SSH fake's handler for %s returned %s: return {stdout =, stderr =, exit_code =}, an exit code or a stdout string", e.m.text, brief(L.Get(-1))))
			}
		}()
		resp = sshResponseFrom(L, L.Get(-1))
	}()
	if bad != nil {
		reply <- &sshResponse{exit: 1, stderr: []byte("loomd test: " + bad.String() + "\n")}
		return bad
	}
	reply <- resp
	return nil
}

// sshRecordToLua is what handlers and host:commands() see.
func sshRecordToLua(L *lua.LState, r *sshRecord) *lua.LTable {
	t := L.CreateTable(0, 12)
	set := func(k, v string) {
		if v != "" {
			t.RawSetString(k, lua.LString(v))
		}
	}
	set("kind", r.Kind)
	set("command", r.Command)
	set("path", r.Path)
	set("user", r.User)
	set("login", r.Login)
	set("builtin", r.Builtin)
	set("matched", r.Matched)
	set("method", r.Method)
	set("signal", r.Signal)
	if r.Kind == "exec" {
		t.RawSetString("sudo", lua.LBool(r.Sudo))
		t.RawSetString("pty", lua.LBool(r.Pty))
		t.RawSetString("stdin", lua.LString(r.Stdin))
		env := L.CreateTable(0, len(r.Env))
		for k, v := range r.Env {
			env.RawSetString(k, lua.LString(v))
		}
		t.RawSetString("env", env)
		caps := L.CreateTable(len(r.Captures), 0)
		for _, c := range r.Captures {
			caps.Append(lua.LString(c))
		}
		t.RawSetString("captures", caps)
		if r.Stdout != nil || r.Stderr != nil || r.Exit != 0 || r.Signal != "" {
			t.RawSetString("exit_code", lua.LNumber(r.Exit))
			t.RawSetString("stdout", lua.LString(r.Stdout))
			t.RawSetString("stderr", lua.LString(r.Stderr))
		}
	}
	if r.Kind == "upload" || r.Kind == "download" || r.Builtin != "" {
		t.RawSetString("bytes", lua.LNumber(r.Bytes))
	}
	return t
}

// records returns the fake's records of kind ("" for all); exec records
// of loom.ssh's own transfer commands only when builtins.
func (f *sshFake) records(kind string, builtins bool) []*sshRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*sshRecord
	for _, r := range f.log {
		if (kind == "" || r.Kind == kind) && (builtins || r.Builtin == "") {
			out = append(out, r)
		}
	}
	return out
}

// ran returns the plugin's commands that m matches.
func (f *sshFake) ran(m cmdMatcher) []*sshRecord {
	var out []*sshRecord
	for _, r := range f.records("exec", false) {
		if _, ok := m.match(r.Command); ok {
			out = append(out, r)
		}
	}
	return out
}

func recordList(L *lua.LState, rs []*sshRecord) *lua.LTable {
	t := L.CreateTable(len(rs), 0)
	for _, r := range rs {
		t.Append(sshRecordToLua(L, r))
	}
	luaval.MarkArray(L, t)
	return t
}

func nodeToLua(L *lua.LState, n *vnode) *lua.LTable {
	t := L.CreateTable(0, 6)
	kind := "file"
	switch {
	case n.mode.IsDir():
		kind = "dir"
	case n.mode&fs.ModeSymlink != 0:
		kind = "link"
		t.RawSetString("target", lua.LString(n.link))
	default:
		t.RawSetString("content", lua.LString(n.data))
		t.RawSetString("size", lua.LNumber(len(n.data)))
	}
	t.RawSetString("kind", lua.LString(kind))
	t.RawSetString("mode", lua.LString(fmt.Sprintf("%04o", n.mode.Perm()|n.mode&(fs.ModeSticky))))
	t.RawSetString("owner", lua.LString(n.owner))
	t.RawSetString("group", lua.LString(n.group))
	return t
}

// sshFakeMeta is the metatable of SSH fake userdata.
func (f *fileRun) sshFakeMeta(L *lua.LState) *lua.LTable {
	mt := L.NewTypeMetatable(sshFakeTypeName)
	if mt.RawGetString("__index") != lua.LNil {
		return mt
	}
	matcher := func(L *lua.LState, n int) cmdMatcher {
		m, err := newCmdMatcher(L.CheckString(n))
		if err != nil {
			L.ArgError(n, err.Error())
		}
		return m
	}
	methods := map[string]lua.LGFunction{
		// host:on(command, answer | {answers} | handler): an expectation.
		"on": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			addExpect(L, fk, L.CheckString(2), L.Get(3))
			L.Push(L.Get(1))
			return 1
		},
		// host:file(path): the content, or nil when absent.
		"file": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			n := fk.fs.get(L.CheckString(2))
			if n == nil || n.mode.IsDir() {
				L.Push(lua.LNil)
			} else {
				L.Push(lua.LString(n.data))
			}
			return 1
		},
		// host:stat(path): {kind, mode, owner, group, size, content,
		// target} without following a final symlink, or nil.
		"stat": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			n := fk.fs.lget(L.CheckString(2))
			if n == nil {
				L.Push(lua.LNil)
			} else {
				L.Push(nodeToLua(L, n))
			}
			return 1
		},
		// host:write(path, content [, {mode, owner, group}]): seed a file.
		"write": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			p, content := L.CheckString(2), L.CheckString(3)
			spec := L.CreateTable(0, 4)
			if o, ok := L.Get(4).(*lua.LTable); ok {
				o.ForEach(func(k, v lua.LValue) { spec.RawSet(k, v) })
			}
			spec.RawSetString("content", lua.LString(content))
			seedFile(L, fk, p, spec)
			return 0
		},
		// host:mkdir(path): make a directory and its parents.
		"mkdir": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			fk.fs.mu.Lock()
			err := fk.fs.mkdirAll(L.CheckString(2), "root")
			fk.fs.mu.Unlock()
			if err != nil {
				L.RaiseError("host:mkdir: %v", err)
			}
			return 0
		},
		// host:remove(path): delete a file.
		"remove": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			fk.fs.remove(L.CheckString(2))
			return 0
		},
		// host:files([dir]): the files and links under dir, sorted.
		"files": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			ps := fk.fs.list(L.OptString(2, "/"), false)
			var out []string
			for _, p := range ps {
				if !strings.HasPrefix(p, "/tmp/.loom-") { // the binding's own temp files are its business
					out = append(out, p)
				}
			}
			L.Push(stringList(L, out))
			return 1
		},
		// host:commands([command]): the plugin's commands, in order.
		"commands": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			if L.Get(2) == lua.LNil {
				L.Push(recordList(L, fk.records("exec", false)))
			} else {
				L.Push(recordList(L, fk.ran(matcher(L, 2))))
			}
			return 1
		},
		// host:interactions([kind]): everything: logins, execs (with
		// loom.ssh's own transfer commands), uploads, downloads, tunnels,
		// cleanups.
		"interactions": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			L.Push(recordList(L, fk.records(L.OptString(2, ""), true)))
			return 1
		},
		// host:last([command]): the latest matching command or nil.
		"last": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			var rs []*sshRecord
			if L.Get(2) == lua.LNil {
				rs = fk.records("exec", false)
			} else {
				rs = fk.ran(matcher(L, 2))
			}
			if len(rs) == 0 {
				L.Push(lua.LNil)
			} else {
				L.Push(sshRecordToLua(L, rs[len(rs)-1]))
			}
			return 1
		},
		// host:assert_ran(command [, times]): fails the test unless the
		// plugin ran it (that many times); returns the runs.
		"assert_ran": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			m := matcher(L, 2)
			rs := fk.ran(m)
			n, hasN := L.Get(3).(lua.LNumber)
			if (hasN && len(rs) != int(n)) || (!hasN && len(rs) == 0) {
				want := "at least once"
				if hasN {
					want = fmt.Sprintf("%d time(s)", int(n))
				}
				raiseFailure(L, 1, fmt.Sprintf("expected %s to run %s, it ran %d time(s)", strconv.Quote(L.CheckString(2)), want, len(rs)), fk.summary())
			}
			L.Push(recordList(L, rs))
			return 1
		},
		"assert_not_ran": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			if rs := fk.ran(matcher(L, 2)); len(rs) > 0 {
				raiseFailure(L, 1, fmt.Sprintf("expected %s not to run, it ran %d time(s)", strconv.Quote(L.CheckString(2)), len(rs)), fk.summary())
			}
			return 0
		},
		// host:reset(): forget the records (expectations and files stay).
		"reset": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			fk.mu.Lock()
			fk.log, fk.unmatched = nil, nil
			for _, e := range fk.expects {
				e.served = 0
			}
			fk.mu.Unlock()
			return 0
		},
		"close": func(L *lua.LState) int {
			fk := checkSSHFake(L)
			f.sshRouter.remove(fk)
			fk.close()
			return 0
		},
	}
	fields := []string{"host", "hosts", "port", "host_key", "fingerprint", "known_hosts"}
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		fk := checkSSHFake(L)
		switch key := L.CheckString(2); key {
		case "host":
			L.Push(lua.LString(fk.hosts[0]))
		case "hosts":
			L.Push(stringList(L, fk.hosts))
		case "port":
			L.Push(lua.LNumber(fk.port))
		case "host_key":
			L.Push(lua.LString(fk.hostKeyBlob()))
		case "fingerprint":
			L.Push(lua.LString(ssh.FingerprintSHA256(fk.signer.PublicKey())))
		case "known_hosts":
			name := fk.hosts[0]
			if fk.port != 22 {
				name = "[" + name + "]:" + strconv.Itoa(fk.port)
			}
			L.Push(lua.LString(name + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(fk.signer.PublicKey())))))
		default:
			m, ok := methods[key]
			if !ok {
				names := append([]string{}, fields...)
				for n := range methods {
					names = append(names, n)
				}
				sort.Strings(names)
				L.RaiseError("SSH fake has no field %q%s (fields: %s)", key, runtime.DidYouMean(key, names), strings.Join(names, ", "))
			}
			L.Push(L.NewFunction(m))
		}
		return 1
	}))
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		fk := checkSSHFake(L)
		L.Push(lua.LString(fmt.Sprintf("SSH fake for %s port %d", strings.Join(fk.hosts, ", "), fk.port)))
		return 1
	}))
	return mt
}
