package worker

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog samples the Go runtime's memory while a hook runs and calls
// exceeded when it passes the budget, so the running hook fails cleanly
// (error kind "memory") before the OS limit kills the process. It also
// sets the Go soft memory limit to the budget, so garbage is collected
// before it counts against the hook. An idle worker is not sampled: a
// ticker in every idle worker cost about 1.4% of a core each.
type watchdog struct {
	limit    atomic.Int64
	active   chan bool // a run began (true) or ended (false)
	stopOnce sync.Once
	done     chan struct{}
}

// setLimit changes the budget (per run: types have their own).
func (w *watchdog) setLimit(n int64) {
	if w.limit.Swap(n) != n {
		debug.SetMemoryLimit(n)
	}
}

// memoryInUse is what the Go runtime holds from the OS and has not
// returned: the quantity debug.SetMemoryLimit bounds.
func memoryInUse(s []metrics.Sample) int64 {
	metrics.Read(s)
	return int64(s[0].Value.Uint64()) - int64(s[1].Value.Uint64())
}

func newSamples() []metrics.Sample {
	return []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
}

func startWatchdog(limit int64, every time.Duration, exceeded func(used, limit int64)) *watchdog {
	w := &watchdog{done: make(chan struct{}), active: make(chan bool, 1)}
	w.setLimit(limit)
	go func() {
		s := newSamples()
		t := time.NewTicker(every)
		t.Stop()
		defer t.Stop()
		running := false
		for {
			select {
			case <-w.done:
				return
			case running = <-w.active:
				if running {
					t.Reset(every)
				} else {
					t.Stop()
				}
				continue
			case <-t.C:
			}
			if !running {
				continue
			}
			used, limit := memoryInUse(s), w.limit.Load()
			if used > limit {
				exceeded(used, limit)
			}
		}
	}()
	return w
}

// running tells the watchdog whether a hook runs.
func (w *watchdog) running(on bool) {
	select {
	case w.active <- on:
	case <-w.done:
	}
}

func (w *watchdog) stop() { w.stopOnce.Do(func() { close(w.done) }) }
