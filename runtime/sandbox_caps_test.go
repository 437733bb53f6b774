package runtime_test

import (
	"os"
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
		rt := boxRuntimeTimeout(t, code, nil, noDeadline)
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

// TestPatternsMatchLua51: the sandbox's find, match, gmatch and gsub (a
// port of Lua 5.1's matcher) give PUC Lua 5.1's results on
// testdata/patterns.lua; testdata/patterns.out is lua5.1's output.
func TestPatternsMatchLua51(t *testing.T) {
	script, err := os.ReadFile("testdata/patterns.lua")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("testdata/patterns.out")
	if err != nil {
		t.Fatal(err)
	}
	rt := boxRuntimeTimeout(t, "self.result.result.out = (function()\n"+string(script)+"\nend)()", nil, noDeadline)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatalf("status %d: %s", res.Status, res.Message)
	}
	got := strings.Split(res.Result["out"].(string), "\n")
	wantLines := strings.Split(strings.TrimRight(string(want), "\n"), "\n")
	for i := 0; i < max(len(got), len(wantLines)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
		}
	}
}

// TestCapsFailFast: each builtin refuses an oversized result with kind
// limit before building it. The deadline is a minute, so a kind timeout
// would mean the cap did not act.
func TestCapsFailFast(t *testing.T) {
	for _, tc := range []struct{ name, code, msg string }{
		{"gsub expansion", `local s = string.rep("x", 1048576); s:gsub("x", string.rep("y", 1000))`, "string.gsub: the result exceeds"},
		{"gsub function expansion", `local s = string.rep("x", 1048576); local y = string.rep("y", 100); s:gsub("x", function() return y end)`, "string.gsub: the result exceeds"},
		{"gsub table expansion", `local s = string.rep("x", 1048576); s:gsub("x", {x = string.rep("y", 100)})`, "string.gsub: the result exceeds"},
		{"gsub backtracking", `local s = string.rep("a", 300000); s:gsub(".-b", "")`, "string.gsub: pattern too complex"},
		{"gmatch storm", `for m in string.rep("a", 300000):gmatch("a*a*a*a*b") do end`, "string.gmatch: pattern too complex"},
		{"match nesting", `return string.rep("a", 500):match(string.rep("a?", 500))`, "nested more than"},
		{"string.byte of 16 MB", `local s = string.rep("b", 16000000); return select("#", s:byte(1, -1))`, "string.byte: 16000000 values"},
		{"os.date huge format", `return os.date(string.rep("%c", 8388608))`, "os.date: a format of"},
		{"unpack", `return unpack({}, 1, 1e8)`, "unpack: 100000000 values"},
		{"string.format", `local s = string.rep("x", 9 * 1024 * 1024); return string.format("%s%s", s, s)`, "string.format: result exceeds"},
		{"coroutines", `for i = 1, 1e5 do coroutine.wrap(function() end) end`, "more than 256 coroutines"},
		{"concat doubling", `local s = "x"; while true do s = s .. s end`, "string concatenation (..): a result of 33554432 bytes"},
		{"concat of many", `local s = string.rep("x", 6000000); return s .. s .. s`, "a result of 18000000 bytes"},
		{"string.rep", `return string.rep("x", 1e10)`, "string.rep: a result of"},
		{"table.concat", `local s = string.rep("x", 1048576); local t = {}; for i = 1, 64 do t[i] = s end; return table.concat(t)`, "table.concat: result exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := boxRuntimeTimeout(t, tc.code, nil, noDeadline)
			res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
			if res.Status == 0 || res.Error["kind"] != "limit" || !strings.Contains(res.Message, tc.msg) {
				t.Fatalf("status %d, error %v, message %q; want kind limit and %q", res.Status, res.Error, res.Message, tc.msg)
			}
		})
	}
}

// TestPatternsOnBigInputs: linear pattern work over big subjects fits the
// budget (gopher-lua's gsub was quadratic: 68 s for 300 KB).
func TestPatternsOnBigInputs(t *testing.T) {
	code := `
		local s = string.rep("word ", 600000) -- 3 MB
		local r, n = s:gsub("%s+", "_")
		local words = 0
		for w in s:gmatch("%a+") do words = words + 1 end
		local trimmed = ("  " .. s .. "  "):match("^%s*(.-)%s*$")
		self.result.result.n, self.result.result.len, self.result.result.words = n, #r, words
		self.result.result.trimmed = #trimmed
		self.result.result.last = select(2, s:find(".*d"))`
	rt := boxRuntimeTimeout(t, code, nil, noDeadline)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatalf("status %d: %s", res.Status, res.Message)
	}
	if res.Result["n"] != float64(600000) || res.Result["len"] != float64(3000000) || res.Result["words"] != float64(600000) ||
		res.Result["trimmed"] != float64(2999999) || res.Result["last"] != float64(2999999) {
		t.Fatalf("result %+v", res.Result)
	}
}

// TestBuiltinsLikeLua51: the sandbox's own string.byte, os.date and
// table.sort keep Lua 5.1's results.
func TestBuiltinsLikeLua51(t *testing.T) {
	code := `
		local r = self.result.result
		r.b1 = table.concat({("hello"):byte(1, -1)}, ",")
		r.b2 = table.concat({("hello"):byte(-2)}, ",")
		r.b3 = select("#", ("hello"):byte(4, 2))
		r.b4 = table.concat({("hello"):byte(0, 2)}, ",")
		r.b5 = table.concat({("hello"):byte(3, 100)}, ",")
		r.b6 = ("A"):byte()
		r.d1 = os.date("!%Y-%m-%d %H:%M:%S", 86400)
		r.d2 = os.date("!*t", 0).year
		local t = {5, 3, 9, 1, 7}
		table.sort(t)
		r.s1 = table.concat(t, ",")
		table.sort(t, function(a, b) return a > b end)
		r.s2 = table.concat(t, ",")
		local words = {"pear", "apple", "fig"}
		table.sort(words)
		r.s3 = table.concat(words, ",")
		r.s4 = pcall(table.sort, {1, "x", 2})
		local big = {}
		for i = 1, 200000 do big[i] = (i * 7919) % 200000 end
		table.sort(big)
		local ok = true
		for i = 2, #big do ok = ok and big[i - 1] <= big[i] end
		r.s5 = ok`
	rt := boxRuntimeTimeout(t, code, nil, noDeadline)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatalf("status %d: %s", res.Status, res.Message)
	}
	want := map[string]any{"b1": "104,101,108,108,111", "b2": "108", "b3": float64(0), "b4": "104,101", "b5": "108,108,111",
		"b6": float64(65), "d1": "1970-01-02 00:00:00", "d2": float64(1970), "s1": "1,3,5,7,9", "s2": "9,7,5,3,1",
		"s3": "apple,fig,pear", "s4": false, "s5": true}
	for k, w := range want {
		if res.Result[k] != w {
			t.Errorf("%s = %v, want %v", k, res.Result[k], w)
		}
	}
}

// TestSortStopsAtDeadline: a comparator-free sort of a big table is one
// Go call; it still ends at the hook's deadline, with kind timeout.
func TestSortStopsAtDeadline(t *testing.T) {
	code := `local t = {}; for i = 1, 1000000 do t[i] = (i * 7919) % 1000000 end; while true do table.sort(t); table.sort(t, function(a, b) return a > b end) end`
	rt := boxRuntimeTimeout(t, code, nil, 2*time.Second)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status == 0 || res.Error["kind"] != "timeout" {
		t.Fatalf("status %d, error %v; want kind timeout", res.Status, res.Error)
	}
}
