package worker

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The cgroup v2 path, on a fake hierarchy (this machine and CI have
// cgroup v1): what loomd writes where.
func TestPrepareCgroupOnFakeHierarchy(t *testing.T) {
	root := t.TempDir()
	base := filepath.Join(root, "system.slice", "loomd.service")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	write(filepath.Join(root, "cgroup.controllers"), "cpuset cpu io memory pids\n")
	write(filepath.Join(base, "cgroup.controllers"), "cpu io memory pids\n")
	write(filepath.Join(base, "cgroup.procs"), "4242\n")
	own := []byte("0::/system.slice/loomd.service\n")

	dir, err := prepareCgroup(root, own, 4242)
	if err != nil {
		t.Fatalf("prepareCgroup: %v", err)
	}
	if dir != filepath.Join(base, "workers") {
		t.Errorf("workers dir = %s", dir)
	}
	if got := read(filepath.Join(base, "daemon", "cgroup.procs")); got != "4242" {
		t.Errorf("the daemon was not moved into its leaf: %q", got)
	}
	for _, d := range []string{base, dir} {
		if got := read(filepath.Join(d, "cgroup.subtree_control")); got != "+memory" {
			t.Errorf("%s: subtree_control = %q", d, got)
		}
	}

	// A worker joins a cgroup of its own under it, with memory.max.
	t.Setenv(CgroupEnv, dir)
	how, err := joinCgroup(384 << 20)
	if err != nil {
		t.Fatalf("joinCgroup: %v", err)
	}
	mine := filepath.Join(dir, "worker-"+strconv.Itoa(os.Getpid()))
	if got := read(filepath.Join(mine, "memory.max")); got != strconv.Itoa(384<<20) || !strings.Contains(how, "384 MiB") {
		t.Errorf("memory.max = %q (%s)", got, how)
	}
	if got := read(filepath.Join(mine, "cgroup.procs")); got != "0" {
		t.Errorf("the worker did not move itself: %q", got)
	}
	// Its death by the OOM killer is told from memory.events, and its
	// cgroup removed.
	if err := os.Remove(filepath.Join(mine, "cgroup.procs")); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(mine, "memory.max"))
	os.Remove(filepath.Join(mine, "memory.swap.max"))
	write(filepath.Join(mine, "memory.events"), "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")
	if !oomKilled(dir, os.Getpid()) {
		t.Errorf("oom_kill 1 not seen")
	}

	// A cgroup shared with other processes (a login session) is left alone.
	write(filepath.Join(root, "user.slice", "session-1.scope", "cgroup.controllers"), "memory\n")
	write(filepath.Join(root, "user.slice", "session-1.scope", "cgroup.procs"), "1\n4242\n")
	if _, err := prepareCgroup(root, []byte("0::/user.slice/session-1.scope\n"), 4242); !errors.Is(err, errNoCgroup) || !strings.Contains(err.Error(), "other processes") {
		t.Errorf("shared cgroup: %v", err)
	}
	// cgroup v1 only: no.
	if _, err := prepareCgroup(t.TempDir(), own, 4242); !errors.Is(err, errNoCgroup) {
		t.Errorf("no cgroup v2: %v", err)
	}
}
