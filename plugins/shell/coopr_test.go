package shell_test

// Coopr compatibility of the shell automator (issue 14): Coopr's own
// lookup-key test suite as a table, resources that are links (Coopr's
// layout), sudo -E, $TASKJSON and the args_shell opt-in.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/sshdtest"
)

// cooprLookupCases are the cases of Coopr's shell automator test suite
// (lib/test/{simplekey,nested,duplicatekeys,array}.sh, 23 in all), each
// against its JSON fixture. want "" with ok false is _expect_failure; a
// nil-able want (any output) is marked with "*".
var cooprLookupCases = []struct {
	fixture string
	key     string
	ok      bool
	want    string
}{
	{"simplekey", "bar", true, "456"},
	{"simplekey", "/bar", true, "456"},
	{"simplekey", "space", true, "a space"},
	{"simplekey", "doesntexist", false, ""},

	{"nested", "bar", true, "baz"},
	{"nested", "/bar", true, "baz"},
	{"nested", "/config/cluster/bar", true, "baz"},
	{"nested", "doesntexist", false, ""},

	{"duplicatekeys", "foo", false, ""},
	{"duplicatekeys", "^/foo", true, "first"},
	{"duplicatekeys", "/config/cluster/foo", true, "nested"},
	{"duplicatekeys", "bar", false, ""},
	{"duplicatekeys", "/bar", true, "first"},
	{"duplicatekeys", "^/bar", true, "first"},
	{"duplicatekeys", "baz", false, ""},
	{"duplicatekeys", "baz$", true, "first"},
	{"duplicatekeys", "/baz", true, "first"},

	{"array", "simple_array", true, "foo bar"},
	{"array", "nested_array", true, "a b c"},
	{"array", "nonunique_array", false, ""},
	{"array", "^/nonunique_array", true, "a b"},
	{"array", "/config/cluster/nonunique_array", true, "name conflict"},
	{"array", "array_spaces", true, "*"},
}

// cooprFixtures are Coopr's lib/test/*.json (array.json without the
// trailing comma that made it invalid JSON).
var cooprFixtures = map[string]string{
	"simplekey":     `{"foo": "123", "bar": "456", "space": "a space"}`,
	"nested":        `{"config": {"cluster": {"foo": "bar", "bar": "baz"}}}`,
	"duplicatekeys": `{"foo": "first", "bar": "first", "baz": "first", "xbazx": "first", "config": {"cluster": {"foo": "nested", "xbarx": "nested"}}}`,
	"array":         `{"simple_array": ["foo", "bar"], "nonunique_array": ["a", "b"], "array_spaces": ["foo", "second element"], "config": {"cluster": {"nonunique_array": "name conflict", "nested_array": ["a", "b", "c"]}}}`,
}

// withTop merges a fixture into a task: top-level keys beside taskId,
// config keys into config.
func withTop(t *testing.T, task []byte, fixture string) []byte {
	t.Helper()
	var m, f map[string]any
	if err := json.Unmarshal(task, &m); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(fixture), &f); err != nil {
		t.Fatal(err)
	}
	for k, v := range f {
		if k == "config" {
			for ck, cv := range v.(map[string]any) {
				m["config"].(map[string]any)[ck] = cv
			}
			continue
		}
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

// TestCooprLookupKey runs Coopr's lookup-key suite: 23/23 as on Coopr.
func TestCooprLookupKey(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/lookup.sh", `#!/bin/sh
for k in "$@"; do
	out=$(coopr_lookup_key "$k" 2>&1)
	printf '%s\t%s\t%s\n' "$k" "$?" "$out"
done
`, 0o755)
	byFixture := map[string][]int{}
	for i, c := range cooprLookupCases {
		byFixture[c.fixture] = append(byFixture[c.fixture], i)
	}
	passed := 0
	for fixture, idx := range byFixture {
		var keys []any
		for _, i := range idx {
			keys = append(keys, cooprLookupCases[i].key)
		}
		task := withTop(t, e.task("INSTALL", map[string]any{"script": "lookup.sh", "args": keys}, nil), cooprFixtures[fixture])
		r := e.run(task)
		mustOK(t, fixture, r)
		lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
		if len(lines) != len(idx) {
			t.Fatalf("%s: %d lines for %d keys:\n%s", fixture, len(lines), len(idx), r.Stdout)
		}
		for n, i := range idx {
			c := cooprLookupCases[i]
			parts := strings.SplitN(lines[n], "\t", 3)
			ok := parts[1] == "0"
			switch {
			case ok != c.ok:
				t.Errorf("%s: coopr_lookup_key %s: exit %s (%q), want success %v", fixture, c.key, parts[1], parts[2], c.ok)
			case c.ok && c.want != "*" && parts[2] != c.want:
				t.Errorf("%s: coopr_lookup_key %s = %q, want %q", fixture, c.key, parts[2], c.want)
			default:
				passed++
			}
		}
	}
	if passed != 23 {
		t.Errorf("Coopr's lookup suite: %d/23 passed", passed)
	}
}

// TestCooprScriptEnvironment: through sudo, a script sees the SSH user's
// environment (sudo -E), $TASKJSON and $COOPR_TASK_JSON name the task JSON,
// and args_shell hands args to the node's shell.
func TestCooprScriptEnvironment(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/env.sh", `#!/bin/sh
echo "user=$(id -un)"
echo "ssh=${SSH_CONNECTION:+set}"
echo "taskjson=$(grep -c '"taskId":"00000009-001-' "$TASKJSON")"
echo "same=$([ "$TASKJSON" = "$COOPR_TASK_JSON" ] && echo yes)"
for a in "$@"; do printf '<%s>\n' "$a"; done
`, 0o755)
	r := e.script("env.sh", map[string]any{"args": `"a b" $((1+2)) 'x y'`, "args_shell": "true"})
	mustOK(t, "env.sh", r)
	want := "user=root\nssh=set\ntaskjson=1\nsame=yes\n<a b>\n<3>\n<x y>\n"
	if r.Stdout != want {
		t.Errorf("env.sh printed:\n%s\nwant:\n%s\n%s", r.Stdout, want, r.Stderr)
	}
	// Without the opt-in, args are words, never expanded.
	r = e.script("env.sh", map[string]any{"args": `"a b" $((1+2))`})
	mustOK(t, "env.sh", r)
	if !strings.HasSuffix(r.Stdout, "<a b>\n<$((1+2))>\n") {
		t.Errorf("without args_shell: %q", r.Stdout)
	}
	e.runDirEmpty()
}

// TestCooprResourceLinks: resources kept as links into a versioned store
// (Coopr's layout, and loomd's resource sync) reach the node as the files
// they point to (tar -h), so INSTALL finds them.
func TestCooprResourceLinks(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork(".resources/scripts/hello.sh/2/hello.sh", "#!/bin/sh\necho hello v2\n", 0o755)
	e.writeWork(".resources/archives/pkg/1/pkg/readme.txt", "archive content\n", 0o644)
	for link, target := range map[string]string{
		"scripts/hello.sh": "../.resources/scripts/hello.sh/2/hello.sh",
		"archives/pkg":     "../.resources/archives/pkg/1/pkg",
	} {
		p := filepath.Join(e.shellDir(), link)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	mustOK(t, "BOOTSTRAP", e.run(e.task("BOOTSTRAP", nil, nil)))
	for _, p := range []string{"scripts/hello.sh", "archives/pkg/readme.txt"} {
		fi, err := os.Lstat(filepath.Join(e.cache, p))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s on the node: %v %v, want a regular file", p, fi, err)
		}
	}
	r := e.script("hello.sh", nil)
	mustOK(t, "hello.sh", r)
	if r.Stdout != "hello v2\n" {
		t.Errorf("hello.sh printed %q", r.Stdout)
	}
}

// TestCooprSudoEnvOff: sudo_env false runs the script with sudo's own
// environment (no SSH_CONNECTION).
func TestCooprSudoEnvOff(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/ssh.sh", "#!/bin/sh\necho \"ssh=${SSH_CONNECTION:+set}\"\n", 0o755)
	r := e.script("ssh.sh", map[string]any{"sudo_env": "false"})
	mustOK(t, "ssh.sh", r)
	if r.Stdout != "ssh=\n" {
		t.Errorf("with sudo_env false: %q", r.Stdout)
	}
}

// TestCooprSudoEnvFiltered: the login environment comes back under sudo,
// minus what sudo itself never passes on (LD_*, BASH_ENV, ...).
func TestCooprSudoEnvFiltered(t *testing.T) {
	e := newEnvWith(t, nil, sshdtest.Config{AllowRoot: true,
		Extra: "SetEnv LOOM_KEPT=yes LD_LIBRARY_PATH=/nonexistent-loom BASH_ENV=/nonexistent-loom\n"})
	e.writeWork("scripts/env.sh", "#!/bin/sh\necho \"kept=${LOOM_KEPT-} ld=${LD_LIBRARY_PATH-} bashenv=${BASH_ENV-} user=$(id -un)\"\n", 0o755)
	r := e.script("env.sh", nil)
	mustOK(t, "env.sh", r)
	if r.Stdout != "kept=yes ld= bashenv= user=root\n" {
		t.Errorf("env.sh printed %q", r.Stdout)
	}
}
