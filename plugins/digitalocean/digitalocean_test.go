// Tests for the DigitalOcean provider: the plugin folder as shipped, run by
// the real runtime with the real loom.http, against a strict fake of the
// DigitalOcean API on loopback (fake_test.go).
//
// The plugin keeps its production api_url and allow-list
// (api.digitalocean.com): the HTTP binding's transport is the only test
// seam, and it carries requests for api.digitalocean.com to the fake.
package digitalocean_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	sshb "github.com/loomrt/loom/bindings/ssh"
	timeb "github.com/loomrt/loom/bindings/time"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	token     = "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
	clusterID = "00000042"
	nodeID    = "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d"
	hostname  = "web00000042-1000.example.com"
	nodeTag   = "coopr-node-" + nodeID
)

// env is one runtime serving the plugin, with its fake API and logs.
type env struct {
	t       *testing.T
	fake    *fakeDO
	rt      *runtime.Runtime
	logs    *luatest.LogBuffer
	workDir string
}

type envOptions struct {
	token   string           // the token the fake accepts; default token
	ssh     bindings.Binding // loom.ssh (real, or a stand-in); nil means none
	timeout time.Duration    // overrides the definition's hook timeouts
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.token == "" {
		o.token = token
	}
	e := &env{t: t, fake: newFakeDO(t, o.token), logs: &luatest.LogBuffer{}, workDir: t.TempDir()}
	e.rt = e.newRuntime(o)
	// Whatever a test did, the token must not have reached the logs.
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), token) {
			t.Errorf("the API token appears in the logs:\n%s", e.logs.String())
		}
	})
	return e
}

// newRuntime builds a runtime of its own (bindings, VM pool, HTTP
// transport) serving the plugin against the env's fake and work dir, as a
// second worker process of one daemon would.
func (e *env) newRuntime(o envOptions) *runtime.Runtime {
	e.t.Helper()
	bs := []bindings.Binding{logb.New(), jsonb.New(), fsb.New(), timeb.New(),
		httpb.New(httpb.Options{Transport: e.fake.transport(), RetryDelay: time.Millisecond})}
	if o.ssh != nil {
		bs = append(bs, o.ssh)
	}
	return luatest.NewRuntime(e.t, runtime.Options{
		PluginsDir: copyPlugin(e.t),
		WorkDir:    e.workDir,
		Bindings:   bindings.NewRegistry(bs...),
		Logger:     e.logs.Logger(),
		Timeout:    o.timeout,
	})
}

// copyPlugin copies the plugin folder as shipped (definition and Lua,
// unchanged) into a plugins dir of its own, so that the test does not load
// whatever else sits in plugins/.
func copyPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".json")) {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		luatest.WriteFile(t, filepath.Join(dir, "digitalocean", p), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// fields are the provider fields of a typical admin setup.
func fields(extra map[string]any) map[string]any {
	f := map[string]any{
		"api_token":        token,
		"region":           "nyc3",
		"ssh_keys":         "loom-admin, aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99",
		"ssh_key_resource": "loom-admin.pem",
		"poll_interval":    "0.01",
		"wait_for_ssh":     "false",
	}
	maps.Copy(f, extra)
	for k, v := range f {
		if v == nil {
			delete(f, k)
		}
	}
	return f
}

// task builds a Coopr provider task. config keys are merged over the
// defaults; "nodeId" in config replaces the task's node id.
func task(name string, flds map[string]any, config map[string]any) []byte {
	cfg := map[string]any{
		"hostname": hostname, "ipaddresses": map[string]any{}, "nodenum": 1000, "sshuser": "root",
		"hardwaretype": "small", "imagetype": "debian12", "flavor": "s-1vcpu-1gb", "image": "debian-12-x64",
		"provider": map[string]any{"name": "do-nyc3", "providertype": "digitalocean", "provisioner": flds},
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

// run runs a task and checks that its result does not hold the token.
func (e *env) run(data []byte) *runtime.Result {
	e.t.Helper()
	res := luatest.Run(e.t, e.rt, data)
	out, err := json.Marshal(res)
	if err != nil {
		e.t.Fatalf("result does not marshal: %v", err)
	}
	if strings.Contains(string(out), token) {
		e.t.Errorf("the API token appears in the result: %s", out)
	}
	return res
}

func (e *env) create(extraFields, config map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CREATE", fields(extraFields), config))
}

func (e *env) confirm(providerid string, extraFields map[string]any) *runtime.Result {
	e.t.Helper()
	cfg := map[string]any{"providerid": providerid, "ssh-auth": map[string]any{"user": "root"}}
	return e.run(task("CONFIRM", fields(extraFields), cfg))
}

func (e *env) delete(providerid any, config map[string]any) *runtime.Result {
	e.t.Helper()
	cfg := map[string]any{"providerid": providerid}
	maps.Copy(cfg, config)
	return e.run(task("DELETE", fields(nil), cfg))
}

// logged reports whether a line at level ("WARN", "INFO"...) holds msg.
func (e *env) logged(level, msg string) bool {
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == level && strings.Contains(rec.Msg, msg) {
			return true
		}
	}
	return false
}

func mustStatus(t *testing.T, res *runtime.Result, want int) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %d, want %d; message: %s\nstderr: %s", res.Status, want, res.Message, res.Stderr)
	}
}

func TestCreateMakesADroplet(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"tags": "team:web, env=prod"}, map[string]any{"sshuser": "debian"})
	mustStatus(t, res, 0)

	posts := e.fake.calls("POST /v2/droplets")
	if len(posts) != 1 {
		t.Fatalf("%d droplet creations, want 1", len(posts))
	}
	body := posts[0].Body
	for k, want := range map[string]any{"name": hostname, "region": "nyc3", "size": "s-1vcpu-1gb", "image": "debian-12-x64"} {
		if body[k] != want {
			t.Errorf("create body %s = %v, want %v", k, body[k], want)
		}
	}
	// Keys resolved by name and by fingerprint, across pages of the listing.
	wantKeys := []any{"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa", "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99"}
	if got, _ := body["ssh_keys"].([]any); !slices.Equal(got, wantKeys) {
		t.Errorf("ssh_keys %v, want %v", body["ssh_keys"], wantKeys)
	}
	if pages := e.fake.calls("GET /v2/account/keys"); len(pages) < 2 {
		t.Errorf("the key listing was read in %d page(s); the fake serves one key per page", len(pages))
	}
	wantTags := []any{"loom", "coopr-cluster-" + clusterID, nodeTag, "team:web", "env-prod"}
	if got, _ := body["tags"].([]any); !slices.Equal(got, wantTags) {
		t.Errorf("tags %v, want %v", body["tags"], wantTags)
	}
	// It looked for an existing droplet before creating one.
	if all := e.fake.calls(""); all[0].Method != "GET" || all[0].Path != "/v2/droplets" || all[0].Query["tag_name"][0] != nodeTag {
		t.Errorf("first request %s %s %v, want the lookup of the node's tag", all[0].Method, all[0].Path, all[0].Query)
	}

	if res.Result["providerid"] != "3164494" {
		t.Errorf("providerid %#v, want the droplet id as a string", res.Result["providerid"])
	}
	auth, _ := res.Result["ssh-auth"].(map[string]any)
	wantKey := filepath.Join(e.workDir, "default", "providertypes", "digitalocean", "ssh_keys", "loom-admin.pem")
	if auth["user"] != "debian" || auth["identityfile"] != wantKey {
		t.Errorf("ssh-auth %v, want user debian and identityfile %s", auth, wantKey)
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := e.create(nil, nil)
	mustStatus(t, first, 0)
	again := e.create(nil, nil)
	mustStatus(t, again, 0)
	if again.Result["providerid"] != first.Result["providerid"] {
		t.Errorf("the second CREATE returned %v, the first %v", again.Result["providerid"], first.Result["providerid"])
	}
	if n := len(e.fake.calls("POST /v2/droplets")); n != 1 {
		t.Errorf("%d droplet creations, want 1", n)
	}
	if e.fake.dropletCount() != 1 {
		t.Errorf("%d droplets, want 1", e.fake.dropletCount())
	}
}

func TestCreateReusesTheOldestOfTwoDroplets(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 900, Name: hostname, Status: "active", Tags: []string{"loom", nodeTag}})
	e.fake.seed(&droplet{ID: 800, Name: hostname, Status: "active", Tags: []string{"loom", nodeTag}})
	e.fake.seed(&droplet{ID: 700, Name: hostname, Status: "archive", Tags: []string{"loom", nodeTag}})
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	if res.Result["providerid"] != "800" {
		t.Errorf("providerid %v, want 800 (the oldest droplet not being archived)", res.Result["providerid"])
	}
	if len(e.fake.calls("POST /v2/droplets")) != 0 {
		t.Error("CREATE made a droplet although the node had one")
	}
	if !e.logged("WARN", "delete the others") {
		t.Error("no warning about the duplicate droplet")
	}
}

func TestCreateSanitizesNamesAndTags(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"tags": "cost center/42"},
		map[string]any{"hostname": "_web_1.example.com.", "nodeId": "node 7/b", "image": "12345678"})
	mustStatus(t, res, 0)
	body := e.fake.calls("POST /v2/droplets")[0].Body
	if body["name"] != "web-1.example.com" {
		t.Errorf("name %v, want web-1.example.com", body["name"])
	}
	if body["image"] != float64(12345678) {
		t.Errorf("image %#v, want the numeric id 12345678", body["image"])
	}
	tags, _ := body["tags"].([]any)
	if !slices.Contains(tags, any("coopr-node-node-7-b")) || !slices.Contains(tags, any("cost-center-42")) {
		t.Errorf("tags %v, want coopr-node-node-7-b and cost-center-42", tags)
	}
}

func TestCreateWithAnUnknownSSHKeyCreatesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"ssh_keys": "loom-admin,nobody"}, nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, `no SSH key "nobody"`) || !strings.Contains(res.Message, "ops (aa:bb") {
		t.Errorf("message %q should name the missing key and list the account's keys", res.Message)
	}
	if len(e.fake.calls("POST /v2/droplets")) != 0 {
		t.Error("a droplet was created without the requested key")
	}
}

func TestCreateWithABadTokenIs201(t *testing.T) {
	e := newEnv(t, envOptions{token: "the-only-token-the-fake-accepts"})
	res := e.create(nil, nil)
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "Unable to authenticate you") || !strings.Contains(res.Message, "HTTP 401") {
		t.Errorf("message %q should carry DigitalOcean's own message", res.Message)
	}
	if res.Error["http_status"] != float64(401) || res.Error["id"] != "Unauthorized" {
		t.Errorf("error %v, want http_status 401 and DigitalOcean's error id", res.Error)
	}
	if len(e.fake.calls("POST /v2/droplets")) != 0 {
		t.Error("POST after a 401")
	}
}

func TestCreateWithAReadOnlyTokenIs202(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.queue("POST /v2/droplets", canned{status: 403, body: map[string]any{
		"id": "Forbidden", "message": "You do not have access for the attempted action."}})
	res := e.create(nil, nil)
	mustStatus(t, res, 202)
	if !strings.Contains(res.Message, "You do not have access for the attempted action.") {
		t.Errorf("message %q should carry DigitalOcean's own message", res.Message)
	}
}

func TestCreateSurfacesValidationErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.run(task("CREATE", fields(nil), map[string]any{"flavor": "s-999vcpu-9tb"}))
	mustStatus(t, res, 1)
	for _, want := range []string{"creating droplet " + hostname, "HTTP 422 unprocessable_entity",
		"You specified an invalid size for Droplet creation.", "(request 4d9d8375-"} {
		if !strings.Contains(res.Message, want) {
			t.Errorf("message %q lacks %q", res.Message, want)
		}
	}
}

func TestCreateRetriesRateLimitedRequests(t *testing.T) {
	e := newEnv(t, envOptions{})
	tooMany := canned{status: 429, headers: map[string]string{"Retry-After": "0"},
		body: map[string]any{"id": "too_many_requests", "message": "API Rate limit exceeded."}}
	e.fake.queue("GET /v2/droplets", tooMany)
	e.fake.queue("GET /v2/account/keys", tooMany)
	e.fake.queue("POST /v2/droplets", tooMany)
	e.fake.queue("POST /v2/droplets", tooMany)
	e.fake.quotaLeft = 12
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	if n := len(e.fake.calls("POST /v2/droplets")); n != 3 {
		t.Errorf("%d POSTs, want 3 (two rate limited)", n)
	}
	if n := len(e.fake.callsWith("GET /v2/droplets", "tag_name", nodeTag)); n != 2 {
		t.Errorf("%d lookups by tag, want 2 (one rate limited)", n)
	}
	if n := len(e.fake.callsWith("GET /v2/droplets", "type", "gpus")); n != 1 {
		t.Errorf("%d lookups of GPU droplets, want 1", n)
	}
	if e.fake.dropletCount() != 1 {
		t.Errorf("%d droplets, want 1", e.fake.dropletCount())
	}
	if !e.logged("WARN", "DigitalOcean API quota low: 11 of 5000") {
		t.Errorf("no warning about the low quota in the logs:\n%s", e.logs.String())
	}
}

func TestCreateAfterAnAmbiguousFailureFindsTheDroplet(t *testing.T) {
	e := newEnv(t, envOptions{})
	// DigitalOcean made the droplet, then answered 500.
	e.fake.queue("POST /v2/droplets", canned{status: 500, created: true,
		body: map[string]any{"id": "server_error", "message": "Unexpected server-side error"}})
	res := e.create(nil, nil)
	mustStatus(t, res, 0)
	if n := len(e.fake.calls("POST /v2/droplets")); n != 1 {
		t.Errorf("%d POSTs, want 1: the droplet existed after the 500", n)
	}
	if e.fake.dropletCount() != 1 || res.Result["providerid"] != "3164494" {
		t.Errorf("%d droplets, providerid %v; want the one droplet made before the 500", e.fake.dropletCount(), res.Result["providerid"])
	}
}

func TestCreateRetriesAServerErrorThatCreatedNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.queue("POST /v2/droplets", canned{status: 503, headers: map[string]string{"Retry-After": "0"}, body: map[string]any{"id": "service_unavailable", "message": "try again"}})
	res := e.run(task("CREATE", fields(nil), nil))
	mustStatus(t, res, 0)
	if n := len(e.fake.calls("POST /v2/droplets")); n != 2 || e.fake.dropletCount() != 1 {
		t.Errorf("%d POSTs and %d droplets, want 2 and 1", n, e.fake.dropletCount())
	}
}

func TestConfirmWaitsUntilActive(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.activeAfter = 3
	created := e.create(nil, nil)
	mustStatus(t, created, 0)
	id := created.Result["providerid"].(string)

	res := e.confirm(id, nil)
	mustStatus(t, res, 0)
	if n := len(e.fake.calls("GET /v2/droplets/" + id)); n != 4 {
		t.Errorf("%d polls, want 4 (three answered new)", n)
	}
	if len(e.fake.calls("GET /v2/droplets/"+id+"/actions")) == 0 {
		t.Error("CONFIRM never checked the create action of a new droplet")
	}
	want := map[string]any{"access_v4": "203.0.113.10", "bind_v4": "10.108.0.2"}
	if !maps.Equal(res.IPAddresses, want) {
		t.Errorf("ipaddresses %v, want %v", res.IPAddresses, want)
	}
	if res.Hostname != hostname {
		t.Errorf("hostname %q, want %q", res.Hostname, hostname)
	}
}

func TestConfirmMapsAddresses(t *testing.T) {
	public := network{IPAddress: "198.51.100.7", Type: "public"}
	public2 := network{IPAddress: "198.51.100.8", Type: "public"}
	private := network{IPAddress: "10.0.0.7", Type: "private"}
	for _, tc := range []struct {
		name     string
		networks []network
		access   string
		bind     string
	}{
		{"public and private", []network{private, public}, "198.51.100.7", "10.0.0.7"},
		{"public only", []network{public, public2}, "198.51.100.7", "198.51.100.7"},
		{"private only", []network{private}, "10.0.0.7", "10.0.0.7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.fake.networks = tc.networks
			e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
			res := e.confirm("42", nil)
			mustStatus(t, res, 0)
			if res.IPAddresses["access_v4"] != tc.access || res.IPAddresses["bind_v4"] != tc.bind {
				t.Errorf("ipaddresses %v, want access %s bind %s", res.IPAddresses, tc.access, tc.bind)
			}
		})
	}
}

func TestConfirmFailsFastWhenCreationErrored(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.createErrors = true
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "new", Tags: []string{nodeTag}, actionID: 99})
	res := e.confirm("42", nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "creating droplet 42 failed (action 99 errored)") {
		t.Errorf("message %q", res.Message)
	}
}

func TestConfirmGivesUpBeforeTheDeadline(t *testing.T) {
	e := newEnv(t, envOptions{timeout: 7 * time.Second})
	e.fake.activeAfter = 1 << 30
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "new", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"poll_interval": "3"})
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "droplet 42 is still new") || !strings.Contains(res.Message, "timeouts.confirm") {
		t.Errorf("message %q should say what it waited for and which timeout to raise", res.Message)
	}
}

func TestConfirmOfAMissingDroplet(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.confirm("42", nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "droplet 42 does not exist") {
		t.Errorf("message %q", res.Message)
	}
}

func TestConfirmRejectsAForeignProviderID(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.confirm("../account", nil)
	mustStatus(t, res, 1)
	if len(e.fake.calls("")) != 0 {
		t.Errorf("requests were sent for providerid ../account: %v", e.fake.calls(""))
	}
}

// fakeSSH stands in for loom.ssh's wait_host_keys: it records each call
// and answers with host keys, or, when fail is set, with nil and fail (sshd
// never answered within the budget).
type fakeSSH struct {
	fail  string
	mu    sync.Mutex
	calls []map[string]string
}

func (f *fakeSSH) Spec() bindings.ModuleSpec { return bindings.ModuleSpec{Name: "ssh"} }

func (f *fakeSSH) Open(L *lua.LState, h bindings.Host) lua.LValue {
	return L.SetFuncs(L.NewTable(), map[string]lua.LGFunction{"wait_host_keys": func(L *lua.LState) int {
		opts := L.CheckTable(1)
		call := map[string]string{}
		for _, k := range []string{"host", "port", "timeout", "interval"} {
			call[k] = opts.RawGetString(k).String()
		}
		f.mu.Lock()
		f.calls = append(f.calls, call)
		f.mu.Unlock()
		if f.fail != "" {
			L.Push(lua.LNil)
			L.Push(lua.LString(f.fail))
			return 2
		}
		keys := L.NewTable() // the documented answer: type -> base64 blob
		keys.RawSetString("rsa", lua.LString("AAAAB3NzaC1yc2EAAAADAQABAAABAQC7"))
		keys.RawSetString("ed25519", lua.LString("AAAAC3NzaC1lZDI1NTE5AAAAIHost"))
		L.Push(keys)
		return 1
	}})
}

func TestConfirmRecordsSSHHostKeys(t *testing.T) {
	ssh := &fakeSSH{}
	e := newEnv(t, envOptions{ssh: ssh})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"wait_for_ssh": "true", "ssh_port": "2222"})
	mustStatus(t, res, 0)
	want := map[string]any{"rsa": "AAAAB3NzaC1yc2EAAAADAQABAAABAQC7", "ed25519": "AAAAC3NzaC1lZDI1NTE5AAAAIHost"}
	if got, _ := res.Result["ssh_host_keys"].(map[string]any); !maps.Equal(got, want) {
		t.Errorf("ssh_host_keys %v, want %v", res.Result["ssh_host_keys"], want)
	}
	// One wait for the droplet's public address and ssh_port, within
	// ssh_wait's default, trying every poll_interval.
	wantCall := map[string]string{"host": "203.0.113.10", "port": "2222", "timeout": "300", "interval": "0.01"}
	if len(ssh.calls) != 1 || !maps.Equal(ssh.calls[0], wantCall) {
		t.Errorf("wait_host_keys calls %v, want one %v", ssh.calls, wantCall)
	}
}

// sshd never answered within ssh_wait: CONFIRM succeeds without
// ssh_host_keys, and its warning carries the binding's reason.
func TestConfirmWarnsWhenSSHDNeverAnswers(t *testing.T) {
	why := "ssh.wait_host_keys: sshd on 203.0.113.10:22 gave no host key within 7s (timeout): 3 attempts, last error: connection refused"
	ssh := &fakeSSH{fail: why}
	e := newEnv(t, envOptions{ssh: ssh})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"wait_for_ssh": "true", "ssh_wait": "7"})
	mustStatus(t, res, 0)
	if _, ok := res.Result["ssh_host_keys"]; ok {
		t.Errorf("ssh_host_keys %v although sshd never answered", res.Result["ssh_host_keys"])
	}
	if !e.logged("WARN", why) || !e.logged("WARN", "CONFIRM succeeds without ssh_host_keys") {
		t.Errorf("no warning with the reason; logs:\n%s", e.logs.String())
	}
	if len(ssh.calls) != 1 || ssh.calls[0]["timeout"] != "7" {
		t.Errorf("wait_host_keys calls %v, want one with timeout 7 (ssh_wait)", ssh.calls)
	}
}

// With the real loom.ssh and a real sshd standing in for the droplet, the
// keys CONFIRM records are the server's own.
func TestConfirmRecordsARealSSHDsHostKeys(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	e := newEnv(t, envOptions{ssh: sshb.New(sshb.Options{})})
	e.fake.networks = []network{{IPAddress: srv.Host, Type: "public"}}
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(srv.Port)})
	mustStatus(t, res, 0)
	got, _ := res.Result["ssh_host_keys"].(map[string]any)
	if len(got) != len(srv.HostKeys) {
		t.Errorf("ssh_host_keys %v, want the %d keys sshd has", got, len(srv.HostKeys))
	}
	for typ, key := range srv.HostKeys {
		if want := base64.StdEncoding.EncodeToString(key.Marshal()); got[typ] != want {
			t.Errorf("ssh_host_keys.%s = %v, want sshd's key %s", typ, got[typ], want)
		}
	}
}

// With the real loom.ssh and nothing listening where the droplet's sshd
// should be, CONFIRM gives up after ssh_wait and still succeeds.
func TestConfirmSucceedsWhenARealSSHDNeverAnswers(t *testing.T) {
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{ssh: sshb.New(sshb.Options{DialRetries: -1})})
	e.fake.networks = []network{{IPAddress: "127.0.0.1", Type: "public"}}
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(port), "ssh_wait": "1"})
	mustStatus(t, res, 0)
	if _, ok := res.Result["ssh_host_keys"]; ok {
		t.Errorf("ssh_host_keys %v from a port nothing listens on", res.Result["ssh_host_keys"])
	}
	if addr := fmt.Sprintf("127.0.0.1:%d", port); !e.logged("WARN", addr) || !e.logged("WARN", "connection refused") {
		t.Errorf("no warning naming %s and the refusal; logs:\n%s", addr, e.logs.String())
	}
}

func TestConfirmWithoutLoomSSHStillSucceeds(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	res := e.confirm("42", map[string]any{"wait_for_ssh": nil}) // the default: wait
	mustStatus(t, res, 0)
	if _, ok := res.Result["ssh_host_keys"]; ok {
		t.Errorf("ssh_host_keys %v without a keyscan", res.Result["ssh_host_keys"])
	}
	if !e.logged("WARN", "loom.ssh is not available") {
		t.Error("no warning that host keys were not recorded")
	}
}

func TestConfirmSkipsSSHWhenAsked(t *testing.T) {
	ssh := &fakeSSH{}
	e := newEnv(t, envOptions{ssh: ssh})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	mustStatus(t, e.confirm("42", map[string]any{"wait_for_ssh": false}), 0)
	if len(ssh.calls) != 0 {
		t.Errorf("wait_host_keys ran although wait_for_ssh is false: %v", ssh.calls)
	}
}

func TestDeleteDestroysTheDroplet(t *testing.T) {
	e := newEnv(t, envOptions{})
	created := e.create(nil, nil)
	mustStatus(t, created, 0)
	res := e.delete(created.Result["providerid"], nil)
	mustStatus(t, res, 0)
	if e.fake.dropletCount() != 0 {
		t.Errorf("%d droplets left", e.fake.dropletCount())
	}
	if n := len(e.fake.calls("DELETE /v2/droplets/3164494")); n != 1 {
		t.Errorf("%d DELETEs, want 1", n)
	}
}

func TestDeleteOfAGoneDropletSucceeds(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.delete("3164494", nil)
	mustStatus(t, res, 0)
	if n := len(e.fake.calls("DELETE /v2/droplets/3164494")); n != 1 {
		t.Errorf("%d DELETEs, want 1", n)
	}
}

func TestDeleteWithoutProviderIDCleansUpByTag(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	e.fake.seed(&droplet{ID: 43, Name: "other", Status: "active", Tags: []string{"coopr-node-other"}})
	res := e.delete(nil, nil)
	mustStatus(t, res, 0)
	if e.fake.get(42) != nil || e.fake.get(43) == nil {
		t.Error("DELETE without providerid should remove exactly the node's tagged droplet")
	}
}

func TestDeleteSurfacesErrors(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 42, Name: hostname, Status: "active", Tags: []string{nodeTag}})
	e.fake.queue("DELETE /v2/droplets/42", canned{status: 422, body: map[string]any{
		"id": "unprocessable_entity", "message": "Droplet is locked by an in-progress event."}})
	res := e.delete("42", nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "Droplet is locked by an in-progress event.") {
		t.Errorf("message %q", res.Message)
	}
}

func TestAPIURLOutsideTheAllowListIsRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(map[string]any{"api_url": e.fake.srv.URL}, nil)
	mustStatus(t, res, 1)
	if res.Error["kind"] != "permission" || !strings.Contains(res.Message, "allow-list") {
		t.Errorf("kind %v, message %q; want the allow-list refusal", res.Error["kind"], res.Message)
	}
	if n := len(e.fake.calls("")); n != 0 {
		t.Errorf("%d requests reached the API", n)
	}
}

// An API that echoes the request's credentials into an error message
// still cannot put the token into the result or the logs.
func TestTokenIsRedactedWhenTheAPIEchoesIt(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.queue("POST /v2/droplets", canned{status: 400, body: map[string]any{
		"id": "bad_request", "message": "malformed header: Authorization: Bearer " + token}})
	res := e.create(nil, nil) // run() fails the test if the token is in the result
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "Bearer [REDACTED]") {
		t.Errorf("message %q: want the echoed token redacted", res.Message)
	}
}

func TestMissingTokenIsAUsageError(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.run(task("CREATE", fields(map[string]any{"api_token": nil}), nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "api_token") {
		t.Errorf("message %q should name the missing field", res.Message)
	}
	if len(e.fake.calls("")) != 0 {
		t.Error("requests were sent without a token")
	}
}

// The definition keeps production strict: only the real API host.
func TestDefinitionAllowsOnlyTheRealAPI(t *testing.T) {
	data, err := os.ReadFile("digitalocean.json")
	if err != nil {
		t.Fatal(err)
	}
	var def struct {
		Permissions struct {
			HTTP []string `json:"http"`
		} `json:"permissions"`
		Timeouts map[string]string `json:"timeouts"`
	}
	if err := json.Unmarshal(data, &def); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(def.Permissions.HTTP, []string{apiHost}) {
		t.Errorf("permissions.http %v, want [%s]", def.Permissions.HTTP, apiHost)
	}
	want := map[string]string{"create": "5m", "confirm": "15m", "delete": "5m"}
	if !maps.Equal(def.Timeouts, want) {
		t.Errorf("timeouts %v, want %v", def.Timeouts, want)
	}
}
