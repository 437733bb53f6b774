package runtime_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/yuin/gopher-lua/parse"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// UnusedLocals follows Lua's scopes: each reported name is never read,
// and every other local is (shadowing, upvalues, repeat conditions,
// recursion, method bodies, _-prefixed names left alone).
func TestUnusedLocals(t *testing.T) {
	src := `local json = require("loom.json")
local unused, used = 1, 2
local function helper() return used end
local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end
local _ignored = 5
local setonly
setonly = 6
for i = 1, 3 do print(fact(3)) end
for k, v in pairs({}) do print(k) end
for _, v in ipairs({}) do print(v) end
local x = 1
local x = x + 1
repeat local done = true until done
local up = 0
local function bump() up = up + 1 end
bump()
function T:m(input) local y = self.z; return y end
do local inner = 1 end
return x
`
	chunk, err := parse.Parse(strings.NewReader(src), "u.lua")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, u := range runtime.UnusedLocals(chunk) {
		got = append(got, u.Name+"@"+strconv.Itoa(u.Line))
	}
	want := "json@1 unused@2 helper@3 setonly@6 i@8 v@9 inner@18"
	if strings.Join(got, " ") != want {
		t.Errorf("got  %s\nwant %s", strings.Join(got, " "), want)
	}
}

// plugins check (Lint) reports them as warnings with file and line.
func TestLintLocals(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "l", Family: "provider", Classname: "L", Files: map[string]string{
		"l.lua": "local loom = require(\"loom\")\nL = loom.Provider:extend(\"L\")\nlocal spare = 1\nfunction L:create(input) self.result.status = 0 end\n",
	}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	var got []string
	for _, e := range rt.Lint() {
		if strings.Contains(e.Message, "unused local") {
			got = append(got, e.Location()+" "+e.Message)
			if !e.Warning {
				t.Errorf("not a warning: %v", e)
			}
		}
	}
	if len(got) != 1 || !strings.Contains(got[0], `l.lua:3`) || !strings.Contains(got[0], `unused local "spare"`) {
		t.Fatalf("unused locals:\n%s", strings.Join(got, "\n"))
	}
}
