package runtime_test

import (
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// Lint's undefined-globals pass follows Lua's scopes: none of these
// reads is of an undefined global, and the two typos are found.
func TestLintGlobals(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "g", Family: "provider", Classname: "G", Files: map[string]string{
		"g.lua": `local loom = require("loom")
G = loom.Provider:extend("G")
local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end
counter = 0
function bump() counter = counter + 1 end
function G:create(input)
  for i = 1, 3 do bump() end
  for k, v in pairs(input.fields) do log.info("%s=%s", k, tostring(v)) end
  local t = { a = fact(3), [string.upper("b")] = #input }
  repeat local done = true until done
  local f = function(...) return select("#", ...) end
  self.result.result.n = f(1, 2) + helper()
  self.result.status = 0
end
function G:confirm(input) self.result.status = slef end
function G:delete(input) return jsno end
`,
		"lib/x.lua": `function helper() return 1 end`,
	}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	var got []string
	for _, e := range rt.Lint() {
		if strings.Contains(e.Message, "undefined global") {
			got = append(got, e.Location()+" "+e.Message)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], `g.lua:15`) || !strings.Contains(got[0], `"slef" (did you mean "self"?)`) ||
		!strings.Contains(got[1], `g.lua:16`) || !strings.Contains(got[1], `"jsno"`) {
		t.Fatalf("undefined globals:\n%s", strings.Join(got, "\n"))
	}
}
