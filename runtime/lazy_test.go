package runtime_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// TestLazyNodes: config.nodes is decoded only when read, and a hook cannot
// tell: indexing, pairs, next, rawget, json.encode, getmetatable and
// setmetatable all see it as if it had been decoded with the task; a
// sensitive field inside it is still redacted.
func TestLazyNodes(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "lz", Family: "provider", Classname: "Lz",
		Files: map[string]string{"lz.lua": `local json = require("loom.json")
Lz = {}
function Lz:create(input)
  local cfg = self.task.config
  local r = self.result.result
  local how = cfg.how
  if how == "index" then
    r.got = cfg.nodes.n2.hostname
  elseif how == "pairs" then
    for k, v in pairs(cfg) do if k == "nodes" then r.got = v.n2.hostname end end
  elseif how == "next" then
    local k, v = next(cfg, nil)
    while k ~= nil and k ~= "nodes" do k, v = next(cfg, k) end
    r.got = v and v.n2.hostname
  elseif how == "rawget" then
    r.got = rawget(cfg, "nodes").n2.hostname
  elseif how == "json" then
    r.got = json.decode(json.encode(cfg)).nodes.n2.hostname
  elseif how == "meta" then
    r.got = tostring(getmetatable(cfg))
  elseif how == "setmeta" then
    setmetatable(cfg, {__index = function() return "dflt" end})
    r.got = rawget(cfg, "nodes").n2.hostname .. " " .. cfg.missing
  elseif how == "assign" then
    cfg.nodes = {n2 = {hostname = "mine"}}
    for k, v in pairs(cfg) do if k == "nodes" then r.got = v.n2.hostname end end
  elseif how == "result" then
    r.copy = cfg
  elseif how == "secret" then
    self.result.stdout = "key=" .. cfg.nodes.n1.api_key
  else
    r.got = "untouched"
  end
end`},
		Extra: map[string]any{"parameters": map[string]any{"admin": map[string]any{"fields": map[string]any{
			"api_key": map[string]any{"type": "password", "sensitive": true}}}}}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	const secret = "n0de-s3cr3t-value"
	nodes := map[string]any{
		"n1": map[string]any{"hostname": "a.example.com", "api_key": secret},
		"n2": map[string]any{"hostname": "b.example.com", "ipaddresses": map[string]any{"access_v4": "192.0.2.2"}},
	}
	run := func(how string) *runtime.Result {
		return luatest.Run(t, rt, luatest.Task("CREATE", "lz", map[string]any{
			"provider": map[string]any{"providertype": "lz", "provisioner": map[string]any{}}, "how": how, "nodes": nodes}))
	}
	for how, want := range map[string]string{"index": "b.example.com", "pairs": "b.example.com", "next": "b.example.com",
		"rawget": "b.example.com", "json": "b.example.com", "meta": "nil", "setmeta": "b.example.com dflt", "assign": "mine",
		"none": "untouched"} {
		r := run(how)
		if r.Status != 0 || r.Result["got"] != want {
			t.Errorf("%s: status %d %q, got %v, want %q", how, r.Status, r.Message, r.Result["got"], want)
		}
	}
	r := run("result")
	copied, _ := r.Result["copy"].(map[string]any)
	if n, _ := copied["nodes"].(map[string]any); r.Status != 0 || n["n2"] == nil {
		t.Errorf("config copied into the result lacks nodes: %d %s %v", r.Status, r.Message, r.Result)
	}
	r = run("secret")
	b, _ := json.Marshal(r)
	if strings.Contains(string(b), secret) || !strings.Contains(r.Stdout, "[REDACTED]") {
		t.Errorf("a sensitive field in config.nodes leaked: %s", b)
	}
}
