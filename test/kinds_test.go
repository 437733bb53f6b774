package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
