package cli

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	serve := func(timeout string) (logs *lockedBuffer, sigs chan os.Signal, code chan int, addr string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
		dir := t.TempDir()
		logs = &lockedBuffer{}
		sigs = make(chan os.Signal, 2)
		app := testApp(map[string]string{}, &bytes.Buffer{}, logs)
		app.Signals = sigs
		code = make(chan int, 1)
		go func() {
			code <- app.Execute([]string{"serve", "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"),
				"--data", filepath.Join(dir, "data"), "--listen", addr, "--nats", ns.ClientURL(), "--replicas", "3", "--start-timeout", timeout})
		}()
		return logs, sigs, code, addr
	}
	waitWarned := func(logs *lockedBuffer, code chan int, addr string) {
		t.Helper()
		for !strings.Contains(logs.String(), "waiting for the NATS cluster to create or open") {
			select {
			case c := <-code:
				t.Fatalf("loomd exited with %d before waiting:\n%s", c, logs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			t.Fatalf("/healthz answered %d while the queue was not open", resp.StatusCode)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		logs, _, code, addr := serve("3s")
		waitWarned(logs, code, addr)
		if c := <-code; c == 0 {
			t.Fatalf("loomd exited 0 after --start-timeout:\n%s", logs)
		}
		out := logs.String()
		for _, want := range []string{"creating stream LOOM_TASKS", "--start-timeout 3s ran out", "(3 replicas)", "with --replicas 3, each stream needs 3 JetStream servers", "what to do: no NATS server answered", "no responders"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
	})
	t.Run("signal", func(t *testing.T) {
		logs, sigs, code, addr := serve("0")
		waitWarned(logs, code, addr)
		sigs <- syscall.SIGTERM
		select {
		case c := <-code:
			if c == 0 || !strings.Contains(logs.String(), "terminated during the start") {
				t.Fatalf("loomd exited with %d at SIGTERM during the start:\n%s", c, logs)
			}
		case <-time.After(time.Minute):
			t.Fatalf("loomd still waiting a minute after SIGTERM:\n%s", logs)
		}
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
	dir := t.TempDir()
	logs := &lockedBuffer{}
	app := testApp(map[string]string{}, &bytes.Buffer{}, logs)
	app.Signals = make(chan os.Signal, 2)
	code := make(chan int, 1)
	go func() {
		code <- app.Execute([]string{"serve", "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"),
			"--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--nats", ns.ClientURL(), "--start-timeout", "20s"})
	}()
	select {
	case c := <-code:
		out := logs.String()
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
		t.Fatalf("loomd still running a minute later:\n%s", logs)
	}
}

// With no NATS server reachable at all (--nats on a closed port), loomd
// serve waits for one like for the rest of the start: it warns naming
// the URL and what to do, exits once --start-timeout ran out naming what
// was missing, ends the wait at a signal, and starts once a server
// comes up on the port.
func TestServeStartWaitsForTheServer(t *testing.T) {
	freePort := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	serve := func(natsAddr, timeout string) (logs *lockedBuffer, sigs chan os.Signal, code chan int, addr string) {
		addr = freePort()
		dir := t.TempDir()
		logs = &lockedBuffer{}
		sigs = make(chan os.Signal, 2)
		app := testApp(map[string]string{}, &bytes.Buffer{}, logs)
		app.Signals = sigs
		code = make(chan int, 1)
		go func() {
			code <- app.Execute([]string{"serve", "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"),
				"--data", filepath.Join(dir, "data"), "--listen", addr, "--nats", "nats://" + natsAddr, "--start-timeout", timeout})
		}()
		return logs, sigs, code, addr
	}
	waitWarned := func(logs *lockedBuffer, code chan int, natsAddr string) {
		t.Helper()
		want := "waiting for the NATS cluster to create or open a connection to the NATS server at nats://" + natsAddr + " (--nats)"
		for !strings.Contains(logs.String(), want) {
			select {
			case c := <-code:
				t.Fatalf("loomd exited with %d before waiting:\n%s", c, logs)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if !strings.Contains(logs.String(), "start the NATS server, or check --nats") {
			t.Errorf("the warning does not say what to do:\n%s", logs)
		}
	}

	t.Run("timeout", func(t *testing.T) {
		natsAddr := freePort()
		logs, _, code, _ := serve(natsAddr, "3s")
		waitWarned(logs, code, natsAddr)
		if c := <-code; c == 0 {
			t.Fatalf("loomd exited 0 after --start-timeout:\n%s", logs)
		}
		out := logs.String()
		for _, want := range []string{"connecting to nats at nats://" + natsAddr, "--start-timeout 3s ran out", "no servers available", "is the server running and reachable?"} {
			if !strings.Contains(out, want) {
				t.Errorf("the output does not say %q:\n%s", want, out)
			}
		}
	})
	t.Run("signal", func(t *testing.T) {
		natsAddr := freePort()
		logs, sigs, code, _ := serve(natsAddr, "0")
		waitWarned(logs, code, natsAddr)
		sigs <- syscall.SIGTERM
		select {
		case c := <-code:
			if c == 0 || !strings.Contains(logs.String(), "terminated during the start") {
				t.Fatalf("loomd exited with %d at SIGTERM during the start:\n%s", c, logs)
			}
		case <-time.After(time.Minute):
			t.Fatalf("loomd still waiting a minute after SIGTERM:\n%s", logs)
		}
	})
	t.Run("server comes up", func(t *testing.T) {
		natsAddr := freePort()
		logs, sigs, code, addr := serve(natsAddr, "2m")
		waitWarned(logs, code, natsAddr)
		host, port, _ := net.SplitHostPort(natsAddr)
		p, _ := strconv.Atoi(port)
		ns, err := server.NewServer(&server.Options{Host: host, Port: p, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		ns.Start()
		defer ns.Shutdown()
		deadline := time.Now().Add(time.Minute)
		for {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case c := <-code:
				t.Fatalf("loomd exited with %d after the server came up:\n%s", c, logs)
			case <-time.After(50 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("/healthz not answering a minute after the server came up:\n%s", logs)
			}
		}
		sigs <- syscall.SIGTERM
		if c := <-code; c != 0 {
			t.Fatalf("loomd exited with %d at SIGTERM:\n%s", c, logs)
		}
	})
}

// SIGTERM as soon as /healthz answers (the consumers, cluster jobs and
// task logs may still be opening then) stops loomd cleanly: exit 0.
func TestServeSignalRightAfterHealthz(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	logs := &lockedBuffer{}
	sigs := make(chan os.Signal, 2)
	app := testApp(map[string]string{}, &bytes.Buffer{}, logs)
	app.Signals = sigs
	code := make(chan int, 1)
	go func() {
		code <- app.Execute([]string{"serve", "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"),
			"--data", filepath.Join(dir, "data"), "--listen", addr, "--isolation", "none", "--watch=false"})
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case c := <-code:
			t.Fatalf("loomd exited with %d before /healthz answered:\n%s", c, logs)
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not answering after a minute:\n%s", logs)
		}
	}
	sigs <- syscall.SIGTERM
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("loomd exited with %d at SIGTERM right after /healthz:\n%s", c, logs)
		}
	case <-time.After(time.Minute):
		t.Fatalf("loomd still running a minute after SIGTERM:\n%s", logs)
	}
}
