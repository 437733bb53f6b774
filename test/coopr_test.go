package test

// End-to-end test of loomd as a Coopr provisioner (issue 14): a Coopr
// server (internal/coopr/coopfake, strict about the protocol) issues a
// node's tasks to `loomd serve --coopr-server`, which runs them with the
// static provider and the shell automator against a real sshd, while the
// server drops a take answer, loses a finish answer, restarts, and loomd is
// killed with -9 mid-task and started again.

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr/coopfake"
	"github.com/loomrt/loom/internal/sshdtest"
)

func TestCooprServerDrivesNode(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	cleanCacheDir(t)
	e := newE2EEnv(t, srv)
	writeShellResources(e)
	e.writeFile(filepath.Join(e.typeDir("automatortypes", "shell"), "scripts", "slow.sh"), "#!/bin/sh\nsleep 1\necho slow > \"$1\"\n", 0o755)
	e.writeFile(filepath.Join(e.typeDir("automatortypes", "shell"), "scripts", "mark.sh"),
		"#!/bin/sh\necho run >> \"$1.runs\"\nsleep 2\necho done > \"$1\"\n", 0o755)
	root := filepath.Dir(e.plugins)
	host := map[string]any{
		"id": "rack1-01", "address": srv.Host, "port": srv.Port, "hostname": "rack1-01.static.example",
		"user": srv.NoPasswdUser, "key": string(srv.KeyPEM),
		"labels": map[string]any{"flavor": "small", "image": "debian12"},
	}
	inv, _ := json.Marshal(map[string]any{"hosts": []any{host}})
	e.writeFile(filepath.Join(e.typeDir("providertypes", "static"), "inventory.json"), string(inv), 0o600)

	coopr, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer coopr.Close()
	// A task taken and never finished goes back to the queue after this
	// (the server's server.task.timeout.seconds, 1800 s in production).
	coopr.TaskTimeout = 3 * time.Second
	// A resource the server syncs: a script, shipped by BOOTSTRAP as the
	// file its activation link points to.
	coopr.SetResource(e.tenant, "automatortypes", "shell", "scripts", "synced.sh", 4,
		[]byte("#!/bin/sh\necho \"synced v4 on $(coopr_lookup_key ^/config/hostname$)\" > \"$1\"\n"))

	apiAddr := freeAddr(t)
	start := func(log string) *daemon {
		return startDaemon(t, root, log, nil, "--coopr-server", coopr.URL(), "--coopr-provisioner-id", "loom-e2e",
			"--coopr-listen", apiAddr, "--coopr-poll", "50ms", "--coopr-heartbeat", "200ms",
			"--known-hosts", e.knownHosts, "--tenant", "default")
	}
	d := start("loomd-1.log")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The server assigns the tenant its worker and resources, as the Java
	// server's putTenant does.
	resources := map[string]any{"automatortypes": map[string]any{"shell": map[string]any{
		"scripts": map[string]any{"format": "file", "permissions": "0755", "active": []any{map[string]any{"name": "synced.sh", "version": 4}}}}}}
	if _, err := coopfake.PutTenant(ctx, "http://"+apiAddr, e.tenant, 1, resources); err != nil {
		t.Fatalf("PUT tenant: %v\n%s", err, d.logTail())
	}

	node := newCooprNode("00000061", "node-coopr-1", baseConfig("prov-secret-"+randToken(t)))
	outDir := t.TempDir()
	step := func(name string, extra map[string]any) map[string]any {
		t.Helper()
		task := node.task(name, extra)
		b, _ := json.Marshal(task)
		if err := coopr.Enqueue(e.tenant, b); err != nil {
			t.Fatal(err)
		}
		f, err := coopr.WaitFinished(ctx, task["taskId"].(string))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, d.logTail())
		}
		body, _ := json.Marshal(f.Body)
		r := loomdResult{}
		_ = json.Unmarshal(body, &r.Result)
		if f.Status != 0 {
			t.Fatalf("%s failed: %s\n%s", name, body, d.logTail())
		}
		if f.ProvisionerID != "loom-e2e" || f.TenantID != e.tenant || r.Result["workerId"] != f.WorkerID {
			t.Errorf("%s finish ids: %+v", name, f)
		}
		node.apply(r)
		return r.Result
	}

	// retaken turns the server's task timeout off once it has handed a
	// task out the second time: a slow run on a loaded machine is not
	// timed out again.
	retaken := func(taskID string) {
		go func() {
			for ctx.Err() == nil && coopr.Takes(taskID) < 2 {
				time.Sleep(10 * time.Millisecond)
			}
			coopr.SetTaskTimeout(0)
		}()
	}
	// The answer to the first take is lost (the server died after
	// dequeuing): the task waits out the server's timeout and runs once.
	coopr.AddFault(coopfake.Fault{Path: "/v2/tasks/take", DropAfter: true, WhenStatus: 200})
	retaken("00000061-001-001")
	step("CREATE", nil)
	if n := coopr.Takes("00000061-001-001"); n != 2 {
		t.Errorf("CREATE taken %d times, want 2 (the first answer was lost)", n)
	}
	if node.config["providerid"] != "rack1-01" {
		t.Fatalf("CREATE claimed %v", node.config["providerid"])
	}
	// The answer to CONFIRM's finish is lost: loomd sends it again, the
	// server answers 417 (already finished), and nothing runs twice.
	coopr.AddFault(coopfake.Fault{Path: "/v2/tasks/finish", DropAfter: true})
	step("CONFIRM", nil)
	step("BOOTSTRAP", nil)
	if fi, err := os.Lstat(filepath.Join(defaultCacheDir, "scripts", "synced.sh")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the synced script on the node: %v %v, want a regular file", fi, err)
	}
	// The server restarts while INSTALL runs: the finish still arrives.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = coopr.Restart(500 * time.Millisecond)
	}()
	step("INSTALL", serviceAction("web", "slow.sh", filepath.Join(outDir, "slow")))
	step("CONFIGURE", serviceAction("web", "install-web.sh", filepath.Join(outDir, "web.conf")+" v1"))
	if data, err := os.ReadFile(filepath.Join(outDir, "web.conf")); err != nil ||
		string(data) != "host=rack1-01.static.example service=web first=web args=v1 user=root\n" {
		t.Errorf("CONFIGURE wrote %q (%v)", data, err)
	}
	step("START", serviceAction("web", "synced.sh", filepath.Join(outDir, "synced")))
	if data, err := os.ReadFile(filepath.Join(outDir, "synced")); err != nil || string(data) != "synced v4 on rack1-01.static.example\n" {
		t.Errorf("START (synced script) wrote %q (%v)", data, err)
	}

	// loomd is killed with -9 in the middle of a task: the server times
	// the task out and hands it to the restarted loomd, which runs it; the
	// script is idempotent, so the node ends as if it ran once.
	task := node.task("STOP", serviceAction("web", "mark.sh", filepath.Join(outDir, "mark")))
	coopr.SetTaskTimeout(3 * time.Second)
	retaken(task["taskId"].(string))
	b, _ := json.Marshal(task)
	coopr.Enqueue(e.tenant, b)
	d.waitFor("the STOP script to start", func() bool { _, err := os.Stat(filepath.Join(outDir, "mark.runs")); return err == nil })
	d.kill9()
	d2 := start("loomd-2.log")
	d = d2
	if _, err := coopfake.PutTenant(ctx, "http://"+apiAddr, e.tenant, 1, resources); err != nil {
		t.Fatalf("PUT tenant after the restart: %v", err)
	}
	f, err := coopr.WaitFinished(ctx, task["taskId"].(string))
	if err != nil || f.Status != 0 {
		t.Fatalf("STOP after kill -9: %+v %v\n%s", f, err, d2.logTail())
	}
	if data, _ := os.ReadFile(filepath.Join(outDir, "mark")); string(data) != "done\n" {
		t.Errorf("mark = %q", data)
	}
	if coopr.Takes(task["taskId"].(string)) != 2 {
		t.Errorf("STOP taken %d times, want 2 (once by the killed loomd)", coopr.Takes(task["taskId"].(string)))
	}

	// Every task but the lost take and the killed one was taken once, and
	// finished once.
	finished := map[string]int{}
	for _, f := range coopr.Finishes() {
		finished[f.TaskID]++
	}
	for id, n := range finished {
		if n != 1 {
			t.Errorf("task %s finished %d times", id, n)
		}
	}
	if n := coopr.Takes("00000061-001-003"); n != 1 {
		t.Errorf("BOOTSTRAP taken %d times", n)
	}
	if coopr.Refused(400) != 0 || coopr.Refused(403) > 2 {
		t.Errorf("the server refused loomd's requests: %s", strings.Join(coopr.Log(), "\n"))
	}
	if code := d2.term(); code != 0 {
		t.Errorf("loomd exit %d after SIGTERM\n%s", code, d2.logTail())
	}
	if _, ok := coopr.Provisioner("loom-e2e"); ok {
		t.Error("loomd did not unregister on shutdown")
	}
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestCooprTenantsChangeWhileRunning: the server deletes a tenant while
// its task runs in loomd and adds another: the running task finishes and
// its result is delivered, the deleted tenant's queue is left alone, the
// new tenant's tasks run at once beside it, and the tenant added back
// takes its queue again.
func TestCooprTenantsChangeWhileRunning(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, filepath.Join(dir, "plugins"), "noop", "v1")
	coopr, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer coopr.Close()
	apiAddr := freeAddr(t)
	d := startDaemon(t, dir, "loomd.log", nil, "--coopr-server", coopr.URL(), "--coopr-listen", apiAddr,
		"--coopr-poll", "50ms", "--coopr-heartbeat", "200ms", "--coopr-provisioner-id", "loom-tenants")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := "http://" + apiAddr
	if _, err := coopfake.PutTenant(ctx, api, "tenant-a", 1, nil); err != nil {
		t.Fatalf("PUT tenant-a: %v\n%s", err, d.logTail())
	}
	enqueue := func(tenant, id string, sleep float64) {
		t.Helper()
		if err := coopr.Enqueue(tenant, []byte(noopTask(id, "noop", sleep))); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("tenant-a", "a-running", 2)
	d.waitFor("tenant-a's task to be taken", func() bool { return coopr.Takes("a-running") == 1 })
	enqueue("tenant-a", "a-queued", 0)
	if _, err := coopfake.DeleteTenant(ctx, api, "tenant-a"); err != nil {
		t.Fatalf("DELETE tenant-a: %v", err)
	}
	if _, err := coopfake.PutTenant(ctx, api, "tenant-b", 2, nil); err != nil {
		t.Fatalf("PUT tenant-b: %v", err)
	}
	enqueue("tenant-b", "b-1", 0.2)
	enqueue("tenant-b", "b-2", 0.2)
	// loomd's own queue keeps serving beside the Coopr loops.
	own := d.submit(noopTask("own-1", "noop", 0))
	for _, id := range []string{"a-running", "b-1", "b-2"} {
		f, err := coopr.WaitFinished(ctx, id)
		if err != nil || f.Status != 0 {
			t.Fatalf("%s: %+v %v\n%s", id, f, err, d.logTail())
		}
		if want := "tenant-" + id[:1]; f.TenantID != want {
			t.Errorf("%s finished for %s, want %s", id, f.TenantID, want)
		}
	}
	if task := d.wait(own.TaskID); task.State != "succeeded" {
		t.Errorf("the task from loomd's own queue: %+v", task)
	}
	d.waitFor("usage tenant-b=2 only", func() bool {
		p, _ := coopr.Provisioner("loom-tenants")
		return len(p.Usage) == 1 && p.Usage["tenant-b"] == 2
	})
	if n := coopr.Takes("a-queued"); n != 0 {
		t.Errorf("the deleted tenant's queued task was taken %d times", n)
	}
	if _, err := coopfake.PutTenant(ctx, api, "tenant-a", 1, nil); err != nil {
		t.Fatalf("PUT tenant-a again: %v", err)
	}
	if f, err := coopr.WaitFinished(ctx, "a-queued"); err != nil || f.Status != 0 {
		t.Fatalf("a-queued after tenant-a came back: %+v %v", f, err)
	}
	for _, f := range coopr.Finishes() {
		if coopr.Takes(f.TaskID) != 1 {
			t.Errorf("%s taken %d times", f.TaskID, coopr.Takes(f.TaskID))
		}
	}
	if len(coopr.Finishes()) != 4 || coopr.Refused(400) != 0 || coopr.Refused(417) != 0 {
		t.Errorf("finishes %d, server log:\n%s", len(coopr.Finishes()), strings.Join(coopr.Log(), "\n"))
	}
}
