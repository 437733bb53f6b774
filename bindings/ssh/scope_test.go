package ssh

import (
	"strings"
	"syscall"
	"testing"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/internal/sshdtest"
)

// TestTaskScope (issue 20 item 7): a task's private connections count
// against its cap and close when its scope does; shared ones return to
// the pool; every handle ends with its task.
func TestTaskScope(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.h.Scope = bindings.NewScope("task-1", bindings.TaskLimits{Conns: 3, Descriptors: 8})
	e.run(`shared = conn()
		a = conn(USER, {reuse=false}); b = conn(USER, {reuse=false}); c = conn(USER, {reuse=false})`)
	wantKind(t, e.luaErr(`conn(USER, {reuse=false})`), "limit", "holds 3 connections, the limit per task")
	// Closing one gives its place back; the shared handle never counted.
	e.run(`a:close(); d = conn(USER, {reuse=false}); assert(shared:exec("true").ok)`)
	if n := e.stat("connections_open"); n != 4 {
		t.Fatalf("connections_open %v, want 4 (3 private, 1 shared)", n)
	}
	released := e.h.Scope.Close()
	if len(released) != 3 || !strings.Contains(released[0], "reuse=false") {
		t.Errorf("released %q, want the 3 private connections", released)
	}
	if n := e.stat("connections_open"); n != 1 {
		t.Fatalf("connections_open %v after the task ended, want 1 (the shared one stays pooled)", n)
	}
	wantKind(t, e.luaErr(`b:exec("true")`), "config", "task-1, which has ended")
	wantKind(t, e.luaErr(`shared:exec("true")`), "config", "has ended")

	// The next task reuses the shared connection.
	e.h.Scope = bindings.NewScope("task-2", bindings.TaskLimits{})
	e.run(`assert(conn():exec("true").ok)`)
	if e.stat("connections_opened") != 5 || e.stat("connections_open") != 1 {
		t.Errorf("stats: %v", e.b.Stats())
	}
}

// TestPoolMaxConns: the whole pool is capped; a new connection closes the
// least recently used idle shared one, and fails with kind limit when
// none is idle.
func TestPoolMaxConns(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{MaxConns: 3})
	e.run(`p1 = conn(USER, {reuse=false}); p2 = conn(USER, {reuse=false}); p3 = conn(USER, {reuse=false})`)
	wantKind(t, e.luaErr(`conn()`), "limit", "maximum of 3 connections, none of them idle")
	if e.stat("connections_refused") != 1 {
		t.Errorf("stats: %v", e.b.Stats())
	}
	e.run(`p2:close(); p3:close()
		assert(conn(USER):exec("true").ok)
		assert(conn(NPUSER):exec("true").ok)`)
	// Full with two idle shared connections: the oldest goes.
	e.run(`assert(ssh.connect{host=HOST, port=PORT, user=USER, password=PASSWORD}:exec("true").ok)`)
	eventually(t, "the pool to settle", func() bool { return e.stat("connections_open") == 3 })
	if e.stat("connections_closed_idle") < 1 {
		t.Errorf("no idle connection was closed to make room: %v", e.b.Stats())
	}
	e.run(`assert(conn(NPUSER):exec("true").ok)`) // the newer one was kept
}

// TestDescriptorGuard: with its descriptors nearly used up, the binding
// refuses a new connection with kind limit, naming the limit, instead of
// failing later with "too many open files".
func TestDescriptorGuard(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`assert(conn():exec("true").ok)`) // the pool's own goroutines and fds exist
	open, _ := bindings.Descriptors()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	// Room for about four more before the reserve of 32.
	lim := syscall.Rlimit{Cur: uint64(open + 32 + 4), Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	e.run(`held = {}
		for i = 1, 40 do
			local ok, err = pcall(conn, USER, {reuse=false})
			if not ok then LAST = err; break end
			held[i] = err
		end`)
	last := e.eval("LAST")
	if last.String() == "nil" {
		t.Fatalf("40 connections opened under a limit of %d descriptors", lim.Cur)
	}
	et := e.luaErr(`error(LAST)`)
	wantKind(t, et, "limit", "file descriptors open (RLIMIT_NOFILE")
	if n := e.eval("#held"); n.String() == "0" || n.String() == "40" {
		t.Errorf("%s connections opened before the refusal", n)
	}
}
