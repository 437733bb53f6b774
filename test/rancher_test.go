package test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/loomrt/loom/internal/rancher"
	"github.com/loomrt/loom/internal/rancher/driverpb"
)

// The Rancher cluster driver host: loomd driver rancher and the binary of
// loomd bundle, as real processes, called by a gRPC client generated from
// the same drivers.proto, the way Rancher does: a free port as the only
// argument, one process per operation, killed afterwards.

// driverProc is one driver process and a client to it.
type driverProc struct {
	cmd    *exec.Cmd
	conn   *grpc.ClientConn
	client driverpb.DriverClient
	stderr *bytes.Buffer
}

// rpcLog records the RPCs a test made, to check none was left out.
type rpcLog struct {
	mu     sync.Mutex
	called map[string]bool
}

func (l *rpcLog) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	l.mu.Lock()
	l.called[method] = true
	l.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

// freePortOnly is a free port, asked of the kernel and released, as
// Rancher does.
func freePortOnly(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// startDriver runs bin with args and a free port appended, then waits
// until GetCapabilities answers (Rancher's readiness probe).
func startDriver(t testing.TB, log *rpcLog, env []string, bin string, args ...string) *driverProc {
	t.Helper()
	port := freePortOnly(t)
	p := &driverProc{stderr: &bytes.Buffer{}}
	p.cmd = exec.Command(bin, append(args, port)...)
	p.cmd.Dir = repoRoot()
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.kill() })
	// Wait for the port first: a gRPC client whose first dial fails backs
	// off for a second before the next.
	for end := time.Now().Add(deadline); ; {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("%s %v exited before serving: %v\n%s", bin, args, err, p.stderr)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("%s %v did not listen on %s: %v\n%s", bin, args, port, err, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if log != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(log.intercept))
	}
	conn, err := grpc.NewClient("127.0.0.1:"+port, opts...)
	if err != nil {
		t.Fatal(err)
	}
	p.conn, p.client = conn, driverpb.NewDriverClient(conn)
	probe := driverpb.NewDriverClient(mustConn(t, port)) // not recorded
	for end := time.Now().Add(deadline); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := probe.GetCapabilities(ctx, &driverpb.Empty{})
		cancel()
		if err == nil {
			return p
		}
		select {
		case err := <-exited:
			t.Fatalf("%s %v exited before serving: %v\n%s", bin, args, err, p.stderr)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("%s %v did not answer GetCapabilities: %v\n%s", bin, args, err, p.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustConn(t testing.TB, port string) *grpc.ClientConn {
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// kill ends the process as Rancher does after each operation (SIGKILL).
func (p *driverProc) kill() {
	if p.conn != nil {
		p.conn.Close()
	}
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
}

func rpcCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks a gRPC error's code and message.
func wantCode(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != code || !strings.Contains(st.Message(), msg) {
		t.Fatalf("%s: got %v, want code %s and a message with %q", what, err, code, msg)
	}
}

func TestRancherDriver(t *testing.T) {
	api, url, clusters := gkeFake(t)
	work := t.TempDir()
	log := &rpcLog{called: map[string]bool{}}
	env := []string{"HOME=" + t.TempDir(), "PATH=/usr/bin"}
	start := func() (*driverProc, driverpb.DriverClient) {
		p := startDriver(t, log, env, loomdBin, "driver", "rancher", "gkelike", "--plugins", examples("kinds"), "--work-dir", work)
		return p, p.client
	}
	ctx := rpcCtx(t)

	// Activation: the schema and the capabilities.
	p, c := start()
	flags, err := c.GetDriverCreateOptions(ctx, &driverpb.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	f := flags.GetOptions()
	if f["api-token"].GetPassword() != true || f["node-count"].GetType() != "int" || f["node-count"].GetDefault().GetDefaultInt() != 3 ||
		f["kubernetes-version"].GetDefault().GetDefaultString() != "1.30" || f["labels"].GetType() != "stringSlice" {
		t.Fatalf("GetDriverCreateOptions: %v", flags)
	}
	if uf, err := c.GetDriverUpdateOptions(ctx, &driverpb.Empty{}); err != nil || len(uf.GetOptions()) != 2 || uf.GetOptions()["node-count"] == nil {
		t.Fatalf("GetDriverUpdateOptions: %v, %v", uf, err)
	}
	caps, err := c.GetCapabilities(ctx, &driverpb.Empty{})
	want := map[int64]bool{0: true, 1: false, 2: true, 3: true, 4: false}
	if err != nil || len(caps.GetCapabilities()) != 5 {
		t.Fatalf("GetCapabilities: %v, %v", caps, err)
	}
	for bit, on := range want {
		if caps.GetCapabilities()[bit] != on {
			t.Fatalf("GetCapabilities: bit %d is %v, want %v: %v", bit, !on, on, caps)
		}
	}

	// Create as Rancher does: schema field names, name set.
	opts := &driverpb.DriverOptions{
		StringOptions: map[string]string{"name": "prod", "displayName": "prod", "apiUrl": url, "apiToken": "kube-token"},
		IntOptions:    map[string]int64{"nodeCount": 2},
	}
	ci, err := c.Create(ctx, &driverpb.CreateRequest{DriverOptions: opts})
	if err != nil || ci.GetEndpoint() != "https://10.0.0.1" || ci.GetNodeCount() != 2 || ci.GetMetadata()["state"] == "" || ci.GetCreateError() != "" {
		t.Fatalf("Create: %v, %v", ci, err)
	}
	p.kill()

	// A new process knows the cluster from the metadata alone.
	p, c = start()
	ci, err = c.PostCheck(ctx, ci)
	if err != nil || ci.GetServiceAccountToken() != "sa-c1-1" || ci.GetRootCaCertificate() != "Q0E=" {
		t.Fatalf("PostCheck: %v, %v", ci, err)
	}
	ci, err = c.Update(ctx, &driverpb.UpdateRequest{ClusterInfo: ci, DriverOptions: &driverpb.DriverOptions{IntOptions: map[string]int64{"node-count": 5}}})
	if err != nil || ci.GetNodeCount() != 5 || ci.GetServiceAccountToken() != "sa-c1-1" {
		t.Fatalf("Update: %v, %v", ci, err)
	}
	if _, err := c.SetNodeCount(ctx, &driverpb.SetNodeCountRequest{Info: ci, Count: &driverpb.NodeCount{Count: 4}}); err != nil {
		t.Fatalf("SetNodeCount: %v", err)
	}
	p.kill()

	p, c = start()
	if n, err := c.GetNodeCount(ctx, ci); err != nil || n.GetCount() != 4 {
		t.Fatalf("GetNodeCount: %v, %v", n, err)
	}
	if v, err := c.GetVersion(ctx, ci); err != nil || v.GetVersion() != "1.30" {
		t.Fatalf("GetVersion: %v, %v", v, err)
	}
	// set_version is absent: success, and capability bit 1 is off.
	if _, err := c.SetVersion(ctx, &driverpb.SetVersionRequest{Info: ci, Version: &driverpb.KubernetesVersion{Version: "1.31"}}); err != nil {
		t.Fatalf("SetVersion: %v", err)
	}
	k, err := c.GetK8SCapabilities(ctx, opts)
	if err != nil || !k.GetNodePoolScalingSupported() || k.GetL4LoadBalancer().GetProvider() != "gkelike" ||
		strings.Join(k.GetL4LoadBalancer().GetProtocolsSupported(), ",") != "TCP,UDP" || !k.GetL4LoadBalancer().GetHealthCheckSupported() {
		t.Fatalf("GetK8sCapabilities: %v, %v", k, err)
	}
	_, err = c.ETCDSave(ctx, &driverpb.SaveETCDSnapshotRequest{Info: ci, DriverOptions: opts, SnapshotName: "s1"})
	wantCode(t, "ETCDSave", err, codes.Unknown, "ETCD backup operations are not implemented")
	_, err = c.ETCDRestore(ctx, &driverpb.RestoreETCDSnapshotRequest{Info: ci, DriverOptions: opts, SnapshotName: "s1"})
	wantCode(t, "ETCDRestore", err, codes.Unknown, "ETCD backup operations are not implemented")
	_, err = c.ETCDRemoveSnapshot(ctx, &driverpb.RemoveETCDSnapshotRequest{Info: ci, DriverOptions: opts, SnapshotName: "s1"})
	wantCode(t, "ETCDRemoveSnapshot", err, codes.Unknown, "ETCD backup operations are not implemented")
	if _, err := c.RemoveLegacyServiceAccount(ctx, ci); err != nil {
		t.Fatalf("RemoveLegacyServiceAccount: %v", err)
	}
	// A cluster that is not ready yet: a plain (retry) error, code Unknown,
	// which Rancher's client shows as the bare message.
	api.mu.Lock()
	clusters["c1"]["status"] = "PROVISIONING"
	api.mu.Unlock()
	_, err = c.PostCheck(ctx, ci)
	wantCode(t, "PostCheck while provisioning", err, codes.Unknown, "gkelike post_check: cluster c1 is PROVISIONING, not RUNNING yet")
	if _, err := c.Remove(ctx, ci); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := c.Remove(ctx, ci); err != nil {
		t.Fatalf("Remove again: %v", err)
	}
	api.mu.Lock()
	left := len(clusters)
	api.mu.Unlock()
	if left != 0 {
		t.Fatalf("clusters left after Remove: %v", clusters)
	}

	// A create that fails half way answers OK with create_error and the
	// metadata; the retry, in a new process, reuses the cluster.
	doomed := &driverpb.DriverOptions{StringOptions: map[string]string{"name": "doomed", "api-url": url, "api-token": "kube-token"}}
	partial, err := c.Create(ctx, &driverpb.CreateRequest{DriverOptions: doomed})
	if err != nil || !strings.Contains(partial.GetCreateError(), "gkelike create: cluster c1 failed to provision: out of quota") ||
		!strings.Contains(partial.GetMetadata()["state"], `"id":"c1"`) {
		t.Fatalf("partial Create: %v, %v", partial, err)
	}
	p.kill()
	p, c = start()
	api.mu.Lock()
	clusters["c1"]["status"] = "RUNNING"
	api.mu.Unlock()
	ci, err = c.Create(ctx, &driverpb.CreateRequest{DriverOptions: doomed, ClusterInfo: partial})
	api.mu.Lock()
	left = len(clusters)
	api.mu.Unlock()
	if err != nil || ci.GetEndpoint() != "https://10.0.0.1" || ci.GetCreateError() != "" || left != 1 {
		t.Fatalf("retried Create: %v, %v, %d clusters", ci, err, left)
	}
	// A bad token is terminal: code Unknown too (the bare message for
	// Rancher, as a Go driver's error), and never sent back.
	bad := &driverpb.DriverOptions{StringOptions: map[string]string{"name": "x", "api-url": url, "api-token": "wrong-secret-token"}}
	_, err = c.Create(ctx, &driverpb.CreateRequest{DriverOptions: bad})
	wantCode(t, "Create with a bad token", err, codes.Unknown, "401 bad token")
	if strings.Contains(err.Error(), "wrong-secret-token") {
		t.Fatalf("the token leaked into the error: %v", err)
	}
	p.kill()
	if strings.Contains(p.stderr.String(), "wrong-secret-token") || strings.Contains(p.stderr.String(), "sa-c1-1") {
		t.Fatalf("a secret leaked into the log:\n%s", p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "rpc=Create") {
		t.Fatalf("no log line per RPC:\n%s", p.stderr)
	}

	// Every RPC of the service was called.
	var missing []string
	for _, m := range rancher.Methods {
		if !log.called["/types.Driver/"+m.RPC] {
			missing = append(missing, m.RPC)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("RPCs not exercised: %v", missing)
	}
}

func TestRancherDriverUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"driver", "rancher", "gkelike", "http"}, []string{`PORT "http"`}},
		{[]string{"driver", "rancher", "nosuch", "0"}, []string{`no loaded plugin declares the clusterdriver type "nosuch"; loaded clusterdriver types: gkelike (check --plugins)`}},
		{[]string{"driver", "rancher", "s3like", "0"}, []string{`type "s3like" (`,
			`is a bucketprovisioner type, not a clusterdriver type: list it under "clusterdrivers"`}},
	} {
		r := loomd(t, "", append(tc.args, "--plugins", examples("kinds"), "--work-dir", t.TempDir())...)
		if r.code != 2 {
			t.Fatalf("loomd %v: exit %d, want 2:\n%s", tc.args, r.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Fatalf("loomd %v: stderr lacks %q:\n%s", tc.args, w, r.stderr)
			}
		}
	}
}

func TestRancherBundle(t *testing.T) {
	_, url, _ := gkeFake(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "kontainer-engine-driver-gkelike")
	r := loomd(t, "", "bundle", "--plugin", examples("kinds", "gkelike"), "-o", out)
	if r.code != 0 {
		t.Fatalf("loomd bundle: exit %d\n%s", r.code, r.stderr)
	}
	var res struct {
		Output, Type, Folder, SHA256 string
		Files                        int
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Type != "gkelike" || res.Folder != "gkelike" || res.Files != 3 {
		t.Fatalf("loomd bundle printed %q (%v)", r.stdout, err)
	}
	if sum, err := sha256File(out); err != nil || sum != res.SHA256 {
		t.Fatalf("sha256 printed %s, file has %s (%v)", res.SHA256, sum, err)
	}

	// Rancher's environment: PATH=/usr/bin and nothing else; the port is
	// the only argument. (TMPDIR keeps the unpacked copy in the test's dir.)
	tmp := t.TempDir()
	env := []string{"PATH=/usr/bin", "TMPDIR=" + tmp}
	p := startDriver(t, nil, env, out)
	ctx := rpcCtx(t)
	flags, err := p.client.GetDriverCreateOptions(ctx, &driverpb.Empty{})
	if err != nil || flags.GetOptions()["api-url"] == nil {
		t.Fatalf("bundle GetDriverCreateOptions: %v, %v\n%s", flags, err, p.stderr)
	}
	opts := &driverpb.DriverOptions{StringOptions: map[string]string{"name": "b", "apiUrl": url, "apiToken": "kube-token"}}
	ci, err := p.client.Create(ctx, &driverpb.CreateRequest{DriverOptions: opts})
	if err != nil || ci.GetMetadata()["state"] == "" {
		t.Fatalf("bundle Create: %v, %v\n%s", ci, err, p.stderr)
	}
	p.kill()
	p = startDriver(t, nil, env, out)
	if ci, err = p.client.PostCheck(ctx, ci); err != nil || ci.GetServiceAccountToken() == "" {
		t.Fatalf("bundle PostCheck after a restart: %v, %v\n%s", ci, err, p.stderr)
	}
	p.kill()
	// One unpacked copy, reused by every start.
	if copies, _ := filepath.Glob(filepath.Join(tmp, "loomd-bundles-*", "*")); len(copies) != 1 {
		t.Fatalf("unpacked copies: %v", copies)
	}

	run := func(bin string, args ...string) cliRun {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return cliRun{o.String(), e.String(), code}
	}
	// Without a port it says what it is; other command lines are loomd's.
	if r := run(out); r.code != 2 || !strings.Contains(r.stderr, `the Rancher cluster driver "gkelike"`) {
		t.Fatalf("bundle without a port: exit %d\n%s", r.code, r.stderr)
	}
	if r := run(out, "version"); r.code != 0 || r.stdout == "" {
		t.Fatalf("bundle version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Bundling from a bundle replaces its payload: the same bytes.
	again := filepath.Join(dir, "kontainer-engine-driver-again")
	r = loomd(t, "", "bundle", "--plugin", examples("kinds", "gkelike"), "--loomd", out, "-o", again)
	if r.code != 0 || !strings.Contains(r.stdout, res.SHA256) {
		t.Fatalf("bundle from a bundle: exit %d, %s (want sha256 %s)\n%s", r.code, r.stdout, res.SHA256, r.stderr)
	}

	// A damaged payload is refused with a clear message.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-600] ^= 0xff
	if err := os.WriteFile(again, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if r := run(again, freePortOnly(t)); r.code != 2 || !strings.Contains(r.stderr, "checksum") {
		t.Fatalf("damaged bundle: exit %d\n%s", r.code, r.stderr)
	}

	// The folder must load and declare a cluster driver.
	r = loomd(t, "", "bundle", "--plugin", examples("kinds", "s3like"), "-o", filepath.Join(dir, "x"))
	if r.code != 2 || !strings.Contains(r.stderr, "declares 0 cluster drivers") {
		t.Fatalf("bundle of a bucket provisioner: exit %d\n%s", r.code, r.stderr)
	}

	// A dynamically linked base is refused with the command that builds a
	// static one (/bin/true is a dynamic ELF on every Debian).
	if interp := elfInterp(t, "/bin/true"); interp == "" {
		t.Logf("/bin/true is static here: skipping the dynamic-base check")
	} else {
		dyn := filepath.Join(dir, "kontainer-engine-driver-dyn")
		r = loomd(t, "", "bundle", "--plugin", examples("kinds", "gkelike"), "--loomd", "/bin/true", "-o", dyn)
		if r.code != 2 || !strings.Contains(r.stderr, "--loomd /bin/true is dynamically linked (it asks for "+interp+")") ||
			!strings.Contains(r.stderr, "CGO_ENABLED=0 go build -o loomd-static ./cmd/loomd") {
			t.Fatalf("bundle from a dynamic base: exit %d\n%s", r.code, r.stderr)
		}
		if _, err := os.Stat(dyn); !os.IsNotExist(err) {
			t.Fatalf("a bundle was written from a dynamic base: %v", err)
		}
	}
	// The loomd the tests built is static, as make build's.
	if interp := elfInterp(t, loomdBin); interp != "" {
		t.Fatalf("%s is dynamically linked (%s)", loomdBin, interp)
	}
}

// elfInterp is the dynamic loader an ELF executable asks for, "" when it
// is static.
func elfInterp(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				t.Fatal(err)
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

func sha256File(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// BenchmarkRancherStart measures what Rancher waits for at every
// operation: a bundle started with a port until GetCapabilities answers,
// against `loomd version` (process start, no plugin) in the same rounds.
// Rancher probes after 5 s.
func BenchmarkRancherStart(b *testing.B) {
	dir := b.TempDir()
	out := filepath.Join(dir, "kontainer-engine-driver-gkelike")
	if o, err := exec.Command(loomdBin, "bundle", "--plugin", examples("kinds", "gkelike"), "-o", out).CombinedOutput(); err != nil {
		b.Fatalf("bundle: %v\n%s", err, o)
	}
	env := []string{"PATH=/usr/bin", "TMPDIR=" + dir}
	var ratios []float64
	var total time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := exec.Command(loomdBin, "version").Run(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		p := startDriver(b, nil, env, out)
		t2 := time.Now()
		p.kill()
		total += t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
	}
	sort.Float64s(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-version")
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/start")
}

// TestRancherDriverOwnPort: the driver's plugin cannot call the driver's
// own gRPC port (its registry holds the port it listens on), by any name
// of this machine; the call fails naming it, and the driver keeps serving.
func TestRancherDriverOwnPort(t *testing.T) {
	// gkelike without its allow-list (which names only 127.0.0.1 and
	// localhost): the own-port check holds whatever the list grants.
	plugins := t.TempDir()
	dir := filepath.Join(plugins, "gkelike")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"gkelike.json", "gkelike.lua"} {
		b, err := os.ReadFile(examples("kinds", "gkelike", f))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte(`, "permissions": {"http": ["127.0.0.1", "localhost"]}`), nil, 1)
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"HOME=" + t.TempDir(), "PATH=/usr/bin"}
	p := startDriver(t, nil, env, loomdBin, "driver", "rancher", "gkelike", "--plugins", plugins, "--work-dir", t.TempDir())
	port := p.cmd.Args[len(p.cmd.Args)-1]
	ctx := rpcCtx(t)
	for _, host := range []string{"127.0.0.1", "localhost", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "127.0.0.2"} {
		opts := &driverpb.DriverOptions{StringOptions: map[string]string{"name": "own", "apiUrl": "http://" + host + ":" + port + "/v1", "apiToken": "own-port-token"}}
		_, err := p.client.Create(ctx, &driverpb.CreateRequest{DriverOptions: opts})
		if err == nil || !strings.Contains(err.Error(), "Rancher driver port") || !strings.Contains(err.Error(), "plugins may not call the daemon") {
			t.Errorf("Create with the api on the driver's own port at %s: %v, want a refusal naming the driver port", host, err)
		}
	}
	if _, err := p.client.GetCapabilities(ctx, &driverpb.Empty{}); err != nil {
		t.Errorf("the driver stopped serving: %v", err)
	}
}
