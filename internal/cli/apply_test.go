package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApplyRollback: loomd apply --local --on-failure rollback reports the
// failed create, then destroys what it made; the next plan is a create.
func TestApplyRollback(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plugins/p/p.json": `{"name": "p", "providertypes": ["p"], "p": {"name": "p", "classname": "P",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/p/p.lua": `local loom = require("loom")
P = loom.Provider:extend("P")
function P:create(input) self.result.result.providerid = "m-" .. self.task.nodeId end
function P:confirm(input) self.result.ipaddresses = { access_v4 = "192.0.2.7" } end
function P:delete(input) log.info("deleted %s", tostring(input.providerid)) end
return P
`,
		"plugins/a/a.json": `{"name": "a", "automatortypes": ["a"], "a": {"name": "a", "classname": "A",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/a/a.lua": `local loom = require("loom")
A = loom.Automator:extend("A")
function A:bootstrap(input) end
function A:install(input) error({kind = "config", message = "no package for " .. self.task.nodeId}, 0) end
return A
`,
		"c.yaml": `name: c
provider: {type: p}
nodegroups: [{name: n, count: 2, services: [s]}]
services:
  s: {actions: {install: {type: a}}}
`,
	}
	for rel, c := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		a := testApp(map[string]string{"HOME": dir}, &out, &errb)
		args = append(args, "--plugins", filepath.Join(dir, "plugins"), "--work-dir", filepath.Join(dir, "work"),
			"--state-dir", filepath.Join(dir, "state"))
		code := a.Execute(args)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("apply", filepath.Join(dir, "c.yaml"), "--local", "--on-failure", "rollback")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"Job c-001 failed: INSTALL s on c-n-", "failed: no package for c-n-", "--on-failure rollback: roll back failed job c-001: destroy 2 node(s)",
		"Cluster c: terminated (job c-002, destroy: complete"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(errs, "deleted m-c-n-") != 2 {
		t.Errorf("the provider did not delete both machines:\n%s", errs)
	}
	if code, out, _ := run("plan", filepath.Join(dir, "c.yaml")); code != 0 || !strings.Contains(out, "Plan: create cluster c: ") {
		t.Errorf("plan after the rollback: %d\n%s", code, out)
	}
	if code, _, errs := run("apply", filepath.Join(dir, "c.yaml"), "--local", "--on-failure", "undo"); code != 2 || !strings.Contains(errs, "want keep or rollback") {
		t.Errorf("bad --on-failure: %d %s", code, errs)
	}
}
