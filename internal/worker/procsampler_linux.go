//go:build linux && !race

package worker

import (
	"strings"
	_ "unsafe" // go:linkname

	_ "github.com/nats-io/nats-server/v2/server/pse" // pseProcStatFile's package
)

// pseProcStatFile is the file the embedded NATS server's process-stats
// package (pse) reads every second: its init starts a timer that reads it,
// computes the CPU share, and schedules itself again, for as long as the
// process lives, and stops only when the read fails. It is linked into
// every loomd process, workers included.
//
//go:linkname pseProcStatFile github.com/nats-io/nats-server/v2/server/pse.procStatFile
var pseProcStatFile string

// stopProcSampler ends pse's timer in a worker, which runs no server: each
// tick woke the idle worker, and its goroutine start touched the binary's
// read-only data (runtime.pclntab), so within a second of releaseMemory
// about 3 MiB of the binary were mapped again. The package exports no way
// to stop it; the timer ends when its read fails, so the worker points it
// at a path that cannot exist (/proc/0 is no process), of the same length,
// so a tick reading it at that moment sees either path whole.
func stopProcSampler() {
	if n := len(pseProcStatFile); n > len("/proc/0/") {
		pseProcStatFile = "/proc/0/" + strings.Repeat("x", n-len("/proc/0/"))
	}
}
