// Tests for the google provider: the plugin folder as shipped, run by the
// real runtime with the real loom.http and loom.crypto, against the strict
// Compute Engine fake (internal/cloudfake/gcefake), which checks every request and
// answer against Google's discovery document for compute v1 and verifies
// the service account's JWT. On a virtual clock.
//
// The plugin keeps its production URLs and allow-list: the HTTP binding's
// transport carries requests for compute.googleapis.com and
// oauth2.googleapis.com to the fake.
package google_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
	cryptob "github.com/loomrt/loom/bindings/crypto"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	sshb "github.com/loomrt/loom/bindings/ssh"
	timeb "github.com/loomrt/loom/bindings/time"
	"github.com/loomrt/loom/internal/cloudfake/gcefake"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	clusterID = "00000042"
	nodeID    = "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d"
	hostname  = "hdp00000042-1000.example.com"
	instName  = "hdp00000042-1000"
	zone      = "us-central1-a"
	tokenURL  = "https://oauth2.googleapis.com/token"
)

type vclock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func (c *vclock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *vclock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok && c.now.Add(d).After(dl) {
		c.now = dl
		return context.DeadlineExceeded
	}
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return ctx.Err()
}

func (c *vclock) slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

type env struct {
	t       *testing.T
	fake    *gcefake.Server
	clock   *vclock
	rt      *runtime.Runtime
	logs    *luatest.LogBuffer
	workDir string
	keyJSON []byte
}

type envOptions struct {
	fake    gcefake.Options
	ssh     bool
	timeout time.Duration
	// coopr serves the plugin's Lua with Coopr's own fog_provider.json,
	// unchanged, in Coopr's folder layout (coopr_test.go).
	coopr bool
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	clock := &vclock{now: time.Now()}
	if o.fake.Now == nil {
		o.fake.Now = clock.Now
	}
	fake := gcefake.Start(o.fake)
	t.Cleanup(fake.Close)
	e := &env{t: t, fake: fake, clock: clock, logs: &luatest.LogBuffer{}, workDir: t.TempDir(), keyJSON: fake.KeyJSON(tokenURL)}
	luatest.WriteFile(t, filepath.Join(e.workDir, "default", "providertypes", "google", "api_keys", "sa.json"), string(e.keyJSON))
	bs := []bindings.Binding{logb.New(), jsonb.New(), fsb.New(), timeb.NewWithClock(clock), cryptob.New(),
		httpb.New(httpb.Options{Transport: e.transport(), Clock: clock})}
	if o.ssh {
		bs = append(bs, sshb.New(sshb.Options{}))
	}
	e.rt = luatest.NewRuntime(t, runtime.Options{
		PluginsDir: pluginsDir(t, o.coopr), WorkDir: e.workDir, Bindings: bindings.NewRegistry(bs...), Logger: e.logs.Logger(), Timeout: o.timeout,
	})
	t.Cleanup(func() {
		for _, v := range fake.Violations() {
			t.Errorf("discovery document violation: %s", v)
		}
		if strings.Contains(e.logs.String(), "PRIVATE KEY") || strings.Contains(e.logs.String(), "ya29.") {
			t.Errorf("a key or a token is in the logs:\n%s", e.logs.String())
		}
	})
	return e
}

type transport struct {
	addr string
	base *http.Transport
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if h := req.URL.Hostname(); h != "compute.googleapis.com" && h != "oauth2.googleapis.com" {
		return nil, fmt.Errorf("test transport: only Google's hosts are faked, not %s", req.URL.Host)
	}
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("test transport: the plugin used %s, not https", req.URL.Scheme)
	}
	r := req.Clone(req.Context())
	r.URL.Scheme, r.Host = "http", req.URL.Host
	r.URL.Host = tr.addr
	return tr.base.RoundTrip(r)
}

func (e *env) transport() http.RoundTripper {
	u, _ := url.Parse(e.fake.URL())
	tr := &transport{addr: u.Host, base: &http.Transport{}}
	e.t.Cleanup(tr.base.CloseIdleConnections)
	return tr
}

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
		luatest.WriteFile(t, filepath.Join(dir, "google", p), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// sshKeyResource writes a private key into the provider's ssh_keys
// resource.
func (e *env) sshKeyResource(name string) {
	e.t.Helper()
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(priv, "coopr")
	if err != nil {
		e.t.Fatal(err)
	}
	luatest.WriteFile(e.t, filepath.Join(e.workDir, "default", "providertypes", "google", "ssh_keys", name), string(pem.EncodeToMemory(block)))
}

// cooprFields are a Coopr admin's google fields.
func cooprFields(extra map[string]any) map[string]any {
	f := map[string]any{"google_project": "loom-test", "google_client_email": gcefake.Email, "api_key_resource": "sa.json",
		"zone_name": zone, "ssh_user": "coopr", "poll_interval": "2", "wait_for_ssh": "false", "host_key_wait": "20"}
	maps.Copy(f, extra)
	for k, v := range f {
		if v == nil {
			delete(f, k)
		}
	}
	return f
}

func task(name string, flds map[string]any, config map[string]any) []byte {
	cfg := map[string]any{"hostname": hostname, "ipaddresses": map[string]any{}, "nodenum": 1000, "sshuser": "debian",
		"flavor": "e2-small", "image": "debian-12",
		"provider": map[string]any{"name": "gce", "providertype": "google", "provisioner": flds}}
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

func (e *env) run(data []byte) *runtime.Result {
	e.t.Helper()
	res := luatest.Run(e.t, e.rt, data)
	out, _ := json.Marshal(res)
	if strings.Contains(string(out), "PRIVATE KEY") || strings.Contains(string(out), "ya29.") {
		e.t.Errorf("a key or a token is in the result: %s", out)
	}
	return res
}

func (e *env) create(f, config map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CREATE", f, config))
}

func (e *env) confirm(id string, f map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CONFIRM", f, map[string]any{"providerid": id, "ssh-auth": map[string]any{"user": "coopr"}}))
}

func (e *env) delete(id any, f, config map[string]any) *runtime.Result {
	e.t.Helper()
	cfg := map[string]any{"providerid": id}
	maps.Copy(cfg, config)
	return e.run(task("DELETE", f, cfg))
}

func mustStatus(t *testing.T, res *runtime.Result, want int) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %d, want %d; message: %s", res.Status, want, res.Message)
	}
}

func (e *env) logged(level, msg string) bool {
	for _, line := range strings.Split(e.logs.String(), "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == level && strings.Contains(rec.Msg, msg) {
			return true
		}
	}
	return false
}

func body(t *testing.T, x gcefake.Exchange) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(x.Body, &m); err != nil {
		t.Fatalf("%s body: %v", x.Method, err)
	}
	return m
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestCreateInsertsAnInstance(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(cooprFields(map[string]any{"labels": "team=web", "google_data_disk_size_gb": "100,50"}), nil)
	mustStatus(t, res, 0)
	ins := e.fake.Exchanges("compute.instances.insert")
	if len(ins) != 1 {
		t.Fatalf("%d inserts, want 1", len(ins))
	}
	if rid := ins[0].Query.Get("requestId"); !uuidRe.MatchString(rid) {
		t.Errorf("requestId %q is not a version-5 UUID", rid)
	}
	b := body(t, ins[0])
	if b["name"] != instName || b["machineType"] != "zones/"+zone+"/machineTypes/e2-small" {
		t.Errorf("name %v, machineType %v", b["name"], b["machineType"])
	}
	disks := b["disks"].([]any)
	boot := disks[0].(map[string]any)["initializeParams"].(map[string]any)
	if boot["sourceImage"] != "projects/debian-cloud/global/images/family/debian-12" || boot["diskSizeGb"] != "10" ||
		boot["diskType"] != "zones/"+zone+"/diskTypes/pd-standard" {
		t.Errorf("boot disk %v", boot)
	}
	if len(disks) != 3 || disks[1].(map[string]any)["deviceName"] != instName+"-data" || disks[2].(map[string]any)["deviceName"] != instName+"-data2" {
		t.Errorf("data disks %v", disks[1:])
	}
	wantLabels := map[string]any{"loom": "true", "coopr-cluster": clusterID, "coopr-node": nodeID, "team": "web"}
	if !maps.Equal(b["labels"].(map[string]any), wantLabels) {
		t.Errorf("labels %v, want %v", b["labels"], wantLabels)
	}
	items := b["metadata"].(map[string]any)["items"].([]any)
	sshKeys := items[0].(map[string]any)["value"].(string)
	keyFile := filepath.Join(e.workDir, "default", "providertypes", "google", "ssh_keys", "loom-"+nodeID)
	data, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		t.Fatal(err)
	}
	wantKey := "coopr:" + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " coopr"
	if sshKeys != wantKey {
		t.Errorf("ssh-keys %q, want %q (the generated key, for ssh_user)", sshKeys, wantKey)
	}
	if n := len(e.fake.Exchanges("token")); n != 1 {
		t.Errorf("%d token requests, want 1 (then cached)", n)
	}
	if res.Result["providerid"] != instName {
		t.Errorf("providerid %v", res.Result["providerid"])
	}
	auth, _ := res.Result["ssh-auth"].(map[string]any)
	if auth["user"] != "coopr" || auth["identityfile"] != keyFile {
		t.Errorf("ssh-auth %v", auth)
	}
	if len(e.fake.Exchanges("compute.zoneOperations.get")) == 0 {
		t.Error("CREATE did not wait for the insert operation")
	}
}

func TestCreateIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.create(cooprFields(nil), nil), 0)
	again := e.create(cooprFields(nil), nil)
	mustStatus(t, again, 0)
	if n := len(e.fake.Exchanges("compute.instances.insert")); n != 1 || len(e.fake.Instances()) != 1 {
		t.Errorf("%d inserts, %d instances; want 1 and 1", n, len(e.fake.Instances()))
	}
}

func TestCreateAfterALostAnswer(t *testing.T) {
	for _, f := range []gcefake.Fault{{Apply: true, Drop: true}, {Apply: true, Status: 503, Reason: "backendError"}} {
		t.Run(fmt.Sprintf("%d drop=%v", f.Status, f.Drop), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.fake.FailNext("insert", f)
			res := e.create(cooprFields(nil), nil)
			mustStatus(t, res, 0)
			ins := e.fake.Exchanges("compute.instances.insert")
			if len(ins) != 2 || ins[0].Query.Get("requestId") != ins[1].Query.Get("requestId") {
				t.Fatalf("%d inserts, want 2 with one requestId", len(ins))
			}
			if len(e.fake.Instances()) != 1 {
				t.Errorf("%d instances, want 1", len(e.fake.Instances()))
			}
		})
	}
}

// A node deleted and created again within the hour Compute Engine
// remembers requestIds: the same request (the same key) gets the old
// operation, whose instance is gone, and follows the chain to a new one.
func TestCreateAfterDeleteInsertsAgain(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.sshKeyResource("coopr.pem")
	f := cooprFields(map[string]any{"ssh_key_resource": "coopr.pem"})
	for i := 0; i < 3; i++ {
		mustStatus(t, e.create(f, nil), 0)
		mustStatus(t, e.delete(instName, f, nil), 0)
	}
	ins := e.fake.Exchanges("compute.instances.insert")
	rids := map[string]bool{}
	for _, x := range ins {
		rids[x.Query.Get("requestId")] = true
	}
	if len(rids) != 3 || len(ins) != 6 {
		t.Errorf("%d inserts with %d requestIds; want 6 (1, 2, then 3: the chain) and 3", len(ins), len(rids))
	}
	if len(e.fake.Instances()) != 0 {
		t.Errorf("instances left: %v", e.fake.Instances())
	}
}

func TestThrottling(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.FailNext("get", gcefake.Fault{Status: 429, Reason: "rateLimitExceeded", RetryAfter: 7})
	e.fake.FailNext("insert", gcefake.Fault{Status: 403, Reason: "rateLimitExceeded", Message: "Rate Limit Exceeded"})
	e.fake.FailNext("insert", gcefake.Fault{Status: 429, Reason: "rateLimitExceeded"})
	res := e.create(cooprFields(nil), nil)
	mustStatus(t, res, 0)
	sleeps := e.clock.slept()
	if len(sleeps) < 3 || sleeps[0] != 7*time.Second {
		t.Errorf("waits %v; want Retry-After's 7s first, then back-off", sleeps)
	}
	if len(e.fake.Instances()) != 1 || !e.logged("WARN", "HTTP 403 rateLimitExceeded") {
		t.Errorf("%d instances; logs:\n%s", len(e.fake.Instances()), e.logs.String())
	}
}

func TestAuthFailures(t *testing.T) {
	e := newEnv(t, envOptions{})
	other := gcefake.New(gcefake.Options{}).KeyJSON(tokenURL) // another service account's key
	luatest.WriteFile(t, filepath.Join(e.workDir, "default", "providertypes", "google", "api_keys", "other.json"), string(other))
	res := e.create(cooprFields(map[string]any{"api_key_resource": "other.json"}), nil)
	mustStatus(t, res, 201)
	if !strings.Contains(res.Message, "invalid_grant: Invalid JWT Signature.") {
		t.Errorf("message %q", res.Message)
	}
	res = e.create(cooprFields(map[string]any{"google_project": "someone-else"}), nil)
	mustStatus(t, res, 202)
	if !strings.Contains(res.Message, "HTTP 403 forbidden") {
		t.Errorf("message %q", res.Message)
	}
	if len(e.fake.Exchanges("compute.instances.insert")) != 0 {
		t.Error("an insert after refused credentials")
	}
	// A token that expired is replaced once.
	mustStatus(t, e.create(cooprFields(nil), nil), 0)
	e.fake.ExpireTokens()
	mustStatus(t, e.confirm(instName, cooprFields(map[string]any{"host_key_wait": "0"})), 0)
	if n := len(e.fake.Exchanges("token")); n != 4 {
		t.Errorf("%d token requests, want 4 (refused, wrong project, first, after expiry)", n)
	}
}

func TestOperationErrorsAndForeignInstances(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.FailNext("insert", gcefake.Fault{OpError: "QUOTA_EXCEEDED"})
	res := e.create(cooprFields(nil), nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "failed: QUOTA_EXCEEDED: Quota 'CPUS' exceeded") {
		t.Errorf("message %q", res.Message)
	}
	e.fake.Seed(zone, instName, map[string]string{"coopr-node": "someone-else"})
	res = e.create(cooprFields(nil), nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "belongs to node someone-else") {
		t.Errorf("message %q", res.Message)
	}
	res = e.create(cooprFields(nil), map[string]any{"image": "no-such-image"})
	mustStatus(t, res, 1)
	for _, c := range []struct {
		fields, config map[string]any
		want           string
	}{
		{nil, map[string]any{"hostname": "db-1.example.com", "image": "no-such-image"}, "HTTP 404 notFound: The resource 'global/images/no-such-image' was not found"},
		{nil, map[string]any{"hostname": "db-2.example.com", "flavor": "z9-huge"}, "Machine type with name 'z9-huge' does not exist"},
		{map[string]any{"zone_name": "mars"}, nil, `zone_name "mars" is not a Compute Engine zone`},
		{map[string]any{"api_key_resource": "../../secrets"}, nil, "must be the file name of a JSON key"},
		{map[string]any{"labels": "Team=x"}, map[string]any{"hostname": "db-3.example.com"}, "must start with a lowercase letter"},
	} {
		res := e.create(cooprFields(c.fields), c.config)
		if res.Status == 0 || !strings.Contains(res.Message, c.want) {
			t.Errorf("%v %v: status %d, message %q; want %q", c.fields, c.config, res.Status, res.Message, c.want)
		}
	}
}

func TestConfirm(t *testing.T) {
	e := newEnv(t, envOptions{fake: gcefake.Options{RunningAfter: 2, GuestAfter: 2}})
	mustStatus(t, e.create(cooprFields(nil), nil), 0)
	res := e.confirm(instName, cooprFields(map[string]any{"provider_hostname": "true"}))
	mustStatus(t, res, 0)
	inst, _ := e.fake.Instance(instName)
	if res.IPAddresses["access_v4"] != inst.NatIP || res.IPAddresses["bind_v4"] != inst.NetworkIP {
		t.Errorf("ipaddresses %v, want %s and %s", res.IPAddresses, inst.NatIP, inst.NetworkIP)
	}
	o := strings.Split(inst.NatIP, ".")
	if want := o[3] + "." + o[2] + "." + o[1] + "." + o[0] + ".bc.googleusercontent.com"; res.Hostname != want {
		t.Errorf("hostname %q, want %q", res.Hostname, want)
	}
	pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(inst.HostKeys[0]))
	if keys, _ := res.Result["ssh_host_keys"].(map[string]any); keys["ed25519"] != base64.StdEncoding.EncodeToString(pub.Marshal()) {
		t.Errorf("ssh_host_keys %v", res.Result["ssh_host_keys"])
	}
	res = e.confirm(instName, cooprFields(map[string]any{"bootstrap_interface": "bind_v4", "host_key_wait": "0"}))
	mustStatus(t, res, 0)
	if res.IPAddresses["access_v4"] != inst.NetworkIP || res.Hostname != hostname {
		t.Errorf("bind_v4: ipaddresses %v, hostname %s", res.IPAddresses, res.Hostname)
	}
	res = e.confirm("gone-1", cooprFields(nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "has no instance gone-1") {
		t.Errorf("message %q", res.Message)
	}
	res = e.confirm("../instances", cooprFields(nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "is not a Compute Engine instance name") {
		t.Errorf("message %q", res.Message)
	}
}

func TestConfirmChecksSSHDAgainstTheGuestAttributes(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	var lines []string
	for _, k := range srv.HostKeys {
		lines = append(lines, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
	}
	slices.Sort(lines)
	for _, tc := range []struct {
		name string
		keys []string
		ok   bool
	}{{"matching keys", lines, true}, {"other keys", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{ssh: true, fake: gcefake.Options{Machines: []gcefake.Machine{{NatIP: "127.0.0.1", HostKeys: tc.keys}}}})
			f := cooprFields(map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(srv.Port), "ssh_wait": "20"})
			mustStatus(t, e.create(f, nil), 0)
			res := e.confirm(instName, f)
			if tc.ok {
				mustStatus(t, res, 0)
				return
			}
			mustStatus(t, res, 1)
			if !strings.Contains(res.Message, "guest attributes of "+instName+" do not list") {
				t.Errorf("message %q", res.Message)
			}
		})
	}
}

// Nothing listens where the instance's sshd should be: with keys from the
// guest attributes, CONFIRM cannot check them and fails with the wait's
// reason; without (host_key_wait 0), it succeeds with a warning.
func TestConfirmWhenSSHDNeverAnswers(t *testing.T) {
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	why := fmt.Sprintf("sshd on 127.0.0.1:%d gave no host key within 1s", port)
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshdtest.Start(t, sshdtest.Config{}).HostKeys["ed25519"])))
	for _, tc := range []struct {
		name        string
		hostKeyWait string
		status      int
	}{{"guest attributes list keys", "5", 1}, {"no guest attribute keys", "0", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{ssh: true, fake: gcefake.Options{Machines: []gcefake.Machine{{NatIP: "127.0.0.1", HostKeys: []string{key}}}}})
			f := cooprFields(map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(port), "ssh_wait": "1", "host_key_wait": tc.hostKeyWait})
			mustStatus(t, e.create(f, nil), 0)
			res := e.confirm(instName, f)
			mustStatus(t, res, tc.status)
			if tc.status != 0 {
				if !strings.Contains(res.Message, why) {
					t.Errorf("message %q does not say %q", res.Message, why)
				}
				return
			}
			if _, ok := res.Result["ssh_host_keys"]; ok {
				t.Errorf("ssh_host_keys %v", res.Result["ssh_host_keys"])
			}
			if !strings.Contains(e.logs.String(), why) {
				t.Errorf("no warning saying %q:\n%s", why, e.logs.String())
			}
		})
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.create(cooprFields(nil), nil), 0)
	mustStatus(t, e.delete(instName, cooprFields(nil), nil), 0)
	if len(e.fake.Instances()) != 0 {
		t.Errorf("instances after DELETE: %v", e.fake.Instances())
	}
	if _, err := os.Stat(filepath.Join(e.workDir, "default", "providertypes", "google", "ssh_keys", "loom-"+nodeID)); !os.IsNotExist(err) {
		t.Errorf("the generated key was not removed (%v)", err)
	}
	mustStatus(t, e.delete(instName, cooprFields(nil), nil), 0) // gone already
	// Without providerid: by label.
	mustStatus(t, e.create(cooprFields(nil), map[string]any{"nodeId": "n-2", "hostname": "web-2.example.com"}), 0)
	mustStatus(t, e.delete(nil, cooprFields(nil), map[string]any{"nodeId": "n-2"}), 0)
	if len(e.fake.Instances()) != 0 {
		t.Errorf("instances after DELETE by label: %v", e.fake.Instances())
	}
	if f := e.fake.Exchanges("compute.instances.list"); len(f) != 1 || f[0].Query.Get("filter") != `labels.coopr-node = "n-2"` {
		t.Errorf("list %v", f)
	}
	// Another node's instance is refused.
	mustStatus(t, e.create(cooprFields(nil), map[string]any{"nodeId": "n-3", "hostname": "web-3.example.com"}), 0)
	res := e.delete("web-3", cooprFields(nil), nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "belongs to node n-3") {
		t.Errorf("message %q", res.Message)
	}
}

// The key in a sensitive field instead of a resource: read by reference,
// never in any output.
func TestJSONKeyInAField(t *testing.T) {
	e := newEnv(t, envOptions{})
	f := cooprFields(map[string]any{"api_key_resource": nil, "google_client_email": nil, "google_json_key": string(e.keyJSON),
		"ssh_key_resource": nil})
	res := e.create(f, nil)
	mustStatus(t, res, 0)
	out, _ := json.Marshal(res)
	var sa struct {
		PrivateKey string `json:"private_key"`
	}
	json.Unmarshal(e.keyJSON, &sa)
	line := strings.Split(sa.PrivateKey, "\n")[1]
	if strings.Contains(string(out)+e.logs.String(), line) {
		t.Error("the service account's key is in the result or the logs")
	}
}

func TestDefinitionKeepsCooprsFields(t *testing.T) {
	data, err := os.ReadFile("google.json")
	if err != nil {
		t.Fatal(err)
	}
	var def struct {
		Google struct {
			Parameters struct {
				Admin struct {
					Fields map[string]struct {
						Sensitive bool `json:"sensitive"`
					} `json:"fields"`
				} `json:"admin"`
			} `json:"parameters"`
			ResourceTypes map[string]any `json:"resourceTypes"`
		} `json:"google"`
	}
	if err := json.Unmarshal(data, &def); err != nil {
		t.Fatal(err)
	}
	fields := def.Google.Parameters.Admin.Fields
	for _, f := range []string{"google_project", "google_client_email", "api_key_resource", "ssh_key_resource", "ssh_user",
		"google_data_disk_size_gb", "google_data_disk_type", "google_root_disk_size_gb", "google_root_disk_type", "zone_name",
		"bootstrap_interface", "external_ip", "auto_restart", "provider_hostname", "network"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("Coopr's field %s is missing", f)
		}
	}
	if !fields["google_json_key"].Sensitive {
		t.Error("google_json_key is not sensitive")
	}
	for _, r := range []string{"api_keys", "ssh_keys"} {
		if def.Google.ResourceTypes[r] == nil {
			t.Errorf("resource type %s is missing", r)
		}
	}
}
