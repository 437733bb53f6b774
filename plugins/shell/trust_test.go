package shell_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	loomrt "github.com/loomrt/loom/runtime"
)

// providers writes a plugin with two provider types, aws and rogue, both
// declaring the ssh_keys resource, and puts the test sshd's key in each
// one's ssh_keys folder of tenant t1 (and in aws's of tenant t2). rogue's
// CREATE tries to overwrite the shell automator's install script.
func (e *env) providers() {
	e.t.Helper()
	dir := filepath.Join(e.plugins, "providers")
	def := map[string]any{
		"name": "providers", "providertypes": []string{"aws", "rogue"},
		"aws":   map[string]any{"name": "aws", "classname": "Aws", "resourceTypes": map[string]any{"ssh_keys": map[string]any{"format": "file", "permissions": "0400"}}},
		"rogue": map[string]any{"name": "rogue", "classname": "Rogue", "resourceTypes": map[string]any{"ssh_keys": map[string]any{"format": "file", "permissions": "0400"}}},
	}
	b, _ := json.Marshal(def)
	lua := `
local fs = require("loom.fs")
Aws = require("loom").Provider:extend("Aws")
Rogue = require("loom").Provider:extend("Rogue")
function Rogue:create(input)
  local ok, err = pcall(fs.write, "../../automatortypes/shell/scripts/install.sh", "#!/bin/sh\necho pwned\n", {mode = "0755"})
  self.result.result.overwrite = ok and "done" or tostring(err.message)
  self.result.status = 0
end
`
	for name, content := range map[string]string{"providers.json": string(b), "providers.lua": lua} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	for _, p := range []string{"t1/providertypes/aws", "t1/providertypes/rogue", "t2/providertypes/aws"} {
		key := filepath.Join(e.work, p, "ssh_keys", "coopr.pem")
		if err := os.MkdirAll(filepath.Dir(key), 0o755); err != nil {
			e.t.Fatal(err)
		}
		if err := os.WriteFile(key, e.srv.KeyPEM, 0o400); err != nil {
			e.t.Fatal(err)
		}
	}
	e.restart()
}

// Issue 10 item 2 through the shell automator and the real sshd: the
// automator logs in with the provider's key when the task names it
// (ssh-auth.identityfile, Coopr's absolute provisioner path included) and
// its provider is config.provider.providertype; a key of a provider the
// task does not name, or of another tenant, is refused before dialling.
// A provider cannot overwrite the automator's scripts. On the old main the
// rogue key logged in and the script was overwritten.
func TestIdentityFileAndScriptsAcrossPlugins(t *testing.T) {
	e := newEnv(t, nil)
	e.providers()
	e.writeWork("scripts/install.sh", "#!/bin/sh\necho installed\n", 0o755)
	provider := map[string]any{"providertype": "aws", "provisioner": map[string]any{}}
	install := func(identityfile string) (*loomrt.Result, string, int) {
		auth := map[string]any{"user": e.srv.NoPasswdUser, "identityfile": identityfile, "port": e.srv.Port}
		before := e.srv.Accepted()
		r := e.run(e.task("INSTALL", map[string]any{"script": "install.sh"}, map[string]any{"ssh-auth": auth, "provider": provider}))
		return r, r.Message + "\n" + r.Stdout, e.srv.Accepted() - before
	}

	for _, ok := range []string{
		"/var/coopr/data/provisioner/work/t1/providertypes/aws/ssh_keys/coopr.pem",
		"../../providertypes/aws/ssh_keys/coopr.pem",
		filepath.Join(e.work, "t1/providertypes/aws/ssh_keys/coopr.pem"),
	} {
		r, out, _ := install(ok)
		if r.Status != 0 || !strings.Contains(out, "installed") {
			t.Fatalf("identityfile %s (the task's provider's declared key): status %d: %s", ok, r.Status, out)
		}
	}
	for _, tc := range []struct{ path, want string }{
		{"../../providertypes/rogue/ssh_keys/coopr.pem", `provider type "rogue", which this task does not name`},
		{"/var/coopr/data/provisioner/work/t2/providertypes/aws/ssh_keys/coopr.pem", `belongs to tenant "t2"`},
		{"../../../t2/providertypes/aws/ssh_keys/coopr.pem", `belongs to tenant "t2"`},
		{"../../providertypes/aws/coopr.pem", `"coopr.pem" is not a resource folder of aws`},
		{"../../providertypes/aws", "not inside a plugin type's resource folder"},
	} {
		r, out, accepted := install(tc.path)
		if r.Status == 0 || !strings.Contains(out, tc.want) || r.Error["kind"] != "permission" || !strings.Contains(out, "Trust model") {
			t.Errorf("identityfile %s: status %d, kind %v, want a permission error with %q: %s", tc.path, r.Status, r.Error["kind"], tc.want, out)
		}
		if accepted != 0 {
			t.Errorf("identityfile %s: sshd accepted %d logins", tc.path, accepted)
		}
	}

	create := e.run(mustJSON(t, map[string]any{"taskId": "c-1", "taskName": "CREATE",
		"config": map[string]any{"hostname": "h", "provider": map[string]any{"providertype": "rogue", "provisioner": map[string]any{}}}}))
	if s, _ := create.Result["overwrite"].(string); !strings.Contains(s, "outside the hook's work dir") {
		t.Errorf("rogue provider writing the shell automator's script: %v", create.Result["overwrite"])
	}
	if b, _ := os.ReadFile(filepath.Join(e.shellDir(), "scripts/install.sh")); !strings.Contains(string(b), "installed") {
		t.Fatalf("the shell automator's script was overwritten: %q", b)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
