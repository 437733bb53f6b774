package natstest

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestStartOnATakenPort: a server killed and started again finds one of
// its old ports taken by another process (what a test package running
// beside this one does when it asks the system for a free port): n1 its
// route port, then n2 its client port. Each comes back on a port the
// system assigns, the test log says so, the cluster places a 3-replica
// stream again (the server is back as a peer) and the server answers on
// its new client URL. The helpers this package replaced started a server
// on its old ports only: it exited ("address already in use") and the
// cluster was never ready, failing the test after a 2-minute wait.
func TestStartOnATakenPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	if err := Build(bin); err != nil {
		t.Skip(err)
	}
	var mu sync.Mutex
	var logged []string
	c := Start(t, Config{Bin: bin, Logf: func(format string, args ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(format, args...))
		mu.Unlock()
		t.Logf(format, args...)
	}})
	for _, tc := range []struct{ name, port string }{{"n1", "route"}, {"n2", "client"}} {
		i := c.index(tc.name)
		port := func() int {
			c.mu.Lock()
			defer c.mu.Unlock()
			if tc.port == "route" {
				return c.servers[i].route
			}
			return c.servers[i].client
		}
		c.Kill9(tc.name)
		old := port()
		// Taken as another process would take it. Should one already
		// hold it, it is taken all the same.
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", old)); err == nil {
			defer ln.Close()
		} else {
			t.Logf("%s's old %s port %d is already taken: %v", tc.name, tc.port, old, err)
		}
		if err := c.Start(tc.name); err != nil {
			t.Fatalf("%s with its old %s port taken: %v", tc.name, tc.port, err)
		}
		if now := port(); now == old {
			t.Fatalf("%s listens on its old %s port %d, which is taken", tc.name, tc.port, old)
		}
		mu.Lock()
		said := strings.Join(logged, "\n")
		mu.Unlock()
		if want := fmt.Sprintf("%s could not listen again on its %s port %d", tc.name, tc.port, old); !strings.Contains(said, want) {
			t.Errorf("the test log does not say %q:\n%s", want, said)
		}
		c.WaitReady()
		nc, err := nats.Connect(c.URLs()[i], nats.DontRandomize(), nats.NoReconnect())
		if err != nil {
			t.Fatalf("%s's new client URL %s: %v", tc.name, c.URLs()[i], err)
		}
		if got := nc.ConnectedServerName(); got != tc.name {
			t.Errorf("%s's new client URL reaches %q", tc.name, got)
		}
		nc.Close()
	}
	if got := strings.Join(c.Running(), " "); got != "n0 n1 n2" {
		t.Errorf("running: %s, want n0 n1 n2", got)
	}
}

// The ports a server listens on are read from its log when it wrote no
// ports file (it gives up on one after 5 s).
func TestLogPort(t *testing.T) {
	log := "[1] 2026/11/26 11:00:00.000000 [INF] Listening for client connections on 127.0.0.1:40123\n" +
		"[1] 2026/11/26 11:00:00.000100 [INF] Listening for route connections on 127.0.0.1:40125\n"
	if p := logPort(log, "Listening for client connections on "); p != 40123 {
		t.Errorf("client port %d, want 40123", p)
	}
	if p := logPort(log, "Listening for route connections on "); p != 40125 {
		t.Errorf("route port %d, want 40125", p)
	}
	if p := logPort(log[:20], "Listening for route connections on "); p != 0 {
		t.Errorf("no line: port %d, want 0", p)
	}
}
