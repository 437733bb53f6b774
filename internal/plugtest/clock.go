package plugtest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// vclock is the virtual clock of a test file: loom.time and loom.http's
// retries read and wait on it. Virtual time is the wall clock plus an
// offset that every sleep adds to, so a sleep returns at once and the
// plugin sees the time (and the deadline drawing nearer) it would see in
// production. Each test starts with a zero offset.
type vclock struct {
	mu     sync.Mutex
	offset time.Duration
	fixed  *time.Time // set by clock.set: time stands still but for sleeps
	sleeps []time.Duration
	real   bool // clock.real(): the wall clock for this test
	// deadlines are the running hooks' deadlines in virtual time: when
	// virtual time reaches one, its hook ends as at a real deadline.
	deadlines map[*vdeadline]struct{}
}

// vdeadline is one hook's deadline on the virtual clock.
type vdeadline struct {
	at     time.Time
	cancel context.CancelFunc
	passed atomic.Bool
}

// vctx is a hook's context under loomd test: ended by its parent (the
// test's real --timeout) or by virtual time reaching the hook's deadline,
// when Err says context.DeadlineExceeded, as a real deadline would.
type vctx struct {
	context.Context
	d *vdeadline
}

func (c *vctx) Err() error {
	if c.d.passed.Load() {
		if err := c.Context.Err(); err != nil {
			return context.DeadlineExceeded
		}
	}
	return c.Context.Err()
}

// hookContext is runtime.Options.HookContext: the hook's deadline
// (timeouts.create, ...) runs on the virtual clock, so virtual waits
// spend it and real time only spends it as fast as it passes, while the
// test's context (--timeout) bounds real time.
func (c *vclock) hookContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	if c.real {
		c.mu.Unlock()
		return context.WithTimeout(ctx, timeout)
	}
	inner, cancel := context.WithCancel(ctx)
	d := &vdeadline{at: c.nowLocked().Add(timeout), cancel: cancel}
	if c.deadlines == nil {
		c.deadlines = map[*vdeadline]struct{}{}
	}
	c.deadlines[d] = struct{}{}
	c.mu.Unlock()
	hctx := &vctx{Context: bindings.WithClockDeadline(inner, d.at), d: d}
	return hctx, func() {
		c.mu.Lock()
		delete(c.deadlines, d)
		c.mu.Unlock()
		cancel()
	}
}

// expireLocked ends the hooks whose deadline virtual time has reached.
func (c *vclock) expireLocked() {
	now := c.nowLocked()
	for d := range c.deadlines {
		if !now.Before(d.at) {
			d.passed.Store(true)
			d.cancel()
			delete(c.deadlines, d)
		}
	}
}

var _ bindings.Clock = (*vclock)(nil)

func (c *vclock) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset, c.fixed, c.sleeps, c.real = 0, nil, nil, false
}

// setReal puts the test on the wall clock (clock.real(), and live
// acceptance tests: a real API takes real time).
func (c *vclock) setReal() {
	c.mu.Lock()
	c.real = true
	c.mu.Unlock()
}

// Now implements bindings.Clock.
func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *vclock) nowLocked() time.Time {
	if c.real {
		return time.Now()
	}
	if c.fixed != nil {
		return c.fixed.Add(c.offset)
	}
	return time.Now().Add(c.offset)
}

// Sleep implements bindings.Clock: it advances virtual time by d, or to
// ctx's deadline when d would pass it (then it returns
// context.DeadlineExceeded, as a real wait would).
func (c *vclock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	if c.real {
		c.mu.Unlock()
		return bindings.RealClock{}.Sleep(ctx, d)
	}
	defer c.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	c.sleeps = append(c.sleeps, d)
	if dl, ok := bindings.HookDeadline(ctx); ok {
		if left := dl.Sub(c.nowLocked()); left <= d {
			c.offset += max(left, 0)
			c.expireLocked()
			return context.DeadlineExceeded
		}
	}
	c.offset += d
	c.expireLocked()
	return nil
}

// module is loom.test.clock.
func (c *vclock) module(L *lua.LState) *lua.LTable {
	seconds := func(t time.Time) lua.LNumber { return lua.LNumber(float64(t.UnixNano()) / 1e9) }
	return L.SetFuncs(L.CreateTable(0, 6), map[string]lua.LGFunction{
		// clock.now(): virtual time in seconds since the epoch, as
		// loom.time.now() gives the plugin.
		"now": func(L *lua.LState) int {
			L.Push(seconds(c.Now()))
			return 1
		},
		// clock.advance(seconds): move virtual time forward.
		"advance": func(L *lua.LState) int {
			s := float64(L.CheckNumber(1))
			if s < 0 {
				L.ArgError(1, "the clock only moves forward: give a number of seconds >= 0")
			}
			c.mu.Lock()
			c.offset += time.Duration(s * float64(time.Second))
			c.expireLocked()
			c.mu.Unlock()
			L.Push(seconds(c.Now()))
			return 1
		},
		// clock.set(epoch_seconds): virtual time stands at that instant
		// (moving only with sleeps and advance) for the rest of the test.
		"set": func(L *lua.LState) int {
			s := float64(L.CheckNumber(1))
			t := time.Unix(0, int64(s*1e9))
			c.mu.Lock()
			c.fixed, c.offset = &t, 0
			c.mu.Unlock()
			return 0
		},
		// clock.sleeps(): the waits of loom.time.sleep and loom.http's
		// retries in this test, in seconds, in order.
		"sleeps": func(L *lua.LState) int {
			c.mu.Lock()
			t := L.CreateTable(len(c.sleeps), 0)
			for _, d := range c.sleeps {
				t.Append(lua.LNumber(d.Seconds()))
			}
			c.mu.Unlock()
			L.Push(t)
			return 1
		},
		// clock.slept(): the sum of clock.sleeps().
		"slept": func(L *lua.LState) int {
			c.mu.Lock()
			var sum time.Duration
			for _, d := range c.sleeps {
				sum += d
			}
			c.mu.Unlock()
			L.Push(lua.LNumber(sum.Seconds()))
			return 1
		},
		// clock.real(): the wall clock for the rest of this test (real
		// waits, for a test of real timing behaviour).
		"real": func(L *lua.LState) int {
			c.mu.Lock()
			c.real = true
			c.mu.Unlock()
			return 0
		},
	})
}
