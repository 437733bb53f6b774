package runtime_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// panicBinding is a binding whose function panics, standing in for a bug
// in a Go binding.
type panicBinding struct{}

func (panicBinding) Spec() bindings.ModuleSpec { return bindings.ModuleSpec{Name: "boom"} }
func (panicBinding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	t := L.NewTable()
	t.RawSetString("now", L.NewFunction(func(L *lua.LState) int {
		var m map[string]int
		m["x"] = 1 // nil map write: a real Go panic
		return 0
	}))
	return t
}

// boxRuntime loads one provider "box" whose create hook runs code, with a
// short hook timeout so runaway loops end quickly.
func boxRuntime(t *testing.T, code string, logs *luatest.LogBuffer) *runtime.Runtime {
	return boxRuntimeTimeout(t, code, logs, 300*time.Millisecond)
}

// noDeadline, as boxRuntimeTimeout's timeout, leaves the hook the
// runtime's default deadline (10 minutes). A probe that a cap or the step
// budget must stop, or that must succeed, gets it: those counts do not
// depend on the machine's speed, but a deadline of a minute does (under
// -race on a loaded machine a 40M-step budget took over a minute, and the
// probe failed as a timeout). Only the probes the deadline is meant to
// stop get a short one.
const noDeadline time.Duration = 0

func boxRuntimeTimeout(t *testing.T, code string, logs *luatest.LogBuffer, timeout time.Duration) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "box", Family: "provider", Classname: "Box",
		Files: map[string]string{"box.lua": "Box = {}\nfunction Box:create(input)\n" + code + "\nend\n" +
			"function Box:confirm(input) self.result.result.ok = 'yes' end\n"}})
	opts := runtime.Options{PluginsDir: dir, Timeout: timeout,
		Bindings: bindings.NewRegistry(logb.New(), jsonb.New(), panicBinding{})}
	if logs != nil {
		opts.Logger = logs.Logger()
	}
	rt := luatest.NewRuntime(t, opts)
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			t.Fatalf("load error: %v", e)
		}
	}
	return rt
}

// TestSandboxEscapes runs each escape or denial-of-service probe as a
// CREATE hook, checks it fails with a clear message, and then checks the
// same runtime still runs a normal task correctly.
func TestSandboxEscapes(t *testing.T) {
	cases := []struct {
		name, code, want string
	}{
		{"os.execute", `os.execute("id")`, "execute"},
		{"io.open", `io.open("/etc/passwd")`, "io"},
		{"os.exit", `os.exit(1)`, "exit"},
		{"os.getenv", `return os.getenv("HOME")`, "getenv"},
		{"require traversal", `require("../../etc/passwd")`, "invalid module name"},
		{"require double dot", `require("a..b")`, "invalid module name"},
		{"require absent file", `require("etc.passwd")`, "not found"},
		{"getfenv", `return getfenv(print).os`, "getfenv"},
		{"setfenv", `setfenv(0, {})`, "setfenv"},
		{"debug.getupvalue", `debug.getupvalue(print, 1)`, "getupvalue"},
		{"debug.sethook", `debug.sethook()`, "sethook"},
		{"loadstring", `loadstring("return os")()`, "loadstring"},
		{"load", `load(function() return nil end)`, "load"},
		{"dofile", `dofile("/etc/passwd")`, "dofile"},
		{"string metatable", `setmetatable("", {__index = {}})`, "table expected"},
		{"string metatable locked", `local mt = getmetatable(""); if mt ~= "locked" then error("leaked") end; error("ok: locked")`, "ok: locked"},
		{"protected metatable", `local t = setmetatable({}, {__metatable = "no"}); setmetatable(t, {})`, "protected metatable"},
		{"infinite loop", `while true do end`, "timed out"},
		{"pcall-swallowing loop", `while true do pcall(function() while true do end end) end`, "timed out"},
		{"xpcall handler loop", `xpcall(function() error("x") end, function() while true do end end)`, "timed out"},
		{"loop in coroutine", `coroutine.wrap(function() while true do end end)()`, "timed out"},
		{"tail-call loop", `local function f() return f() end return f()`, "timed out"},
		{"stack overflow", `local function f() return 1 + f() end return f()`, "overflow"},
		{"string.rep bomb", `return ("x"):rep(2^31)`, "string limit"},
		{"string.rep via method", `local s = "ab"; return s.rep(s, 1e9)`, "string limit"},
		{"format width", `return string.format("%999999d", 1)`, "too long"},
		{"format %T", `return string.format("%T", 1)`, "invalid conversion"},
		{"concat doubling", `local s = "x"; for i = 1, 40 do s = s .. s end`, "string limit|timed out"},
		{"coroutine quota", `for i = 1, 1e5 do coroutine.create(function() end) end`, "coroutines"},
		{"unpack bomb", `local t = {} for i = 1, 1e6 do t[i] = i end return unpack(t)`, "unpack"},
		{"pattern backtracking bomb", `return string.find(("a"):rep(300), ("a-"):rep(3) .. "b")`, "pattern too complex|timed out"},
		{"gsub backtracking bomb", `return (("a"):rep(300)):gsub(("a*"):rep(4) .. "b", "")`, "pattern too complex|timed out"},
		{"collectgarbage", `collectgarbage()`, "collectgarbage"},
		{"newproxy", `newproxy(true)`, "newproxy"},
		{"string.dump", `string.dump(print)`, "dump"},
		{"module", `module("x")`, "module"},
		{"go panic in binding", `require("loom.boom").now()`, "internal error in a Go binding"},
		{"hostile __tostring", `error(setmetatable({}, {__tostring = function() while true do end end}))`, "without a message field"},
		{"cyclic result", `local t = {} t.self = t self.result.result.loop = t`, "cycle"},
		{"deep result", `local t = {} local c = t for i = 1, 1e4 do c.x = {} c = c.x end self.result.result.deep = t`, "deeper than"},
		{"status as table", `self.result.status = {code = 1}`, "status must be an integer"},
		{"gfind backtracking bomb", `for m in string.gfind(("a"):rep(300), ("a-"):rep(3) .. "b") do end`, "pattern too complex|timed out"},
		{"balance %b without quantifier", `return string.find(("("):rep(300000), "%b()")`, "pattern too complex|timed out"},
		{"frontier %f with a lazy run", `return string.find(("a"):rep(300000), "a-%f[b]")`, "pattern too complex|timed out"},
		{"find with init and plain=false", `return string.find(("a"):rep(300), ("a-"):rep(3) .. "b", 1, false)`, "pattern too complex|timed out"},
		{"format %d of nil", `self.result.result.providerid = string.format("%d", nil)`, "bad argument #2 to format (number expected, got nil)"},
		{"format %x of a table", `return string.format("%x", {})`, "number expected, got table"},
		{"format %s of nil", `return string.format("id %s", nil)`, "string expected, got nil"},
		{"format %s of a table", `return string.format("%s", {})`, "string expected, got table"},
		{"format %d of a word", `return string.format("%d", "abc")`, "number expected, got string"},
		{"format missing argument", `return ("%s %s"):format("a")`, "bad argument #3 to format (no value)"},
		{"format result over the cap, before building", `local s = ("x"):rep(9 * 1024 * 1024) return string.format("%s%s", s, s)`, "exceeds the"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// A probe the deadline is meant to stop gets 300 ms; the others
			// none, so a loaded machine (or -race) cannot turn their refusal
			// into a timeout.
			timeout := noDeadline
			if strings.Contains(tc.want, "timed out") {
				timeout = 300 * time.Millisecond
			}
			rt := boxRuntimeTimeout(t, tc.code, nil, timeout)
			start := time.Now()
			res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
			if res.Status == 0 {
				t.Fatalf("probe succeeded; want a failure mentioning %q; result %+v", tc.want, res)
			}
			// want may list alternatives: under -race the step budget can
			// outlast the 300 ms deadline, which then stops the match.
			matched := false
			for _, w := range strings.Split(tc.want, "|") {
				matched = matched || strings.Contains(res.Message, w)
			}
			if !matched {
				t.Fatalf("message %q does not mention %q", res.Message, tc.want)
			}
			t.Logf("blocked in %v: %s", time.Since(start).Round(time.Millisecond), res.Message)
			// The same runtime then runs a normal task correctly.
			ok := luatest.Run(t, rt, luatest.Task("CONFIRM", "box", nil))
			if ok.Status != 0 || ok.Result["ok"] != "yes" {
				t.Fatalf("normal task after the probe: %+v", ok)
			}
		})
	}
}

// TestSandboxCapsThatSucceed covers limits that must not break legitimate
// work: big concats, sparse writes, many small coroutines.
func TestSandboxCapsThatSucceed(t *testing.T) {
	code := `
		local lines = {}
		for i = 1, 100000 do lines[i] = "line " .. i end
		local s = table.concat(lines, "\n")
		local t = {}
		t[6e7] = 1 -- sparse write past the array cap goes to the hash part
		local n = 0
		for i = 1, 100 do coroutine.wrap(function() n = n + 1 end)() end
		self.result.result.len = #s
		self.result.result.sparse = t[6e7]
		self.result.result.co = n
		-- ordinary patterns on big inputs fit the pattern step budget
		local words = 0
		for w in s:gmatch("%a+") do words = words + 1 end
		local replaced, count = table.concat(lines, "\n", 1, 2000):gsub("line (%d+)", "L%1")
		local k, v = ("key = value"):match("^(%w+)%s*=%s*(%w+)$")
		self.result.result.words, self.result.result.gsubs = words, count
		self.result.result.kv = k .. "=" .. v
		self.result.result.found = s:find("line 99999", 1, true) ~= nil
		print("printed", "via log")
	`
	logs := &luatest.LogBuffer{}
	rt := boxRuntimeTimeout(t, code, logs, noDeadline)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatalf("status %d: %s", res.Status, res.Message)
	}
	if res.Result["sparse"] != float64(1) || res.Result["co"] != float64(100) || res.Result["len"].(float64) < 1e6 ||
		res.Result["words"] != float64(100000) || res.Result["gsubs"] != float64(2000) || res.Result["kv"] != "key=value" || res.Result["found"] != true {
		t.Fatalf("result %+v", res.Result)
	}
	if !strings.Contains(logs.String(), `printed\tvia log`) {
		t.Fatalf("print did not go to the log: %s", logs.String())
	}
}

// TestPluginsAreIsolated: plugin A tampering with string and _G does not
// reach plugin B.
func TestPluginsAreIsolated(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "a", Family: "provider", Classname: "A", Files: map[string]string{
		"a.lua": `A = {} function A:create() string.upper = function() return "pwned" end; _G.shared = "from a" end`}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "b", Family: "provider", Classname: "B", Files: map[string]string{
		"b.lua": `B = {} function B:create() self.result.result.up = ("x"):upper(); self.result.result.shared = tostring(shared) end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "a", nil)); r.Status != 0 {
		t.Fatal(r.Message)
	}
	r := luatest.Run(t, rt, luatest.Task("CREATE", "b", nil))
	if r.Result["up"] != "X" || r.Result["shared"] != "nil" {
		t.Fatalf("plugin b saw plugin a's changes: %+v", r.Result)
	}
}

// TestRequireSymlinkEscape: a symlinked .lua file pointing outside the
// plugin folder is refused at load time.
func TestRequireSymlinkEscape(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "evil.lua")
	luatest.WriteFile(t, outside, `return {secret = "outside"}`)
	folder := luatest.WritePlugin(t, dir, luatest.Plugin{Name: "s", Family: "provider", Classname: "S", Files: map[string]string{
		"s.lua": `S = {} function S:create() self.result.result.v = require("lib.evil").secret end`}})
	if err := os.MkdirAll(filepath.Join(folder, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(folder, "lib", "evil.lua")); err != nil {
		t.Fatal(err)
	}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	errs := rt.LoadErrors()
	if len(errs) == 0 || !strings.Contains(errs[0].Error(), "evil.lua") {
		t.Fatalf("want a load error naming evil.lua, got %v", errs)
	}
	if _, err := rt.Run(context.Background(), luatest.Task("CREATE", "s", nil)); err == nil {
		t.Fatal("the plugin with an escaping symlink was served")
	}
}

// TestSourceSizeCap: a 5 MiB source is refused with a clear load error.
func TestSourceSizeCap(t *testing.T) {
	dir := t.TempDir()
	big := "Big = {}\n" + strings.Repeat("-- padding padding padding padding\n", 5<<20/35)
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "big", Family: "provider", Classname: "Big", Files: map[string]string{"big.lua": big}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	errs := rt.LoadErrors()
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "limit") {
		t.Fatalf("want a size-cap load error, got %v", errs)
	}
}

// TestLogCap: a huge log message is truncated, not written whole.
func TestLogCap(t *testing.T) {
	logs := &luatest.LogBuffer{}
	rt := boxRuntimeTimeout(t, `for i = 1, 20 do log.info(("x"):rep(1e6)) end`, logs, noDeadline)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatal(res.Message)
	}
	if n := len(logs.String()); n > 20*(70<<10) {
		t.Fatalf("logged %d bytes; messages are not capped", n)
	}
	if !strings.Contains(logs.String(), "[truncated]") {
		t.Fatal("no truncation note")
	}
}

func TestHugeIDLosesPrecision(t *testing.T) {
	// Documented: Lua numbers are float64, so ids must be strings.
	rt := boxRuntime(t, `self.result.result.id = 9007199254740993`, nil)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if got := fmt.Sprint(int64(res.Result["id"].(float64))); got == "9007199254740993" {
		t.Fatalf("expected float64 rounding, got exact %s", got)
	}
}

// TestStringFormatLuaSemantics: what Lua 5.1 accepts still formats.
func TestStringFormatLuaSemantics(t *testing.T) {
	rt := boxRuntime(t, `self.result.result.out = string.format("%d|%5.2f|%s|%s|%q|%x", "42", 3.14159, 7, "s", "a\"b", 255)`, nil)
	res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
	if res.Status != 0 {
		t.Fatalf("format failed: %s", res.Message)
	}
	if got, want := res.Result["out"], `42| 3.14|7|s|"a\"b"|ff`; got != want {
		t.Fatalf("format = %q, want %q", got, want)
	}
}

// Sandbox limits and deadlines carry an error kind operators and plugins
// can branch on: "limit" for a refused builtin, "timeout" for a deadline.
func TestLimitAndTimeoutKinds(t *testing.T) {
	for _, tc := range []struct {
		code, kind string
		timeout    time.Duration
	}{
		// No deadline but the default: the step budget must trip,
		// however slow the machine.
		{`return string.find(("a"):rep(300), ("a-"):rep(3) .. "b")`, "limit", noDeadline},
		{`return ("x"):rep(1e9)`, "limit", noDeadline},
		{`while true do end`, "timeout", 300 * time.Millisecond},
	} {
		rt := boxRuntimeTimeout(t, tc.code, nil, tc.timeout)
		res := luatest.Run(t, rt, luatest.Task("CREATE", "box", nil))
		if res.Status == 0 || res.Error["kind"] != tc.kind {
			t.Errorf("%s: status %d, error %v; want kind %q", tc.code, res.Status, res.Error, tc.kind)
		}
	}
}
