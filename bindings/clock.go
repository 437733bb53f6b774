package bindings

import (
	"context"
	"time"
)

// Clock is where bindings read the time and wait: loom.time's now, sleep
// and remaining, and loom.http's retry back-off. Production uses
// RealClock; loomd test gives a virtual one, so a plugin's polling and
// retry loops run at once in tests while seeing the same times and
// deadlines they would see in production.
type Clock interface {
	// Now is the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends (then it returns ctx.Err()).
	// A virtual clock advances by d at once; when that would pass ctx's
	// deadline, it advances to the deadline and returns
	// context.DeadlineExceeded, as a real wait would have.
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Sleep implements Clock.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ClockOrReal returns c, or RealClock when c is nil.
func ClockOrReal(c Clock) Clock {
	if c == nil {
		return RealClock{}
	}
	return c
}

type clockDeadlineKey struct{}

// WithClockDeadline returns ctx carrying a hook's deadline in the Clock's
// time. loomd test runs hooks with their definition's deadline on its
// virtual clock, while ctx's own deadline bounds real time (--timeout):
// the two differ, and the bindings read this one.
func WithClockDeadline(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, clockDeadlineKey{}, t)
}

// HookDeadline is the running hook's deadline in the Clock's time: the one
// WithClockDeadline set, else ctx's own. loom.time.remaining and
// loom.http's "will a retry wait pass the deadline" read it.
func HookDeadline(ctx context.Context) (time.Time, bool) {
	if t, ok := ctx.Value(clockDeadlineKey{}).(time.Time); ok {
		return t, true
	}
	return ctx.Deadline()
}
