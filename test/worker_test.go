package test

// Worker isolation of loomd serve (issue 9 items 1 and 2), with the built
// binary: a hook over its memory budget fails only its task, a worker
// killed under a task twice fails that task with kind "crash", and the
// daemon keeps serving.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/loomrt/loom/internal/queue"
)

// writeLuaAutomator writes automator type typ whose install hook is body.
func writeLuaAutomator(t *testing.T, pluginsDir, typ, body string, extra string) {
	t.Helper()
	dir := filepath.Join(pluginsDir, typ)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	def := `{"name": "` + typ + `", "main": "main.lua", "automatortypes": ["` + typ + `"], "` + typ + `": {"classname": "A"}` + extra + `}`
	writeAtomic(t, filepath.Join(dir, "plugin.json"), def)
	writeAtomic(t, filepath.Join(dir, "main.lua"), "A = {}\nfunction A:install(input)\n"+body+"\nend\nreturn A\n")
}

type taskResult struct {
	Status  int            `json:"status"`
	Message string         `json:"message"`
	Error   map[string]any `json:"error"`
}

func resultOf(t *testing.T, raw json.RawMessage) taskResult {
	t.Helper()
	var r taskResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return r
}

func TestServeWorkerMemoryBudget(t *testing.T) {
	dir := serveDir(t, "noop")
	plugins := filepath.Join(dir, "plugins")
	hog := `local s = string.rep("x", 1024 * 1024)
local t = {}
for i = 1, 100000 do t[#t+1] = s .. i end`
	writeLuaAutomator(t, plugins, "hog", hog, "")
	writeLuaAutomator(t, plugins, "bighog", hog, `, "limits": {"memory": "96MiB"}`)
	d := startDaemon(t, dir, "d.log", nil, "--plugin-memory", "128MiB", "--concurrency", "4")

	d.submit(noopTask("ok-1", "noop", 0.5))
	d.submit(noopTask("hog-1", "hog", 0))
	d.submit(noopTask("hog-2", "bighog", 0))
	var wg sync.WaitGroup
	for _, id := range []string{"ok-1", "hog-1", "hog-2"} {
		wg.Add(1)
		go func() { defer wg.Done(); d.wait(id) }()
	}
	wg.Wait()
	if ok := d.task("ok-1"); ok.State != queue.Succeeded {
		t.Errorf("the task beside the hogs: %s %s", ok.State, ok.Error)
	}
	for id, limit := range map[string]string{"hog-1": "128 MiB", "hog-2": "96 MiB"} {
		task := d.task(id)
		r := resultOf(t, task.Result)
		if task.State != queue.Failed || task.Attempts != 1 || r.Error["kind"] != "memory" || !strings.Contains(r.Message, "limit of "+limit) {
			t.Errorf("%s: state %s, attempts %d, result %+v; want failed once with kind memory naming %s", id, task.State, task.Attempts, r, limit)
		}
	}
	// Still serving, and the hog's type too.
	d.submit(noopTask("ok-2", "noop", 0))
	if got := d.wait("ok-2"); got.State != queue.Succeeded {
		t.Errorf("after the hogs: %s %s", got.State, got.Error)
	}
	if code, body := d.call("GET", "/metrics", ""); code != 200 || !strings.Contains(string(body), "loom_workers_live") {
		t.Errorf("metrics lack the worker gauges: %d", code)
	}
}

// childPids lists the processes whose parent is pid.
func childPids(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut at ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

func TestServeWorkerCrashesFailPoisonTask(t *testing.T) {
	dir := serveDir(t, "noop")
	writeLuaAutomator(t, filepath.Join(dir, "plugins"), "spin", `require("loom.log").info("spinning")
while true do end`, "")
	d := startDaemon(t, dir, "d.log", nil, "--concurrency", "2")
	d.submit(noopTask("poison", "spin", 0))
	for attempt := 1; attempt <= 2; attempt++ {
		d.waitFor("attempt "+strconv.Itoa(attempt)+" running in a worker", func() bool {
			n := 0
			for _, l := range d.logLines() {
				if l["msg"] == "spinning" {
					n++
				}
			}
			return n == attempt
		})
		for _, pid := range childPids(d.cmd.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGSEGV)
		}
	}
	task := d.wait("poison")
	r := resultOf(t, task.Result)
	if task.State != queue.Failed || task.Crashes != 2 || r.Error["kind"] != "crash" || !strings.Contains(task.Error, `worker for "spin" died`) {
		t.Fatalf("poison: state %s, crashes %d, error %q, result %+v; want failed with kind crash after 2 deaths", task.State, task.Crashes, task.Error, r)
	}
	d.submit(noopTask("after", "noop", 0))
	if got := d.wait("after"); got.State != queue.Succeeded {
		t.Errorf("after the poison task: %s %s", got.State, got.Error)
	}
}

// TestServeWorkerTaskCaps: --task-descriptors reaches the worker
// processes, and a definition's limits.descriptors wins over it; a cap
// out of range is refused before anything starts.
func TestServeWorkerTaskCaps(t *testing.T) {
	dir := serveDir(t, "noop")
	plugins := filepath.Join(dir, "plugins")
	nest := `local depth = 0
local function nest()
  depth = depth + 1
  fs.with_lock("nested-" .. depth .. ".lock", nest)
end
fs = require("loom.fs")
local ok, err = pcall(nest)
error("depth " .. depth .. ": " .. tostring(err.kind) .. ": " .. tostring(err.message))`
	writeLuaAutomator(t, plugins, "locks", nest, "")
	writeLuaAutomator(t, plugins, "locks6", nest, `, "limits": {"descriptors": 6}`)
	d := startDaemon(t, dir, "d.log", nil, "--task-descriptors", "4")
	d.submit(noopTask("caps-1", "locks", 0))
	d.submit(noopTask("caps-2", "locks6", 0))
	for id, want := range map[string]string{"caps-1": "depth 5: limit:", "caps-2": "depth 7: limit:"} {
		task := d.wait(id)
		r := resultOf(t, task.Result)
		if task.State != queue.Failed || !strings.Contains(r.Message, want) || !strings.Contains(r.Message, "the limit per task") {
			t.Errorf("%s: %s %q; want failed with %q", id, task.State, r.Message, want)
		}
	}

	r := loomd(t, "", "plugins", "list", "--plugins", plugins, "--task-connections", "0")
	if r.code != 2 || !strings.Contains(r.stderr, "--task-connections 0: must be between 1 and 1024") {
		t.Errorf("contradictory caps: exit %d, stderr %q", r.code, r.stderr)
	}
}
