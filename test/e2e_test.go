package test

// End-to-end tests of the provisioning plugins through the built loomd
// binary against a real OpenSSH sshd on loopback (internal/sshdtest):
// issue 3 §6 (shell BOOTSTRAP and INSTALL in Coopr's JSON shape) and
// issue 4 §4 (a node's whole life: static CREATE, CONFIRM, shell
// BOOTSTRAP, INSTALL, START, static DELETE). They need root, sshd and
// sudo (CI installs them); elsewhere sshdtest skips them.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/loomrt/loom/internal/sshdtest"
)

// defaultCacheDir is plugins/shell's default remote cache dir.
const defaultCacheDir = "/var/cache/loom/shell"

func randToken(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// cleanCacheDir removes the shell automator's default cache dir before
// and after a test, so each test sees what its own runs left there.
func cleanCacheDir(t *testing.T) {
	os.RemoveAll(defaultCacheDir)
	t.Cleanup(func() { os.RemoveAll(defaultCacheDir) })
}

// writeShellResources writes the shell automator's resources in its work
// dir, as a Coopr resource sync would: scripts/ (mode 0755) and an
// archive unpacked under archives/<name>/.
func writeShellResources(e *e2eEnv) {
	dir := e.typeDir("automatortypes", "shell")
	// The script uses the plugin's library (loom_lookup_key, and Coopr's
	// name for it) and an archive, writes a file given as its first
	// argument, and reports where it ran.
	e.writeFile(filepath.Join(dir, "scripts", "install-web.sh"), `#!/bin/sh
set -e
out=$1
shift
host=$(loom_lookup_key config/hostname)
svc=$(coopr_lookup_key config/service/name)
first=$(loom_lookup_key config/services/0)
printf 'host=%s service=%s first=%s args=%s user=%s\n' "$host" "$svc" "$first" "$*" "$(id -un)" > "$out"
cp ../archives/site/index.html "$(dirname "$out")/index.html"
echo "installed $svc on $host"
echo "task json mode $(stat -c %a "$LOOM_TASK_JSON")" >&2
`, 0o755)
	e.writeFile(filepath.Join(dir, "scripts", "fail.sh"), `#!/bin/sh
echo "about to fail"
echo "disk full (pretend)" >&2
exit 3
`, 0o755)
	e.writeFile(filepath.Join(dir, "scripts", "start-web.sh"), `#!/bin/sh
echo "started $(loom_lookup_key config/service/name) via $(loom_lookup_key taskName)" > "$1"
`, 0o755)
	e.writeFile(filepath.Join(dir, "archives", "site", "index.html"), "<h1>hello from the archive</h1>\n", 0o644)
}

// baseConfig is the config of a Coopr task for a one-node cluster, before
// any provider result, with a provider credential that must never leave
// loomd's host.
func baseConfig(providerSecret string) map[string]any {
	return map[string]any{
		"cluster":      map[string]any{"web": map[string]any{"port": 8080}},
		"hostname":     "web00000042-1000.example.com",
		"ipaddresses":  map[string]any{},
		"nodenum":      1000,
		"sshuser":      "root",
		"hardwaretype": "small",
		"imagetype":    "debian12",
		"flavor":       "small",
		"image":        "debian12",
		"automators":   []any{"shell"},
		"services":     []any{"web", "base"},
		"provider": map[string]any{
			"name": "static-e2e", "providertype": "static",
			"provisioner": map[string]any{"api_password": providerSecret},
		},
		"nodes": map[string]any{},
	}
}

func serviceAction(name, script, args string) map[string]any {
	fields := map[string]any{"script": script}
	if args != "" {
		fields["args"] = args
	}
	return map[string]any{"service": map[string]any{
		"name":   name,
		"action": map[string]any{"type": "shell", "fields": fields},
	}}
}

// checkNoLeftovers fails when the node keeps task data: anything in the
// cache dir's run/, a file under the cache dir holding one of the secrets,
// or a file under /tmp or the SSH users' homes holding secrets[0]. Those
// are shared with other test processes, which may well hold the shared
// test password, so they are searched for secrets[0] only: a value unique
// to this test that exists nowhere but in its tasks. skip lists local
// (provisioner-side) dirs on this same machine.
func checkNoLeftovers(t *testing.T, secrets []string, skip ...string) {
	t.Helper()
	if entries, err := os.ReadDir(filepath.Join(defaultCacheDir, "run")); err == nil && len(entries) > 0 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("task data left in %s/run: %v", defaultCacheDir, names)
	}
	if hits := filesContaining(defaultCacheDir, secrets, skip...); len(hits) > 0 {
		t.Errorf("files in the cache dir hold task secrets: %v", hits)
	}
	for _, root := range []string{os.TempDir(), "/home/" + sshdtest.User, "/home/" + sshdtest.NoPasswdUser} {
		if hits := filesContaining(root, secrets[:1], skip...); len(hits) > 0 {
			t.Errorf("files under %s hold task secrets: %v", root, hits)
		}
	}
}

// checkNoSecrets fails when loomd printed a secret.
func checkNoSecrets(t *testing.T, what string, outputs []string, secrets map[string]string) {
	t.Helper()
	for _, out := range outputs {
		for name, s := range secrets {
			if s != "" && strings.Contains(out, s) {
				t.Errorf("%s: loomd output contains the %s:\n%s", what, name, out)
			}
		}
	}
}

// TestShellBootstrapInstall is issue 3 §6: a Coopr-shaped BOOTSTRAP, then
// INSTALL, through plugins/shell with password auth and sudo, each loomd
// run on one SSH connection, with the script's effect checked on the node
// and no task data left there.
func TestShellBootstrapInstall(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	cleanCacheDir(t)
	e := newE2EEnv(t, srv)
	writeShellResources(e)
	providerSecret := "prov-secret-" + randToken(t)

	cfg := baseConfig(providerSecret)
	cfg["ipaddresses"] = map[string]any{"access_v4": srv.Host, "bind_v4": srv.Host}
	cfg["sshuser"] = srv.User
	cfg["ssh-auth"] = map[string]any{"user": srv.User, "password": srv.Password, "port": srv.Port}
	cfg["ssh_host_keys"] = hostKeyBlobs(srv)
	cfg["providerid"] = "static-e2e-1"
	node := newCooprNode("00000042", "8a1c0e8e-2a61-4b7b-9d0e-6f1f4d1b2c3d", cfg)

	boot := e.run(node.task("BOOTSTRAP", nil))
	if boot.status() != 0 || boot.Code != 0 {
		t.Fatalf("BOOTSTRAP failed:\n%s", boot)
	}
	if boot.Accepted != 1 {
		t.Errorf("BOOTSTRAP used %d SSH connections, want 1", boot.Accepted)
	}
	// loomd run dials the task's node while its plugins load, and the
	// plugin's connection is that one.
	if boot.Connections != 1 {
		t.Errorf("BOOTSTRAP opened %d TCP connections to sshd, want 1 (the early one, used)", boot.Connections)
	}
	node.apply(boot)
	for _, p := range []string{"scripts/install-web.sh", "archives/site/index.html", "lib/loom-wrapper.sh", "lib/loom_lookup_key", "lib/coopr_lookup_key"} {
		st, err := os.Stat(filepath.Join(defaultCacheDir, p))
		if err != nil {
			t.Fatalf("BOOTSTRAP did not ship %s: %v", p, err)
		}
		if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 0 {
			t.Errorf("%s is owned by uid %d, want root (shipped through sudo)", p, sys.Uid)
		}
	}
	if st, err := os.Stat(filepath.Join(defaultCacheDir, "run")); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("cache run dir: %v, mode %v; want 0700", err, st.Mode().Perm())
	}

	outDir := t.TempDir()
	out := filepath.Join(outDir, "web.conf")
	install := e.run(node.task("INSTALL", serviceAction("web", "install-web.sh", out+` "hello world" 'it''s'`)))
	if install.status() != 0 || install.Code != 0 {
		t.Fatalf("INSTALL failed:\n%s", install)
	}
	if install.Accepted != 1 || install.Connections != 1 {
		t.Errorf("INSTALL used %d SSH connections over %d TCP connections, want 1 and 1", install.Accepted, install.Connections)
	}
	node.apply(install)
	t.Logf("INSTALL:\n%s", install)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the INSTALL script did not create %s: %v\n%s", out, err, install)
	}
	want := "host=web00000042-1000.example.com service=web first=web args=hello world its user=root\n"
	if string(data) != want {
		t.Errorf("the script wrote %q, want %q", data, want)
	}
	if st, _ := os.Stat(out); st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s is not owned by root: the script did not run through sudo", out)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "index.html")); err != nil || !strings.Contains(string(b), "hello from the archive") {
		t.Errorf("the script could not use the shipped archive: %v %q", err, b)
	}
	if !strings.Contains(install.str("stdout"), "installed web on web00000042-1000.example.com") {
		t.Errorf("INSTALL result lacks the script's stdout:\n%s", install)
	}
	if !strings.Contains(install.str("stderr"), "task json mode 600") {
		t.Errorf("the task JSON was not mode 0600 while the script ran (stderr %q)", install.str("stderr"))
	}

	// A failing script: status 1, its output and exit code in the result,
	// and the task data still removed.
	fail := e.run(node.task("CONFIGURE", serviceAction("web", "fail.sh", "")))
	if fail.status() != 1 || fail.Code != 1 {
		t.Fatalf("a failing script gave:\n%s", fail)
	}
	if !strings.Contains(fail.str("stdout"), "about to fail") || !strings.Contains(fail.str("stderr"), "disk full (pretend)") {
		t.Errorf("the failure result lacks the script's output:\n%s", fail)
	}
	t.Logf("CONFIGURE (failing):\n%s", fail)
	errObj, _ := fail.Result["error"].(map[string]any)
	if code, _ := errObj["exit_code"].(float64); code != 3 || errObj["kind"] != "command" {
		t.Errorf("error = %v, want kind command, exit_code 3", errObj)
	}
	msg := fail.str("message")
	for _, want := range []string{"fail.sh exited with status 3", srv.User + "@" + srv.Addr, "CONFIGURE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("failure message %q does not mention %q", msg, want)
		}
	}

	secrets := []string{providerSecret, srv.Password}
	checkNoLeftovers(t, secrets, e.home, e.work, srv.Dir, filepath.Dir(e2eBin))
	checkNoSecrets(t, "shell e2e", e.output, map[string]string{"SSH password": srv.Password, "provider secret": providerSecret})
}

// TestShellHostKeyEnforced: a BOOTSTRAP whose pinned host key is not the
// node's fails with a host-key error and touches nothing.
func TestShellHostKeyEnforced(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	cleanCacheDir(t)
	e := newE2EEnv(t, srv)
	writeShellResources(e)
	cfg := baseConfig("")
	cfg["ipaddresses"] = map[string]any{"access_v4": srv.Host, "bind_v4": srv.Host}
	cfg["ssh-auth"] = map[string]any{"user": srv.User, "password": srv.Password, "port": srv.Port}
	other := sshdtest.Start(t, sshdtest.Config{}) // another host's keys
	cfg["ssh_host_keys"] = hostKeyBlobs(other)
	node := newCooprNode("00000043", "node-hk", cfg)

	boot := e.run(node.task("BOOTSTRAP", nil))
	if boot.status() == 0 {
		t.Fatalf("BOOTSTRAP with a wrong pinned key succeeded:\n%s", boot)
	}
	errObj, _ := boot.Result["error"].(map[string]any)
	if errObj["kind"] != "host_key" || !strings.Contains(boot.str("message"), srv.Addr) {
		t.Errorf("want a host_key error naming %s, got:\n%s", srv.Addr, boot)
	}
	if _, err := os.Stat(defaultCacheDir); err == nil {
		t.Errorf("%s exists after a refused BOOTSTRAP", defaultCacheDir)
	}
	checkNoSecrets(t, "host key e2e", e.output, map[string]string{"SSH password": srv.Password})
}

// TestNodeLifecycle is issue 4 §4: a node's whole life through loomd run
// against a real sshd, with a Coopr-server stand-in carrying each result
// into the next task's config: static CREATE and CONFIRM, shell
// BOOTSTRAP, INSTALL and START, static DELETE. It runs once with an
// inline key in the inventory and once with a password.
func TestNodeLifecycle(t *testing.T) {
	for _, auth := range []string{"key", "password"} {
		t.Run(auth, func(t *testing.T) { testNodeLifecycle(t, auth) })
	}
}

func testNodeLifecycle(t *testing.T, auth string) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	cleanCacheDir(t)
	e := newE2EEnv(t, srv)
	writeShellResources(e)
	providerSecret := "prov-secret-" + randToken(t)

	// The inventory: this sshd, with a credential of the kind under test.
	host := map[string]any{
		"id": "rack1-01", "address": srv.Host, "port": srv.Port, "hostname": "rack1-01.static.example",
		"labels": map[string]any{"flavor": "small", "image": []any{"debian12", "debian-12"}},
	}
	// keyLine is a line from the middle of the PEM: key material no
	// output may show.
	pemLines := strings.Split(strings.TrimSpace(string(srv.KeyPEM)), "\n")
	keyLine := pemLines[len(pemLines)/2]
	secret := srv.Password
	if auth == "key" {
		host["user"], host["key"] = srv.NoPasswdUser, string(srv.KeyPEM)
		secret = keyLine
	} else {
		host["user"], host["password"] = srv.User, srv.Password
	}
	other := map[string]any{"id": "rack1-02", "address": "192.0.2.10", "password": "unused-" + randToken(t),
		"labels": map[string]any{"flavor": "large", "image": "debian12"}}
	inv, _ := json.Marshal(map[string]any{"hosts": []any{other, host}})
	e.writeFile(filepath.Join(e.typeDir("providertypes", "static"), "inventory.json"), string(inv), 0o600)

	node := newCooprNode("00000051", "5f0c1d2e-node-"+auth, baseConfig(providerSecret))
	step := func(name string, extra map[string]any) loomdResult {
		t.Helper()
		r := e.run(node.task(name, extra))
		if r.status() != 0 || r.Code != 0 {
			t.Fatalf("%s failed:\n%s", name, r)
		}
		node.apply(r)
		return r
	}

	create := step("CREATE", nil)
	if node.config["providerid"] != "rack1-01" {
		t.Fatalf("CREATE claimed %v, want rack1-01 (the only small debian12 host)", node.config["providerid"])
	}
	sa, _ := node.config["ssh-auth"].(map[string]any)
	if sa["port"] != float64(srv.Port) {
		t.Errorf("ssh-auth = %v, want port %d", sa, srv.Port)
	}
	if auth == "key" {
		if f, _ := sa["identityfile"].(string); !strings.HasPrefix(f, e.work) {
			t.Errorf("identityfile %q is not under the work dir %s", f, e.work)
		}
	}

	step("CONFIRM", nil)
	keys, _ := node.config["ssh_host_keys"].(map[string]any)
	for typ, blob := range hostKeyBlobs(srv) {
		if keys[typ] != blob {
			t.Errorf("CONFIRM recorded ssh_host_keys.%s = %v, want sshd's key", typ, keys[typ])
		}
	}
	ips, _ := node.config["ipaddresses"].(map[string]any)
	if ips["access_v4"] != srv.Host || node.config["hostname"] != "rack1-01.static.example" {
		t.Errorf("after CONFIRM: ipaddresses %v, hostname %v", ips, node.config["hostname"])
	}

	// The key learned at CONFIRM is the one BOOTSTRAP enforces: with the
	// recorded keys swapped for another host's, BOOTSTRAP refuses to talk
	// (loomd trusts no known_hosts here, only the task's pins).
	impostor := sshdtest.Start(t, sshdtest.Config{})
	tampered := node.task("BOOTSTRAP", map[string]any{"ssh_host_keys": hostKeyBlobs(impostor)})
	bad := e.run(tampered)
	errObj, _ := bad.Result["error"].(map[string]any)
	if bad.status() == 0 || errObj["kind"] != "host_key" {
		t.Fatalf("BOOTSTRAP with tampered ssh_host_keys was not refused as a host-key error:\n%s", bad)
	}
	if _, err := os.Stat(defaultCacheDir); err == nil {
		t.Fatalf("the refused BOOTSTRAP still shipped files to %s", defaultCacheDir)
	}

	boot := step("BOOTSTRAP", nil)
	if boot.Accepted != 1 {
		t.Errorf("BOOTSTRAP used %d SSH connections, want 1", boot.Accepted)
	}
	outDir := t.TempDir()
	install := step("INSTALL", serviceAction("web", "install-web.sh", filepath.Join(outDir, "web.conf")+" v1"))
	if install.Accepted != 1 {
		t.Errorf("INSTALL used %d SSH connections, want 1", install.Accepted)
	}
	data, err := os.ReadFile(filepath.Join(outDir, "web.conf"))
	want := "host=rack1-01.static.example service=web first=web args=v1 user=root\n"
	if err != nil || string(data) != want {
		t.Errorf("INSTALL wrote %q (%v), want %q", data, err, want)
	}
	step("START", serviceAction("web", "start-web.sh", filepath.Join(outDir, "started")))
	if data, err := os.ReadFile(filepath.Join(outDir, "started")); err != nil || string(data) != "started web via START\n" {
		t.Errorf("START wrote %q (%v)", data, err)
	}

	step("DELETE", nil)
	claims, err := os.ReadFile(filepath.Join(e.typeDir("providertypes", "static"), "claims.json"))
	if err != nil || strings.Contains(string(claims), "rack1-01") {
		t.Errorf("after DELETE claims.json holds %q (%v)", claims, err)
	}
	if f, _ := sa["identityfile"].(string); f != "" {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("DELETE left the key file %s", f)
		}
	}

	// Secrets. CREATE's result must carry ssh-auth (Coopr hands it to the
	// automators); nothing else loomd printed may hold a secret.
	if auth == "password" && !strings.Contains(create.Stdout, srv.Password) {
		t.Errorf("CREATE's result lacks the ssh-auth password the automators need:\n%s", create)
	}
	outputs := append([]string(nil), e.output...)
	for i, out := range outputs {
		if out == create.Stdout {
			var m map[string]any
			if err := json.Unmarshal([]byte(out), &m); err == nil {
				if res, ok := m["result"].(map[string]any); ok {
					delete(res, "ssh-auth")
				}
				b, _ := json.Marshal(m)
				outputs[i] = string(b)
			}
		}
	}
	checkNoSecrets(t, "lifecycle ("+auth+")", outputs, map[string]string{
		"SSH credential": secret, "provider secret": providerSecret, "key material": keyLine,
	})
	checkNoLeftovers(t, []string{providerSecret, secret}, e.home, e.work, srv.Dir, impostor.Dir, filepath.Dir(e2eBin))
}

// TestLeftoverCheckFindsSecrets keeps the secret search honest: a planted
// secret is found, and a skipped dir is skipped.
func TestLeftoverCheckFindsSecrets(t *testing.T) {
	root := t.TempDir()
	secret := "planted-" + randToken(t)
	for _, p := range []string{"a/b/task.json", "skipped/task.json"} {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(`{"api_password":"`+secret+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hits := filesContaining(root, []string{secret}, filepath.Join(root, "skipped"))
	if len(hits) != 1 || hits[0] != filepath.Join(root, "a/b/task.json") {
		t.Fatalf("filesContaining found %v", hits)
	}
}
