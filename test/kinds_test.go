package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
)

// writeDriver writes a minimal cluster driver plugin folder under dir.
func writeDriver(t *testing.T, dir string) {
	t.Helper()
	folder := filepath.Join(dir, "mini")
	if err := os.MkdirAll(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	def := `{"name": "mini", "clusterdrivers": ["mini"], "mini": {"classname": "Mini"}}`
	src := `
Mini = require("loom").ClusterDriver:extend("Mini")
function Mini:create_options() return { region = { type = "string", usage = "where" } } end
function Mini:create(req)
  local region = self:option(req.options, "string", "region")
  if region == "" then return nil, { class = "terminal", message = "region is required" } end
  return { endpoint = "https://" .. region .. ".example", metadata = { region = region } }
end
function Mini:post_check(req) req.cluster_info.service_account_token = "t" return req.cluster_info end
function Mini:remove(req) end
`
	for name, content := range map[string]string{"mini.json": def, "mini.lua": src} {
		if err := os.WriteFile(filepath.Join(folder, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCallCLI runs loomd call against the built binary: results on stdout,
// exit 0 / 1 / 2 as loomd run, input from a file or stdin.
func TestCallCLI(t *testing.T) {
	plugins, work := t.TempDir(), t.TempDir()
	writeDriver(t, plugins)
	common := []string{"--plugins", plugins, "--work-dir", work}
	call := func(stdin string, args ...string) (cliRun, map[string]any) {
		t.Helper()
		r := loomd(t, stdin, append(append([]string{"call"}, args...), common...)...)
		var res map[string]any
		if r.stdout != "" {
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
				t.Fatalf("call %v: stdout is not JSON: %v\n%s", args, err, r.stdout)
			}
		}
		return r, res
	}

	r, res := call("", "mini", "create_options")
	if r.code != 0 || res["kind"] != "clusterdriver" || res["result"].(map[string]any)["region"] == nil {
		t.Fatalf("create_options: exit %d %v\n%s", r.code, res, r.stderr)
	}
	in := filepath.Join(t.TempDir(), "in.json")
	os.WriteFile(in, []byte(`{"options": {"string": {"region": "eu"}}}`), 0o644)
	r, res = call("", "mini", "create", in)
	if r.code != 0 || res["result"].(map[string]any)["endpoint"] != "https://eu.example" {
		t.Fatalf("create: exit %d %v\n%s", r.code, res, r.stderr)
	}
	r, res = call(`{"options": {}}`, "mini", "create", "-")
	if r.code != 1 || res["status"] != float64(1) || res["error"].(map[string]any)["class"] != "terminal" ||
		!strings.Contains(r.stderr, "region is required") {
		t.Fatalf("failing create: exit %d %v\n%s", r.code, res, r.stderr)
	}
	r, res = call(`{"cluster_info": {}, "options": {}}`, "mini", "update", "-")
	if r.code != 1 || res["defaulted"] != true || res["message"] != "update not supported" {
		t.Fatalf("absent update: exit %d %v\n%s", r.code, res, r.stderr)
	}
	for _, c := range []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"mini", "create", "-"}, `{"options": {"int": {"n": "x"}}}`, `input.options.int.n: want an integer`},
		{[]string{"mini", "create", "-"}, `{"options": `, `not valid JSON`},
		{[]string{"mini", "confirm"}, ``, `clusterdriver has no hook "confirm"`},
		{[]string{"ghost", "create"}, ``, `no plugin in`},
		{[]string{"mini"}, ``, `accepts between 2 and 3 arg(s)`},
	} {
		r, _ := call(c.stdin, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("call %v: exit %d, stderr %q, want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}

	// plugins list and check know the kind.
	lr := loomd(t, "", append([]string{"plugins", "list"}, common...)...)
	if lr.code != 0 || !strings.Contains(lr.stdout, "clusterdriver") {
		t.Fatalf("plugins list: %d\n%s%s", lr.code, lr.stdout, lr.stderr)
	}
	cr := loomd(t, "", append([]string{"plugins", "check"}, common...)...)
	if cr.code != 0 || !strings.Contains(cr.stdout, "1 plugin types OK, 0 errors") {
		t.Fatalf("plugins check: %d\n%s%s", cr.code, cr.stdout, cr.stderr)
	}
	kr := loomd(t, "", "kinds", "bucketprovisioners")
	if kr.code != 0 || !strings.Contains(kr.stdout, "| `provision` | **yes** |") {
		t.Fatalf("kinds: %d\n%s%s", kr.code, kr.stdout, kr.stderr)
	}
}

// TestCallsThroughDaemon queues calls with POST /v1/calls on a real
// daemon (worker processes, embedded NATS): records, long polls and
// results as for Coopr tasks, and a machine provider's creation and
// deletion cycle against its fake API.
func TestCallsThroughDaemon(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "plugins"), 0o755)
	d := startDaemon(t, dir, "d.log", nil, "--plugins", examples("kinds"))
	post := func(body string) (int, map[string]any) {
		t.Helper()
		code, b := d.call("POST", "/v1/calls", body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return code, m
	}
	run := func(body string) (api.Task, map[string]any) {
		t.Helper()
		code, m := post(body)
		if code != http.StatusAccepted || m["served"] != true {
			t.Fatalf("POST /v1/calls %s = %d %v", body, code, m)
		}
		task := d.wait(m["taskId"].(string))
		var res map[string]any
		if err := json.Unmarshal(task.Result, &res); err != nil {
			t.Fatalf("call %s: result %s: %v", body, task.Result, err)
		}
		return task, res
	}
	task, res := run(`{"type": "gkelike", "hook": "create_options"}`)
	if task.State != queue.Succeeded || task.Family != "clusterdriver" || task.Hook != "create_options" || task.TaskName != "CALL" ||
		res["kind"] != "clusterdriver" || res["result"].(map[string]any)["api-url"] == nil {
		t.Fatalf("create_options: %+v %v", task, res)
	}

	api := &fakeAPI{token: "hz-token"}
	var servers []map[string]any
	url := api.serve(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch r.Method {
		case "GET":
			reply(w, 200, map[string]any{"servers": servers})
		case "POST":
			body["id"], body["status"] = 1, "running"
			servers = append(servers, body)
			reply(w, 201, map[string]any{"server": body})
		case "DELETE":
			servers = nil
			reply(w, 204, nil)
		}
	})
	machine := fmt.Sprintf(`{"metadata": {"name": "w1", "uid": "u1"}, "spec": {"providerSpec": {"value": {"cloudProviderSpec": {"apiUrl": %q, "token": "hz-token"}}}}}`, url)
	task, res = run(`{"callId": "get-1", "type": "fakecloud", "hook": "get", "input": {"machine": ` + machine + `}}`)
	if task.TaskID != "get-1" || task.State != queue.Failed || res["error"].(map[string]any)["class"] != "not_found" {
		t.Fatalf("get: %+v %v", task, res)
	}
	_, res = run(`{"type": "fakecloud", "hook": "create", "input": {"machine": ` + machine + `, "userdata": ""}}`)
	if res["status"] != float64(0) || res["result"].(map[string]any)["provider_id"] != "fakecloud://1" {
		t.Fatalf("create: %v", res)
	}
	for _, want := range []bool{false, true} {
		if _, res = run(`{"type": "fakecloud", "hook": "cleanup", "input": {"machine": ` + machine + `}}`); res["result"] != want {
			t.Fatalf("cleanup: %v, want %v", res, want)
		}
	}
	// The same id again is the same call: nothing runs twice.
	if code, m := post(`{"callId": "get-1", "type": "fakecloud", "hook": "get", "input": {"machine": ` + machine + `}}`); code != http.StatusOK || m["duplicate"] != true {
		t.Fatalf("duplicate: %d %v", code, m)
	}
	for body, want := range map[string]string{
		`{"type": "fakecloud", "hook": "get", "input": {}}`:             `input: missing "machine"`,
		`{"type": "fakecloud", "hook": "confirm"}`:                      `cloudprovider has no hook "confirm"`,
		`{"type": "ghost", "hook": "get"}`:                              `does not load type "ghost"`,
		`{"type": "ghost", "hook": "get", "kind": "provider"}`:          `not a called kind`,
		`{"type": "fakecloud", "hook": "get", "kind": "clusterdriver"}`: `is a cloudprovider type`,
		`{"type": "fakecloud"}`:                                         `missing "hook"`,
	} {
		if code, m := post(body); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(m["error"]), want) {
			t.Errorf("POST %s = %d %v, want 400 and %q", body, code, m, want)
		}
	}
}

// TestExampleKindSuites runs the examples' Lua suites with loomd test
// (loom.test.call against loom.test.http fakes).
func TestExampleKindSuites(t *testing.T) {
	r := loomd(t, "", "test", "examples/kinds")
	if r.code != 0 || !strings.Contains(r.stdout, "52 passed, 0 failed") {
		t.Fatalf("loomd test examples/kinds: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
