package ssh

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EarlyDials are TCP connections opened before the hook that uses them
// asks. A one-shot `loomd run` opens one to its task's node before it
// loads its plugins: sshd starts a process for every connection (a fork
// and an exec, about 9 ms on an idle machine and more under load) before
// it sends its banner, and that start now overlaps loomd's own instead of
// following it. Only the TCP connection is made early: the SSH handshake,
// the host key check and authentication happen when the plugin connects,
// as for any other connection. A connection no plugin asks for is closed
// by Close. Set Options.EarlyDials to use them; the zero value is ready.
type EarlyDials struct {
	mu     sync.Mutex
	m      map[string]*earlyDial
	closed bool
}

type earlyDial struct {
	done chan struct{}
	conn net.Conn
	err  error
	at   time.Time
}

// earlyMaxAge bounds how long an early connection waits for its plugin:
// sshd closes a connection that does not log in within LoginGraceTime
// (120 s by default), and an older one is not worth the risk.
const earlyMaxAge = 30 * time.Second

// Start dials addr (host:port) in the background, once per address, with
// timeout on the TCP connect.
func (e *EarlyDials) Start(addr string, timeout time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.m[addr] != nil {
		return
	}
	if e.m == nil {
		e.m = map[string]*earlyDial{}
	}
	d := &earlyDial{done: make(chan struct{}), at: time.Now()}
	e.m[addr] = d
	go func() {
		nd := net.Dialer{Timeout: timeout}
		d.conn, d.err = nd.Dial("tcp", addr)
		close(d.done)
	}()
}

// take hands over the early connection to addr, once, waiting for its
// dial to end, within the caller's connect timeout when it is positive
// (past it, take fails as a dial would: a timeout). It returns no
// connection and no error when there is none, when the caller's context
// ends first, when its dial failed (the caller dials again and reports
// its own error) or when it is older than earlyMaxAge.
func (e *EarlyDials) take(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	if e == nil {
		return nil, nil
	}
	e.mu.Lock()
	d := e.m[addr]
	delete(e.m, addr)
	e.mu.Unlock()
	if d == nil {
		return nil, nil
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-d.done:
	case <-ctx.Done():
		go closeWhenDone(d)
		return nil, nil
	case <-expired:
		go closeWhenDone(d)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	}
	if d.err != nil {
		return nil, nil
	}
	if time.Since(d.at) > earlyMaxAge {
		d.conn.Close()
		return nil, nil
	}
	return d.conn, nil
}

// Close closes the early connections no one took, and those still being
// dialled once their dial ends. Start does nothing after Close.
func (e *EarlyDials) Close() {
	e.mu.Lock()
	e.closed = true
	left := e.m
	e.m = nil
	e.mu.Unlock()
	for _, d := range left {
		go closeWhenDone(d)
	}
}

func closeWhenDone(d *earlyDial) {
	<-d.done
	if d.conn != nil {
		d.conn.Close()
	}
}

// TaskNodeAddr is the host:port ssh.from_input connects to for a Coopr
// automator task (its raw JSON): config.ipaddresses.access_v4, else
// config.ipaddress, on config["ssh-auth"].port or 22. It is "" for a
// provider task, a BOOTSTRAP with no automators and a task with no
// address: nothing to dial early.
func TaskNodeAddr(task []byte) string {
	var t struct {
		TaskName string `json:"taskName"`
		Config   struct {
			IPAddresses struct {
				AccessV4 string `json:"access_v4"`
			} `json:"ipaddresses"`
			IPAddress  string          `json:"ipaddress"`
			Automators []string        `json:"automators"`
			SSHAuth    json.RawMessage `json:"ssh-auth"`
		} `json:"config"`
	}
	if json.Unmarshal(task, &t) != nil {
		return ""
	}
	switch strings.ToUpper(t.TaskName) {
	case "BOOTSTRAP":
		if len(t.Config.Automators) == 0 {
			return ""
		}
	case "INSTALL", "CONFIGURE", "INITIALIZE", "START", "STOP", "REMOVE", "CHECK":
	default:
		return ""
	}
	host := t.Config.IPAddresses.AccessV4
	if host == "" {
		host = t.Config.IPAddress
	}
	if host == "" {
		return ""
	}
	port := 22
	var auth struct {
		Port json.RawMessage `json:"port"`
	}
	if len(t.Config.SSHAuth) > 0 && json.Unmarshal(t.Config.SSHAuth, &auth) == nil && len(auth.Port) > 0 {
		// A number, or a string of one, as from_input reads it.
		s := strings.Trim(strings.TrimSpace(string(auth.Port)), `"`)
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 && n < 65536 {
			port = n
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
