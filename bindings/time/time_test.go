package time_test

import (
	"context"
	"testing"
	stdtime "time"

	"github.com/loomrt/loom/bindings/bindingstest"
	timeb "github.com/loomrt/loom/bindings/time"
)

func TestSleepReturnsAfterTheDuration(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, timeb.New())
	start := stdtime.Now()
	bindingstest.Run(t, L, `
		local time = require("loom.time")
		time.sleep(0.02)
		time.sleep("10ms")
		time.sleep(0)
	`)
	if got := stdtime.Since(start); got < 30*stdtime.Millisecond {
		t.Fatalf("slept %v, want at least 30ms", got)
	}
}

func TestSleepStopsAtTheHookDeadline(t *testing.T) {
	h := bindingstest.NewHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*stdtime.Millisecond)
	defer cancel()
	h.Ctx = ctx
	L := bindingstest.NewState(t, h, timeb.New())
	bindingstest.Run(t, L, `
		local time = require("loom.time")
		local ok, err = pcall(time.sleep, 3600)
		assert(not ok, "sleep outlived the deadline")
		assert(err.kind == "timeout", "kind " .. tostring(err.kind))
		assert(tostring(err):find("deadline"), tostring(err))
	`)
}

func TestSleepStopsWhenCancelled(t *testing.T) {
	h := bindingstest.NewHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.Ctx = ctx
	go func() { stdtime.Sleep(10 * stdtime.Millisecond); cancel() }()
	L := bindingstest.NewState(t, h, timeb.New())
	bindingstest.Run(t, L, `
		local ok, err = pcall(require("loom.time").sleep, "1h")
		assert(not ok and err.kind == "timeout" and tostring(err):find("cancelled"), tostring(err))
	`)
}

func TestSleepRejectsBadDurations(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, timeb.New())
	for _, arg := range []string{`-1`, `"soon"`, `"-2s"`, `{}`, `0/0`, `86401`} {
		t.Run(arg, func(t *testing.T) {
			bindingstest.Run(t, L, `
				local ok, err = pcall(require("loom.time").sleep, `+arg+`)
				assert(not ok and err.kind == "config" and tostring(err):find("time.sleep", 1, true), tostring(err))
			`)
		})
	}
}

func TestNowAndRemaining(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, timeb.New())
	bindingstest.Run(t, L, `
		local time = require("loom.time")
		local t = time.now()
		assert(math.abs(t - os.time()) < 2, "now " .. t)
		assert(time.remaining() == nil, "remaining without a deadline")
	`)
	ctx, cancel := context.WithTimeout(context.Background(), stdtime.Minute)
	defer cancel()
	h.Ctx = ctx
	bindingstest.Run(t, L, `
		local r = require("loom.time").remaining()
		assert(r > 50 and r <= 60, "remaining " .. tostring(r))
	`)
}
