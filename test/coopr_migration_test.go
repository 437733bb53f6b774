package test

// The migration test of docs/coopr.md (issue 14, item 4): a Coopr
// installation moved to loomd as the guide says, with Coopr's own files
// unchanged (testdata/coopr/NOTICE.md lists them): its plugin definitions
// in its folder layout, its shell automator's scripts and archive synced
// by the server as resources, its rspec task fixture, and Coopr-format
// tasks issued by a Coopr server (coopfake) to `loomd serve
// --coopr-server` over TLS with Coopr's client certificate file, against
// a real sshd: a new node's whole life, and a
// node created by the Ruby provisioner (its ssh-auth naming Coopr's work
// dir) continued by loomd.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr/coopfake"
	"github.com/loomrt/loom/internal/sshdtest"
)

// cooprFile reads a file of Coopr's kept under testdata.
func cooprFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cooprArchive is a resource of the archive format as Coopr's uploader
// built it: a tar.gz whose top-level folder is the resource's name.
func cooprArchive(t *testing.T, name string, files map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: name + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	for n, data := range files {
		_ = tw.WriteHeader(&tar.Header{Name: name + "/" + n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))})
		_, _ = tw.Write(data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCooprMigration(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	cleanCacheDir(t)
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	const tenant = "7f0e4a52-migrated"

	// Coopr's plugin folders, in Coopr's layout (<group>/<plugin>/x.json),
	// with Coopr's definitions byte for byte. The shell automator's Ruby
	// class is replaced by loomd's Lua one (same classname); the fog
	// classes by the test's stand-in.
	shellDir := filepath.Join(plugins, "automators", "shell_automator")
	fogDir := filepath.Join(plugins, "providers", "fog_provider")
	writeFile(t, filepath.Join(shellDir, "shell_automator.json"), string(cooprFile(t, "runtime/testdata/coopr-definitions/shell_automator.json")))
	writeFile(t, filepath.Join(shellDir, "shell.lua"), string(cooprFile(t, "plugins/shell/shell.lua")))
	if err := os.CopyFS(filepath.Join(shellDir, "lib"), os.DirFS(filepath.Join(repoRoot(), "plugins", "shell", "lib"))); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(fogDir, "fog_provider.json"), string(cooprFile(t, "runtime/testdata/coopr-definitions/fog_provider.json")))
	writeFile(t, filepath.Join(fogDir, "fog_provider.lua"), string(cooprFile(t, "test/testdata/coopr/fog_provider.lua")))

	// plugins check accepts what a Coopr server accepted.
	if r := loomd(t, "", "plugins", "check", plugins); r.code != 0 || !strings.Contains(r.stdout, "7 plugin types OK") {
		t.Fatalf("plugins check on Coopr's definitions: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	// Coopr's rspec fixture (spec/task.json), unchanged but for the task
	// name, as provider_spec uses it: the flat ipaddress, nodenum as a
	// string, a lower-case taskName, a DELETE of an unknown instance.
	fixture := strings.Replace(string(cooprFile(t, "runtime/testdata/coopr-spec-task.json")), "BOOTSTRAP", "delete", 1)
	if r := loomd(t, fixture, "run", "-", "--plugins", plugins, "--work-dir", t.TempDir(), "--tenant", tenant); r.code != 0 ||
		gjson(t, []byte(r.stdout), "status") != "0" || gjson(t, []byte(r.stdout), "taskId") != "00000001-001-0001" {
		t.Fatalf("Coopr's spec/task.json as delete: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// The cloud the fog stand-in serves: the test's sshd.
	rsa := base64.StdEncoding.EncodeToString(srv.HostKeys["rsa"].Marshal())
	cloud, _ := json.Marshal(map[string]any{"machines": []any{map[string]any{
		"id": "i-0123456789abcdef0", "address": srv.Host, "port": srv.Port, "user": srv.NoPasswdUser, "rsa": rsa}}})
	writeFile(t, filepath.Join(root, "work", tenant, "providertypes", "aws", "cloud.json"), string(cloud))

	// The server verifies provisioners by client certificate; loomd gets
	// Coopr's trust.cert.path file (certificate and key in one PEM) as it
	// is, and the CA that signs the server's certificate.
	ca, err := coopfake.NewCA("coopr-migration-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := ca.Issue("loom-migrated", false)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "tls", "ca.pem"), string(ca.PEM))
	writeFile(t, filepath.Join(root, "tls", "provisioner.pem"), string(clientCert)+string(clientKey))
	coopr, err := coopfake.StartRequiringClientCerts(ca)
	if err != nil {
		t.Fatal(err)
	}
	defer coopr.Close()
	// The resources Coopr's load-bundled-data.sh uploaded for the shell
	// automator, and the AWS key pair's private key, as the server serves
	// them to a provisioner.
	script := func(name string) []byte {
		return cooprFile(t, "test/testdata/coopr/shell_automator/resources/scripts/"+name)
	}
	coopr.SetResource(tenant, "automatortypes", "shell", "scripts", "json_substitution_example.sh", 1, script("json_substitution_example.sh"))
	coopr.SetResource(tenant, "automatortypes", "shell", "scripts", "coopr_service_manager.sh", 1, script("coopr_service_manager.sh"))
	coopr.SetResource(tenant, "automatortypes", "shell", "scripts", "site_config.sh", 3, []byte(cooprStyleScript))
	coopr.SetResource(tenant, "automatortypes", "shell", "archives", "example", 1, cooprArchive(t, "example",
		map[string][]byte{"readme.txt": cooprFile(t, "test/testdata/coopr/shell_automator/resources/archives/example/readme.txt")}))
	coopr.SetResource(tenant, "providertypes", "aws", "ssh_keys", "coopr.pem", 2, srv.KeyPEM)
	active := func(format, perms string, entries ...any) map[string]any {
		m := map[string]any{"format": format, "active": entries}
		if perms != "" {
			m["permissions"] = perms
		}
		return m
	}
	version := func(name string, v int) any { return map[string]any{"name": name, "version": v} }
	resources := map[string]any{
		"automatortypes": map[string]any{"shell": map[string]any{
			"scripts": active("file", "0755", version("json_substitution_example.sh", 1), version("coopr_service_manager.sh", 1),
				version("site_config.sh", 3)),
			"archives": active("archive", "", version("example", 1)),
		}},
		"providertypes": map[string]any{"aws": map[string]any{"ssh_keys": active("file", "0400", version("coopr.pem", 2))}},
	}

	apiAddr := freeAddr(t)
	d := startDaemon(t, root, "loomd.log", nil, "--coopr-server", coopr.URL(), "--coopr-listen", apiAddr,
		"--coopr-poll", "50ms", "--tenant", "default",
		"--coopr-ca", filepath.Join(root, "tls", "ca.pem"), "--coopr-cert", filepath.Join(root, "tls", "provisioner.pem"))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := coopfake.PutTenant(ctx, "http://"+apiAddr, tenant, 1, resources); err != nil {
		t.Fatalf("PUT tenant: %v\n%s", err, d.logTail())
	}
	// The server learned every type from loomd's registration, with the
	// definition's object as Coopr's --register sent it.
	for _, key := range []string{"automatortypes/shell", "providertypes/aws", "providertypes/rackspace"} {
		d.waitFor("the server to know plugin type "+key, func() bool { _, ok := coopr.Plugin(key); return ok })
	}

	run := func(node *cooprNode, name string, extra map[string]any) coopfake.Finish {
		t.Helper()
		task := node.task(name, extra)
		b, _ := json.Marshal(task)
		if err := coopr.Enqueue(tenant, b); err != nil {
			t.Fatal(err)
		}
		f, err := coopr.WaitFinished(ctx, task["taskId"].(string))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, d.logTail())
		}
		body, _ := json.Marshal(f.Body)
		r := loomdResult{}
		_ = json.Unmarshal(body, &r.Result)
		node.apply(r)
		return f
	}
	ok := func(what string, f coopfake.Finish) {
		t.Helper()
		if f.Status != 0 {
			b, _ := json.Marshal(f.Body)
			t.Fatalf("%s failed: %s\n%s", what, b, d.logTail())
		}
	}
	stdout := func(f coopfake.Finish) string { s, _ := f.Body["stdout"].(string); return s }
	stderr := func(f coopfake.Finish) string { s, _ := f.Body["stderr"].(string); return s }
	out := t.TempDir()
	shell := func(script, args string) map[string]any {
		return map[string]any{"service": map[string]any{"name": "base", "action": map[string]any{"type": "shell",
			"fields": map[string]any{"script": script, "args": args}}}}
	}

	// A new node, its whole life on Coopr's definitions.
	cfg := cooprTaskConfig("aws", map[string]any{"api_user": "AKIAEXAMPLE", "api_password": "secret-" + randToken(t),
		"aws_region": "us-east-1", "ssh_keypair": "coopr", "ssh_key_resource": "coopr.pem", "security_groups": "default"})
	node := newCooprNode("00000070", "2b1e5f9c-node-1", cfg)
	f := run(node, "CREATE", nil)
	ok("CREATE", f)
	if node.config["providerid"] != "i-0123456789abcdef0" {
		t.Fatalf("CREATE result: %+v", f.Body)
	}
	ok("CONFIRM", run(node, "CONFIRM", nil))
	ok("BOOTSTRAP", run(node, "BOOTSTRAP", nil))
	// Coopr's example script, used as its header says: keys as regular
	// expressions (taskId, config/automators), an array, a miss.
	f = run(node, "INSTALL", shell("json_substitution_example.sh", "taskId config/automators config/nodenum nosuchkey"))
	ok("INSTALL json_substitution_example.sh", f)
	for _, want := range []string{"--- example json parsing ---", "json lookup: taskId --> 00000070-001-004",
		"json lookup: config/automators --> shell", "json lookup: config/nodenum --> 1000"} {
		if !strings.Contains(stdout(f), want) {
			t.Errorf("json_substitution_example.sh printed %q, lacking %q", stdout(f), want)
		}
	}
	if strings.Contains(stdout(f), "nosuchkey") {
		t.Errorf("a missing key printed: %q", stdout(f))
	}
	ok("CONFIGURE site_config.sh", run(node, "CONFIGURE", shell("site_config.sh", filepath.Join(out, "node1"))))
	want := "host=web00000070-1000.example.com service=base ip=" + srv.Host + " taskjson=yes user=root\n" +
		"Example shell provisioner named-archive data.\n"
	if data, err := os.ReadFile(filepath.Join(out, "node1")); err != nil || !strings.HasPrefix(string(data), want) {
		t.Errorf("site_config.sh wrote %q (%v), want it to start with %q", data, err, want)
	}
	// Coopr's service manager, for a service the host lacks: the failure
	// reaches the server with the script's own words.
	f = run(node, "START", shell("coopr_service_manager.sh", "loom-no-such-service status"))
	if f.Status == 0 || !strings.Contains(stdout(f)+stderr(f), "loom-no-such-service") {
		t.Errorf("coopr_service_manager.sh for a missing service: status %d, stdout %q, stderr %q", f.Status, stdout(f), stderr(f))
	}
	ok("DELETE", run(node, "DELETE", nil))
	// The server retries a DELETE it did not hear back from: still 0.
	ok("DELETE again", run(node, "DELETE", nil))

	// A node the Ruby provisioner created before the move: its results
	// name Coopr's work dir (an identityfile on the old provisioner host),
	// and loomd continues its life with them as they are.
	old := cooprTaskConfig("aws", map[string]any{"api_user": "AKIAEXAMPLE", "api_password": "x", "aws_region": "us-east-1",
		"ssh_keypair": "coopr", "ssh_key_resource": "coopr.pem", "security_groups": "default"})
	old["hostname"] = "web00000071-1000.example.com"
	old["ipaddresses"] = map[string]any{"access_v4": srv.Host, "bind_v4": srv.Host}
	old["providerid"] = "i-0123456789abcdef0"
	old["ssh_host_keys"] = map[string]any{"rsa": rsa}
	old["ssh-auth"] = map[string]any{"user": srv.NoPasswdUser, "port": srv.Port,
		"identityfile": "/var/coopr/data/provisioner/work/" + tenant + "/providertypes/aws/ssh_keys/coopr.pem"}
	oldNode := newCooprNode("00000071", "9d4c2a10-node-ruby", old)
	oldNode.seq = 10 // the Ruby provisioner ran its first tasks
	ok("BOOTSTRAP (Ruby-era node)", run(oldNode, "BOOTSTRAP", nil))
	ok("CONFIGURE (Ruby-era node)", run(oldNode, "CONFIGURE", shell("site_config.sh", filepath.Join(out, "node2"))))
	if data, _ := os.ReadFile(filepath.Join(out, "node2")); !strings.HasPrefix(string(data), "host=web00000071-1000.example.com ") {
		t.Errorf("site_config.sh on the Ruby-era node wrote %q", data)
	}

	if !strings.Contains(strings.Join(coopr.Log(), "\n"), "POST /v2/tasks/finish -> 200 client=loom-migrated") {
		t.Errorf("finishes did not come over TLS with the client certificate:\n%s", strings.Join(coopr.Log(), "\n"))
	}
	// The daemon's /metrics counts the Coopr loops.
	if code, body := d.call("GET", "/metrics", ""); code != 200 ||
		!strings.Contains(string(body), `loom_coopr_tasks_total{status="failed",tenant="`+tenant+`"} 1`) ||
		!strings.Contains(string(body), `loom_coopr_finishes_total{outcome="delivered",tenant="`+tenant+`"}`) ||
		!strings.Contains(string(body), "loom_coopr_registered 1") {
		t.Errorf("/metrics (%d) lacks the Coopr loops' counts:\n%s", code, body)
	}
	if n := coopr.Refused(400) + coopr.Refused(417); n != 0 {
		t.Errorf("the server refused %d of loomd's requests:\n%s", n, strings.Join(coopr.Log(), "\n"))
	}
	if code := d.term(); code != 0 {
		t.Errorf("loomd exit %d after SIGTERM\n%s", code, d.logTail())
	}
}

// cooprStyleScript is a script as Coopr users wrote them for the shell
// automator: bash, coopr_lookup_key with regular-expression keys, $TASKJSON,
// the archive at ../archives/<name>, run through sudo -E.
const cooprStyleScript = `#!/bin/bash
out=$1
host=$(coopr_lookup_key '^/config/hostname$')
svc=$(coopr_lookup_key service/name)
ip=$(coopr_lookup_key ipaddresses/access_v4)
[ -f "$TASKJSON" ] && tj=yes || tj=no
echo "host=$host service=$svc ip=$ip taskjson=$tj user=$(id -un)" > "$out"
cat ../archives/example/readme.txt >> "$out"
`

// cooprTaskConfig is a task's config as a Coopr server builds it for a
// one-node cluster on a provider of the given type (reference §3.2).
func cooprTaskConfig(providerType string, fields map[string]any) map[string]any {
	return map[string]any{
		"cluster":      map[string]any{"hadoop": map[string]any{"core_site": map[string]any{"fs.defaultFS": "hdfs://%host.service.hadoop-hdfs-namenode%"}}},
		"hostname":     fmt.Sprintf("web%s-1000.example.com", "00000070"),
		"ipaddresses":  map[string]any{},
		"nodenum":      1000,
		"sshuser":      "root",
		"hardwaretype": "medium",
		"imagetype":    "centos6",
		"flavor":       "m3.medium",
		"image":        "ami-0a1b2c3d",
		"automators":   []any{"shell"},
		"services":     []any{"base"},
		"provider": map[string]any{"name": providerType + "-us-east-1", "description": "migrated provider",
			"providertype": providerType, "provisioner": fields},
		"nodes": map[string]any{},
	}
}
