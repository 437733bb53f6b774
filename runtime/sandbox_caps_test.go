package runtime_test

import (
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/runtime/luatest"
)

// TestTracebackCapped: a tail-call loop stopped by its deadline reports
// kind timeout with a traceback of at most 64 lines (gopher-lua used to
// build one line per tail call: gigabytes in one Go call), and
// debug.traceback is bounded the same way.
func TestTracebackCapped(t *testing.T) {
	t.Run("tail calls to the deadline", func(t *testing.T) {
		rt := boxRuntimeTimeout(t, `local function f(n) return f(n + 1) end; return f(1)`, nil, 300*time.Millisecond)
		res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
		if res.Status == 0 || res.Error["kind"] != "timeout" {
			t.Fatalf("status %d, error %v; want kind timeout", res.Status, res.Error)
		}
		if !strings.Contains(res.Stderr, "frames elided") || strings.Count(res.Stderr, "\n") > 70 {
			t.Fatalf("traceback not capped (%d bytes, %d lines):\n%.2000s", len(res.Stderr), strings.Count(res.Stderr, "\n"), res.Stderr)
		}
	})
	t.Run("debug.traceback", func(t *testing.T) {
		code := `
			local function tail(n) if n == 0 then return debug.traceback("tb") end return tail(n - 1) end
			local function deep(n) if n == 0 then return debug.traceback("tb", 2) end return 1 and deep(n - 1) end
			self.result.result.tail = tail(3000000)
			self.result.result.deep = deep(200)
			self.result.result.short = debug.traceback("short")`
		rt := boxRuntimeTimeout(t, code, nil, time.Minute)
		res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
		if res.Status != 0 {
			t.Fatalf("status %d: %s", res.Status, res.Message)
		}
		for _, k := range []string{"tail", "deep"} {
			tb, _ := res.Result[k].(string)
			lines := strings.Split(tb, "\n")
			// message, header, 32 head lines, the elision, 31 tail lines
			if len(lines) != 66 || !strings.Contains(tb, "frames elided ...") {
				t.Errorf("%s: %d lines, want 66 with an elision:\n%s", k, len(lines), tb)
			}
		}
		if tb, _ := res.Result["tail"].(string); !strings.Contains(tb, "... 29999") {
			t.Errorf("tail: the elision does not count the tail calls:\n%s", tb)
		}
		if tb, _ := res.Result["short"].(string); strings.Contains(tb, "elided") || !strings.Contains(tb, "box.lua:") {
			t.Errorf("short traceback:\n%s", tb)
		}
	})
}
