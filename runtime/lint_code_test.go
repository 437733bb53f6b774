package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const lintCodeSrc = `local loom = require("loom")
local http = require("loom.http")
local ssh = require("loom.ssh")
G = loom.Provider:extend("G")
FogG = G
counter = 0
local x = 1
function G:create(input)
  lastid = input.providerid
  counter = counter + 1
  local x = 2
  local resp = http.request("GET", "https://api.example.com/", { timout = 30, tls = { server_nme = "x" } })
  local conn = ssh.connect({ host = "h", user = "u", pasword = "p" })
  conn:exec("uptime", { timout = 5, check = true })
  self.result.status = x + resp.status
end
function G:confirm(input)
  error("not yet")
  self.result.status = 0
end
function G:delete(input)
  while true do
    http.get("https://api.example.com/")
  end
  self.result.status = 0
end
`

func lintCode(t *testing.T, strict bool) []string {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "g", Family: "provider", Classname: "G", Files: map[string]string{"g.lua": lintCodeSrc}})
	reg := std.New(std.Options{})
	t.Cleanup(func() { reg.Close() })
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Bindings: reg})
	var got []string
	for _, e := range rt.LintWith(runtime.LintOptions{Strict: strict}) {
		if strings.Contains(e.Message, "does not define hook") || strings.Contains(e.Message, "unused local") {
			continue
		}
		sev := "error"
		if e.Warning {
			sev = "warning"
		}
		got = append(got, sev+" "+filepath.Base(e.Location())+" "+e.Message)
	}
	return got
}

// plugins check finds globals written by mistake (a forgotten local) and
// unknown keys in the option tables given to loom.http and loom.ssh,
// with a "did you mean"; with --strict, shadowing and unreachable code.
func TestLintCode(t *testing.T) {
	got := strings.Join(lintCode(t, false), "\n")
	for _, want := range []string{
		`warning g.lua:6 "counter" is set as a global at load time: did you mean "local counter"? Only the entry table (G) needs to be global`,
		`error g.lua:9 global "lastid" is set inside a function: did you mean "local lastid"?`,
		`warning g.lua:10 global "counter" (set at load time, line 6) is changed inside a function`,
		`error g.lua:12 unknown option "timout" in http.request's options (did you mean "timeout"?)`,
		`error g.lua:12 unknown option "tls.server_nme" in http.request's options (did you mean "server_name"?)`,
		`error g.lua:13 unknown option "pasword" in ssh.connect's options (did you mean "password"?)`,
		`error g.lua:14 unknown option "timout" in conn:exec's options (did you mean "timeout"?)`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lint lacks\n  %s\ngot:\n%s", want, got)
		}
	}
	for _, bad := range []string{"FogG", "shadows", "unreachable", `"check"`} {
		if strings.Contains(got, bad) {
			t.Errorf("lint without --strict reports %q:\n%s", bad, got)
		}
	}
	strict := strings.Join(lintCode(t, true), "\n")
	for _, want := range []string{
		`warning g.lua:11 local "x" shadows the local "x" of line 7`,
		`warning g.lua:19 unreachable code: error(...) at line 18 never lets it run`,
		`warning g.lua:25 unreachable code: a while true loop with no break at line 22 never lets it run`,
	} {
		if !strings.Contains(strict, want) {
			t.Errorf("lint --strict lacks\n  %s\ngot:\n%s", want, strict)
		}
	}
}
