//go:build linux && !race

package worker

import (
	"fmt"
	"os"
	"testing"

	"github.com/nats-io/nats-server/v2/server/pse"
)

// stopProcSampler reaches the NATS server's process-stats package (the
// linkname binds its file, set by its init, not a variable of our own) and
// makes the read its timer repeats fail, which ends the timer.
func TestStopProcSampler(t *testing.T) {
	if want := fmt.Sprintf("/proc/%d/stat", os.Getpid()); pseProcStatFile != want {
		t.Fatalf("pse's stat file is %q, want %q: has nats-server's pse package changed?", pseProcStatFile, want)
	}
	var pcpu float64
	var rss, vss int64
	if err := pse.ProcUsage(&pcpu, &rss, &vss); err != nil || rss <= 0 {
		t.Fatalf("pse.ProcUsage before the stop: rss %d, %v", rss, err)
	}
	old := pseProcStatFile
	stopProcSampler()
	if len(pseProcStatFile) != len(old) {
		t.Errorf("the new path %q is not as long as %q", pseProcStatFile, old)
	}
	if err := pse.ProcUsage(&pcpu, &rss, &vss); err == nil {
		t.Errorf("pse.ProcUsage after the stop read %q without an error; its timer's read (the same file) would go on", pseProcStatFile)
	}
}
