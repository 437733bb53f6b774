package docker_test

// The docker automator against real podman on a real sshd host: the
// plugin folder as shipped, run by Loom's runtime with loomd's bindings,
// logging in over SSH as a sudo user and running podman (as root, through
// sudo) on the node. The host is an sshd of internal/sshdtest whose
// /etc/containers, /var/lib/containers, /run/containers and /run/libpod
// are its own (Config.PrivateDirs), with a bridge network of its own, so
// tests on one machine are separate container hosts. The container is a
// static Go HTTP server (testdata/webapp) imported as a local image: no
// registry and no network are needed.
//
// podman must be installed (apt-get install podman runc: .ci/run does);
// without it the test skips, except under CI=true, where it fails.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/podmantest"
	"github.com/loomrt/loom/internal/sshdtest"
	loomrt "github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const (
	tenant = "t1"
	image  = "localhost/loomtest/webapp:1"
	secret = "s3cret-Token-for-the-container"
)

func pluginDir() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Dir(file)
}

// podmanHost is an sshd host with podman set up in its private dirs.
type podmanHost struct {
	*podmantest.Host
	srv *sshdtest.Server
}

func startPodmanHost(t *testing.T, tarball string) *podmanHost {
	t.Helper()
	srv := sshdtest.Start(t, sshdtest.Config{AllowRoot: true, PrivateDirs: podmantest.PrivateDirs})
	h := &podmanHost{Host: podmantest.Setup(t, srv), srv: srv}
	h.Import(tarball, image, `ENTRYPOINT ["/webapp"]`)
	return h
}

// webappTar builds testdata/webapp statically into a one-file rootfs tar.
func webappTar(t *testing.T) string {
	t.Helper()
	return podmantest.RootfsTar(t, map[string][]byte{"webapp": podmantest.BuildStatic(t, pluginDir(), "./testdata/webapp")})
}

type podEnv struct {
	user string // the SSH login
	t    *testing.T
	host *podmanHost
	rt   *loomrt.Runtime
	logs *luatest.LogBuffer
	work string
	seq  int
}

// newPodEnv starts a podman host and a runtime serving plugins/docker as
// shipped, logging in as the NOPASSWD sudo user; with coopr, Coopr's own
// docker_automator.json (unchanged, in Coopr's folder layout) with
// docker.lua beside it, logging in as root (Coopr ran docker without sudo).
func newPodEnv(t *testing.T, coopr bool) *podEnv {
	podmantest.Need(t)
	h := startPodmanHost(t, webappTar(t))
	root := t.TempDir()
	e := &podEnv{t: t, host: h, logs: &luatest.LogBuffer{}, work: filepath.Join(root, "work"), user: h.srv.NoPasswdUser}
	plugins := filepath.Join(root, "plugins")
	if coopr {
		e.user = "root"
		dir := filepath.Join(plugins, "automators", "docker_automator")
		def, err := os.ReadFile(filepath.Join(pluginDir(), "..", "..", "runtime", "testdata", "coopr-definitions", "docker_automator.json"))
		if err != nil {
			t.Fatal(err)
		}
		lua, err := os.ReadFile(filepath.Join(pluginDir(), "docker.lua"))
		if err != nil {
			t.Fatal(err)
		}
		luatest.WriteFile(t, filepath.Join(dir, "docker_automator.json"), string(def))
		luatest.WriteFile(t, filepath.Join(dir, "docker.lua"), string(lua))
	} else {
		if err := os.CopyFS(filepath.Join(plugins, "docker"), os.DirFS(pluginDir())); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(plugins, "docker", "testdata"))
	}
	rt, err := loomrt.New(loomrt.Options{PluginsDir: plugins, WorkDir: e.work, Tenant: tenant,
		Bindings: std.New(std.Options{}), Logger: e.logs.Logger(), Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	t.Cleanup(func() { rt.Close() })
	key := filepath.Join(e.work, tenant, "automatortypes", "docker", "keys", "id")
	os.MkdirAll(filepath.Dir(key), 0o700)
	if err := os.WriteFile(key, h.srv.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), secret) {
			t.Errorf("an environment value reached the logs:\n%s", e.logs.String())
		}
	})
	return e
}

// run runs a task of the docker type on the host as the NOPASSWD sudo
// user, host keys pinned.
func (e *podEnv) run(name string, fields map[string]any, config map[string]any) *loomrt.Result {
	e.t.Helper()
	e.seq++
	keys := map[string]any{}
	for typ, k := range e.host.srv.HostKeys {
		keys[typ] = base64.StdEncoding.EncodeToString(k.Marshal())
	}
	cfg := map[string]any{
		"hostname": "web1.example.com", "ipaddresses": map[string]any{"access_v4": e.host.srv.Host},
		"ssh-auth":      map[string]any{"user": e.user, "identityfile": "keys/id", "port": e.host.srv.Port},
		"ssh_host_keys": keys, "automators": []any{"docker"}, "services": []any{"web"},
	}
	if fields != nil {
		cfg["service"] = map[string]any{"name": "web", "action": map[string]any{"type": "docker", "fields": fields}}
	}
	for k, v := range config {
		cfg[k] = v
	}
	b, _ := json.Marshal(map[string]any{"taskId": fmt.Sprintf("00000007-001-%03d", e.seq), "jobId": "00000007-001",
		"clusterId": "00000007", "nodeId": "node-1", "taskName": name, "tenantId": tenant, "config": cfg})
	began := time.Now()
	res, err := e.rt.Run(context.Background(), b)
	e.t.Logf("%s took %v", name, time.Since(began))
	if err != nil {
		e.t.Fatal(err)
	}
	out, _ := json.Marshal(res)
	if strings.Contains(string(out), secret) {
		e.t.Errorf("an environment value is in the result: %s", out)
	}
	return res
}

func must(t *testing.T, res *loomrt.Result) {
	t.Helper()
	if res.Status != 0 {
		t.Fatalf("status %d: %s\nstdout: %s\nstderr: %s", res.Status, res.Message, res.Stdout, res.Stderr)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	var last error
	for i := 0; i < 50; i++ {
		resp, err := http.Get(url)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}

func TestPodmanServiceLife(t *testing.T) {
	e := newPodEnv(t, false)
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	fields := map[string]any{"image_name": image, "sudo": "true", "pull": "missing", "stop_timeout": "2",
		"publish_ports": fmt.Sprintf("127.0.0.1:%d:8080", port), "command": "--from 'the plugin'",
		"environment_variables": "GREETING=hello,SECRET_TOKEN=" + secret}

	boot := e.run("BOOTSTRAP", nil, nil)
	must(t, boot)
	if !strings.Contains(boot.Stdout, "podman version") {
		t.Fatalf("BOOTSTRAP found %q, want podman", boot.Stdout)
	}
	must(t, e.run("INSTALL", fields, nil))

	start := e.run("START", fields, nil)
	must(t, start)
	id := start.Result[image].(map[string]any)["id"].(string)
	if got := get(t, url+"/"); got != "hello --from the plugin" {
		t.Fatalf("the container answers %q", got)
	}
	if got := get(t, url+"/env/SECRET_TOKEN"); got != secret {
		t.Fatalf("SECRET_TOKEN in the container is %q", got)
	}
	if ps := e.host.Podman("ps", "--format", "{{.Names}} {{.ID}}"); !strings.Contains(ps, "coopr-web "+id[:12]) {
		t.Fatalf("podman ps: %s, want coopr-web %s", ps, id[:12])
	}
	// The value never was on a command line the node's ps could show: the
	// container's recorded create command holds -e SECRET_TOKEN only.
	if inspect := e.host.Podman("inspect", "--format", "{{.Config.CreateCommand}}", "coopr-web"); strings.Contains(inspect, secret) || !strings.Contains(inspect, "SECRET_TOKEN") {
		t.Fatalf("the create command: %s", inspect)
	}
	docker := map[string]any{"docker": start.Result["docker"]}

	// START again (a lost answer, a retried task): the same container.
	again := e.run("START", fields, docker)
	must(t, again)
	if again.Result[image].(map[string]any)["id"] != id {
		t.Fatalf("START again made another container")
	}

	stop := e.run("STOP", fields, docker)
	must(t, stop)
	if st := strings.TrimSpace(e.host.Podman("inspect", "--format", "{{.State.Running}}", "coopr-web")); st != "false" {
		t.Fatalf("after STOP running=%s", st)
	}
	restart := e.run("START", fields, map[string]any{"docker": stop.Result["docker"]})
	must(t, restart)
	if restart.Result[image].(map[string]any)["id"] != id || get(t, url+"/") != "hello --from the plugin" {
		t.Fatalf("START after STOP did not start the same container again")
	}

	// New settings replace the container.
	fields["environment_variables"] = "GREETING=bye"
	changed := e.run("START", fields, nil)
	must(t, changed)
	if changed.Result[image].(map[string]any)["id"] == id || get(t, url+"/") != "bye --from the plugin" {
		t.Fatalf("new settings did not replace the container")
	}

	must(t, e.run("REMOVE", fields, nil))
	if out, err := e.host.PodmanErr("container", "exists", "coopr-web"); err == nil {
		t.Fatalf("coopr-web still exists after REMOVE: %s", out)
	}
	must(t, e.run("REMOVE", fields, nil))
	must(t, e.run("STOP", fields, nil))

	// An image that is not there: INSTALL fails with podman's reason.
	fields["image_name"] = "localhost/loomtest/missing:1"
	fields["pull"] = "never"
	bad := e.run("INSTALL", fields, nil)
	if bad.Status == 0 || !strings.Contains(bad.Message, "the image is not on the node and pull is never") {
		t.Fatalf("INSTALL of a missing image: %d %s", bad.Status, bad.Message)
	}
}

// TestPodmanCooprDefinition runs Coopr's own docker_automator.json,
// unchanged, with docker.lua: Coopr's fields only (no cli, pull, sudo or
// stop_timeout), as root, as Coopr did.
func TestPodmanCooprDefinition(t *testing.T) {
	e := newPodEnv(t, true)
	port, err := sshdtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{"image_name": image, "publish_ports": fmt.Sprintf("127.0.0.1:%d:8080", port),
		"environment_variables": "GREETING=coopr", "command": "as before"}
	must(t, e.run("BOOTSTRAP", nil, nil))
	must(t, e.run("INSTALL", fields, nil))
	start := e.run("START", fields, nil)
	must(t, start)
	if got := get(t, fmt.Sprintf("http://127.0.0.1:%d/", port)); got != "coopr as before" {
		t.Fatalf("the container answers %q", got)
	}
	must(t, e.run("CONFIGURE", fields, nil))
	must(t, e.run("INITIALIZE", fields, nil))
	must(t, e.run("STOP", fields, map[string]any{"docker": start.Result["docker"]}))
	must(t, e.run("REMOVE", fields, nil))
	if out, err := e.host.PodmanErr("container", "exists", "coopr-web"); err == nil {
		t.Fatalf("coopr-web still exists after REMOVE: %s", out)
	}
	// Without image_name, Coopr's required set stops the action.
	bad := e.run("START", map[string]any{"publish_ports": "80"}, nil)
	if bad.Status == 0 || !strings.Contains(bad.Message, "missing required admin fields for docker: image_name") {
		t.Fatalf("START without image_name: %d %s", bad.Status, bad.Message)
	}
}
