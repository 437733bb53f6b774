package shell_test

// Tests of the shell automator through Loom's runtime against a real
// OpenSSH sshd on loopback (internal/sshdtest): the task-JSON lookup
// library, argument handling, failures, script timeouts, shipping on
// demand and re-shipping. test/e2e_test.go drives it through loomd.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/sshdtest"
	loomrt "github.com/loomrt/loom/runtime"
)

const tenant = "t1"

// pluginDir is the repository's plugins/shell.
func pluginDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

// env is one test's sshd, work dir and runtime (with loomd's bindings, so
// one SSH pool serves all its tasks, as in loomd).
type env struct {
	t     testing.TB
	srv   *sshdtest.Server
	work  string
	cache string // the remote cache dir, unique to the test
	// plugins holds a copy of plugins/shell (plus any extra Lua files).
	plugins string
	rt      *loomrt.Runtime
	seq     int
}

// newEnv starts sshd and loads plugins/shell, plus the extra Lua files
// given (name -> source), which load after shell.lua.
func newEnv(t testing.TB, extra map[string]string) *env {
	t.Helper()
	return newEnvWith(t, extra, sshdtest.Config{AllowRoot: true})
}

// newEnvWith is newEnv with an sshd configuration of the test's own.
func newEnvWith(t testing.TB, extra map[string]string, cfg sshdtest.Config) *env {
	t.Helper()
	srv := sshdtest.Start(t, cfg)
	root := t.TempDir()
	e := &env{t: t, srv: srv, work: filepath.Join(root, "work")}
	// A cache dir of its own, so tests (and packages tested in parallel)
	// never share one.
	cache, err := os.MkdirTemp("/var/cache", "loom-shell-test-")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(cache) // BOOTSTRAP (or the first action) creates it
	e.cache = cache
	t.Cleanup(func() { os.RemoveAll(cache) })

	plugins := filepath.Join(root, "plugins")
	if err := os.CopyFS(filepath.Join(plugins, "shell"), os.DirFS(pluginDir())); err != nil {
		t.Fatal(err)
	}
	for name, src := range extra {
		if err := os.WriteFile(filepath.Join(plugins, "shell", name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.plugins = plugins
	e.restart()
	t.Cleanup(func() { e.rt.Close() })
	e.writeWork("keys/id", string(srv.KeyPEM), 0o600)
	return e
}

// restart replaces the runtime with a new one, as a loomd restart would:
// a fresh VM pool and a fresh, empty SSH connection pool.
func (e *env) restart() {
	e.t.Helper()
	if e.rt != nil {
		e.rt.Close()
	}
	rt, err := loomrt.New(loomrt.Options{
		PluginsDir: e.plugins, WorkDir: e.work, Tenant: tenant,
		// A short kill grace: the timeout tests wait it out.
		Bindings: std.New(std.Options{SSH: sshb.Options{KillGrace: time.Second}}),
		Timeout:  60 * time.Second,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.rt = rt
}

// shellDir is the automator's work dir, where its resources live.
func (e *env) shellDir() string { return filepath.Join(e.work, tenant, "automatortypes", "shell") }

func (e *env) writeWork(rel, content string, mode os.FileMode) {
	e.t.Helper()
	p := filepath.Join(e.shellDir(), rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		e.t.Fatal(err)
	}
}

// task is an automator task in Coopr's shape for the test sshd, logging
// in as the NOPASSWD sudo user with a key, host keys pinned. fields nil
// means a BOOTSTRAP; the test's cache dir is set either way.
func (e *env) task(name string, fields map[string]any, config map[string]any) []byte {
	e.seq++
	keys := map[string]any{}
	for typ, k := range e.srv.HostKeys {
		keys[typ] = base64.StdEncoding.EncodeToString(k.Marshal())
	}
	if fields == nil {
		fields = map[string]any{}
	}
	if _, ok := fields["cache_dir"]; !ok {
		fields["cache_dir"] = e.cache
	}
	cfg := map[string]any{
		"hostname":    "node1.example.com",
		"ipaddresses": map[string]any{"access_v4": e.srv.Host, "bind_v4": e.srv.Host},
		"automators":  []any{"shell"},
		"services":    []any{"svc"},
		"ssh-auth": map[string]any{"user": e.srv.NoPasswdUser, "identityfile": filepath.Join(e.shellDir(), "keys/id"),
			"port": e.srv.Port},
		"ssh_host_keys": keys,
		"service":       map[string]any{"name": "svc", "action": map[string]any{"type": "shell", "fields": fields}},
	}
	for k, v := range config {
		cfg[k] = v
	}
	data, err := json.Marshal(map[string]any{
		"taskId": fmt.Sprintf("00000009-001-%03d", e.seq), "clusterId": "00000009", "nodeId": "node-1",
		"taskName": name, "config": cfg,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

func (e *env) run(task []byte) *loomrt.Result {
	e.t.Helper()
	res, err := e.rt.Run(context.Background(), task)
	if err != nil {
		e.t.Fatalf("run: %v", err)
	}
	return res
}

func (e *env) script(name string, fields map[string]any) *loomrt.Result {
	e.t.Helper()
	if fields == nil {
		fields = map[string]any{}
	}
	fields["script"] = name
	return e.run(e.task("INSTALL", fields, nil))
}

func mustOK(t testing.TB, what string, r *loomrt.Result) {
	t.Helper()
	if r.Status != 0 {
		t.Fatalf("%s failed: status %d: %s\nstdout: %s\nstderr: %s", what, r.Status, r.Message, r.Stdout, r.Stderr)
	}
}

// runDirEmpty fails if task data outlived its script.
func (e *env) runDirEmpty() {
	e.t.Helper()
	entries, err := os.ReadDir(filepath.Join(e.cache, "run"))
	if err != nil {
		e.t.Fatalf("reading %s/run: %v", e.cache, err)
	}
	if len(entries) != 0 {
		e.t.Errorf("task data left in %s/run: %v", e.cache, entries)
	}
}

// TestLookupKey: loom_lookup_key (and coopr_lookup_key) return the task's
// values, special characters included, using only sh and awk; the first
// action ships the library on demand (no BOOTSTRAP ran).
func TestLookupKey(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/lookups.sh", `#!/bin/sh
for k in taskId config/hostname /config/cluster/s config/cluster/n config/cluster/f config/cluster/b \
	config/cluster/arr config/cluster/arr/1 config/cluster/arr/2 config/cluster/arr/2/x config/cluster/obj \
	config/cluster/obj/k2/deep config/cluster/unicode config/cluster/empty config/services; do
	printf '%s=[%s]\n' "$k" "$(loom_lookup_key "$k")"
done
printf 'coopr=[%s]\n' "$(coopr_lookup_key config/cluster/obj/k1)"
loom_lookup_key config/nope
echo "missing rc=$?"
loom_lookup_key
echo "usage rc=$?"
`, 0o755)
	cluster := map[string]any{
		"s": "a\tb\nc\\d 'q' \"dq\" $HOME", "n": 12345678901234, "f": 1.5, "b": true,
		"arr": []any{1, "two", map[string]any{"x": 1}}, "obj": map[string]any{"k1": "v1", "k2": map[string]any{"deep": "yes"}},
		"unicode": "héllo ☃", "empty": "",
	}
	r := e.run(e.task("CONFIGURE", map[string]any{"script": "lookups.sh"}, map[string]any{"cluster": cluster}))
	mustOK(t, "lookups", r)
	want := strings.Join([]string{
		"taskId=[00000009-001-001]",
		"config/hostname=[node1.example.com]",
		"/config/cluster/s=[a\tb\nc\\d 'q' \"dq\" $HOME]",
		"config/cluster/n=[12345678901234]",
		"config/cluster/f=[1.5]",
		"config/cluster/b=[true]",
		`config/cluster/arr=[1 two {"x":1}]`,
		"config/cluster/arr/1=[two]",
		`config/cluster/arr/2=[x]`,
		"config/cluster/arr/2/x=[1]",
		"config/cluster/obj=[k1 k2]",
		"config/cluster/obj/k2/deep=[yes]",
		"config/cluster/unicode=[héllo ☃]",
		"config/cluster/empty=[]",
		"config/services=[svc]",
		"coopr=[v1]",
		"missing rc=1",
		"usage rc=2",
	}, "\n") + "\n"
	if r.Stdout != want {
		t.Errorf("lookups printed:\n%s\nwant:\n%s", r.Stdout, want)
	}
	if !strings.Contains(r.Stderr, "config/nope: no such key") || !strings.Contains(r.Stderr, "usage: loom_lookup_key") {
		t.Errorf("lookup errors on stderr: %q", r.Stderr)
	}
	e.runDirEmpty()
}

// TestArgs: args are words, never shell code, whether a string split like
// shell words or a JSON array; the script's stdout and stderr come back.
func TestArgs(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/args.sh", "#!/bin/sh\nfor a in \"$@\"; do printf '<%s>\\n' \"$a\"; done\n", 0o755)
	// A script that lost its execute bit still runs (through sh).
	e.writeWork("scripts/noexec.sh", "echo ran without x as $(id -un)\n", 0o644)
	pwned := filepath.Join(t.TempDir(), "pwned")

	r := e.script("args.sh", map[string]any{"args": `plain "two words" 'single $(touch ` + pwned + `)' back\ slash "" ;rm`})
	mustOK(t, "string args", r)
	want := "<plain>\n<two words>\n<single $(touch " + pwned + ")>\n<back slash>\n<>\n<;rm>\n"
	if r.Stdout != want {
		t.Errorf("string args gave %q, want %q", r.Stdout, want)
	}
	r = e.script("args.sh", map[string]any{"args": []any{"$(touch " + pwned + ")", "a b", 7}})
	mustOK(t, "array args", r)
	if want := "<$(touch " + pwned + ")>\n<a b>\n<7>\n"; r.Stdout != want {
		t.Errorf("array args gave %q, want %q", r.Stdout, want)
	}
	// A command on PATH, with its args in fields.script, as Coopr allowed.
	r = e.script("echo hello   'big world'", nil)
	mustOK(t, "plain command", r)
	if r.Stdout != "hello big world\n" {
		t.Errorf("plain command printed %q", r.Stdout)
	}
	r = e.script("noexec.sh", nil)
	mustOK(t, "script without x bit", r)
	if r.Stdout != "ran without x as root\n" {
		t.Errorf("noexec.sh printed %q", r.Stdout)
	}
	if _, err := os.Stat(pwned); err == nil {
		t.Fatalf("an argument was run as shell code")
	}

	r = e.script("args.sh", map[string]any{"args": `"unbalanced`})
	if r.Status == 0 || !strings.Contains(r.Message, "fields.args has an unbalanced \" quote") {
		t.Errorf("unbalanced quote: %d %q", r.Status, r.Message)
	}
	r = e.script("no-such-script.sh", nil)
	if r.Status == 0 || r.Error["exit_code"] != float64(127) || !strings.Contains(r.Stderr, "no-such-script.sh: not found in the scripts dir") {
		t.Errorf("missing script: %d %v %q", r.Status, r.Error, r.Stderr)
	}
	r = e.run(e.task("INSTALL", map[string]any{"script": "args.sh", "cache_dir": "/"}, nil))
	if r.Status == 0 || !strings.Contains(r.Message, "cache_dir") {
		t.Errorf("cache_dir / accepted: %d %q", r.Status, r.Message)
	}
	e.runDirEmpty()
}

// TestScriptTimeout: a script past fields.timeout is terminated, nothing
// of it keeps running, and its task data is removed.
func TestScriptTimeout(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/slow.sh", "#!/bin/sh\necho starting\nsleep 31.25\necho never\n", 0o755)
	r := e.script("slow.sh", map[string]any{"timeout": "1"})
	if r.Status == 0 || r.Error["kind"] != "timeout" || !strings.Contains(r.Message, "slow.sh timed out") {
		t.Fatalf("timeout: %d %v %q", r.Status, r.Error, r.Message)
	}
	if !strings.Contains(r.Stdout, "starting") {
		t.Errorf("the output before the timeout is lost: %q", r.Stdout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(sshdtest.ProcessesMatching("sleep 31.25")) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the timed-out script's sleep is still running")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.runDirEmpty()
}

// TestScriptTimeoutKillsGroupAsRoot: logged in as root (sshd refuses
// signal requests for root sessions), a timed-out script that ignores TERM
// and has a child in the background is killed with its whole process
// group, the wrapper included, and its task data is removed all the same.
// As the sudo user, the same.
func TestScriptTimeoutKillsGroupAsRoot(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/stubborn.sh", "#!/bin/sh\ntrap '' TERM\necho starting\nsleep 31.31 &\nsleep 31.32\necho never\n", 0o755)
	for _, user := range []string{sshdtest.Root, e.srv.NoPasswdUser} {
		t.Run(user, func(t *testing.T) {
			auth := map[string]any{"user": user, "identityfile": filepath.Join(e.shellDir(), "keys/id"), "port": e.srv.Port}
			r := e.run(e.task("INSTALL", map[string]any{"script": "stubborn.sh", "timeout": "1"}, map[string]any{"ssh-auth": auth}))
			if r.Status == 0 || r.Error["kind"] != "timeout" {
				t.Fatalf("timeout: %d %v %q", r.Status, r.Error, r.Message)
			}
			// KILL, unless the machine is so loaded that TERM came before
			// the trap was set (then the wrapper cleaned up itself), or
			// that the login shell had not even started the wrapper (which
			// then never runs the script).
			if !regexp.MustCompile(`stubborn.sh timed out; (remote process group \d+ (killed with KILL|ended on TERM)|it never reported its process group)`).MatchString(r.Message) {
				t.Errorf("message %q does not say what was killed", r.Message)
			}
			// "starting" too, unless the load delayed the script past its
			// timeout.
			if r.Stdout != "starting\n" && r.Stdout != "" {
				t.Errorf("stdout = %q", r.Stdout)
			}
			// A login shell still reading its rc files names the script in
			// its arguments: wait for it to go.
			deadline := time.Now().Add(2 * time.Minute)
			for len(sshdtest.ProcessesMatching("sleep 31.3")) > 0 || len(sshdtest.ProcessesMatching("stubborn.sh")) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("processes of the timed-out script survive: %v %v",
						sshdtest.ProcessesMatching("sleep 31.3"), sshdtest.ProcessesMatching("stubborn.sh"))
				}
				time.Sleep(50 * time.Millisecond)
			}
			e.runDirEmpty()
		})
	}
}

// TestBootstrapReplaces: BOOTSTRAP ships scripts, archives and lib with
// the modes they have; a later BOOTSTRAP removes what the resources no
// longer hold and leaves no staging dirs.
func TestBootstrapReplaces(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/a.sh", "#!/bin/sh\necho a\n", 0o755)
	e.writeWork("scripts/b.sh", "#!/bin/sh\necho b\n", 0o755)
	e.writeWork("archives/pkg/data/file.txt", "payload\n", 0o640)
	mustOK(t, "BOOTSTRAP", e.run(e.task("BOOTSTRAP", nil, nil)))
	for p, mode := range map[string]os.FileMode{"scripts/a.sh": 0o755, "scripts/b.sh": 0o755, "archives/pkg/data/file.txt": 0o640,
		"lib/loom-wrapper.sh": 0o755, "lib/loom_lookup_key": 0o755, "run": 0o700 | os.ModeDir} {
		st, err := os.Stat(filepath.Join(e.cache, p))
		if err != nil || st.Mode() != mode {
			t.Errorf("%s: %v, mode %v; want %v", p, err, st.Mode(), mode)
		}
	}
	if err := os.Remove(filepath.Join(e.shellDir(), "scripts/b.sh")); err != nil {
		t.Fatal(err)
	}
	mustOK(t, "BOOTSTRAP again", e.run(e.task("BOOTSTRAP", nil, nil)))
	if _, err := os.Stat(filepath.Join(e.cache, "scripts/b.sh")); !os.IsNotExist(err) {
		t.Errorf("b.sh is still on the node after it left the resources")
	}
	entries, _ := os.ReadDir(e.cache)
	var names []string
	for _, en := range entries {
		names = append(names, en.Name())
	}
	if strings.Join(names, " ") != "archives lib run scripts" {
		t.Errorf("cache dir holds %v", names)
	}
	r := e.script("a.sh", nil)
	mustOK(t, "a.sh", r)
	if r.Stdout != "a\n" {
		t.Errorf("a.sh printed %q", r.Stdout)
	}
}

// TestSudoPassword: a user whose sudo needs a password gets it from
// ssh-auth's password; the password appears nowhere in the result.
func TestSudoPassword(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/who.sh", "#!/bin/sh\nid -un\n", 0o755)
	auth := map[string]any{"user": e.srv.User, "password": e.srv.Password, "port": e.srv.Port}
	r := e.run(e.task("START", map[string]any{"script": "who.sh"}, map[string]any{"ssh-auth": auth}))
	mustOK(t, "sudo with password", r)
	if r.Stdout != "root\n" {
		t.Errorf("who.sh printed %q, want root", r.Stdout)
	}
	out, _ := json.Marshal(r)
	if strings.Contains(string(out), e.srv.Password) {
		t.Errorf("the result shows the password: %s", out)
	}
}

// TestOneSessionPerAction counts, in a real sshd's log, the SSH sessions
// each hook opens: BOOTSTRAP ships everything in one, and each service
// action is one, through sudo with the login environment too (sudo -E is
// read in the script's own session), as root, and with sudo_env off.
func TestOneSessionPerAction(t *testing.T) {
	e := newEnv(t, nil)
	e.writeWork("scripts/hello.sh", "#!/bin/sh\necho \"hello $(id -un) ${SSH_CONNECTION:+ssh}\"\n", 0o755)
	sessions := func() int { return strings.Count(e.srv.Logs(), "Starting session: command") }
	rootAuth := map[string]any{"ssh-auth": map[string]any{"user": sshdtest.Root, "identityfile": filepath.Join(e.shellDir(), "keys/id"), "port": e.srv.Port}}
	for _, c := range []struct {
		what, name string
		fields     map[string]any
		config     map[string]any
		stdout     string
	}{
		{"BOOTSTRAP through sudo", "BOOTSTRAP", nil, nil, ""},
		{"INSTALL through sudo, login environment", "INSTALL", map[string]any{"script": "hello.sh"}, nil, "hello root ssh\n"},
		{"CONFIGURE through sudo, sudo_env off", "CONFIGURE", map[string]any{"script": "hello.sh", "sudo_env": "false"}, nil, "hello root \n"},
		{"START as root", "START", map[string]any{"script": "hello.sh"}, rootAuth, "hello root ssh\n"},
	} {
		before := sessions()
		r := e.run(e.task(c.name, c.fields, c.config))
		mustOK(t, c.what, r)
		if c.stdout != "" && r.Stdout != c.stdout {
			t.Errorf("%s: stdout %q, want %q", c.what, r.Stdout, c.stdout)
		}
		// sshd logs the session before it answers the channel open, so the
		// count is complete once the hook returned.
		if n := sessions() - before; n != 1 {
			t.Errorf("%s opened %d SSH sessions, want 1:\n%s", c.what, n, e.srv.Logs())
		}
	}
}
