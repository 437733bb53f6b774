package joyent_test

// The joyent provider against internal/cloudfake/tritonfake, a strict fake
// of CloudAPI that verifies every request's HTTP Signature.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
	cryptob "github.com/loomrt/loom/bindings/crypto"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	timeb "github.com/loomrt/loom/bindings/time"
	"github.com/loomrt/loom/internal/cloudfake/tritonfake"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	password  = "Triton-Passw0rd-0123456789"
	clusterID = "00000042"
	nodeID    = "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d"
	hostname  = "web00000042-1000.example.com"
)

type env struct {
	t       *testing.T
	cloud   *tritonfake.Fake
	rt      *runtime.Runtime
	logs    *luatest.LogBuffer
	workDir string
	keyPEM  string
}

type envOptions struct {
	key   string // "rsa" (default), "ecdsa", or "none"
	cloud tritonfake.Options
}

// newEnv starts the fake with the account's key (written to the provider's
// ssh_keys resource as loom.pem) and a runtime with the plugin as shipped.
func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{t: t, logs: &luatest.LogBuffer{}, workDir: t.TempDir()}
	co := o.cloud
	if o.key != "none" {
		var priv any
		var block *pem.Block
		if o.key == "ecdsa" {
			k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			der, _ := x509.MarshalECPrivateKey(k)
			priv, block = k, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
		} else {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				t.Fatal(err)
			}
			priv, block = k, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
		}
		signer, err := ssh.NewSignerFromKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		co.Keys = append(co.Keys, string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
		e.keyPEM = string(pem.EncodeToMemory(block))
		dir := filepath.Join(e.workDir, "default", "providertypes", "joyent", "ssh_keys")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "loom.pem"), []byte(e.keyPEM), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	e.cloud = tritonfake.Start(co)
	t.Cleanup(e.cloud.Close)
	e.rt = luatest.NewRuntime(t, runtime.Options{
		PluginsDir: copyPlugin(t),
		WorkDir:    e.workDir,
		Bindings: bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.New(), cryptob.New(),
			httpb.New(httpb.Options{RetryDelay: time.Millisecond})),
		Logger: e.logs.Logger(),
	})
	t.Cleanup(func() {
		for _, p := range e.cloud.Problems() {
			t.Errorf("fake CloudAPI: %s", p)
		}
	})
	return e
}

// copyPlugin copies the plugin folder as shipped into a plugins dir.
func copyPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.lua") || !(strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".json")) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		luatest.WriteFile(t, filepath.Join(dir, "joyent", p), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func (e *env) fields(extra map[string]any) map[string]any {
	f := map[string]any{
		"api_user": "loom", "ssh_keypair": "loom-key", "ssh_key_resource": "loom.pem",
		"joyent_api_url": e.cloud.URL(), "poll_interval": "0.01", "wait_for_ssh": "false",
	}
	maps.Copy(f, extra)
	for k, v := range f {
		if v == nil {
			delete(f, k)
		}
	}
	return f
}

func task(name string, flds map[string]any, config map[string]any) []byte {
	cfg := map[string]any{
		"hostname": hostname, "ipaddresses": map[string]any{}, "nodenum": 1000, "sshuser": "ubuntu",
		"flavor": "g4-highcpu-1G", "image": tritonfake.Image,
		"provider": map[string]any{"name": "triton-lab", "providertype": "joyent", "provisioner": flds},
	}
	node := any(nodeID)
	for k, v := range config {
		if k == "nodeId" {
			node = v
			continue
		}
		cfg[k] = v
	}
	b, _ := json.Marshal(map[string]any{"taskId": clusterID + "-001-001", "jobId": clusterID + "-001", "clusterId": clusterID,
		"nodeId": node, "taskName": name, "config": cfg})
	return b
}

// run runs a task and checks that no secret reached its result or the
// logs: the password, the private key, a request's signature.
func (e *env) run(name string, extra, config map[string]any) *runtime.Result {
	e.t.Helper()
	res := luatest.Run(e.t, e.rt, task(name, e.fields(extra), config))
	out, _ := json.Marshal(res)
	secrets := []string{password}
	if e.keyPEM != "" {
		secrets = append(secrets, strings.Split(e.keyPEM, "\n")[1])
	}
	for _, ex := range e.cloud.Exchanges("", "") {
		if a := ex.Header.Get("Authorization"); a != "" {
			secrets = append(secrets, a[strings.LastIndex(a, "=")-20:])
		}
	}
	for _, s := range secrets {
		if strings.Contains(string(out), s) || strings.Contains(e.logs.String(), s) {
			e.t.Errorf("a secret (%.12s...) appears in the result or the logs", s)
		}
	}
	return res
}

func mustStatus(t *testing.T, res *runtime.Result, want int) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %d, want %d; message: %s\nstderr: %s", res.Status, want, res.Message, res.Stderr)
	}
}

// A node's life with an RSA key: every request signed (the fake verifies
// each), the machine tagged for its node, the addresses CONFIRM reports,
// and DELETE.
func TestMachineLifeWithAnRSAKey(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.run("CREATE", map[string]any{"network_ids": "net-a, net-b"}, nil)
	mustStatus(t, c, 0)
	ms := e.cloud.Machines()
	if len(ms) != 1 || c.Result["providerid"] != ms[0].ID {
		t.Fatalf("machines %+v, result %v", ms, c.Result)
	}
	m := ms[0]
	if m.Name != hostname || m.Package != "g4-highcpu-1G" || m.Image != tritonfake.Image || m.Tags["loom_node"] != nodeID ||
		m.Tags["loom_cluster"] != clusterID || strings.Join(m.Networks, ",") != "net-a,net-b" {
		t.Errorf("machine %+v", m)
	}
	auth := c.Result["ssh-auth"].(map[string]any)
	if auth["user"] != "ubuntu" || !strings.HasSuffix(auth["identityfile"].(string), "/providertypes/joyent/ssh_keys/loom.pem") {
		t.Errorf("ssh-auth %v", auth)
	}
	for _, ex := range e.cloud.Exchanges("", "") {
		if !strings.Contains(ex.Header.Get("Authorization"), `algorithm="rsa-sha256"`) || ex.Header.Get("Accept-Version") != "~9" {
			t.Errorf("%s %s: Authorization %.60q, Accept-Version %q", ex.Method, ex.Path, ex.Header.Get("Authorization"), ex.Header.Get("Accept-Version"))
		}
	}
	conf := e.run("CONFIRM", nil, map[string]any{"providerid": m.ID, "ssh-auth": auth})
	mustStatus(t, conf, 0)
	if conf.IPAddresses["access_v4"] != m.IPs[0] || conf.IPAddresses["bind_v4"] != m.IPs[1] {
		t.Errorf("ipaddresses %v, machine's %v: want the public address to access, the private to bind", conf.IPAddresses, m.IPs)
	}
	mustStatus(t, e.run("DELETE", nil, map[string]any{"providerid": m.ID}), 0)
	if left := e.cloud.Machines(); len(left) != 0 {
		t.Errorf("machines left: %+v", left)
	}
	// Gone already: done.
	mustStatus(t, e.run("DELETE", nil, map[string]any{"providerid": m.ID}), 0)
}

func TestECDSAKeySigns(t *testing.T) {
	e := newEnv(t, envOptions{key: "ecdsa"})
	mustStatus(t, e.run("CREATE", nil, nil), 0)
	for _, ex := range e.cloud.Exchanges("", "") {
		if !strings.Contains(ex.Header.Get("Authorization"), `algorithm="ecdsa-sha256"`) {
			t.Errorf("%s %s: Authorization %.80q", ex.Method, ex.Path, ex.Header.Get("Authorization"))
		}
	}
}

// Coopr's other required set: the account's password, sent as Basic
// credentials (CloudAPI 7 and older), Coopr's ~7.0 version.
func TestPasswordAuthentication(t *testing.T) {
	e := newEnv(t, envOptions{key: "none", cloud: tritonfake.Options{Password: password}})
	f := map[string]any{"api_password": password, "ssh_keypair": nil, "ssh_key_resource": nil, "joyent_version": "~7.0"}
	mustStatus(t, e.run("CREATE", f, nil), 0)
	if ex := e.cloud.Exchanges("", ""); len(ex) == 0 || !strings.HasPrefix(ex[0].Header.Get("Authorization"), "Basic ") || ex[0].Header.Get("Accept-Version") != "~7.0" {
		t.Errorf("first request's headers %v", ex)
	}
	f["api_password"] = "wrong-" + password
	res := e.run("CREATE", f, map[string]any{"nodeId": "node-2"})
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "HTTP 401 InvalidCredentials") {
		t.Errorf("message %q", res.Message)
	}
}

// A key CloudAPI does not know is Coopr's 201 and says what to check; a
// key file that is missing fails before any request, naming the file.
func TestCredentialFailures(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.run("CREATE", map[string]any{"api_user": "someone-else"}, nil)
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "401") || !strings.Contains(res.Message, "ssh_key_resource") {
		t.Errorf("message %q, want the 401 and what to check", res.Message)
	}
	res = e.run("CREATE", map[string]any{"ssh_key_resource": "absent.pem"}, nil)
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "ssh_keys/absent.pem") {
		t.Errorf("message %q, want the key file named", res.Message)
	}
	res = e.run("CREATE", map[string]any{"ssh_key_resource": "../../etc/passwd"}, nil)
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "not a path") {
		t.Errorf("message %q", res.Message)
	}
	if len(e.cloud.Machines()) != 0 {
		t.Errorf("machines made: %+v", e.cloud.Machines())
	}
}

// CREATE is idempotent: run again it finds the node's machine by its tag;
// an answer lost after CloudAPI made the machine leads to that machine,
// not a second one; 5xx answers before it are retried.
func TestCreateIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := e.run("CREATE", nil, nil)
	mustStatus(t, first, 0)
	again := e.run("CREATE", nil, nil)
	mustStatus(t, again, 0)
	if again.Result["providerid"] != first.Result["providerid"] || len(e.cloud.Machines()) != 1 {
		t.Errorf("second CREATE %v, first %v, %d machines", again.Result["providerid"], first.Result["providerid"], len(e.cloud.Machines()))
	}

	e.cloud.FailNext(tritonfake.Fault{Method: "POST", Path: "/machines", Drop: true, After: true})
	lost := e.run("CREATE", nil, map[string]any{"nodeId": "node-lost", "hostname": "lost.example.com"})
	mustStatus(t, lost, 0)
	e.cloud.FailNext(tritonfake.Fault{Method: "POST", Path: "/machines", Status: 503, Code: "ServiceUnavailable"})
	retried := e.run("CREATE", nil, map[string]any{"nodeId": "node-5xx", "hostname": "fivexx.example.com"})
	mustStatus(t, retried, 0)
	byNode := map[string]string{}
	for _, m := range e.cloud.Machines() {
		byNode[m.Tags["loom_node"]] = m.ID
	}
	if len(byNode) != 3 || byNode["node-lost"] != lost.Result["providerid"] || byNode["node-5xx"] != retried.Result["providerid"] || len(e.cloud.Machines()) != 3 {
		t.Errorf("machines %+v; want one per node, the lost answer's machine reported", e.cloud.Machines())
	}
}

// CloudAPI's 409 (a name in use, a package the account cannot use) is
// Coopr's 202 with the reason; a throttled read is waited out.
func TestConflictAndThrottling(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.run("CREATE", nil, nil), 0)
	res := e.run("CREATE", nil, map[string]any{"nodeId": "node-2"}) // same hostname, another node
	mustStatus(t, res, 202)
	if !strings.Contains(res.Message, "already in use") {
		t.Errorf("message %q", res.Message)
	}
	id := e.cloud.Machines()[0].ID
	e.cloud.FailNext(tritonfake.Fault{Method: "GET", Path: "/machines/", Status: 429, Code: "RequestThrottled"})
	mustStatus(t, e.run("CONFIRM", nil, map[string]any{"providerid": id}), 0)
}

// CONFIRM fails on a machine that failed to provision, naming it.
func TestConfirmFailsOnAFailedMachine(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.run("CREATE", nil, nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	e.cloud.SetState(id, "failed")
	res := e.run("CONFIRM", nil, map[string]any{"providerid": id})
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "is failed, not running") || !strings.Contains(res.Message, id) {
		t.Errorf("message %q", res.Message)
	}
}

// A DELETE without providerid (CREATE died before reporting one) deletes
// the machines tagged for the node, and only those.
func TestDeleteWithoutProviderIDFindsTheMachineByTag(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.run("CREATE", nil, nil), 0)
	other := e.run("CREATE", nil, map[string]any{"nodeId": "node-other", "hostname": "other.example.com"})
	mustStatus(t, other, 0)
	mustStatus(t, e.run("DELETE", nil, map[string]any{"providerid": nil}), 0)
	left := e.cloud.Machines()
	if len(left) != 1 || left[0].ID != other.Result["providerid"] {
		t.Errorf("machines left %+v, want the other node's only", left)
	}
	// Nothing tagged: nothing to do.
	mustStatus(t, e.run("DELETE", nil, map[string]any{"providerid": nil, "nodeId": "node-none"}), 0)
}

const otherFogClasses = `
local loom = require("loom")
for _, name in ipairs({ "FogProviderAWS", "FogProviderDigitalOcean", "FogProviderGoogle", "FogProviderOpenstack", "FogProviderRackspace" }) do
  local cls = loom.Provider:extend(name)
  local function refuse(self) self:fail(name .. " is a stand-in in this test") end
  cls.create, cls.confirm, cls.delete = refuse, refuse, refuse
  _G[name] = cls
end
`

// Coopr's own fog_provider.json, unchanged and in Coopr's folder layout,
// served by joyent.lua (its class FogProviderJoyent) for the joyent type:
// Coopr's fields, its key set of required fields and its ~7.0 version
// drive a node's life against the fake.
func TestCooprFogDefinition(t *testing.T) {
	e := newEnv(t, envOptions{})
	plugins := t.TempDir()
	dir := filepath.Join(plugins, "providers", "fog_provider")
	def, err := os.ReadFile(filepath.Join("..", "..", "runtime", "testdata", "coopr-definitions", "fog_provider.json"))
	if err != nil {
		t.Fatal(err)
	}
	luatest.WriteFile(t, filepath.Join(dir, "fog_provider.json"), string(def))
	for _, f := range []string{"joyent.lua", "lib/cloudapi.lua"} {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		luatest.WriteFile(t, filepath.Join(dir, f), string(src))
	}
	luatest.WriteFile(t, filepath.Join(dir, "others.lua"), otherFogClasses)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: plugins, WorkDir: e.workDir, Logger: e.logs.Logger(),
		Bindings: bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.New(), cryptob.New(),
			httpb.New(httpb.Options{RetryDelay: time.Millisecond}))})
	fields := map[string]any{"api_user": "loom", "ssh_keypair": "loom-key", "ssh_key_resource": "loom.pem",
		"joyent_api_url": e.cloud.URL(), "joyent_version": "~7.0", "wait_for_ssh": "false", "poll_interval": "0.01"}
	run := func(name string, config map[string]any) *runtime.Result {
		t.Helper()
		return luatest.Run(t, rt, task(name, fields, config))
	}
	c := run("CREATE", nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	mustStatus(t, run("CONFIRM", map[string]any{"providerid": id, "ssh-auth": c.Result["ssh-auth"]}), 0)
	mustStatus(t, run("DELETE", map[string]any{"providerid": id}), 0)
	if left := e.cloud.Machines(); len(left) != 0 {
		t.Fatalf("machines left: %+v", left)
	}
	// Coopr's required sets: a key name without its resource, and no
	// password either, is refused before any request.
	delete(fields, "ssh_key_resource")
	before := len(e.cloud.Exchanges("", ""))
	bad := run("CREATE", nil)
	if bad.Status == 0 || !strings.Contains(bad.Message, "missing required admin fields for joyent") {
		t.Fatalf("CREATE without ssh_key_resource or api_password: %d %s", bad.Status, bad.Message)
	}
	if n := len(e.cloud.Exchanges("", "")); n != before {
		t.Errorf("%d requests for a refused task", n-before)
	}
}
