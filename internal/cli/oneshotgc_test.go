package cli

import (
	"runtime/debug"
	"testing"
)

// TestOneShotGC: loomd run collects at GOGC 400 unless GOGC is set, and
// gives the previous setting back.
func TestOneShotGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	a := &App{Getenv: func(string) string { return "" }}
	restore := a.oneShotGC()
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Errorf("GOGC during the run is %d, want %d", got, startGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC after the run is %d, want 100 as before", got)
	}
	a.Getenv = func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	}
	restore = a.oneShotGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set, the run changed it to %d", got)
	}
	restore()
}
