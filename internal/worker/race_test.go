//go:build race

package worker_test

// raceEnabled: the race detector's shadow memory counts against the
// worker's RLIMIT_DATA, so memory budget tests cannot run under it.
const raceEnabled = true
