package worker_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/worker"
)

// rssKiB reads a VmRSS-like field (RssFile, RssAnon) of a process.
func rssKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// children are this process's child processes: the test's workers.
func children(t *testing.T) []int {
	t.Helper()
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			pid, _ := strconv.Atoi(strings.Split(d, "/")[2])
			out = append(out, pid)
		}
	}
	return out
}

// An idle worker gives memory back: once no task came for a while, it
// drops its mappings of the binary's pages (and the heap's free pages),
// so its resident file pages shrink; the next task runs as before.
func TestIdleWorkerGivesMemoryBack(t *testing.T) {
	e := newEnv(t, worker.Config{MaxWorkers: 1})
	if r, err := run(t, e, context.Background(), "t0", "ok", time.Minute); err != nil || r.Status != 0 {
		t.Fatalf("run: %+v, %v", r, err)
	}
	kids := children(t)
	if len(kids) != 1 {
		t.Fatalf("%d worker processes, want 1", len(kids))
	}
	pid := kids[0]
	busy := rssKiB(t, pid, "RssFile")
	deadline := time.Now().Add(20 * time.Second)
	for rssKiB(t, pid, "RssFile") > busy/2 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle worker still maps %d KiB of file pages (%d KiB after its task)", rssKiB(t, pid, "RssFile"), busy)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("file pages resident after the task %d KiB, idle %d KiB; anonymous %d KiB", busy, rssKiB(t, pid, "RssFile"), rssKiB(t, pid, "RssAnon"))
	if r, err := run(t, e, context.Background(), "t1", "ok", time.Minute); err != nil || r.Status != 0 || r.Result["ok"] != true {
		t.Fatalf("a task after the release: %+v, %v", r, err)
	}
	if kids := children(t); len(kids) != 1 || kids[0] != pid {
		t.Errorf("workers after the release: %v, want the same process %d", kids, pid)
	}
}
