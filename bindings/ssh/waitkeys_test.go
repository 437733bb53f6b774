package ssh

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/internal/sshdtest"
)

// waitResult runs ssh.wait_host_keys with the given options (Lua table
// fields) and returns its keys (nil when it returned none) and message.
func waitResult(t testing.TB, L *lua.LState, opts string) (map[string]string, string) {
	t.Helper()
	runIn(t, L, `keys, msg = ssh.wait_host_keys{`+opts+`}`)
	var keys map[string]string
	if tbl, ok := L.GetGlobal("keys").(*lua.LTable); ok {
		keys = map[string]string{}
		tbl.ForEach(func(k, v lua.LValue) { keys[k.String()] = v.String() })
	}
	msg := ""
	if m, ok := L.GetGlobal("msg").(lua.LString); ok {
		msg = string(m)
	}
	return keys, msg
}

// wantServerKeys checks that keys are exactly the sshd's host keys.
func wantServerKeys(t testing.TB, srv *sshdtest.Server, keys map[string]string, msg string) {
	t.Helper()
	if keys == nil {
		t.Fatalf("no keys; message %q", msg)
	}
	if len(keys) != len(srv.HostKeys) {
		t.Errorf("keys %v, want the %d types sshd has", keys, len(srv.HostKeys))
	}
	for typ, k := range srv.HostKeys {
		if keys[typ] != blob(k) {
			t.Errorf("keys.%s = %q, want sshd's %q", typ, keys[typ], blob(k))
		}
	}
	if msg != "" {
		t.Errorf("a message %q beside the keys", msg)
	}
}

// bareState is a Lua state with the binding and no sshd: for addresses
// where nothing answers. ctx is the hook's context.
func bareState(t testing.TB, ctx context.Context, opts Options) (*lua.LState, *bindingstest.Host) {
	t.Helper()
	h := bindingstest.NewHost(t)
	h.Ctx = ctx
	b := New(opts)
	t.Cleanup(func() { b.Close() })
	L := bindingstest.NewState(t, h, b)
	runIn(t, L, `ssh = require("loom.ssh")`)
	return L, h
}

// deadAddr is a loopback port nothing listens on.
func deadAddr(t testing.TB) (string, int) {
	t.Helper()
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1", port
}

func TestWaitHostKeysReturnsAnUpSSHDsKeys(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{KnownHosts: []string{}})
	keys, msg := waitResult(t, e.L, `host=HOST, port=PORT, timeout=30, interval=0.2`)
	wantServerKeys(t, e.srv, keys, msg)
	// Exactly keyscan's answer, in the same shape.
	e.run(`scanned = ssh.keyscan{host=HOST, port=PORT}`)
	for typ, b := range keys {
		if got := e.str("scanned." + typ); got != b {
			t.Errorf("keyscan's %s = %q, wait_host_keys' %q", typ, got, b)
		}
	}
}

// sshd comes up while the call waits (a new machine booting): the wait
// finds it. With no second attempt, the first (refused) would be the answer.
func TestWaitHostKeysFindsAnSSHDThatStartsLater(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{KnownHosts: []string{}})
	if err := e.srv.Down(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var upErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(1500 * time.Millisecond)
		upErr = e.srv.Up()
	}()
	keys, msg := waitResult(t, e.L, `host=HOST, port=PORT, timeout=60, interval=0.2, attempt_timeout=5`)
	wg.Wait()
	if upErr != nil {
		t.Fatal(upErr)
	}
	wantServerKeys(t, e.srv, keys, msg)
	if !strings.Contains(e.h.Logs(), "sshd is not answering yet") {
		t.Errorf("no debug line for the refused attempts; logs:\n%s", e.h.Logs())
	}
}

func TestWaitHostKeysGivesUpAfterTheBudget(t *testing.T) {
	L, _ := bareState(t, context.Background(), Options{DialRetries: -1})
	host, port := deadAddr(t)
	L.SetGlobal("HOST", lua.LString(host))
	L.SetGlobal("PORT", lua.LNumber(port))
	keys, msg := waitResult(t, L, `host=HOST, port=PORT, timeout=1, interval=0.2`)
	if keys != nil {
		t.Fatalf("keys %v from a port nothing listens on", keys)
	}
	for _, want := range []string{"ssh.wait_host_keys", fmt.Sprintf("%s:%d", host, port), "within 1s", "attempts", "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

// sshd accepts the connection but never speaks: each attempt ends at
// attempt_timeout, and the message says so.
func TestWaitHostKeysAttemptTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	L, _ := bareState(t, context.Background(), Options{DialRetries: -1})
	L.SetGlobal("PORT", lua.LNumber(l.Addr().(*net.TCPAddr).Port))
	keys, msg := waitResult(t, L, `host="127.0.0.1", port=PORT, timeout=1, interval=0.1, attempt_timeout=0.3`)
	if keys != nil {
		t.Fatalf("keys %v from a silent server", keys)
	}
	if !strings.Contains(msg, "the TCP connection opened but no host key came within") || !strings.Contains(msg, "(attempt_timeout)") ||
		!strings.Contains(msg, l.Addr().String()) {
		t.Errorf("message %q does not name the address and the attempt timeout", msg)
	}
}

// A cancelled task stops the wait at once: with a 60 s budget, the call
// returns with kind "cancelled" (a wait that ignored the cancel would
// return keys=nil and a message instead, after 60 s).
func TestWaitHostKeysStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	L, _ := bareState(t, ctx, Options{DialRetries: -1})
	host, port := deadAddr(t)
	L.SetGlobal("HOST", lua.LString(host))
	L.SetGlobal("PORT", lua.LNumber(port))
	time.AfterFunc(200*time.Millisecond, cancel)
	et := luaErrIn(t, L, `ssh.wait_host_keys{host=HOST, port=PORT, timeout=60, interval=1}`)
	wantKind(t, et, "cancelled", "cancelled", fmt.Sprintf("%s:%d", host, port), "connection refused")
	if field(et, "host") != host || field(et, "port") != fmt.Sprint(port) {
		t.Errorf("error fields host=%q port=%q", field(et, "host"), field(et, "port"))
	}
}

// The hook's deadline ends the wait before timeout does: the call
// returns (nil and a message naming the deadline), so CONFIRM can still
// succeed with a warning; it does not sleep past the deadline into a
// killed hook.
func TestWaitHostKeysStopsAtTheHookDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L, _ := bareState(t, ctx, Options{DialRetries: -1})
	host, port := deadAddr(t)
	L.SetGlobal("HOST", lua.LString(host))
	L.SetGlobal("PORT", lua.LNumber(port))
	keys, msg := waitResult(t, L, `host=HOST, port=PORT, timeout=60, interval=0.3`)
	if keys != nil {
		t.Fatalf("keys %v", keys)
	}
	for _, want := range []string{"cut short by the hook's deadline", "timeout was 1m0s", fmt.Sprintf("%s:%d", host, port), "connection refused"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not mention %q", msg, want)
		}
	}
}

// On the clock the hook's deadline is read from (loomd test's virtual
// one), the wait ends deadlineMargin before it, leaving the hook time to
// record its warning and return.
func TestWaitHostKeysLeavesTheHookAMargin(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	ctx := bindings.WithClockDeadline(context.Background(), clock.now.Add(time.Minute))
	L, _ := bareState(t, ctx, Options{DialRetries: -1, Clock: clock})
	host, port := deadAddr(t)
	L.SetGlobal("HOST", lua.LString(host))
	L.SetGlobal("PORT", lua.LNumber(port))
	keys, msg := waitResult(t, L, `host=HOST, port=PORT, timeout=300, interval=10`)
	if keys != nil {
		t.Fatalf("keys %v", keys)
	}
	if want := "within 55s, cut short by the hook's deadline (timeout was 5m0s): 6 attempts"; !strings.Contains(msg, want) {
		t.Errorf("message %q, want %q", msg, want)
	}
	if got := clock.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); got != 55*time.Second {
		t.Errorf("the wait ended %s after it began, want 55s (the deadline less 5s)", got)
	}
}

// fakeClock is a virtual clock: Sleep advances it at once.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return ctx.Err()
}

// The budget and the pauses run on Options.Clock (loomd test's virtual
// clock): a 5-minute wait with 5 s pauses takes no real time, tries every
// 5 s from 0 to 295 s, and never pauses past the budget.
func TestWaitHostKeysRunsOnTheBindingsClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	L, _ := bareState(t, context.Background(), Options{DialRetries: -1, Clock: clock})
	host, port := deadAddr(t)
	L.SetGlobal("HOST", lua.LString(host))
	L.SetGlobal("PORT", lua.LNumber(port))
	keys, msg := waitResult(t, L, `host=HOST, port=PORT, timeout="5m", interval=5`)
	if keys != nil {
		t.Fatalf("keys %v", keys)
	}
	if !strings.Contains(msg, "within 5m0s (timeout): 60 attempts") {
		t.Errorf("message %q, want 60 attempts within 5m0s", msg)
	}
	var total time.Duration
	for _, d := range clock.sleeps {
		total += d
		if d > 5*time.Second {
			t.Errorf("a pause of %s, longer than interval", d)
		}
	}
	if total != 5*time.Minute {
		t.Errorf("paused %s in all, want the 5m budget", total)
	}
}

func TestWaitHostKeysRejectsBadOptions(t *testing.T) {
	L, _ := bareState(t, context.Background(), Options{})
	for code, want := range map[string]string{
		`ssh.wait_host_keys("h")`:                         "want a table",
		`ssh.wait_host_keys{port=22}`:                     "host is required",
		`ssh.wait_host_keys{host="h", port=0}`:            "not a TCP port",
		`ssh.wait_host_keys{host="h", interval=0}`:        "interval",
		`ssh.wait_host_keys{host="h", attempt_timeout=0}`: "attempt_timeout",
		`ssh.wait_host_keys{host="h", timeout=-1}`:        "negative duration",
		`ssh.wait_host_keys{host="h", time_out=5}`:        `unknown option(s) time_out`,
	} {
		et := luaErrIn(t, L, code)
		wantKind(t, et, "config", want)
	}
}

var _ bindings.Clock = (*fakeClock)(nil)
