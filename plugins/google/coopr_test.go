package google_test

// Coopr's own fog_provider.json, unchanged and in Coopr's folder layout
// (providers/fog_provider/), served by google.lua (whose table is also
// FogProviderGoogle, the class that definition names) for the google type; the
// other fog types are stand-ins here. Coopr's fields drive a node's life
// against the fake cloud.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/cloudfake/gcefake"
	"github.com/loomrt/loom/runtime/luatest"
)

const otherFogClasses = `
local loom = require("loom")
for _, name in ipairs({ "FogProviderAWS", "FogProviderDigitalOcean", "FogProviderJoyent", "FogProviderOpenstack", "FogProviderRackspace" }) do
  local cls = loom.Provider:extend(name)
  local function refuse(self) self:fail(name .. " is a stand-in in this test") end
  cls.create, cls.confirm, cls.delete = refuse, refuse, refuse
  _G[name] = cls
end
`

// pluginsDir is a plugins dir holding the plugin as shipped, or (coopr)
// its Lua under Coopr's definition.
func pluginsDir(t *testing.T, coopr bool) string {
	t.Helper()
	if !coopr {
		return copyPlugin(t)
	}
	plugins := t.TempDir()
	dir := filepath.Join(plugins, "providers", "fog_provider")
	def, err := os.ReadFile(filepath.Join("..", "..", "runtime", "testdata", "coopr-definitions", "fog_provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	luatest.WriteFile(t, filepath.Join(dir, "fog_provider.json"), string(def))
	err = filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, "_test.lua") {
			return err
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		luatest.WriteFile(t, filepath.Join(dir, p), string(src))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	luatest.WriteFile(t, filepath.Join(dir, "others.lua"), otherFogClasses)
	return plugins
}

func TestCooprFogDefinition(t *testing.T) {
	e := newEnv(t, envOptions{coopr: true})
	e.sshKeyResource("coopr.pem")
	// Coopr's fields (its definition's defaults fill the disks: a 200 GB
	// data disk); wait_for_ssh, poll_interval and host_key_wait are Loom
	// fields Coopr's definition lacks, which a task may still carry.
	f := map[string]any{"google_project": "loom-test", "google_client_email": gcefake.Email, "api_key_resource": "sa.json",
		"ssh_key_resource": "coopr.pem", "ssh_user": "coopr", "zone_name": zone,
		"wait_for_ssh": "false", "poll_interval": "1", "host_key_wait": "10"}
	mustStatus(t, e.create(f, nil), 0)
	ins := e.fake.Exchanges("compute.instances.insert")
	if len(ins) != 1 {
		t.Fatalf("%d inserts", len(ins))
	}
	disks := body(t, ins[0])["disks"].([]any)
	if len(disks) != 2 || disks[1].(map[string]any)["initializeParams"].(map[string]any)["diskSizeGb"] != "200" {
		t.Errorf("disks %v: want Coopr's default 200 GB data disk", disks)
	}
	res := e.confirm(instName, f)
	mustStatus(t, res, 0)
	if len(res.IPAddresses) != 2 || res.Result["ssh_host_keys"] == nil {
		t.Errorf("CONFIRM: ipaddresses %v, result %v", res.IPAddresses, res.Result)
	}
	mustStatus(t, e.delete(instName, f, nil), 0)
	if len(e.fake.Instances()) != 0 {
		t.Errorf("instances after DELETE: %v", e.fake.Instances())
	}
}
