// Package time is the loom.time binding: waiting and reading the clock
// from a plugin without burning CPU or outliving the hook.
//
// The sandbox has os.time (whole seconds) and os.clock (CPU time), but no
// way to wait. A provider that polls a cloud API ("is the VM up yet?")
// needs one, and a busy loop would pin a core for minutes. time.sleep
// blocks the VM's goroutine on a timer and wakes early when the hook's
// deadline passes or the task is cancelled, so a sleeping plugin never
// holds a task past its timeout.
//
// From Lua:
//
//	local time = require("loom.time")
//	while not ready() do
//	  if (time.remaining() or math.huge) < 10 then error("gave up") end
//	  time.sleep(5)
//	end
//
// The package is named time like the module; it imports the standard
// library's time as stdtime.
package time

import (
	"context"
	"errors"
	"math"
	stdtime "time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// maxSleep bounds one sleep; a longer wait is a plugin bug (hook
// deadlines are minutes, not days).
const maxSleep = 24 * stdtime.Hour

// Binding is the loom.time module. It holds no state but its clock.
type Binding struct{ clock bindings.Clock }

// New returns the time binding on the wall clock.
func New() *Binding { return &Binding{clock: bindings.RealClock{}} }

// NewWithClock returns the time binding on clock c (loomd test gives a
// virtual one); nil means the wall clock.
func NewWithClock(c bindings.Clock) *Binding { return &Binding{clock: bindings.ClockOrReal(c)} }

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	return bindings.ModuleSpec{
		Name: "time",
		Doc:  "Waiting and the wall clock. Waits honour the hook's deadline and cancellation.",
		Funcs: []bindings.FuncSpec{
			{Name: "sleep", Params: []string{"duration number|string"},
				Doc: "Blocks for duration: seconds as a number (0.5) or a Go duration string (\"1m30s\"). " +
					"Raises a \"timeout\" error when the hook's deadline passes or the task is cancelled first; " +
					"a \"config\" error for a negative, invalid or over-24h duration."},
			{Name: "now", Returns: []string{"number"},
				Doc: "The wall clock in seconds since the Unix epoch, with sub-second precision (os.time has whole seconds)."},
			{Name: "remaining", Returns: []string{"number|nil"},
				Doc: "Seconds left before the hook's deadline, never negative; nil when the hook has none (the REPL)."},
		},
	}
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	return L.SetFuncs(L.CreateTable(0, 3), map[string]lua.LGFunction{
		"sleep":     func(L *lua.LState) int { return sleep(L, h, b.clock) },
		"now":       func(L *lua.LState) int { return now(L, b.clock) },
		"remaining": func(L *lua.LState) int { return remaining(L, h, b.clock) },
	})
}

func sleep(L *lua.LState, h bindings.Host, c bindings.Clock) int {
	d := duration(L, 1)
	if d == 0 {
		return 0
	}
	if err := c.Sleep(h.Context(), d); err != nil {
		what := "the hook deadline passed"
		if errors.Is(err, context.Canceled) {
			what = "the task was cancelled"
		}
		e := bindings.Errorf("timeout", "time.sleep(%s): %s", d, what)
		e.Fields = map[string]any{"duration": d.Seconds()}
		bindings.Raise(L, e)
	}
	return 0
}

// duration reads argument n as seconds or a Go duration string.
func duration(L *lua.LState, n int) stdtime.Duration {
	var d stdtime.Duration
	switch v := L.Get(n).(type) {
	case lua.LNumber:
		f := float64(v)
		if math.IsNaN(f) || f < 0 || f > maxSleep.Seconds() {
			bindings.Raise(L, bindings.Errorf("config", "time.sleep: duration must be between 0 and %v seconds, got %v", maxSleep.Seconds(), f))
		}
		d = stdtime.Duration(f * float64(stdtime.Second))
	case lua.LString:
		var err error
		d, err = stdtime.ParseDuration(string(v))
		if err != nil || d < 0 || d > maxSleep {
			bindings.Raise(L, bindings.Errorf("config", "time.sleep: %q is not a duration between 0 and 24h such as \"1.5s\" or \"2m\"", string(v)))
		}
	default:
		bindings.Raise(L, bindings.Errorf("config", "time.sleep: duration must be seconds (a number) or a string such as \"2m\", got %s", v.Type()))
	}
	return d
}

func now(L *lua.LState, c bindings.Clock) int {
	L.Push(lua.LNumber(float64(c.Now().UnixNano()) / 1e9))
	return 1
}

func remaining(L *lua.LState, h bindings.Host, c bindings.Clock) int {
	dl, ok := bindings.HookDeadline(h.Context())
	if !ok {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(lua.LNumber(max(dl.Sub(c.Now()), 0).Seconds()))
	return 1
}
