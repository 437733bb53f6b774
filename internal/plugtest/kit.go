package plugtest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/runtime"
)

// Kit is the test kit for an interactive session (loomd repl): HTTP and
// SSH fakes that the session's loom.http and loom.ssh reach instead of
// the network for the hosts they claim (everything else goes through),
// loom.test.task, and hooks run while the fakes' Lua handlers are served
// on the session's VM, as under loomd test.
type Kit struct {
	f   *fileRun
	dir string
	vm  *lua.LState // the VM the kit is attached to
}

// NewKit makes a kit whose SSH fakes answer before realDial (nil: a
// net.Dialer); its HTTP fakes answer through Intercept.
func NewKit(realDial func(ctx context.Context, network, addr string) (net.Conn, error)) (*Kit, error) {
	dir, err := os.MkdirTemp("", "loomd-kit-")
	if err != nil {
		return nil, err
	}
	known := filepath.Join(dir, "known_hosts")
	if err := os.WriteFile(known, nil, 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if realDial == nil {
		var d net.Dialer
		realDial = d.DialContext
	}
	f := &fileRun{router: newRouter(), pump: &pump{}, clock: &vclock{real: true}, gate: &gate{}, spies: newSpyRegistry(),
		logs: &logCapture{}, fileCtx: context.Background(), ctx: context.Background()}
	f.sshRouter = newSSHRouter(known)
	f.sshRouter.fallback = realDial
	return &Kit{f: f, dir: dir}, nil
}

// Intercept is loom.http's Options.Intercept: the fakes answer for the
// hosts they claim, and every other request goes on as it would.
func (k *Kit) Intercept(req *http.Request) (*http.Response, error, bool) {
	if !k.f.router.serves(req) {
		return nil, nil, false
	}
	resp, err := k.f.router.RoundTrip(req)
	return resp, err, true
}

// Dial is the loom.ssh dialer of the session's runtime.
func (k *Kit) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return k.f.sshRouter.dial(ctx, network, addr)
}

// KnownHosts is the file the SSH fakes' host keys are written to: add it
// to loom.ssh's known_hosts files.
func (k *Kit) KnownHosts() string { return k.f.sshRouter.knownHosts }

// Permitted is runtime.Options.PermitHTTP: 127.0.0.1 while a fake opened
// with permit = true is open.
func (k *Kit) Permitted() []string { return k.f.router.permitted() }

// InstructionHook is runtime.Options.InstructionHook: it keeps a hook's
// Lua apart from the fakes' handlers.
func (k *Kit) InstructionHook(L *lua.LState, p *lua.FunctionProto, pc int) {
	k.f.gate.instruction(L, p, pc)
}

// Attach binds the kit to the session's current VM, after it opened or
// replaced one (:load, :reload, a VM discarded after an interrupt). The
// fakes of an earlier VM are closed (their handlers lived in it); the
// returned note says so, or is "".
func (k *Kit) Attach(rt *runtime.Runtime, sess *runtime.Session, logger *slog.Logger) string {
	L := sess.State()
	if L == k.vm {
		return ""
	}
	note := ""
	if n := k.closeFakes(); n > 0 {
		note = fmt.Sprintf("the %d fake(s) opened in the previous VM were closed with it", n)
	}
	f := k.f
	k.vm = L
	f.L, f.sess, f.logger = L, sess, logger
	f.gate.root = L
	f.gate.hooks = sess.HookThread()
	f.gate.handlers, _ = L.NewThread()
	// loom.test.task builds tasks for the session's plugin's types.
	f.types, f.typ = nil, runtime.TypeInfo{}
	all := rt.Types()
	for _, t := range all {
		if t.Name == sess.Type() {
			f.typ = t
		}
	}
	for _, t := range all {
		if f.typ.Name == "" || t.Plugin == f.typ.Plugin {
			if t.Name == f.typ.Name {
				f.types = append([]runtime.TypeInfo{t}, f.types...)
			} else {
				f.types = append(f.types, t)
			}
		}
	}
	f.workDir = sess.WorkDir()
	return note
}

func (k *Kit) closeFakes() int {
	f := k.f
	n := len(f.fileFakes) + len(f.fileSSH)
	for _, fk := range f.fileFakes {
		f.router.remove(fk)
		fk.close()
	}
	for _, fk := range f.fileSSH {
		f.sshRouter.remove(fk)
		fk.close()
	}
	f.fileFakes, f.fileSSH = nil, nil
	return n
}

// Module is loom.test at the prompt: http and ssh (fakes), task (a task
// of the session's type), files (the work dir's).
func (k *Kit) Module(L *lua.LState) lua.LValue {
	f := k.f
	t := L.CreateTable(0, 6)
	full := f.testModule(L)
	for _, name := range []string{"http", "ssh", "task", "files"} {
		t.RawSetString(name, full.RawGetString(name))
	}
	t.RawSetString("type", lua.LString(f.typ.Name))
	t.RawSetString("work_dir", lua.LString(f.workDir))
	return t
}

// NewHTTPFake opens an HTTP fake for host from Go (the REPL's :fake
// http): it answers 404 to everything until routes are added, and
// returns the Lua value the prompt gets.
func (k *Kit) NewHTTPFake(L *lua.LState, host string, permit bool) (lua.LValue, error) {
	opts := L.CreateTable(0, 3)
	opts.RawSetString("host", lua.LString(host))
	opts.RawSetString("strict", lua.LFalse)
	if permit {
		opts.RawSetString("permit", lua.LTrue)
	}
	v, err := k.callLua(L, k.f.newHTTPFake, opts)
	if err == nil {
		k.f.fileFakes[len(k.f.fileFakes)-1].where = ":fake http " + host
	}
	return v, err
}

// NewSSHFake opens an SSH fake for host from Go (:fake ssh): a node any
// credentials log in to; a command it has no expectation for exits 127.
func (k *Kit) NewSSHFake(L *lua.LState, host string) (lua.LValue, error) {
	opts := L.CreateTable(0, 3)
	opts.RawSetString("host", lua.LString(host))
	opts.RawSetString("strict", lua.LFalse)
	v, err := k.callLua(L, k.f.newSSHFakeLua, opts)
	if err == nil {
		k.f.fileSSH[len(k.f.fileSSH)-1].where = ":fake ssh " + host
	}
	return v, err
}

func (k *Kit) callLua(L *lua.LState, fn lua.LGFunction, arg lua.LValue) (lua.LValue, error) {
	top := L.GetTop()
	defer L.SetTop(top)
	L.Push(L.NewFunction(fn))
	L.Push(arg)
	if err := L.PCall(1, 1, nil); err != nil {
		return nil, fmt.Errorf("%s", errorMessage(errorObject(err)))
	}
	return L.Get(-1), nil
}

// Fakes describes the open fakes, one line each.
func (k *Kit) Fakes() []string {
	var out []string
	for _, fk := range k.f.fileFakes {
		out = append(out, fmt.Sprintf("http %s at %s (created at %s)", strings.Join(fk.hosts, ", "), fk.url, fk.where))
	}
	for _, fk := range k.f.fileSSH {
		out = append(out, fmt.Sprintf("ssh %s port %d (created at %s)", strings.Join(fk.hosts, ", "), fk.port, fk.where))
	}
	sort.Strings(out)
	return out
}

// Run runs fn (a hook on the session's VM) on another goroutine while
// serving the fakes' Lua handlers on the VM's handler thread; ctx is the
// handlers' context. It returns what the fakes saw that nothing
// answered, and a handler's error.
func (k *Kit) Run(ctx context.Context, fn func()) (unmatched []string, handlerErr error) {
	f := k.f
	f.ctx = ctx
	defer func() { f.ctx = context.Background() }()
	if obj := f.serveWhile(fn); obj != nil {
		handlerErr = fmt.Errorf("a fake's handler raised: %s", errorMessage(obj))
	}
	for _, fk := range f.fileFakes {
		unmatched = append(unmatched, fk.takeUnmatched()...)
	}
	for _, fk := range f.fileSSH {
		unmatched = append(unmatched, fk.takeUnmatched()...)
	}
	return unmatched, handlerErr
}

// Close closes the fakes and removes the kit's files.
func (k *Kit) Close() {
	k.closeFakes()
	k.f.router.close()
	os.RemoveAll(k.dir)
}
