package ssh

import (
	"bufio"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/internal/sshdtest"
)

// holdStartup opens a TCP connection to sshd, reads its banner and then
// says nothing: sshd counts it as an unauthenticated connection, taking a
// MaxStartups slot, until it is closed (LoginGraceTime is 2 minutes). A
// connection sshd dropped instead ("Exceeded MaxStartups", because an
// earlier probe still held the slot) is closed and tried again.
func holdStartup(t testing.TB, addr string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil && strings.HasPrefix(line, "SSH-2.0-") {
			c.SetReadDeadline(time.Time{})
			return c
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("sshd never let a connection through to its banner (last: %q, %v)", line, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// connectionLines counts sshd's "Connection from" log lines: one per TCP
// connection sshd took on (connections dropped past MaxStartups are not
// logged this way).
func connectionLines(s *sshdtest.Server) int {
	return len(connectionLine.FindAllString(s.Logs(), -1))
}

var connectionLine = regexp.MustCompile(`(?m)Connection from 127\.0\.0\.1 port \d+ on `)

func TestHandshakeRetriesPastMaxStartups(t *testing.T) {
	// sshd takes a single unauthenticated connection at a time and drops
	// every other one ("MaxStartups 1:100:1"), while the binding allows 8
	// concurrent handshakes to the host: most first attempts are dropped
	// during the handshake, and only the jittered retries get them through.
	// Retries are many and short so that the test stays fast and cannot
	// run out of attempts by bad luck: with 8 callers queueing for one
	// slot a call needs about 4 retries on average, and 10 retries from
	// 20 ms bound a call's back-off to about 20 s (typically 1-3 s).
	e := newEnv(t, sshdtest.Config{MaxStartups: "1:100:1"}, &Options{
		HandshakesPerHost: 8, DialRetries: 10, RetryBase: 20 * time.Millisecond,
	})

	// Hold sshd's only startup slot, so that every first attempt is
	// dropped whatever the scheduling, then free it once they have been.
	hold := holdStartup(t, e.addr())
	defer hold.Close()
	const n = 8
	runPrivateConnections(t, e, n, func() {
		eventually(t, "the first handshakes to be dropped and retried", func() bool { return e.stat("handshake_retries") >= 8 })
		hold.Close()
	})
	if !strings.Contains(e.srv.Logs(), "past MaxStartups") {
		t.Fatalf("sshd's log shows no connection dropped past MaxStartups:\n%s", e.srv.Logs())
	}
	if e.stat("dial_failures") != 0 || e.stat("connections_opened") != n || e.stat("handshakes_in_flight") != 0 {
		t.Fatalf("stats: %v", e.b.Stats())
	}
	t.Logf("stats: %v", e.b.Stats())

	// Auth and host-key failures are never retried, with the same retry
	// settings. They are checked on a second sshd with the default
	// MaxStartups: on this one, a failed connection's sshd process can
	// still hold the only startup slot when the next dial arrives, and
	// that dial's drop would be retried, rightly.
	plain := sshdtest.Start(t, sshdtest.Config{})
	e.L.SetGlobal("PPORT", lua.LNumber(plain.Port))
	e.L.SetGlobal("PPIN", lua.LString(blob(plain.HostKeys["ed25519"])))
	e.L.SetGlobal("WRONG", lua.LString(blob(randomKey(t))))
	retries := e.stat("handshake_retries")
	conns := connectionLines(plain) // sshdtest's readiness probe
	et := e.luaErr(`ssh.connect{host=HOST, port=PPORT, user=USER, password="not-" .. PASSWORD, host_key={pinned={PPIN}}}`)
	wantKind(t, et, "auth", plain.Addr)
	et = e.luaErr(`ssh.connect{host=HOST, port=PPORT, user=USER, key=KEY, host_key={pinned={WRONG}}}`)
	wantKind(t, et, "host_key", plain.Addr)
	if got := e.stat("handshake_retries"); got != retries {
		t.Fatalf("handshake_retries went from %v to %v: an auth or host-key failure was retried", retries, got)
	}
	if got := e.stat("dial_failures"); got != 2 {
		t.Fatalf("dial_failures = %v, want 2", got)
	}
	// One TCP connection each. sshd logs a connection as it forks for it:
	// wait for the two lines, then check there are no more.
	eventually(t, "sshd to log the two connections", func() bool { return connectionLines(plain) >= conns+2 })
	if got := connectionLines(plain) - conns; got != 2 {
		t.Fatalf("sshd saw %d TCP connections for one wrong password and one wrong host key, want 2", got)
	}
	if got := strings.Count(plain.Logs(), "Failed password for "+plain.User); got != 1 {
		t.Fatalf("sshd logged %d failed passwords, want 1", got)
	}
	if got := plain.Accepted(); got != 0 {
		t.Fatalf("sshd accepted %d logins, want 0", got)
	}
}

func TestBastionDiesMidCommand(t *testing.T) {
	// Two sshds: the target (the env's) and a bastion. The bastion's own
	// per-connection process is killed while a command runs on the target
	// through it.
	e := newEnv(t, sshdtest.Config{}, nil)
	bastion := sshdtest.Start(t, sshdtest.Config{})
	const sleeper = "sleep 3624"
	t.Cleanup(func() {
		// The target's sshd may leave the orphaned command running once
		// its connection is gone; end it (it is ours, by its command line).
		for _, pid := range sshdtest.ProcessesMatching(sleeper) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	setJump := func(L *lua.LState) {
		L.SetGlobal("BPORT", lua.LNumber(bastion.Port))
		L.SetGlobal("BKEY", lua.LString(bastion.KeyPEM))
		L.SetGlobal("BPIN", lua.LString(blob(bastion.HostKeys["ed25519"])))
		runIn(t, L, `JUMP = {host=HOST, port=BPORT, user=USER, key=BKEY, host_key={pinned={BPIN}}}`)
	}
	setJump(e.L)
	e.run(`c = conn(USER, {jump=JUMP}); assert(c:exec("true").ok)`)
	if bastion.Accepted() != 1 || e.srv.Accepted() != 1 {
		t.Fatalf("accepted: bastion %d, target %d; want 1 and 1", bastion.Accepted(), e.srv.Accepted())
	}

	L2 := e.newState()
	setJump(L2)
	done := make(chan *lua.LTable, 1)
	go func() {
		runIn(t, L2, `c = conn(USER, {jump=JUMP})`)
		done <- luaErrIn(t, L2, `c:exec("`+sleeper+`")`)
	}()
	eventually(t, "the command to start on the target", func() bool { return len(sshdtest.ProcessesMatching(sleeper)) > 0 })
	if bastion.KillConnections() == 0 {
		t.Fatal("no bastion sshd connection process to kill")
	}
	var et *lua.LTable
	select {
	case et = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the command through the dead bastion did not fail")
	}
	wantKind(t, et, "transport_lost", "was not retried", e.addr())

	// Both the bastion's entry and the target's tunnelled one are gone.
	eventually(t, "the bastion and the tunnelled connection to be evicted", func() bool {
		return e.stat("connections_evicted") == 2 && e.stat("connections_open") == 0
	})

	// The same handle reconnects on its next call, through a fresh bastion
	// connection.
	e.run(`r = c:exec("echo back", {check=true})`)
	if got := e.str("r.stdout"); got != "back\n" {
		t.Fatalf("after reconnect: %q", got)
	}
	if got := bastion.Accepted(); got != 2 {
		t.Fatalf("the bastion accepted %d logins, want 2 (one reconnect)", got)
	}
	if got := e.srv.Accepted(); got != 2 {
		t.Fatalf("the target accepted %d logins, want 2 (one reconnect)", got)
	}
	if e.stat("connections_opened") != 4 || e.stat("connections_open") != 2 {
		t.Fatalf("stats: %v", e.b.Stats())
	}
}
