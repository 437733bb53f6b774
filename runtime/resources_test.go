package runtime_test

import (
	"fmt"
	"log/slog"
	nethttp "net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// hog opens input.fields.n private SSH connections and never closes
// them; with fields.cmd it runs that command on a fresh pooled
// connection instead.
const hog = `
local ssh = require("loom.ssh")
Hog = {}
function Hog:install(input)
  local f = input.fields
  local opts = {host = f.host, port = f.port, user = f.user, key = f.key}
  if f.cmd then
    local r = ssh.connect(opts):exec(f.cmd, {check = true})
    self.result.result.out = r.stdout
    return
  end
  opts.reuse = false
  KEPT = KEPT or {}
  for i = 1, f.n do
    KEPT[#KEPT + 1] = ssh.connect(opts)
  end
  self.result.result.opened = f.n
end
function Hog:configure(input)
  -- A handle kept by an earlier task of this tenant.
  return KEPT[1]:exec("true")
end
`

func hogRuntime(t *testing.T, srv *sshdtest.Server, opts sshb.Options) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "hog", Family: "automator", Classname: "Hog",
		Files: map[string]string{"hog.lua": hog},
		Extra: map[string]any{"timeouts": map[string]any{"default": "5m"}}})
	reg := runtime.DefaultBindings()
	opts.KnownHosts = []string{srv.KnownHosts()}
	reg.Register(sshb.New(opts))
	return luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Bindings: reg, Logger: slog.New(slog.DiscardHandler)})
}

func hogTask(srv *sshdtest.Server, tenant, hook string, fields map[string]any) []byte {
	f := map[string]any{"host": srv.Host, "port": srv.Port, "user": srv.User, "key": string(srv.KeyPEM)}
	for k, v := range fields {
		f[k] = v
	}
	b := luatest.Task(hook, "hog", map[string]any{"service": map[string]any{"name": "svc",
		"action": map[string]any{"type": "hog", "fields": f}}})
	return []byte(strings.Replace(string(b), "{", fmt.Sprintf(`{"tenantId": %q, `, tenant), 1))
}

func sshOpen(rt *runtime.Runtime) float64 { return rt.Stats().Bindings["ssh_connections_open"] }

// TestTaskConnectionsEndWithTheTask (issue 20 item 7): private SSH
// connections a task opens and never closes are closed when its hook
// ends; handles a module global kept are dead in the next task; a task
// that opens past the per-task cap fails with kind limit; and another
// tenant's next task in the same runtime still works.
func TestTaskConnectionsEndWithTheTask(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	rt := hogRuntime(t, srv, sshb.Options{})

	res := luatest.Run(t, rt, hogTask(srv, "a", "INSTALL", map[string]any{"n": 10}))
	if res.Status != 0 {
		t.Fatalf("10 private connections: %s", res.Message)
	}
	if n := sshOpen(rt); n != 0 {
		t.Errorf("%v SSH connections still open after the task ended, want 0", n)
	}
	res = luatest.Run(t, rt, hogTask(srv, "a", "CONFIGURE", nil))
	if res.Status == 0 || !strings.Contains(res.Message, "ended") {
		t.Errorf("a handle from an ended task: status %d, %s", res.Status, res.Message)
	}

	// The issue's: 118 private connections, never closed.
	res = luatest.Run(t, rt, hogTask(srv, "a", "INSTALL", map[string]any{"n": 118}))
	kind, _ := res.Error["kind"].(string)
	if res.Status == 0 || kind != "limit" || !strings.Contains(res.Message, "per task") {
		t.Errorf("118 private connections: status %d, kind %q: %s", res.Status, kind, res.Message)
	}
	if n := sshOpen(rt); n != 0 {
		t.Errorf("%v SSH connections still open after the task failed, want 0", n)
	}
	res = luatest.Run(t, rt, hogTask(srv, "b", "INSTALL", map[string]any{"cmd": "echo served"}))
	if out, _ := res.Result["out"].(string); res.Status != 0 || out != "served\n" {
		t.Errorf("the next task of another tenant: status %d, %q: %s", res.Status, out, res.Message)
	}
}

// holder keeps things across tasks in module globals: coroutines (mode
// "coroutines"), an HTTP response it never finishes reading ("http"), a
// lock held when the hook fails ("lock"), when a coroutine yields inside
// it ("lock-yield"), or when START times out inside it; CONFIGURE reports
// what a later task of the tenant sees.
const holder = `
local http = require("loom.http")
local fs = require("loom.fs")
Holder = {}
function Holder:install(input)
  local f = input.fields
  if f.mode == "coroutines" then
    KEPT = {}
    for i = 1, 100 do
      local big = {}
      KEPT[#KEPT + 1] = coroutine.create(function()
        local local_value = "kept " .. i
        CLOSURE = function() return local_value end
        for j = 1, 2000 do big[j] = j end
        coroutine.yield(i)
        return "finished"
      end)
      assert(coroutine.resume(KEPT[#KEPT]))
    end
    WRAPPED = coroutine.wrap(function() coroutine.yield(1); return 2 end)
    WRAPPED()
  elseif f.mode == "http" then
    local ok, err = pcall(http.get, f.url, {timeout = 0.5})
    self.result.result.err = tostring(err and err.kind)
  elseif f.mode == "lock" then
    fs.with_lock("held.lock", function() error("failed while holding the lock") end)
  elseif f.mode == "lock-nested" then
    local depth = 0
    local function nest()
      depth = depth + 1
      fs.with_lock("nested-" .. depth .. ".lock", nest)
    end
    local ok, err = pcall(nest)
    self.result.result.depth, self.result.result.kind = depth, err.kind
    self.result.result.message = err.message
  elseif f.mode == "lock-yield" then
    LOCKCO = coroutine.create(function() fs.with_lock("held.lock", function() coroutine.yield() end) end)
    coroutine.resume(LOCKCO)
  end
end
function Holder:start(input)
  -- Its deadline is 1s: the hook times out while holding the lock.
  fs.with_lock("held.lock", function() while true do end end)
end
function Holder:configure(input)
  local r = self.result.result
  r.status = coroutine.status(KEPT[1])
  local ok, err = coroutine.resume(KEPT[1])
  r.resumed, r.resume_err = ok, tostring(err)
  r.wrapped_ok, r.wrapped_err = pcall(WRAPPED)
  r.wrapped_err = tostring(r.wrapped_err)
  r.closure = CLOSURE()
end
`

func holderRuntime(t *testing.T, work string) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "holder", Family: "automator", Classname: "Holder",
		Files: map[string]string{"holder.lua": holder},
		Extra: map[string]any{"timeouts": map[string]any{"default": "30s", "start": "1s"}}})
	reg := runtime.DefaultBindings()
	reg.Register(httpb.New(httpb.Options{}))
	return luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: work, Bindings: reg, Logger: slog.New(slog.DiscardHandler)})
}

func holderTask(hook string, fields map[string]any) []byte {
	return luatest.Task(hook, "holder", map[string]any{"service": map[string]any{"name": "svc",
		"action": map[string]any{"type": "holder", "fields": fields}}})
}

// TestTaskCoroutinesEndWithTheTask: coroutines a task leaves suspended in
// a global are dead in the tenant's next task (their stacks released);
// closures they made keep their values.
func TestTaskCoroutinesEndWithTheTask(t *testing.T) {
	rt := holderRuntime(t, t.TempDir())
	if res := luatest.Run(t, rt, holderTask("INSTALL", map[string]any{"mode": "coroutines"})); res.Status != 0 {
		t.Fatalf("install: %s", res.Message)
	}
	res := luatest.Run(t, rt, holderTask("CONFIGURE", nil))
	r := res.Result
	if res.Status != 0 || r["status"] != "dead" || r["resumed"] != false || !strings.Contains(fmt.Sprint(r["resume_err"]), "dead") ||
		r["wrapped_ok"] != false || r["closure"] != "kept 100" {
		t.Errorf("the next task saw %v (%s)", r, res.Message)
	}
}

// TestTaskHTTPBodiesEndWithTheTask: a response whose body never ends is
// closed when the request times out, whether the hook goes on or not.
func TestTaskHTTPBodiesEndWithTheTask(t *testing.T) {
	gone, stop := make(chan struct{}, 4), make(chan struct{})
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Length", "1000000")
		w.WriteHeader(200)
		w.Write([]byte("first bytes"))
		w.(nethttp.Flusher).Flush()
		select {
		case <-r.Context().Done(): // the client let go
			gone <- struct{}{}
		case <-stop: // the test is over (and failed): let Close return
		}
	}))
	defer srv.Close()
	defer close(stop)
	rt := holderRuntime(t, t.TempDir())
	res := luatest.Run(t, rt, holderTask("INSTALL", map[string]any{"mode": "http", "url": srv.URL}))
	if res.Status != 0 || res.Result["err"] != "timeout" {
		t.Fatalf("install: %d %v %s", res.Status, res.Result, res.Message)
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the response body is still open 10 s after its request timed out")
	}
}

// TestTaskLocksEndWithTheTask: a lock taken with fs.with_lock is released
// and its descriptor closed when the function fails, when the hook times
// out inside it, and when a coroutine yields inside it.
func TestTaskLocksEndWithTheTask(t *testing.T) {
	work := t.TempDir()
	rt := holderRuntime(t, work)
	for _, mode := range []string{"lock", "lock-timeout", "lock-yield"} {
		hook := "INSTALL"
		if mode == "lock-timeout" {
			hook = "START"
		}
		res := luatest.Run(t, rt, holderTask(hook, map[string]any{"mode": mode}))
		matches, _ := filepath.Glob(filepath.Join(work, "*", "automatortypes", "holder", "held.lock"))
		if len(matches) != 1 {
			t.Fatalf("%s: lock file %v (%d: %s)", mode, matches, res.Status, res.Message)
		}
		f, err := os.OpenFile(matches[0], os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err != nil {
			t.Errorf("%s: the lock is still held after the task (%d: %s): %v", mode, res.Status, res.Message, err)
		}
		if fds := openFDsTo(matches[0]); fds > 0 {
			t.Errorf("%s: %d descriptors still open on the lock file", mode, fds)
		}
	}
}

// TestTaskDescriptorCap: nested fs.with_lock calls hold a descriptor
// each; past the task's cap the next fails with kind limit.
func TestTaskDescriptorCap(t *testing.T) {
	rt := holderRuntime(t, t.TempDir())
	res := luatest.Run(t, rt, holderTask("INSTALL", map[string]any{"mode": "lock-nested"}))
	r := res.Result
	if res.Status != 0 || r["kind"] != "limit" || fmt.Sprint(r["depth"]) != "33" || !strings.Contains(fmt.Sprint(r["message"]), "32 descriptors, the limit per task") {
		t.Errorf("nested locks: %d %v %s", res.Status, r, res.Message)
	}
}

// openFDsTo counts this process's descriptors open on path.
func openFDsTo(path string) int {
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && target == path {
			n++
		}
	}
	return n
}

// TestTaskCapsFromDefinition: limits.descriptors in a definition (top
// level, overridden by the type's object) and Options.Limits set the
// per-task caps; a type without them gets the runtime's.
func TestTaskCapsFromDefinition(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []struct {
		name     string
		top, typ map[string]any
	}{
		{"deftop", map[string]any{"descriptors": 5}, nil},
		{"typewins", map[string]any{"descriptors": 5}, map[string]any{"descriptors": 3}},
		{"connsraise", nil, map[string]any{"connections": 12}}, // descriptors follow connections up
		{"plain", nil, nil}, // the runtime's 8
	} {
		pl := luatest.Plugin{Name: p.name, Family: "automator", Classname: "Holder",
			Files: map[string]string{"holder.lua": holder}, Extra: map[string]any{}, Top: map[string]any{}}
		if p.top != nil {
			pl.Top["limits"] = p.top
		}
		if p.typ != nil {
			pl.Extra["limits"] = p.typ
		}
		luatest.WritePlugin(t, dir, pl)
	}
	luatest.WriteFile(t, filepath.Join(dir, "bad", "bad.json"),
		`{"name":"bad","automatortypes":["bad"],"bad":{"classname":"B","limits":{"connections":40,"descriptors":20}}}`)
	luatest.WriteFile(t, filepath.Join(dir, "huge", "huge.json"),
		`{"name":"huge","automatortypes":["huge"],"limits":{"descriptors":100000},"huge":{"classname":"H"}}`)
	reg := runtime.DefaultBindings()
	reg.Register(httpb.New(httpb.Options{}))
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: t.TempDir(), Bindings: reg,
		Logger: slog.New(slog.DiscardHandler), Limits: runtime.Limits{MaxTaskDescriptors: 8}})
	for name, want := range map[string]int{"deftop": 6, "typewins": 4, "connsraise": 13, "plain": 9} {
		task := luatest.Task("INSTALL", name, map[string]any{"service": map[string]any{"name": "svc",
			"action": map[string]any{"type": name, "fields": map[string]any{"mode": "lock-nested"}}}})
		res := luatest.Run(t, rt, task)
		r := res.Result
		if res.Status != 0 || r["kind"] != "limit" || fmt.Sprint(r["depth"]) != fmt.Sprint(want) ||
			!strings.Contains(fmt.Sprint(r["message"]), fmt.Sprintf("%d descriptors, the limit per task", want-1)) ||
			!strings.Contains(fmt.Sprint(r["message"]), "raise limits.descriptors in the plugin definition") {
			t.Errorf("%s: want the cap hit at depth %d: %d %v %s", name, want, res.Status, r, res.Message)
		}
	}
	var all []string
	for _, e := range rt.LoadErrors() {
		all = append(all, e.Error())
	}
	msg := strings.Join(all, "\n")
	for _, want := range []string{
		`type "bad": limits.connections 40 is more than limits.descriptors 20`,
		`limits.descriptors 100000: must be between 1 and 1024`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("load errors lack %q:\n%s", want, msg)
		}
	}
}
