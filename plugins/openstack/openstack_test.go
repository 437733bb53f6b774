// Tests for the OpenStack provider: the plugin folder as shipped, run by the
// real runtime with the real loom.http, against the strict fake cloud of
// internal/cloudfake/openstackfake on loopback. Every exchange is checked
// against gophercloud, OpenStack's Go SDK (conformance_test.go): the
// plugin's requests must be what gophercloud sends for the same call, and
// the fake's answers must be what gophercloud reads.
package openstack_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	sshb "github.com/loomrt/loom/bindings/ssh"
	timeb "github.com/loomrt/loom/bindings/time"
	"github.com/loomrt/loom/internal/cloudfake/openstackfake"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	password  = "Os-Passw0rd-0123456789"
	clusterID = "00000042"
	nodeID    = "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d"
	hostname  = "web00000042-1000.example.com"
	imageID   = "6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10"
	netID     = "5f0b4f2c-1a7e-4c55-9d39-0d5e3c4b2a10"
)

type env struct {
	t       *testing.T
	cloud   *openstackfake.Fake
	rt      *runtime.Runtime
	logs    *luatest.LogBuffer
	workDir string
}

type envOptions struct {
	clock   bindings.Clock // nil: the wall clock
	cloud   openstackfake.Options
	ssh     bool          // a real loom.ssh binding (for CONFIRM's keyscan)
	timeout time.Duration // overrides the definition's hook timeouts
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	co := o.cloud
	if co.Username == "" {
		co.Username, co.Password, co.Project = "loom", password, "ops"
	}
	if co.KeyPairs == nil {
		co.KeyPairs = []string{"loom-key"}
	}
	e := &env{t: t, cloud: openstackfake.Start(co), logs: &luatest.LogBuffer{}, workDir: t.TempDir()}
	t.Cleanup(e.cloud.Close)
	checkConformance(t, e.cloud)
	bs := []bindings.Binding{logb.New(), jsonb.New(), fsb.New(), timeb.NewWithClock(o.clock),
		httpb.New(httpb.Options{RetryDelay: time.Millisecond, Clock: bindings.ClockOrReal(o.clock)})}
	if o.ssh {
		bs = append(bs, sshb.New(sshb.Options{}))
	}
	e.rt = luatest.NewRuntime(t, runtime.Options{
		PluginsDir: copyPlugin(t),
		WorkDir:    e.workDir,
		Bindings:   bindings.NewRegistry(bs...),
		Logger:     e.logs.Logger(),
		Timeout:    o.timeout,
	})
	t.Cleanup(func() {
		for _, p := range e.cloud.Problems() {
			t.Errorf("fake cloud: %s", p)
		}
		if strings.Contains(e.logs.String(), password) {
			t.Errorf("the password appears in the logs:\n%s", e.logs.String())
		}
	})
	return e
}

// copyPlugin copies the plugin folder as shipped into a plugins dir of its
// own.
func copyPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.lua") ||
			!(strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".json")) || strings.HasPrefix(p, "testdata") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		luatest.WriteFile(t, filepath.Join(dir, "openstack", p), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func (e *env) fields(extra map[string]any) map[string]any {
	f := map[string]any{
		"openstack_auth_url": e.cloud.AuthURL(),
		"api_user":           "loom",
		"api_password":       password,
		"openstack_tenant":   "ops",
		"ssh_keypair":        "loom-key",
		"ssh_key_resource":   "loom.pem",
		"network_ids":        netID,
		"poll_interval":      "0.01",
		"wait_for_ssh":       "false",
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
		"hostname": hostname, "ipaddresses": map[string]any{}, "nodenum": 1000, "sshuser": "debian",
		"hardwaretype": "small", "imagetype": "debian12", "flavor": "2", "image": imageID,
		"provider": map[string]any{"name": "os-lab", "providertype": "openstack", "provisioner": flds},
	}
	node := any(nodeID)
	for k, v := range config {
		if k == "nodeId" {
			node = v
			continue
		}
		cfg[k] = v
	}
	b, _ := json.Marshal(map[string]any{
		"taskId": clusterID + "-001-001", "jobId": clusterID + "-001", "clusterId": clusterID,
		"nodeId": node, "taskName": name, "config": cfg,
	})
	return b
}

// run runs a task and checks that its result holds no secret.
func (e *env) run(data []byte) *runtime.Result {
	e.t.Helper()
	res := luatest.Run(e.t, e.rt, data)
	out, _ := json.Marshal(res)
	if strings.Contains(string(out), password) {
		e.t.Errorf("the password appears in the result: %s", out)
	}
	for _, ex := range e.cloud.Exchanges("POST", "/auth/tokens") {
		if tok := ex.RespHeader.Get("X-Subject-Token"); tok != "" &&
			(strings.Contains(string(out), tok) || strings.Contains(e.logs.String(), tok)) {
			e.t.Errorf("a Keystone token appears in the result or the logs")
		}
	}
	return res
}

func (e *env) create(extra, config map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CREATE", e.fields(extra), config))
}

func (e *env) confirm(providerid string, extra map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CONFIRM", e.fields(extra), map[string]any{"providerid": providerid,
		"ssh-auth": map[string]any{"user": "debian"}}))
}

func (e *env) delete(providerid any, config map[string]any) *runtime.Result {
	e.t.Helper()
	cfg := map[string]any{"providerid": providerid}
	maps.Copy(cfg, config)
	return e.run(task("DELETE", e.fields(nil), cfg))
}

// skipClock is the wall clock with every wait skipped: sleeps move its
// time forward at once (past a context's deadline they fail as a real
// wait would), so back-offs cost nothing while deadlines still bind.
type skipClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *skipClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *skipClock) Sleep(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && c.Now().Add(d).After(dl) {
		return context.DeadlineExceeded
	}
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
	return ctx.Err()
}

func mustStatus(t *testing.T, res *runtime.Result, want int) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %d, want %d; message: %s\nstderr: %s", res.Status, want, res.Message, res.Stderr)
	}
}

func TestCreateMakesAServer(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	servers := e.cloud.Servers()
	if len(servers) != 1 {
		t.Fatalf("%d servers, want 1", len(servers))
	}
	s := servers[0]
	if res.Result["providerid"] != s.ID || s.Name != hostname || s.Flavor != "2" || s.Image != imageID || s.KeyName != "loom-key" {
		t.Fatalf("server %+v, result %v", s, res.Result)
	}
	if s.Metadata["loom_node"] != nodeID || s.Metadata["loom_cluster"] != clusterID {
		t.Fatalf("metadata %v", s.Metadata)
	}
	auth := res.Result["ssh-auth"].(map[string]any)
	if auth["user"] != "debian" || !strings.HasSuffix(auth["identityfile"].(string), "/providertypes/openstack/ssh_keys/loom.pem") {
		t.Fatalf("ssh-auth %v", auth)
	}
}

func TestCreateFindsTheServerOfALostAnswer(t *testing.T) {
	e := newEnv(t, envOptions{})
	// Nova makes the server, the answer never arrives.
	e.cloud.Fail(openstackfake.Fault{Method: "POST", Path: "/servers", Drop: true, After: true})
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	if n := len(e.cloud.Servers()); n != 1 {
		t.Fatalf("%d servers after a lost answer, want 1", n)
	}
	if got := len(e.cloud.Exchanges("POST", "/servers")); got != 1 {
		t.Fatalf("%d POSTs, want 1: the retry must find the server first", got)
	}
	if res.Result["providerid"] != e.cloud.Servers()[0].ID {
		t.Fatalf("providerid %v", res.Result["providerid"])
	}
	// And a whole CREATE run again (the server retried the task) too.
	again := e.create(nil, nil)
	mustStatus(t, again, 0)
	if again.Result["providerid"] != res.Result["providerid"] || len(e.cloud.Servers()) != 1 {
		t.Fatalf("a retried CREATE made another server")
	}
}

func TestCreateIsRefusedWith201ForBadCredentials(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"api_password": "not-the-" + password}, nil)
	mustStatus(t, res, 201)
	if len(e.cloud.Servers()) != 0 || !strings.Contains(res.Message, "HTTP 401") {
		t.Fatalf("message %q", res.Message)
	}
}

func TestCreateWithAnApplicationCredential(t *testing.T) {
	e := newEnv(t, envOptions{cloud: openstackfake.Options{AppCredentials: map[string]string{"ac-1": password}}})
	res := e.run(task("CREATE", map[string]any{"openstack_auth_url": e.cloud.AuthURL(),
		"application_credential_id": "ac-1", "application_credential_secret": password, "wait_for_ssh": "false"}, nil))
	mustStatus(t, res, 0)
}

func TestCreateSurfacesNovasValidation(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"ssh_keypair": "nobody"}, nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "Invalid key_name provided") || !strings.Contains(res.Message, "HTTP 400") {
		t.Fatalf("message %q", res.Message)
	}
}

func TestCreateWaitsOutThrottling(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.cloud.Fail(openstackfake.Fault{Method: "POST", Path: "/servers", Status: 429, RetryAfter: "1", Times: 2,
		Body: `{"overLimit": {"code": 429, "message": "Over limit", "retryAfter": "1"}}`})
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	if n := len(e.cloud.Servers()); n != 1 {
		t.Fatalf("%d servers", n)
	}
}

func TestConfirmReportsAddressesAndAFloatingIP(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.create(nil, nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	res := e.confirm(id, map[string]any{"floating_ip": "true"})
	mustStatus(t, res, 0)
	if res.IPAddresses["access_v4"] != "203.0.113.10" || res.IPAddresses["bind_v4"] != "10.0.0.10" {
		t.Fatalf("ipaddresses %v", res.IPAddresses)
	}
	fips := e.cloud.FloatingIPs()
	if len(fips) != 1 || fips[0].Description != "loom node "+nodeID || fips[0].FixedIP != "10.0.0.10" {
		t.Fatalf("floating IPs %+v", fips)
	}
	// DELETE releases it.
	mustStatus(t, e.delete(id, nil), 0)
	if len(e.cloud.Servers()) != 0 || len(e.cloud.FloatingIPs()) != 0 {
		t.Fatalf("left behind: %+v %+v", e.cloud.Servers(), e.cloud.FloatingIPs())
	}
}

func TestConfirmFailsOnAServerInError(t *testing.T) {
	e := newEnv(t, envOptions{cloud: openstackfake.Options{Machines: []string{}}})
	c := e.create(nil, nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	e.cloud.SetStatus(id, "ERROR", "No valid host was found. There are not enough hosts available.")
	res := e.confirm(id, nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "No valid host was found") {
		t.Fatalf("message %q", res.Message)
	}
}

func TestConfirmGetsANewTokenWhenTheOldIsRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.create(nil, nil)
	mustStatus(t, c, 0)
	e.cloud.ExpireTokens()
	res := e.confirm(c.Result["providerid"].(string), nil)
	mustStatus(t, res, 0)
	if e.cloud.TokensIssued() < 2 {
		t.Fatalf("no new token after a 401")
	}
}

func TestTokenIsSharedByTasks(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := 0; i < 3; i++ {
		mustStatus(t, e.create(nil, map[string]any{"nodeId": "node-" + string(rune('a'+i))}), 0)
	}
	// Pooled VMs each keep their own token; three tasks in a row reuse one.
	if n := e.cloud.TokensIssued(); n != 1 {
		t.Fatalf("%d tokens for 3 tasks, want 1", n)
	}
}

func TestDeleteWithoutProviderIDFindsTheServerByMetadata(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.create(nil, nil), 0)
	e.cloud.Seed(openstackfake.Server{ID: "other-1", Name: hostname, Metadata: map[string]string{"loom_node": "someone-else"}})
	// Without a hostname either: the full listing is walked.
	res := e.delete(nil, map[string]any{"hostname": ""})
	mustStatus(t, res, 0)
	left := e.cloud.Servers()
	if len(left) != 1 || left[0].ID != "other-1" {
		t.Fatalf("servers left %+v", left)
	}
}

func TestDeleteOfAGoneServerSucceeds(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.delete("0a0a0a0a-0000-4000-8000-000000000000", nil), 0)
}

func TestConfirmRecordsARealSSHDsHostKeys(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	e := newEnv(t, envOptions{ssh: true, cloud: openstackfake.Options{Machines: []string{srv.Host}}})
	c := e.create(map[string]any{"ssh_port": srv.Port}, nil)
	mustStatus(t, c, 0)
	if c.Result["ssh-auth"].(map[string]any)["port"] != float64(srv.Port) {
		t.Fatalf("ssh-auth %v lacks the port", c.Result["ssh-auth"])
	}
	res := e.confirm(c.Result["providerid"].(string), map[string]any{"wait_for_ssh": "true", "ssh_port": srv.Port})
	mustStatus(t, res, 0)
	keys, _ := res.Result["ssh_host_keys"].(map[string]any)
	if keys["ed25519"] == nil || keys["rsa"] == nil {
		t.Fatalf("ssh_host_keys %v", res.Result["ssh_host_keys"])
	}
}

// Nothing listens where the server's sshd should be: CONFIRM gives up
// after ssh_wait and still succeeds, with a warning naming the address.
func TestConfirmSucceedsWhenSSHDNeverAnswers(t *testing.T) {
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{ssh: true, cloud: openstackfake.Options{Machines: []string{"127.0.0.1"}}})
	c := e.create(nil, nil)
	mustStatus(t, c, 0)
	res := e.confirm(c.Result["providerid"].(string), map[string]any{"wait_for_ssh": "true", "ssh_port": port, "ssh_wait": "1"})
	mustStatus(t, res, 0)
	if _, ok := res.Result["ssh_host_keys"]; ok {
		t.Errorf("ssh_host_keys %v from a port nothing listens on", res.Result["ssh_host_keys"])
	}
	logs := e.logs.String()
	for _, want := range []string{fmt.Sprintf("sshd on 127.0.0.1:%d gave no host key within 1s", port), "connection refused", "CONFIRM succeeds without ssh_host_keys"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs do not mention %q:\n%s", want, logs)
		}
	}
}

// raxEnv is an env whose fake cloud is Rackspace's: its identity service
// takes the API key `password` for user loomrax, in region DFW, and Nova
// returns a root password.
func raxEnv(t *testing.T) *env {
	return newEnv(t, envOptions{cloud: openstackfake.Options{Username: "loom", Password: "unused-v3-password", Project: "ops",
		APIKeys: map[string]string{"loomrax": password}, Region: "DFW", AdminPass: true}})
}

// raxTask is a task of Coopr's rackspace provider type with its fields.
func (e *env) raxTask(name string, extra, config map[string]any) []byte {
	f := map[string]any{
		"api_user": "loomrax", "api_password": password, "rackspace_region": "dfw",
		"rackspace_auth_url": e.cloud.URL() + "/identity/v2.0/tokens",
		"ssh_keypair":        "loom-key", "ssh_key_resource": "loom.pem", "poll_interval": "0.01", "wait_for_ssh": "false",
	}
	maps.Copy(f, extra)
	var doc map[string]any
	_ = json.Unmarshal(task(name, f, config), &doc)
	doc["config"].(map[string]any)["provider"].(map[string]any)["providertype"] = "rackspace"
	b, _ := json.Marshal(doc)
	return b
}

// A node's whole life on Rackspace: an API key token from the identity
// service (v2.0), the regional Nova of its catalog (not the first
// generation's, which has no region), the root password Nova returns in
// ssh-auth only, no Neutron calls (Rackspace lists none), and DELETE by
// metadata without a providerid.
func TestRackspaceServerLife(t *testing.T) {
	e := raxEnv(t)
	res := e.run(e.raxTask("CREATE", map[string]any{"rackspace_metadata": "team=web"}, nil))
	mustStatus(t, res, 0)
	servers := e.cloud.Servers()
	if len(servers) != 1 || res.Result["providerid"] != servers[0].ID {
		t.Fatalf("servers %+v, result %v", servers, res.Result)
	}
	s := servers[0]
	if s.Metadata["loom_node"] != nodeID || s.Metadata["team"] != "web" || s.KeyName != "loom-key" {
		t.Errorf("server %+v: want loom_node, the extra metadata and the key pair", s)
	}
	auth := res.Result["ssh-auth"].(map[string]any)
	if auth["password"] != s.AdminPass || s.AdminPass == "" || !strings.HasSuffix(fmt.Sprint(auth["identityfile"]), "/providertypes/rackspace/ssh_keys/loom.pem") {
		t.Errorf("ssh-auth %v, want Nova's root password and the rackspace type's key file", auth)
	}
	toks := e.cloud.Exchanges("POST", "/tokens")
	if len(toks) != 1 || toks[0].Service != "identity-v2" || !strings.Contains(string(toks[0].Body), "RAX-KSKEY:apiKeyCredentials") {
		t.Errorf("token requests %d, want one API key request to the v2.0 identity service", len(toks))
	}
	c := e.run(e.raxTask("CONFIRM", nil, map[string]any{"providerid": s.ID, "ssh-auth": map[string]any{"user": "root"}}))
	mustStatus(t, c, 0)
	if c.IPAddresses["access_v4"] != "10.0.0.10" {
		t.Errorf("ipaddresses %v", c.IPAddresses)
	}
	mustStatus(t, e.run(e.raxTask("DELETE", nil, map[string]any{"providerid": nil})), 0)
	if left := e.cloud.Servers(); len(left) != 0 {
		t.Errorf("servers left after DELETE by metadata: %+v", left)
	}
	for _, ex := range e.cloud.Exchanges("", "") {
		if ex.Service != "identity-v2" && ex.Service != "compute" && ex.Service != "image" {
			t.Errorf("%s %s to %q: Rackspace's catalog lists no such service", ex.Method, ex.Path, ex.Service)
		}
	}
	if n := e.cloud.TokensIssued(); n != 1 {
		t.Errorf("%d tokens for three tasks, want 1 (shared)", n)
	}
}

// A wrong API key is Coopr's "nothing was created" 201, naming what to
// check; a region the catalog does not list fails naming the regions it
// does and the field.
func TestRackspaceRefusals(t *testing.T) {
	e := raxEnv(t)
	res := e.run(e.raxTask("CREATE", map[string]any{"api_password": "wrong-key-0123456789"}, nil))
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "API key") || !strings.Contains(res.Message, "HTTP 401") {
		t.Errorf("message %q, want the 401 and a hint at the API key", res.Message)
	}
	res = e.run(e.raxTask("CREATE", map[string]any{"rackspace_region": "syd"}, nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, `none in region "syd" (field rackspace_region)`) || !strings.Contains(res.Message, "DFW") {
		t.Errorf("message %q, want the regions of the catalog and the field", res.Message)
	}
	if len(e.cloud.Servers()) != 0 {
		t.Errorf("servers made: %+v", e.cloud.Servers())
	}
}
