package cli

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// freeAddr is a loopback address nothing listens on (a port just
// released), for --listen or a NATS server started later.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// inProcess is a loomd command running in this process: its log, the
// signals it reads and its exit code once it ends.
type inProcess struct {
	logs *lockedBuffer
	sigs chan os.Signal
	code chan int
}

// runInProcess runs loomd with args in the background, env as its
// environment.
func runInProcess(env map[string]string, args ...string) *inProcess {
	p := &inProcess{logs: &lockedBuffer{}, sigs: make(chan os.Signal, 2), code: make(chan int, 1)}
	app := testApp(env, &bytes.Buffer{}, p.logs)
	app.Signals = p.sigs
	go func() { p.code <- app.Execute(args) }()
	return p
}

// serveInProcess runs `loomd serve` on the example plugins with its work
// dir and data in a temp dir, listening on addr, with more flags.
func serveInProcess(t *testing.T, addr string, more ...string) *inProcess {
	dir := t.TempDir()
	args := append([]string{"serve", "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"),
		"--data", filepath.Join(dir, "data"), "--listen", addr}, more...)
	return runInProcess(map[string]string{}, args...)
}

// waitHealthz polls /healthz on addr every poll until it answers 200,
// failing the test if loomd exits first or within passes.
func (p *inProcess) waitHealthz(t *testing.T, addr string, poll, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case c := <-p.code:
			t.Fatalf("loomd exited with %d before /healthz answered:\n%s", c, p.logs)
		case <-time.After(poll):
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not answering within %v:\n%s", within, p.logs)
		}
	}
}
