package test

// Operator signals of loomd serve (issue 11 item 6), against the built
// binary: outcome log lines, latency histograms and counters on /metrics,
// the opt-in profiler, and the exit status of a forced shutdown.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loomrt/loom/internal/queue"
)

// failLua is an automator whose every hook fails with a message.
const failLua = `local loom = require("loom")
FailAutomator = loom.Automator:extend("FailAutomator")
function FailAutomator:install(input)
  error("boom: the package mirror is down")
end
return FailAutomator
`

func writeFailPlugin(t *testing.T, pluginsDir, typ string) {
	t.Helper()
	dir := filepath.Join(pluginsDir, typ)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf(`{"name": %q, "main": "main.lua", "automatortypes": [%q], %q: {"name": %q, "classname": "FailAutomator", "parameters": {}}}`,
		typ, typ, typ, typ)
	writeAtomic(t, filepath.Join(dir, "plugin.json"), def)
	writeAtomic(t, filepath.Join(dir, "main.lua"), failLua)
}

// logLine returns the first log line with msg about task id, or nil.
func (d *daemon) logLine(msg, id string) map[string]any {
	for _, l := range d.logLines() {
		if l["msg"] == msg && l["task"] == id {
			return l
		}
	}
	return nil
}

// metricLine returns the value of the exposition line that starts with
// name and holds every label pair, or "".
func metricLine(text, name string, labels ...string) string {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		all := true
		for _, l := range labels {
			all = all && strings.Contains(rest, l)
		}
		if all {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

func TestServeOperatorSignals(t *testing.T) {
	dir := serveDir(t, "noop")
	writeFailPlugin(t, filepath.Join(dir, "plugins"), "fail")
	d := startDaemon(t, dir, "d.log", nil, "--pprof")
	d.submit(noopTask("sig-ok", "noop", 0))
	d.submit(noopTask("sig-bad", "fail", 0))
	if got := d.wait("sig-ok"); got.State != queue.Succeeded {
		t.Fatalf("sig-ok = %+v", got)
	}
	if got := d.wait("sig-bad"); got.State != queue.Failed {
		t.Fatalf("sig-bad = %+v", got)
	}

	// Log lines at the default level.
	var ok, bad map[string]any
	d.waitFor("the outcome lines", func() bool {
		ok, bad = d.logLine("task finished", "sig-ok"), d.logLine("task failed", "sig-bad")
		return ok != nil && bad != nil
	})
	if ok["level"] != "INFO" || ok["type"] != "noop" || ok["hook"] != "install" || ok["taskName"] != "INSTALL" ||
		ok["status"] != float64(0) || ok["duration"] == nil {
		t.Errorf("task finished line = %v", ok)
	}
	if m, _ := bad["message"].(string); bad["level"] != "WARN" || bad["type"] != "fail" || bad["status"] != float64(1) ||
		!strings.Contains(m, "the package mirror is down") || bad["duration"] == nil {
		t.Errorf("task failed line = %v", bad)
	}

	// Counters and histograms.
	code, body := d.call("GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	text := string(body)
	for _, c := range []struct {
		name   string
		labels []string
		want   string
	}{
		{"loom_tasks_total", []string{`state="queued"`, `type="noop"`}, "1"},
		{"loom_tasks_total", []string{`state="succeeded"`, `type="noop"`}, "1"},
		{"loom_tasks_total", []string{`state="failed"`, `type="fail"`}, "1"},
		{"loom_task_queue_wait_seconds_count", []string{`type="noop"`, `hook="install"`}, "1"},
		{"loom_task_duration_seconds_count", []string{`state="failed"`, `type="fail"`}, "1"},
		{"loom_task_latency_seconds_count", []string{`state="succeeded"`, `type="noop"`}, "1"},
		{"loom_task_latency_seconds_count", []string{`state="failed"`, `type="fail"`}, "1"},
		{"loom_tasks_running", []string{`type="noop"`}, "0"},
	} {
		if got := metricLine(text, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %q, want %s", c.name, c.labels, got, c.want)
		}
	}

	// The profiler, opted in.
	if code, b := d.call("GET", "/debug/pprof/", ""); code != http.StatusOK || !strings.Contains(string(b), "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d %.200s", code, b)
	}
	if code, _ := d.call("GET", "/debug/pprof/heap?debug=1", ""); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap = %d", code)
	}
	if code, _ := d.call("GET", "/debug/pprof/cmdline", ""); code != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/cmdline = %d, want 404 (the command line may hold tokens)", code)
	}
	if code := d.term(); code != 0 {
		t.Errorf("exit after SIGTERM with nothing running = %d, want 0", code)
	}
}

// A submit for a type no daemon serves is accepted with "served": false
// and a warning; submit --wait gives up after --timeout with exit 3. The
// end of --shutdown-timeout with a hook still running interrupts it and
// exits 1, as a second signal does. Without --pprof there is no profiler.
func TestServeSubmitWarningsAndForcedExit(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--shutdown-timeout", "1s")
	if code, b := d.call("GET", "/debug/pprof/", ""); code != http.StatusNotFound || !strings.Contains(string(b), "--pprof") {
		t.Errorf("GET /debug/pprof/ without --pprof = %d %s, want 404 naming --pprof", code, b)
	}

	server := "--server=" + d.url()
	r := loomd(t, noopTask("nobody-1", "nobody", 0), "submit", "-", server)
	if r.code != 0 || gjson(t, []byte(r.stdout), "served") != "false" || gjson(t, []byte(r.stdout), "taskId") != "nobody-1" ||
		!strings.Contains(r.stderr, "no loomd serves plugin type automator/nobody") || !strings.Contains(r.stderr, "automator/noop") {
		t.Errorf("submit for an unserved type = %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = loomd(t, noopTask("served-1", "noop", 0), "submit", "-", server)
	if r.code != 0 || gjson(t, []byte(r.stdout), "served") != "true" || r.stderr != "" {
		t.Errorf("submit for a served type = %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r = loomd(t, noopTask("nobody-2", "nobody", 0), "submit", "-", server, "--wait", "--timeout", "300ms")
	if r.code != 3 || !strings.Contains(r.stderr, "nobody-2 is still queued after 300ms") || !strings.Contains(r.stderr, "loomd task wait nobody-2") {
		t.Errorf("submit --wait --timeout for an unserved type = %d, want 3\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := loomd(t, "", "submit", "--help"); !strings.Contains(r.stdout, "--timeout duration") || !strings.Contains(r.stdout, "(default 10m0s)") {
		t.Errorf("submit --help does not show the --timeout default of 10m:\n%s", r.stdout)
	}
	d.submit(noopTask("long-1", "noop", 60))
	d.waitFor("the task runs", func() bool { return starts(t, d.log)["long-1"] == 1 })
	d.signal(syscall.SIGTERM)
	if code := d.exitCode(); code != 1 {
		t.Errorf("exit after the shutdown timeout = %d, want 1\n%s", code, d.logTail())
	}
	if !strings.Contains(d.logTail(), "loomd stopped (forced)") {
		t.Errorf("no forced-stop line:\n%s", d.logTail())
	}
}
