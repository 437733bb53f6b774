// Tests for the aws provider: the plugin folder as shipped, run by the
// real runtime with the real loom.http, loom.crypto and loom.xml, against
// the strict EC2 fake (internal/cloudfake/ec2fake), on a virtual clock.
//
// The plugin keeps its production endpoint (https://ec2.<region>.
// amazonaws.com) and allow-list: the HTTP binding's transport is the only
// test seam, and it carries requests for *.amazonaws.com to the fake.
package aws_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
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
	xmlb "github.com/loomrt/loom/bindings/xml"
	"github.com/loomrt/loom/internal/cloudfake/ec2fake"
	"github.com/loomrt/loom/internal/sshdtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	clusterID    = "00000042"
	nodeID       = "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d"
	hostname     = "web00000042-1000.example.com"
	sessionToken = "FwoGZXIvYXdzEBYaDExampleSessionToken0123456789abcdef"
)

// vclock is a virtual clock: sleeps return at once and move it on.
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

// env is one runtime serving the plugin, with its fake EC2 and logs.
type env struct {
	t       *testing.T
	fake    *ec2fake.Server
	clock   *vclock
	rt      *runtime.Runtime
	logs    *luatest.LogBuffer
	workDir string
}

type envOptions struct {
	fake    ec2fake.Options
	ssh     bool          // the real loom.ssh
	timeout time.Duration // overrides the definition's hook timeouts
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
	if o.fake.MaxSkew == 0 {
		o.fake.MaxSkew = 5 * time.Minute
	}
	if len(o.fake.Credentials) == 0 {
		o.fake.Credentials = []ec2fake.Credentials{{AccessKeyID: ec2fake.AccessKeyID, SecretAccessKey: ec2fake.SecretAccessKey}}
	}
	fake := ec2fake.Start(o.fake)
	t.Cleanup(fake.Close)
	e := &env{t: t, fake: fake, clock: clock, logs: &luatest.LogBuffer{}, workDir: t.TempDir()}
	bs := []bindings.Binding{logb.New(), jsonb.New(), fsb.New(), timeb.NewWithClock(clock), cryptob.New(), xmlb.New(),
		httpb.New(httpb.Options{Transport: e.transport(), Clock: clock})}
	if o.ssh {
		bs = append(bs, sshb.New(sshb.Options{}))
	}
	e.rt = luatest.NewRuntime(t, runtime.Options{
		PluginsDir: pluginsDir(t, o.coopr),
		WorkDir:    e.workDir,
		Bindings:   bindings.NewRegistry(bs...),
		Logger:     e.logs.Logger(),
		Timeout:    o.timeout,
	})
	t.Cleanup(func() {
		for _, s := range []string{ec2fake.SecretAccessKey, sessionToken} {
			if strings.Contains(e.logs.String(), s) {
				t.Errorf("a secret appears in the logs:\n%s", e.logs.String())
			}
		}
	})
	return e
}

// transport sends requests for *.amazonaws.com(.cn) to the fake, keeping
// the Host header (the signature covers it).
type transport struct {
	addr string
	base *http.Transport
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(req.URL.Hostname(), ".amazonaws.com") && !strings.HasSuffix(req.URL.Hostname(), ".amazonaws.com.cn") {
		return nil, fmt.Errorf("test transport: only *.amazonaws.com is faked, not %s", req.URL.Host)
	}
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("test transport: the plugin used %s, not https", req.URL.Scheme)
	}
	r := req.Clone(req.Context())
	r.URL.Scheme = "http"
	r.URL.Host = tr.addr
	r.Host = req.URL.Host
	return tr.base.RoundTrip(r)
}

func (e *env) transport() http.RoundTripper {
	u, _ := url.Parse(e.fake.URL())
	tr := &transport{addr: u.Host, base: &http.Transport{}}
	e.t.Cleanup(tr.base.CloseIdleConnections)
	return tr
}

// copyPlugin copies the plugin folder as shipped into a plugins dir of
// its own.
func copyPlugin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, ".json")) || strings.HasPrefix(p, "testdata") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		luatest.WriteFile(t, filepath.Join(dir, "aws", p), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// cooprFields are a Coopr admin's aws provider fields (the example of
// Coopr's provisioner documentation), with a short poll.
func cooprFields(extra map[string]any) map[string]any {
	f := map[string]any{
		"api_user": ec2fake.AccessKeyID, "api_password": ec2fake.SecretAccessKey, "aws_region": "us-east-1",
		"ssh_keypair": ec2fake.KeyPair, "ssh_key_resource": "coopr.pem", "security_groups": "default",
		"poll_interval": "2", "wait_for_ssh": "false",
	}
	maps.Copy(f, extra)
	for k, v := range f {
		if v == nil {
			delete(f, k)
		}
	}
	return f
}

// task builds a Coopr provider task; "nodeId" in config replaces the
// task's node id.
func task(name string, flds map[string]any, config map[string]any) []byte {
	cfg := map[string]any{
		"hostname": hostname, "ipaddresses": map[string]any{}, "nodenum": 1000, "sshuser": "admin",
		"hardwaretype": "medium", "imagetype": "debian12", "flavor": "m3.medium", "image": ec2fake.DefaultImage,
		"provider": map[string]any{"name": "aws-us-east-1", "providertype": "aws", "provisioner": flds},
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
	for _, s := range []string{ec2fake.SecretAccessKey, sessionToken} {
		if strings.Contains(string(out), s) {
			e.t.Errorf("a secret appears in the result: %s", out)
		}
	}
	return res
}

func (e *env) create(f map[string]any, config map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CREATE", f, config))
}

func (e *env) confirm(id string, f map[string]any) *runtime.Result {
	e.t.Helper()
	return e.run(task("CONFIRM", f, map[string]any{"providerid": id, "ssh-auth": map[string]any{"user": "admin"}}))
}

func (e *env) delete(id any, f map[string]any, config map[string]any) *runtime.Result {
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

// params returns the parameters of the action's requests, in order.
func (e *env) params(action string) []url.Values {
	var out []url.Values
	for _, x := range e.fake.Exchanges(action) {
		out = append(out, x.Params)
	}
	return out
}

func wantParams(t *testing.T, got url.Values, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("%s = %q, want %q", k, got.Get(k), v)
		}
	}
}

func TestCreateLaunchesAnInstance(t *testing.T) {
	e := newEnv(t, envOptions{})
	res := e.create(cooprFields(map[string]any{"tags": "team=web, cost center=42"}), nil)
	mustStatus(t, res, 0)

	runs := e.params("RunInstances")
	if len(runs) != 1 {
		t.Fatalf("%d RunInstances, want 1", len(runs))
	}
	wantParams(t, runs[0], map[string]string{
		"ImageId": ec2fake.DefaultImage, "InstanceType": "m3.medium", "MinCount": "1", "MaxCount": "1",
		"KeyName": "coopr", "SecurityGroup.1": "default",
		"BlockDeviceMapping.1.DeviceName": "/dev/xvda", "BlockDeviceMapping.1.Ebs.VolumeSize": "10",
		"BlockDeviceMapping.1.Ebs.VolumeType": "standard", "BlockDeviceMapping.1.Ebs.DeleteOnTermination": "true",
		"TagSpecification.1.ResourceType": "instance", "TagSpecification.2.ResourceType": "volume",
		"TagSpecification.1.Tag.1.Key": "Name", "TagSpecification.1.Tag.1.Value": hostname,
		"TagSpecification.1.Tag.2.Key": "coopr-cluster", "TagSpecification.1.Tag.2.Value": clusterID,
		"TagSpecification.1.Tag.3.Key": "coopr-node", "TagSpecification.1.Tag.3.Value": nodeID,
		"TagSpecification.1.Tag.4.Key": "team", "TagSpecification.1.Tag.5.Key": "cost center",
	})
	if tok := runs[0].Get("ClientToken"); !strings.HasPrefix(tok, "loom-") || len(tok) > 64 {
		t.Errorf("ClientToken %q, want loom-<digest>, at most 64 characters", tok)
	}
	// It looked for the node's instance first, and read the image.
	all := e.fake.Exchanges("")
	if all[0].Action != "DescribeInstances" || all[0].Params.Get("Filter.1.Name") != "tag:coopr-node" || all[0].Params.Get("Filter.1.Value.1") != nodeID {
		t.Errorf("first request %s %v, want the lookup of the node's tag", all[0].Action, all[0].Params)
	}
	if len(e.fake.Exchanges("DescribeImages")) != 1 {
		t.Error("the image's root device was not read")
	}
	live := e.fake.Live()
	if len(live) != 1 || res.Result["providerid"] != live[0].ID {
		t.Fatalf("providerid %v, instances %+v", res.Result["providerid"], live)
	}
	auth, _ := res.Result["ssh-auth"].(map[string]any)
	wantKey := filepath.Join(e.workDir, "default", "providertypes", "aws", "ssh_keys", "coopr.pem")
	if auth["user"] != "admin" || auth["identityfile"] != wantKey {
		t.Errorf("ssh-auth %v, want user admin and identityfile %s", auth, wantKey)
	}
}

func TestCreateInAVPCSubnet(t *testing.T) {
	e := newEnv(t, envOptions{})
	f := cooprFields(map[string]any{"subnet_id": ec2fake.Subnet, "security_group_ids": ec2fake.SecurityGroupID,
		"dedicated_instance": "true", "iam_instance_profile": "loom-nodes", "availability_zone": "us-east-1a",
		"user_data": "#cloud-config\npackages: [htop]\n"})
	mustStatus(t, e.create(f, nil), 0)
	p := e.params("RunInstances")[0]
	wantParams(t, p, map[string]string{
		"NetworkInterface.1.DeviceIndex": "0", "NetworkInterface.1.SubnetId": ec2fake.Subnet,
		"NetworkInterface.1.AssociatePublicIpAddress": "true", "NetworkInterface.1.SecurityGroupId.1": ec2fake.SecurityGroupID,
		"Placement.Tenancy": "dedicated", "IamInstanceProfile.Name": "loom-nodes", "Placement.AvailabilityZone": "us-east-1a",
		"UserData": base64.StdEncoding.EncodeToString([]byte("#cloud-config\npackages: [htop]\n")),
		"SubnetId": "", "SecurityGroup.1": "",
	})
	// Without a public address: the subnet and groups at instance level.
	e2 := newEnv(t, envOptions{})
	mustStatus(t, e2.create(cooprFields(map[string]any{"subnet_id": ec2fake.Subnet, "security_group_ids": ec2fake.SecurityGroupID,
		"associate_public_ip": false}), nil), 0)
	wantParams(t, e2.params("RunInstances")[0], map[string]string{"SubnetId": ec2fake.Subnet,
		"SecurityGroupId.1": ec2fake.SecurityGroupID, "NetworkInterface.1.SubnetId": ""})
}

func TestCreateIsIdempotent(t *testing.T) {
	e := newEnv(t, envOptions{})
	first := e.create(cooprFields(nil), nil)
	mustStatus(t, first, 0)
	again := e.create(cooprFields(nil), nil)
	mustStatus(t, again, 0)
	if again.Result["providerid"] != first.Result["providerid"] {
		t.Errorf("the second CREATE returned %v, the first %v", again.Result["providerid"], first.Result["providerid"])
	}
	if n := len(e.fake.Exchanges("RunInstances")); n != 1 || len(e.fake.Instances()) != 1 {
		t.Errorf("%d RunInstances, %d instances; want 1 and 1", n, len(e.fake.Instances()))
	}
}

// An answer lost after EC2 made the instance: the retry sends the same
// ClientToken and gets the same instance.
func TestCreateAfterALostAnswer(t *testing.T) {
	for _, fault := range []ec2fake.Fault{
		{Apply: true, Drop: true},
		{Apply: true, Status: 500, Code: "InternalError"},
		{Apply: true, Status: 503, Code: "Unavailable"},
	} {
		t.Run(fmt.Sprintf("%d %s drop=%v", fault.Status, fault.Code, fault.Drop), func(t *testing.T) {
			e := newEnv(t, envOptions{})
			e.fake.FailNext("RunInstances", fault)
			res := e.create(cooprFields(nil), nil)
			mustStatus(t, res, 0)
			runs := e.params("RunInstances")
			if len(runs) != 2 || runs[0].Get("ClientToken") != runs[1].Get("ClientToken") {
				t.Fatalf("%d RunInstances; want 2 with one ClientToken", len(runs))
			}
			if n := len(e.fake.Instances()); n != 1 || res.Result["providerid"] != e.fake.Instances()[0].ID {
				t.Errorf("%d instances, providerid %v; want the one made before the fault", n, res.Result["providerid"])
			}
		})
	}
}

// A node deleted and created again (Coopr's retry of a failed CONFIRM)
// gets a new instance: the ClientToken of the terminated one leads to the
// next token.
func TestCreateAfterDeleteLaunchesANewInstance(t *testing.T) {
	e := newEnv(t, envOptions{})
	var ids []string
	for i := 0; i < 3; i++ {
		c := e.create(cooprFields(nil), nil)
		mustStatus(t, c, 0)
		ids = append(ids, c.Result["providerid"].(string))
		mustStatus(t, e.delete(c.Result["providerid"], cooprFields(nil), nil), 0)
	}
	if len(ids) != 3 || ids[0] == ids[1] || ids[1] == ids[2] || ids[0] == ids[2] {
		t.Errorf("instances %v, want three different ones", ids)
	}
	if n := len(e.fake.Instances()); n != 3 {
		t.Errorf("%d instances launched, want 3", n)
	}
	// The same chain again reaches the same third instance (a retry of the
	// last CREATE whose answer was lost).
	e.fake.SetState(ids[2], "running")
	c := e.create(cooprFields(nil), nil)
	mustStatus(t, c, 0)
	if c.Result["providerid"] != ids[2] || len(e.fake.Instances()) != 3 {
		t.Errorf("CREATE again gave %v (%d instances); want %s", c.Result["providerid"], len(e.fake.Instances()), ids[2])
	}
}

func TestCreateWaitsOutThrottling(t *testing.T) {
	e := newEnv(t, envOptions{})
	limit := ec2fake.Fault{Status: 503, Code: "RequestLimitExceeded"}
	e.fake.FailNext("DescribeInstances", limit)
	for i := 0; i < 3; i++ {
		e.fake.FailNext("RunInstances", limit)
	}
	res := e.create(cooprFields(nil), nil)
	mustStatus(t, res, 0)
	if n := len(e.fake.Exchanges("RunInstances")); n != 4 || len(e.fake.Instances()) != 1 {
		t.Errorf("%d RunInstances and %d instances; want 4 (three throttled) and 1", n, len(e.fake.Instances()))
	}
	sleeps := e.clock.slept()
	if len(sleeps) != 4 {
		t.Fatalf("waits %v, want 4 (one per throttled request)", sleeps)
	}
	// Exponential back-off with jitter: the n-th wait of one call is in
	// [2^(n-1)/2, 2^(n-1)] seconds.
	for i, d := range sleeps[1:] {
		lo, hi := time.Duration(1<<i)*time.Second/2, time.Duration(1<<i)*time.Second
		if d < lo || d > hi {
			t.Errorf("wait %d of RunInstances is %v, want within [%v, %v]", i+1, d, lo, hi)
		}
	}
	if !e.logged("WARN", "EC2 RunInstances: RequestLimitExceeded (attempt 3)") {
		t.Errorf("no warning about the throttling:\n%s", e.logs.String())
	}
}

func TestThrottlingPastTheDeadlineFails(t *testing.T) {
	e := newEnv(t, envOptions{timeout: 20 * time.Second})
	for i := 0; i < 20; i++ {
		e.fake.FailNext("DescribeInstances", ec2fake.Fault{Status: 503, Code: "RequestLimitExceeded"})
	}
	res := e.create(cooprFields(nil), nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "RequestLimitExceeded") || !strings.Contains(res.Message, "deadline") {
		t.Errorf("message %q should name the throttling and the deadline", res.Message)
	}
	if len(e.fake.Exchanges("RunInstances")) != 0 {
		t.Error("RunInstances although the lookup never answered")
	}
}

func TestCreateWithCredentialsEC2Refuses(t *testing.T) {
	for name, f := range map[string]map[string]any{
		"unknown key":  {"api_user": "AKIDUNKNOWN"},
		"wrong secret": {"api_password": "not-the-secret-key-0123456789"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			res := e.create(cooprFields(f), nil)
			mustStatus(t, res, 201)
			if !strings.Contains(res.Message, "AuthFailure") || !strings.Contains(res.Message, "check api_user, api_password") {
				t.Errorf("message %q", res.Message)
			}
			if res.Error["code"] != "AuthFailure" || res.Error["http_status"] != float64(401) {
				t.Errorf("error %v", res.Error)
			}
			if len(e.fake.Exchanges("RunInstances")) != 0 {
				t.Error("RunInstances after an AuthFailure")
			}
		})
	}
}

func TestCreateWithoutThePermissionIs202(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.FailNext("RunInstances", ec2fake.Fault{Status: 403, Code: "UnauthorizedOperation",
		Message: "You are not authorized to perform this operation."})
	res := e.create(cooprFields(nil), nil)
	mustStatus(t, res, 202)
	if !strings.Contains(res.Message, "You are not authorized to perform this operation.") {
		t.Errorf("message %q", res.Message)
	}
}

func TestCreateSurfacesEC2Errors(t *testing.T) {
	for _, c := range []struct {
		fields, config map[string]any
		want           []string
	}{
		{nil, map[string]any{"image": "ami-0000000000000dead"}, []string{"EC2 DescribeImages in us-east-1: InvalidAMIID.NotFound", "ami-0000000000000dead", "request "}},
		{nil, map[string]any{"flavor": "m9.huge"}, []string{"EC2 RunInstances in us-east-1: InvalidParameterValue: Invalid value 'm9.huge' for InstanceType."}},
		{map[string]any{"ssh_keypair": "nobody"}, nil, []string{"InvalidKeyPair.NotFound", "nobody"}},
		{map[string]any{"security_groups": "web"}, nil, []string{"InvalidGroup.NotFound", "'web'"}},
		{map[string]any{"aws_region": "mars-1"}, nil, []string{`aws_region "mars-1" is not an AWS region`}},
		{map[string]any{"tags": "team"}, nil, []string{`tags: "team" is not key=value`}},
		{map[string]any{"tags": "Name=x"}, nil, []string{`"Name" is set by the provider`}},
	} {
		e := newEnv(t, envOptions{})
		res := e.create(cooprFields(c.fields), c.config)
		if res.Status == 0 {
			t.Errorf("%v %v: status 0", c.fields, c.config)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(res.Message, w) {
				t.Errorf("%v %v: message %q lacks %q", c.fields, c.config, res.Message, w)
			}
		}
		if len(e.fake.Live()) != 0 {
			t.Errorf("%v %v: an instance was launched", c.fields, c.config)
		}
	}
}

func TestCreateGeneratesANodeKey(t *testing.T) {
	e := newEnv(t, envOptions{})
	f := cooprFields(map[string]any{"ssh_keypair": nil, "ssh_key_resource": nil})
	res := e.create(f, nil)
	mustStatus(t, res, 0)
	name := "loom-" + nodeID
	imp := e.params("ImportKeyPair")
	if len(imp) != 1 || imp[0].Get("KeyName") != name || imp[0].Get("TagSpecification.1.ResourceType") != "key-pair" {
		t.Fatalf("ImportKeyPair %v", imp)
	}
	if got := e.params("RunInstances")[0].Get("KeyName"); got != name {
		t.Errorf("KeyName %q, want %q", got, name)
	}
	keyFile := filepath.Join(e.workDir, "default", "providertypes", "aws", "ssh_keys", name)
	auth, _ := res.Result["ssh-auth"].(map[string]any)
	if auth["identityfile"] != keyFile {
		t.Errorf("identityfile %v, want %s", auth["identityfile"], keyFile)
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(keyFile); st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v", st.Mode().Perm())
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		t.Fatalf("the key file is not an SSH key: %v", err)
	}
	material, _ := base64.StdEncoding.DecodeString(imp[0].Get("PublicKeyMaterial"))
	if pub, _, _, _, err := ssh.ParseAuthorizedKey(material); err != nil || string(pub.Marshal()) != string(signer.PublicKey().Marshal()) {
		t.Errorf("the imported public key is not the key file's (%v)", err)
	}
	if strings.Contains(e.logs.String(), strings.Split(string(data), "\n")[1]) {
		t.Error("the generated private key is in the logs")
	}

	// The key file lost (another daemon, a wiped work dir): the key pair
	// is replaced by the new key, so the automators' key logs in.
	os.Remove(keyFile)
	mustStatus(t, e.delete(res.Result["providerid"], f, nil), 0)
	if slices.Contains(e.fake.KeyPairs(), name) {
		t.Error("DELETE left the generated key pair")
	}
	mustStatus(t, e.create(f, nil), 0)
	if !slices.Contains(e.fake.KeyPairs(), name) {
		t.Error("CREATE again did not import the key pair")
	}
}

func TestCreateReplacesAStaleKeyPair(t *testing.T) {
	e := newEnv(t, envOptions{})
	f := cooprFields(map[string]any{"ssh_keypair": nil, "ssh_key_resource": nil})
	mustStatus(t, e.create(f, nil), 0)
	keyFile := filepath.Join(e.workDir, "default", "providertypes", "aws", "ssh_keys", "loom-"+nodeID)
	os.Remove(keyFile)
	e.fake.SetState(e.fake.Instances()[0].ID, "terminated")
	mustStatus(t, e.create(f, nil), 0)
	if !e.logged("WARN", "does not hold the key in ssh_keys/loom-"+nodeID) || len(e.fake.Exchanges("DeleteKeyPair")) != 1 {
		t.Errorf("the stale key pair was not replaced:\n%s", e.logs.String())
	}
}

func TestConfirmWaitsAndReadsHostKeysFromTheConsole(t *testing.T) {
	e := newEnv(t, envOptions{fake: ec2fake.Options{PendingReads: 3, ConsoleAfter: 2}})
	c := e.create(cooprFields(nil), nil)
	mustStatus(t, c, 0)
	id := c.Result["providerid"].(string)
	res := e.confirm(id, cooprFields(nil))
	mustStatus(t, res, 0)
	inst, _ := e.fake.Instance(id)
	want := map[string]any{"access_v4": inst.PublicIP, "bind_v4": inst.PrivateIP}
	if !maps.Equal(res.IPAddresses, want) || inst.PublicIP == "" {
		t.Errorf("ipaddresses %v, want %v", res.IPAddresses, want)
	}
	if res.Hostname != hostname {
		t.Errorf("hostname %q", res.Hostname)
	}
	pub, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(inst.HostKeys[0]))
	keys, _ := res.Result["ssh_host_keys"].(map[string]any)
	if keys["ed25519"] != base64.StdEncoding.EncodeToString(pub.Marshal()) {
		t.Errorf("ssh_host_keys %v, want the console's ed25519 key", keys)
	}
	if n := len(e.fake.Exchanges("GetConsoleOutput")); n != 3 {
		t.Errorf("%d console reads, want 3 (two before the keys were posted)", n)
	}
	// provider_hostname: EC2's public DNS name.
	res = e.confirm(id, cooprFields(map[string]any{"provider_hostname": "true", "host_key_wait": "0"}))
	mustStatus(t, res, 0)
	if !strings.HasPrefix(res.Hostname, "ec2-") {
		t.Errorf("hostname %q, want EC2's public DNS name", res.Hostname)
	}
}

// With the real loom.ssh and sshd standing in for the instance, CONFIRM
// checks sshd's key against the console's.
func TestConfirmChecksSSHDAgainstTheConsole(t *testing.T) {
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
	}{
		{"the console lists sshd's keys", lines, true},
		{"the console lists other keys", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{ssh: true, fake: ec2fake.Options{Machines: []ec2fake.Machine{
				{PublicIP: "127.0.0.1", PrivateIP: "10.0.1.5", HostKeys: tc.keys}}}})
			f := cooprFields(map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(srv.Port), "ssh_wait": "20"})
			c := e.create(f, nil)
			mustStatus(t, c, 0)
			res := e.confirm(c.Result["providerid"].(string), f)
			if tc.ok {
				mustStatus(t, res, 0)
				keys, _ := res.Result["ssh_host_keys"].(map[string]any)
				if len(keys) == 0 {
					t.Error("no ssh_host_keys")
				}
				return
			}
			mustStatus(t, res, 1)
			if !strings.Contains(res.Message, "presents host keys that the console output") {
				t.Errorf("message %q", res.Message)
			}
		})
	}
}

// Nothing listens where the instance's sshd should be: with keys from the
// console, CONFIRM cannot check them and fails with the wait's reason;
// without (host_key_wait 0), it succeeds with a warning and records no keys.
func TestConfirmWhenSSHDNeverAnswers(t *testing.T) {
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	why := fmt.Sprintf("sshd on 127.0.0.1:%d gave no host key within 1s", port)
	key := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshdtest.Start(t, sshdtest.Config{}).HostKeys["ed25519"])))
	for _, tc := range []struct {
		name        string
		hostKeyWait string // 0: the console is not read
		status      int
	}{{"the console lists keys", "5", 1}, {"no console keys", "0", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{ssh: true, fake: ec2fake.Options{Machines: []ec2fake.Machine{
				{PublicIP: "127.0.0.1", PrivateIP: "10.0.1.5", HostKeys: []string{key}}}}})
			f := cooprFields(map[string]any{"wait_for_ssh": "true", "ssh_port": strconv.Itoa(port), "ssh_wait": "1", "host_key_wait": tc.hostKeyWait})
			c := e.create(f, nil)
			mustStatus(t, c, 0)
			res := e.confirm(c.Result["providerid"].(string), f)
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

func TestConfirmFailures(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.create(cooprFields(nil), nil)
	id := c.Result["providerid"].(string)
	e.fake.SetState(id, "terminated")
	res := e.confirm(id, cooprFields(nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "is terminated (Client.UserInitiatedShutdown") {
		t.Errorf("terminated: %q", res.Message)
	}
	res = e.confirm("i-0fffffffffffffff0", cooprFields(nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "EC2 has no instance i-0fffffffffffffff0") {
		t.Errorf("unknown: %q", res.Message)
	}
	res = e.confirm("../../etc", cooprFields(nil))
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "is not an EC2 instance id") {
		t.Errorf("foreign providerid: %q", res.Message)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t, envOptions{})
	c := e.create(cooprFields(nil), nil)
	id := c.Result["providerid"].(string)
	mustStatus(t, e.delete(id, cooprFields(nil), nil), 0)
	if inst, _ := e.fake.Instance(id); inst.State != "shutting-down" {
		t.Errorf("state %s after DELETE", inst.State)
	}
	// Gone already: done.
	mustStatus(t, e.delete(id, cooprFields(nil), nil), 0)
	mustStatus(t, e.delete("i-0fffffffffffffff0", cooprFields(nil), nil), 0)
	if n := len(e.fake.Exchanges("TerminateInstances")); n != 1 {
		t.Errorf("%d TerminateInstances, want 1", n)
	}
	// Without providerid: by the node tag.
	c = e.create(cooprFields(nil), map[string]any{"nodeId": "n-2"})
	mustStatus(t, c, 0)
	mustStatus(t, e.delete(nil, cooprFields(nil), map[string]any{"nodeId": "n-2"}), 0)
	if len(e.fake.Live()) != 0 {
		t.Errorf("live instances after DELETE by tag: %v", e.fake.Live())
	}
	// Another node's instance is refused.
	c = e.create(cooprFields(nil), map[string]any{"nodeId": "n-3"})
	res := e.delete(c.Result["providerid"], cooprFields(nil), nil)
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, "belongs to node n-3") {
		t.Errorf("message %q", res.Message)
	}
}

// EC2 pages a large DescribeInstances answer behind a nextToken: the
// lookup by the node's tag reads every page, so that CREATE sees every
// instance of the node and DELETE without a providerid terminates them
// all (one left on page two would keep running unseen).
func TestTagLookupReadsEveryPage(t *testing.T) {
	e := newEnv(t, envOptions{fake: ec2fake.Options{PageSize: 1}})
	var ids []string
	for i := 0; i < 3; i++ {
		c := e.create(cooprFields(nil), nil)
		mustStatus(t, c, 0)
		ids = append(ids, c.Result["providerid"].(string))
		if i < 2 {
			mustStatus(t, e.delete(c.Result["providerid"], cooprFields(nil), nil), 0)
		}
	}
	// Three live instances carry the node's tag (two brought back by hand).
	e.fake.SetState(ids[0], "running")
	e.fake.SetState(ids[1], "running")
	before := len(e.fake.Exchanges("DescribeInstances"))
	c := e.create(cooprFields(nil), nil)
	mustStatus(t, c, 0)
	if n := len(e.fake.Instances()); n != 3 || !slices.Contains(ids, c.Result["providerid"].(string)) {
		t.Errorf("%d instances, CREATE gave %v; want one of the node's three reused", n, c.Result["providerid"])
	}
	if !e.logged("WARN", "3 instances carry the tag coopr-node=") {
		t.Errorf("no warning naming all three instances:\n%s", e.logs.String())
	}
	var tokens []string
	for _, x := range e.fake.Exchanges("DescribeInstances")[before:] {
		if x.Params.Get("Filter.1.Name") == "tag:coopr-node" {
			tokens = append(tokens, x.Params.Get("NextToken"))
		}
	}
	if len(tokens) != 3 || tokens[0] != "" || tokens[1] == "" || tokens[2] == "" || tokens[1] == tokens[2] {
		t.Errorf("tag lookups with NextToken %q; want three pages of one instance each", tokens)
	}
	mustStatus(t, e.delete(nil, cooprFields(nil), nil), 0)
	if live := e.fake.Live(); len(live) != 0 {
		t.Errorf("live instances after DELETE by tag over three pages: %v", live)
	}
	if n := len(e.fake.Exchanges("TerminateInstances")); n != 3 {
		t.Errorf("%d TerminateInstances, want 3 (two earlier DELETEs, one for the rest)", n)
	}
}

func TestSessionTokenAndRegions(t *testing.T) {
	e := newEnv(t, envOptions{fake: ec2fake.Options{Region: "eu-west-2", Credentials: []ec2fake.Credentials{
		{AccessKeyID: "ASIAEXAMPLE", SecretAccessKey: ec2fake.SecretAccessKey, SessionToken: sessionToken}}}})
	f := cooprFields(map[string]any{"api_user": "ASIAEXAMPLE", "aws_session_token": sessionToken, "aws_region": "eu-west-2"})
	mustStatus(t, e.create(f, nil), 0)
	x := e.fake.Exchanges("RunInstances")[0]
	if x.Host != "ec2.eu-west-2.amazonaws.com" || !strings.Contains(x.Header.Get("Authorization"), "/eu-west-2/ec2/aws4_request") {
		t.Errorf("host %s, authorization %s", x.Host, x.Header.Get("Authorization"))
	}
	if !strings.Contains(x.Header.Get("Authorization"), "x-amz-security-token") {
		t.Error("the session token is not signed")
	}
	// Without the token, the same key is refused.
	res := e.create(cooprFields(map[string]any{"api_user": "ASIAEXAMPLE", "aws_region": "eu-west-2"}), nil)
	mustStatus(t, res, 201)
}

// The definition keeps every field of Coopr's fog provider for
// providertype aws, so a Coopr provider loads unchanged.
func TestDefinitionKeepsCooprsFields(t *testing.T) {
	data, err := os.ReadFile("aws.json")
	if err != nil {
		t.Fatal(err)
	}
	var def struct {
		AWS struct {
			Classname  string `json:"classname"`
			Parameters struct {
				Admin struct {
					Fields map[string]struct {
						Type      string `json:"type"`
						Sensitive bool   `json:"sensitive"`
						Default   any    `json:"default"`
					} `json:"fields"`
				} `json:"admin"`
			} `json:"parameters"`
		} `json:"aws"`
		Permissions struct {
			HTTP []string `json:"http"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal(data, &def); err != nil {
		t.Fatal(err)
	}
	fields := def.AWS.Parameters.Admin.Fields
	for _, f := range []string{"api_user", "api_password", "ssh_keypair", "ssh_key_resource", "aws_region", "aws_root_ebs_size",
		"aws_root_ebs_delete_on_term", "aws_root_ebs_volume_type", "security_groups", "security_group_ids", "subnet_id",
		"dedicated_instance", "associate_public_ip", "provider_hostname", "availability_zone", "iam_instance_profile", "placement_group"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("Coopr's field %s is missing", f)
		}
	}
	for _, f := range []string{"api_password", "aws_session_token"} {
		if !fields[f].Sensitive {
			t.Errorf("%s is not sensitive", f)
		}
	}
	if !slices.Equal(def.Permissions.HTTP, []string{"*.amazonaws.com", "*.amazonaws.com.cn"}) {
		t.Errorf("permissions.http %v", def.Permissions.HTTP)
	}
}
