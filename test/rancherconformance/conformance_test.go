// Package conformance runs a Loom cluster driver bundle against
// kontainer-engine's own Go client (github.com/rancher/kontainer-engine/types
// at the release/v2.4 head), launched and driven the way Rancher does:
// the binary named kontainer-engine-driver-<name>, a free port as its only
// argument, PATH=/usr/bin as its environment, the GetCapabilities readiness
// probe, then one process per operation, killed afterwards.
//
// It is a module of its own so the client's 2020-era dependencies (grpc
// v1.26, golang/protobuf v1.3.2) stay out of loomd's. Run it with
// `make rancher-conformance`; LOOMD names the loomd binary to bundle
// (default: built from ../..).
package conformance

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rancher/kontainer-engine/types"
)

const deadline = 60 * time.Second

// loomd returns the loomd binary: $LOOMD, or one built from the main module.
func loomd(t *testing.T) string {
	if p := os.Getenv("LOOMD"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return abs
	}
	bin := filepath.Join(t.TempDir(), "loomd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/loomd")
	cmd.Dir = filepath.Join("..", "..")
	// Static, as loomd bundle requires (Rancher's jail has no libc).
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building loomd: %v\n%s", err, out)
	}
	return bin
}

// driver is one start of the bundle, as Rancher's RunningDriver.Start.
type driver struct {
	t       *testing.T
	cmd     *exec.Cmd
	client  types.CloseableDriver
	stderr  bytes.Buffer
	exited  <-chan struct{} // closed when the process has exited
	waitErr error
}

// launcher makes the command that starts the driver with port.
type launcher func(port string) *exec.Cmd

func start(t *testing.T, launch launcher, name string) *driver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	d := &driver{t: t}
	d.cmd = launch(port)
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { d.waitErr = d.cmd.Wait(); close(exited) }()
	d.exited = exited
	t.Cleanup(d.kill)
	// Rancher sleeps 5 s before it dials. Waiting for the port instead
	// keeps grpc from backing off a second after a refused first dial.
	for end := time.Now().Add(deadline); ; {
		c, err := net.Dial("tcp", "127.0.0.1:"+port)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("the driver exited before it listened: %v\n%s", d.waitErr, &d.stderr)
		default:
		}
		if time.Now().After(end) {
			t.Fatalf("the driver did not listen on %s: %v\n%s", port, err, &d.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.client, err = types.NewClient(name, "127.0.0.1:"+port); err != nil {
		t.Fatal(err)
	}
	// Then Rancher's readiness probe: GetCapabilities until it answers
	// (Rancher pauses k² s after the k-th failure; short pauses here).
	for end := time.Now().Add(deadline); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.client.GetCapabilities(ctx)
		cancel()
		if err == nil {
			return d
		}
		if time.Now().After(end) {
			t.Fatalf("the driver did not answer GetCapabilities: %v\n%s", err, &d.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// kill ends the process as Rancher does after each operation.
func (d *driver) kill() {
	if d.client != nil {
		d.client.Close()
	}
	if d.cmd.Process != nil {
		d.cmd.Process.Kill()
		<-d.exited
	}
}

// schemaField is Rancher's flag -> schema field rule (kontainerdriver
// controller, toResourceField): the key split on "-" in lowerCamel, and
// the field type.
func schemaField(t *testing.T, key string, f *types.Flag) (string, string) {
	parts := strings.Split(key, "-")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	name := strings.Join(parts, "")
	switch f.Type {
	case "string":
		if f.Password {
			return name, "password"
		}
		return name, "string"
	case "int", "intPtr":
		return name, "int"
	case "bool", "boolPtr":
		return name, "boolean"
	case "stringSlice":
		return name, "array[string]"
	}
	t.Fatalf("flag %q has type %q, which Rancher cannot turn into a schema field", key, f.Type)
	return "", ""
}

// options builds DriverOptions as kontainer-engine's config getter and
// Create do: schema field names, name and displayName set, and the
// cluster's metadata copied into the string options.
func options(name string, ints map[string]int64, metadata map[string]string) *types.DriverOptions {
	o := &types.DriverOptions{
		StringOptions:      map[string]string{"name": name, "displayName": name, "zone": "z9", "driverName": "confdriver"},
		IntOptions:         ints,
		BoolOptions:        map[string]bool{"private": true},
		StringSliceOptions: map[string]*types.StringSlice{"tags": {Value: []string{"team=b", "env=ci"}}},
	}
	for k, v := range metadata {
		o.StringOptions[k] = v
	}
	return o
}

// bundle builds kontainer-engine-driver-confdriver in dir.
func bundle(t *testing.T, loomdBin, dir string) string {
	bin := filepath.Join(dir, "kontainer-engine-driver-confdriver")
	out, err := exec.Command(loomdBin, "bundle", "--plugin", filepath.Join("testdata", "confdriver"), "-o", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("loomd bundle: %v\n%s", err, out)
	}
	return bin
}

// TestConformance runs the bundle as Rancher does with CATTLE_DEV_MODE set:
// no jail, PATH=/usr/bin.
func TestConformance(t *testing.T) {
	bin := bundle(t, loomd(t), t.TempDir())
	tmp := t.TempDir()
	run(t, func(port string) *exec.Cmd {
		cmd := exec.Command(bin, port)
		cmd.Env = []string{"PATH=/usr/bin", "TMPDIR=" + tmp}
		return cmd
	})
}

// TestConformanceInJail runs the bundle as Rancher does by default:
// chrooted into a directory that holds the binary and nothing else (no
// libc, no /tmp), with PATH=/usr/bin. It needs root (chroot); without it
// the test skips, unless LOOM_CONFORMANCE_JAIL=1 (make
// rancher-conformance, hence CI) makes that a failure.
func TestConformanceInJail(t *testing.T) {
	if os.Getuid() != 0 {
		if os.Getenv("LOOM_CONFORMANCE_JAIL") == "1" {
			t.Fatal("LOOM_CONFORMANCE_JAIL=1 but not root: the jail run needs chroot")
		}
		t.Skip("chroot needs root")
	}
	l := loomd(t)
	// loomd bundle refuses a dynamic base; check the one given anyway, so
	// a failure says why.
	if f, err := elf.Open(l); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				f.Close()
				t.Fatalf("%s is dynamically linked: the jail has no libc (make rancher-conformance builds a static loomd)", l)
			}
		}
		f.Close()
	}
	jail := t.TempDir()
	os.Mkdir(filepath.Join(jail, "bin"), 0o755)
	bundle(t, l, filepath.Join(jail, "bin"))
	run(t, func(port string) *exec.Cmd {
		cmd := exec.Command("/bin/kontainer-engine-driver-confdriver", port)
		cmd.Env = []string{"PATH=/usr/bin"}
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: jail}
		return cmd
	})
	// Without a /tmp the plugin was unpacked beside the binary.
	if copies, _ := filepath.Glob(filepath.Join(jail, "bin", "loomd-bundles-0", "*")); len(copies) != 1 {
		t.Fatalf("unpacked copies in the jail: %v", copies)
	}
}

// run drives the operations kontainer-engine runs, each in a new process.
func run(t *testing.T, launch launcher) {
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), 5*deadline)
	defer cancel()
	op := func(f func(c types.CloseableDriver)) {
		d := start(t, launch, "confdriver")
		f(d.client)
		d.kill()
	}

	// Activation: the schema Rancher builds from the create options.
	op(func(c types.CloseableDriver) {
		flags, err := c.GetDriverCreateOptions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"zone": "string", "secret": "password", "nodeCount": "int", "maxNodes": "int",
			"private": "boolean", "autoscale": "boolean", "tags": "array[string]"}
		got := map[string]string{}
		for key, f := range flags.Options {
			name, typ := schemaField(t, key, f)
			got[name] = typ
		}
		if b, _ := json.Marshal(got); len(got) != len(want) || !strings.Contains(string(b), `"nodeCount":"int"`) {
			t.Fatalf("schema fields %v, want %v", got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("schema field %s is %q, want %q (all: %v)", k, got[k], v, got)
			}
		}
		o := flags.Options
		if o["node-count"].Default.DefaultInt != 3 || !o["private"].Default.DefaultBool || o["zone"].Default.DefaultString != "z1" ||
			strings.Join(o["tags"].Default.DefaultStringSlice.Value, ",") != "team=a" {
			t.Fatalf("defaults: %v", flags)
		}
		if uf, err := c.GetDriverUpdateOptions(ctx); err != nil || len(uf.Options) != 1 {
			t.Fatalf("GetDriverUpdateOptions: %v, %v", uf, err)
		}
		caps, err := c.GetCapabilities(ctx)
		if err != nil || !caps.HasGetVersionCapability() || !caps.HasSetVersionCapability() || !caps.HasGetClusterSizeCapability() ||
			!caps.HasSetClusterSizeCapability() || !caps.HasEtcdBackupCapability() {
			t.Fatalf("GetCapabilities: %v, %v", caps, err)
		}
	})

	var info *types.ClusterInfo
	op(func(c types.CloseableDriver) {
		info, err = c.Create(ctx, options("prod", map[string]int64{"nodeCount": 2}, nil), nil)
		if err != nil || info.Endpoint != "api.cl-prod.example" || info.NodeCount != 2 || info.Metadata["state"] != `{"id":"cl-prod"}` {
			t.Fatalf("Create: %v, %v", info, err)
		}
		// No maxNodes and no autoscale sent: intPtr and boolPtr read nil.
		if info.Metadata["limits"] != "max=unset autoscale=unset" {
			t.Fatalf("Create: pointer options %q, want unset", info.Metadata["limits"])
		}
	})
	op(func(c types.CloseableDriver) {
		info, err = c.PostCheck(ctx, info)
		if err != nil || info.ServiceAccountToken != "sa-cl-prod-1" {
			t.Fatalf("PostCheck: %v, %v", info, err)
		}
		// GenerateServiceAccount runs PostCheck again on a running cluster.
		if again, err := c.PostCheck(ctx, info); err != nil || again.ServiceAccountToken != "sa-cl-prod-2" {
			t.Fatalf("PostCheck again: %v, %v", again, err)
		}
	})
	op(func(c types.CloseableDriver) {
		o := options("prod", map[string]int64{"nodeCount": 5, "maxNodes": 0}, info.Metadata)
		o.BoolOptions["autoscale"] = false
		info, err = c.Update(ctx, info, o)
		if err != nil || info.NodeCount != 5 {
			t.Fatalf("Update: %v, %v", info, err)
		}
		// 0 and false sent: set, not nil.
		if info.Metadata["limits"] != "max=0 autoscale=false" {
			t.Fatalf("Update: pointer options %q, want max=0 autoscale=false", info.Metadata["limits"])
		}
	})
	op(func(c types.CloseableDriver) {
		if err := c.SetVersion(ctx, info, &types.KubernetesVersion{Version: "1.31"}); err != nil {
			t.Fatalf("SetVersion: %v", err)
		}
		if err := c.SetClusterSize(ctx, info, &types.NodeCount{Count: 4}); err != nil {
			t.Fatalf("SetClusterSize: %v", err)
		}
	})
	op(func(c types.CloseableDriver) {
		if v, err := c.GetVersion(ctx, info); err != nil || v.Version != "1.31" {
			t.Fatalf("GetVersion: %v, %v", v, err)
		}
		if n, err := c.GetClusterSize(ctx, info); err != nil || n.Count != 4 {
			t.Fatalf("GetClusterSize: %v, %v", n, err)
		}
		k, err := c.GetK8SCapabilities(ctx, options("prod", nil, nil))
		if err != nil || k.L4LoadBalancer == nil || k.L4LoadBalancer.Provider != "conf" || len(k.IngressControllers) != 1 ||
			!k.IngressControllers[0].CustomDefaultBackend || k.NodePortRange != "30000-32767" || !k.NodePoolScalingSupported {
			t.Fatalf("GetK8SCapabilities: %v, %v", k, err)
		}
	})
	op(func(c types.CloseableDriver) {
		o := options("prod", nil, info.Metadata)
		if err := c.ETCDSave(ctx, info, o, "snap-1"); err != nil {
			t.Fatalf("ETCDSave: %v", err)
		}
		if err := c.SetClusterSize(ctx, info, &types.NodeCount{Count: 9}); err != nil {
			t.Fatal(err)
		}
		restored, err := c.ETCDRestore(ctx, info, o, "snap-1")
		if err != nil || restored.NodeCount != 4 || restored.Version != "1.31" {
			t.Fatalf("ETCDRestore: %v, %v", restored, err)
		}
		if err := c.ETCDRemoveSnapshot(ctx, info, o, "snap-1"); err != nil {
			t.Fatalf("ETCDRemoveSnapshot: %v", err)
		}
		// A terminal error comes through as the bare message too, as a Go
		// driver's error does (no "rpc error: code = ..." wrapping).
		_, err = c.ETCDRestore(ctx, info, o, "snap-1")
		if err == nil || err.Error() != "confdriver etcd_restore: cluster cl-prod has no snapshot snap-1" {
			t.Fatalf("ETCDRestore of a removed snapshot: %v", err)
		}
		if err := c.RemoveLegacyServiceAccount(ctx, info); err != nil {
			t.Fatalf("RemoveLegacyServiceAccount: %v", err)
		}
	})
	op(func(c types.CloseableDriver) {
		if err := c.Remove(ctx, info); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		// A plain (retry) error goes out as code Unknown, which the
		// client's handlErr turns into the bare message.
		_, err := c.PostCheck(ctx, info)
		if err == nil || err.Error() != "confdriver post_check: cluster cl-prod does not exist" {
			t.Fatalf("PostCheck after Remove: %v", err)
		}
	})

	// A create that fails half way: the client returns the error and the
	// info; kontainer-engine stores the info, and retries with it.
	var partial *types.ClusterInfo
	op(func(c types.CloseableDriver) {
		partial, err = c.Create(ctx, options("half", nil, nil), nil)
		if err == nil || err.Error() != "confdriver create: provisioning cl-half stalled" || partial == nil || partial.Metadata["state"] != `{"id":"cl-half"}` {
			t.Fatalf("partial Create: %v, %v", partial, err)
		}
	})
	op(func(c types.CloseableDriver) {
		info, err := c.Create(ctx, options("half", nil, partial.Metadata), partial)
		if err != nil || info.Status != "RUNNING" || info.CreateError != "" {
			t.Fatalf("retried Create: %v, %v", info, err)
		}
	})
}
