// Package hostile is the hostile-plugin suite (issue 9, item 6): attack
// plugins and hostile requests against `loomd serve` running as a real
// process (the built binary, embedded NATS, a temp data dir, a loopback
// API on a free port).
//
// Every case states the secure outcome the issues ask for and asserts:
//
//   - the attack fails the right way (task state, result error kind, HTTP
//     status, exit code of `loomd run`);
//   - the daemon still serves: an ordinary task submitted afterwards
//     completes (its latency is recorded in the report, not asserted);
//   - at the end, the daemon's peak RSS (VmHWM) is under 512 MiB and it
//     never died or restarted.
//
// A case whose fix has not landed is kept with a "known gap" naming the
// issue item; it is skipped unless LOOM_HOSTILE_GAPS=1, so engineers can
// check whether their change closes it. The suite runs only when
// LOOM_HOSTILE=1 (make hostile, which make test runs), so plain
// `go test ./...` stays fast. LOOM_HOSTILE_REPORT names a Markdown file that
// receives the observed outcome and latency of every case.
package hostile

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// loomdBin is the loomd binary under test, built once by TestMain.
var loomdBin string

func TestMain(m *testing.M) {
	if os.Getenv("LOOM_HOSTILE") != "1" {
		fmt.Println("hostile suite skipped: set LOOM_HOSTILE=1 (make hostile)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "loom-hostile-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	loomdBin = filepath.Join(dir, "loomd")
	build := exec.Command("go", "build", "-o", loomdBin, "./cmd/loomd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building loomd: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
