package test

// Cancel, delete, paging and retention through the built binary: two
// daemons share a queue, the CLI talks to the one that does not run the
// task, and the hook runs in the other's worker process.

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
)

func TestTaskCancelDeleteListCLI(t *testing.T) {
	dir := serveDir(t, "noop")
	a := startDaemon(t, dir, "a.log", nil, "--nats-listen", "127.0.0.1:0")
	// b serves no plugin type: every task runs on a.
	bdir := serveDir(t)
	b := startDaemon(t, bdir, "b.log", nil, "--nats", a.natsURL(), "--nats-nkey", filepath.Join(dir, "data", "nats.nk"))
	cli := func(args ...string) cliRun {
		return loomd(t, "", append(append([]string{"task"}, args...), "--server", b.url())...)
	}

	// A running hook (sleeping 60 s in a's worker) is cancelled through b.
	b.submit(`{"clusterId": "k9", ` + strings.TrimPrefix(noopTask("long-1", "noop", 60), "{"))
	b.waitFor("long-1 running", func() bool { return b.task("long-1").State == queue.Running })
	r := cli("cancel", "long-1")
	var got api.Task
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.State != queue.Cancelled {
		t.Fatalf("task cancel long-1 = exit %d, %v\nstdout: %s\nstderr: %s\na's log: %s", r.code, err, r.stdout, r.stderr, a.logTail())
	}
	if res := resultOf(t, got.Result); res.Error["kind"] != "cancelled" {
		t.Errorf("result = %s, want error kind cancelled", got.Result)
	}
	if r := cli("cancel", "long-1"); r.code != 1 || !strings.Contains(r.stderr, "already finished (cancelled)") {
		t.Errorf("second cancel = exit %d, stderr %q; want 1 and 'already finished'", r.code, r.stderr)
	}

	// A queued task (no daemon serves its type) cannot be deleted, only
	// cancelled; then it can.
	b.submit(noopTask("idle-1", "nobody", 0))
	if r := cli("delete", "idle-1"); r.code != 1 || !strings.Contains(r.stderr, "loomd task cancel idle-1") {
		t.Errorf("delete queued = exit %d, stderr %q; want 1 pointing at cancel", r.code, r.stderr)
	}
	if r := cli("cancel", "idle-1"); r.code != 0 || !strings.Contains(r.stdout, `"cancelled"`) {
		t.Errorf("cancel queued = exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Paging: one task per page, the cursor carried by --after.
	r = cli("list", "--state", "cancelled", "--limit", "1")
	var p1 api.ListResponse
	if err := json.Unmarshal([]byte(r.stdout), &p1); r.code != 0 || err != nil || len(p1.Tasks) != 1 || p1.Tasks[0].TaskID != "idle-1" || p1.Next == "" {
		t.Fatalf("list page 1 = exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = cli("list", "--state", "cancelled", "--limit", "1", "--after", p1.Next)
	var p2 api.ListResponse
	if err := json.Unmarshal([]byte(r.stdout), &p2); r.code != 0 || err != nil || len(p2.Tasks) != 1 || p2.Tasks[0].TaskID != "long-1" {
		t.Fatalf("list page 2 = exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	r = cli("list", "--cluster", "k9")
	if !strings.Contains(r.stdout, "long-1") || strings.Contains(r.stdout, "idle-1") {
		t.Errorf("list --cluster k9 = %s", r.stdout)
	}
	if r := cli("list", "--limit", "0"); r.code != 2 || !strings.Contains(r.stderr, "--limit 0") {
		t.Errorf("list --limit 0 = exit %d, stderr %q; want 2", r.code, r.stderr)
	}
	if r := cli("list", "--after", "garbage"); r.code != 2 || !strings.Contains(r.stderr, "bad cursor") {
		t.Errorf("list --after garbage = exit %d, stderr %q; want 2", r.code, r.stderr)
	}

	// Delete, then the id is new again and runs.
	for _, id := range []string{"long-1", "idle-1"} {
		if r := cli("delete", id); r.code != 0 || !strings.Contains(r.stdout, `"deleted": true`) {
			t.Errorf("delete %s = exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
		}
	}
	if r := cli("delete", "long-1"); r.code != 2 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("delete again = exit %d, stderr %q; want 2 (not found)", r.code, r.stderr)
	}
	if s := b.submit(noopTask("long-1", "noop", 0)); s.Duplicate {
		t.Fatalf("resubmitting a deleted id was taken as a duplicate")
	}
	if got := b.wait("long-1"); got.State != queue.Succeeded {
		t.Errorf("resubmitted long-1 = %s, want succeeded", got.State)
	}
}

// --retain deletes finished tasks in the background.
func TestServeRetain(t *testing.T) {
	dir := serveDir(t, "noop")
	d := startDaemon(t, dir, "d.log", nil, "--retain", "500ms")
	d.submit(noopTask("keep-short", "noop", 0))
	d.wait("keep-short")
	d.waitFor("keep-short deleted", func() bool {
		code, _ := d.call("GET", "/v1/tasks/keep-short", "")
		return code == http.StatusNotFound
	})
	// The sweep logs once it is done, just after the record went.
	d.waitFor("the 'deleted expired tasks' line", func() bool { return strings.Contains(d.logTail(), "deleted expired tasks") })
	if r := loomd(t, "", "serve", "--retain", "-1h", "--data", t.TempDir()); r.code != 2 || !strings.Contains(r.stderr, "--retain") {
		t.Errorf("serve --retain -1h = exit %d, stderr %q; want 2", r.code, r.stderr)
	}
}
