package cli

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// loomd serve on a NATS that cannot create the queue's streams (here a
// server without JetStream: no responders, as from a cluster whose
// JetStream is not up yet) waits, warning what it waits for, with no API
// listening (/healthz does not answer before the queue is open); it
// exits once --start-timeout ran out, naming what is missing and the
// flags to change, and at a signal during the wait (--start-timeout 0).
func TestServeStartWaitsForNATS(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	serve := func(timeout string) (p *inProcess, addr string) {
		addr = freeAddr(t)
		return serveInProcess(t, addr, "--nats", ns.ClientURL(), "--replicas", "3", "--start-timeout", timeout), addr
	}
	waitWarned := func(p *inProcess, addr string) {
		t.Helper()
		for !strings.Contains(p.logs.String(), "waiting for the NATS cluster to create or open") {
			select {
			case c := <-p.code:
				t.Fatalf("loomd exited with %d before waiting:\n%s", c, p.logs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("/healthz answered %d while the queue was not open", resp.StatusCode)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		p, addr := serve("3s")
		waitWarned(p, addr)
		if c := <-p.code; c == 0 {
			t.Fatalf("loomd exited 0 after --start-timeout:\n%s", p.logs)
		}
		out := p.logs.String()
		for _, want := range []string{"creating stream LOOM_TASKS", "--start-timeout 3s ran out", "(3 replicas)", "with --replicas 3, each stream needs 3 JetStream servers", "what to do: no NATS server answered", "no responders"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
	})
	t.Run("signal", func(t *testing.T) {
		p, addr := serve("0")
		waitWarned(p, addr)
		p.terminatedDuringStart(t)
	})
}

// When the streams and buckets opened after the API listens (the cluster
// jobs', the task logs') cannot be created, loomd says which and why,
// and exits non-zero, rather than serving without them. Here the NATS
// account allows only the queue's 19 streams.
func TestServeLatePartsFail(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": {MaxMemory: -1, MaxStore: -1, MaxStreams: 19, MaxConsumers: -1}}); err != nil {
		t.Fatal(err)
	}
	p := serveInProcess(t, "127.0.0.1:0", "--nats", ns.ClientURL(), "--start-timeout", "20s")
	select {
	case c := <-p.code:
		out := p.logs.String()
		if c == 0 {
			t.Fatalf("loomd exited 0 without its cluster jobs and task logs:\n%s", out)
		}
		for _, want := range []string{"cannot open the cluster jobs and task logs; loomd exits", "maximum number of streams"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "loomd serving") {
			t.Errorf("loomd said it served:\n%s", out)
		}
	case <-time.After(time.Minute):
		t.Fatalf("loomd still running a minute later:\n%s", p.logs)
	}
}

// With no NATS server reachable at all (--nats on a closed port), loomd
// serve waits for one like for the rest of the start: it warns naming
// the URL and what to do, exits once --start-timeout ran out naming what
// was missing, ends the wait at a signal, and starts once a server
// comes up on the port.
func TestServeStartWaitsForTheServer(t *testing.T) {
	serve := func(natsAddr, timeout string) (p *inProcess, addr string) {
		addr = freeAddr(t)
		return serveInProcess(t, addr, "--nats", "nats://"+natsAddr, "--start-timeout", timeout), addr
	}
	waitWarned := func(p *inProcess, natsAddr string) {
		t.Helper()
		want := "waiting for the NATS cluster to create or open a connection to the NATS server at nats://" + natsAddr + " (--nats)"
		for !strings.Contains(p.logs.String(), want) {
			select {
			case c := <-p.code:
				t.Fatalf("loomd exited with %d before waiting:\n%s", c, p.logs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if !strings.Contains(p.logs.String(), "start the NATS server, or check --nats") {
			t.Errorf("the warning does not say what to do:\n%s", p.logs)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		natsAddr := freeAddr(t)
		p, _ := serve(natsAddr, "3s")
		waitWarned(p, natsAddr)
		if c := <-p.code; c == 0 {
			t.Fatalf("loomd exited 0 after --start-timeout:\n%s", p.logs)
		}
		out := p.logs.String()
		for _, want := range []string{"connecting to nats at nats://" + natsAddr, "--start-timeout 3s ran out", "no servers available", "is the server running and reachable?"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
	})
	t.Run("signal", func(t *testing.T) {
		natsAddr := freeAddr(t)
		p, _ := serve(natsAddr, "0")
		waitWarned(p, natsAddr)
		p.terminatedDuringStart(t)
	})
	t.Run("server comes up", func(t *testing.T) {
		natsAddr := freeAddr(t)
		p, addr := serve(natsAddr, "2m")
		waitWarned(p, natsAddr)
		host, port, _ := net.SplitHostPort(natsAddr)
		pn, _ := strconv.Atoi(port)
		ns, err := server.NewServer(&server.Options{Host: host, Port: pn, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		defer ns.Shutdown()
		p.waitHealthz(t, addr, 50*time.Millisecond, time.Minute)
		p.sigs <- syscall.SIGTERM
		if c := <-p.code; c != 0 {
			t.Fatalf("loomd exited with %d at SIGTERM:\n%s", c, p.logs)
		}
	})
}

// terminatedDuringStart sends SIGTERM to a loomd still waiting in its
// start and checks it ends with a non-zero exit saying so.
func (p *inProcess) terminatedDuringStart(t *testing.T) {
	t.Helper()
	p.sigs <- syscall.SIGTERM
	select {
	case c := <-p.code:
		if c == 0 || !strings.Contains(p.logs.String(), "terminated during the start") {
			t.Fatalf("loomd exited with %d at SIGTERM during the start:\n%s", c, p.logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("loomd still waiting a minute after SIGTERM:\n%s", p.logs)
	}
}

// SIGTERM as soon as /healthz answers (the consumers, cluster jobs and
// task logs may still be opening then) stops loomd cleanly: exit 0.
func TestServeSignalRightAfterHealthz(t *testing.T) {
	addr := freeAddr(t)
	p := serveInProcess(t, addr, "--isolation", "none", "--watch=false")
	p.waitHealthz(t, addr, 2*time.Millisecond, time.Minute)
	p.sigs <- syscall.SIGTERM
	select {
	case c := <-p.code:
		if c != 0 {
			t.Fatalf("loomd exited with %d at SIGTERM right after /healthz:\n%s", c, p.logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("loomd still running a minute after SIGTERM:\n%s", p.logs)
	}
}
