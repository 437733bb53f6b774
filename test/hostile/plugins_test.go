package hostile

// The attack plugins: every class of issue 9's findings, sandbox escapes,
// and the hostile's own additions. Each states the secure outcome.

import (
	"testing"
	"time"
)

// Known-gap labels: the issue item whose fix a case waits for.
const (
	gapMemory   = "issue 9 item 1 (memory budget per hook)"
	gapDeadline = "issue 9 item 3 (deadlines, pattern guard, caps)"
	gapInput    = "issue 9 item 4 (bounded input, API timeouts)"
	gapFormat   = "issue 9 item 5 (format semantics)"
)

var (
	memoryKinds  = []string{"memory"}
	timeoutKinds = []string{"timeout"}
	limitKinds   = []string{"limit"}
	// cpuKinds: a guard may refuse a pathological pattern up front (limit)
	// or let the deadline stop it (timeout); both are secure.
	cpuKinds = []string{"timeout", "limit"}
)

// withinDeadline bounds a 1 s hook: the deadline must bite, with slack for
// a loaded 2-core machine (the target is 100 ms, measured in the
// report, not asserted).
const withinDeadline = 6 * time.Second

// memPlugin is a memory attack: a generous deadline so the budget, not
// the clock, stops it, and a 128 MiB limit to keep the suite cheap.
func memPlugin(body string) *plugin {
	return &plugin{body: body, timeout: "30s", memory: "128MiB"}
}

func memCase(name, expect, body string) hcase {
	return hcase{name: name, class: "memory", expect: expect, plugin: memPlugin(body),
		want: want{kinds: memoryKinds, msg: []string{"memory"}}}
}

// pluginCases are the attacks written as plugins.
func pluginCases() []hcase {
	bomb := `string.rep("a", 300000)`
	cases := []hcase{
		// Memory growth, every way Lua allocates (issue 9 item 1).
		memCase("mem-concat-table", "kind memory, limit named; daemon unaffected",
			`local s = string.rep("x", 1048576); local t = {}; for i = 1, 1e6 do t[#t + 1] = s .. i end`),
		{name: "mem-concat-doubling", class: "memory", expect: "kind limit: the .. operator refuses a result over the 16 MiB string cap before building it",
			// A budget well above the 16 MiB cap plus the doubling's garbage,
			// so the string cap (the defence under test) answers first even
			// when a loaded machine delays the collector.
			plugin: &plugin{body: `local s = "x"; while true do s = s .. s end`, timeout: "30s", memory: "512MiB"},
			want:   want{kinds: limitKinds, msg: []string{"string limit"}}},
		memCase("mem-tables", "kind memory",
			`local t = {}; for i = 1, 1e9 do t[i] = {i, i, i, i} end`),
		memCase("mem-closures", "kind memory",
			`local t = {}; for i = 1, 1e9 do local x = i; t[#t + 1] = function() return x end end`),
		memCase("mem-coroutines", "kind memory (each coroutine fills its own stack)",
			`local cos = {}
for i = 1, 250 do
  local co = coroutine.create(function()
    local function deep(n) if n == 0 then coroutine.yield() return 0 end local a, b, c, d, e, f, g, h = n, n, n, n, n, n, n, n return deep(n - 1) + a end
    deep(400)
  end)
  coroutine.resume(co)
  cos[#cos + 1] = co
  local t = {}; for j = 1, 20000 do t[j] = {j} end; cos[#cos + 1] = t
end
local t = {}; for i = 1, 1e9 do t[i] = {i} end`),
		memCase("mem-binding-strings", "kind memory (strings returned by loom.fs and loom.json)",
			`fs.write("big.txt", string.rep("y", 8388608))
local keep = {}
for i = 1, 1e6 do keep[#keep + 1] = fs.read("big.txt"); keep[#keep + 1] = json.encode({keep[#keep]}) end`),
		memCase("mem-json-decode", "kind memory (a 1.8 MB document, under the 1M-value cap, decoded 1000 times and kept)",
			`local doc = "[" .. string.rep("[1,2,3,4,5,6,7,8],", 100000) .. "0]"
local keep = {}
for i = 1, 1000 do keep[i] = json.decode(doc) end`),
		{name: "mem-default-budget", class: "memory", expect: "kind memory under the default 256 MiB budget (no limits.memory)",
			plugin: &plugin{timeout: "30s", body: `local t = {}; for i = 1, 1e9 do t[i] = string.rep("z", 1000) .. i end`},
			want:   want{kinds: memoryKinds, msg: []string{"256"}}},

		// Deadlines (issue 9 item 3).
		{name: "tailcall-to-deadline", class: "deadline", expect: "kind timeout within 100 ms of the 1 s deadline; traceback capped",
			plugin: &plugin{body: `local function f(n) return f(n + 1) end; return f(1)`},
			want: want{kinds: timeoutKinds, within: withinDeadline, check: func(t *testing.T, s *suite, r record) {
				if n := len(str(r.Result["stderr"])); n > 64<<10 {
					t.Errorf("traceback of %d bytes: want it capped (64 frames)", n)
				}
			}}},
		{name: "busy-loop", class: "deadline", expect: "kind timeout at the deadline",
			plugin: &plugin{body: `while true do end`},
			want:   want{kinds: timeoutKinds, within: withinDeadline}},
		{name: "pcall-swallows-deadline", class: "deadline", expect: "kind timeout: pcall cannot catch the deadline",
			plugin: &plugin{body: `while true do pcall(function() while true do end end) end`},
			want:   want{kinds: timeoutKinds, within: withinDeadline}},
		{name: "sleep-past-deadline", class: "deadline", expect: "kind timeout at the deadline",
			plugin: &plugin{body: `time.sleep(3600)`},
			want:   want{kinds: timeoutKinds, within: withinDeadline}},
		{name: "tostring-loops-forever", class: "deadline", expect: "fails at once or at the deadline: an error object whose __tostring never returns cannot hang the runtime",
			plugin: &plugin{body: `error(setmetatable({}, {__tostring = function() while true do end end}))`},
			want:   want{within: withinDeadline}},
		{name: "tostring-recurses", class: "error objects", expect: "fails with a message; recursion in __tostring is a Lua error",
			plugin: &plugin{body: `local mt = {}; mt.__tostring = function(e) return tostring(e) .. "x" end; error(setmetatable({}, mt))`},
			want:   want{within: withinDeadline}},
		{name: "deep-recursion", class: "stack", expect: "fails with stack overflow, a Lua error",
			plugin: &plugin{body: `local function f(n) return 1 + f(n + 1) end; f(1)`},
			want:   want{msg: []string{"stack overflow"}, within: withinDeadline}},

		// Pattern bombs (issue 9 item 3).
		{name: "pattern-backtracking", class: "pattern", expect: "kind limit or timeout, within the deadline",
			plugin: &plugin{body: `string.find(string.rep("a", 300), string.rep("a-", 3) .. "b")`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "pattern-gfind", class: "pattern", expect: "kind limit or timeout: gfind is guarded like gmatch",
			plugin: &plugin{body: `for m in string.gfind(string.rep("a", 300), string.rep("a-", 3) .. "b") do end`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "pattern-find-init-plain", class: "pattern", expect: "kind limit or timeout: extra find arguments do not skip the guard",
			plugin: &plugin{body: `string.find(string.rep("a", 300), string.rep("a-", 3) .. "b", 1, false)`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "pattern-balance", class: "pattern", expect: "kind limit or timeout: %b() is quadratic without a quantifier",
			plugin: &plugin{body: `string.find(string.rep("(", 300000), "%b()")`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "pattern-frontier", class: "pattern", expect: "kind limit or timeout: %f with a lazy run",
			plugin: &plugin{body: `string.find(` + bomb + `, "a-%f[b]")`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "gsub-300k", class: "pattern", expect: "kind limit or timeout; gsub linear in its input",
			plugin: &plugin{body: `local s = ` + bomb + `; s:gsub(".-b", "")`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},
		{name: "gmatch-storm", class: "pattern", expect: "kind limit or timeout",
			plugin: &plugin{body: `for m in (` + bomb + `):gmatch("a*a*a*a*b") do end`},
			want:   want{kinds: cpuKinds, within: withinDeadline}},

		// Output caps (issue 9 item 3): single calls that build huge strings.
		{name: "cap-string-rep", class: "caps", expect: "fails before allocating, naming the string limit",
			plugin: &plugin{body: `string.rep("x", 1e10)`},
			want:   want{msg: []string{"limit"}, within: withinDeadline}},
		{name: "cap-table-concat", class: "caps", expect: "fails at 16 MiB, naming the string limit",
			plugin: &plugin{body: `local s = string.rep("x", 1048576); local t = {}; for i = 1, 64 do t[i] = s end; table.concat(t)`},
			want:   want{msg: []string{"limit"}, within: withinDeadline}},
		{name: "cap-gsub-expansion", class: "caps", expect: "kind limit: a gsub result over the string cap fails before it is built",
			plugin: &plugin{body: `local s = string.rep("x", 1048576); s:gsub("x", string.rep("y", 1000))`},
			want:   want{kinds: limitKinds, within: withinDeadline}},
		{name: "cap-format-many-args", class: "caps", expect: "kind limit: string.format checks the cap while building",
			plugin: &plugin{body: `local s = string.rep("x", 15728640); local a = {}; for i = 1, 60 do a[i] = s end; string.format(string.rep("%s", 60), unpack(a))`},
			want:   want{kinds: limitKinds, within: withinDeadline}},
		{name: "cap-os-date", class: "caps", expect: "kind limit: os.date with a huge format",
			plugin: &plugin{body: `os.date(string.rep("%c", 8388608))`},
			want:   want{kinds: limitKinds, within: withinDeadline}},
		{name: "cap-log-attributes", class: "caps", expect: "one log.info call with a million attributes writes a bounded line (or fails with kind limit)", serial: true,
			plugin: &plugin{timeout: "10s", body: `local a = {}; local v = string.rep("v", 1000); for i = 1, 1e6 do a["k" .. i] = v end; log.info("attrs", a)`},
			want:   want{state: "any", check: logGrowthUnder(8 << 20)}},
		{name: "log-flood", class: "caps", expect: "a hook logging in a loop until its deadline writes a bounded volume", serial: true,
			plugin: &plugin{body: `local s = string.rep("f", 60000); while true do log.info(s) end`},
			want:   want{kinds: timeoutKinds, check: logGrowthUnder(64 << 20)}},
		{name: "unpack-bomb", class: "caps", expect: "fails: unpack refuses 1e8 values",
			plugin: &plugin{body: `unpack({}, 1, 1e8)`},
			want:   want{msg: []string{"limit"}, within: withinDeadline}},
		{name: "coroutine-storm", class: "caps", expect: "fails: more than 256 coroutines in one task",
			plugin: &plugin{body: `for i = 1, 1e6 do coroutine.wrap(function() end) end`},
			want:   want{msg: []string{"coroutines"}, within: withinDeadline}},
		{name: "sparse-array", class: "memory", expect: "succeeds quickly: huge indexes go to the hash part, no GB-sized array",
			plugin: &plugin{body: `local t = {}; for i = 1, 200 do t[i * 6e7] = i end; t[2^40] = 1; table.insert(t, 1); self.result.result.n = #t`},
			want:   want{state: "succeeded", within: withinDeadline}},

		// Lua semantics (issue 9 item 5).
		{name: "format-d-nil", class: "semantics", expect: "fails with bad argument #2 to 'format' (no \"&{}\" providerid)",
			plugin: &plugin{body: `self.result.result.providerid = string.format("%d", nil)`},
			want:   want{msg: []string{"bad argument"}, check: noResultKey("providerid")}},
		{name: "format-s-table", class: "semantics", expect: "fails with bad argument for %s of a table",
			plugin: &plugin{body: `self.result.result.providerid = string.format("%s", {})`},
			want:   want{msg: []string{"bad argument"}, check: noResultKey("providerid")}},
		{name: "log-d-nil", class: "semantics", expect: "log.info(\"%d\", nil) raises like string.format",
			plugin: &plugin{body: `log.info("%d", nil)`},
			want:   want{msg: []string{"bad argument"}}},

		// JSON paths (issue 9 item 4).
		{name: "json-decode-deep", class: "input", expect: "fails with a depth error, no Go stack overflow",
			plugin: &plugin{body: `json.decode(string.rep("[", 1048576))`},
			want:   want{within: withinDeadline}},
		{name: "json-encode-cycle", class: "input", expect: "fails with a cycle/depth error",
			plugin: &plugin{body: `local t = {}; t.self = t; json.encode(t)`},
			want:   want{within: withinDeadline}},

		// Results (hostile's own).
		{name: "result-cyclic", class: "results", expect: "fails: the result is invalid (cycle), the record says so",
			plugin: &plugin{body: `local t = {}; t.self = t; self.result.result.loop = t`},
			want:   want{msg: []string{"result"}}},
		{name: "result-huge", class: "results", expect: "a 15 MiB result is stored (object store) or refused with a clear message; the record stays readable",
			plugin: &plugin{timeout: "10s", body: `self.result.result.big = string.rep("r", 15728640)`},
			want:   want{state: "any"}},
		{name: "stdout-huge", class: "results", expect: "a 15 MiB stdout is stored or refused; the record stays readable",
			plugin: &plugin{timeout: "10s", body: `self.result.stdout = string.rep("o", 15728640)`},
			want:   want{state: "any"}},
		{name: "result-many-keys", class: "results", expect: "a result with 500,000 keys is stored or refused, bounded",
			plugin: &plugin{timeout: "10s", body: `for i = 1, 500000 do self.result.result["k" .. i] = i end`},
			want:   want{state: "any"}},
		{name: "result-binary", class: "results", expect: "succeeds; invalid UTF-8 is carried as valid JSON",
			plugin: &plugin{body: `self.result.stdout = "\255\254\0\1"; self.result.result.bin = "\192\128"`},
			want:   want{state: "succeeded"}},
		{name: "result-bad-status", class: "results", expect: "fails: status must be an integer",
			plugin: &plugin{body: `self.result.status = "pwned"`},
			want:   want{msg: []string{"status"}}},
		{name: "error-cyclic-table", class: "error objects", expect: "fails; the cyclic error table is reported, not looped over",
			plugin: &plugin{body: `local e = {kind = "x", message = "cyclic"}; e.self = e; error(e)`},
			want:   want{within: withinDeadline}},
		{name: "error-nil", class: "error objects", expect: "fails with a message",
			plugin: &plugin{body: `error(nil)`},
			want:   want{}},

		// More of the hostile's own.
		{name: "sort-inconsistent-comparator", class: "builtins", expect: "ends quickly (sorted or an invalid order function error), no Go panic",
			plugin: &plugin{body: `local t = {}; for i = 1, 100000 do t[i] = i end; table.sort(t, function(a, b) return true end)`},
			want:   want{state: "any", within: withinDeadline}},
		{name: "sort-slow-comparator", class: "deadline", expect: "kind timeout: a comparator that never returns cannot outlive the deadline",
			plugin: &plugin{body: `local t = {3, 2, 1}; table.sort(t, function(a, b) while true do end end)`},
			want:   want{kinds: timeoutKinds, within: withinDeadline}},
		{name: "string-byte-unpack", class: "caps", expect: "kind limit within the deadline: string.byte of a 16 MB string cannot push 16M values",
			plugin: &plugin{body: `local s = string.rep("b", 16000000); local n = select("#", s:byte(1, -1)); self.result.result.n = n`},
			want:   want{kinds: limitKinds, within: withinDeadline}},
		{name: "error-huge-message", class: "error objects", expect: "fails once, the 15 MB message cut; the record is stored",
			plugin: &plugin{timeout: "10s", body: `error(string.rep("e", 15000000))`},
			want:   want{}},
		{name: "result-nan-status", class: "results", expect: "fails: a NaN or infinite status is not an integer",
			plugin: &plugin{body: `self.result.status = 0/0`},
			want:   want{msg: []string{"status"}}},
		{name: "result-boolean-key", class: "results", expect: "fails: result keys must be strings",
			plugin: &plugin{body: `self.result.result[true] = 1`},
			want:   want{msg: []string{"result"}}},
		{name: "yield-from-hook", class: "builtins", expect: "fails: a hook cannot yield the VM's main thread",
			plugin: &plugin{body: `coroutine.yield(1)`},
			want:   want{within: withinDeadline}},
		{name: "json-encode-sparse", class: "input", expect: "a sparse array encodes as an object or fails; bounded either way",
			plugin: &plugin{body: `local t = {}; t[1] = 1; t[2^40] = 2; self.result.result.s = #json.encode(t)`},
			want:   want{state: "any", within: withinDeadline}},
		{name: "http-daemon-api", class: "trust", expect: "fails with kind permission: a plugin without permissions.http cannot call loomd's own API to read other tasks",
			plugin: &plugin{body: `self.result.result.tasks = require("loom.http").get(self.task.config.api .. "/v1/tasks", {timeout = 1}).body`},
			want:   want{kinds: []string{"permission"}, within: withinDeadline}},
		{name: "http-unix-socket", class: "trust", expect: "fails with kind permission: a plugin without permissions.http reaches no unix socket (docker.sock)",
			plugin: &plugin{body: `self.result.result.d = require("loom.http").get("http://docker/containers/json", {unix_socket = "/var/run/docker.sock", timeout = 1}).body`},
			want:   want{kinds: []string{"permission"}, within: withinDeadline}},

		// Sandbox escapes (hostile's own): each must fail, and nothing from
		// outside the sandbox (the canary file) may reach the record.
		escape("escape-io", `return io.open(CANARY):read("*a")`),
		escape("escape-os-execute", `return os.execute("cat " .. CANARY)`),
		escape("escape-os-getenv", `return os.getenv("HOME")`),
		escape("escape-os-exit", `os.exit(3)`),
		escape("escape-debug", `return debug.getregistry()`),
		escape("escape-load", `return load("return 1")()`),
		escape("escape-loadstring", `return loadstring("return 1")()`),
		escape("escape-dofile", `return dofile(CANARY)`),
		escape("escape-getfenv", `return getfenv(0)`),
		escape("escape-string-metatable", `getmetatable("").__index = {upper = function() return "pwned" end}; return ("x"):upper()`),
		escape("escape-setmetatable-string", `setmetatable("", {__index = {}}); return true`),
		escape("escape-require-os", `return require("os").execute("true")`),
		escape("escape-require-traversal", `return require("../../evil")`),
		escape("escape-require-absolute", `return require(ROOT .. "/evil")`),
		escape("escape-fs-read-outside", `return fs.read(CANARY)`),
		escape("escape-fs-read-traversal", `return fs.read("../../../../canary.txt")`),
		escape("escape-package", `return package.loaders`),
		escape("escape-collectgarbage", `return collectgarbage("count")`),
	}
	return cases
}

// escape is a sandbox escape attempt: body runs with CANARY (the canary
// file's path) and ROOT (the suite dir) as globals; whatever it returns
// goes to the result. It must fail, and the canary must not leak.
func escape(name, body string) hcase {
	return hcase{name: name, attack: "`" + body + "`", class: "sandbox escape", expect: "fails: the function is not in the sandbox or the path is refused; nothing from outside leaks",
		plugin: &plugin{body: `local v = (function() ` + body + ` end)(); self.result.result.escaped = tostring(v)`},
		want: want{within: withinDeadline, check: func(t *testing.T, s *suite, r record) {
			if res, _ := r.Result["result"].(map[string]any); res != nil && res["escaped"] != nil {
				t.Errorf("the escape returned %v", res["escaped"])
			}
		}}}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// noResultKey checks the plugin's result map does not hold key: a failed
// format must not produce a value.
func noResultKey(key string) func(*testing.T, *suite, record) {
	return func(t *testing.T, _ *suite, r record) {
		if res, _ := r.Result["result"].(map[string]any); res != nil && res[key] != nil {
			t.Errorf("result.%s = %v: the bad format produced a value", key, res[key])
		}
	}
}

// logGrowthUnder checks the daemon log grew by less than n bytes while the
// (serial) case ran. It reads the size the case recorded before its task.
func logGrowthUnder(n int64) func(*testing.T, *suite, record) {
	return func(t *testing.T, s *suite, r record) {
		if grown := s.d.logSize() - s.logMark(); grown > n {
			t.Errorf("the daemon log grew by %d MiB: want under %d MiB", grown>>20, n>>20)
		}
	}
}
