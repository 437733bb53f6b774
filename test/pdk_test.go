package test

import (
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
