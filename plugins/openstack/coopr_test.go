package openstack_test

// Coopr's own fog_provider.json, unchanged and in Coopr's folder layout
// (providers/fog_provider/), served by openstack.lua (its class
// FogProviderOpenstack) for the openstack type and its class
// FogProviderRackspace for the rackspace type; the four other fog types
// are stand-ins here (aws and google have plugins of their own). Coopr's
// fields drive a node's life against the fake cloud, its Keystone v2 auth
// URL included, and a rackspace node's life against the fake's Rackspace
// identity service.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	timeb "github.com/loomrt/loom/bindings/time"
	"github.com/loomrt/loom/internal/cloudfake/openstackfake"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const otherFogClasses = `
local loom = require("loom")
for _, name in ipairs({ "FogProviderAWS", "FogProviderDigitalOcean", "FogProviderGoogle", "FogProviderJoyent" }) do
  local cls = loom.Provider:extend(name)
  local function refuse(self) self:fail(name .. " is a stand-in in this test") end
  cls.create, cls.confirm, cls.delete = refuse, refuse, refuse
  _G[name] = cls
end
`

func TestCooprFogDefinition(t *testing.T) {
	cloud := openstackfake.Start(openstackfake.Options{Username: "coopr", Password: password, Project: "admin",
		KeyPairs: []string{"coopr"}, APIKeys: map[string]string{"coopr-rax": password}})
	t.Cleanup(cloud.Close)
	checkConformance(t, cloud)

	plugins := t.TempDir()
	dir := filepath.Join(plugins, "providers", "fog_provider")
	def, err := os.ReadFile(filepath.Join("..", "..", "runtime", "testdata", "coopr-definitions", "fog_provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	luatest.WriteFile(t, filepath.Join(dir, "fog_provider.json"), string(def))
	for _, f := range []string{"openstack.lua", "lib/openstack/client.lua", "lib/openstack/util.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		luatest.WriteFile(t, filepath.Join(dir, f), string(src))
	}
	luatest.WriteFile(t, filepath.Join(dir, "others.lua"), otherFogClasses)
	logs := &luatest.LogBuffer{}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: plugins, WorkDir: t.TempDir(), Logger: logs.Logger(),
		Bindings: bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.New(), httpb.New(httpb.Options{RetryDelay: time.Millisecond}))})

	// Coopr's fields, with Coopr's Keystone v2 URL form; wait_for_ssh and
	// poll_interval (Loom fields Coopr's definition lacks, which a task may
	// still carry) keep CONFIRM off the fake's addresses and quick.
	fields := map[string]any{"api_user": "coopr", "api_password": password, "openstack_tenant": "admin",
		"openstack_auth_url": strings.TrimSuffix(cloud.AuthURL(), "/v3") + "/v2.0/tokens",
		"ssh_keypair":        "coopr", "ssh_key_resource": "coopr.pem", "floating_ip": "true", "wait_for_ssh": "false",
		"poll_interval": "0.01"}
	runAs := func(typ string, fields map[string]any, name string, config map[string]any) *runtime.Result {
		t.Helper()
		b := task(name, fields, config)
		var doc map[string]any
		json.Unmarshal(b, &doc)
		doc["config"].(map[string]any)["provider"].(map[string]any)["providertype"] = typ
		b, _ = json.Marshal(doc)
		return luatest.Run(t, rt, b)
	}
	run := func(name string, config map[string]any) *runtime.Result {
		t.Helper()
		return runAs("openstack", fields, name, config)
	}
	c := run("CREATE", nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	servers := cloud.Servers()
	if len(servers) != 1 || servers[0].KeyName != "coopr" || servers[0].Groups[0] != "default" {
		t.Fatalf("servers %+v", servers)
	}
	conf := run("CONFIRM", map[string]any{"providerid": id, "ssh-auth": c.Result["ssh-auth"]})
	mustStatus(t, conf, 0)
	if conf.IPAddresses["access_v4"] != "203.0.113.10" {
		t.Fatalf("ipaddresses %v", conf.IPAddresses)
	}
	mustStatus(t, run("DELETE", map[string]any{"providerid": id}), 0)
	if len(cloud.Servers()) != 0 || len(cloud.FloatingIPs()) != 0 {
		t.Fatalf("left: %+v %+v", cloud.Servers(), cloud.FloatingIPs())
	}
	// Coopr's required set: without ssh_keypair the server refuses the create.
	delete(fields, "ssh_keypair")
	bad := run("CREATE", nil)
	if bad.Status == 0 || !strings.Contains(bad.Message, "missing required admin fields for openstack: ssh_keypair") {
		t.Fatalf("CREATE without ssh_keypair: %d %s", bad.Status, bad.Message)
	}

	// Coopr's rackspace type: its three required admin fields (the region
	// as Coopr's select offers it) and the identity URL fog would take.
	rax := map[string]any{"api_user": "coopr-rax", "api_password": password, "rackspace_region": "regionone",
		"rackspace_auth_url": cloud.URL() + "/identity/v2.0", "ssh_keypair": "coopr", "wait_for_ssh": "false", "poll_interval": "0.01"}
	c = runAs("rackspace", rax, "CREATE", nil)
	mustStatus(t, c, 0)
	id = c.Result["providerid"].(string)
	mustStatus(t, runAs("rackspace", rax, "CONFIRM", map[string]any{"providerid": id, "ssh-auth": c.Result["ssh-auth"]}), 0)
	mustStatus(t, runAs("rackspace", rax, "DELETE", map[string]any{"providerid": id}), 0)
	if len(cloud.Servers()) != 0 {
		t.Fatalf("rackspace servers left: %+v", cloud.Servers())
	}
	if n := len(cloud.Exchanges("POST", "/tokens")); n != 1 {
		t.Errorf("%d Rackspace identity requests, want 1", n)
	}
	delete(rax, "rackspace_region")
	bad = runAs("rackspace", rax, "CREATE", nil)
	if bad.Status == 0 || !strings.Contains(bad.Message, "rackspace_region") {
		t.Fatalf("CREATE without rackspace_region: %d %s", bad.Status, bad.Message)
	}
	for _, p := range cloud.Problems() {
		t.Errorf("fake cloud: %s", p)
	}
}
