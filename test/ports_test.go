package test

import (
	"net"
	"os"
	"strings"
	"testing"
)

// TestDaemonAPIPortTaken: the API port startDaemon chose is taken before
// loomd binds it (by a process of a test package running beside this
// one; here by the test itself). loomd exits saying so, and startDaemon
// starts it again on another port instead of failing the test, which the
// helper did before. The daemon's log holds no line of the failed try.
func TestDaemonAPIPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().String()
	picks := 0
	apiPort = func(t *testing.T) string {
		picks++
		if picks == 1 {
			return taken
		}
		return freePort(t)
	}
	defer func() { apiPort = freePort }()

	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "serve.log", nil)
	if picks != 2 || d.addr == taken {
		t.Fatalf("loomd listens on %s after %d picks; want a second port, %s being taken", d.addr, picks, taken)
	}
	if code, body := d.call("GET", "/healthz", ""); code != 200 {
		t.Fatalf("GET /healthz on the second port: %d %s", code, body)
	}
	data, err := os.ReadFile(d.log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "address already in use") {
		t.Errorf("the failed try's lines are still in the log:\n%s", d.logTail())
	}
}
