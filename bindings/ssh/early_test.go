package ssh

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

// TestEarlyDialTaken: the first connection to an address dialled early
// takes that TCP connection (the server accepted one, not two); the next
// dials anew; an early dial no one takes is closed by Close.
func TestEarlyDialTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	addr := ln.Addr().String()
	e := &EarlyDials{}
	e.Start(addr, 5*time.Second)
	e.Start(addr, 5*time.Second) // once per address
	first := <-accepted
	defer first.Close()

	o := Options{EarlyDials: e}
	c, err := o.dialTCP(context.Background(), 0, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*quickAckConn); !ok {
		t.Errorf("the early connection is a %T, want the quick-ACK connection", c)
	}
	// It is the connection the server accepted first.
	if _, err := first.Write([]byte("banner")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "banner" {
		t.Fatalf("read %q, %v from the taken connection, want the first accepted one's banner", buf, err)
	}
	select {
	case extra := <-accepted:
		extra.Close()
		t.Fatal("the server accepted a second connection: the early one was not taken")
	case <-time.After(100 * time.Millisecond):
	}

	c2, err := o.dialTCP(context.Background(), 0, addr)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	(<-accepted).Close() // the second dial is a new connection

	// An untaken early connection is closed by Close; Start after Close
	// dials nothing.
	e.Start(addr, 5*time.Second)
	unused := <-accepted
	defer unused.Close()
	e.Close()
	_ = unused.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := unused.Read(buf); err != io.EOF {
		t.Fatalf("the untaken early connection read %d bytes, %v; want EOF (closed)", n, err)
	}
	e.Start(addr, 5*time.Second)
	select {
	case extra := <-accepted:
		extra.Close()
		t.Fatal("Start after Close dialled")
	case <-time.After(100 * time.Millisecond):
	}
}

// TestEarlyDialFailedFallsBack: an early dial that failed is not reused:
// the connection is dialled again and reports its own error.
func TestEarlyDialFailedFallsBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused
	e := &EarlyDials{}
	defer e.Close()
	e.Start(addr, 5*time.Second)
	if c, err := e.take(context.Background(), addr, 0); c != nil || err != nil {
		t.Fatalf("a refused early dial handed out %v, %v; want nothing (the caller dials again)", c, err)
	}
	if _, err := (Options{EarlyDials: e}).dialTCP(context.Background(), 0, addr); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("dial after a refused early dial: %v, want connection refused", err)
	}
}

// TestEarlyDialTimeout: waiting for an early dial that has not ended
// counts against the caller's connect timeout, and fails as a dial that
// timed out would.
func TestEarlyDialTimeout(t *testing.T) {
	const addr = "192.0.2.1:22" // never dialled: the early dial is a stand-in that does not end
	e := &EarlyDials{m: map[string]*earlyDial{addr: {done: make(chan struct{}), at: time.Now()}}}
	_, err := (Options{EarlyDials: e}).dialTCP(context.Background(), 50*time.Millisecond, addr)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("dial while the early one hangs past the connect timeout: %v, want a timeout", err)
	}
	if de := classifyTCP(context.Background(), &connConfig{host: "192.0.2.1", port: 22, connectTimeout: 50 * time.Millisecond}, err); !strings.Contains(de.err.Message, "TCP connect timed out") {
		t.Errorf("classified as %q, want the TCP connect timeout", de.err.Message)
	}
}

// TestEarlyDialLogin: against a real sshd, a connection through the
// binding logs in over the early TCP connection (sshd saw one connection
// and one login) and runs a command.
func TestEarlyDialLogin(t *testing.T) {
	e := &EarlyDials{}
	defer e.Close()
	env := newEnv(t, sshdtest.Config{}, &Options{EarlyDials: e})
	conns := func() int { return strings.Count(env.srv.Logs(), "Connection from") }
	before := conns() // sshdtest's own probe of the banner
	e.Start(env.addr(), 5*time.Second)
	eventually(t, "sshd to log the early connection", func() bool { return conns() == before+1 })
	if got := env.str(`return conn():exec("echo early").stdout`); got != "early\n" {
		t.Fatalf("exec over the early connection: %q", got)
	}
	if n := conns() - before; n != 1 {
		t.Errorf("sshd logged %d connections, want 1 (the early one)", n)
	}
	if n := env.srv.Accepted(); n != 1 {
		t.Errorf("sshd accepted %d logins, want 1", n)
	}
}

func TestTaskNodeAddr(t *testing.T) {
	for _, c := range []struct{ task, want string }{
		{`{"taskName":"INSTALL","config":{"ipaddresses":{"access_v4":"10.0.0.5"}}}`, "10.0.0.5:22"},
		{`{"taskName":"install","config":{"ipaddress":"10.0.0.6","ssh-auth":{"port":2222}}}`, "10.0.0.6:2222"},
		{`{"taskName":"START","config":{"ipaddresses":{"access_v4":"::1"},"ssh-auth":{"port":"2200"}}}`, "[::1]:2200"},
		{`{"taskName":"BOOTSTRAP","config":{"automators":["shell"],"ipaddresses":{"access_v4":"10.0.0.7"}}}`, "10.0.0.7:22"},
		{`{"taskName":"BOOTSTRAP","config":{"ipaddresses":{"access_v4":"10.0.0.7"}}}`, ""}, // runs nothing
		{`{"taskName":"CONFIRM","config":{"ipaddresses":{"access_v4":"10.0.0.8"}}}`, ""},   // a provider's
		{`{"taskName":"INSTALL","config":{}}`, ""},
		{`not json`, ""},
	} {
		if got := TaskNodeAddr([]byte(c.task)); got != c.want {
			t.Errorf("TaskNodeAddr(%s) = %q, want %q", c.task, got, c.want)
		}
	}
}
