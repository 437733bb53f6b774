package coopr_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/coopr/coopfake"
	"github.com/loomrt/loom/runtime"
)

// runner records the tasks it runs and answers a Coopr result; block,
// when set, holds a task until it is closed.
type runner struct {
	mu    sync.Mutex
	runs  map[string]int
	block chan struct{}
	seen  []map[string]any
}

func (r *runner) Run(ctx context.Context, task []byte) ([]byte, int, error) {
	var m map[string]any
	if err := json.Unmarshal(task, &m); err != nil {
		return nil, 0, err
	}
	id, _ := m["taskId"].(string)
	r.mu.Lock()
	if r.runs == nil {
		r.runs = map[string]int{}
	}
	r.runs[id]++
	r.seen = append(r.seen, m)
	block := r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	res := map[string]any{"taskId": id, "status": 0, "result": map[string]any{"ran": id}, "duration_ms": 1.5}
	b, _ := json.Marshal(res)
	return b, 0, nil
}

func (r *runner) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

func task(id string) []byte {
	return []byte(fmt.Sprintf(`{"taskId":%q,"jobId":"j","clusterId":"00000001","taskName":"CONFIRM","nodeId":"n1",
		"config":{"provider":{"providertype":"static","provisioner":{}},"hostname":"h"}}`, id))
}

// start runs a provisioner against a fresh fake server.
func start(t *testing.T, cfg coopr.Config) (*coopfake.Server, *coopr.Provisioner) {
	t.Helper()
	srv, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv, startWith(t, srv, cfg)
}

func startWith(t *testing.T, srv *coopfake.Server, cfg coopr.Config) *coopr.Provisioner {
	t.Helper()
	cfg.ServerURL = srv.URL()
	if cfg.ID == "" {
		cfg.ID = "loom-test"
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Heartbeat = 50 * time.Millisecond
	cfg.Poll = 20 * time.Millisecond
	cfg.MaxBackoff = 100 * time.Millisecond
	p, err := coopr.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// eventually polls cond until it holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRegisterTenantsTakeFinish(t *testing.T) {
	r := &runner{}
	types := []coopr.PluginType{
		{Name: "shell", Family: runtime.Automator, Raw: []byte(`{"name":"shell","classname":"S","parameters":{}}`)},
		{Name: "static", Family: runtime.Provider, Raw: []byte(`{"classname":"Static"}`)},
	}
	srv, p := start(t, coopr.Config{Runner: r, Types: types, Capacity: 4})
	eventually(t, "registration", func() bool { _, ok := srv.Provisioner("loom-test"); return ok })
	reg, _ := srv.Provisioner("loom-test")
	if reg.CapacityTotal != 4 || reg.Host != "127.0.0.1" || reg.Port == 0 {
		t.Errorf("registration %+v", reg)
	}
	eventually(t, "plugin types", func() bool { _, ok := srv.Plugin("providertypes/static"); return ok })
	if b, _ := srv.Plugin("providertypes/static"); !strings.Contains(string(b), `"name":"static"`) {
		t.Errorf("the name was not filled in: %s", b)
	}
	if _, ok := srv.Plugin("automatortypes/shell"); !ok {
		t.Error("shell not registered")
	}

	api := "http://" + p.APIAddr()
	out, err := coopfake.PutTenant(ctx(t), api, "tenant-a", 2, nil)
	if err != nil || !strings.Contains(string(out), `"status":0`) || !strings.Contains(string(out), `"workers":2`) {
		t.Fatalf("PUT tenant: %s %v", out, err)
	}
	for i := 0; i < 5; i++ {
		if err := srv.Enqueue("tenant-a", task(fmt.Sprintf("t-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 5; i++ {
		f, err := srv.WaitFinished(ctx(t), fmt.Sprintf("t-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if f.Status != 0 || f.ProvisionerID != "loom-test" || f.TenantID != "tenant-a" || f.WorkerID == "" {
			t.Errorf("finish %+v", f)
		}
		if res, _ := f.Body["result"].(map[string]any); res["ran"] != fmt.Sprintf("t-%d", i) {
			t.Errorf("result %v", f.Body)
		}
	}
	// The task the runner got carries the slot's tenant.
	if r.seen[0]["tenantId"] != "tenant-a" {
		t.Errorf("task tenantId %v", r.seen[0]["tenantId"])
	}
	eventually(t, "usage 2 in a heartbeat", func() bool { pr, _ := srv.Provisioner("loom-test"); return pr.Usage["tenant-a"] == 2 })
	// Two workers means two worker ids.
	ids := map[string]bool{}
	for _, f := range srv.Finishes() {
		ids[f.WorkerID] = true
	}
	if len(ids) > 2 {
		t.Errorf("worker ids %v", ids)
	}
	if _, err := coopfake.DeleteTenant(ctx(t), api, "tenant-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "usage 0", func() bool { pr, _ := srv.Provisioner("loom-test"); return len(pr.Usage) == 0 })
	if _, err := coopfake.DeleteTenant(ctx(t), api, "nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("deleting an unknown tenant: %v", err)
	}
	if _, err := coopfake.PutTenant(ctx(t), api, "bad tenant", 1, nil); err == nil || !strings.Contains(err.Error(), "400") {
		t.Errorf("a bad tenant id: %v", err)
	}
	if srv.Refused(400) != 0 || srv.Refused(417) != 0 {
		t.Errorf("the server refused requests: %v", srv.Log())
	}
}

// TestFinishSurvivesServerFaults: a finish answered 5xx, or acted on and
// then dropped (the server died after recording it), or sent while the
// server restarts, is retried; no task is run twice.
func TestFinishSurvivesServerFaults(t *testing.T) {
	r := &runner{}
	srv, _ := start(t, coopr.Config{Runner: r, Tenants: map[string]int{"t": 1}})
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", Status: 503, Times: 2})
	srv.Enqueue("t", task("five-oh-three"))
	if f, err := srv.WaitFinished(ctx(t), "five-oh-three"); err != nil || f.Status != 0 {
		t.Fatalf("%+v %v", f, err)
	}

	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", DropAfter: true})
	srv.Enqueue("t", task("dropped"))
	if _, err := srv.WaitFinished(ctx(t), "dropped"); err != nil {
		t.Fatal(err)
	}
	// The retried finish gets 417 (already finished); nothing re-runs it.
	eventually(t, "the retried finish", func() bool { return srv.Refused(417) == 1 })

	r.mu.Lock()
	r.block = make(chan struct{})
	r.mu.Unlock()
	srv.Enqueue("t", task("restart"))
	eventually(t, "the task to start", func() bool { return r.count("restart") == 1 })
	if err := srv.Restart(300 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	close(r.block)
	if _, err := srv.WaitFinished(ctx(t), "restart"); err != nil {
		t.Fatal(err)
	}
	// The server restarts while it holds a finish it has not acted on
	// yet: the request dies with the connection and is sent again.
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", Delay: 5 * time.Second})
	srv.Enqueue("t", task("mid-finish"))
	eventually(t, "the finish to be held", func() bool { return srv.PendingFaults("/v2/tasks/finish") == 0 })
	if err := srv.Restart(200 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.WaitFinished(ctx(t), "mid-finish"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"five-oh-three", "dropped", "restart", "mid-finish"} {
		if n := r.count(id); n != 1 || srv.Takes(id) != 1 {
			t.Errorf("%s: run %d times, taken %d times", id, n, srv.Takes(id))
		}
	}
	if n := len(srv.Finishes()); n != 4 {
		t.Errorf("%d finishes accepted, want 4", n)
	}
}

// TestTakeLostMidRestart: a take whose answer is lost (the server dequeued
// the task and died) leaves the task with the server, which times it out
// and hands it out again: it runs once.
func TestTakeLostMidRestart(t *testing.T) {
	r := &runner{}
	srv, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.TaskTimeout = 300 * time.Millisecond
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/take", DropAfter: true, WhenStatus: 200})
	srv.Enqueue("t", task("lost-take"))
	startWith(t, srv, coopr.Config{Runner: r, Tenants: map[string]int{"t": 1}})
	eventually(t, "the task to be handed out again", func() bool { return srv.Takes("lost-take") == 2 })
	srv.SetTaskTimeout(0) // a slow finish on a loaded machine must not time it out again
	if _, err := srv.WaitFinished(ctx(t), "lost-take"); err != nil {
		t.Fatal(err)
	}
	if r.count("lost-take") != 1 || srv.Takes("lost-take") != 2 {
		t.Errorf("run %d times, taken %d times; want 1 and 2", r.count("lost-take"), srv.Takes("lost-take"))
	}
}

// TestReRegisterOn404: a server that forgot the provisioner (heartbeat
// 404, take 403) gets a new registration and the work goes on.
func TestReRegisterOn404(t *testing.T) {
	r := &runner{}
	srv, _ := start(t, coopr.Config{Runner: r, Tenants: map[string]int{"t": 1}})
	eventually(t, "registration", func() bool { _, ok := srv.Provisioner("loom-test"); return ok })
	srv.ForgetProvisioners()
	eventually(t, "a new registration", func() bool { _, ok := srv.Provisioner("loom-test"); return ok })
	srv.Enqueue("t", task("after"))
	if _, err := srv.WaitFinished(ctx(t), "after"); err != nil {
		t.Fatal(err)
	}
}

// TestPendingFinishAcrossRestart: a result the server could not take
// before loomd stopped is kept in the state dir and delivered by the next
// run (same provisioner id).
func TestPendingFinishAcrossRestart(t *testing.T) {
	r := &runner{block: make(chan struct{})}
	state := t.TempDir()
	srv, p := start(t, coopr.Config{Runner: r, Tenants: map[string]int{"t": 1}, StateDir: state})
	srv.Enqueue("t", task("pending"))
	eventually(t, "the task to start", func() bool { return r.count("pending") == 1 })
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", Status: 503, Times: 1000})
	close(r.block)
	eventually(t, "a failed finish", func() bool { return strings.Contains(strings.Join(srv.Log(), "\n"), "finish -> 503") })
	if forced := p.Stop(200 * time.Millisecond); !forced {
		t.Error("Stop did not report the interrupted delivery")
	}
	if files, _ := filepath.Glob(filepath.Join(state, "coopr-pending", "*.json")); len(files) != 1 {
		t.Fatalf("pending files %v", files)
	}
	clearFaults(srv)
	startWith(t, srv, coopr.Config{Runner: &runner{}, StateDir: state})
	f, err := srv.WaitFinished(ctx(t), "pending")
	if err != nil || f.Status != 0 {
		t.Fatalf("%+v %v", f, err)
	}
	if r.count("pending") != 1 || srv.Takes("pending") != 1 {
		t.Errorf("run %d, taken %d", r.count("pending"), srv.Takes("pending"))
	}
	eventually(t, "the pending file to go", func() bool {
		files, _ := filepath.Glob(filepath.Join(state, "coopr-pending", "*.json"))
		return len(files) == 0
	})
}

// clearFaults clears the remaining injected faults by consuming them.
func clearFaults(srv *coopfake.Server) {
	for i := 0; i < 1000; i++ {
		if !srv.ConsumeFault("/v2/tasks/finish") {
			return
		}
	}
}

func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg})
		tw.Write([]byte(content))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestResourceSync: a tenant's resources are downloaded, kept per version
// and activated by a link in the type's work dir; a new version switches
// the link; a resource no longer active loses its link.
func TestResourceSync(t *testing.T) {
	work := t.TempDir()
	srv, p := start(t, coopr.Config{Runner: &runner{}, WorkDir: work})
	srv.SetResource("t", "automatortypes", "shell", "scripts", "hello.sh", 1, []byte("#!/bin/sh\necho v1\n"))
	srv.SetResource("t", "automatortypes", "shell", "scripts", "hello.sh", 2, []byte("#!/bin/sh\necho v2\n"))
	srv.SetResource("t", "automatortypes", "shell", "archives", "pkg", 1, tgz(t, map[string]string{"pkg/readme.txt": "inside\n"}))
	spec := func(scriptVersion int, withArchive bool) map[string]any {
		shell := map[string]any{"scripts": map[string]any{"format": "file", "permissions": "0755",
			"active": []any{map[string]any{"name": "hello.sh", "version": scriptVersion}}}}
		if withArchive {
			shell["archives"] = map[string]any{"format": "archive", "active": []any{map[string]any{"name": "pkg", "version": 1}}}
		}
		return map[string]any{"automatortypes": map[string]any{"shell": shell}}
	}
	api := "http://" + p.APIAddr()
	typeDir := filepath.Join(work, "t", "automatortypes", "shell")
	read := func(rel string) string { b, _ := os.ReadFile(filepath.Join(typeDir, rel)); return string(b) }
	if _, err := coopfake.PutTenant(ctx(t), api, "t", 0, spec(1, true)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "v1 active", func() bool {
		return read("scripts/hello.sh") == "#!/bin/sh\necho v1\n" && read("archives/pkg/readme.txt") == "inside\n"
	})
	if fi, err := os.Stat(filepath.Join(typeDir, "scripts/hello.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode: %v %v", fi, err)
	}
	if _, err := coopfake.PutTenant(ctx(t), api, "t", 0, spec(2, false)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "v2 active, archive gone", func() bool {
		_, err := os.Lstat(filepath.Join(typeDir, "archives/pkg"))
		return read("scripts/hello.sh") == "#!/bin/sh\necho v2\n" && os.IsNotExist(err)
	})
	if target, _ := os.Readlink(filepath.Join(typeDir, "scripts/hello.sh")); target != "../.resources/scripts/hello.sh/2/hello.sh" {
		t.Errorf("link target %q", target)
	}
}

// TestTenantRemovedWhileRunning: deleting a tenant (or lowering its
// workers) stops its slots from taking more, but a task already running
// finishes and its result is delivered; a new tenant starts at once.
func TestTenantRemovedWhileRunning(t *testing.T) {
	r := &runner{block: make(chan struct{})}
	srv, p := start(t, coopr.Config{Runner: r})
	api := "http://" + p.APIAddr()
	if _, err := coopfake.PutTenant(ctx(t), api, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	srv.Enqueue("a", task("running"))
	srv.Enqueue("a", task("queued"))
	eventually(t, "the task to start", func() bool { return r.count("running") == 1 })
	if _, err := coopfake.DeleteTenant(ctx(t), api, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := coopfake.PutTenant(ctx(t), api, "b", 2, nil); err != nil {
		t.Fatal(err)
	}
	srv.Enqueue("b", task("for-b"))
	r.mu.Lock()
	close(r.block)
	r.block = nil
	r.mu.Unlock()
	for _, id := range []string{"running", "for-b"} {
		if _, err := srv.WaitFinished(ctx(t), id); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // a few polls: the deleted tenant's slot must not take "queued"
	if srv.Takes("queued") != 0 {
		t.Errorf("a deleted tenant's slot took another task")
	}
	eventually(t, "usage b=2 only", func() bool {
		pr, _ := srv.Provisioner("loom-test")
		return len(pr.Usage) == 1 && pr.Usage["b"] == 2
	})
}

// TestTenantRemovedWhileTaking: a tenant deleted while its slot's take
// is in flight, after the server handed the task out, still runs and
// finishes that task (a cancelled take lost it until the server's task
// timeout; TestCooprTenantsChangeWhileRunning failed in CI that way).
func TestTenantRemovedWhileTaking(t *testing.T) {
	r := &runner{}
	srv, p := start(t, coopr.Config{Runner: r})
	api := "http://" + p.APIAddr()
	srv.Enqueue("a", task("in-flight"))
	srv.AddFault(coopfake.Fault{Path: "/v2/tasks/take", AnswerDelay: time.Second})
	if _, err := coopfake.PutTenant(ctx(t), api, "a", 1, nil); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the server to hand the task out", func() bool { return srv.Takes("in-flight") == 1 })
	if _, err := coopfake.DeleteTenant(ctx(t), api, "a"); err != nil {
		t.Fatal(err)
	}
	f, err := srv.WaitFinished(ctx(t), "in-flight")
	if err != nil {
		t.Fatalf("the task taken while its tenant was deleted never finished: %v", err)
	}
	if f.Status != 0 || r.count("in-flight") != 1 || srv.Takes("in-flight") != 1 {
		t.Errorf("finish %+v, ran %d times, taken %d times; want status 0, once, once", f, r.count("in-flight"), srv.Takes("in-flight"))
	}
}

// TestWorkerCountsCappedAtCapacity: a tenant's worker count, alone or
// with the other tenants', never passes the capacity loomd registered; a
// count past it is refused with 400 and the reason, and nothing starts
// (300,000 workers once grew the daemon by 1.5 GB).
func TestWorkerCountsCappedAtCapacity(t *testing.T) {
	srv, p := start(t, coopr.Config{Runner: &runner{}, Capacity: 3})
	eventually(t, "registration", func() bool { _, ok := srv.Provisioner("loom-test"); return ok })
	api := "http://" + p.APIAddr()
	refused := func(what string, out []byte, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "--coopr-capacity") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %s %v, want 400 naming --coopr-capacity and %q", what, out, err, want)
		}
	}
	out, err := coopfake.PutTenant(ctx(t), api, "bomb", 300000, nil)
	refused("300,000 workers", out, err, "300000 workers is more than this provisioner's capacity of 3")
	if out, err := coopfake.PutTenant(ctx(t), api, "a", 2, nil); err != nil {
		t.Fatalf("2 of 3: %s %v", out, err)
	}
	out, err = coopfake.PutTenant(ctx(t), api, "b", 2, nil)
	refused("2 more with 2 running", out, err, "with the other tenants' 2")
	if out, err := coopfake.PutTenant(ctx(t), api, "b", 1, nil); err != nil {
		t.Fatalf("1 more: %s %v", out, err)
	}
	// The server's other tenant calls go through the same check.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v2/tenants", `{"id": "c", "workers": 1}`},
		{"PUT", "/v2/tenants/a/workers", `{"workers": 3}`},
	} {
		req, _ := http.NewRequest(c.method, api+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "--coopr-capacity") {
			t.Errorf("%s %s: %d %s, want 400 naming --coopr-capacity", c.method, c.path, resp.StatusCode, b)
		}
	}
	// Lowering one tenant makes room for another.
	if out, err := coopfake.PutTenant(ctx(t), api, "a", 0, nil); err != nil {
		t.Fatalf("a to 0: %s %v", out, err)
	}
	if out, err := coopfake.PutTenant(ctx(t), api, "b", 3, nil); err != nil {
		t.Fatalf("b to 3 once a has none: %s %v", out, err)
	}
	eventually(t, "usage b=3", func() bool { pr, _ := srv.Provisioner("loom-test"); return pr.Usage["b"] == 3 && pr.Usage["bomb"] == 0 })

	// --coopr-tenants past the capacity is a configuration error.
	if _, err := coopr.New(coopr.Config{ServerURL: srv.URL(), Runner: &runner{}, Capacity: 2, Tenants: map[string]int{"x": 2, "y": 1}}); err == nil ||
		!strings.Contains(err.Error(), "--coopr-capacity 2") {
		t.Errorf("tenants over the capacity at start: %v", err)
	}
}

// TestReRegisterBacksOff: against a server that keeps answering 404 to
// heartbeats, each registration waits longer than the last (jittered,
// doubling to MaxBackoff), and the plugin types go to the server once,
// not at every registration; a heartbeat the server takes resets the
// backoff. Waits are recorded, not slept.
func TestReRegisterBacksOff(t *testing.T) {
	srv, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.AddFault(coopfake.Fault{Path: "/v2/provisioners/loom-test/heartbeat", Status: http.StatusNotFound, Times: 1 << 30})
	var mu sync.Mutex
	var waits []time.Duration
	registrations := make(chan struct{}, 100)
	types := []coopr.PluginType{
		{Name: "shell", Family: runtime.Automator, Raw: []byte(`{"name":"shell","classname":"S","parameters":{}}`)},
		{Name: "static", Family: runtime.Provider, Raw: []byte(`{"classname":"Static"}`)},
	}
	p, err := coopr.New(coopr.Config{ServerURL: srv.URL(), ID: "loom-test", Listen: "127.0.0.1:0", Runner: &runner{}, Types: types,
		Heartbeat: time.Second, Poll: time.Second, MaxBackoff: 16 * time.Second,
		Sleep: func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			waits = append(waits, d)
			n := len(waits)
			mu.Unlock()
			if n >= 12 {
				<-ctx.Done() // enough: hold the loop until Stop
				return false
			}
			registrations <- struct{}{}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	for range 11 {
		select {
		case <-registrations:
		case <-time.After(20 * time.Second):
			t.Fatal("the registration loop stopped")
		}
	}
	mu.Lock()
	got := append([]time.Duration(nil), waits[:11]...)
	mu.Unlock()
	// Wait i is jittered around min(1s*2^i, 16s): within [half, 1.5x).
	for i, d := range got {
		want := min(time.Second<<i, 16*time.Second)
		if d < want/2 || d >= want*3/2 {
			t.Errorf("wait %d after a 404: %v, want within [%v, %v)", i+1, d, want/2, want*3/2)
		}
	}
	var regs, beats, typePuts int
	for _, l := range srv.Log() {
		switch {
		case strings.HasPrefix(l, "PUT /v2/provisioners/loom-test "):
			regs++
		case strings.HasPrefix(l, "POST /v2/provisioners/loom-test/heartbeat"):
			beats++
		case strings.HasPrefix(l, "PUT /v2/plugins/"):
			typePuts++
		}
	}
	if typePuts != len(types) {
		t.Errorf("%d plugin type PUTs over %d registrations, want each of the %d types once:\n%s", typePuts, regs, len(types), strings.Join(srv.Log(), "\n"))
	}
	if regs < 11 || regs > 13 || beats < regs-1 || beats > regs {
		t.Errorf("%d registrations and %d heartbeats for 11 waits, want one of each per wait", regs, beats)
	}
}

// TestReRegisterBackoffResets: once a heartbeat is taken, the provisioner
// waits the heartbeat interval again, and a later 404 starts the backoff
// from the beginning.
func TestReRegisterBackoffResets(t *testing.T) {
	srv, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	const hb = "/v2/provisioners/loom-test/heartbeat"
	srv.AddFault(coopfake.Fault{Path: hb, Status: http.StatusNotFound, Times: 3})
	var mu sync.Mutex
	var waits []time.Duration
	done := make(chan struct{})
	p, err := coopr.New(coopr.Config{ServerURL: srv.URL(), ID: "loom-test", Listen: "127.0.0.1:0", Runner: &runner{},
		Heartbeat: 8 * time.Second, Poll: time.Second, MaxBackoff: 16 * time.Second,
		Sleep: func(ctx context.Context, d time.Duration) bool {
			mu.Lock()
			waits = append(waits, d)
			n := len(waits)
			mu.Unlock()
			switch {
			case n == 5:
				srv.AddFault(coopfake.Fault{Path: hb, Status: http.StatusNotFound, Times: 1})
			case n == 7:
				close(done)
				<-ctx.Done()
				return false
			}
			return true
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the registration loop stopped")
	}
	mu.Lock()
	defer mu.Unlock()
	// 3 backoffs (1s, 2s, 4s), 2 heartbeat waits (8s), the backoff again
	// from 1s after the new 404, then a heartbeat wait.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, time.Second, 8 * time.Second}
	for i, d := range waits[:7] {
		if d < want[i]/2 || d >= want[i]*3/2 {
			t.Errorf("wait %d: %v, want about %v (waits %v)", i+1, d, want[i], waits)
		}
	}
}
