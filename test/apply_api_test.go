package test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// httpRequests reads loom_http_requests_total for a route and status
// code from a daemon's /metrics ("0" when absent).
func httpRequests(t *testing.T, d *daemon, route, code string) string {
	t.Helper()
	c, b := d.call("GET", "/metrics", "")
	if c != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", c, b)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, `loom_http_requests_total{code="`+code+`",route="`+route+`"} `); ok {
			return v
		}
	}
	return "0"
}

// TestApplyStateDirThroughTheAPI: apply --state-dir without --local runs
// its tasks on a daemon through its API, each in one request (POST
// /v1/tasks?wait=): the cluster is created, and the daemon saw no GET of
// a task.
func TestApplyStateDirThroughTheAPI(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "plugins/p/p.json"), `{"name": "p", "providertypes": ["p"], "p": {"name": "p", "classname": "P",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`)
	writeFile(t, filepath.Join(dir, "plugins/p/p.lua"), `local loom = require("loom")
P = loom.Provider:extend("P")
function P:create(input) self.result.result.providerid = "m-" .. self.task.nodeId end
function P:confirm(input) self.result.ipaddresses = { access_v4 = "192.0.2.7" } end
function P:delete(input) end
return P
`)
	writeFile(t, filepath.Join(dir, "c.yaml"), "name: c\nprovider: {type: p}\nnodegroups: [{name: n, count: 2}]\n")
	d := startDaemon(t, dir, "d.log", nil)
	posts, gets := httpRequests(t, d, "tasks", "202"), httpRequests(t, d, "task", "200")
	r := loomd(t, "", "apply", filepath.Join(dir, "c.yaml"), "--state-dir", filepath.Join(dir, "state"), "--server", d.url(), "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "Cluster c:") {
		t.Fatalf("apply --state-dir through the API = %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if p, g := httpRequests(t, d, "tasks", "202"), httpRequests(t, d, "task", "200"); p == posts || g != gets {
		t.Errorf("apply: POST /v1/tasks 202s %s -> %s, GET /v1/tasks/{id} 200s %s -> %s; want POSTs and no GET", posts, p, gets, g)
	}
}
