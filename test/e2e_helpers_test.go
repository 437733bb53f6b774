package test

// Helpers for the end-to-end tests in e2e_test.go: a loomd binary built
// once per test process, a plugins dir holding the real plugins, and a
// Coopr-server stand-in that carries each task's result into the next
// task's config.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

// e2eDeadline bounds each loomd run. It is a bound, not a timing check.
const e2eDeadline = 90 * time.Second

var (
	e2eBuildOnce sync.Once
	e2eBin       string
	e2eBuildErr  error
)

// e2eLoomd returns the loomd binary, built once per test process. It goes
// to a fixed path under the temp dir, replaced atomically, so repeated
// runs do not pile up binaries and concurrent test processes never run a
// half-written file. (The package's TestMain belongs to the CLI tests;
// these tests do not depend on it.)
func e2eLoomd(t testing.TB) string {
	t.Helper()
	e2eBuildOnce.Do(func() {
		dir := filepath.Join(os.TempDir(), "loom-e2e-bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			e2eBuildErr = err
			return
		}
		tmp := filepath.Join(dir, fmt.Sprintf("loomd.%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", tmp, "./cmd/loomd")
		cmd.Dir = e2eRepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			e2eBuildErr = fmt.Errorf("go build ./cmd/loomd: %v\n%s", err, out)
			return
		}
		e2eBin = filepath.Join(dir, "loomd")
		e2eBuildErr = os.Rename(tmp, e2eBin)
	})
	if e2eBuildErr != nil {
		t.Fatalf("building loomd: %v", e2eBuildErr)
	}
	return e2eBin
}

// e2eRepoRoot is the module root (tests run in test/).
func e2eRepoRoot() string {
	abs, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return abs
}

// e2eEnv is one test's loomd setup: a plugins dir with the real shell and
// static plugins, a work dir, an empty known_hosts (so only keys pinned in
// the task are trusted) and everything loomd printed, for secret checks.
type e2eEnv struct {
	t          *testing.T
	srv        *sshdtest.Server
	plugins    string
	work       string
	tenant     string
	knownHosts string
	home       string
	// output collects every loomd stdout and stderr of the test.
	output []string
}

func newE2EEnv(t *testing.T, srv *sshdtest.Server) *e2eEnv {
	t.Helper()
	root := t.TempDir()
	e := &e2eEnv{
		t: t, srv: srv, tenant: "tenant-e2e",
		plugins: filepath.Join(root, "plugins"), work: filepath.Join(root, "work"),
		knownHosts: filepath.Join(root, "known_hosts"), home: filepath.Join(root, "home"),
	}
	for _, d := range []string{e.plugins, e.work, e.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Copies, not symlinks: the runtime's loader does not descend into a
	// plugin folder that is itself a symlink.
	for _, p := range []string{"shell", "static"} {
		if err := os.CopyFS(filepath.Join(e.plugins, p), os.DirFS(filepath.Join(e2eRepoRoot(), "plugins", p))); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.knownHosts, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// typeDir is the work dir of a plugin type, where its resources live.
func (e *e2eEnv) typeDir(family, typ string) string {
	return filepath.Join(e.work, e.tenant, family, typ)
}

// writeFile writes a file (and its parent dirs) with a mode.
func (e *e2eEnv) writeFile(path, content string, mode os.FileMode) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		e.t.Fatal(err)
	}
}

// loomdResult is one `loomd run`.
type loomdResult struct {
	Code   int
	Stdout string
	Stderr string
	// Result is the decoded result JSON (nil if stdout was not JSON).
	Result map[string]any
	// Accepted is how many SSH connections sshd accepted during the run.
	Accepted int
	// Connections is how many TCP connections sshd saw during the run
	// (an early dial the plugin did not use would be one more).
	Connections int
}

func (r loomdResult) status() int {
	if r.Result == nil {
		return -1
	}
	s, _ := r.Result["status"].(float64)
	return int(s)
}

func (r loomdResult) str(key string) string {
	s, _ := r.Result[key].(string)
	return s
}

func (r loomdResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", r.Code, r.Stdout, r.Stderr)
}

// run runs `loomd run` on a task and decodes the result.
func (e *e2eEnv) run(task map[string]any, extraArgs ...string) loomdResult {
	e.t.Helper()
	data, err := json.MarshalIndent(task, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	// The task file is local provisioner state; it lives in the test's dir.
	f := filepath.Join(e.home, fmt.Sprintf("task-%v.json", task["taskId"]))
	if err := os.WriteFile(f, data, 0o600); err != nil {
		e.t.Fatal(err)
	}
	before, beforeConns := 0, 0
	if e.srv != nil {
		before, beforeConns = e.srv.Accepted(), strings.Count(e.srv.Logs(), "Connection from")
	}
	ctx, cancel := context.WithTimeout(context.Background(), e2eDeadline)
	defer cancel()
	args := append([]string{"run", f, "--plugins", e.plugins, "--work-dir", e.work, "--tenant", e.tenant,
		"--known-hosts", e.knownHosts}, extraArgs...)
	cmd := exec.CommandContext(ctx, e2eLoomd(e.t), args...)
	cmd.Env = []string{"HOME=" + e.home, "PATH=" + os.Getenv("PATH")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := loomdResult{Stdout: out.String(), Stderr: errb.String()}
	if ctx.Err() != nil {
		e.t.Fatalf("loomd run %v did not finish within %s\n%s", task["taskId"], e2eDeadline, r)
	}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("loomd run: %v", err)
	}
	_ = json.Unmarshal(out.Bytes(), &r.Result)
	if e.srv != nil {
		// sshd logs "Accepted" as it authenticates; the connection is long
		// done when loomd exits, so the line is there.
		r.Accepted = e.srv.Accepted() - before
		r.Connections = strings.Count(e.srv.Logs(), "Connection from") - beforeConns
	}
	e.output = append(e.output, r.Stdout, r.Stderr)
	return r
}

// hostKeyBlobs is sshd's host keys as Coopr's config.ssh_host_keys.
func hostKeyBlobs(srv *sshdtest.Server) map[string]any {
	m := map[string]any{}
	for typ, k := range srv.HostKeys {
		m[typ] = base64.StdEncoding.EncodeToString(k.Marshal())
	}
	return m
}

// cooprNode stands in for a Coopr server's view of one node: it builds
// each task from the node's config and applies each result the way the
// server does (reference §4): keys under result are shallow-merged into
// the top level of config whatever the status; ipaddresses and hostname
// are applied only on success.
type cooprNode struct {
	clusterID, nodeID string
	seq               int
	config            map[string]any
}

func newCooprNode(clusterID, nodeID string, config map[string]any) *cooprNode {
	return &cooprNode{clusterID: clusterID, nodeID: nodeID, config: config}
}

// task returns the next task, with a deep copy of the node's config plus
// extra top-level config keys (service for service actions).
func (n *cooprNode) task(name string, extra map[string]any) map[string]any {
	n.seq++
	cfg := deepCopy(n.config).(map[string]any)
	for k, v := range extra {
		cfg[k] = v
	}
	return map[string]any{
		"taskId":    fmt.Sprintf("%s-001-%03d", n.clusterID, n.seq),
		"jobId":     n.clusterID + "-001",
		"clusterId": n.clusterID,
		"taskName":  name,
		"nodeId":    n.nodeID,
		"config":    cfg,
	}
}

// apply merges a task's result into the node's config.
func (n *cooprNode) apply(r loomdResult) {
	if r.Result == nil {
		return
	}
	if res, ok := r.Result["result"].(map[string]any); ok {
		for k, v := range res {
			n.config[k] = v
		}
	}
	if r.status() != 0 {
		return
	}
	if ips, ok := r.Result["ipaddresses"].(map[string]any); ok {
		n.config["ipaddresses"] = ips
	}
	if h, ok := r.Result["hostname"].(string); ok && h != "" {
		n.config["hostname"] = h
	}
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, vv := range x {
			m[k] = deepCopy(vv)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, vv := range x {
			s[i] = deepCopy(vv)
		}
		return s
	}
	return v
}

// filesContaining walks root and returns the regular files (up to 16 MiB)
// that contain any of needles, skipping the dirs in skip.
func filesContaining(root string, needles []string, skip ...string) []string {
	var hits []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: not ours to judge
		}
		for _, s := range skip {
			if s != "" && (p == s || strings.HasPrefix(p, s+string(filepath.Separator))) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 16<<20 {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if n != "" && bytes.Contains(data, []byte(n)) {
				hits = append(hits, p)
				break
			}
		}
		return nil
	})
	return hits
}
