package test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoomdTest runs loomd test as a user would: the bundled suites pass
// (exit 0), a failing suite exits 1 with file:line, a diff, --json and
// --junit reports, and a folder with no tests is a usage error (exit 2).
func TestLoomdTest(t *testing.T) {
	r := loomd(t, "", "test", "plugins/static", "plugins/digitalocean")
	if r.code != 0 || !strings.Contains(r.stdout, "TAP version 13") || !strings.Contains(r.stdout, " 0 failed") {
		t.Fatalf("bundled suites: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	junit := filepath.Join(t.TempDir(), "report.xml")
	r = loomd(t, "", "test", "internal/plugtest/testdata/failing", "--timeout", "1s", "--junit", junit)
	if r.code != 1 {
		t.Fatalf("failing suite: exit %d, want 1\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"not ok 1 - same",
		"at: internal/plugtest/testdata/failing/failing_test.lua:3",
		"b.c: expected 2 (number), got 3 (number)",
		"# 0 passed, 8 failed, 0 pending in 1 files",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	x, err := os.ReadFile(junit)
	if err != nil || !strings.Contains(string(x), `<testsuites tests="8" failures="8"`) {
		t.Errorf("JUnit report (%v):\n%s", err, x)
	}

	r = loomd(t, "", "test", "internal/plugtest/testdata/failing", "--json", "--run", "^equals$")
	var rep struct {
		Failed int `json:"failed"`
		Files  []struct {
			Tests []struct {
				Name    string `json:"name"`
				Failure struct {
					Location string `json:"location"`
				} `json:"failure"`
			} `json:"tests"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.Failed != 1 {
		t.Fatalf("--json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	if loc := rep.Files[0].Tests[0].Failure.Location; loc != "internal/plugtest/testdata/failing/failing_test.lua:7" {
		t.Errorf("--json location %q", loc)
	}

	r = loomd(t, "", "test", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "no plugin folder here") {
		t.Errorf("empty folder: exit %d, stderr %s", r.code, r.stderr)
	}
}

// TestLoomdNew: a new provider and a new automator pass loomd test and
// plugins check as generated, and their editor settings point at stubs
// inside the folder.
func TestLoomdNew(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ family, name string }{{"provider", "hcloud"}, {"automator", "web-server"}} {
		r := loomd(t, "", "new", c.family, c.name, "--dir", dir)
		if r.code != 0 {
			t.Fatalf("new %s: exit %d\n%s%s", c.family, r.code, r.stdout, r.stderr)
		}
		folder := filepath.Join(dir, c.name)
		r = loomd(t, "", "test", folder)
		if r.code != 0 || !strings.Contains(r.stdout, " 0 failed, 0 pending in 1 files") {
			t.Errorf("loomd test on a new %s: exit %d\n%s%s", c.family, r.code, r.stdout, r.stderr)
		}
		var rc struct {
			Library []string `json:"workspace.library"`
		}
		data, err := os.ReadFile(filepath.Join(folder, ".luarc.json"))
		if err != nil || json.Unmarshal(data, &rc) != nil || len(rc.Library) != 1 {
			t.Fatalf(".luarc.json (%v): %s", err, data)
		}
		for _, stub := range []string{"loom.d.lua", "loom.http.d.lua", "loom.ssh.d.lua", "loom.test.d.lua"} {
			if _, err := os.Stat(filepath.Join(folder, rc.Library[0], stub)); err != nil {
				t.Errorf("%s: %v", stub, err)
			}
		}
		for _, f := range []string{c.name + ".json", c.name + ".lua", "README.md"} {
			if _, err := os.Stat(filepath.Join(folder, f)); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
		// The entry table is a declared class of loom.Provider (or
		// loom.Automator), so the editor types self and the hooks' input;
		// extend is generic, returning that class.
		src, _ := os.ReadFile(filepath.Join(folder, c.name+".lua"))
		base, input := "loom.Provider", "---@param input loom.CreateInput"
		if c.family == "automator" {
			base, input = "loom.Automator", "---@param input loom.AutomatorInput"
		}
		if !strings.Contains(string(src), ": "+base+"\n") || !strings.Contains(string(src), input) {
			t.Errorf("%s does not declare its class of %s and its hooks' input:\n%s", c.name, base, src)
		}
		stub, _ := os.ReadFile(filepath.Join(folder, rc.Library[0], "loom.d.lua"))
		for _, want := range []string{"---@generic T\n---@param name `T`", "---@return T\nfunction Base:extend(name, fields) end",
			"---@class loom.Provider: LoomProvider", "function os.time(t) end", "function debug.traceback(message, level) end"} {
			if !strings.Contains(string(stub), want) {
				t.Errorf("loom.d.lua lacks %q", want)
			}
		}
	}
	r := loomd(t, "", "plugins", "check", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "2 plugin types OK, 0 errors, 0 warnings") {
		t.Errorf("plugins check on the new plugins: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = loomd(t, "", "new", "provider", "hcloud", "--dir", dir)
	if r.code != 2 || !strings.Contains(r.stderr, "already exists") {
		t.Errorf("new over an existing folder: exit %d, %s", r.code, r.stderr)
	}
}

// TestPluginsCheckStrict: plugins check on one plugin folder reports the
// mistakes loading lets through, with file:line and a suggestion, only for
// that plugin; --json; exit 1 on errors and, with --strict, on warnings.
func TestPluginsCheckStrict(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("typo/typo.json", `{
  "name": "typo",
  "providertypes": ["typo"],
  "permisions": {"http": ["api.example.com"]},
  "typo": {
    "name": "typo",
    "classname": "Typo",
    "parameters": {
      "admin": {
        "fields": {
          "region": {"type": "text", "defualt": "nyc3"},
          "ipv6": {"type": "checkbox", "default": "yes"},
          "size": {"type": "select", "options": ["s", "m"], "default": "xl"}
        }
      }
    }
  }
}`)
	write("typo/typo.lua", `Typo = require("loom").Provider:extend("Typo")
function Typo:create(input) self.result.status = 0 end
function Typo:comfirm(input) self.result.status = 0 end
function Typo:delete(input) self.result.status = 0 end
function Typo:helper() return slef.task end
`)
	// A sibling with problems of its own, which checking typo must not show.
	write("other/other.json", `{"name": "other", "providertypes": ["other"], "other": {"name": "other", "classname": "Other", "bogus": 1}}`)
	write("other/other.lua", `Other = require("loom").Provider:extend("Other")`)

	r := loomd(t, "", "plugins", "check", filepath.Join(dir, "typo"))
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		`typo.json:4: plugin typo: unknown key "permisions" in the definition (did you mean "permissions"?)`,
		`typo.json:11: plugin typo: unknown key "defualt" in parameters.admin.fields.region (did you mean "default"?)`,
		`typo.json:12: plugin typo: parameters.admin.fields.ipv6: default "yes" does not fit a checkbox`,
		`typo.json:13: plugin typo: parameters.admin.fields.size: default "xl" is not one of the options ["s","m"]`,
		`typo.lua:3: plugin typo: Typo defines comfirm, which is not a hook, and does not define confirm: did you mean confirm?`,
		`typo.lua:5: plugin typo: undefined global "slef" (did you mean "self"?)`,
		"1 plugin types OK, 6 errors, 1 warnings",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "other") {
		t.Errorf("a sibling plugin's problems were reported:\n%s", r.stdout)
	}

	// Warnings only: exit 0, or 1 with --strict; --json says the same.
	write("other/other.json", `{"name": "other", "providertypes": ["other"], "other": {"name": "other", "classname": "Other"}}`)
	if r := loomd(t, "", "plugins", "check", filepath.Join(dir, "other")); r.code != 0 {
		t.Errorf("warnings only: exit %d\n%s", r.code, r.stdout)
	}
	r = loomd(t, "", "plugins", "check", filepath.Join(dir, "other"), "--strict", "--json")
	var rep struct {
		OK       bool `json:"ok"`
		Errors   int  `json:"errors"`
		Warnings int  `json:"warnings"`
		Problems []struct {
			Severity string `json:"severity"`
			Message  string `json:"message"`
		} `json:"problems"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 || rep.OK || rep.Errors != 0 || rep.Warnings != 3 {
		t.Fatalf("--strict --json: exit %d, %v: %s", r.code, err, r.stdout)
	}
	if rep.Problems[0].Severity != "warning" || !strings.Contains(rep.Problems[0].Message, "does not define hook") {
		t.Errorf("problems: %+v", rep.Problems)
	}

	// plugins list on a folder with a broken plugin: the error once, exit 1.
	write("broken/broken.json", `{"name": "broken", "providertypes": ["broken"], "broken": {"name": "broken", "classname": "Broken"}}`)
	write("broken/broken.lua", `Broken = (`)
	r = loomd(t, "", "plugins", "list", "--plugins", dir)
	if r.code != 1 || strings.Count(r.stderr, "broken.lua:1") != 1 {
		t.Errorf("plugins list on a broken plugin: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// TestLoomdStubs runs loomd stubs --out: it writes every stub an editor
// needs (each binding, loom.d.lua, the kinds, the test API), identical to
// the committed ones, and ssh's option classes are exact.
func TestLoomdStubs(t *testing.T) {
	out := t.TempDir()
	r := loomd(t, "", "stubs", "--out", out)
	if r.code != 0 {
		t.Fatalf("loomd stubs: exit %d: %s", r.code, r.stderr)
	}
	committed, err := filepath.Glob(filepath.Join(repoRoot(), "stdlib", "types", "*.d.lua"))
	if err != nil || len(committed) == 0 {
		t.Fatalf("no committed stubs: %v", err)
	}
	for _, f := range committed {
		want, _ := os.ReadFile(f)
		got, err := os.ReadFile(filepath.Join(out, filepath.Base(f)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("loomd stubs did not write %s as committed (err %v)", filepath.Base(f), err)
		}
	}
	for _, name := range []string{"loom.d.lua", "loom.test.d.lua", "loom.kinds.d.lua", "loom.ssh.d.lua"} {
		if !strings.Contains(r.stdout, filepath.Join(out, name)) {
			t.Errorf("loomd stubs output does not list %s:\n%s", name, r.stdout)
		}
	}
	ssh, _ := os.ReadFile(filepath.Join(out, "loom.ssh.d.lua"))
	for _, want := range []string{"---@class (exact) ssh.ExecOptions", "---@field timeout? number|string", "---@return ssh.ExecResult", "---@alias ssh.conn ssh.Conn"} {
		if !bytes.Contains(ssh, []byte(want)) {
			t.Errorf("loom.ssh.d.lua lacks %q", want)
		}
	}
}
