package plugtest

import (
	"encoding/base64"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/loomrt/loom/internal/sshdtest"
)

// skipMarker marks the error table that skips a test (reported pending
// with the reason).
const skipMarker = "__loomtest_skip"

func raiseSkip(L *lua.LState, reason string) {
	t := L.CreateTable(0, 1)
	t.RawSetString(skipMarker, lua.LString(reason))
	L.Error(t, 0)
}

// sshd is loom.test.sshd(): a real OpenSSH sshd on 127.0.0.1, started
// once per test file with --sshd (internal/sshdtest: generated host keys,
// test users with a key, a password and sudo rules). Its host keys go to
// the test's known_hosts and the test runtime may dial it. Without
// --sshd the test is skipped.
func (f *fileRun) sshd(L *lua.LState) int {
	if !f.opts.SSHD {
		raiseSkip(L, "needs a real sshd: run loomd test --sshd (as root, with openssh-server and sudo installed)")
	}
	if f.realSSHD == nil {
		s, err := sshdtest.StartServer(sshdtest.Config{})
		if err != nil {
			L.RaiseError("loom.test.sshd: %v", err)
		}
		var lines []string
		for _, k := range s.HostKeys {
			lines = append(lines, knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, k))
		}
		if err := f.sshRouter.addReal(s.Addr, lines); err != nil {
			s.Stop()
			L.RaiseError("loom.test.sshd: %v", err)
		}
		f.realSSHD = s
	}
	s := f.realSSHD
	t := L.CreateTable(0, 10)
	t.RawSetString("host", lua.LString(s.Host))
	t.RawSetString("port", lua.LNumber(s.Port))
	t.RawSetString("user", lua.LString(s.User))
	t.RawSetString("nopasswd_user", lua.LString(s.NoPasswdUser))
	t.RawSetString("password", lua.LString(s.Password))
	t.RawSetString("key", lua.LString(s.KeyPEM))
	keys := L.CreateTable(0, 3)
	for typ, k := range s.HostKeys {
		keys.RawSetString(typ, lua.LString(base64.StdEncoding.EncodeToString(k.Marshal())))
	}
	t.RawSetString("host_keys", keys)
	t.RawSetString("sshauth", luaSSHAuth(L, s))
	L.Push(t)
	return 1
}

// luaSSHAuth is the task's ssh-auth for the password-sudo user.
func luaSSHAuth(L *lua.LState, s *sshdtest.Server) *lua.LTable {
	a := L.CreateTable(0, 3)
	a.RawSetString("user", lua.LString(s.User))
	a.RawSetString("password", lua.LString(s.Password))
	a.RawSetString("port", lua.LNumber(s.Port))
	return a
}

// addReal lets the test runtime dial a real server at addr and trusts
// its host keys.
func (r *sshRouter) addReal(addr string, lines []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.real == nil {
		r.real = map[string][]string{}
	}
	r.real[addr] = lines
	return r.writeKnownHosts()
}

// isReal reports whether addr is a real server the test started.
func (r *sshRouter) isReal(addr string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.real[addr]
	return ok
}
