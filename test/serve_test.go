package test

// Reliability tests of loomd serve (issue 5 §6), with real processes: the
// built binary, its embedded NATS, kill -9, signals, two daemons sharing a
// queue. Every wait is bounded by the package deadline; nothing asserts a
// duration.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
)

func serveDir(t *testing.T, types ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, typ := range types {
		writePlugin(t, filepath.Join(dir, "plugins"), typ, "v1")
	}
	if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// §6.1: kill -9 mid-run and restart on the same data dir: every task
// reaches a terminal state, none is lost, and only the tasks in flight at
// the kill run again, once. In flight means the hook started and the
// outcome was not recorded yet: up to --concurrency hooks running, plus
// the tasks whose hook returned and whose outcome is still being written
// (the queue frees a task's run slot when its hook returns and records
// the outcome in one of 4 x --concurrency finisher slots, so the next
// task starts meanwhile). a.log says which: a "start <id>" line without
// a "task finished" line for the id.
func TestServeKill9Restart(t *testing.T) {
	const n, concurrency = 500, 8
	dir := serveDir(t, "noop")
	args := []string{"--concurrency", fmt.Sprint(concurrency), "--ack-wait", "2s"}
	a := startDaemon(t, dir, "a.log", nil, args...)
	var bodies []string
	for i := range n {
		sleep := 0.0
		if i%2 == 1 {
			sleep = 0.05
		}
		bodies = append(bodies, noopTask(fmt.Sprintf("k-%03d", i), "noop", sleep))
	}
	a.submitMany(bodies)
	a.waitFor("150 tasks done before the kill", func() bool { return len(a.list(queue.Succeeded)) >= 150 })
	a.kill9()
	doneBefore := 0
	for _, c := range starts(t, a.log) {
		doneBefore += c
	}

	b := startDaemon(t, dir, "b.log", nil, args...)
	b.waitFor("all tasks finished after the restart", func() bool {
		return len(b.list(queue.Succeeded))+len(b.list(queue.Failed)) == n
	})
	if failed := b.list(queue.Failed); len(failed) > 0 {
		t.Errorf("%d tasks failed, e.g. %s: %s", len(failed), failed[0].TaskID, failed[0].Error)
	}
	if all := b.list(""); len(all) != n {
		t.Errorf("%d task records after the restart, want %d", len(all), n)
	}
	runs := starts(t, a.log, b.log)
	inFlight := starts(t, a.log)
	for _, l := range a.logLines() {
		if l["msg"] == "task finished" {
			delete(inFlight, fmt.Sprint(l["task"]))
		}
	}
	if len(inFlight) > 5*concurrency {
		t.Errorf("%d tasks in flight at the kill; at most %d run and %d record their outcome at once", len(inFlight), concurrency, 4*concurrency)
	}
	total := 0
	for i := range n {
		id := fmt.Sprintf("k-%03d", i)
		switch {
		case runs[id] == 0:
			t.Errorf("task %s finished without a logged execution", id)
		case runs[id] > 1 && inFlight[id] == 0:
			t.Errorf("task %s ran %d times, but its outcome was recorded before the kill", id, runs[id])
		case runs[id] > 2:
			t.Errorf("task %s ran %d times; a task in flight at the kill runs once more", id, runs[id])
		}
		total += runs[id]
	}
	t.Logf("executions: %d (%d before the kill), in flight at the kill: %d, re-executions: %d", total, doneBefore, len(inFlight), total-n)
	if code, body := b.call("GET", "/metrics", ""); code != 200 || strings.Contains(string(body), `loom_queue_depth{family="automator",type="noop"} 1`) {
		t.Errorf("metrics after the run: %d, depth should be 0", code)
	}
}

// §6.2: a poison task (an infrastructure failure every time: BOOTSTRAP
// with an automator nobody has) fails after the bounded attempts and
// leaves the stream.
func TestServePoisonTask(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--max-attempts", "3", "--ack-wait", "1s")
	d.submit(`{"taskId": "poison", "taskName": "BOOTSTRAP", "config": {"automators": ["noop", "ghost"]}}`)
	task := d.wait("poison")
	if task.State != queue.Failed || task.Attempts != 3 || !strings.Contains(task.Error, "gave up after 3 attempts") || !strings.Contains(task.Error, "ghost") {
		t.Fatalf("poison = %+v, want failed after 3 attempts naming the missing type", task)
	}
	d.waitFor("the poison task leaves the stream", func() bool {
		_, body := d.call("GET", "/metrics", "")
		return !strings.Contains(string(body), `loom_queue_depth{family="automator",type="noop"} 1`)
	})
	// The daemon still serves.
	d.submit(noopTask("after-poison", "noop", 0))
	if got := d.wait("after-poison"); got.State != queue.Succeeded {
		t.Errorf("a task after the poison = %s", got.State)
	}
}

// §6.3: two daemons share the work: the second joins the first's
// --nats-listen. Each runs tasks and none runs twice.
func TestServeTwoDaemonsShare(t *testing.T) {
	const n = 120
	dir := serveDir(t, "noop")
	a := startDaemon(t, dir, "a.log", nil, "--nats-listen", "127.0.0.1:0", "--concurrency", "3")
	// The embedded server requires its nkey from every client: B signs in
	// with A's generated seed, as the join hint in A's log says.
	b := startDaemon(t, dir, "b.log", nil, "--nats", a.natsURL(), "--concurrency", "3",
		"--nats-nkey", filepath.Join(dir, "data", "nats.nk"))
	var bodies []string
	for i := range n {
		bodies = append(bodies, noopTask(fmt.Sprintf("s-%03d", i), "noop", 0.03))
	}
	a.submitMany(bodies[:n/2])
	b.submitMany(bodies[n/2:])
	owners := map[string]int{}
	for i := range n {
		task := b.wait(fmt.Sprintf("s-%03d", i))
		if task.State != queue.Succeeded || task.Attempts != 1 {
			t.Errorf("%s = %s after %d attempts", task.TaskID, task.State, task.Attempts)
		}
		owners[task.Owner]++
	}
	if len(owners) != 2 {
		t.Errorf("owners = %v, want both daemons to run tasks", owners)
	}
	runs := starts(t, a.log, b.log)
	for id, c := range runs {
		if c != 1 {
			t.Errorf("%s ran %d times", id, c)
		}
	}
	if len(runs) != n {
		t.Errorf("%d tasks ran, want %d", len(runs), n)
	}
	t.Logf("tasks per daemon: %v", owners)
	if code := b.term(); code != 0 {
		t.Errorf("second daemon exit = %d", code)
	}
	if code := a.term(); code != 0 {
		t.Errorf("first daemon exit = %d", code)
	}
}

// §6.4: a task for an unknown type waits, then runs once its plugin folder
// is dropped in (hot reload adds the consumer).
func TestServeUnknownTypeWaits(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil)
	d.submit(noopTask("late-1", "late", 0))
	d.submit(noopTask("now-1", "noop", 0))
	d.wait("now-1")
	if got := d.task("late-1"); got.State != queue.Queued {
		t.Fatalf("late-1 = %s before its plugin exists, want queued", got.State)
	}
	writePlugin(t, filepath.Join(dir, "plugins"), "late", "v1")
	if got := d.wait("late-1"); got.State != queue.Succeeded {
		t.Fatalf("late-1 = %+v after its plugin appeared", got)
	}
	if runs := starts(t, d.log)["late-1"]; runs != 1 {
		t.Errorf("late-1 ran %d times", runs)
	}
}

// §6.5: hot reload under load changes behaviour for new tasks only; a
// task in flight finishes on the old version; a broken reload keeps the
// old version serving.
func TestServeHotReloadUnderLoad(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--concurrency", "4")
	version := func(task api.Task) string {
		return gjson(t, task.Result, "result", "version")
	}
	// A long task in flight across the reload.
	d.submit(noopTask("inflight", "noop", 1.5))
	d.waitFor("the long task is running", func() bool { return d.task("inflight").State == queue.Running })

	// Load: a steady stream of short tasks while the plugin changes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			id := fmt.Sprintf("load-%04d", i)
			if code, _ := d.call("POST", "/v1/tasks", noopTask(id, "noop", 0.01)); code == http.StatusAccepted {
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(200 * time.Millisecond)
	loaded := func() string { // the version of noop the daemon has loaded
		_, body := d.call("GET", "/v1/plugins", "")
		var p api.PluginsResponse
		_ = json.Unmarshal(body, &p)
		for _, ti := range p.Types {
			if ti.Name == "noop" {
				return ti.Version
			}
		}
		return ""
	}
	before := loaded()
	writePlugin(t, filepath.Join(dir, "plugins"), "noop", "v2")
	// The daemon reloads after its debounce; until then workers, even new
	// ones, run v1 (they load the daemon's versions, not the files), so
	// "v2 served" means something only once the daemon has v2.
	d.waitFor("the daemon to load v2", func() bool { v := loaded(); return v != "" && v != before })
	probe := 0
	d.waitFor("a new task runs v2", func() bool {
		probe++
		id := fmt.Sprintf("probe-%d", probe)
		d.submit(noopTask(id, "noop", 0))
		return version(d.wait(id)) == "v2"
	})
	// From now on every new task must run v2.
	d.submit(noopTask("after-v2", "noop", 0))
	if v := version(d.wait("after-v2")); v != "v2" {
		t.Errorf("a task submitted after v2 served ran %s", v)
	}
	if v := version(d.wait("inflight")); v != "v1" {
		t.Errorf("the task in flight across the reload ran %s, want v1 (the old version finishes it)", v)
	}

	// A broken version: reported, and v2 keeps serving.
	writeAtomic(t, filepath.Join(dir, "plugins", "noop", "main.lua"), "this is not lua (")
	d.waitFor("the broken version is reported", func() bool {
		_, body := d.call("GET", "/v1/plugins", "")
		return strings.Contains(string(body), `"loadErrors":[{`)
	})
	d.submit(noopTask("after-broken", "noop", 0))
	if got := d.wait("after-broken"); got.State != queue.Succeeded || got.Attempts != 1 || version(got) != "v2" {
		t.Errorf("after a broken reload: %s after %d attempts on %s, want succeeded at once on v2", got.State, got.Attempts, version(got))
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	v1, v2 := 0, 0
	for _, id := range ids {
		task := d.wait(id)
		if task.State != queue.Succeeded {
			t.Errorf("%s = %s (%s) during the reloads", id, task.State, task.Error)
		}
		switch version(task) {
		case "v1":
			v1++
		case "v2":
			v2++
		}
	}
	t.Logf("load tasks: %d on v1, %d on v2", v1, v2)
	if code, body := d.call("GET", "/metrics", ""); code != 200 || !strings.Contains(string(body), "loom_plugin_load_errors ") || strings.Contains(string(body), "loom_plugin_load_errors 0") {
		_, pl := d.call("GET", "/v1/plugins", "")
		t.Errorf("metrics should count the load error:\n%s", pl)
	}
}

// Workers load the plugin versions the daemon validated, not the files on
// disk: with the folder broken before any reload (no watcher here, as in
// the debounce window of a reload), a worker started afterwards still
// runs the version the daemon serves.
func TestServeWorkersLoadTheDaemonsVersion(t *testing.T) {
	const n = 3
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--concurrency", fmt.Sprint(n), "--watch=false")
	writeAtomic(t, filepath.Join(dir, "plugins", "noop", "main.lua"), "this is not lua (")
	// n tasks at once: the warm worker serves one, the others start
	// workers after the files broke.
	for i := range n {
		d.submit(noopTask(fmt.Sprintf("t-%d", i), "noop", 0.3))
	}
	for i := range n {
		got := d.wait(fmt.Sprintf("t-%d", i))
		// One attempt: a retry would mean a worker could not run it.
		if got.State != queue.Succeeded || got.Attempts != 1 || gjson(t, got.Result, "result", "version") != "v1" {
			t.Errorf("t-%d = %s after %d attempts (%s) version %q, want succeeded at once on v1, the daemon's version",
				i, got.State, got.Attempts, got.Error, gjson(t, got.Result, "result", "version"))
		}
	}
}

// §6.6: a malformed task gets 400; the same id twice runs once. Also the
// CLI clients, a --config file, LOOM_* variables and the bearer token.
func TestServeMalformedDedupeAndClients(t *testing.T) {
	dir := serveDir(t, "noop")
	addr := freePort(t)
	cfg := filepath.Join(dir, "loomd.yaml")
	writeFile(t, cfg, fmt.Sprintf("listen: %q\nplugins: %q\ndata: %q\nwork-dir: %q\nconcurrency: 2\n",
		addr, filepath.Join(dir, "plugins"), filepath.Join(dir, "data"), filepath.Join(dir, "work")))
	env := []string{"LOOM_TOKEN=t0ps3cret", "LOOM_MAX_ATTEMPTS=2"}
	d := startDaemon(t, dir, "d.log", env, "--config", cfg)
	if d.addr != addr {
		t.Fatalf("listening on %s, want %s from the config file", d.addr, addr)
	}

	code, body := d.call("POST", "/v1/tasks", `{"taskName": "INSTALL", "config": {"service": {}}}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), `"error":"invalid task`) {
		t.Errorf("malformed = %d %s, want 400 with the reason", code, body)
	}
	task := noopTask("twice", "noop", 0)
	r1, r2 := d.submit(task), d.submit(task)
	if r1.Duplicate || !r2.Duplicate {
		t.Errorf("submissions = %+v, %+v; want the second marked duplicate", r1, r2)
	}
	d.wait("twice")
	d.submit(task)
	d.submit(noopTask("other", "noop", 0))
	d.wait("other")
	if runs := starts(t, d.log)["twice"]; runs != 1 {
		t.Errorf("twice ran %d times, want 1", runs)
	}
	// Without the token: 401.
	noauth := &daemon{t: t, addr: d.addr}
	if code, _ := noauth.call("GET", "/v1/tasks/twice", ""); code != http.StatusUnauthorized {
		t.Errorf("no token = %d, want 401", code)
	}

	// The CLI clients.
	server := "--server=" + d.url()
	tok := "--token=t0ps3cret"
	taskFile := filepath.Join(dir, "task.json")
	writeFile(t, taskFile, noopTask("cli-1", "noop", 0))
	// submit --wait is one request (POST /v1/tasks?wait=), no GET.
	requests := func(route, code string) string {
		_, b := d.call("GET", "/metrics", "")
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, `loom_http_requests_total{code="`+code+`",route="`+route+`"} `); ok {
				return v
			}
		}
		return "0"
	}
	posts, gets := requests("tasks", "202"), requests("task", "200")
	if r := loomd(t, "", "submit", taskFile, server, tok, "--wait"); r.code != 0 || gjson(t, []byte(r.stdout), "result", "version") != "v1" {
		t.Errorf("submit --wait = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if p, g := requests("tasks", "202"), requests("task", "200"); p == posts || g != gets {
		t.Errorf("submit --wait: POST /v1/tasks 202s %s -> %s, GET /v1/tasks/{id} 200s %s -> %s; want one POST and no GET", posts, p, gets, g)
	}
	if r := loomd(t, "{", "submit", "-", server, tok); r.code != 2 || !strings.Contains(r.stderr, "invalid task") {
		t.Errorf("submit of a malformed task = %d, want 2\n%s", r.code, r.stderr)
	}
	if r := loomd(t, "", "submit", taskFile, server); r.code != 2 || !strings.Contains(r.stderr, "401") {
		t.Errorf("submit without a token = %d, want 2\n%s", r.code, r.stderr)
	}
	if r := loomd(t, "", "task", "get", "cli-1", server, tok); r.code != 0 || gjson(t, []byte(r.stdout), "state") != "succeeded" {
		t.Errorf("task get = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := loomd(t, "", "task", "list", "--state", "succeeded", server, tok); r.code != 0 || !strings.Contains(r.stdout, `"cli-1"`) {
		t.Errorf("task list = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := loomd(t, "", "task", "wait", "nope", server, tok); r.code != 2 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("task wait of an unknown id = %d\n%s", r.code, r.stderr)
	}
	if r := loomd(t, "", "task", "list", "--state", "done", server, tok); r.code != 2 {
		t.Errorf("task list --state done = %d, want 2", r.code)
	}
	// The environment's LOOM_MAX_ATTEMPTS reached the queue: a poison task
	// stops after 2.
	d.submit(`{"taskId": "p2", "taskName": "BOOTSTRAP", "config": {"automators": ["noop", "ghost"]}}`)
	if got := d.wait("p2"); got.Attempts != 2 || got.State != queue.Failed {
		t.Errorf("p2 = %s after %d attempts, want failed after 2 (LOOM_MAX_ATTEMPTS)", got.State, got.Attempts)
	}
}

// The API refuses a public address without a token, before touching the
// data dir.
func TestServeRefusesPublicWithoutToken(t *testing.T) {
	dir := serveDir(t, "noop")
	r := loomd(t, "", "serve", "--listen", "0.0.0.0:0", "--plugins", filepath.Join(dir, "plugins"), "--data", filepath.Join(dir, "data"))
	if r.code != 2 || !strings.Contains(r.stderr, "token") {
		t.Errorf("serve on 0.0.0.0 without a token = %d\n%s", r.code, r.stderr)
	}
}

// §6.7: graceful shutdown with tasks in flight finishes them and exits 0;
// a second signal forces the exit and the interrupted tasks run again.
func TestServeGracefulShutdown(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--concurrency", "4")
	for i := range 4 {
		d.submit(noopTask(fmt.Sprintf("g-%d", i), "noop", 1))
	}
	d.waitFor("4 tasks running", func() bool { return len(starts(t, d.log)) == 4 })
	if code := d.term(); code != 0 {
		t.Fatalf("exit after SIGTERM = %d, want 0\n%s", code, d.logTail())
	}
	// A short --ack-wait: after a forced exit, the server hands the
	// interrupted tasks out again once it passes (a nak does not survive
	// the embedded server's restart).
	d2 := startDaemon(t, dir, "d2.log", nil, "--concurrency", "4", "--ack-wait", "2s")
	for i := range 4 {
		if got := d2.task(fmt.Sprintf("g-%d", i)); got.State != queue.Succeeded || got.Attempts != 1 {
			t.Errorf("g-%d = %s after %d attempts; the graceful shutdown should have finished it", i, got.State, got.Attempts)
		}
	}
	if n := len(starts(t, d2.log)); n != 0 {
		t.Errorf("%d tasks ran again after a graceful shutdown", n)
	}

	// Forced: two signals while long tasks run.
	for i := range 2 {
		d2.submit(noopTask(fmt.Sprintf("f-%d", i), "noop", 30))
	}
	d2.waitFor("2 long tasks running", func() bool { return len(starts(t, d2.log)) == 2 })
	d2.signal(syscall.SIGTERM)
	d2.waitFor("the shutdown starts", func() bool { return strings.Contains(d2.logTail(), "shutting down") })
	d2.signal(syscall.SIGTERM)
	if code := d2.exitCode(); code == 0 {
		t.Errorf("a forced exit returned 0")
	}
	// The interrupted tasks are queued again with their attempt given back.
	// f-* sleep 30s: a hook timeout cuts the second run short.
	d3 := startDaemon(t, dir, "d3.log", nil, "--timeout", "100ms", "--ack-wait", "2s")
	for i := range 2 {
		got := d3.wait(fmt.Sprintf("f-%d", i))
		if got.Attempts != 1 || starts(t, d3.log)[fmt.Sprintf("f-%d", i)] != 1 {
			t.Errorf("f-%d: %d attempts after the forced exit, want it to run again as attempt 1 (%s)", i, got.Attempts, got.Error)
		}
	}
}

// Results name who ran them, as a Coopr worker's did: provisionerId and
// workerId, set by the daemon for its worker processes too.
func TestServeResultNamesProvisionerAndWorker(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil)
	d.submit(noopTask("ids-1", "noop", 0))
	task := d.wait("ids-1")
	if p := gjson(t, task.Result, "provisionerId"); !strings.HasPrefix(p, "loom-") {
		t.Errorf("provisionerId = %q, want loom-<host>: %s", p, task.Result)
	}
	if w := gjson(t, task.Result, "workerId"); w == "" || w != task.Owner {
		t.Errorf("workerId = %q, want the daemon's owner name %q", w, task.Owner)
	}
}
