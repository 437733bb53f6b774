package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type cliRun struct {
	stdout, stderr string
	code           int
}

// loomd runs the built binary with args (and stdin), in a clean env.
func loomd(t *testing.T, stdin string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, loomdBin, args...)
	cmd.Dir = repoRoot()
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running loomd %v: %v", args, err)
	}
	return cliRun{out.String(), errb.String(), code}
}

// TestRunExampleTasks runs every example task through the example
// plugins, in lifecycle order, and checks each result and exit code.
func TestRunExampleTasks(t *testing.T) {
	work := t.TempDir()
	for _, name := range []string{"create", "confirm", "bootstrap", "install", "configure", "initialize", "start", "stop", "remove", "delete"} {
		r := loomd(t, "", "run", examples("tasks", name+".json"), "--plugins", examples("plugins"), "--work-dir", work)
		if r.code != 0 {
			t.Fatalf("%s: exit %d\nstdout: %s\nstderr: %s", name, r.code, r.stdout, r.stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%s: stdout is not result JSON: %v\n%s", name, err, r.stdout)
		}
		if res["status"] != float64(0) || res["taskId"] == nil {
			t.Fatalf("%s: result %v", name, res)
		}
		result, _ := res["result"].(map[string]any)
		switch name {
		case "create":
			if result["providerid"] != "skel-8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d" {
				t.Fatalf("create: providerid %v", result)
			}
		case "confirm":
			if res["ipaddresses"].(map[string]any)["access_v4"] != "127.0.0.1" || res["hostname"] == nil {
				t.Fatalf("confirm: %v", res)
			}
		case "start":
			if result["hello"].(map[string]any)["web"].(map[string]any)["state"] != "started" {
				t.Fatalf("start: %v", result)
			}
		}
		// The example's API token is a sensitive field: never printed.
		if strings.Contains(r.stdout+r.stderr, "example-token-not-a-secret") {
			t.Fatalf("%s: the sensitive api_token was printed", name)
		}
	}
	// The provider's "machine" is gone after DELETE, the automator's state remains.
	machines, _ := filepath.Glob(filepath.Join(work, "default", "providertypes", "skeleton", "machines", "*.json"))
	if len(machines) != 0 {
		t.Fatalf("machines left after delete: %v", machines)
	}
	state, err := os.ReadFile(filepath.Join(work, "default", "automatortypes", "hello", "state", "web00000042-1000.example.com.json"))
	if err != nil || !strings.Contains(string(state), `"web": "removed"`) {
		t.Fatalf("automator state: %s %v", state, err)
	}
}

func TestRunExitCodes(t *testing.T) {
	plugins := t.TempDir()
	writeFile(t, filepath.Join(plugins, "fail", "fail.json"), `{"name":"fail","providertypes":["fail"],"fail":{"name":"fail","classname":"Fail"}}`)
	writeFile(t, filepath.Join(plugins, "fail", "fail.lua"), "Fail = {}\nfunction Fail:create(input)\n  error(\"cloud said no\")\nend\n")
	task := `{"taskId":"t1","taskName":"CREATE","config":{"provider":{"providertype":"fail"}}}`

	r := loomd(t, task, "run", "-", "--plugins", plugins, "--work-dir", t.TempDir())
	if r.code != 1 || !strings.Contains(r.stdout, `"status": 1`) || !strings.Contains(r.stdout, "fail.lua:3: cloud said no") {
		t.Fatalf("failing hook: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = loomd(t, `{"taskName": "CREATE",`, "run", "-", "--plugins", plugins)
	if r.code != 2 || !strings.Contains(r.stderr, "malformed JSON") {
		t.Fatalf("malformed task: exit %d %s", r.code, r.stderr)
	}
	r = loomd(t, `{"taskId":"t2","taskName":"CREATE","config":{"provider":{"providertype":"nope"}}}`, "run", "-", "--plugins", plugins)
	if r.code != 2 || !strings.Contains(r.stderr, `provider type "nope"`) {
		t.Fatalf("unknown type: exit %d %s", r.code, r.stderr)
	}
	r = loomd(t, "", "run", "--no-such-flag", "x.json")
	if r.code != 2 {
		t.Fatalf("bad flag: exit %d %s", r.code, r.stderr)
	}
	r = loomd(t, "", "run", "/does/not/exist.json", "--plugins", plugins)
	if r.code != 2 || !strings.Contains(r.stderr, "reading the task") {
		t.Fatalf("missing file: exit %d %s", r.code, r.stderr)
	}
	// LOOM_PLUGINS is honoured like --plugins.
	cmd := exec.Command(loomdBin, "plugins", "list", "--json")
	cmd.Env = []string{"LOOM_PLUGINS=" + plugins, "HOME=" + t.TempDir()}
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `"name": "fail"`) {
		t.Fatalf("LOOM_PLUGINS: %v %s", err, out)
	}
}

func TestPluginsCheck(t *testing.T) {
	r := loomd(t, "", "plugins", "check", examples("plugins"))
	if r.code != 0 || !strings.Contains(r.stdout, "2 plugin types OK, 0 errors") {
		t.Fatalf("examples: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "good", "good.json"), `{"name":"good","providertypes":["good"],"good":{"name":"good","classname":"Good"}}`)
	writeFile(t, filepath.Join(dir, "good", "good.lua"), `Good = {} function Good:create() end`)
	writeFile(t, filepath.Join(dir, "bad", "bad.json"), `{"name":"bad","automatortypes":["bad"],"bad":{"name":"bad","classname":"Bad"}}`)
	writeFile(t, filepath.Join(dir, "bad", "bad.lua"), "Bad = {}\nfunction Bad:install()\n  local x = = 1\nend\n")
	r = loomd(t, "", "plugins", "check", dir)
	if r.code != 1 {
		t.Fatalf("check on a broken plugin must fail: exit %d\n%s", r.code, r.stdout)
	}
	for _, want := range []string{"bad/bad.lua:3:", "syntax error", `Good does not define hook "confirm"`, "1 plugin types OK, 1 errors"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	// The good plugin still runs next to the broken one.
	run := loomd(t, `{"taskId":"g","taskName":"CREATE","config":{"provider":{"providertype":"good"}}}`, "run", "-", "--plugins", dir, "--work-dir", t.TempDir())
	if run.code != 0 || !strings.Contains(run.stderr, "bad.lua:3") {
		t.Fatalf("good plugin next to a broken one: exit %d\n%s\n%s", run.code, run.stdout, run.stderr)
	}
}

// TestPluginsCheckCoopr: what a Coopr server would refuse at registration
// fails the check, with the key at fault; the type still runs.
func TestPluginsCheckCoopr(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "odd", "odd.json"), `{"name":"odd","automatortypes":["odd"],"odd":{"name":"odd","classname":"Odd",
  "parameters":{"admin":{"fields":{"script":{"label":"Script"}},"required":[["script","args"]]},"Admin":{}},
  "resourceTypes":{"scripts":{"format":"FILE"},"tars":{"format":"archive","permissions":"0644"}}}}`)
	writeFile(t, filepath.Join(dir, "odd", "odd.lua"), `Odd = {} for _, h in ipairs({"bootstrap","install","configure","init","start","stop","remove"}) do Odd[h] = function() end end`)
	r := loomd(t, "", "plugins", "check", dir)
	if r.code != 1 {
		t.Fatalf("check must fail on what a Coopr server refuses: exit %d\n%s", r.code, r.stdout)
	}
	for _, want := range []string{
		"odd/odd.json: plugin odd: a Coopr server would refuse this type: parameters.Admin",
		"parameters.admin.required names args, not declared",
		`resourceTypes.scripts.format must be "file" or "archive"`,
		"resourceTypes.tars.permissions: a Coopr server allows permissions only for the file format",
		"1 plugin types OK, 4 errors",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	run := loomd(t, `{"taskId":"o","taskName":"install","config":{"service":{"action":{"type":"odd","fields":{"script":"x","args":""}}}}}`,
		"run", "-", "--plugins", dir, "--work-dir", t.TempDir())
	if run.code != 0 {
		t.Fatalf("the type must still run: exit %d\n%s\n%s", run.code, run.stdout, run.stderr)
	}
}

func TestPluginsListAndVersion(t *testing.T) {
	r := loomd(t, "", "plugins", "list", "--plugins", examples("plugins"))
	if r.code != 0 || !strings.Contains(r.stdout, "skeleton  provider") || !strings.Contains(r.stdout, "bootstrap,install,configure,init,start,stop,remove") {
		t.Fatalf("list: %s %s", r.stdout, r.stderr)
	}
	r = loomd(t, "", "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "loomd ") {
		t.Fatalf("version: %q", r.stdout)
	}
}

// TestEmbedExample builds and runs examples/embed, the runtime used as a
// library by a Go program.
func TestEmbedExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "embed")
	build := exec.Command("go", "build", "-o", bin, "./examples/embed")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the embed example: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("running the embed example: %v", err)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("embed output: %v\n%s", err, out)
	}
	if r := res["result"].(map[string]any); r["address"] != "10.0.0.7" || r["providerid"] != "emb-web1" {
		t.Fatalf("embed result: %v", res)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loomd run does not warn about hooks that plugins leave undefined: the
// task's own undefined hook fails it with its own message, and the others
// are not this run's business (loomd serve and plugins check still say).
func TestRunQuietAboutOtherHooks(t *testing.T) {
	dir := t.TempDir()
	for path, content := range map[string]string{
		"p/p.json": `{"name":"p","providertypes":["p"],"p":{"name":"p","classname":"P"}}`,
		"p/p.lua":  `local loom = require("loom"); P = loom.Provider:extend("P"); function P:create() end; return P`,
		"a/a.json": `{"name":"a","automatortypes":["a"],"a":{"name":"a","classname":"A"}}`,
		"a/a.lua":  `local loom = require("loom"); A = loom.Automator:extend("A"); function A:install() end; return A`,
		"t.json":   `{"taskId":"t1","taskName":"INSTALL","config":{"service":{"name":"s","action":{"type":"a"}}}}`,
		"s.json":   `{"taskId":"t2","taskName":"START","config":{"service":{"name":"s","action":{"type":"a"}}}}`,
	} {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := loomd(t, "", "run", filepath.Join(dir, "t.json"), "--plugins", dir, "--work-dir", filepath.Join(dir, "work"))
	if r.code != 0 || strings.Contains(r.stderr, "does not define hook") {
		t.Errorf("INSTALL: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = loomd(t, "", "run", filepath.Join(dir, "s.json"), "--plugins", dir, "--work-dir", filepath.Join(dir, "work"))
	if r.code != 1 || !strings.Contains(r.stdout, "unimplemented start in A") {
		t.Errorf("START of an undefined hook: exit %d, stdout:\n%s", r.code, r.stdout)
	}
}
