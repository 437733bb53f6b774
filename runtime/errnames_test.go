package runtime_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// gopherError runs a chunk in a plain gopher-lua state (Loom's vendored
// copy) and returns its error message.
func gopherError(t *testing.T, name, src string) string {
	t.Helper()
	L := lua.NewState()
	defer L.Close()
	fn, err := L.Load(strings.NewReader(src), name)
	if err != nil {
		return "syntax: " + err.Error()
	}
	L.Push(fn)
	if err := L.PCall(0, 0, nil); err != nil {
		var ae *lua.ApiError
		if errors.As(err, &ae) {
			return ae.Object.String()
		}
		return err.Error()
	}
	return "(no error)"
}

// The examples, which need no lua5.1 to check: a runtime error
// names the global, field, local, upvalue or method it is about.
func TestErrorNames(t *testing.T) {
	for src, want := range map[string]string{
		`lable_for("x")`:                                 `t.lua:1: attempt to call global 'lable_for' (a nil value)`,
		"local t = {}\nreturn t.test.x":                  `t.lua:2: attempt to index field 'test' (a nil value)`,
		`local name; return "a" .. name`:                 `t.lua:1: attempt to concatenate local 'name' (a nil value)`,
		`local u; local function f() return u.x end f()`: `t.lua:1: attempt to index upvalue 'u' (a nil value)`,
		`local o = {}; o:m()`:                            `t.lua:1: attempt to call method 'm' (a nil value)`,
		`local n; n = n + 1`:                             `t.lua:1: attempt to perform arithmetic on local 'n' (a nil value)`,
		`pcall(nil); error(select(2, pcall(nil)), 0)`:    `attempt to call a nil value`,
		`local a, b; return a < b`:                       `t.lua:1: attempt to compare two nil values`,
	} {
		if got := gopherError(t, "t.lua", src); got != want {
			t.Errorf("%s\n got: %s\nwant: %s", src, got, want)
		}
	}
}

// TestErrorNamesMatchLua51 runs a corpus of failing chunks in real Lua 5.1
// and in Loom's gopher-lua: the messages must be the same, line and all.
// CI installs lua5.1 (.ci/run); elsewhere the test is skipped without it.
func TestErrorNamesMatchLua51(t *testing.T) {
	lua51, err := exec.LookPath("lua5.1")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("lua5.1 is not installed (apt-get install lua5.1)")
		}
		t.Skip("lua5.1 is not installed (apt-get install lua5.1)")
	}
	data, err := os.ReadFile("testdata/errnames/corpus.lua.txt")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	n := 0
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// A case is one line; "\n" in it separates the chunk's lines.
		src := strings.ReplaceAll(line, `\n`, "\n") + "\n"
		name := fmt.Sprintf("case%d.lua", i+1)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(lua51, name)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput()
		want := "(no error)"
		if first, _, _ := strings.Cut(string(out), "\n"); first != "" {
			want = strings.TrimPrefix(first, lua51+": ")
			want = strings.TrimPrefix(want, "lua5.1: ")
		}
		got := gopherError(t, name, src)
		if got != want {
			t.Errorf("case %d: %s\n  lua5.1: %s\n  loom:   %s", i+1, line, want, got)
		}
		n++
	}
	if n < 40 {
		t.Fatalf("only %d cases", n)
	}
}

// After pcall catches an error, a closure still reaches the locals of the
// functions that are still running (Lua 5.1 closes only the upvalues of
// the frames the error unwound; gopher-lua closed them all, so inc()
// below changed a copy and x stayed 0). loomd test relies on it: a fake's
// handler updates the test's locals after a hook raised.
func TestUpvaluesSurvivePcall(t *testing.T) {
	src := `local x, y, z = 0, 0, 0
local function inc() x = x + 1 end
pcall(function() error("e") end)
inc()
local function incy() y = y + 1 end
xpcall(function() local t = nil; return t.x end, function(e) return e end)
incy()
local fns = {}
for i = 1, 3 do
  local ok = pcall(function() local v = i; fns[i] = function() return v end; error("x") end)
end
local function incz() z = z + 1 end
local co = coroutine.create(function() local w = 5; incz(); error("in coroutine") end)
coroutine.resume(co)
incz()
error(table.concat({x, y, fns[1](), fns[2](), fns[3](), z}, ","), 0)
`
	if got := gopherError(t, "u.lua", src); got != "1,1,1,2,3,2" {
		t.Errorf("got %s, want 1,1,1,2,3,2 (what lua5.1 prints)", got)
	}
}
