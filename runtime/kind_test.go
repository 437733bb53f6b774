package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const driverLua = `
local loom = require("loom")
Drv = loom.ClusterDriver:extend("Drv")
function Drv:create_options()
  return { ["disk-size-gb"] = { type = "int", usage = "disk", default = 100 },
           password = { type = "string", password = true } }
end
function Drv:create(req)
  local name = self:option(req.options, "string", "name")
  if name == "partial" then
    return self:set_state({ metadata = {} }, { id = "c-9" }), "quota exceeded for " .. (req.options.string.password or "")
  end
  if name == "badkey" then return { endpiont = "x" } end
  if name == "raise" then self:fail("region closed", "terminal", "gone") end
  if name == "boom" then error("kaput: " .. req.options.string.password) end
  local ci = { endpoint = "10.0.0.1", node_count = self:option(req.options, "int", "node-count", "nodeCount") }
  return self:set_state(ci, { id = "c-" .. name })
end
function Drv:post_check(req)
  local st = self:state(req.cluster_info)
  req.cluster_info.service_account_token = "tok-" .. st.id
  return req.cluster_info
end
function Drv:remove(req) end
function Drv:get_version(req) return { version = "v1.30" } end
`

func writeKind(t *testing.T, dir, family, name, class, src string, extra map[string]any) {
	t.Helper()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: name, Family: family, Classname: class,
		Files: map[string]string{name + ".lua": src}, Extra: extra})
}

func TestClusterDriverKind(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "clusterdriver", "drv", "Drv", driverLua, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	if errs := rt.LoadErrors(); len(errs) != 0 {
		t.Fatalf("load errors: %v", errs)
	}
	types := rt.Types()
	if len(types) != 1 || types[0].Family != runtime.ClusterDriver || types[0].Key != "clusterdrivers" {
		t.Fatalf("types: %+v", types)
	}
	if !strings.Contains(strings.Join(types[0].Missing, ","), "update") || strings.Contains(strings.Join(types[0].Missing, ","), "create") {
		t.Fatalf("missing hooks: %v", types[0].Missing)
	}

	opts := luatest.Call(t, rt, "drv", "create_options", nil)
	if opts.Status != 0 || opts.Kind != runtime.ClusterDriver {
		t.Fatalf("create_options: %+v", opts)
	}
	if f := opts.Result.(map[string]any)["disk-size-gb"].(map[string]any); f["type"] != "int" || f["default"] != float64(100) {
		t.Fatalf("flag: %v", f)
	}

	in := map[string]any{"options": map[string]any{"string": map[string]any{"name": "prod"}, "int": map[string]any{"nodeCount": 3}}}
	res := luatest.Call(t, rt, "drv", "create", in)
	ci, _ := res.Result.(map[string]any)
	if res.Status != 0 || ci["node_count"] != float64(3) || ci["metadata"].(map[string]any)["state"] != `{"id":"c-prod"}` {
		t.Fatalf("create: %+v", res)
	}
	pc := luatest.Call(t, rt, "drv", "post_check", map[string]any{"cluster_info": ci})
	if pc.Result.(map[string]any)["service_account_token"] != "tok-c-prod" {
		t.Fatalf("post_check: %+v", pc)
	}
	if rm := luatest.Call(t, rt, "drv", "remove", map[string]any{"cluster_info": ci}); rm.Status != 0 || rm.Result != nil {
		t.Fatalf("remove: %+v", rm)
	}

	// Absent optional hooks: the contract's answers.
	up := luatest.Call(t, rt, "drv", "update", map[string]any{"cluster_info": ci, "options": map[string]any{}})
	if up.Status != 1 || !up.Defaulted || up.Error.Class != "terminal" || up.Error.Reason != "unimplemented" || up.Message != "update not supported" {
		t.Fatalf("update: %+v %+v", up, up.Error)
	}
	caps := luatest.Call(t, rt, "drv", "capabilities", nil).Result.(map[string]any)
	if caps["get_version"] != true || caps["set_version"] != false || caps["etcd_backup"] != false {
		t.Fatalf("capabilities: %v", caps)
	}
	if e := luatest.Call(t, rt, "drv", "etcd_save", map[string]any{"cluster_info": ci, "options": map[string]any{}, "snapshot_name": "s"}); e.Message != "ETCD backup operations are not implemented" {
		t.Fatalf("etcd_save: %+v", e)
	}
	if r := luatest.Call(t, rt, "drv", "remove_legacy_service_account", map[string]any{"cluster_info": ci}); r.Status != 0 || !r.Defaulted {
		t.Fatalf("remove_legacy_service_account: %+v", r)
	}

	// A partial create keeps its result beside the error; the password
	// (a ClusterDriver secret) never reaches the message.
	with := func(name string) map[string]any {
		return map[string]any{"options": map[string]any{"string": map[string]any{"name": name, "password": "hunter22"}}}
	}
	part := luatest.Call(t, rt, "drv", "create", with("partial"))
	if part.Status != 1 || part.Error.Class != "retry" || part.Result == nil || strings.Contains(part.Message, "hunter22") {
		t.Fatalf("partial: %+v %+v", part, part.Error)
	}
	bad := luatest.Call(t, rt, "drv", "create", with("badkey"))
	if bad.Error == nil || bad.Error.Reason != "invalid_result" || !strings.Contains(bad.Message, `result: unknown key "endpiont"`) {
		t.Fatalf("badkey: %+v", bad)
	}
	raised := luatest.Call(t, rt, "drv", "create", with("raise"))
	if raised.Error == nil || raised.Error.Class != "terminal" || raised.Error.Reason != "gone" || raised.Message != "region closed" {
		t.Fatalf("raise: %+v %+v", raised, raised.Error)
	}
	boom := luatest.Call(t, rt, "drv", "create", with("boom"))
	if boom.Error == nil || boom.Error.Class != "retry" || !strings.Contains(boom.Message, "drv.lua:") ||
		strings.Contains(boom.Message+boom.Stderr, "hunter22") || !strings.Contains(boom.Stderr, "stack traceback") {
		t.Fatalf("boom: %+v", boom)
	}
}

func TestCallRejectsBadRequests(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "clusterdriver", "drv", "Drv", driverLua, nil)
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "prov", Family: "provider", Classname: "P",
		Files: map[string]string{"p.lua": `P = require("loom").Provider:extend("P") function P:create() end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	cases := []struct {
		typ, hook, input, want string
		sentinel               error
	}{
		{"nope", "create", `{}`, `no plugin in`, runtime.ErrPluginNotFound},
		{"prov", "create", `{}`, `is a provider type, whose hooks run from Coopr tasks`, runtime.ErrInvalidCall},
		{"drv", "confirm", `{}`, `clusterdriver has no hook "confirm"`, runtime.ErrInvalidCall},
		{"drv", "create", `{}`, `input: missing "options"`, runtime.ErrInvalidCall},
		{"drv", "create", `{"options": {"int": {"n": "three"}}}`, `input.options.int.n: want an integer, got string "three"`, runtime.ErrInvalidCall},
		{"drv", "create", `[1]`, `input: want an object`, runtime.ErrInvalidCall},
		{"drv", "create", `{"options": {}, "extra": 1}`, `unknown key "extra"`, runtime.ErrInvalidCall},
	}
	for _, c := range cases {
		_, err := rt.Call(context.Background(), &runtime.CallRequest{Type: c.typ, Hook: c.hook, Input: json.RawMessage(c.input)})
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s %s: got %v, want %q", c.typ, c.hook, c.input, err, c.want)
		}
	}
	for body, want := range map[string]string{
		`{"hook": "create"}`:                               `missing "type"`,
		`{"type": "drv"}`:                                  `missing "hook"`,
		`{"type": "drv", "hook": "x", "zzz": 1}`:           `unknown field "zzz"`,
		`{"type": "drv", "hook": "x", "tenantId": "../a"}`: `tenantId "../a" must be`,
	} {
		if _, err := runtime.ParseCall([]byte(body)); !errors.Is(err, runtime.ErrInvalidCall) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCall(%s): %v, want %q", body, err, want)
		}
	}
}

func TestKindLoadChecks(t *testing.T) {
	dir := t.TempDir()
	// A called kind without a required hook does not load, and says which.
	writeKind(t, dir, "cloudprovider", "half", "Half", `Half = require("loom").CloudProvider:extend("Half")
function Half:get(req) return {} end`, nil)
	// Timeouts are checked against the type's kind.
	writeKind(t, dir, "bucketprovisioner", "tm", "Tm", `Tm = require("loom").BucketProvisioner:extend("Tm")
function Tm:provision(req) end`, map[string]any{"timeouts": map[string]any{"confirm": "1m"}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	var msgs []string
	for _, e := range rt.LoadErrors() {
		msgs = append(msgs, e.Error())
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"does not define the required hook(s) create, cleanup of the cloudprovider contract",
		`timeouts: unknown hook "confirm" (want default or one of generate_user_id, provision, grant, delete, revoke, update)`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("load errors lack %q:\n%s", want, all)
		}
	}
	if len(rt.Types()) != 0 {
		t.Fatalf("types loaded: %+v", rt.Types())
	}
}

func TestCloudProviderErrorClasses(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "cloudprovider", "mc", "Mc", `
Mc = require("loom").CloudProvider:extend("Mc")
function Mc:get(req)
  local n = req.machine.metadata.name
  if n == "absent" then return nil, { not_found = true, message = "no instance" } end
  if n == "bad" then return nil, { terminal = true, reason = "InvalidConfiguration", message = "no token" } end
  if n == "weird" then return nil, { terminal = true, reason = "Sunspots", message = "?" } end
  if n == "os" then return nil, { os_not_supported = true, message = "os not supported" } end
  return { id = "1", provider_id = "fake://1", addresses = { ["10.0.0.2"] = "InternalIP" }, status = "running" }
end
function Mc:create(req) return nil, { not_found = true, message = "x" } end
function Mc:cleanup(req) return false end
`, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	get := func(name string) *runtime.CallResult {
		return luatest.Call(t, rt, "mc", "get", map[string]any{"machine": map[string]any{"metadata": map[string]any{"name": name, "uid": "u1"}}})
	}
	for name, want := range map[string][2]string{
		"absent": {"not_found", ""},
		"bad":    {"terminal", "InvalidConfiguration"},
		"weird":  {"terminal", "invalid_result"},
		"os":     {"retry", "os_not_supported"},
	} {
		r := get(name)
		if r.Status != 1 || r.Error.Class != want[0] || r.Error.Reason != want[1] {
			t.Errorf("%s: %+v %+v, want %v", name, r, r.Error, want)
		}
	}
	if r := get("ok"); r.Status != 0 || r.Result.(map[string]any)["provider_id"] != "fake://1" {
		t.Fatalf("get ok: %+v", r)
	}
	// not_found is get's alone.
	c := luatest.Call(t, rt, "mc", "create", map[string]any{"machine": map[string]any{"metadata": map[string]any{}}, "userdata": ""})
	if c.Error == nil || c.Error.Reason != "invalid_result" || !strings.Contains(c.Message, `error class "not_found", which cloudprovider create cannot return`) {
		t.Fatalf("create: %+v", c)
	}
	if cl := luatest.Call(t, rt, "mc", "cleanup", map[string]any{"machine": map[string]any{"metadata": map[string]any{}}}); cl.Status != 0 || cl.Result != false {
		t.Fatalf("cleanup: %+v", cl)
	}
	spec := map[string]any{"providerSpec": map[string]any{"value": map[string]any{"cloudProvider": "lua"}}}
	if d := luatest.Call(t, rt, "mc", "add_defaults", map[string]any{"spec": spec}); !d.Defaulted || d.Result.(map[string]any)["providerSpec"] == nil {
		t.Fatalf("add_defaults: %+v", d)
	}
}

func TestBucketProvisionerContract(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "bucketprovisioner", "bk", "Bk", `
Bk = require("loom").BucketProvisioner:extend("Bk")
function Bk:provision(req)
  if req.parameters and req.parameters.taken == "yes" then return nil, { bucket_exists = true, message = "taken" } end
  local name = req.bucket_name
  if req.parameters and req.parameters.wrong == "yes" then name = "other" end
  return { endpoint = { bucket_host = "127.0.0.1", bucket_port = 9000, bucket_name = name },
           access_keys = { access_key_id = "AK", secret_access_key = "SK" },
           additional_state = { user = req.user_id } }
end
`, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	claim := map[string]any{"metadata": map[string]any{"name": "photos", "namespace": "web"}}
	uid := luatest.Call(t, rt, "bk", "generate_user_id", map[string]any{"claim": claim})
	if uid.Result != "obc-web-photos" || !uid.Defaulted {
		t.Fatalf("generate_user_id: %+v", uid)
	}
	req := func(params map[string]any) map[string]any {
		return map[string]any{"bucket_name": "photos-1", "user_id": "obc-web-photos", "claim": claim, "parameters": params}
	}
	if p := luatest.Call(t, rt, "bk", "provision", req(nil)); p.Status != 0 || dig(p.Result, "additional_state", "user") != "obc-web-photos" {
		t.Fatalf("provision: %+v", p)
	}
	if p := luatest.Call(t, rt, "bk", "provision", req(map[string]any{"wrong": "yes"})); p.Error == nil || !strings.Contains(p.Message, `bucket_name is "other" but the request's bucket_name is "photos-1"`) {
		t.Fatalf("wrong bucket: %+v", p)
	}
	if p := luatest.Call(t, rt, "bk", "provision", req(map[string]any{"taken": "yes"})); p.Error == nil || p.Error.Class != "retry" || p.Error.Reason != "bucket_exists" {
		t.Fatalf("taken: %+v", p)
	}
	ob := map[string]any{"object_bucket": map[string]any{"spec": map[string]any{"additionalState": map[string]any{"user": "u"}}}}
	if d := luatest.Call(t, rt, "bk", "delete", ob); d.Error == nil || d.Error.Reason != "unimplemented" {
		t.Fatalf("delete: %+v", d)
	}
	if r := luatest.Call(t, rt, "bk", "revoke", ob); r.Status != 0 || !r.Defaulted {
		t.Fatalf("revoke: %+v", r)
	}
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func TestKindsTable(t *testing.T) {
	var keys []string
	for _, k := range runtime.Kinds() {
		keys = append(keys, k.Key)
		for _, h := range k.Hooks {
			if !k.Coopr && !h.Required && h.Absent == "" {
				t.Errorf("%s %s: optional hook without absent behaviour", k.Family, h.Name)
			}
		}
		if runtime.KindByKey(k.Key) != k || runtime.KindOf(k.Family) != k {
			t.Errorf("%s: lookups disagree", k.Key)
		}
	}
	if got := strings.Join(keys, ","); got != "providertypes,automatortypes,clusterdrivers,bucketprovisioners,cloudproviders,kloudproviders" {
		t.Fatalf("kinds: %s", got)
	}
}

func TestCallTask(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "clusterdriver", "drv", "Drv", driverLua, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	data, err := runtime.CallTask(runtime.ClusterDriver, &runtime.CallRequest{CallID: "c-7", Type: "drv", Hook: "get_version",
		Input: json.RawMessage(`{"cluster_info": {}}`)})
	if err != nil {
		t.Fatal(err)
	}
	task, err := runtime.ParseTask(data)
	if err != nil {
		t.Fatal(err)
	}
	if fam, typ, _ := task.Route(); fam != runtime.ClusterDriver || typ != "drv" || task.Hook() != "get_version" {
		t.Fatalf("route: %s %s %s", fam, typ, task.Hook())
	}
	res, err := rt.RunTask(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if res.Status != 0 || !strings.Contains(string(b), `"result":{"version":"v1.30"}`) || !strings.Contains(string(b), `"kind":"clusterdriver"`) {
		t.Fatalf("result: %s", b)
	}
	for body, want := range map[string]string{
		`{"taskName": "call"}`: `has no "call" object`,
		`{"taskName": "CALL", "call": {"kind": "provider", "type": "x", "hook": "create"}}`:          `call.kind "provider" is not a called kind`,
		`{"taskName": "CALL", "call": {"kind": "clusterdriver", "type": "drv", "hook": "nope"}}`:     `clusterdriver has no hook "nope"`,
		`{"taskName": "CALL", "call": {"kind": "clusterdriver", "type": "drv", "hook": "remove"}}`:   `input: missing "cluster_info"`,
		`{"taskName": "CALL", "tenantId": "../x", "call": {"kind": "clusterdriver", "type": "drv"}}`: `tenantId "../x" must be`,
	} {
		if _, err := runtime.ParseTask([]byte(body)); !errors.Is(err, runtime.ErrInvalidTask) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseTask(%s): %v, want %q", body, err, want)
		}
	}
}

// TestClusterDriverOption checks self:option against kontainer-engine's
// GetValueFromDriverOptions: zero values for the plain types, nil for
// intPtr and boolPtr when no key is set, the first key present wins.
func TestClusterDriverOption(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "clusterdriver", "opt", "Opt", `
local loom = require("loom")
Opt = loom.ClusterDriver:extend("Opt")
function Opt:create_options() return {} end
function Opt:post_check(req) return req.cluster_info end
function Opt:remove() end
function Opt:create(req)
  local o = req.options
  if o.string.bad then self:option(o, o.string.bad, "x") end
  local function show(v) if v == nil then return "nil" end return tostring(v) end
  return { metadata = {
    int_ptr = show(self:option(o, "intPtr", "max-nodes", "maxNodes")),
    bool_ptr = show(self:option(o, "boolPtr", "autoscale")),
    int = show(self:option(o, "int", "node-count", "nodeCount")),
    bool = show(self:option(o, "bool", "private")),
    string = show(self:option(o, "string", "zone")),
    slice = show(#self:option(o, "stringSlice", "tags")) .. "/" .. show(#self:option(o, "string_slice", "tags")),
  } }
end
`, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	md := func(opts map[string]any) map[string]any {
		t.Helper()
		res := luatest.Call(t, rt, "opt", "create", map[string]any{"options": opts})
		if res.Status != 0 {
			t.Fatalf("create: %+v %+v", res, res.Error)
		}
		return res.Result.(map[string]any)["metadata"].(map[string]any)
	}
	unset := md(map[string]any{"string": map[string]any{}})
	want := map[string]any{"int_ptr": "nil", "bool_ptr": "nil", "int": "0", "bool": "false", "string": "", "slice": "0/0"}
	for k, v := range want {
		if unset[k] != v {
			t.Errorf("unset %s = %v, want %v (all %v)", k, unset[k], v, unset)
		}
	}
	set := md(map[string]any{"int": map[string]any{"maxNodes": 0, "nodeCount": 3, "node-count": 5},
		"bool": map[string]any{"autoscale": false, "private": true}, "string": map[string]any{"zone": "z1"},
		"string_slice": map[string]any{"tags": []any{"a", "b"}}})
	want = map[string]any{"int_ptr": "0", "bool_ptr": "false", "int": "5", "bool": "true", "string": "z1", "slice": "2/2"}
	for k, v := range want {
		if set[k] != v {
			t.Errorf("set %s = %v, want %v (all %v)", k, set[k], v, set)
		}
	}
	bad := luatest.Call(t, rt, "opt", "create", map[string]any{"options": map[string]any{"string": map[string]any{"bad": "float"}}})
	if bad.Status != 1 || !strings.Contains(bad.Message, `opt.lua:9: option: unknown option type "float"`) {
		t.Fatalf("unknown type: %+v", bad)
	}
}

// TestHostSettings checks a type's "host" object: checked against its
// kind's shape at load, handed to adapters in TypeInfo.Host, refused for
// kinds that take none, and a setting that makes a hook required
// (cloudprovider uid_tagging: migrate_uid) refusing the type at the
// setting's line.
func TestHostSettings(t *testing.T) {
	dir := t.TempDir()
	mc := `%[1]s = require("loom").CloudProvider:extend("%[1]s")
function %[1]s:get(req) return {} end
function %[1]s:create(req) return {} end
function %[1]s:cleanup(req) return true end
`
	writeKind(t, dir, "cloudprovider", "tagged", "Tagged", fmt.Sprintf(mc, "Tagged")+"function Tagged:migrate_uid(req) end\n",
		map[string]any{"host": map[string]any{"uid_tagging": true, "config_vars": map[string]any{"token": map[string]any{"type": "string", "env": "T"}}}})
	writeKind(t, dir, "cloudprovider", "lazy", "Lazy", fmt.Sprintf(mc, "Lazy"), map[string]any{"host": map[string]any{"uid_tagging": true}})
	writeKind(t, dir, "cloudprovider", "typo", "Typo", fmt.Sprintf(mc, "Typo"), map[string]any{"host": map[string]any{"uid_taging": true}})
	writeKind(t, dir, "cloudprovider", "badvar", "Badvar", fmt.Sprintf(mc, "Badvar"),
		map[string]any{"host": map[string]any{"config_vars": map[string]any{"token": map[string]any{"type": "int"}}}})
	writeKind(t, dir, "clusterdriver", "drvh", "Drvh", driverLua, map[string]any{"host": map[string]any{}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	byType := map[string]*runtime.LoadError{}
	for _, e := range rt.LoadErrors() {
		byType[e.Type] = e
		if e.Type == "" {
			byType[e.Plugin] = e
		}
	}
	if e := byType["lazy"]; e == nil || e.Line == 0 || !strings.HasSuffix(e.File, "lazy.json") ||
		!strings.Contains(e.Message, "cloudprovider Lazy sets host.uid_tagging, so it must define migrate_uid") ||
		!strings.Contains(e.Message, "define Lazy:migrate_uid(req), or set host.uid_tagging to false") {
		t.Errorf("lazy: %v", e)
	} else if data, _ := os.ReadFile(e.File); !strings.Contains(strings.Split(string(data), "\n")[e.Line-1], `"uid_tagging"`) {
		t.Errorf("lazy: line %d of %s is not the setting's:\n%s", e.Line, e.File, data)
	}
	for name, want := range map[string]string{
		"typo":   `host: unknown key "uid_taging"`,
		"badvar": `host.config_vars.token.type: "int" is not one of string, bool`,
		"drvh":   `"host": clusterdriver types take no host settings`,
	} {
		if e := byType[name]; e == nil || !strings.Contains(e.Error(), want) {
			t.Errorf("%s: %v, want %q", name, e, want)
		}
	}
	var got map[string]any
	for _, ti := range rt.Types() {
		if ti.Name == "tagged" {
			got = ti.Host
		}
	}
	if got["uid_tagging"] != true || got["config_vars"].(map[string]any)["token"].(map[string]any)["env"] != "T" {
		t.Fatalf("TypeInfo.Host: %v", got)
	}
	if len(rt.Types()) != 1 {
		t.Fatalf("types: %+v", rt.Types())
	}
}

// TestCallSecretsAndHostFuncs checks CallRequest.Secrets (values the host
// knows are secret, redacted from the call's messages) and CallRequest.Host
// (Go functions the hook calls as self.host.<name>).
func TestCallSecretsAndHostFuncs(t *testing.T) {
	dir := t.TempDir()
	writeKind(t, dir, "cloudprovider", "hf", "Hf", `
Hf = require("loom").CloudProvider:extend("Hf")
function Hf:get(req)
  local n = req.machine.metadata.name
  if n == "leak" then return nil, "token " .. req.machine.metadata.annotations.k .. " rejected" end
  if n == "nohost" then return { name = tostring(self.host) } end
  local out = self.host.echo({ n = 3, list = { "a", "b" }, name = n })
  if n == "fail" then self.host.fail({}) end
  if n == "catch" then
    local ok, err = pcall(self.host.fail, {})
    return { name = (ok and "ok" or err.kind) .. ":" .. tostring(err.message) }
  end
  return { name = out.name .. "/" .. out.n .. "/" .. #out.list .. "/" .. tostring(self.host.none()) }
end
function Hf:create(req) return {} end
function Hf:cleanup(req) return true end
`, nil)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	var seen any
	host := map[string]runtime.HostFunc{
		"echo": func(ctx context.Context, arg any) (any, error) {
			if ctx.Err() != nil {
				t.Errorf("echo: context done")
			}
			seen = arg
			return arg, nil
		},
		"none": func(context.Context, any) (any, error) { return nil, nil },
		"fail": func(context.Context, any) (any, error) {
			return nil, &runtime.CallError{Class: runtime.ClassTerminal, Reason: "InvalidConfiguration", Message: "forbidden by RBAC"}
		},
	}
	call := func(name string, c *runtime.CallRequest) *runtime.CallResult {
		t.Helper()
		in, _ := json.Marshal(map[string]any{"machine": map[string]any{"metadata": map[string]any{"name": name, "annotations": map[string]any{"k": "s3cr3t-t0ken"}}}})
		c.Type, c.Hook, c.Input = "hf", "get", in
		res, err := rt.Call(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := call("ok", &runtime.CallRequest{Host: host})
	if res.Status != 0 || res.Result.(map[string]any)["name"] != "ok/3/2/nil" {
		t.Fatalf("echo: %+v %+v", res, res.Error)
	}
	if m, _ := seen.(map[string]any); m["n"] != float64(3) || len(m["list"].([]any)) != 2 {
		t.Fatalf("echo's argument in Go: %#v", seen)
	}
	// A host function's terminal error keeps its class; caught, it is a
	// table with kind "host".
	res = call("fail", &runtime.CallRequest{Host: host})
	if res.Status != 1 || res.Error.Class != "terminal" || res.Error.Reason != "InvalidConfiguration" || !strings.Contains(res.Message, "self.host.fail: forbidden by RBAC") {
		t.Fatalf("fail: %+v %+v", res, res.Error)
	}
	if res = call("catch", &runtime.CallRequest{Host: host}); res.Status != 0 || res.Result.(map[string]any)["name"] != "host:self.host.fail: forbidden by RBAC" {
		t.Fatalf("catch: %+v %+v", res, res.Error)
	}
	// Without Host, self.host is nil; the next call on the same VM does
	// not see the previous call's functions.
	if res = call("nohost", &runtime.CallRequest{}); res.Status != 0 || res.Result.(map[string]any)["name"] != "nil" {
		t.Fatalf("nohost: %+v %+v", res, res.Error)
	}
	// Secrets: the value is redacted from the message.
	res = call("leak", &runtime.CallRequest{Secrets: []string{"s3cr3t-t0ken"}})
	if res.Status != 1 || strings.Contains(res.Message, "s3cr3t-t0ken") || !strings.Contains(res.Message, "token [REDACTED] rejected") {
		t.Fatalf("leak: %+v", res)
	}
	if res = call("leak", &runtime.CallRequest{}); !strings.Contains(res.Message, "s3cr3t-t0ken") {
		t.Fatalf("leak without Secrets: %+v (the test's premise: nothing else redacts it)", res)
	}
}
