package test

// Helpers for the loomd serve reliability tests (serve_test.go): a test
// plugin, daemons as real processes, and HTTP calls to their API.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
)

// noopLua is the test automator: every hook logs "start <taskId>", sleeps
// config.sleep seconds when set, and returns its VERSION.
const noopLua = `local loom = require("loom")
local time = require("loom.time")
NoopAutomator = loom.Automator:extend("NoopAutomator")
local VERSION = "%s"
local function step(self, input)
  log.info("start " .. self.task.taskId)
  local s = self.task.config.sleep
  if s then time.sleep(s) end
  self.result.result.version = VERSION
end
for _, h in ipairs({"bootstrap", "install", "configure", "init", "start", "stop", "remove"}) do
  NoopAutomator[h] = step
end
return NoopAutomator
`

// writePlugin writes automator type typ, answering version, into dir.
func writePlugin(t *testing.T, pluginsDir, typ, version string) {
	t.Helper()
	dir := filepath.Join(pluginsDir, typ)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	def := fmt.Sprintf(`{"name": %q, "main": "main.lua", "automatortypes": [%q], %q: {"name": %q, "classname": "NoopAutomator", "parameters": {}}}`,
		typ, typ, typ, typ)
	writeAtomic(t, filepath.Join(dir, "plugin.json"), def)
	writeAtomic(t, filepath.Join(dir, "main.lua"), fmt.Sprintf(noopLua, version))
}

// writeAtomic replaces a file in one rename, as editors and deploy tools do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(filepath.Dir(path)), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// noopTask is an INSTALL task for automator type typ.
func noopTask(id, typ string, sleep float64) string {
	s := ""
	if sleep > 0 {
		s = fmt.Sprintf(`"sleep": %g, `, sleep)
	}
	idf := ""
	if id != "" {
		idf = fmt.Sprintf(`"taskId": %q, `, id)
	}
	return fmt.Sprintf(`{%s"taskName": "INSTALL", "config": {%s"service": {"name": "web", "action": {"type": %q}}}}`, idf, s, typ)
}

// apiPort picks the API address of a daemon started without --listen;
// TestDaemonAPIPortTaken hands out a taken one first.
var apiPort = freePort

// freePort is a loopback address with a port asked of the kernel and
// released: another process may take it before it is used.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// daemon is a loomd serve process.
type daemon struct {
	t     *testing.T
	cmd   *exec.Cmd
	addr  string
	log   string
	token string
	done  chan struct{}
	code  int
}

// startDaemon runs loomd serve in dir (plugins in dir/plugins, data in
// dir/data unless args say otherwise) and waits until its API answers.
//
// Without --listen (or --config) in args, the API listens on a port asked
// of the kernel and released (freePort): another process (test packages
// run in parallel) may take it before loomd binds it. loomd then exits
// at once, saying so; it is started again on another port, twice at
// most, and the test log says so.
func startDaemon(t *testing.T, dir, logName string, env []string, args ...string) *daemon {
	t.Helper()
	for try := 1; ; try++ {
		d, taken := launchDaemon(t, dir, logName, env, try < 3, args...)
		if !taken {
			return d
		}
		t.Logf("loomd (%s) could not listen on %s, taken since the test chose it: starting it again on another port", logName, d.addr)
	}
}

// launchDaemon is one try of startDaemon. When retry is set and the
// process exits because the API port the test chose was taken, it takes
// this try's lines out of the log and answers taken instead of failing
// the test.
func launchDaemon(t *testing.T, dir, logName string, env []string, retry bool, args ...string) (d *daemon, taken bool) {
	t.Helper()
	d = &daemon{t: t, addr: apiPort(t), log: filepath.Join(dir, logName), done: make(chan struct{})}
	chosen := true
	for i, a := range args {
		if a == "--listen" && i+1 < len(args) {
			d.addr = args[i+1] // a daemon restarted where the last one listened
			chosen = false
		}
	}
	full := append([]string{"serve", "--listen", d.addr, "--log-format", "json",
		"--plugins", filepath.Join(dir, "plugins"), "--data", filepath.Join(dir, "data"),
		"--work-dir", filepath.Join(dir, "work")}, args...)
	if hasFlag(args, "--config") {
		full = append([]string{"serve", "--log-format", "json"}, args...)
		d.addr = ""
		chosen = false
	}
	f, err := os.OpenFile(d.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(loomdBin, full...)
	d.cmd.Dir = dir
	d.cmd.Env = append([]string{"HOME=" + dir, "PATH=" + os.Getenv("PATH")}, env...)
	d.cmd.Stdout, d.cmd.Stderr = f, f
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := d.cmd.Wait()
		f.Close()
		d.code = d.cmd.ProcessState.ExitCode()
		_ = err
		close(d.done)
	}()
	t.Cleanup(func() { d.kill9() })
	if d.addr == "" {
		d.addr = d.waitLogAddr()
	}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LOOM_TOKEN="); ok {
			d.token = v
		}
	}
	end := time.Now().Add(deadline)
	for {
		if d.healthy() {
			return d, false
		}
		select {
		case <-d.done:
			if out := d.logTail(); retry && chosen && strings.Contains(out, "api: listening on "+d.addr) && strings.Contains(out, "address already in use") {
				if err := os.Truncate(d.log, off); err != nil {
					t.Fatal(err)
				}
				return d, true
			}
			t.Fatalf("loomd exited with %d before answering:\n%s", d.code, d.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(end) {
			t.Fatalf("loomd did not answer within %v:\n%s", deadline, d.logTail())
		}
	}
}

// waitLogAddr reads the API address from the "loomd serving" log line.
func (d *daemon) waitLogAddr() string {
	return strings.TrimPrefix(d.servingAttr("api"), "http://")
}

// natsURL is the embedded NATS server's client URL, from the "loomd
// serving" log line: start the daemon with --nats-listen 127.0.0.1:0, a
// port the kernel assigns as the server binds it, so that no other
// process (test packages run in parallel) can take it between the
// test's choice and the bind, as it could take one from freePort.
func (d *daemon) natsURL() string {
	d.t.Helper()
	return d.servingAttr("nats")
}

// servingAttr is the value of key in the daemon's "loomd serving" log
// line, once it is logged.
func (d *daemon) servingAttr(key string) string {
	d.t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		for _, l := range d.logLines() {
			if l["msg"] == "loomd serving" {
				v, ok := l[key].(string)
				if !ok || v == "" {
					d.t.Fatalf("the \"loomd serving\" line has no %s:\n%s", key, d.logTail())
				}
				return v
			}
		}
		select {
		case <-d.done:
			d.t.Fatalf("loomd exited with %d:\n%s", d.code, d.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
	d.t.Fatalf("no \"loomd serving\" line within %v:\n%s", deadline, d.logTail())
	return ""
}

func (d *daemon) url() string { return "http://" + d.addr }

// probe is startDaemon's client: each try is bounded, so that whatever
// else took the port (a listener that never answers) cannot hold the
// start past the daemon's exit.
var probe = &http.Client{Timeout: 2 * time.Second}

// healthy reports whether the daemon's /healthz answers 200.
func (d *daemon) healthy() bool {
	req, err := http.NewRequest("GET", d.url()+"/healthz", nil)
	if err != nil {
		d.t.Fatal(err)
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := probe.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

func (d *daemon) call(method, path, body string) (int, []byte) {
	req, err := http.NewRequest(method, d.url()+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	if d.token != "" {
		req.Header.Set("Authorization", "Bearer "+d.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// submit posts a task and fails the test unless loomd accepted it.
func (d *daemon) submit(body string) api.SubmitResponse {
	d.t.Helper()
	code, b := d.call("POST", "/v1/tasks", body)
	if code != http.StatusAccepted && code != http.StatusOK {
		d.t.Fatalf("POST /v1/tasks = %d %s", code, b)
	}
	var r api.SubmitResponse
	if err := json.Unmarshal(b, &r); err != nil {
		d.t.Fatalf("decoding %s: %v", b, err)
	}
	return r
}

func (d *daemon) task(id string) api.Task {
	d.t.Helper()
	code, b := d.call("GET", "/v1/tasks/"+id, "")
	if code != http.StatusOK {
		d.t.Fatalf("GET /v1/tasks/%s = %d %s", id, code, b)
	}
	var task api.Task
	if err := json.Unmarshal(b, &task); err != nil {
		d.t.Fatalf("decoding %s: %v", b, err)
	}
	return task
}

// wait long-polls until the task is finished, up to the test deadline.
func (d *daemon) wait(id string) api.Task {
	d.t.Helper()
	end := time.Now().Add(deadline)
	for {
		code, b := d.call("GET", "/v1/tasks/"+id+"?wait=10s", "")
		var task api.Task
		if code == http.StatusOK && json.Unmarshal(b, &task) == nil && task.State.Terminal() {
			return task
		}
		if time.Now().After(end) {
			d.t.Fatalf("task %s not finished within %v: %d %s\n%s", id, deadline, code, b, d.logTail())
		}
	}
}

// list returns the tasks in state (all with ""), following the cursors.
func (d *daemon) list(state queue.State) []api.Task {
	d.t.Helper()
	var out []api.Task
	after := ""
	for {
		path := "/v1/tasks?limit=1000&state=" + string(state)
		if after != "" {
			path += "&after=" + after
		}
		code, b := d.call("GET", path, "")
		if code != http.StatusOK {
			d.t.Fatalf("GET %s = %d %s", path, code, b)
		}
		var l api.ListResponse
		if err := json.Unmarshal(b, &l); err != nil {
			d.t.Fatalf("decoding the list: %v", err)
		}
		out = append(out, l.Tasks...)
		if l.Next == "" {
			return out
		}
		after = l.Next
	}
}

// waitFor polls cond until it holds, up to the test deadline.
func (d *daemon) waitFor(what string, cond func() bool) {
	d.t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			d.t.Fatalf("%s: not within %v\n%s", what, deadline, d.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *daemon) kill9() {
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
	}
	<-d.done
}

func (d *daemon) signal(s os.Signal) { _ = d.cmd.Process.Signal(s) }

// exitCode waits for the process to exit.
func (d *daemon) exitCode() int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(deadline):
		d.t.Fatalf("loomd did not exit within %v:\n%s", deadline, d.logTail())
		return -1
	}
}

func (d *daemon) term() int {
	d.signal(syscall.SIGTERM)
	return d.exitCode()
}

// logLines parses the daemon's JSON log.
func (d *daemon) logLines() []map[string]any {
	data, err := os.ReadFile(d.log)
	if err != nil {
		return nil
	}
	var out []map[string]any
	// Lines of any length: a Scanner stops at its first over-long line
	// and would hide every line after it.
	for _, line := range bytes.Split(data, []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

func (d *daemon) logTail() string {
	data, _ := os.ReadFile(d.log)
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}

// starts counts the "start <id>" lines the test plugin logged, per task,
// across the given log files.
func starts(t *testing.T, logs ...string) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, path := range logs {
		d := &daemon{log: path}
		for _, l := range d.logLines() {
			if id, ok := strings.CutPrefix(fmt.Sprint(l["msg"]), "start "); ok {
				n[id]++
			}
		}
	}
	return n
}

// submitMany posts bodies from a few goroutines at once.
func (d *daemon) submitMany(bodies []string) {
	d.t.Helper()
	var wg sync.WaitGroup
	ch := make(chan string)
	errs := make(chan string, len(bodies))
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range ch {
				if code, resp := d.call("POST", "/v1/tasks", b); code != http.StatusAccepted {
					errs <- fmt.Sprintf("%d %s", code, resp)
				}
			}
		}()
	}
	for _, b := range bodies {
		ch <- b
	}
	close(ch)
	wg.Wait()
	close(errs)
	for e := range errs {
		d.t.Fatalf("submitting: %s", e)
	}
}

// gjson returns the value at path in a JSON document, as a string ("" when
// absent).
func gjson(t *testing.T, data []byte, path ...string) string {
	t.Helper()
	var v any
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[p]
	}
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}
