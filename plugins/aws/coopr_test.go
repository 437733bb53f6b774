package aws_test

// Coopr's own fog_provider.json, unchanged and in Coopr's folder layout
// (providers/fog_provider/), served by aws.lua (whose table is also
// FogProviderAWS, the class that definition names) for the aws type; the
// other fog types are stand-ins here. Coopr's fields drive a node's life
// against the fake cloud.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/cloudfake/ec2fake"
	"github.com/loomrt/loom/runtime/luatest"
)

const otherFogClasses = `
local loom = require("loom")
for _, name in ipairs({ "FogProviderDigitalOcean", "FogProviderGoogle", "FogProviderJoyent", "FogProviderOpenstack", "FogProviderRackspace" }) do
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
	e := newEnv(t, envOptions{coopr: true, fake: ec2fake.Options{ConsoleAfter: 1}})
	// Coopr's fields; wait_for_ssh, poll_interval and host_key_wait are
	// Loom fields Coopr's definition lacks, which a task may still carry.
	f := map[string]any{"api_user": ec2fake.AccessKeyID, "api_password": ec2fake.SecretAccessKey, "aws_region": "us-east-1",
		"ssh_keypair": ec2fake.KeyPair, "ssh_key_resource": "coopr.pem", "security_groups": "default",
		"wait_for_ssh": "false", "poll_interval": "1", "host_key_wait": "10"}
	c := e.create(f, nil)
	mustStatus(t, c, 0)
	run := e.params("RunInstances")
	if len(run) != 1 || run[0].Get("BlockDeviceMapping.1.Ebs.VolumeSize") != "10" || run[0].Get("BlockDeviceMapping.1.Ebs.VolumeType") != "standard" {
		t.Errorf("RunInstances %v: want Coopr's defaults (root EBS 10 GB, standard)", run)
	}
	id := c.Result["providerid"].(string)
	res := e.confirm(id, f)
	mustStatus(t, res, 0)
	if len(res.IPAddresses) != 2 || res.Result["ssh_host_keys"] == nil {
		t.Errorf("CONFIRM: ipaddresses %v, result %v", res.IPAddresses, res.Result)
	}
	mustStatus(t, e.delete(id, f, nil), 0)
	if len(e.fake.Live()) != 0 {
		t.Errorf("live instances after DELETE: %v", e.fake.Live())
	}
	// Coopr's required sets: without a key pair the definition refuses CREATE.
	delete(f, "ssh_keypair")
	if res := e.create(f, nil); res.Status == 0 || !strings.Contains(res.Message, "ssh_keypair") {
		t.Errorf("CREATE without Coopr's required ssh_keypair: status %d, %s", res.Status, res.Message)
	}
}
