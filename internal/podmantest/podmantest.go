// Package podmantest turns an sshd of internal/sshdtest into a container
// host: real podman (Debian's package, as root, with runc), its state in
// the sshd's private dirs, a bridge network of its own, so that several
// sshd on one machine are separate container hosts for the docker
// automator's tests and the end-to-end tests.
//
// Start the sshd with Config.PrivateDirs including PrivateDirs, then call
// Setup. Images come from local tarballs (Host.Import): no registry, no
// network.
package podmantest

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

// PrivateDirs are the dirs podman keeps its configuration and state in:
// an sshd that has them private is a container host of its own.
var PrivateDirs = []string{"/etc/containers", "/var/lib/containers", "/run/containers", "/run/libpod"}

// Conf is the hosts' containers.conf: runc (crun refuses the hybrid
// cgroup hierarchy some machines have), cgroupfs, limits below the hard
// ones (containers may lack CAP_SYS_RESOURCE to raise them), events to a
// file (no journald).
const Conf = `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "/run/libpod"
[network]
network_config_dir = "/etc/containers/networks"
`

// Need skips the test when podman cannot run here (or fails it under
// CI=true, where .ci/run installs podman and runc).
func Need(t testing.TB) {
	t.Helper()
	for _, bin := range []string{"podman", "runc", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s not found (CI=true: .ci/run installs podman and runc)", bin)
			}
			t.Skipf("%s not found; install with: apt-get install -y podman runc", bin)
		}
	}
}

// Host is an sshd set up as a container host.
type Host struct {
	t   testing.TB
	srv *sshdtest.Server
}

var seq atomic.Int64

// Setup writes podman's configuration into the sshd's private dirs, with
// a bridge (loompN) and a 10.89.N.0/24 subnet of the host's own, and
// removes the host's containers at the test's end (they outlive sshd:
// conmon is not its child), before sshd stops.
func Setup(t testing.TB, srv *sshdtest.Server) *Host {
	t.Helper()
	h := &Host{t: t, srv: srv}
	n := 1 + int((time.Now().UnixNano()/1000+seq.Add(1))%250)
	// netavark names its firewall chains after the network's name: a name
	// of the host's own keeps hosts' rules apart, and the host's last
	// container's teardown removes its chains.
	name := fmt.Sprintf("loom%d-%d", n, time.Now().UnixNano()%100000)
	netConf, _ := json.Marshal(map[string]any{"name": name, "id": fmt.Sprintf("%064x", time.Now().UnixNano()+int64(n)),
		"driver": "bridge", "network_interface": fmt.Sprintf("loomp%d", n), "created": "2024-01-01T00:00:00Z",
		"subnets":      []any{map[string]any{"subnet": fmt.Sprintf("10.89.%d.0/24", n), "gateway": fmt.Sprintf("10.89.%d.1", n)}},
		"ipv6_enabled": false, "internal": false, "dns_enabled": false, "ipam_options": map[string]any{"driver": "host-local"}})
	for path, content := range map[string]string{
		"/etc/containers/containers.conf":            strings.Replace(Conf, "[network]\n", "[network]\ndefault_network = \""+name+"\"\n", 1),
		"/etc/containers/policy.json":                `{"default":[{"type":"insecureAcceptAnything"}]}`,
		"/etc/containers/registries.conf":            "unqualified-search-registries = []\n",
		"/etc/containers/networks/" + name + ".json": string(netConf),
	} {
		p := srv.HostPath(path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { h.PodmanErr("rm", "-af", "-t", "0") })
	return h
}

// Podman runs podman as root in the host's mount namespace and fails the
// test when it fails.
func (h *Host) Podman(args ...string) string {
	h.t.Helper()
	out, err := h.PodmanErr(args...)
	if err != nil {
		h.t.Fatalf("podman %v on %s: %v\n%s", args, h.srv.Addr, err, out)
	}
	return out
}

// PodmanErr is Podman that returns the error.
func (h *Host) PodmanErr(args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(h.srv.PID()), "-m", "--", "podman"}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Import loads a rootfs tarball as image (podman import), with
// Dockerfile-style changes such as `ENTRYPOINT ["/app"]`.
func (h *Host) Import(tarball, image string, changes ...string) {
	h.t.Helper()
	args := []string{"import"}
	for _, c := range changes {
		args = append(args, "--change", c)
	}
	h.Podman(append(args, tarball, image)...)
}

// RootfsTar writes a tarball of files (name -> content, mode 0755) for
// Import, and returns its path.
func RootfsTar(t testing.TB, files map[string][]byte) string {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o755, Size: int64(len(files[n])), Typeflag: tar.TypeReg})
		tw.Write(files[n])
	}
	tw.Close()
	p := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// BuildStatic builds the Go package pkg (a path go build takes, such as
// ./testdata/webapp) as a static binary and returns its content.
func BuildStatic(t testing.TB, dir, pkg string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bin")
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
