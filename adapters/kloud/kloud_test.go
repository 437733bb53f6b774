package kloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/loomrt/loom/adapters/kloud"
	"github.com/loomrt/loom/adapters/kloud/kloudtest"
	"github.com/loomrt/loom/adapters/kloud/mirror/github.com/koding/kite"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack/provider"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

func examples(t *testing.T) *runtime.Runtime {
	t.Helper()
	return luatest.NewRuntime(t, runtime.Options{
		PluginsDir: filepath.Join("..", "..", "examples", "kinds"),
		Bindings:   std.New(std.Options{}),
	})
}

// register registers the type and unregisters it when the test ends.
func register(t *testing.T, rt *runtime.Runtime, name string) *kloud.Provider {
	t.Helper()
	p, err := kloud.Register(rt, name, kloud.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { provider.Unregister(p.Name) })
	return p
}

// The user's stack: two machines; the database's script tries to read
// the credential's token, which kloud must not let through.
const userTemplate = `{
  "resource": {"kloudlike_instance": {
    "web": {"size": "${var.web_size}", "koding_always_on": true},
    "db": {"user_data": "echo db ${var.kloudlike_token} > /etc/motd"}
  }},
  "variable": {"web_size": {"default": "medium"}}
}`

// TestKloudStack drives the kloudlike example through the adapter the way
// kloud's handlers do, against a fake of its cloud whose machines boot
// Klient with the kite key their user data carries: register, describe,
// authenticate (one good credential, one rejected), apply before
// bootstrap (refused), bootstrap, apply a two-machine stack, info, stop,
// start (twice), a machine gone behind kloud's back, destroy, and the
// bootstrap destroyed.
func TestKloudStack(t *testing.T) {
	c := newCloud(t, "tok-123456")
	tf := newTerraform(t)
	rt := examples(t)
	p := register(t, rt, "kloudlike")
	ctx := context.Background()

	// What provider.Register recorded.
	if p.Name != "kloudlike" || p.ResourceName != "instance" || p.NoCloudInit || p.Machine == nil || p.Stack == nil || p.Schema == nil {
		t.Fatalf("provider: %+v", p)
	}
	k := &kloudtest.Kloud{Provider: p, Username: "alice", Group: "team", Terraformer: tf, Klients: c}
	desc := k.Describe()
	wantCred := []stack.Value{{Name: "api_url", Type: "string", Label: "API URL"}, {Name: "token", Type: "string", Label: "Token", Secret: true}}
	if desc == nil || !reflect.DeepEqual(desc.Credential, wantCred) ||
		!reflect.DeepEqual(desc.Bootstrap, []stack.Value{{Name: "network_id", Type: "string", Label: "Network", ReadOnly: true}}) ||
		!reflect.DeepEqual(desc.UserData, []string{"kloudlike_instance", "*", "user_data"}) || !desc.CloudInit {
		t.Fatalf("credential.describe: %+v", desc)
	}

	// authenticate: the good credential is verified, the rejected one
	// says why with kloud's code, and the loop goes on.
	if err := k.AddCredential("cred-1", "my cloud", map[string]any{"api_url": c.srv.URL, "token": "tok-123456"}); err != nil {
		t.Fatal(err)
	}
	if err := k.AddCredential("cred-bad", "old token", map[string]any{"api_url": c.srv.URL, "token": "tok-revoked"}); err != nil {
		t.Fatal(err)
	}
	resp, err := k.Authenticate("cred-bad", "cred-1")
	if err != nil {
		t.Fatal(err)
	}
	if !resp["cred-1"].Verified || resp["cred-bad"].Verified || !strings.Contains(resp["cred-bad"].Message, "GET /whoami: 401 (error code: 414)") {
		t.Fatalf("authenticate: %+v %+v", resp["cred-1"], resp["cred-bad"])
	}
	if strings.Contains(resp["cred-bad"].Message, "tok-revoked") {
		t.Fatalf("the token leaked: %s", resp["cred-bad"].Message)
	}

	// apply before bootstrap: the plugin refuses with kloud's code 414.
	err = k.Apply("stack-1", "cred-1", userTemplate, nil)
	var ke *kite.Error
	if !errors.As(err, &ke) || ke.CodeVal != "414" || !strings.Contains(err.Error(), "not bootstrapped") {
		t.Fatalf("apply before bootstrap: %v", err)
	}

	// bootstrap: the network template is applied under kloud's default
	// key, and its output decoded into the credential's bootstrap.
	if err := k.Bootstrap(false, "cred-1"); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	cred, err := k.Credential("cred-1")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(cred.Bootstrap); string(b) != `{"network_id":"net-1"}` || len(tf.applied["kloudlike-team-cred-1"]) != 1 {
		t.Fatalf("bootstrap stored %s; applied %v", b, tf.applied)
	}

	// apply a stack of two machines.
	if err := k.Apply("stack-1", "cred-1", userTemplate, map[string]string{"web_size": "large"}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	applied := tf.contents["team-stack-1"]
	var tpl struct {
		Provider map[string]map[string]string         `json:"provider"`
		Resource map[string]map[string]map[string]any `json:"resource"`
		Variable map[string]map[string]any            `json:"variable"`
	}
	if err := json.Unmarshal([]byte(applied), &tpl); err != nil {
		t.Fatalf("applied template: %v\n%s", err, applied)
	}
	web, db := tpl.Resource["kloudlike_instance"]["web"], tpl.Resource["kloudlike_instance"]["db"]
	if web["network_id"] != "net-1" || web["size"] != "${var.web_size}" || db["size"] != "small" {
		t.Fatalf("the plugin's rewrite: %s", applied)
	}
	// Klient's cloud-init, with each machine's kite key, around the
	// user's script; the token shadowed in the resources, kept for the
	// provider block.
	for name, vm := range map[string]map[string]any{"web": web, "db": db} {
		ud, _ := vm["user_data"].(string)
		if !strings.HasPrefix(ud, "#cloud-config\n") || !strings.Contains(ud, "${lookup(var.kitekeys_"+name+", count.index)}") ||
			!strings.Contains(ud, provider.KlientInstallURL) {
			t.Fatalf("%s user data:\n%s", name, ud)
		}
		if keys, _ := tpl.Variable["kitekeys_"+name]["default"].(map[string]any); keys["0"] == nil {
			t.Fatalf("no kite key variable for %s: %v", name, tpl.Variable)
		}
	}
	dbud := db["user_data"].(string)
	if !strings.Contains(dbud, "echo db FORBIDDEN > /etc/motd") || strings.Contains(dbud, "kloudlike_token") {
		t.Fatalf("db's script still reads the token:\n%s", dbud)
	}
	if _, ok := web["koding_always_on"]; ok {
		t.Fatalf("koding_always_on reached the cloud: %v", web)
	}
	if tpl.Provider["kloudlike"]["token"] != "${var.kloudlike_token}" {
		t.Fatalf("provider block: %v", tpl.Provider)
	}
	// The machines booted with their kite keys, kloud dialed their
	// Klients, and stored each machine's metadata from its attributes.
	for label, id := range map[string]string{"web": "m-3", "db": "m-2"} {
		doc, ok := k.MachineDoc(label)
		if !ok || doc.Status.State != "Running" || doc.Meta["id"] != id || doc.RegisterURL == "" || doc.IpAddress == "" {
			t.Fatalf("machine %s: %+v", label, doc)
		}
	}
	if m := c.machine("m-3"); m["size"] != "large" || m["network_id"] != "net-1" {
		t.Fatalf("web in the cloud: %v", m)
	}
	if doc, _ := k.MachineDoc("web"); doc.Meta["alwaysOn"] != true || doc.Meta["size"] != "large" {
		t.Fatalf("web's meta: %v", doc.Meta)
	}

	// info, stop, start.
	if info, err := k.Info(ctx, "db"); err != nil || info.State != machinestate.Running {
		t.Fatalf("info: %+v %v", info, err)
	}
	if err := k.Stop(ctx, "db"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if doc, _ := k.MachineDoc("db"); doc.Status.State != "Stopped" || c.machine("m-2")["state"] != "stopped" {
		t.Fatalf("after stop: %+v, cloud %v", doc.Status, c.machine("m-2"))
	}
	if info, err := k.Info(ctx, "db"); err != nil || info.State != machinestate.Stopped {
		t.Fatalf("info after stop: %+v %v", info, err)
	}
	if err := k.Start(ctx, "db"); err != nil {
		t.Fatalf("start: %v", err)
	}
	if doc, _ := k.MachineDoc("db"); doc.Status.State != "Running" || doc.Meta["ip"] != "10.10.0.2" {
		t.Fatalf("after start: %+v %v", doc.Status, doc.Meta)
	}
	// kloud calls Info first: a running machine is not started again.
	if err := k.Start(ctx, "db"); err != nil || c.count("POST /machines/m-2/start") != 1 {
		t.Fatalf("start again: %v, %d start calls", err, c.count("POST /machines/m-2/start"))
	}

	// A machine deleted behind kloud's back: kloud's machine-not-found.
	c.mu.Lock()
	delete(c.machines, "m-3")
	c.mu.Unlock()
	_, err = k.Info(ctx, "web")
	if !errors.As(err, &ke) || ke.CodeVal != "106" || !strings.Contains(ke.Message, "kloudlike info: machine m-3 not found") {
		t.Fatalf("info of a deleted machine: %v", err)
	}

	// destroy: Terraform destroys the stack's key, the documents go.
	if err := k.Destroy("stack-1"); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if _, ok := k.MachineDoc("db"); ok || c.machine("m-2") != nil {
		t.Fatal("db survived destroy")
	}
	if err := k.Start(ctx, "db"); !errors.As(err, &ke) || ke.CodeVal != "106" {
		t.Fatalf("start after destroy: %v", err)
	}
	// And the bootstrap: the network goes, the bootstrap is reset.
	if err := k.Bootstrap(true, "cred-1"); err != nil {
		t.Fatalf("bootstrap destroy: %v", err)
	}
	cred, _ = k.Credential("cred-1")
	if b, _ := json.Marshal(cred.Bootstrap); string(b) != `{}` || len(c.networks) != 0 {
		t.Fatalf("after bootstrap destroy: %s, networks %v", b, c.networks)
	}
}

// TestKloudValidators checks that the plugin's valid_* hooks run where
// kloud calls a Go value's Valid(): valid_metadata when kloud builds a
// machine (a machine whose stored id the plugin refuses cannot be
// started), valid_credential before each stack method.
func TestKloudValidators(t *testing.T) {
	c := newCloud(t, "tok-123456")
	rt := examples(t)
	p := register(t, rt, "kloudlike")
	k := &kloudtest.Kloud{Provider: p, Username: "alice", Group: "team", Terraformer: newTerraform(t), Klients: c}
	k.AddCredential("cred-1", "", map[string]any{"api_url": c.srv.URL, "token": "tok-123456"})
	if err := k.Bootstrap(false, "cred-1"); err != nil {
		t.Fatal(err)
	}
	if err := k.Apply("s", "cred-1", `{"resource": {"kloudlike_instance": {"odd": {}}}}`, nil); err != nil {
		t.Fatal(err)
	}
	if doc, _ := k.MachineDoc("odd"); doc.Meta["id"] != "x-2" {
		t.Fatalf("odd's meta: %v", doc.Meta)
	}
	err := k.Start(context.Background(), "odd")
	if err == nil || !strings.Contains(err.Error(), "hook valid_metadata for odd") || !strings.Contains(err.Error(), "machine id x-2 is not a kloudlike id") {
		t.Fatalf("start with a bad machine id: %v", err)
	}
	// A credential the plugin refuses never reaches its stack hooks.
	k.AddCredential("cred-empty", "", map[string]any{"api_url": c.srv.URL})
	resp, err := k.Authenticate("cred-empty")
	if err != nil || resp["cred-empty"].Verified || !strings.Contains(resp["cred-empty"].Message, "api_url and token are required") {
		t.Fatalf("authenticate an empty credential: %+v %v", resp["cred-empty"], err)
	}
	if c.count("GET /whoami") != 0 {
		t.Fatal("verify_credential ran on a credential valid_credential refused")
	}
	if err := k.Bootstrap(false, "cred-empty"); err == nil || !strings.Contains(err.Error(), "api_url and token are required") {
		t.Fatalf("bootstrap with an empty credential: %v", err)
	}
}

// writePlugin writes a kloudproviders plugin into a new plugins folder
// and loads it.
func writePlugin(t *testing.T, name, class, src string, host map[string]any) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	extra := map[string]any{"permissions": map[string]any{"http": []any{"127.0.0.1"}}}
	if host != nil {
		extra["host"] = host
	}
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: name, Family: "kloudprovider", Classname: class,
		Files: map[string]string{name + ".lua": src}, Extra: extra})
	return luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Bindings: std.New(std.Options{})})
}

// A provider for a cloud without cloud-init, registered as "kloudlike"
// (the fakes' resource names): it hands each machine its kite key.
const noCloudInit = `
local json = require("loom.json")
local http = require("loom.http")
Lite = require("loom").KloudProvider:extend("Lite")
function Lite:apply_template(req)
  local tpl = json.decode(req.template.content)
  for name, inst in pairs(tpl.resource.kloudlike_instance) do
    -- one key per machine: kite_keys by label, or the kitekeys_<name>
    -- variable by count.index
    inst.kite_key = req.kite_keys[name] or ("${lookup(var.kitekeys_" .. name .. ", count.index)}")
  end
  tpl.provider = { kloudlike = { api_url = "${var.kloudlike_api_url}", token = "${var.kloudlike_token}" } }
  return { content = json.encode(tpl) }
end
function Lite:info(req)
  local c = req.credential.credential
  local resp = http.request("GET", c.api_url .. "/machines/" .. req.metadata.id, { bearer = c.token })
  if resp.status == 404 then return nil, { not_found = true, message = "gone" } end
  return { state = resp:json().state == "running" and "Running" or "Stopped" }
end
`

// TestKloudNoCloudInit checks host.no_cloud_init: kloud builds no
// cloud-init, apply_template gets a kite key per machine (count
// expanded), and kloud dials the Klients those keys start. Without a
// schema hook, kloud's defaults apply: a free-form credential (its
// token-like values still shadowed), no bootstrap, the machine's
// attributes as its metadata.
func TestKloudNoCloudInit(t *testing.T) {
	c := newCloud(t, "tok-123456")
	tf := newTerraform(t)
	rt := writePlugin(t, "lite", "Lite", noCloudInit, map[string]any{"provider_name": "kloudlike", "no_cloud_init": true, "resource_name": "instance"})
	p := register(t, rt, "lite")
	if p.Name != "kloudlike" || !p.NoCloudInit || p.Schema.NewCredential != nil || p.Schema.NewBootstrap != nil || p.Schema.NewMetadata != nil {
		t.Fatalf("provider: %+v %+v", p, p.Schema)
	}
	k := &kloudtest.Kloud{Provider: p, Username: "bob", Group: "team", Terraformer: tf, Klients: c}
	if d := k.Describe(); d.CloudInit || len(d.Credential) != 0 || len(d.Bootstrap) != 0 {
		t.Fatalf("describe: %+v", d)
	}
	k.AddCredential("cred-1", "", map[string]any{"api_url": c.srv.URL, "token": "tok-123456"})
	// verify_credential is absent: the contract's "not implemented".
	resp, _ := k.Authenticate("cred-1")
	if resp["cred-1"].Verified || !strings.Contains(resp["cred-1"].Message, "not implemented") {
		t.Fatalf("authenticate: %+v", resp["cred-1"])
	}
	tpl := `{"resource": {"kloudlike_instance": {"app": {"count": 2, "user_data": "${var.kloudlike_token}"}}}}`
	if err := k.Apply("s", "cred-1", tpl, nil); err != nil {
		t.Fatalf("apply: %v", err)
	}
	applied := tf.contents["team-s"]
	if strings.Contains(applied, "#cloud-config") || !strings.Contains(applied, `"kitekeys_app":{"default":{"0":"kitekey.bob.`) {
		t.Fatalf("cloud-init built for a cloud without it, or no kite keys by count.index:\n%s", applied)
	}
	// The user data's ${var.kloudlike_token} is shadowed all the same.
	if !strings.Contains(applied, `"user_data":"FORBIDDEN"`) {
		t.Fatalf("the token variable is not shadowed:\n%s", applied)
	}
	for _, label := range []string{"app.0", "app.1"} {
		doc, ok := k.MachineDoc(label)
		if !ok || doc.Status.State != "Running" || doc.RegisterURL == "" || doc.Meta["id"] == nil || doc.Meta["ip"] == nil {
			t.Fatalf("%s: %+v", label, doc)
		}
	}
	if info, err := k.Info(context.Background(), "app.1"); err != nil || info.State != machinestate.Running {
		t.Fatalf("info: %+v %v", info, err)
	}
	// start is absent: the contract's "not implemented", once Info says
	// the machine needs starting.
	c.mu.Lock()
	c.machines["m-2"]["state"] = "stopped"
	c.mu.Unlock()
	if err := k.Start(context.Background(), "app.1"); err == nil || !strings.Contains(err.Error(), "not implemented") {
		t.Fatalf("start: %v", err)
	}
	if doc, _ := k.MachineDoc("app.1"); doc.Status.State != "Running" {
		t.Fatalf("a failed start changed the state: %+v", doc.Status)
	}
}

// TestKloudSchemaTypes checks the schema's field types as kloud sees
// them: credential.describe (integer, file, enum with its values,
// duration, object, labels, secret, readOnly), and the values the hooks
// get after kloud decoded the stored credential into the struct built
// from the schema (a file's bytes as a string, a duration as text).
func TestKloudSchemaTypes(t *testing.T) {
	rt := writePlugin(t, "typed", "Typed", `
local json = require("loom.json")
Typed = require("loom").KloudProvider:extend("Typed")
function Typed:schema()
  return { credential = {
    { name = "region", type = "enum", values = { { title = "Frankfurt", value = "fra1" }, { title = "Paris", value = "par1" } } },
    { name = "disks", type = "integer", read_only = true },
    { name = "key_file", type = "file", label = "Key file", secret = true },
    { name = "timeout", type = "duration" },
    { name = "tags", type = "object" },
  } }
end
function Typed:verify_credential(req)
  return nil, json.encode(req.credential.credential)
end
function Typed:apply_template(req) return req.template end
function Typed:info(req) return { state = "Unknown" } end
`, nil)
	p := register(t, rt, "typed")
	k := &kloudtest.Kloud{Provider: p, Username: "u", Group: "g"}
	want := []stack.Value{
		{Name: "region", Type: "enum", Label: "Region", Values: stack.Enums{{Title: "Frankfurt", Value: "fra1"}, {Title: "Paris", Value: "par1"}}},
		{Name: "disks", Type: "integer", Label: "Disks", ReadOnly: true},
		{Name: "key_file", Type: "file", Label: "Key file", Secret: true},
		{Name: "timeout", Type: "duration", Label: "Timeout"},
		{Name: "tags", Type: "object", Label: "Tags"},
	}
	if d := k.Describe(); !reflect.DeepEqual(d.Credential, want) {
		t.Fatalf("describe:\n got %+v\nwant %+v", d.Credential, want)
	}
	// The store holds JSON as kloud's does: []byte as base64, a duration
	// as nanoseconds.
	k.AddCredential("c", "", map[string]any{"region": "par1", "disks": 3, "key_file": []byte("-----KEY-----"),
		"timeout": 90_000_000_000, "tags": map[string]any{"team": "a"}})
	resp, _ := k.Authenticate("c")
	var got map[string]any
	if err := json.Unmarshal([]byte(strings.TrimPrefix(resp["c"].Message, "")), &got); err != nil {
		// The message is the kindcall error's text: find the JSON in it.
		i := strings.Index(resp["c"].Message, "{")
		if i < 0 || json.Unmarshal([]byte(resp["c"].Message[i:]), &got) != nil {
			t.Fatalf("verify_credential's echo: %q", resp["c"].Message)
		}
	}
	if got["region"] != "par1" || got["disks"] != float64(3) || got["timeout"] != "1m30s" || got["tags"].(map[string]any)["team"] != "a" {
		t.Fatalf("the credential as the hook saw it: %v", got)
	}
	// The secret file's content is redacted from the message.
	if _, ok := got["key_file"]; !ok || strings.Contains(resp["c"].Message, "-----KEY-----") {
		t.Fatalf("key_file: %q", resp["c"].Message)
	}
}

// TestKloudRegisterErrors checks what New and Register refuse.
func TestKloudRegisterErrors(t *testing.T) {
	rt := examples(t)
	register(t, rt, "kloudlike")
	if _, err := kloud.Register(rt, "kloudlike", kloud.Options{}); err == nil || !strings.Contains(err.Error(), `registering kloudlike as provider "kloudlike"`) ||
		!strings.Contains(err.Error(), "Register called twice") {
		t.Fatalf("second Register: %v", err)
	}
	if _, err := kloud.New(rt, "fakecloud", kloud.Options{}); err == nil || !strings.Contains(err.Error(), "cloudprovider type, not a kloudprovider type") {
		t.Fatalf("New(fakecloud): %v", err)
	}
	bad := writePlugin(t, "dup", "Dup", `
Dup = require("loom").KloudProvider:extend("Dup")
function Dup:schema() return { credential = { { name = "a", type = "string" }, { name = "a", type = "integer" } } } end
function Dup:apply_template(req) return req.template end
function Dup:info() return { state = "Unknown" } end
`, nil)
	if _, err := kloud.New(bad, "dup", kloud.Options{}); err == nil || !strings.Contains(err.Error(), `dup: its schema: credential: field "a" is described twice`) {
		t.Fatalf("New(dup): %v", err)
	}
	broken := writePlugin(t, "broken", "Broken", `
Broken = require("loom").KloudProvider:extend("Broken")
function Broken:schema() error("no schema today") end
function Broken:apply_template(req) return req.template end
function Broken:info() return { state = "Unknown" } end
`, nil)
	if _, err := kloud.New(broken, "broken", kloud.Options{}); err == nil || !strings.Contains(err.Error(), "broken: reading its schema") || !strings.Contains(err.Error(), "no schema today") {
		t.Fatalf("New(broken): %v", err)
	}
	// RegisterAll registers every loaded kloudproviders type.
	t.Cleanup(func() { provider.Unregister("typed2") })
	all := writePlugin(t, "typed2", "T2", `
T2 = require("loom").KloudProvider:extend("T2")
function T2:apply_template(req) return req.template end
function T2:info() return { state = "Unknown" } end
`, nil)
	ps, err := kloud.RegisterAll(all, kloud.Options{})
	if err != nil || len(ps) != 1 || ps[0].Name != "typed2" || len(provider.Desc("typed2")) != 1 {
		t.Fatalf("RegisterAll: %v %v", ps, err)
	}
}
