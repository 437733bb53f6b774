package chefsolo_test

// The chef-solo automator on a real sshd host (internal/sshdtest) with a
// strict fake chef-solo (testdata/fakechef, built statically and installed
// as /opt/chef/bin/chef-solo, where Chef's omnibus packages put it). The
// host's /var/chef, /opt/chef and /var/lib/fakechef are its own
// (Config.PrivateDirs). The resources sit in the work dir as a Coopr
// server's sync leaves them: versions under .resources/, activated by
// relative links.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/sshdtest"
	loomrt "github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

const tenant = "t1"

func pluginDir() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Dir(file)
}

type env struct {
	t    testing.TB
	srv  *sshdtest.Server
	rt   *loomrt.Runtime
	logs *luatest.LogBuffer
	work string // the automator's work dir
	user string
	seq  int
}

var fakechef string // the built fake, shared by the tests of the package

func buildFakechef(t testing.TB) string {
	t.Helper()
	if fakechef != "" {
		return fakechef
	}
	out := filepath.Join(os.TempDir(), fmt.Sprintf("loom-fakechef-%d", os.Getpid()))
	cmd := exec.Command("go", "build", "-o", out, "./testdata/fakechef")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/fakechef: %v\n%s", err, b)
	}
	fakechef = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakechef != "" {
		os.Remove(fakechef)
	}
	os.Exit(code)
}

// newEnv starts the host and a runtime serving the plugin; coopr loads
// Coopr's own chef_solo_automator.json (unchanged, in Coopr's layout)
// with chef-solo.lua and lib/ beside it.
func newEnv(t testing.TB, coopr bool) *env {
	t.Helper()
	srv := sshdtest.Start(t, sshdtest.Config{AllowRoot: true, PrivateDirs: []string{"/var/chef", "/opt/chef", "/var/lib/fakechef"}})
	bin := srv.HostPath("/opt/chef/bin/chef-solo")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	data, err := os.ReadFile(buildFakechef(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	plugins := filepath.Join(root, "plugins")
	if coopr {
		dir := filepath.Join(plugins, "automators", "chef_solo_automator")
		def, err := os.ReadFile(filepath.Join(pluginDir(), "..", "..", "runtime", "testdata", "coopr-definitions", "chef_solo_automator.json"))
		if err != nil {
			t.Fatal(err)
		}
		luatest.WriteFile(t, filepath.Join(dir, "chef_solo_automator.json"), string(def))
		for _, f := range []string{"chef-solo.lua", "lib/chef/attributes.lua"} {
			src, _ := os.ReadFile(filepath.Join(pluginDir(), f))
			luatest.WriteFile(t, filepath.Join(dir, f), string(src))
		}
	} else {
		if err := os.CopyFS(filepath.Join(plugins, "chef-solo"), os.DirFS(pluginDir())); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(filepath.Join(plugins, "chef-solo", "testdata"))
	}
	e := &env{t: t, srv: srv, logs: &luatest.LogBuffer{}, user: srv.NoPasswdUser,
		work: filepath.Join(root, "work", tenant, "automatortypes", "chef-solo")}
	rt, err := loomrt.New(loomrt.Options{PluginsDir: plugins, WorkDir: filepath.Join(root, "work"), Tenant: tenant,
		Bindings: std.New(std.Options{}), Logger: e.logs.Logger(), Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.rt = rt
	t.Cleanup(func() { rt.Close() })
	e.write("keys/id", string(srv.KeyPEM), 0o600)
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), "cluster-Secret") {
			t.Errorf("the cluster config's secret reached the logs")
		}
	})
	return e
}

func (e *env) write(rel, content string, mode os.FileMode) {
	e.t.Helper()
	p := filepath.Join(e.work, rel)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
}

// resource syncs a resource version as loomd's Coopr sync does: the files
// under .resources/<type>/<name>/<version>/<name>, activated by a relative
// link <type>/<name>.
func (e *env) resource(typ, name string, version int, files map[string]string) {
	e.t.Helper()
	for rel, content := range files {
		e.write(filepath.Join(".resources", typ, name, fmt.Sprint(version), name, rel), content, 0o644)
	}
	link := filepath.Join(e.work, typ, name)
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Remove(link)
	if err := os.Symlink(filepath.Join("..", ".resources", typ, name, fmt.Sprint(version), name), link); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) roleFile(name string, version int, content string) {
	e.t.Helper()
	e.write(filepath.Join(".resources", "roles", name, fmt.Sprint(version), name), content, 0o644)
	link := filepath.Join(e.work, "roles", name)
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Remove(link)
	if err := os.Symlink(filepath.Join("..", ".resources", "roles", name, fmt.Sprint(version), name), link); err != nil {
		e.t.Fatal(err)
	}
}

var cluster = map[string]any{
	"hadoop":      map[string]any{"core": map[string]any{"fs": "hdfs://nn:8020", "replication": 3}, "dirs": []any{"/a", "/b"}},
	"db_password": "cluster-Secret-value",
}

func (e *env) run(name string, fields map[string]any) *loomrt.Result {
	e.t.Helper()
	e.seq++
	keys := map[string]any{}
	for typ, k := range e.srv.HostKeys {
		keys[typ] = base64.StdEncoding.EncodeToString(k.Marshal())
	}
	cfg := map[string]any{
		"cluster": cluster, "hostname": "web1.example.com", "services": []any{"base", "web"},
		"nodes":         map[string]any{"node-1": map[string]any{"hostname": "web1.example.com", "nodenum": 1000}},
		"ipaddresses":   map[string]any{"access_v4": e.srv.Host, "bind_v4": e.srv.Host},
		"ssh-auth":      map[string]any{"user": e.user, "identityfile": "keys/id", "port": e.srv.Port},
		"ssh_host_keys": keys, "automators": []any{"chef-solo"},
	}
	if fields != nil {
		cfg["service"] = map[string]any{"name": "web", "action": map[string]any{"type": "chef-solo", "fields": fields}}
	}
	b, _ := json.Marshal(map[string]any{"taskId": fmt.Sprintf("00000009-001-%03d", e.seq), "jobId": "00000009-001",
		"clusterId": "00000009", "nodeId": "node-1", "taskName": name, "tenantId": tenant, "config": cfg})
	res, err := e.rt.Run(context.Background(), b)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func must(t testing.TB, res *loomrt.Result) {
	t.Helper()
	if res.Status != 0 {
		t.Fatalf("status %d: %s\nstdout: %s\nstderr: %s", res.Status, res.Message, res.Stdout, res.Stderr)
	}
}

type fakeRun struct {
	Argv       []string       `json:"argv"`
	UID        int            `json:"uid"`
	RunList    []string       `json:"run_list"`
	Recipes    []string       `json:"recipes"`
	Attributes map[string]any `json:"attributes"`
}

func (e *env) runs() []fakeRun {
	e.t.Helper()
	f, err := os.Open(e.srv.HostPath("/var/lib/fakechef/runs.jsonl"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []fakeRun
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r fakeRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func (e *env) standardResources() {
	e.resource("cookbooks", "hello", 1, map[string]string{
		"metadata.rb":        "name 'hello'\nversion '1.0.0'\ndepends 'base'\n",
		"recipes/default.rb": "file '/tmp/hello' do\n  content node['hello']['greeting']\nend\n",
		"recipes/extra.rb":   "log 'extra'\n",
	})
	e.resource("cookbooks", "base", 3, map[string]string{"metadata.json": `{"name":"base","version":"3.0.0"}`,
		"recipes/default.rb": "package 'curl'\n"})
	e.resource("data_bags", "users", 1, map[string]string{"alice.json": `{"id":"alice","shell":"/bin/bash"}`})
	e.roleFile("web.json", 2, `{"name":"web","json_class":"Chef::Role","chef_type":"role","run_list":["recipe[base]","recipe[hello]"]}`)
}

func TestChefSoloOnARealHost(t *testing.T) {
	e := newEnv(t, false)
	e.standardResources()

	boot := e.run("BOOTSTRAP", nil)
	must(t, boot)
	if !strings.Contains(boot.Stdout, "shipped cookbooks, data_bags, roles") {
		t.Fatalf("BOOTSTRAP: %s", boot.Stdout)
	}
	for _, p := range []string{"/var/chef/cookbooks/hello/recipes/extra.rb", "/var/chef/cookbooks/base/metadata.json",
		"/var/chef/data_bags/users/alice.json", "/var/chef/roles/web.json", "/var/chef/loom-solo.rb"} {
		if _, err := os.Stat(e.srv.HostPath(p)); err != nil {
			t.Fatalf("%s not on the node after BOOTSTRAP: %v", p, err)
		}
	}
	// Once per host: a second BOOTSTRAP sends nothing (the node's files
	// are the same files).
	ino := func(p string) uint64 {
		st, err := os.Stat(e.srv.HostPath(p))
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	before := ino("/var/chef/cookbooks/hello/recipes/extra.rb")
	again := e.run("BOOTSTRAP", nil)
	must(t, again)
	if !strings.Contains(again.Stdout, "resources current") || ino("/var/chef/cookbooks/hello/recipes/extra.rb") != before {
		t.Fatalf("the second BOOTSTRAP shipped again: %s", again.Stdout)
	}
	// A node whose copy changed by hand gets the resources again.
	sentinel := e.srv.HostPath("/var/chef/cookbooks/hello/only-on-the-node")
	os.WriteFile(sentinel, nil, 0o644)
	fixed := e.run("BOOTSTRAP", nil)
	must(t, fixed)
	if !strings.Contains(fixed.Stdout, "shipped") {
		t.Fatalf("a changed node copy was not shipped again: %s", fixed.Stdout)
	}
	if _, err := os.Stat(sentinel); err == nil {
		t.Fatalf("the node's own file survived a new shipping")
	}

	// A service action: chef-solo as root with -c, -j, -o, and Coopr's attributes.
	res := e.run("INSTALL", map[string]any{"run_list": "role[web], recipe[hello::extra]", "log_level": "info",
		"json_attributes": `{"hadoop": {"core": {"replication": 1}, "dirs": ["/b", "/c"]}, "hello": {"greeting": "hi"}}`})
	must(t, res)
	if !strings.Contains(res.Stdout, "Chef Client finished") {
		t.Fatalf("INSTALL stdout: %s", res.Stdout)
	}
	runs := e.runs()
	if len(runs) != 1 {
		t.Fatalf("%d chef-solo runs, want 1", len(runs))
	}
	r := runs[0]
	if r.UID != 0 || !reflect.DeepEqual(r.RunList, []string{"role[web]", "recipe[hello::extra]"}) ||
		!reflect.DeepEqual(r.Recipes, []string{"base::default", "hello::default", "hello::extra"}) {
		t.Fatalf("run %+v", r)
	}
	for _, want := range [][]string{{"--no-color"}, {"-c", "/var/chef/loom-solo.rb"}, {"-l", "info"}, {"-o", "role[web],recipe[hello::extra]"}} {
		if !containsInOrder(r.Argv, want) {
			t.Fatalf("argv %v lacks %v", r.Argv, want)
		}
	}
	merged := map[string]any{"core": map[string]any{"fs": "hdfs://nn:8020", "replication": float64(1)},
		"dirs": []any{"/a", "/b", "/c"}}
	a := r.Attributes
	nodes := map[string]any{"node-1": map[string]any{"hostname": "web1.example.com", "nodenum": float64(1000)}}
	wantCluster := map[string]any{"hadoop": merged, "hello": map[string]any{"greeting": "hi"},
		"db_password": "cluster-Secret-value", "nodes": nodes}
	want := map[string]any{"hadoop": merged, "hello": map[string]any{"greeting": "hi"}, "db_password": "cluster-Secret-value",
		"nodes": nodes, "coopr": map[string]any{"cluster": wantCluster, "services": []any{"base", "web"},
			"hostname": "web1.example.com", "clusterId": "00000009",
			"ipaddresses": map[string]any{"access_v4": e.srv.Host, "bind_v4": e.srv.Host}}}
	if !reflect.DeepEqual(a, want) {
		got, _ := json.MarshalIndent(a, "", " ")
		w, _ := json.MarshalIndent(want, "", " ")
		t.Fatalf("attributes\n%s\nwant\n%s", got, w)
	}
	// The attributes file is gone from the node.
	if left, _ := os.ReadDir(e.srv.HostPath("/var/chef/.loom-run")); len(left) != 0 {
		t.Fatalf("left in /var/chef/.loom-run: %v", left)
	}

	// A new version of a cookbook, another removed: shipped again.
	e.resource("cookbooks", "hello", 2, map[string]string{"metadata.rb": "name 'hello'\nversion '2.0.0'\n",
		"recipes/default.rb": "log 'v2'\n"})
	os.Remove(filepath.Join(e.work, "cookbooks", "base"))
	e.roleFile("web.json", 3, `{"name":"web","json_class":"Chef::Role","chef_type":"role","run_list":["recipe[hello]"]}`)
	boot = e.run("BOOTSTRAP", nil)
	must(t, boot)
	if !strings.Contains(boot.Stdout, "shipped") {
		t.Fatalf("BOOTSTRAP after a change: %s", boot.Stdout)
	}
	if _, err := os.Stat(e.srv.HostPath("/var/chef/cookbooks/base")); err == nil {
		t.Fatalf("a removed cookbook is still on the node")
	}
	if b, _ := os.ReadFile(e.srv.HostPath("/var/chef/cookbooks/hello/recipes/default.rb")); string(b) != "log 'v2'\n" {
		t.Fatalf("hello's recipe on the node: %q", b)
	}
	must(t, e.run("CONFIGURE", map[string]any{"run_list": "role[web]"}))

	// A failing recipe: chef's FATAL line in the message, its output in the result.
	e.resource("cookbooks", "broken", 1, map[string]string{"metadata.rb": "name 'broken'\n",
		"recipes/default.rb": "raise \"the database is not reachable\"\n"})
	must(t, e.run("BOOTSTRAP", nil))
	bad := e.run("START", map[string]any{"run_list": "recipe[broken]"})
	if bad.Status != 1 || !strings.Contains(bad.Message, "FATAL: RuntimeError: the database is not reachable") ||
		!strings.Contains(bad.Stdout, "Recipe Compile Error in broken::default") {
		t.Fatalf("a failing recipe: %d %s\n%s", bad.Status, bad.Message, bad.Stdout)
	}
	// A cookbook the node does not have: Chef's own message.
	missing := e.run("START", map[string]any{"run_list": "recipe[nope]"})
	if missing.Status != 1 || !strings.Contains(missing.Message, "CookbookNotFound: Cookbook nope not found") {
		t.Fatalf("a missing cookbook: %d %s", missing.Status, missing.Message)
	}
	if left, _ := os.ReadDir(e.srv.HostPath("/var/chef/.loom-run")); len(left) != 0 {
		t.Fatalf("failed runs left attributes files: %v", left)
	}
}

// TestChefSoloActionShipsWhatBootstrapDidNot: a service action with a
// chef_dir BOOTSTRAP never shipped to (or on a node wiped since) ships the
// resources, then runs.
func TestChefSoloActionShipsWhatBootstrapDidNot(t *testing.T) {
	e := newEnv(t, false)
	e.standardResources()
	must(t, e.run("INITIALIZE", map[string]any{"run_list": "recipe[hello]", "chef_dir": "/var/chef/app"}))
	runs := e.runs()
	if len(runs) != 1 || !containsInOrder(runs[0].Argv, []string{"-c", "/var/chef/app/loom-solo.rb"}) {
		t.Fatalf("runs %+v", runs)
	}
}

// TestChefSoloCooprDefinition: Coopr's chef_solo_automator.json, unchanged,
// with chef-solo.lua: Coopr's two fields, root login as Coopr did.
func TestChefSoloCooprDefinition(t *testing.T) {
	e := newEnv(t, true)
	e.user = "root"
	e.standardResources()
	must(t, e.run("BOOTSTRAP", nil))
	must(t, e.run("INSTALL", map[string]any{"run_list": "recipe[hello]", "json_attributes": `{"hello":{"greeting":"coopr"}}`}))
	runs := e.runs()
	if len(runs) != 1 || runs[0].Attributes["hello"].(map[string]any)["greeting"] != "coopr" {
		t.Fatalf("runs %+v", runs)
	}
	bad := e.run("INSTALL", map[string]any{"json_attributes": "{}"})
	if bad.Status == 0 || !strings.Contains(bad.Message, "missing required admin fields for chef-solo: run_list") {
		t.Fatalf("INSTALL without run_list: %d %s", bad.Status, bad.Message)
	}
}

func containsInOrder(argv, want []string) bool {
	for i := 0; i+len(want) <= len(argv); i++ {
		if reflect.DeepEqual(argv[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

// TestFakeChefRefusesWhatChefSoloWould proves the fake can fail: called
// directly (as root) with what chef-solo refuses, it exits non-zero with
// the reason.
func TestFakeChefRefusesWhatChefSoloWould(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("fakechef wants root, as chef-solo runs under the automator")
	}
	bin := buildFakechef(t)
	dir := t.TempDir()
	for _, d := range []string{"cookbooks/hello/recipes", "roles", "data_bags/users"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	os.WriteFile(filepath.Join(dir, "cookbooks/hello/metadata.rb"), []byte("name 'hello'\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cookbooks/hello/recipes/default.rb"), []byte("log 'hi'\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "roles/web.json"), []byte(`{"name":"web","run_list":["recipe[hello]"]}`), 0o644)
	solo := filepath.Join(dir, "solo.rb")
	os.WriteFile(solo, []byte(fmt.Sprintf("cookbook_path [%q]\ndata_bag_path %q\nrole_path %q\n",
		dir+"/cookbooks", dir+"/data_bags", dir+"/roles")), 0o644)
	attrs := filepath.Join(dir, "a.json")
	os.WriteFile(attrs, []byte(`{"x":1}`), 0o600)
	loose := filepath.Join(dir, "loose.json")
	os.WriteFile(loose, []byte(`{"x":1}`), 0o644)
	notObject := filepath.Join(dir, "list.json")
	os.WriteFile(notObject, []byte(`[1]`), 0o600)
	typo := filepath.Join(dir, "typo.rb")
	os.WriteFile(typo, []byte("cookbok_path \"/x\"\n"), 0o644)
	t.Setenv("FAKECHEF_RUNS", filepath.Join(dir, "runs.jsonl"))
	ok := []string{"--no-color", "-c", solo, "-j", attrs, "-o", "role[web]"}
	if out, err := exec.Command(bin, ok...).CombinedOutput(); err != nil {
		t.Fatalf("a good run failed: %v\n%s", err, out)
	}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"unknown option":      {[]string{"--no-colour", "-c", solo, "-j", attrs, "-o", "hello"}, "invalid option: --no-colour"},
		"no config":           {[]string{"-j", attrs, "-o", "hello"}, "no -c"},
		"config typo":         {[]string{"-c", typo, "-j", attrs, "-o", "hello"}, "unknown config line"},
		"attributes readable": {[]string{"-c", solo, "-j", loose, "-o", "hello"}, "readable by root only"},
		"attributes a list":   {[]string{"-c", solo, "-j", notObject, "-o", "hello"}, "ParseError"},
		"bad item":            {[]string{"-c", solo, "-j", attrs, "-o", "recipe[hello"}, "Unable to create Chef::RunList::RunListItem"},
		"missing role":        {[]string{"-c", solo, "-j", attrs, "-o", "role[db]"}, "RoleNotFound"},
		"missing recipe":      {[]string{"-c", solo, "-j", attrs, "-o", "recipe[hello::nope]"}, "RecipeNotFound"},
		"bad log level":       {[]string{"-c", solo, "-j", attrs, "-o", "hello", "-l", "verbose"}, "invalid argument: -l verbose"},
	} {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: err %v, output %q, want %q", name, err, out, c.want)
		}
	}
}
