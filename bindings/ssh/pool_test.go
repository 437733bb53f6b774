package ssh

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/internal/sshdtest"
)

func TestPoolReuseAcrossHooksAndIdleTimeout(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{IdleTimeout: 500 * time.Millisecond, IdleCheck: time.Hour})
	e.run(`c = conn()
		for i = 1, 5 do assert(c:exec("true").ok) end
		c:write("/tmp/loom-pool-test-` + fmt.Sprint(e.srv.Port) + `", "x")
		c:close()`)
	// Another hook (another VM) with the same parameters reuses it.
	runIn(t, e.newState(), `assert(conn():exec("true").ok)`)
	if n := e.srv.Accepted(); n != 1 {
		t.Fatalf("sshd accepted %d logins, want 1 (pooled)", n)
	}
	if e.stat("connections_opened") != 1 || e.stat("connections_reused") < 7 {
		t.Fatalf("stats: %v", e.b.Stats())
	}
	// Other credentials never share a connection.
	runIn(t, e.newState(), `assert(ssh.connect{host=HOST, port=PORT, user=USER, password=PASSWORD}:exec("true").ok)`)
	if n := e.srv.Accepted(); n != 2 {
		t.Fatalf("sshd accepted %d logins, want 2", n)
	}
	// Idle connections close after the idle timeout.
	eventually(t, "idle connections to close", func() bool { return e.stat("connections_open") == 0 })
	if e.stat("connections_closed_idle") != 2 || e.stat("connections_evicted") != 0 {
		t.Fatalf("stats after idle: %v", e.b.Stats())
	}
	// A handle outlives its connection: the next call reconnects.
	e.run(`assert(conn():exec("true").ok)`)
	if n := e.srv.Accepted(); n != 3 {
		t.Fatalf("sshd accepted %d logins, want 3 after the idle close", n)
	}
}

func TestPrivateConnectionClosesOnClose(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`a = conn(USER, {reuse=false}); b = conn(USER, {reuse=false})
		assert(a:exec("true").ok); assert(b:exec("true").ok)`)
	if e.srv.Accepted() != 2 || e.stat("connections_open") != 2 {
		t.Fatalf("two private handles: accepted %d, %v", e.srv.Accepted(), e.b.Stats())
	}
	e.run(`a:close(); b:close()`)
	eventually(t, "private connections to close", func() bool { return e.stat("connections_open") == 0 })
	et := e.luaErr(`a:exec("true")`)
	wantKind(t, et, "config", "closed")
}

func TestConcurrentExecOnOneHost(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		L := e.newState()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := L.DoString(`r = conn():exec("sleep 0.3; echo ok", {check=true}); assert(r.stdout == "ok\n")`); err != nil {
				errs <- fmt.Errorf("%s", describe(err))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// 4 sessions per connection, then a second connection (ConnsPerKey 2).
	if got := e.stat("connections_opened"); got != 2 {
		t.Fatalf("connections opened = %v, want 2", got)
	}
	if got := e.srv.Accepted(); got != 2 {
		t.Fatalf("sshd accepted %d logins, want 2", got)
	}
	if got := e.stat("sessions_in_use"); got != 0 {
		t.Fatalf("sessions still in use: %v", got)
	}
}

func TestConnectionStorm(t *testing.T) {
	// sshd's default MaxStartups (10:30:100) drops unauthenticated
	// connections past 10; the handshake limit and jittered retries must
	// get every one of 100 private connections through.
	e := newEnv(t, sshdtest.Config{}, nil)
	const n = 100
	runPrivateConnections(t, e, n, nil)
	t.Logf("storm stats: %v", e.b.Stats())
}

func TestTransportLostThenReconnect(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn(); assert(c:exec("true").ok)`)
	L2 := e.newState()
	done := make(chan *lua.LTable, 1)
	go func() {
		runIn(t, L2, `c = conn()`)
		done <- luaErrIn(t, L2, `c:exec("sleep 3620")`)
	}()
	eventually(t, "the command to start", func() bool { return len(sshdtest.ProcessesMatching("sleep 3620")) > 0 })
	if e.srv.KillConnections() == 0 {
		t.Fatal("no sshd connection process to kill")
	}
	et := <-done
	wantKind(t, et, "transport_lost", "was not retried", e.addr())
	eventually(t, "the dead connection to be evicted", func() bool { return e.stat("connections_evicted") == 1 })
	// The same handle reconnects on its next call.
	e.run(`r = c:exec("echo back", {check=true})`)
	if e.str("r.stdout") != "back\n" {
		t.Fatalf("after reconnect: %q", e.str("r.stdout"))
	}
	if got := e.srv.Accepted(); got != 2 {
		t.Fatalf("sshd accepted %d logins, want 2 (one reconnect)", got)
	}
}

func TestKeepaliveEvictsDeadPeer(t *testing.T) {
	// A proxy that freezes (a black hole) in the middle of a command.
	e := newEnv(t, sshdtest.Config{}, nil)
	proxy := newFreezingProxy(t, e.addr())
	e.L.SetGlobal("PROXYPORT", lua.LNumber(proxy.port()))
	// known_hosts names the sshd's port; the proxy listens elsewhere, so pin.
	e.L.SetGlobal("PIN", lua.LString(blob(e.srv.HostKeys["ed25519"])))
	e.L.SetGlobal("freeze", e.L.NewFunction(func(*lua.LState) int { proxy.freeze(); return 0 }))
	e.run(`c = conn(USER, {port=PROXYPORT, host_key={pinned={PIN}}, keepalive=0.2, keepalive_max=3, handshake_timeout=2})
		assert(c:exec("true").ok)`)
	// The network dies once the command runs (its first line arrived).
	et := e.luaErr(`c:exec("echo started; sleep 3621", {on_stdout=function() freeze() end})`)
	wantKind(t, et, "transport_lost", "keepalive")
	eventually(t, "the dead connection to be evicted", func() bool { return e.stat("connections_evicted") == 1 })
}

func TestJumpHost(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn(USER, {jump={host=HOST, port=PORT, user=NPUSER, key=KEY}})
		r = c:exec("id -un", {check=true})`)
	if e.str("r.stdout") != e.srv.User+"\n" {
		t.Fatalf("through the jump host: %q", e.str("r.stdout"))
	}
	if got := e.srv.Accepted(); got != 2 {
		t.Fatalf("accepted %d logins, want 2 (bastion + target)", got)
	}
	// The bastion connection is pooled and shared by its targets.
	e.run(`c2 = conn(NPUSER, {jump={host=HOST, port=PORT, user=NPUSER, key=KEY}}); assert(c2:exec("true").ok)`)
	if got := e.srv.Accepted(); got != 3 {
		t.Fatalf("accepted %d logins, want 3 (bastion reused)", got)
	}
	// A wrong host key on the bastion fails as host_key.
	e.L.SetGlobal("WRONG", lua.LString(blob(randomKey(t))))
	et := e.luaErr(`conn(USER, {jump={host=HOST, port=PORT, user=USER, key=KEY, host_key={pinned={WRONG}}}})`)
	wantKind(t, et, "host_key", "jump host")
}

func TestHandshakeTimeoutSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accept and say nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	b := New(Options{})
	defer b.Close()
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, b)
	L.SetGlobal("PORT", lua.LNumber(l.Addr().(*net.TCPAddr).Port))
	et := luaErrIn(t, L, `require("loom.ssh").connect{host="127.0.0.1", port=PORT, user="u", password="p", handshake_timeout=0.5}`)
	wantKind(t, et, "timeout", "handshake", "u@127.0.0.1:")
	if !strings.Contains(field(et, "message"), "500ms") {
		t.Fatalf("the error should give the timeout: %s", field(et, "message"))
	}
}

func TestCloseDrainsPool(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn(); assert(c:exec("true").ok)`)
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	if e.stat("connections_open") != 0 {
		t.Fatalf("open after Close: %v", e.b.Stats())
	}
	et := e.luaErr(`c:exec("true")`)
	wantKind(t, et, "connect", "closed")
}

// freezingProxy forwards TCP to a target until frozen; then it stops
// moving bytes but keeps the sockets open, like a black-holed network.
type freezingProxy struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{}
	once   sync.Once
	conns  []net.Conn
}

func newFreezingProxy(t testing.TB, target string) *freezingProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &freezingProxy{l: l, target: target, frozen: make(chan struct{})}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *freezingProxy) port() int { return p.l.Addr().(*net.TCPAddr).Port }

func (p *freezingProxy) freeze() { p.once.Do(func() { close(p.frozen) }) }

func (p *freezingProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *freezingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.frozen:
			return // swallow everything from now on
		default:
		}
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *freezingProxy) close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// runPrivateConnections opens n private connections at once, each in its
// own VM, runs `true` on each, and checks that every one succeeded and
// that sshd logged exactly n logins. during, when set, runs while the
// connections are being made.
func runPrivateConnections(t *testing.T, e *env, n int, during func()) {
	t.Helper()
	states := make([]*lua.LState, n)
	for i := range states {
		states[i] = e.newState()
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, L := range states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := L.DoString(`local c = conn(USER, {reuse=false}); assert(c:exec("true").ok); c:close()`); err != nil {
				errs <- fmt.Errorf("%s", describe(err))
			}
		}()
	}
	if during != nil {
		during()
	}
	wg.Wait()
	close(errs)
	failures := 0
	for err := range errs {
		failures++
		if failures <= 3 {
			t.Error(err)
		}
	}
	if failures > 0 {
		t.Fatalf("%d of %d connections failed; stats %v", failures, n, e.b.Stats())
	}
	if got := e.srv.Accepted(); got != n {
		t.Fatalf("sshd accepted %d logins, want %d", got, n)
	}
}
