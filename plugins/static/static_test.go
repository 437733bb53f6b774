package static_test

// Tests of the static provider through Loom's runtime, with the same
// bindings loomd gives plugins: claims, idempotence and release, label
// matching, concurrent CREATEs from goroutines and from separate
// processes, credentials, and CONFIRM against a real sshd.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/sshdtest"
	loomrt "github.com/loomrt/loom/runtime"
)

const tenant = "t1"

// helperEnv makes the test binary act as one provisioner process: it runs
// the task in $STATIC_HELPER_TASK with the work dir $STATIC_HELPER_WORK
// and prints the result JSON.
const (
	helperEnv     = "STATIC_HELPER_TASK"
	helperWorkEnv = "STATIC_HELPER_WORK"
)

func TestMain(m *testing.M) {
	if task := os.Getenv(helperEnv); task != "" {
		os.Exit(runHelper(task, os.Getenv(helperWorkEnv)))
	}
	os.Exit(m.Run())
}

func runHelper(taskFile, work string) int {
	rt, err := newRuntime(work)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer rt.Close()
	data, err := os.ReadFile(taskFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	res, err := rt.Run(context.Background(), data)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return 0
}

// pluginsDir is the repository's plugins/static, alone in a plugins dir.
func pluginsDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// newRuntime loads only the static plugin, with loomd's bindings.
func newRuntime(work string) (*loomrt.Runtime, error) {
	plugins, err := os.MkdirTemp("", "static-plugins-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(plugins) // compiled at Load; the files are not needed after
	if err := os.CopyFS(filepath.Join(plugins, "static"), os.DirFS(filepath.Join(pluginsDir(), "static"))); err != nil {
		return nil, err
	}
	rt, err := loomrt.New(loomrt.Options{
		PluginsDir: plugins,
		WorkDir:    work,
		Tenant:     tenant,
		Bindings:   std.New(std.Options{}),
		Timeout:    60 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	if err := rt.Load(context.Background()); err != nil {
		rt.Close()
		return nil, err
	}
	return rt, nil
}

// env is one test's work dir and runtime.
type env struct {
	t    *testing.T
	work string
	rt   *loomrt.Runtime
	seq  int
	mu   sync.Mutex
}

func newEnv(t *testing.T) *env {
	t.Helper()
	work := t.TempDir()
	rt, err := newRuntime(work)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return &env{t: t, work: work, rt: rt}
}

// providerDir is the static provider's work dir.
func (e *env) providerDir() string { return filepath.Join(e.work, tenant, "providertypes", "static") }

func (e *env) writeInventory(inv any) {
	e.t.Helper()
	data, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	if err := os.MkdirAll(e.providerDir(), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.providerDir(), "inventory.json"), data, 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// task builds a provider task in Coopr's shape.
func (e *env) task(name, node string, cfg map[string]any, fields map[string]any) []byte {
	e.mu.Lock()
	e.seq++
	n := e.seq
	e.mu.Unlock()
	config := map[string]any{
		"hostname": node + ".example.com", "flavor": "small", "image": "debian12", "sshuser": "root",
		"provider": map[string]any{"providertype": "static", "provisioner": fields},
	}
	for k, v := range cfg {
		config[k] = v
	}
	t := map[string]any{
		"taskId": fmt.Sprintf("00000007-001-%03d", n), "clusterId": "00000007", "jobId": "00000007-001",
		"taskName": name, "config": config,
	}
	if node != "" {
		t["nodeId"] = node
	}
	data, err := json.Marshal(t)
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

func (e *env) create(node string, cfg, fields map[string]any) *loomrt.Result {
	e.t.Helper()
	return e.run(e.task("CREATE", node, cfg, fields))
}

func (e *env) delete(node, providerID string) *loomrt.Result {
	e.t.Helper()
	cfg := map[string]any{}
	if providerID != "" {
		cfg["providerid"] = providerID
	}
	return e.run(e.task("DELETE", node, cfg, nil))
}

func providerID(r *loomrt.Result) string {
	s, _ := r.Result["providerid"].(string)
	return s
}

func sshAuth(r *loomrt.Result) map[string]any {
	m, _ := r.Result["ssh-auth"].(map[string]any)
	return m
}

func mustOK(t *testing.T, what string, r *loomrt.Result) {
	t.Helper()
	if r.Status != 0 {
		t.Fatalf("%s failed: status %d: %s\n%s", what, r.Status, r.Message, r.Stderr)
	}
}

func hosts(n int, labels map[string]any) map[string]any {
	var hs []any
	for i := 1; i <= n; i++ {
		hs = append(hs, map[string]any{
			"id": fmt.Sprintf("h%d", i), "address": fmt.Sprintf("10.0.0.%d", i), "user": "deploy",
			"password": fmt.Sprintf("pw-%d-secret", i), "labels": labels,
		})
	}
	return map[string]any{"hosts": hs}
}

func readClaims(t *testing.T, e *env) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.providerDir(), "claims.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Claims map[string]map[string]any `json:"claims"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return c.Claims
}

func TestClaimIdempotenceRelease(t *testing.T) {
	e := newEnv(t)
	e.writeInventory(hosts(2, map[string]any{"flavor": "small", "image": "debian12"}))

	a := e.create("node-a", nil, nil)
	mustOK(t, "CREATE a", a)
	if providerID(a) != "h1" {
		t.Fatalf("CREATE a got %q, want h1", providerID(a))
	}
	auth := sshAuth(a)
	if auth["user"] != "deploy" || auth["password"] != "pw-1-secret" {
		t.Errorf("ssh-auth = %v", auth)
	}
	if _, ok := auth["port"]; ok {
		t.Errorf("ssh-auth carries a port for a host on 22: %v", auth)
	}
	// A retried CREATE for the same node gets the same host.
	again := e.create("node-a", nil, nil)
	mustOK(t, "CREATE a again", again)
	if providerID(again) != "h1" {
		t.Fatalf("repeated CREATE for node-a got %q, want h1", providerID(again))
	}
	b := e.create("node-b", nil, nil)
	mustOK(t, "CREATE b", b)
	if providerID(b) != "h2" {
		t.Fatalf("CREATE b got %q, want h2", providerID(b))
	}
	claims := readClaims(t, e)
	if claims["h1"]["node_id"] != "node-a" || claims["h1"]["task_id"] == nil || claims["h2"]["node_id"] != "node-b" {
		t.Errorf("claims = %v", claims)
	}

	// Inventory exhausted: a clear failure.
	c := e.create("node-c", nil, nil)
	if c.Status == 0 {
		t.Fatalf("CREATE with every host claimed succeeded: %v", c.Result)
	}
	for _, want := range []string{"no free host", "all 2 hosts", "node-a", "node-b", "00000007-001-"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("no-free-host message %q lacks %q", c.Message, want)
		}
	}

	// DELETE releases; repeating it is fine; the host is free again.
	mustOK(t, "DELETE a", e.delete("node-a", "h1"))
	mustOK(t, "DELETE a again", e.delete("node-a", "h1"))
	mustOK(t, "DELETE without providerid", e.delete("node-x", ""))
	c = e.create("node-c", nil, nil)
	mustOK(t, "CREATE c after the release", c)
	if providerID(c) != "h1" {
		t.Fatalf("CREATE c got %q, want the released h1", providerID(c))
	}
	// A stale DELETE for node-a must not take h1 from node-c.
	mustOK(t, "stale DELETE a", e.delete("node-a", "h1"))
	if got := readClaims(t, e)["h1"]["node_id"]; got != "node-c" {
		t.Fatalf("a stale DELETE released node-c's host: h1 now held by %v", got)
	}
	// Claims survive a new runtime (another loomd process).
	e2 := &env{t: t, work: e.work}
	rt2, err := newRuntime(e.work)
	if err != nil {
		t.Fatal(err)
	}
	defer rt2.Close()
	e2.rt = rt2
	e2.seq = 100
	if r := e2.create("node-b", nil, nil); providerID(r) != "h2" {
		t.Fatalf("after a restart node-b got %q, want h2", providerID(r))
	}
}

func TestLabelMatching(t *testing.T) {
	e := newEnv(t)
	e.writeInventory(map[string]any{"hosts": []any{
		map[string]any{"id": "big", "address": "10.0.1.1", "password": "secret-1", "labels": map[string]any{"flavor": "large", "image": "debian12"}},
		map[string]any{"id": "multi", "address": "10.0.1.2", "password": "secret-2",
			"labels": map[string]any{"flavor": "small", "image": []any{"debian12", "ubuntu24"}, "rack": "r2"}},
		map[string]any{"id": "wild", "address": "10.0.1.3", "password": "secret-3", "labels": map[string]any{"flavor": "*", "image": "*"}},
		map[string]any{"id": "bare", "address": "10.0.1.4", "password": "secret-4"},
	}})
	cases := []struct {
		node, flavor, image, labels, want string
	}{
		{"n1", "large", "debian12", "", "big"},
		{"n2", "small", "ubuntu24", "rack=r2", "multi"},
		{"n3", "small", "debian12", "", "wild"},    // multi is taken; wild matches anything
		{"n4", "", "", "", "bare"},                 // nothing requested: any free host
		{"n5", "large", "debian12", "", ""},        // big is taken, no other large host
		{"n6", "small", "centos7", "", ""},         // no such image
		{"n7", "tiny", "debian12", "disk=ssd", ""}, // no such labels
	}
	for _, c := range cases {
		cfg := map[string]any{"flavor": c.flavor, "image": c.image}
		var fields map[string]any
		if c.labels != "" {
			fields = map[string]any{"labels": c.labels}
		}
		r := e.create(c.node, cfg, fields)
		if c.want == "" {
			if r.Status == 0 {
				t.Errorf("%s (flavor=%s image=%s %s) got %s, want no host", c.node, c.flavor, c.image, c.labels, providerID(r))
			} else if !strings.Contains(r.Message, "no free host") {
				t.Errorf("%s: message %q", c.node, r.Message)
			}
			continue
		}
		if r.Status != 0 || providerID(r) != c.want {
			t.Errorf("%s (flavor=%s image=%s %s) got %q (status %d: %s), want %s", c.node, c.flavor, c.image, c.labels,
				providerID(r), r.Status, r.Message, c.want)
		}
	}
	r := e.create("n8", map[string]any{"flavor": "tiny", "image": "debian12"}, map[string]any{"labels": "disk=ssd"})
	if !strings.Contains(r.Message, "none of its 4 hosts has the labels disk=ssd flavor=tiny image=debian12") {
		t.Errorf("no-match message: %q", r.Message)
	}
}

func TestCredentials(t *testing.T) {
	e := newEnv(t)
	pem := "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key-but-secret-material\n-----END OPENSSH PRIVATE KEY-----\n"
	if err := os.MkdirAll(filepath.Join(e.providerDir(), "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.providerDir(), "keys", "k.pem"), []byte(pem), 0o600); err != nil {
		t.Fatal(err)
	}
	e.writeInventory(map[string]any{"hosts": []any{
		map[string]any{"id": "inline", "address": "10.0.2.1", "port": 2222, "key": pem, "labels": map[string]any{"flavor": "a"}},
		map[string]any{"id": "file", "address": "10.0.2.2", "user": "ops", "key_file": "keys/k.pem", "labels": map[string]any{"flavor": "b"}},
		map[string]any{"id": "default", "address": "10.0.2.3", "labels": map[string]any{"flavor": "c"}},
	}})
	r := e.create("n1", map[string]any{"flavor": "a", "image": "", "sshuser": "admin"}, nil)
	mustOK(t, "CREATE inline", r)
	auth := sshAuth(r)
	keyFile := filepath.Join(e.providerDir(), "ssh_keys", "inline.pem")
	if auth["identityfile"] != keyFile || auth["user"] != "admin" || auth["port"] != float64(2222) || auth["password"] != nil {
		t.Errorf("inline key ssh-auth = %v", auth)
	}
	if st, err := os.Stat(keyFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file %s: %v %v", keyFile, err, st)
	} else if b, _ := os.ReadFile(keyFile); string(b) != pem {
		t.Errorf("key file holds %q", b)
	}
	r = e.create("n2", map[string]any{"flavor": "b", "image": ""}, nil)
	mustOK(t, "CREATE key_file", r)
	if auth := sshAuth(r); auth["identityfile"] != filepath.Join(e.providerDir(), "keys", "k.pem") || auth["user"] != "ops" {
		t.Errorf("key_file ssh-auth = %v", auth)
	}
	// No credentials in the inventory: the sensitive default field.
	r = e.create("n3", map[string]any{"flavor": "c", "image": ""}, map[string]any{"ssh_password": "field-secret-pw"})
	mustOK(t, "CREATE default password", r)
	if auth := sshAuth(r); auth["password"] != "field-secret-pw" {
		t.Errorf("default-password ssh-auth = %v", auth)
	}
	// Nothing at all: a clear error naming the host.
	mustOK(t, "DELETE n3", e.delete("n3", "default"))
	r = e.create("n4", map[string]any{"flavor": "c", "image": ""}, nil)
	if r.Status == 0 || !strings.Contains(r.Message, "host default in inventory.json has no password, key or key_file") {
		t.Errorf("CREATE without credentials: %d %q", r.Status, r.Message)
	}
	if _, held := readClaims(t, e)["default"]; held {
		t.Errorf("a CREATE that failed on the inventory still claimed the host")
	}
	// DELETE removes the written key.
	mustOK(t, "DELETE n1", e.delete("n1", "inline"))
	if _, err := os.Stat(keyFile); !os.IsNotExist(err) {
		t.Errorf("DELETE left the key file %s: %v", keyFile, err)
	}
	for _, res := range []*loomrt.Result{r} {
		for _, s := range []string{res.Message, res.Stderr, res.Stdout} {
			if strings.Contains(s, "secret-material") || strings.Contains(s, "field-secret-pw") {
				t.Errorf("a secret leaked into the result text: %s", s)
			}
		}
	}
}

func TestInventoryErrors(t *testing.T) {
	e := newEnv(t)
	r := e.create("n1", nil, nil)
	if r.Status == 0 || !strings.Contains(r.Message, "cannot read the inventory inventory.json") {
		t.Errorf("missing inventory: %q", r.Message)
	}
	e.writeInventory(map[string]any{"hosts": []any{map[string]any{"address": "10.0.0.1", "password": "pw"}, map[string]any{"port": 22}}})
	r = e.create("n1", nil, nil)
	if r.Status == 0 || !strings.Contains(r.Message, "host #2: \"address\" is required") {
		t.Errorf("bad inventory: %q", r.Message)
	}
	e.writeInventory(map[string]any{"hosts": []any{map[string]any{"address": "10.0.0.1", "password": "pw"}, map[string]any{"address": "10.0.0.1"}}})
	r = e.create("n1", nil, nil)
	if r.Status == 0 || !strings.Contains(r.Message, "is used twice") {
		t.Errorf("duplicate host: %q", r.Message)
	}
	e.writeInventory(map[string]any{"hosts": []any{map[string]any{"address": "10.0.0.1", "key_file": "keys/missing.pem", "labels": map[string]any{"flavor": "*", "image": "*"}}}})
	r = e.create("n1", nil, nil)
	if r.Status == 0 || !strings.Contains(r.Message, "key_file keys/missing.pem does not exist") {
		t.Errorf("missing key file: %q", r.Message)
	}
}

// TestConcurrentCreatesGoroutines: 12 nodes race for 8 hosts through one
// runtime (several VMs at once): 8 distinct hosts, 4 clear failures.
func TestConcurrentCreatesGoroutines(t *testing.T) {
	e := newEnv(t)
	e.writeInventory(hosts(8, map[string]any{"flavor": "*", "image": "*"}))
	const nodes = 12
	results := make([]*loomrt.Result, nodes)
	var wg sync.WaitGroup
	for i := 0; i < nodes; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.rt.Run(context.Background(), e.task("CREATE", fmt.Sprintf("node-%02d", i), nil, nil))
			if err != nil {
				t.Errorf("run: %v", err)
				return
			}
			results[i] = res
		}()
	}
	wg.Wait()
	checkDistinct(t, e, results, 8)
}

// TestConcurrentCreatesProcesses: the same race between separate
// processes (this test binary re-run as a provisioner), which share only
// the work dir.
func TestConcurrentCreatesProcesses(t *testing.T) {
	e := newEnv(t)
	e.writeInventory(hosts(4, map[string]any{"flavor": "*", "image": "*"}))
	const procs = 6
	results := make([]*loomrt.Result, procs)
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*strings.Builder, procs)
	for i := range cmds {
		f := filepath.Join(t.TempDir(), "task.json")
		if err := os.WriteFile(f, e.task("CREATE", fmt.Sprintf("pnode-%d", i), nil, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+f, helperWorkEnv+"="+e.work)
		outs[i] = &strings.Builder{}
		cmd.Stdout = outs[i]
		cmd.Stderr = os.Stderr
		cmds[i] = cmd
	}
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("helper %d: %v", i, err)
		}
		var r loomrt.Result
		if err := json.Unmarshal([]byte(outs[i].String()), &r); err != nil {
			t.Fatalf("helper %d printed %q: %v", i, outs[i], err)
		}
		results[i] = &r
	}
	checkDistinct(t, e, results, 4)
}

func checkDistinct(t *testing.T, e *env, results []*loomrt.Result, capacity int) {
	t.Helper()
	got := map[string]int{}
	var failed int
	for i, r := range results {
		if r == nil {
			continue
		}
		if r.Status != 0 {
			failed++
			if !strings.Contains(r.Message, "no free host") {
				t.Errorf("racer %d failed for another reason: %s", i, r.Message)
			}
			continue
		}
		got[providerID(r)]++
	}
	var ids []string
	for id, n := range got {
		ids = append(ids, id)
		if n > 1 {
			t.Errorf("host %s was handed to %d nodes", id, n)
		}
	}
	sort.Strings(ids)
	if len(ids) != capacity || failed != len(results)-capacity {
		t.Errorf("%d hosts claimed (%v), %d failures; want %d and %d", len(ids), ids, failed, capacity, len(results)-capacity)
	}
	if claims := readClaims(t, e); len(claims) != capacity {
		t.Errorf("claims.json holds %d claims, want %d", len(claims), capacity)
	}
}

func keyBlobs(srv *sshdtest.Server, types ...string) map[string]any {
	m := map[string]any{}
	for _, typ := range types {
		m[typ] = base64.StdEncoding.EncodeToString(srv.HostKeys[typ].Marshal())
	}
	return m
}

// TestConfirm checks SSH against a real sshd: scanned keys, pinned keys,
// a pinned key that the host does not show, and a host that is down.
func TestConfirm(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	other := sshdtest.Start(t, sshdtest.Config{})
	e := newEnv(t)
	e.writeInventory(map[string]any{"hosts": []any{
		map[string]any{"id": "scan", "address": srv.Host, "port": srv.Port, "password": "x-secret", "hostname": "scan.example.com",
			"bind_address": "192.168.9.9", "labels": map[string]any{"flavor": "scan"}},
		map[string]any{"id": "pinned", "address": srv.Host, "port": srv.Port, "password": "x-secret",
			"labels": map[string]any{"flavor": "pinned"}, "host_keys": keyBlobs(srv, "ed25519")},
		map[string]any{"id": "wrong", "address": srv.Host, "port": srv.Port, "password": "x-secret",
			"labels": map[string]any{"flavor": "wrong"}, "host_keys": keyBlobs(other, "ed25519")},
		map[string]any{"id": "down", "address": "127.0.0.1", "port": 1, "password": "x-secret",
			"labels": map[string]any{"flavor": "down"}},
	}})
	confirm := func(node, id string) *loomrt.Result {
		return e.run(e.task("CONFIRM", node, map[string]any{"providerid": id}, map[string]any{"confirm_wait": "2", "ssh_timeout": "2"}))
	}
	for _, f := range []string{"scan", "pinned", "wrong", "down"} {
		mustOK(t, "CREATE "+f, e.create("n-"+f, map[string]any{"flavor": f, "image": ""}, nil))
	}

	r := confirm("n-scan", "scan")
	mustOK(t, "CONFIRM scan", r)
	keys, _ := r.Result["ssh_host_keys"].(map[string]any)
	want := keyBlobs(srv, "ed25519", "ecdsa", "rsa")
	for typ, blob := range want {
		if keys[typ] != blob {
			t.Errorf("ssh_host_keys.%s = %v, want sshd's", typ, keys[typ])
		}
	}
	if r.IPAddresses["access_v4"] != srv.Host || r.IPAddresses["bind_v4"] != "192.168.9.9" || r.Hostname != "scan.example.com" {
		t.Errorf("CONFIRM gave ipaddresses %v hostname %q", r.IPAddresses, r.Hostname)
	}

	r = confirm("n-pinned", "pinned")
	mustOK(t, "CONFIRM pinned", r)
	if keys, _ := r.Result["ssh_host_keys"].(map[string]any); len(keys) != 1 || keys["ed25519"] != want["ed25519"] {
		t.Errorf("pinned CONFIRM recorded %v, want only the inventory's ed25519 key", keys)
	}
	if r.Hostname != "n-pinned.example.com" {
		t.Errorf("hostname %q, want the task's", r.Hostname)
	}

	r = confirm("n-wrong", "wrong")
	if r.Status == 0 || r.Error["kind"] != "host_key" || !strings.Contains(r.Message, "not the one pinned") {
		t.Errorf("CONFIRM with a wrong pinned key: %d %v %q", r.Status, r.Error["kind"], r.Message)
	}

	r = confirm("n-down", "down")
	if r.Status == 0 || !strings.Contains(r.Message, "127.0.0.1:1") || !strings.Contains(r.Message, "did not answer") {
		t.Errorf("CONFIRM of a host that is down: %d %q", r.Status, r.Message)
	}

	// CONFIRM by a node that does not hold the host.
	r = confirm("n-other", "scan")
	if r.Status == 0 || !strings.Contains(r.Message, "claimed by node n-scan") {
		t.Errorf("CONFIRM by another node: %d %q", r.Status, r.Message)
	}
	r = confirm("n-scan", "nope")
	if r.Status == 0 || !strings.Contains(r.Message, "providerid nope is not a host") {
		t.Errorf("CONFIRM of an unknown providerid: %d %q", r.Status, r.Message)
	}
}
