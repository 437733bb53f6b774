// Package ec2conformance proves the aws provider and Loom's EC2 fake
// against the official AWS SDK for Go v2 (service/ec2 and its SigV4
// signer), offline:
//
//   - every answer the fake gives parses with the SDK's deserializer for
//     its action (an error answer as the API error its code names), and
//     the SDK reads the ids and addresses the XML holds;
//   - every request the plugin sends equals, parameter for parameter, what
//     the SDK's serializer sends for the same call;
//   - every request's SigV4 signature equals the one the SDK's v4.Signer
//     computes for the same request, credentials and time.
//
// The plugin runs as shipped, through `loomd run` (the binary in $LOOMD,
// else one built from the repository), against internal/cloudfake/ec2fake on
// loopback, in the scenarios its Go tests cover: a Coopr provider, a VPC
// subnet with a generated key, throttling, a lost answer, refused
// credentials, an unknown instance. This is a module of its own so that
// the SDK stays out of Loom's go.mod; `make ec2-conformance` runs it.
package ec2conformance

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"github.com/loomrt/loom/internal/cloudfake/ec2fake"
)

const (
	region    = "us-east-1"
	clusterID = "00000042"
	hostname  = "web00000042-1000.example.com"
	image     = ec2fake.DefaultImage
	flavor    = "m3.medium"
)

var repoRoot = func() string { d, _ := filepath.Abs("../.."); return d }()

// loomd returns the loomd binary: $LOOMD, or one built once for the run.
func loomd(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LOOMD"); p != "" {
		return p
	}
	bin := filepath.Join(os.TempDir(), "loomd-ec2conformance")
	if _, err := os.Stat(bin); err == nil && time.Since(modTime(bin)) < time.Hour {
		return bin
	}
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/loomd")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building loomd: %v\n%s", err, out)
	}
	return bin
}

func modTime(p string) time.Time {
	st, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}

// scenario is one run of the plugin: its fields, the node, what the fake
// does, and the tasks in order.
type scenario struct {
	name   string
	node   string
	fields map[string]any
	// secret is the secret key the plugin is given (the fake's by default).
	secret  string
	prepare func(f *ec2fake.Server)
	steps   []string
	// status is each step's expected status (0 when absent).
	status map[string]int
}

var scenarios = []scenario{
	{name: "coopr provider", node: "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d",
		fields: map[string]any{"ssh_keypair": ec2fake.KeyPair, "ssh_key_resource": "coopr.pem", "security_groups": "default",
			"tags": "team=web,cost center=42", "user_data": "#cloud-config\npackages: [htop]\n", "placement_group": "pg-1"},
		steps: []string{"CREATE", "CONFIRM", "DELETE"}},
	{name: "vpc subnet with a generated key", node: "shop-web-1",
		fields: map[string]any{"subnet_id": ec2fake.Subnet, "security_group_ids": ec2fake.SecurityGroupID, "dedicated_instance": "true",
			"iam_instance_profile": "loom-nodes", "availability_zone": "us-east-1a", "aws_root_ebs_volume_type": "gp3", "aws_root_ebs_size": "20"},
		steps: []string{"CREATE", "CONFIRM", "DELETE"}},
	{name: "private subnet, key pair there already", node: "shop-db-1",
		fields:  map[string]any{"subnet_id": ec2fake.Subnet, "security_group_ids": ec2fake.SecurityGroupID, "associate_public_ip": "false"},
		prepare: func(f *ec2fake.Server) {}, steps: []string{"CREATE", "TERMINATE", "CREATE", "DELETE"}},
	{name: "throttled and a lost answer", node: "n-throttled",
		fields: map[string]any{"ssh_keypair": ec2fake.KeyPair},
		prepare: func(f *ec2fake.Server) {
			f.FailNext("DescribeInstances", ec2fake.Fault{Status: 503, Code: "RequestLimitExceeded"})
			f.FailNext("RunInstances", ec2fake.Fault{Status: 503, Code: "RequestLimitExceeded"})
			f.FailNext("RunInstances", ec2fake.Fault{Apply: true, Drop: true})
			f.FailNext("RunInstances", ec2fake.Fault{Apply: true, Status: 500, Code: "InternalError"})
		},
		steps: []string{"CREATE", "DELETE"}},
	{name: "refused credentials", node: "n-auth", secret: "not-the-secret-key-0123456789",
		fields: map[string]any{"ssh_keypair": ec2fake.KeyPair},
		steps:  []string{"CREATE"}, status: map[string]int{"CREATE": 201}},
	{name: "unknown instance", node: "n-gone",
		fields: map[string]any{"ssh_keypair": ec2fake.KeyPair},
		prepare: func(f *ec2fake.Server) {
			f.FailNext("RunInstances", ec2fake.Fault{Status: 400, Code: "InsufficientInstanceCapacity"})
		},
		steps: []string{"CREATE", "DELETE-UNKNOWN"}, status: map[string]int{"CREATE": 1}},
}

func TestConformance(t *testing.T) {
	bin := loomd(t)
	var all []checked
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			xs := run(t, bin, sc)
			for _, x := range xs {
				all = append(all, checked{sc, x})
				checkSignature(t, sc, x)
				checkRequest(t, sc, x)
				checkAnswer(t, sc, x)
			}
		})
	}
	// Every action the provider calls was seen, answered well and badly.
	seen := map[string]bool{}
	for _, c := range all {
		seen[c.x.Action+fmt.Sprint(c.x.Status == 200)] = true
	}
	for _, a := range []string{"RunInstances", "DescribeInstances", "TerminateInstances", "GetConsoleOutput", "DescribeImages",
		"ImportKeyPair", "DescribeKeyPairs", "DeleteKeyPair"} {
		if !seen[a+"true"] {
			t.Errorf("no successful %s was checked", a)
		}
	}
	for _, a := range []string{"RunInstances", "DescribeInstances", "ImportKeyPair"} {
		if !seen[a+"false"] {
			t.Errorf("no error answer of %s was checked", a)
		}
	}
}

type checked struct {
	sc scenario
	x  ec2fake.Exchange
}

// run runs a scenario's tasks through loomd and returns the exchanges.
func run(t *testing.T, bin string, sc scenario) []ec2fake.Exchange {
	t.Helper()
	fake := ec2fake.Start(ec2fake.Options{PendingReads: 1, ConsoleAfter: 1, MaxSkew: 5 * time.Minute})
	t.Cleanup(fake.Close)
	if sc.prepare != nil {
		sc.prepare(fake)
	}
	plugins := t.TempDir()
	if err := os.CopyFS(filepath.Join(plugins, "aws"), os.DirFS(filepath.Join(repoRoot, "plugins", "aws"))); err != nil {
		t.Fatal(err)
	}
	// The fake is on loopback: allow it, as an operator adds a private
	// endpoint's host.
	def := filepath.Join(plugins, "aws", "aws.json")
	data, _ := os.ReadFile(def)
	data = bytes.Replace(data, []byte(`"http": ["*.amazonaws.com", "*.amazonaws.com.cn"]`), []byte(`"http": ["*.amazonaws.com", "*.amazonaws.com.cn", "127.0.0.1"]`), 1)
	os.WriteFile(def, data, 0o644)
	work := t.TempDir()
	providerid := ""
	for i, step := range sc.steps {
		name, cfg := step, map[string]any{}
		switch step {
		case "TERMINATE":
			fake.SetState(providerid, "terminated")
			continue
		case "DELETE-UNKNOWN":
			name, cfg["providerid"] = "DELETE", "i-0fffffffffffffff0"
		default:
			if providerid != "" {
				cfg["providerid"] = providerid
			}
		}
		res := runTask(t, bin, plugins, work, task(sc, name, i, fake.URL(), cfg))
		if want := sc.status[step]; res.Status != want {
			t.Fatalf("%s: status %d, want %d: %s", step, res.Status, want, res.Message)
		}
		if id, ok := res.Result["providerid"].(string); ok {
			providerid = id
		}
	}
	return fake.Exchanges("")
}

func task(sc scenario, name string, i int, endpoint string, extra map[string]any) []byte {
	fields := map[string]any{"api_user": ec2fake.AccessKeyID, "api_password": ec2fake.SecretAccessKey, "aws_region": region,
		"aws_endpoint": endpoint, "poll_interval": "0.2", "host_key_wait": "5", "wait_for_ssh": "false"}
	if sc.secret != "" {
		fields["api_password"] = sc.secret
	}
	for k, v := range sc.fields {
		fields[k] = v
	}
	cfg := map[string]any{"hostname": hostname, "flavor": flavor, "image": image, "sshuser": "admin", "ipaddresses": map[string]any{},
		"provider": map[string]any{"name": "aws", "providertype": "aws", "provisioner": fields}}
	for k, v := range extra {
		cfg[k] = v
	}
	b, _ := json.Marshal(map[string]any{"taskId": fmt.Sprintf("%s-001-%03d", clusterID, i+1), "jobId": clusterID + "-001",
		"clusterId": clusterID, "nodeId": sc.node, "taskName": name, "config": cfg})
	return b
}

type result struct {
	Status  int            `json:"status"`
	Message string         `json:"message"`
	Result  map[string]any `json:"result"`
}

func runTask(t *testing.T, bin, plugins, work string, taskJSON []byte) result {
	t.Helper()
	f := filepath.Join(t.TempDir(), "task.json")
	os.WriteFile(f, taskJSON, 0o600)
	cmd := exec.Command(bin, "run", f, "--plugins", plugins, "--work-dir", work, "--timeout", "2m")
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH")}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("loomd run: %v", err)
	}
	var res result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("loomd run printed no result (%v):\n%s\n%s", err, out.String(), errb.String())
	}
	if strings.Contains(out.String()+errb.String(), ec2fake.SecretAccessKey) {
		t.Errorf("the secret key is in loomd's output")
	}
	return res
}

// checkSignature recomputes the request's signature with the SDK's
// signer over the headers the plugin signed, and compares.
func checkSignature(t *testing.T, sc scenario, x ec2fake.Exchange) {
	t.Helper()
	auth := x.Header.Get("Authorization")
	m := regexp.MustCompile(`^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/ec2/aws4_request, SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$`).FindStringSubmatch(auth)
	if m == nil {
		t.Errorf("%s: Authorization %q is not a SigV4 header", x.Action, auth)
		return
	}
	signedAt, err := time.Parse("20060102T150405Z", x.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Errorf("%s: X-Amz-Date %q: %v", x.Action, x.Header.Get("X-Amz-Date"), err)
		return
	}
	req, _ := http.NewRequest(x.Method, "http://"+x.Host+x.URL, bytes.NewReader(x.Body))
	req.ContentLength = 0 // the plugin does not sign Content-Length; neither shall the SDK
	req.Header = http.Header{}
	for _, h := range strings.Split(m[4], ";") {
		switch h {
		case "host", "x-amz-date", "x-amz-security-token":
			// The signer sets these itself.
		default:
			req.Header[http.CanonicalHeaderKey(h)] = x.Header.Values(h)
		}
	}
	secret := ec2fake.SecretAccessKey
	if sc.secret != "" {
		secret = sc.secret
	}
	sum := sha256.Sum256(x.Body)
	creds := aws.Credentials{AccessKeyID: m[1], SecretAccessKey: secret, SessionToken: x.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), "ec2", m[3], signedAt); err != nil {
		t.Errorf("%s: the SDK signer: %v", x.Action, err)
		return
	}
	if got := req.Header.Get("Authorization"); got != auth {
		t.Errorf("%s: the SDK's v4.Signer signs this request as\n  %s\nthe plugin sent\n  %s", x.Action, got, auth)
	}
}

// expected is the SDK call the plugin's request should equal: its input,
// built from the scenario's fields and the task, as an SDK user would
// write it. Values the plugin derives that are opaque here (a ClientToken,
// a generated public key, an instance id from an earlier answer) are
// taken from the request.
func expected(sc scenario, x ec2fake.Exchange) any {
	p := x.Params
	f := func(k string) string { v, _ := sc.fields[k].(string); return v }
	node := sc.node
	switch x.Action {
	case "DescribeInstances":
		if id := p.Get("InstanceId.1"); id != "" {
			return &ec2.DescribeInstancesInput{InstanceIds: []string{id}}
		}
		return &ec2.DescribeInstancesInput{Filters: []types.Filter{
			{Name: aws.String("tag:coopr-node"), Values: []string{node}},
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
		}}
	case "DescribeImages":
		return &ec2.DescribeImagesInput{ImageIds: []string{image}}
	case "GetConsoleOutput":
		return &ec2.GetConsoleOutputInput{InstanceId: aws.String(p.Get("InstanceId"))}
	case "TerminateInstances":
		return &ec2.TerminateInstancesInput{InstanceIds: []string{p.Get("InstanceId.1")}}
	case "ImportKeyPair":
		material, _ := base64.StdEncoding.DecodeString(p.Get("PublicKeyMaterial"))
		return &ec2.ImportKeyPairInput{KeyName: aws.String("loom-" + node), PublicKeyMaterial: material,
			TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeKeyPair, Tags: []types.Tag{
				{Key: aws.String("coopr-cluster"), Value: aws.String(clusterID)}, {Key: aws.String("coopr-node"), Value: aws.String(node)}}}}}
	case "DescribeKeyPairs":
		return &ec2.DescribeKeyPairsInput{KeyNames: []string{"loom-" + node}, IncludePublicKey: aws.Bool(true)}
	case "DeleteKeyPair":
		return &ec2.DeleteKeyPairInput{KeyName: aws.String("loom-" + node)}
	case "RunInstances":
		in := &ec2.RunInstancesInput{ImageId: aws.String(image), InstanceType: types.InstanceType(flavor),
			MinCount: aws.Int32(1), MaxCount: aws.Int32(1), ClientToken: aws.String(p.Get("ClientToken"))}
		if k := f("ssh_keypair"); k != "" {
			in.KeyName = aws.String(k)
		} else {
			in.KeyName = aws.String("loom-" + node)
		}
		var ids []string
		if v := f("security_group_ids"); v != "" {
			ids = strings.Split(v, ",")
		}
		if subnet := f("subnet_id"); subnet != "" {
			if f("associate_public_ip") != "false" {
				in.NetworkInterfaces = []types.InstanceNetworkInterfaceSpecification{{DeviceIndex: aws.Int32(0), SubnetId: aws.String(subnet),
					AssociatePublicIpAddress: aws.Bool(true), DeleteOnTermination: aws.Bool(true), Groups: ids}}
			} else {
				in.SubnetId, in.SecurityGroupIds = aws.String(subnet), ids
			}
			if f("dedicated_instance") == "true" {
				in.Placement = &types.Placement{Tenancy: types.TenancyDedicated}
			}
		} else {
			in.SecurityGroups = []string{"default"}
			in.SecurityGroupIds = ids
		}
		if az := f("availability_zone"); az != "" {
			if in.Placement == nil {
				in.Placement = &types.Placement{}
			}
			in.Placement.AvailabilityZone = aws.String(az)
		}
		if pg := f("placement_group"); pg != "" {
			if in.Placement == nil {
				in.Placement = &types.Placement{}
			}
			in.Placement.GroupName = aws.String(pg)
		}
		if prof := f("iam_instance_profile"); prof != "" {
			in.IamInstanceProfile = &types.IamInstanceProfileSpecification{Name: aws.String(prof)}
		}
		if ud := f("user_data"); ud != "" {
			in.UserData = aws.String(base64.StdEncoding.EncodeToString([]byte(ud)))
		}
		size, vt := int32(10), types.VolumeTypeStandard
		if f("aws_root_ebs_size") == "20" {
			size = 20
		}
		if v := f("aws_root_ebs_volume_type"); v != "" {
			vt = types.VolumeType(v)
		}
		in.BlockDeviceMappings = []types.BlockDeviceMapping{{DeviceName: aws.String("/dev/xvda"),
			Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(size), VolumeType: vt, DeleteOnTermination: aws.Bool(true)}}}
		tags := []types.Tag{{Key: aws.String("Name"), Value: aws.String(hostname)},
			{Key: aws.String("coopr-cluster"), Value: aws.String(clusterID)}, {Key: aws.String("coopr-node"), Value: aws.String(node)}}
		for _, kv := range strings.Split(f("tags"), ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				tags = append(tags, types.Tag{Key: aws.String(strings.TrimSpace(k)), Value: aws.String(v)})
			}
		}
		in.TagSpecifications = []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: tags},
			{ResourceType: types.ResourceTypeVolume, Tags: tags}}
		return in
	}
	return nil
}

// sdkClient is an EC2 client whose HTTP client is do.
func sdkClient(do func(*http.Request) (*http.Response, error)) *ec2.Client {
	return ec2.New(ec2.Options{
		Region:       region,
		Credentials:  aws.NewCredentialsCache(staticCreds{}),
		BaseEndpoint: aws.String("http://ec2.test"),
		HTTPClient:   doer(do),
		Retryer:      aws.NopRetryer{},
	})
}

type staticCreds struct{}

func (staticCreds) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: ec2fake.AccessKeyID, SecretAccessKey: ec2fake.SecretAccessKey, Source: "test"}, nil
}

type doer func(*http.Request) (*http.Response, error)

func (d doer) Do(r *http.Request) (*http.Response, error) { return d(r) }

// call makes the SDK call of input in.
func call(ctx context.Context, c *ec2.Client, in any) (any, error) {
	switch in := in.(type) {
	case *ec2.RunInstancesInput:
		return c.RunInstances(ctx, in)
	case *ec2.DescribeInstancesInput:
		return c.DescribeInstances(ctx, in)
	case *ec2.TerminateInstancesInput:
		return c.TerminateInstances(ctx, in)
	case *ec2.GetConsoleOutputInput:
		return c.GetConsoleOutput(ctx, in)
	case *ec2.DescribeImagesInput:
		return c.DescribeImages(ctx, in)
	case *ec2.ImportKeyPairInput:
		return c.ImportKeyPair(ctx, in)
	case *ec2.DescribeKeyPairsInput:
		return c.DescribeKeyPairs(ctx, in)
	case *ec2.DeleteKeyPairInput:
		return c.DeleteKeyPair(ctx, in)
	}
	return nil, fmt.Errorf("no SDK call for %T", in)
}

var errCaptured = errors.New("captured")

// checkRequest serializes the expected call with the SDK and compares its
// parameters with the plugin's, exactly.
func checkRequest(t *testing.T, sc scenario, x ec2fake.Exchange) {
	t.Helper()
	in := expected(sc, x)
	if in == nil {
		t.Errorf("the plugin called %s, which the conformance test does not know", x.Action)
		return
	}
	var sdkBody []byte
	c := sdkClient(func(r *http.Request) (*http.Response, error) {
		sdkBody, _ = io.ReadAll(r.Body)
		return nil, errCaptured
	})
	if _, err := call(context.Background(), c, in); !errors.Is(err, errCaptured) {
		t.Errorf("%s: the SDK did not send the call: %v", x.Action, err)
		return
	}
	want, err := url.ParseQuery(string(sdkBody))
	if err != nil {
		t.Fatalf("%s: the SDK's body: %v", x.Action, err)
	}
	got, err := url.ParseQuery(string(x.Body))
	if err != nil {
		t.Errorf("%s: the plugin's body does not parse: %v", x.Action, err)
		return
	}
	if d := diff(want, got); d != "" {
		t.Errorf("%s: the plugin's parameters differ from the SDK's for the same call:\n%s", x.Action, d)
	}
}

func diff(want, got url.Values) string {
	keys := map[string]bool{}
	for k := range want {
		keys[k] = true
	}
	for k := range got {
		keys[k] = true
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		if !slices.Equal(want[k], got[k]) {
			fmt.Fprintf(&b, "  %s: SDK %q, plugin %q\n", k, want[k], got[k])
		}
	}
	return b.String()
}

// idElements are the XML elements whose values the SDK must have read.
var idElements = regexp.MustCompile(`<(instanceId|imageId|reservationId|keyName|keyPairId|keyFingerprint|groupId|subnetId|vpcId|privateIpAddress|ipAddress|dnsName|clientToken|key|value|rootDeviceName|output)>([^<]+)</`)

// checkAnswer replays the fake's answer to the SDK's deserializer for the
// action: a 200 must parse, and the SDK must have read the ids in it; an
// error must be the API error its code names.
func checkAnswer(t *testing.T, sc scenario, x ec2fake.Exchange) {
	t.Helper()
	if x.Dropped {
		return // no answer to parse
	}
	in := expected(sc, x)
	if in == nil {
		return
	}
	c := sdkClient(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: x.Status, Header: x.RHeader.Clone(), Body: io.NopCloser(bytes.NewReader(x.RBody)),
			ContentLength: int64(len(x.RBody)), Request: r}, nil
	})
	out, err := call(context.Background(), c, in)
	if x.Status != 200 {
		var ae smithy.APIError
		code := regexp.MustCompile(`<Code>([^<]+)</Code>`).FindSubmatch(x.RBody)
		if !errors.As(err, &ae) || code == nil || ae.ErrorCode() != string(code[1]) {
			t.Errorf("%s: the SDK reads the error answer %d as %v, want API error %s", x.Action, x.Status, err, code)
		}
		return
	}
	if err != nil {
		t.Errorf("%s: the SDK cannot parse the fake's answer: %v\n%s", x.Action, err, x.RBody)
		return
	}
	js, _ := json.Marshal(out)
	for _, m := range idElements.FindAllSubmatch(x.RBody, -1) {
		v := string(m[2])
		if string(m[1]) == "output" {
			continue // base64: decoded below
		}
		if !bytes.Contains(js, []byte(`"`+v+`"`)) {
			t.Errorf("%s: the SDK did not read <%s>%s</%s>", x.Action, m[1], v, m[1])
		}
	}
	if o, ok := out.(*ec2.GetConsoleOutputOutput); ok && o.Output != nil && *o.Output != "" {
		if raw, err := base64.StdEncoding.DecodeString(*o.Output); err != nil || !bytes.Contains(raw, []byte("SSH HOST KEY KEYS")) {
			t.Errorf("GetConsoleOutput: the console output the SDK read is not the fake's (%v)", err)
		}
	}
}
