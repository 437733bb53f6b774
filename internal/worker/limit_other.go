//go:build !linux

package worker

import (
	"fmt"
	"runtime/debug"
)

// CgroupEnv names the environment variable through which the daemon
// passes a cgroup v2 directory for workers (Linux only).
const CgroupEnv = "LOOM_WORKER_CGROUP"

func applyMemoryLimit(mode string, budget int64) (string, error) {
	if mode == "none" {
		return "none", nil
	}
	// Off Linux only the watchdog bounds a hook's memory.
	return "watchdog only", nil
}

// PrepareCgroup is not available off Linux.
func PrepareCgroup() (string, error) { return "", fmt.Errorf("cgroups need Linux") }

func oomKilled(string, int) bool { return false }

// releaseMemory returns the Go heap's free pages to the OS; only Linux
// also drops the binary's pages (see release_linux.go).
func releaseMemory() int64 {
	debug.FreeOSMemory()
	return 0
}

// stopProcSampler is Linux only (see release_linux.go): elsewhere the
// NATS server's process-stats timer, where it has one, has no read that
// can be made to fail, and releaseMemory drops no binary pages for it to
// map again.
func stopProcSampler() {}
