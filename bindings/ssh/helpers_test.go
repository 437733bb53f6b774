package ssh

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/internal/sshdtest"
)

// env is one test's sshd, binding, host and Lua state.
type env struct {
	t   testing.TB
	srv *sshdtest.Server
	b   *Binding
	h   *bindingstest.Host
	L   *lua.LState
}

// newEnv starts an sshd with cfg and a Binding trusting its known_hosts
// (all key types) unless opts says otherwise. The Lua state has ssh
// required as the global "ssh" and these globals: HOST, PORT, USER,
// NPUSER (NOPASSWD sudo), PASSWORD, KEY (PEM), KEYFILE (inside the work
// root), and the function conn(user) connecting with the key.
func newEnv(t testing.TB, cfg sshdtest.Config, opts *Options) *env {
	t.Helper()
	srv := sshdtest.Start(t, cfg)
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.KnownHosts == nil {
		o.KnownHosts = []string{srv.KnownHosts()}
	}
	b := New(o)
	t.Cleanup(func() { b.Close() })
	e := &env{t: t, srv: srv, b: b}
	e.h = bindingstest.NewHost(t)
	// A hook deadline, so that a bug shows up as a failure, not a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e.h.Ctx = ctx
	e.h.Work = filepath.Join(t.TempDir(), "tenant", "automatortypes", "shell")
	if err := os.MkdirAll(e.h.Work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.h.Work, "id_test"), srv.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e.L = e.newState()
	return e
}

// newState is another VM sharing the binding (another hook or task).
func (e *env) newState() *lua.LState { return e.newStateWith(e.b) }

func (e *env) newStateWith(b *Binding) *lua.LState {
	L := bindingstest.NewState(e.t, e.h, b)
	L.SetGlobal("HOST", lua.LString(e.srv.Host))
	L.SetGlobal("PORT", lua.LNumber(e.srv.Port))
	L.SetGlobal("USER", lua.LString(e.srv.User))
	L.SetGlobal("NPUSER", lua.LString(e.srv.NoPasswdUser))
	L.SetGlobal("PASSWORD", lua.LString(e.srv.Password))
	L.SetGlobal("KEY", lua.LString(e.srv.KeyPEM))
	L.SetGlobal("KEYFILE", lua.LString(filepath.Join(e.h.Work, "id_test")))
	if err := L.DoString(`
		ssh = require("loom.ssh")
		function conn(user, extra)
			local o = {host=HOST, port=PORT, user=user or USER, key=KEY}
			for k, v in pairs(extra or {}) do o[k] = v end
			return ssh.connect(o)
		end`); err != nil {
		e.t.Fatal(err)
	}
	return L
}

// run executes Lua and fails the test on error.
func (e *env) run(code string) {
	e.t.Helper()
	runIn(e.t, e.L, code)
}

func runIn(t testing.TB, L *lua.LState, code string) {
	t.Helper()
	if err := L.DoString(code); err != nil {
		t.Fatalf("lua: %s", describe(err))
	}
}

// describe shows a structured error's kind and message.
func describe(err error) string {
	if ae, ok := err.(*lua.ApiError); ok {
		if tbl, ok := ae.Object.(*lua.LTable); ok {
			return field(tbl, "kind") + ": " + field(tbl, "message") + "\n" + ae.StackTrace
		}
	}
	return err.Error()
}

// eval returns the value of a Lua expression (or a chunk ending in return).
func (e *env) eval(code string) lua.LValue {
	e.t.Helper()
	if !strings.Contains(code, "return") {
		code = "return " + code
	}
	fn, err := e.L.LoadString(code)
	if err != nil {
		e.t.Fatalf("lua: %v", err)
	}
	e.L.Push(fn)
	if err := e.L.PCall(0, 1, nil); err != nil {
		e.t.Fatalf("lua: %v", err)
	}
	v := e.L.Get(-1)
	e.L.Pop(1)
	return v
}

// str evaluates to a string.
func (e *env) str(code string) string {
	e.t.Helper()
	return lua.LVAsString(e.eval(code))
}

// luaErr runs code that must raise, and returns the raised error table.
func (e *env) luaErr(code string) *lua.LTable {
	e.t.Helper()
	return luaErrIn(e.t, e.L, code)
}

func luaErrIn(t testing.TB, L *lua.LState, code string) *lua.LTable {
	t.Helper()
	fn, err := L.LoadString(code)
	if err != nil {
		t.Fatalf("lua: %v", err)
	}
	L.Push(fn)
	err = L.PCall(0, 0, nil)
	if err == nil {
		t.Fatalf("lua code did not raise: %s", code)
	}
	ae, ok := err.(*lua.ApiError)
	if !ok {
		t.Fatalf("unexpected error %T: %v", err, err)
	}
	tbl, ok := ae.Object.(*lua.LTable)
	if !ok {
		t.Fatalf("raised a %s, not a structured error: %v", ae.Object.Type(), ae.Object)
	}
	return tbl
}

func field(t *lua.LTable, k string) string { return lua.LVAsString(t.RawGetString(k)) }

// wantKind checks an error table's kind and that its message names the
// connection.
func wantKind(t testing.TB, et *lua.LTable, kind string, mentions ...string) {
	t.Helper()
	if got := field(et, "kind"); got != kind {
		t.Fatalf("error kind = %q, want %q (message: %s)", got, kind, field(et, "message"))
	}
	for _, m := range mentions {
		if !strings.Contains(field(et, "message"), m) {
			t.Fatalf("error message %q does not mention %q", field(et, "message"), m)
		}
	}
}

// eventually polls cond until it holds or 10 s pass. It is for waiting on
// the host (a process to die, a log line), never for timing assertions.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (e *env) stat(name string) float64 { return e.b.Stats()[name] }

func (e *env) addr() string { return fmt.Sprintf("%s:%d", e.srv.Host, e.srv.Port) }
