package worker

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// watchdog samples the Go runtime's memory and calls exceeded when it
// passes the budget, so the running hook fails cleanly (error kind
// "memory") before the OS limit kills the process. It also sets the Go
// soft memory limit to the budget, so garbage is collected before it
// counts against the hook.
type watchdog struct {
	limit    atomic.Int64
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
	w := &watchdog{done: make(chan struct{})}
	w.setLimit(limit)
	go func() {
		s := newSamples()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
			}
			used, limit := memoryInUse(s), w.limit.Load()
			if used > limit {
				exceeded(used, limit)
			}
		}
	}()
	return w
}

func (w *watchdog) stop() { w.stopOnce.Do(func() { close(w.done) }) }
