package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is a goroutine-safe buffer for a daemon's logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func testApp(env map[string]string, out, errw interface{ Write([]byte) (int, error) }) *App {
	return &App{In: strings.NewReader(""), Out: out, Err: errw, Version: "test",
		Getenv: func(k string) string { return env[k] }}
}

// loomd with only flags serves; clients submit and read tasks; SIGTERM
// drains and exits 0. Everything runs in process, under -race.
func TestServeInProcess(t *testing.T) {
	addr := freeAddr(t)
	dir := t.TempDir()
	// Settings from a TOML file and the environment.
	cfg := filepath.Join(dir, "loomd.toml")
	if err := os.WriteFile(cfg, []byte("concurrency = 2\nshutdown-timeout = \"20s\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LOOM_LISTEN": addr, "LOOM_DATA": filepath.Join(dir, "data")}
	gcBefore := debug.SetGCPercent(-1)
	debug.SetGCPercent(gcBefore)
	p := runInProcess(env, "--plugins", "../../examples/plugins", "--work-dir", filepath.Join(dir, "work"), "--config", cfg)
	logs, sigs, code := p.logs, p.sigs, p.code
	p.waitHealthz(t, addr, 10*time.Millisecond, 30*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	// The API answers before the "loomd serving" line is logged (it is
	// written once the consumers run), so wait for the line itself.
	for !strings.Contains(logs.String(), "loomd serving") {
		if time.Now().After(deadline) {
			t.Fatalf("loomd did not log \"loomd serving\" within 30s:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "concurrency=2") {
		t.Errorf("the config file's concurrency did not apply:\n%s", logs)
	}
	// The collector's setting for the start is undone shortly after it
	// serves (read without setting it, which would race with that).
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	for metrics.Read(gogc); gogc[0].Value.Uint64() != uint64(gcBefore); metrics.Read(gogc) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC is %d after serving, want %d as before the start", gogc[0].Value.Uint64(), gcBefore)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// loomd submit --wait prints the result and exits 0.
	var out, errb bytes.Buffer
	c := testApp(map[string]string{"LOOM_SERVER": "http://" + addr}, &out, &errb).
		Execute([]string{"submit", "--wait", "../../examples/tasks/create.json"})
	if c != 0 || !strings.Contains(out.String(), `"providerid"`) {
		t.Fatalf("submit --wait = %d\n%s\n%s", c, out.String(), errb.String())
	}
	var res struct {
		TaskID string `json:"taskId"`
		Status int    `json:"status"`
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || res.TaskID != "00000042-001-001" {
		t.Errorf("result = %s (%v)", out.String(), err)
	}
	// A malformed task: exit 2 with the reason.
	out.Reset()
	errb.Reset()
	a2 := testApp(map[string]string{"LOOM_SERVER": addr}, &out, &errb)
	a2.In = strings.NewReader(`{"taskName": "INSTALL", "config": {}}`)
	if c := a2.Execute([]string{"submit", "-"}); c != ExitUsage || !strings.Contains(errb.String(), "invalid task") {
		t.Errorf("malformed submit = %d: %s", c, errb.String())
	}
	// task get / list / wait, as JSON (not a terminal) and as tables.
	out.Reset()
	if c := testApp(map[string]string{"LOOM_SERVER": addr}, &out, &errb).Execute([]string{"task", "list", "--state", "succeeded"}); c != 0 || !strings.Contains(out.String(), `"00000042-001-001"`) {
		t.Errorf("task list = %d: %s", c, out.String())
	}
	out.Reset()
	tty := testApp(map[string]string{"LOOM_SERVER": addr}, &out, &errb)
	tty.StdoutTTY = true
	if c := tty.Execute([]string{"task", "wait", "00000042-001-001"}); c != 0 || !strings.Contains(out.String(), "succeeded (attempts: 1)") {
		t.Errorf("task wait on a terminal = %d: %s", c, out.String())
	}
	out.Reset()
	if c := tty.Execute([]string{"task", "list"}); c != 0 || !strings.Contains(out.String(), "TASK") || !strings.Contains(out.String(), "provider/skeleton") {
		t.Errorf("task list on a terminal = %d: %s", c, out.String())
	}
	errb.Reset()
	if c := tty.Execute([]string{"task", "get", "nope"}); c != ExitUsage || !strings.Contains(errb.String(), "not found") {
		t.Errorf("task get of an unknown id = %d: %s", c, errb.String())
	}

	// Every metric it serves is documented.
	checkMetricsDocumented(t, "http://"+addr+"/metrics")

	sigs <- syscall.SIGTERM
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit after SIGTERM = %d:\n%s", c, logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("loomd did not stop within 30s of SIGTERM:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "loomd stopped") {
		t.Errorf("no clean stop in the logs:\n%s", logs)
	}
}

func TestServeFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--concurrency", "0"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--fsync", "sometimes"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--listen", "0.0.0.0:0"},
		{"serve", "--plugins", "../../examples/plugins", "--nats", "nats://127.0.0.1:1", "--nats-listen", "127.0.0.1:0"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-server", "coopr:55055"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-server", "http://127.0.0.1:1", "--coopr-tenants", "a:x"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-tenants", "a:1"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-server", "http://127.0.0.1:1", "--coopr-listen", "256.0.0.1:1"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-server", "http://127.0.0.1:1", "--coopr-ca", "/etc/hostname"},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-server", "https://127.0.0.1:1", "--coopr-cert", filepath.Join(dir, "missing.pem")},
		{"serve", "--plugins", "../../examples/plugins", "--data", dir, "--coopr-cert", filepath.Join(dir, "missing.pem")},
	} {
		var errb bytes.Buffer
		if c := testApp(nil, &bytes.Buffer{}, &errb).Execute(args); c != ExitUsage || errb.Len() == 0 {
			t.Errorf("%v = %d, want %d with a message; stderr:\n%s", args, c, ExitUsage, errb.String())
		}
	}
}

// A daemon whose worker processes cannot start says so at start, and
// points at --isolation none, instead of failing every task later.
func TestServeWorkersThatCannotStart(t *testing.T) {
	dir := t.TempDir()
	var errb bytes.Buffer
	app := testApp(nil, &bytes.Buffer{}, &errb)
	app.Executable = "/bin/false"
	code := app.Execute([]string{"serve", "--plugins", "../../examples/plugins", "--data", filepath.Join(dir, "data"),
		"--work-dir", filepath.Join(dir, "work"), "--listen", "127.0.0.1:0", "--watch=false"})
	if code == 0 || !strings.Contains(errb.String(), "starting a worker for") || !strings.Contains(errb.String(), "--isolation none") {
		t.Fatalf("exit %d, stderr:\n%s", code, errb.String())
	}
}
