//go:build linux && race

package worker

// stopProcSampler leaves the NATS server's process-stats timer alone in a
// race build: the race detector would report its write (see
// procsampler_linux.go) against the timer's next read, which nothing
// orders. Race builds are for tests, where an idle worker's memory does not
// matter.
func stopProcSampler() {}
