package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A plugin written the way Coopr's Ruby skeletons are: a global table
// named by classname, colon-method hooks, self.result.status = 0,
// self.result.result.providerid = "x", error("...") on failure.
const rubyStyle = `
MyProvider = {}
function MyProvider:create(input)
  self.result.result.providerid = "x-" .. input.hostname
  self.result.result["ssh-auth"].user = "root"
  self.result.status = 0
end
function MyProvider:confirm(input)
  if input.providerid ~= "x-node1.example.com" then
    error("unknown provider id " .. tostring(input.providerid))
  end
  self.result.ipaddresses = {access_v4 = "10.0.0.1", bind_v4 = "10.0.0.2"}
  self.result.hostname = "real.example.com"
  self.result.status = 0
end
function MyProvider:delete(input)
  self.result.status = 0
end
`

func TestRubyStyleProvider(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "mine", Family: "provider", Classname: "MyProvider",
		Files: map[string]string{"mine.lua": rubyStyle}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})

	res := luatest.Run(t, rt, luatest.Task("CREATE", "mine", nil))
	if res.Status != 0 || res.Result["providerid"] != "x-node1.example.com" {
		t.Fatalf("create: %+v", res)
	}
	if auth := res.Result["ssh-auth"].(map[string]any); auth["user"] != "root" {
		t.Fatalf("ssh-auth: %v", auth)
	}
	conf := luatest.Run(t, rt, luatest.Task("CONFIRM", "mine", map[string]any{"providerid": "x-node1.example.com"}))
	if conf.Status != 0 || conf.IPAddresses["access_v4"] != "10.0.0.1" || conf.Hostname != "real.example.com" {
		t.Fatalf("confirm: %+v", conf)
	}
	bad := luatest.Run(t, rt, luatest.Task("CONFIRM", "mine", map[string]any{"providerid": "nope"}))
	if bad.Status != 1 || !strings.Contains(bad.Message, "mine.lua:10: unknown provider id nope") {
		t.Fatalf("error(): want status 1 with file:line, got %+v", bad)
	}
	if !strings.Contains(bad.Stderr, "stack traceback") {
		t.Fatalf("stderr lacks a traceback: %q", bad.Stderr)
	}
	// The JSON a Coopr server receives: integer status, no empty tables.
	b, _ := json.Marshal(conf)
	var m map[string]any
	json.Unmarshal(b, &m)
	if m["status"] != float64(0) || m["taskId"] != "t-1" {
		t.Fatalf("result JSON %s", b)
	}
	if _, ok := m["result"]; ok && len(m["result"].(map[string]any)) == 0 {
		t.Fatalf("empty result map kept: %s", b)
	}
}

func TestBaseTablesAndMissingHooks(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "half", Family: "automator", Classname: "Half", Files: map[string]string{
		"half.lua": `local loom = require("loom")
Half = loom.Automator:extend("Half")
function Half:install(input) self.result.result.did = "install" end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	var warned []string
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			t.Fatalf("unexpected error %v", e)
		}
		warned = append(warned, e.Message)
	}
	if len(warned) != 6 || !strings.Contains(strings.Join(warned, "\n"), `does not define hook "bootstrap"`) {
		t.Fatalf("want 6 missing-hook warnings, got %q", warned)
	}
	if r := luatest.Run(t, rt, luatest.Task("INSTALL", "half", nil)); r.Status != 0 || r.Result["did"] != "install" {
		t.Fatalf("install: %+v", r)
	}
	r := luatest.Run(t, rt, luatest.Task("START", "half", nil))
	if r.Status != 1 || !strings.Contains(r.Message, "unimplemented start in Half") {
		t.Fatalf("start: %+v", r)
	}
	// A plain table without the hook fails the same way.
	dir2 := t.TempDir()
	luatest.WritePlugin(t, dir2, luatest.Plugin{Name: "plain", Family: "provider", Classname: "Plain",
		Files: map[string]string{"p.lua": `Plain = {} function Plain:create() end`}})
	rt2 := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir2})
	if r := luatest.Run(t, rt2, luatest.Task("DELETE", "plain", nil)); r.Status != 1 || r.Message != "unimplemented delete in Plain" {
		t.Fatalf("plain delete: %+v", r)
	}
}

func TestBrokenPluginNextToGoodOne(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "good", Family: "provider", Classname: "Good",
		Files: map[string]string{"g.lua": `Good = {} function Good:create() self.result.result.ok = true end`}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "syntax", Family: "provider", Classname: "S",
		Files: map[string]string{"s.lua": "S = {}\nfunction S:create()\n  if x then\nend\n"}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "noclass", Family: "provider", Classname: "Missing",
		Files: map[string]string{"n.lua": `Other = {}`}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "loaderr", Family: "provider", Classname: "L",
		Files: map[string]string{"l.lua": "L = {}\nlocal x = nil\nx.boom = 1\n"}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "zdup", Type: "good", Family: "provider", Classname: "Good",
		Files: map[string]string{"d.lua": `Good = {} function Good:create() end`}})
	luatest.WriteFile(t, filepath.Join(dir, "badjson", "badjson.json"), "{\"name\": \"badjson\",\n \"providertypes\": [\"b\"],,}")
	luatest.WriteFile(t, filepath.Join(dir, "nocls", "nocls.json"), `{"name":"nocls","providertypes":["nc"],"nc":{"name":"nc"}}`)
	// The grouped layout: <dir>/<group>/<plugin>/<x>.json
	luatest.WritePlugin(t, filepath.Join(dir, "providers"), luatest.Plugin{Name: "grouped", Family: "provider", Classname: "G",
		Files: map[string]string{"g.lua": `G = {} function G:create() self.result.result.grouped = true end`}})

	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	all := ""
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			all += e.Error() + "\n"
		}
	}
	for _, want := range []string{
		"syntax/s.lua:5: plugin syntax: unexpected end of file",
		"noclass.json: plugin noclass: classname \"Missing\" is not a global table",
		"loaderr/l.lua:3: plugin loaderr",
		"type \"good\" is already defined by",
		"badjson.json:2: plugin badjson: invalid JSON",
		"nocls.json: plugin nocls: type \"nc\": missing \"classname\"",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("load errors lack %q:\n%s", want, all)
		}
	}
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "good", nil)); r.Status != 0 || r.Result["ok"] != true {
		t.Fatalf("good plugin: %+v", r)
	}
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "grouped", nil)); r.Result["grouped"] != true {
		t.Fatalf("grouped layout: %+v", r)
	}
	_, err := rt.Run(context.Background(), luatest.Task("CREATE", "syntax", nil))
	if !errors.Is(err, runtime.ErrPluginNotFound) || !strings.Contains(err.Error(), "failed to load") {
		t.Fatalf("task for the broken plugin: %v", err)
	}
}

func TestDispatchInputs(t *testing.T) {
	dir := t.TempDir()
	echo := `
Echo = require("loom").Automator:extend("Echo")
local function echo(self, input)
  self.result.result.input = input
  self.result.result.hook = self.env.hook
  self.result.result.work_dir = self.env.work_dir
  self.result.result.tenant = self.env.tenant
end
for _, h in ipairs({"bootstrap","install","configure","init","start","stop","remove"}) do Echo[h] = echo end
Prov = require("loom").Provider:extend("Prov")
for _, h in ipairs({"create","confirm","delete"}) do Prov[h] = echo end
`
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "echo", Family: "automator", Classname: "Echo", Files: map[string]string{"e.lua": echo},
		Extra: map[string]any{"parameters": map[string]any{"admin": map[string]any{"fields": map[string]any{
			"script": map[string]any{"label": "Script"}, "mode": map[string]any{"default": "fast"}}, "required": [][]string{{"script"}}}}}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "prov", Family: "provider", Classname: "Prov", Files: map[string]string{"e.lua": echo}})
	work := t.TempDir()
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: work, Tenant: "acme"})

	c := luatest.Run(t, rt, luatest.Task("CREATE", "prov", nil)).Result
	in := c["input"].(map[string]any)
	if in["flavor"] != "small" || in["image"] != "debian" || in["hostname"] != "node1.example.com" {
		t.Fatalf("create input %v", in)
	}
	if c["work_dir"] != filepath.Join(work, "acme", "providertypes", "prov") || c["tenant"] != "acme" {
		t.Fatalf("env %v", c)
	}
	if st, err := os.Stat(c["work_dir"].(string)); err != nil || !st.IsDir() {
		t.Fatalf("work dir not created: %v", err)
	}
	d := luatest.Run(t, rt, luatest.Task("DELETE", "prov", map[string]any{"providerid": "p-1"})).Result["input"].(map[string]any)
	if d["providerid"] != "p-1" {
		t.Fatalf("delete input %v", d)
	}
	// INITIALIZE calls init; fields come from service.action.fields with defaults.
	task := luatest.Task("INITIALIZE", "echo", map[string]any{
		"service":  map[string]any{"name": "s", "action": map[string]any{"type": "echo", "fields": map[string]any{"script": "run.sh"}}},
		"ssh-auth": map[string]any{"user": "deploy"},
	})
	r := luatest.Run(t, rt, task)
	if r.Status != 0 || r.Result["hook"] != "init" {
		t.Fatalf("initialize: %+v", r)
	}
	in = r.Result["input"].(map[string]any)
	f := in["fields"].(map[string]any)
	if f["script"] != "run.sh" || f["mode"] != "fast" || in["ipaddress"] != "127.0.0.1" || in["sshauth"].(map[string]any)["user"] != "deploy" {
		t.Fatalf("service input %v", in)
	}
	// Missing required fields fail before the hook runs, naming them.
	miss := luatest.Run(t, rt, luatest.Task("INSTALL", "echo", nil))
	if miss.Status != 1 || !strings.Contains(miss.Message, "missing required admin fields for echo: script") {
		t.Fatalf("required: %+v", miss)
	}
	// The legacy flat ipaddress key.
	legacy := luatest.Task("BOOTSTRAP", "echo", map[string]any{"ipaddresses": map[string]any{}, "ipaddress": "10.1.1.1"})
	if in := luatest.Run(t, rt, legacy).Result["input"].(map[string]any); in["ipaddress"] != "10.1.1.1" || in["fields"] != nil {
		t.Fatalf("bootstrap input %v", in)
	}
}

func TestBootstrapRunsEveryAutomator(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"one", "two", "bad"} {
		code := `X = {} function X:bootstrap() self.result.result.ran["` + name + `"] = true; self.result.stdout = "` + name + `" end`
		if name == "bad" {
			code = `X = {} function X:bootstrap() error("bad bootstrap") end`
		}
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: name, Family: "automator", Classname: "X", Files: map[string]string{"x.lua": code}})
	}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	ok := luatest.Run(t, rt, luatest.Task("BOOTSTRAP", "one", map[string]any{"automators": []string{"one", "two"}}))
	ran := ok.Result["ran"].(map[string]any)
	if ok.Status != 0 || ran["one"] != true || ran["two"] != true || ok.Stdout != "one\ntwo" {
		t.Fatalf("merged bootstrap: %+v", ok)
	}
	failed := luatest.Run(t, rt, luatest.Task("BOOTSTRAP", "one", map[string]any{"automators": []string{"one", "bad", "two"}}))
	if failed.Status != 1 || !strings.Contains(failed.Message, "bad bootstrap") || failed.Result["ran"].(map[string]any)["two"] != nil {
		t.Fatalf("bootstrap must stop at the failing automator: %+v", failed)
	}
}

func TestResultsAndErrors(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "r", Family: "provider", Classname: "R", Files: map[string]string{"r.lua": `
R = {}
function R:create(input)
  local _ = self.result.status           -- reading auto-vivifies {}
  local _ = self.result.result.a.b.c     -- deep reads too
end
function R:confirm(input)
  self.result.result.providerid = "kept"  -- kept even though the hook fails
  error({code = 7, message = "structured failure", detail = {zone = "z1"}})
end
function R:delete(input)
  self.result.status = "3"
  self.result.custom = "extra key"
end
`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	c := luatest.Run(t, rt, luatest.Task("CREATE", "r", nil))
	b, _ := json.Marshal(c)
	if c.Status != 0 || strings.Contains(string(b), "{}") {
		t.Fatalf("auto-vivified empties must be dropped and status default to 0: %s", b)
	}
	f := luatest.Run(t, rt, luatest.Task("CONFIRM", "r", nil))
	if f.Status != 1 || f.Message != "structured failure" || f.Error["code"] != float64(7) ||
		f.Error["detail"].(map[string]any)["zone"] != "z1" || f.Result["providerid"] != "kept" {
		t.Fatalf("structured error: %+v", f)
	}
	d := luatest.Run(t, rt, luatest.Task("DELETE", "r", nil))
	b, _ = json.Marshal(d)
	if d.Status != 3 || !strings.Contains(string(b), `"custom":"extra key"`) {
		t.Fatalf("string status and extra keys: %s", b)
	}
}

func TestSecretsAreRedacted(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "sec", Family: "provider", Classname: "Sec",
		Files: map[string]string{"s.lua": `Sec = {} function Sec:create(input)
  log.info("using token %s", input.fields.api_key)
  self.result.stdout = "token=" .. input.fields.api_key
  error("auth failed for " .. input.fields.api_key)
end`},
		Extra: map[string]any{"parameters": map[string]any{"admin": map[string]any{"fields": map[string]any{
			"api_key": map[string]any{"type": "password", "sensitive": true}}}}}})
	logs := &luatest.LogBuffer{}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Logger: logs.Logger()})
	const secret = "s3cr3t-token-value"
	r := luatest.Run(t, rt, luatest.Task("CREATE", "sec", map[string]any{
		"provider": map[string]any{"providertype": "sec", "provisioner": map[string]any{"api_key": secret}}}))
	b, _ := json.Marshal(r)
	for where, s := range map[string]string{"result": string(b), "logs": logs.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked into %s: %s", where, s)
		}
		if !strings.Contains(s, "[REDACTED]") {
			t.Errorf("%s has no redaction marker: %s", where, s)
		}
	}
}

func TestTimeoutsFromDefinition(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "slow", Family: "provider", Classname: "Slow",
		Files: map[string]string{"s.lua": `Slow = {} function Slow:create() while true do end end function Slow:delete() end`},
		Top:   map[string]any{"timeouts": map[string]any{"default": "10m", "create": "150ms"}}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	r := luatest.Run(t, rt, luatest.Task("CREATE", "slow", nil))
	if r.Status != 1 || !strings.Contains(r.Message, "timed out after 150ms") {
		t.Fatalf("%+v", r)
	}
	// Cancelling the caller's context is not a plugin failure.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := rt.Run(ctx, luatest.Task("CREATE", "slow", nil)); !errors.Is(err, runtime.ErrCancelled) {
		t.Fatalf("want ErrCancelled, got %v", err)
	}
}

func TestMainFileAndRequire(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "m", Family: "provider", Classname: "",
		Files: map[string]string{
			"plugin.lua":     `local util = require("lib.util") local P = {} function P:create() self.result.result.v = util.twice(21) end return P`,
			"lib/util.lua":   `return {twice = function(x) return x * 2 end}`,
			"loop/a.lua":     `return require("loop.b")`,
			"loop/b.lua":     `return require("loop.a")`,
			"unrelated.lua":  `error("top-level files other than main must not run")`,
			"lib/other.json": `{}`,
		},
		Extra: map[string]any{"main": "plugin.lua"}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "m", nil)); r.Status != 0 || r.Result["v"] != float64(42) {
		t.Fatalf("%+v", r)
	}
}

func TestReloadKeepsOldVersionWhenBroken(t *testing.T) {
	dir := t.TempDir()
	write := func(code string) {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: "v", Family: "provider", Classname: "V", Files: map[string]string{"v.lua": code}})
	}
	write(`V = {} function V:create() self.result.result.v = 1 end`)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	v1 := rt.Types()[0].Version
	write(`V = {} function V:create() self.result.result.v = 2 end`)
	rep, err := rt.Reload(context.Background())
	if err != nil || len(rep.Updated) != 1 {
		t.Fatalf("reload: %+v %v", rep, err)
	}
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "v", nil)); r.Result["v"] != float64(2) {
		t.Fatalf("new version not serving: %+v", r)
	}
	write(`V = {} function V:create( self.result.result.v = 3 end`)
	rep, _ = rt.Reload(context.Background())
	if len(rep.Kept) != 1 || len(rep.Errors) == 0 {
		t.Fatalf("broken reload: %+v", rep)
	}
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "v", nil)); r.Result["v"] != float64(2) {
		t.Fatalf("old version must keep serving: %+v", r)
	}
	if rt.Types()[0].Version == v1 {
		t.Fatal("version hash did not change")
	}
	os.RemoveAll(filepath.Join(dir, "v"))
	rep, _ = rt.Reload(context.Background())
	if len(rep.Removed) != 1 || len(rt.Types()) != 0 {
		t.Fatalf("removal: %+v", rep)
	}
}

func TestInvalidTasks(t *testing.T) {
	for in, want := range map[string]string{
		`{"taskName":`:                                                       "malformed JSON",
		`{"taskId":"x","config":{}}`:                                         `missing "taskName"`,
		`{"taskId":"x","taskName":"FLY","config":{}}`:                        "unknown taskName",
		`{"taskId":"x","taskName":"CREATE"}`:                                 `no "config"`,
		`{"taskId":"x","taskName":"CREATE","config":{}}`:                     "config.provider.providertype",
		`{"taskId":"x","taskName":"INSTALL","config":{}}`:                    "config.service.action.type",
		`{"taskId":"x","taskName":"BOOTSTRAP","config":{"automators":[""]}}`: "config.automators[1] is empty",
	} {
		_, err := runtime.ParseTask([]byte(in))
		if !errors.Is(err, runtime.ErrInvalidTask) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", in, err, want)
		}
	}
}

func TestExposeHostValues(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "e", Family: "provider", Classname: "E",
		Files: map[string]string{"e.lua": `E = {} function E:create() self.result.result.greeting = require("loom.host").greeter:Greet("loom") end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Expose: map[string]any{"greeter": greeter{}}})
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "e", nil)); r.Result["greeting"] != "hello, loom" {
		t.Fatalf("%+v", r)
	}
}

type greeter struct{}

func (greeter) Greet(name string) string { return "hello, " + name }

// TestSymlinkedPluginFolder: a plugin folder linked into the plugins dir
// loads like any other.
func TestSymlinkedPluginFolder(t *testing.T) {
	real := t.TempDir()
	luatest.WritePlugin(t, real, luatest.Plugin{Name: "linked", Family: "provider", Classname: "L",
		Files: map[string]string{"l.lua": `L = {} function L:create() self.result.result.ok = true end`}})
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(real, "linked"), filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	if r := luatest.Run(t, rt, luatest.Task("CREATE", "linked", nil)); r.Result["ok"] != true {
		t.Fatalf("%+v %v", r, rt.LoadErrors())
	}
}

// TestLoopAtLoadTime: a plugin whose top-level code never returns is
// reported, and does not hang Load.
func TestLoopAtLoadTime(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "spin", Family: "provider", Classname: "S",
		Files: map[string]string{"s.lua": "S = {}\nwhile true do end\n"}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, LoadTimeout: 200 * time.Millisecond})
	errs := rt.LoadErrors()
	if len(errs) != 1 || !strings.Contains(errs[0].Message, "loop forever") {
		t.Fatalf("%v", errs)
	}
}

// TestREPLLocalsPersist: a line declaring a local keeps it for the next
// line, as an author at the prompt expects.
func TestREPLLocalsPersist(t *testing.T) {
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: t.TempDir()})
	s, err := rt.NewSession("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, line := range []string{"local a, b = 1, 2", "local function twice(x) return 2 * x end", "local c", "local t = {\n n = 3 }"} {
		if _, err := s.Eval(ctx, line, discard); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
	}
	vals, err := s.Eval(ctx, "twice(a + b) + t.n", discard)
	if err != nil || len(vals) != 1 || vals[0].String() != "9" {
		t.Fatalf("got %v %v", vals, err)
	}
	if vals, _ := s.Eval(ctx, "c == nil", discard); vals[0].String() != "true" {
		t.Fatalf("local c: %v", vals)
	}
	// Locals inside a multi-statement line stay local to it.
	if vals, _ := s.Eval(ctx, "do local hidden = 1 end return hidden", discard); vals[0].String() != "nil" {
		t.Fatalf("block local leaked: %v", vals)
	}
}
