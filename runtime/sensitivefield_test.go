package runtime_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
	cryptob "github.com/loomrt/loom/bindings/crypto"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A binding reads a sensitive field by name (bindings.SensitiveFields):
// only fields the definition declares sensitive or of type password, of
// the task being run, never those of an earlier task.
func TestSensitiveFieldsByName(t *testing.T) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, _ := ssh.MarshalPrivateKey(priv, "")
	keyPEM := string(pem.EncodeToMemory(block))
	pub, _ := ssh.NewPublicKey(priv.Public())

	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "signer", Family: "provider", Classname: "Signer",
		Files: map[string]string{"signer.lua": `
local crypto = require("loom.crypto")
Signer = {}
function Signer:create(input)
  local k = crypto.key({ field = input.fields.which })
  self.result.result.fingerprint = k.fingerprint
  self.result.status = 0
end`},
		Extra: map[string]any{"parameters": map[string]any{"admin": map[string]any{"fields": map[string]any{
			"ssh_key":  map[string]any{"type": "text", "sensitive": true},
			"password": map[string]any{"type": "password"},
			"region":   map[string]any{"type": "text"},
			"which":    map[string]any{"type": "text"},
		}}}}})
	logs := &luatest.LogBuffer{}
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Logger: logs.Logger(),
		Bindings: bindings.NewRegistry(logb.New(), jsonb.New(), cryptob.New())})
	run := func(fields map[string]any) *runtime.Result {
		t.Helper()
		return luatest.Run(t, rt, luatest.Task("CREATE", "signer", map[string]any{
			"provider": map[string]any{"providertype": "signer", "provisioner": fields}}))
	}

	res := run(map[string]any{"ssh_key": keyPEM, "region": keyPEM, "which": "ssh_key"})
	if res.Status != 0 || res.Result["fingerprint"] != ssh.FingerprintSHA256(pub) {
		t.Fatalf("sensitive field: status %d, %s, result %v", res.Status, res.Message, res.Result)
	}
	res = run(map[string]any{"password": keyPEM, "which": "password"})
	if res.Status != 0 || res.Result["fingerprint"] != ssh.FingerprintSHA256(pub) {
		t.Fatalf("password field: status %d, %s", res.Status, res.Message)
	}
	// A field that is not sensitive is refused, even holding a key.
	res = run(map[string]any{"region": keyPEM, "which": "region"})
	if res.Status == 0 || !strings.Contains(res.Message, `no sensitive field "region"`) {
		t.Errorf("a plain field: status %d, %s", res.Status, res.Message)
	}
	// The next task does not see the first one's fields.
	res = run(map[string]any{"which": "ssh_key"})
	if res.Status == 0 || !strings.Contains(res.Message, `no sensitive field "ssh_key"`) {
		t.Errorf("a field of an earlier task: status %d, %s", res.Status, res.Message)
	}
	out, _ := json.Marshal(res)
	if strings.Contains(string(out)+logs.String(), strings.Split(keyPEM, "\n")[1]) {
		t.Error("key material in a result or the logs")
	}
}
