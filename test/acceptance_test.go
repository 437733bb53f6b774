package test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const (
	accToken = "tok-acc-0f1e2d3c4b5a"
	accRoot  = "Root-Pass-Acc-97531"
)

// standin is the Linode API stand-in (internal/cloudfake/linodefake) run
// as a process of its own, as a real API would be.
type standin struct {
	cmd *exec.Cmd
	url string
	out *bufio.Scanner
}

func startStandin(t *testing.T, bin string) *standin {
	t.Helper()
	cmd := exec.Command(bin, "-token", accToken)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &standin{cmd: cmd, out: bufio.NewScanner(stdout)}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !s.out.Scan() || !strings.HasPrefix(s.out.Text(), "LINODE_API_URL=") {
		t.Fatalf("the stand-in did not say its URL: %q", s.out.Text())
	}
	s.url = strings.TrimPrefix(s.out.Text(), "LINODE_API_URL=")
	return s
}

// stop ends the stand-in and returns the instances it still held.
func (s *standin) stop(t *testing.T) []string {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	var left []string
	for s.out.Scan() {
		if strings.HasPrefix(s.out.Text(), "left ") {
			left = append(left, s.out.Text())
		}
	}
	s.cmd.Wait()
	return left
}

// loomdEnv runs the built binary with extra environment variables.
func loomdEnv(t *testing.T, env []string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, loomdBin, args...)
	cmd.Dir = repoRoot()
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}, env...)
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

// TestLinodeAcceptance is the acceptance mode end to end, on the Linode
// example (examples/linode): its test file runs against a stand-in for
// Linode's API in a process of its own (--acceptance, credentials from the
// environment, never printed), records the exchanges (--record, secrets
// redacted), leaves nothing behind (the sweeper), then replays the
// recording offline in a plain loomd test; --sweep deletes what an
// earlier run left.
func TestLinodeAcceptance(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "linodefake")
	build := exec.Command("go", "build", "-o", bin, "./internal/cloudfake/linodefake/cmd/linodefake")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "linode")
	if out, err := exec.Command("cp", "-r", examples("linode"), dir).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cas := filepath.Join(dir, "testdata", "linode_test.cassette.json")
	os.Remove(cas)

	// Without a recording, offline, the acceptance tests are skipped.
	r := loomd(t, "", "test", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "# 15 passed, 0 failed, 2 pending") ||
		!strings.Contains(r.stdout, "# SKIP acceptance test: runs against the real API with loomd test --acceptance") {
		t.Fatalf("offline without a recording: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Live against the stand-in, recording.
	s := startStandin(t, bin)
	env := []string{"LINODE_TOKEN=" + accToken, "LINODE_ROOT_PASS=" + accRoot, "LINODE_API_URL=" + s.url}
	r = loomdEnv(t, env, "test", dir, "--acceptance", "--record")
	if r.code != 0 || !strings.Contains(r.stdout, "# 17 passed, 0 failed, 0 pending") {
		t.Fatalf("--acceptance --record: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if left := s.stop(t); len(left) > 0 {
		t.Errorf("the acceptance run left instances on the API: %v", left)
	}
	data, err := os.ReadFile(cas)
	if err != nil {
		t.Fatalf("no recording: %v", err)
	}
	for _, secret := range []string{accToken, accRoot} {
		if strings.Contains(string(data), secret) || strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("a credential reached the recording or the output")
		}
	}
	if !strings.Contains(string(data), `\u003credacted\u003e`) || !strings.Contains(string(data), `"POST"`) {
		t.Errorf("the recording lacks the POST or its redacted root_pass:\n%.2000s", data)
	}

	// Offline again: the same file replays the recording, the stand-in gone.
	r = loomd(t, "", "test", dir)
	if r.code != 0 || !strings.Contains(r.stdout, "# 17 passed, 0 failed, 0 pending") {
		t.Fatalf("replay: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A credential missing from the environment fails the acceptance tests
	// (as Terraform's PreCheck), saying which; the other is not printed.
	r = loomdEnv(t, []string{"LINODE_ROOT_PASS=" + accRoot}, "test", dir, "--acceptance", "--run", "acceptance")
	if r.code != 1 || !strings.Contains(r.stdout, "needs LINODE_TOKEN in the environment") || strings.Contains(r.stdout, accRoot) {
		t.Fatalf("missing credential: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// LOOM_ACC=1 is --acceptance; a wrong token fails with the API's
	// reason, and the token stays out of the report.
	s = startStandin(t, bin)
	bad := "tok-wrong-123456789"
	r = loomdEnv(t, []string{"LOOM_ACC=1", "LINODE_TOKEN=" + bad, "LINODE_ROOT_PASS=" + accRoot, "LINODE_API_URL=" + s.url},
		"test", dir, "--run", "acceptance", "--timeout", "30s")
	if r.code != 1 || !strings.Contains(r.stdout, "HTTP 401: Invalid Token") || strings.Contains(r.stdout, bad) {
		t.Fatalf("LOOM_ACC with a wrong token: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// --sweep deletes what an earlier run left (loomacc- labels), and
	// nothing else.
	post := func(label string) {
		body := `{"label": "` + label + `", "region": "us-east", "type": "g6-nanode-1", "image": "linode/debian12", "root_pass": "` + accRoot + `"}`
		req, _ := http.NewRequest("POST", s.url+"/linode/instances", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+accToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("creating %s on the stand-in: %v %v", label, err, resp)
		}
		resp.Body.Close()
	}
	post("loomacc-0badc0de-web1")
	post("production-db")
	r = loomdEnv(t, append(env[:2:2], "LINODE_API_URL="+s.url), "test", dir, "--sweep")
	if r.code != 0 || !strings.Contains(r.stdout, "ok 1 - (sweeper)") {
		t.Fatalf("--sweep: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	left := s.stop(t)
	if len(left) != 1 || !strings.Contains(left[0], "production-db") {
		t.Errorf("after --sweep: %v, want only production-db", left)
	}
}

// TestRunPermit: --permit lets loomd run's plugins reach a host their
// allow-list does not name (a local server to debug against), and only
// with it.
func TestRunPermit(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"id": 9}`)) }))
	defer srv.Close()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p", "p.json"), `{"name": "p", "providertypes": ["p"], "p": {"name": "p", "classname": "P",
  "parameters": {"admin": {"fields": {"api_url": {"type": "text"}}}}}, "permissions": {"http": ["api.example.com"]}}`)
	writeFile(t, filepath.Join(dir, "p", "p.lua"), `local http = require("loom.http")
P = require("loom").Provider:extend("P")
function P:create(input)
  self.result.result.providerid = tostring(http.get(input.fields.api_url .. "/x"):json().id)
  self.result.status = 0
end`)
	task := filepath.Join(dir, "task.json")
	writeFile(t, task, `{"taskId": "t-1", "taskName": "CREATE", "config": {"hostname": "n1", "provider": {"providertype": "p", "provisioner": {"api_url": "`+srv.URL+`"}}}}`)
	r := loomd(t, "", "run", task, "--plugins", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "not in the plugin's permissions.http") && !strings.Contains(r.stdout, "permission") {
		t.Fatalf("without --permit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = loomd(t, "", "run", task, "--plugins", dir, "--permit", "127.0.0.1")
	if r.code != 0 || !strings.Contains(r.stdout, `"providerid": "9"`) {
		t.Fatalf("with --permit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
