package worker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/loomrt/loom/runtime"
)

// osHeadroom is how far above the budget the OS limit sits: the watchdog
// stops a hook at the budget, the OS limit catches an allocation burst
// faster than the watchdog's sampling, and leaves room for the threads
// a hook's blocking calls add (8 MiB of stack each in a cgo build).
func osHeadroom(budget int64) int64 {
	return max(budget/2, 128<<20)
}

// applyMemoryLimit puts this process under an OS memory limit of budget
// plus headroom. In "auto" mode it uses cgroup v2 (memory.max of a
// cgroup of its own, under the one the daemon prepared in
// LOOM_WORKER_CGROUP) when that is writable, else RLIMIT_DATA, which
// bounds the process's private writable memory: Go's heap, stacks and
// runtime structures, and the thread stacks. That counts the process's
// baseline too (about 100 MiB of mostly untouched thread stacks in a cgo
// build), so the rlimit is the current data size plus budget plus
// headroom. (RLIMIT_AS does not work: the Go runtime reserves far more
// address space than it uses.)
func applyMemoryLimit(mode string, budget int64) (string, error) {
	hard := budget + osHeadroom(budget)
	switch mode {
	case "", "auto":
		if how, err := joinCgroup(hard); err == nil {
			return how, nil
		}
		return setRlimitData(dataSize() + hard)
	case "cgroup":
		return joinCgroup(hard)
	case "rlimit":
		return setRlimitData(dataSize() + hard)
	case "none":
		return "none", nil
	}
	return "", fmt.Errorf("unknown limit mode %q (want auto, cgroup, rlimit or none)", mode)
}

// dataSize is the process's VmData: what RLIMIT_DATA counts.
func dataSize() int64 {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(st, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmData:")); ok {
			f := bytes.Fields(rest)
			if len(f) >= 1 {
				kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

func setRlimitData(n int64) (string, error) {
	lim := &syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, lim); err != nil {
		return "", fmt.Errorf("setrlimit RLIMIT_DATA %d: %w", n, err)
	}
	return "rlimit-data " + runtime.FormatSize(n), nil
}

// errNoCgroup: cgroup v2 is not available or not delegated to loomd.
var errNoCgroup = errors.New("no writable cgroup v2")

// CgroupEnv names the environment variable through which the daemon
// passes a cgroup v2 directory whose children workers may create (see
// PrepareCgroup).
const CgroupEnv = "LOOM_WORKER_CGROUP"

// joinCgroup creates <LOOM_WORKER_CGROUP>/worker-<pid> with memory.max
// and moves this process into it.
func joinCgroup(n int64) (string, error) {
	parent := os.Getenv(CgroupEnv)
	if parent == "" {
		return "", errNoCgroup
	}
	dir := filepath.Join(parent, "worker-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	fail := func(err error) (string, error) {
		_ = os.Remove(dir)
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(n, 10)), 0); err != nil {
		return fail(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0)
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("0"), 0); err != nil {
		return fail(err)
	}
	return "cgroup " + dir + " memory.max " + runtime.FormatSize(n), nil
}

// PrepareCgroup readies cgroup v2 for worker memory limits, when this
// process may write its cgroup (loomd run as a systemd service with
// Delegate=yes, or as root on a cgroup v2 host): it moves the daemon
// into a leaf "<own cgroup>/daemon", enables the memory controller for
// its own cgroup's children and returns the directory workers create
// their cgroups in. Without cgroup v2, or without the right to write
// there, it returns an error and workers fall back to RLIMIT_DATA.
func PrepareCgroup() (string, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	return prepareCgroup("/sys/fs/cgroup", own, os.Getpid())
}

// prepareCgroup is PrepareCgroup on the hierarchy mounted at root, for
// the process pid whose /proc/<pid>/cgroup is own.
func prepareCgroup(root string, own []byte, pid int) (string, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return "", fmt.Errorf("%w: %s is not a cgroup v2 hierarchy", errNoCgroup, root)
	}
	var rel string
	for _, line := range bytes.Split(own, []byte("\n")) {
		if p, ok := bytes.CutPrefix(line, []byte("0::")); ok {
			rel = string(p)
		}
	}
	if rel == "" {
		return "", fmt.Errorf("%w: no cgroup v2 entry in /proc/self/cgroup", errNoCgroup)
	}
	base := filepath.Join(root, filepath.Clean("/"+rel))
	ctl, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil || !bytes.Contains(ctl, []byte("memory")) {
		return "", fmt.Errorf("%w: the memory controller is not available in %s", errNoCgroup, base)
	}
	// No process may sit in a cgroup whose children have controllers:
	// move the daemon into a leaf first.
	leaf := filepath.Join(base, "daemon")
	if err := os.Mkdir(leaf, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	procs, _ := os.ReadFile(filepath.Join(base, "cgroup.procs"))
	self := strconv.Itoa(pid)
	for _, p := range bytes.Fields(procs) {
		if string(p) != self {
			// Not a cgroup of our own (a login session, say): leave it.
			return "", fmt.Errorf("%w: %s holds other processes than loomd (run loomd as a service with Delegate=yes)", errNoCgroup, base)
		}
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(self), 0); err != nil {
		return "", fmt.Errorf("%w: moving loomd into %s: %v", errNoCgroup, leaf, err)
	}
	if err := os.WriteFile(filepath.Join(base, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		return "", fmt.Errorf("%w: enabling the memory controller in %s: %v", errNoCgroup, base, err)
	}
	workers := filepath.Join(base, "workers")
	if err := os.Mkdir(workers, 0o755); err != nil && !os.IsExist(err) {
		return "", fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	if err := os.WriteFile(filepath.Join(workers, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
		return "", fmt.Errorf("%w: enabling the memory controller in %s: %v", errNoCgroup, workers, err)
	}
	return workers, nil
}

// oomKilled reports whether the cgroup a dead worker ran in recorded an
// OOM kill, and removes that cgroup.
func oomKilled(cgroupParent string, pid int) bool {
	if cgroupParent == "" {
		return false
	}
	dir := filepath.Join(cgroupParent, "worker-"+strconv.Itoa(pid))
	defer os.Remove(dir)
	ev, err := os.ReadFile(filepath.Join(dir, "memory.events"))
	if err != nil {
		return false
	}
	for _, line := range bytes.Split(ev, []byte("\n")) {
		if f := bytes.Fields(line); len(f) == 2 && string(f[0]) == "oom_kill" && string(f[1]) != "0" {
			return true
		}
	}
	return false
}
