package test

// Issue 22's "Done when": a Coopr cluster template in Coopr's own JSON,
// whose hardware and image types map flavors and images for the
// openstack, aws and google providers and whose services run the chef-solo
// and docker automators, comes up through `loomd apply --template` against
// each fake cloud in turn (--provider os-lab, aws-lab, gce-lab). The clouds' machines are real sshd hosts on 127.0.0.2,
// 127.0.0.3 and 127.0.0.4 (one port, one key pair, as a cloud's machines),
// each with private /var/chef, /opt/chef and podman state, so the
// automators really run there: chef-solo (the strict fake of
// plugins/chef-solo/testdata/fakechef, which checks its command line, solo.rb
// and every run list item, and records Coopr's attributes) and containers
// through real podman.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/internal/cloudfake/ec2fake"
	"github.com/loomrt/loom/internal/cloudfake/gcefake"
	"github.com/loomrt/loom/internal/cloudfake/openstackfake"
	"github.com/loomrt/loom/internal/podmantest"
	"github.com/loomrt/loom/internal/sshdtest"
)

const webImage = "localhost/loomtest/webapp:1"

// cloudHosts are the machines the fake clouds hand out.
type cloudHosts struct {
	addrs   []string
	port    int // sshd's port on every host
	appPort int // the port the web containers publish on their host's address
	servers []*sshdtest.Server
	pods    []*podmantest.Host
	keyPEM  []byte
}

// startCloudHosts starts n sshd hosts on 127.0.0.2.. with one user key,
// each a podman host with the web image and a chef-solo (the strict fake).
func startCloudHosts(t *testing.T, n int) *cloudHosts {
	t.Helper()
	podmantest.Need(t)
	h := &cloudHosts{}
	for i := 0; i < n; i++ {
		h.addrs = append(h.addrs, fmt.Sprintf("127.0.0.%d", i+2))
	}
	var err error
	if h.port, err = sshdtest.FreePort(h.addrs...); err != nil {
		t.Fatal(err)
	}
	if h.appPort, err = sshdtest.FreePort(h.addrs...); err != nil {
		t.Fatal(err)
	}
	root := repoRoot()
	chef := podmantest.BuildStatic(t, root, "./plugins/chef-solo/testdata/fakechef")
	webTar := podmantest.RootfsTar(t, map[string][]byte{"webapp": podmantest.BuildStatic(t, root, "./plugins/docker/testdata/webapp")})
	dirs := append(slices.Clone(podmantest.PrivateDirs), "/var/chef", "/opt/chef", "/var/lib/fakechef")
	for _, a := range h.addrs {
		srv := sshdtest.Start(t, sshdtest.Config{Host: a, Port: h.port, UserKeyPEM: h.keyPEM, PrivateDirs: dirs})
		if h.keyPEM == nil {
			h.keyPEM = srv.KeyPEM
		}
		pod := podmantest.Setup(t, srv)
		pod.Import(webTar, webImage, `ENTRYPOINT ["/webapp"]`)
		bin := srv.HostPath("/opt/chef/bin/chef-solo")
		os.MkdirAll(filepath.Dir(bin), 0o755)
		if err := os.WriteFile(bin, chef, 0o755); err != nil {
			t.Fatal(err)
		}
		h.servers = append(h.servers, srv)
		h.pods = append(h.pods, pod)
	}
	return h
}

// byAddr is the host with the given address.
func (h *cloudHosts) byAddr(addr string) *sshdtest.Server {
	for _, s := range h.servers {
		if s.Host == addr {
			return s
		}
	}
	return nil
}

type chefRun struct {
	RunList    []string       `json:"run_list"`
	Recipes    []string       `json:"recipes"`
	Attributes map[string]any `json:"attributes"`
}

// chefRuns reads the fake chef-solo's record of a host.
func chefRuns(t *testing.T, srv *sshdtest.Server) []chefRun {
	t.Helper()
	data, err := os.ReadFile(srv.HostPath("/var/lib/fakechef/runs.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []chefRun
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r chefRun
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: %v", srv.Host, err)
		}
		out = append(out, r)
	}
	return out
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, string(b))
}

// writeStackCatalog writes the Coopr catalog: the web-stack template,
// its services (chef-solo and docker actions), hardware and image types
// mapped for os-lab, aws-lab and gce-lab, and the providers given.
func writeStackCatalog(t *testing.T, dir string, h *cloudHosts, providers map[string]map[string]any) {
	t.Helper()
	for name, p := range providers {
		writeJSON(t, filepath.Join(dir, "providers", name+".json"), p)
	}
	writeJSON(t, filepath.Join(dir, "hardwaretypes", "small.json"), map[string]any{"name": "small", "description": "2 GB",
		"providermap": map[string]any{"os-lab": map[string]any{"flavor": "m1.small"}, "aws-lab": map[string]any{"flavor": "t3.small"},
			"gce-lab": map[string]any{"flavor": "e2-small"}}})
	writeJSON(t, filepath.Join(dir, "imagetypes", "debian12.json"), map[string]any{"name": "debian12", "description": "Debian 12",
		"providermap": map[string]any{
			"os-lab":  map[string]any{"image": "debian-12", "sshuser": sshdtest.NoPasswdUser},
			"aws-lab": map[string]any{"image": "ami-0123456789abcdef0", "sshuser": sshdtest.NoPasswdUser},
			"gce-lab": map[string]any{"image": "projects/debian-cloud/global/images/family/debian-12", "sshuser": sshdtest.NoPasswdUser}}})
	chef := func(runList string, attrs map[string]any) map[string]any {
		f := map[string]any{"run_list": runList}
		if attrs != nil {
			b, _ := json.Marshal(attrs)
			f["json_attributes"] = string(b) // as Coopr's UI stored it: JSON in a string
		}
		return map[string]any{"type": "chef-solo", "fields": f}
	}
	docker := map[string]any{"type": "docker", "fields": map[string]any{
		"image_name": webImage, "pull": "missing", "sudo": "true", "stop_timeout": "2",
		"publish_ports":         fmt.Sprintf("%%ip.bind_v4.self%%:%d:8080", h.appPort),
		"environment_variables": "GREETING=hello-from-%host.self%,DB=%ip.bind_v4.service.db%",
		"command":               "--role web"}}
	service := func(name string, installRequires, runtimeRequires []string, actions map[string]any) map[string]any {
		return map[string]any{"name": name, "description": name, "dependencies": map[string]any{"provides": []any{}, "conflicts": []any{},
			"install": map[string]any{"requires": installRequires, "uses": []any{}},
			"runtime": map[string]any{"requires": runtimeRequires, "uses": []any{}}},
			"provisioner": map[string]any{"actions": actions}}
	}
	writeJSON(t, filepath.Join(dir, "services", "base.json"), service("base", []string{}, []string{}, map[string]any{
		"install":   chef("recipe[base]", nil),
		"configure": chef("recipe[base::configure]", map[string]any{"base": map[string]any{"motd": "node %host.self%"}}),
	}))
	writeJSON(t, filepath.Join(dir, "services", "db.json"), service("db", []string{"base"}, []string{}, map[string]any{
		"install":   chef("role[db]", nil),
		"configure": chef("recipe[db::configure]", map[string]any{"db": map[string]any{"clients": "%join(ip.bind_v4.service.web,' ')%"}}),
		"start":     chef("recipe[db::start]", nil),
		"stop":      chef("recipe[db::stop]", nil),
	}))
	writeJSON(t, filepath.Join(dir, "services", "web.json"), service("web", []string{"base"}, []string{"db"}, map[string]any{
		"install": docker, "start": docker, "stop": docker, "remove": docker,
	}))
	writeJSON(t, filepath.Join(dir, "clustertemplates", "web-stack.json"), map[string]any{
		"name": "web-stack", "description": "a database and web servers in containers",
		"defaults": map[string]any{"services": []string{"base", "db", "web"}, "provider": "os-lab", "hardwaretype": "small",
			"imagetype": "debian12", "dnsSuffix": "example.com",
			"config": map[string]any{"app": map[string]any{"name": "shop", "replicas": []any{1, 2}}}},
		"compatibility": map[string]any{"hardwaretypes": []string{"small"}, "imagetypes": []string{"debian12"},
			"services": []string{"base", "db", "web"}},
		"constraints": map[string]any{
			"layout":   map[string]any{"mustcoexist": [][]string{}, "cantcoexist": [][]string{{"db", "web"}}},
			"services": map[string]any{"db": map[string]any{"quantities": map[string]any{"min": "1", "max": "1"}}},
			"size":     map[string]any{"min": 2}},
		"administration": map[string]any{"leaseduration": map[string]any{"initial": 0, "max": 0, "step": 0}},
	})
}

// writeChefResources puts the chef-solo automator's resources in its work
// dir as a Coopr server's sync leaves them: versions under .resources,
// activated by relative links.
func writeChefResources(t *testing.T, typeDir string) {
	t.Helper()
	res := func(typ, name string, files map[string]string) {
		for rel, c := range files {
			writeFile(t, filepath.Join(typeDir, ".resources", typ, name, "1", name, rel), c)
		}
		os.MkdirAll(filepath.Join(typeDir, typ), 0o755)
		if err := os.Symlink(filepath.Join("..", ".resources", typ, name, "1", name), filepath.Join(typeDir, typ, name)); err != nil {
			t.Fatal(err)
		}
	}
	res("cookbooks", "base", map[string]string{"metadata.rb": "name 'base'\nversion '1.0.0'\n",
		"recipes/default.rb": "package 'curl'\n", "recipes/configure.rb": "file '/etc/motd' do\n  content node['base']['motd']\nend\n"})
	res("cookbooks", "db", map[string]string{"metadata.rb": "name 'db'\nversion '2.1.0'\ndepends 'base'\n",
		"recipes/default.rb": "package 'postgresql'\n", "recipes/configure.rb": "template '/etc/db.conf'\n",
		"recipes/start.rb": "service 'postgresql' do\n  action :start\nend\n", "recipes/stop.rb": "service 'postgresql' do\n  action :stop\nend\n"})
	res("data_bags", "users", map[string]string{"alice.json": `{"id": "alice", "shell": "/bin/bash"}`})
	writeFile(t, filepath.Join(typeDir, ".resources", "roles", "db.json", "1", "db.json"),
		`{"name": "db", "json_class": "Chef::Role", "chef_type": "role", "run_list": ["recipe[base]", "recipe[db]"]}`)
	os.MkdirAll(filepath.Join(typeDir, "roles"), 0o755)
	if err := os.Symlink(filepath.Join("..", ".resources", "roles", "db.json", "1", "db.json"), filepath.Join(typeDir, "roles", "db.json")); err != nil {
		t.Fatal(err)
	}
}

func httpGet(t *testing.T, url string) string {
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

type stackNode struct {
	State       string            `json:"state"`
	Services    []string          `json:"services"`
	IPAddresses map[string]string `json:"ipaddresses"`
	Hostname    string            `json:"hostname"`
}

// stackCloud is one fake cloud the template runs on: the catalog
// provider it is, and what it says about its machines.
type stackCloud struct {
	provider string
	// machines are the cloud's live machines: the node each belongs to
	// (its tag, label or metadata), its name and its address.
	machines func() []stackMachine
	// problems are what the fake found wrong in the plugin's requests.
	problems func() []string
}

type stackMachine struct{ node, name, addr string }

func TestCooprTemplateOnClouds(t *testing.T) {
	hosts := startCloudHosts(t, 3)
	var hostKeys [][]string
	for _, srv := range hosts.servers {
		var lines []string
		for _, k := range srv.HostKeys {
			lines = append(lines, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
		}
		sort.Strings(lines)
		hostKeys = append(hostKeys, lines)
	}
	clouds := []struct {
		name  string
		setup func(t *testing.T, e *clusterEnv) (stackCloud, map[string]any)
	}{
		{"openstack", func(t *testing.T, e *clusterEnv) (stackCloud, map[string]any) {
			password := "os-" + randToken(t)
			cloud := openstackfake.Start(openstackfake.Options{Username: "loom", Password: password, Project: "ops",
				KeyPairs: []string{"loom"}, Machines: hosts.addrs, Flavors: map[string]string{"2": "m1.small"},
				Images: map[string]string{"6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10": "debian-12"}})
			t.Cleanup(cloud.Close)
			return stackCloud{provider: "os-lab", problems: cloud.Problems, machines: func() []stackMachine {
					var out []stackMachine
					for _, s := range cloud.Servers() {
						out = append(out, stackMachine{s.Metadata["loom_node"], s.Name, s.Fixed})
					}
					return out
				}}, map[string]any{"name": "os-lab", "description": "the fake OpenStack", "providertype": "openstack", "provisioner": map[string]any{
					"openstack_auth_url": cloud.AuthURL(), "api_user": "loom", "api_password": password, "openstack_tenant": "ops",
					"ssh_keypair": "loom", "ssh_key_resource": "loom.pem", "ssh_port": fmt.Sprint(hosts.port), "poll_interval": "0.2"}}
		}},
		{"aws", func(t *testing.T, e *clusterEnv) (stackCloud, map[string]any) {
			var ms []ec2fake.Machine
			for i, a := range hosts.addrs {
				ms = append(ms, ec2fake.Machine{PublicIP: a, PrivateIP: a, HostKeys: hostKeys[i]})
			}
			cloud := ec2fake.Start(ec2fake.Options{Machines: ms, KeyPairs: []string{"loom"}, ConsoleAfter: 1})
			t.Cleanup(cloud.Close)
			allowLoopback(t, filepath.Join(e.plugins, "aws", "aws.json"))
			return stackCloud{provider: "aws-lab", problems: func() []string { return nil }, machines: func() []stackMachine {
					var out []stackMachine
					for _, i := range cloud.Live() {
						out = append(out, stackMachine{i.Tag("coopr-node"), i.Tag("Name"), i.PublicIP})
					}
					return out
				}}, map[string]any{"name": "aws-lab", "description": "the fake EC2", "providertype": "aws", "provisioner": map[string]any{
					"api_user": ec2fake.AccessKeyID, "api_password": ec2fake.SecretAccessKey, "aws_region": "us-east-1",
					"aws_endpoint": cloud.URL(), "ssh_keypair": "loom", "ssh_key_resource": "loom.pem",
					"ssh_port": fmt.Sprint(hosts.port), "poll_interval": "0.2", "host_key_wait": "20", "ssh_wait": "30"}}
		}},
		{"google", func(t *testing.T, e *clusterEnv) (stackCloud, map[string]any) {
			var ms []gcefake.Machine
			for i, a := range hosts.addrs {
				ms = append(ms, gcefake.Machine{NatIP: a, NetworkIP: a, HostKeys: hostKeys[i]})
			}
			cloud := gcefake.Start(gcefake.Options{Machines: ms, GuestAfter: 1})
			t.Cleanup(cloud.Close)
			allowLoopback(t, filepath.Join(e.plugins, "google", "google.json"))
			writeFile(t, filepath.Join(e.work, clTenant, "providertypes", "google", "api_keys", "sa.json"), string(cloud.KeyJSON(cloud.URL()+gcefake.TokenPath)))
			return stackCloud{provider: "gce-lab", problems: cloud.Violations, machines: func() []stackMachine {
					var out []stackMachine
					for _, i := range cloud.Instances() {
						out = append(out, stackMachine{i.Labels["coopr-node"], i.Name, i.NatIP})
					}
					return out
				}}, map[string]any{"name": "gce-lab", "description": "the fake Compute Engine", "providertype": "google", "provisioner": map[string]any{
					"google_project": "loom-test", "api_key_resource": "sa.json", "zone_name": "us-central1-a",
					"api_url": cloud.URL(), "token_url": cloud.URL() + gcefake.TokenPath, "ssh_key_resource": "loom.pem",
					"google_data_disk_size_gb": "0", "ssh_port": fmt.Sprint(hosts.port), "poll_interval": "0.2", "host_key_wait": "20", "ssh_wait": "30"}}
		}},
	}
	for _, c := range clouds {
		t.Run(c.name, func(t *testing.T) {
			// Each cloud starts from hosts without an earlier cloud's chef
			// runs, and publishes its web containers on a port of its own
			// (podman's port forwards of removed containers may linger).
			for _, srv := range hosts.servers {
				os.Remove(srv.HostPath("/var/lib/fakechef/runs.jsonl"))
			}
			port, err := sshdtest.FreePort(hosts.addrs...)
			if err != nil {
				t.Fatal(err)
			}
			hosts.appPort = port
			dir := t.TempDir()
			e := &clusterEnv{t: t, dir: dir, plugins: filepath.Join(dir, "plugins"), work: filepath.Join(dir, "work"),
				state: filepath.Join(dir, "state"), known: filepath.Join(dir, "known_hosts")}
			writeFile(t, e.known, "")
			for _, p := range []string{c.name, "chef-solo", "docker"} {
				if err := os.CopyFS(filepath.Join(e.plugins, p), os.DirFS(filepath.Join(repoRoot(), "plugins", p))); err != nil {
					t.Fatal(err)
				}
			}
			keyFile := filepath.Join(e.work, clTenant, "providertypes", c.name, "ssh_keys", "loom.pem")
			writeFile(t, keyFile, string(hosts.keyPEM))
			os.Chmod(keyFile, 0o400)
			cloud, provider := c.setup(t, e)
			writeChefResources(t, filepath.Join(e.work, clTenant, "automatortypes", "chef-solo"))
			catalog := filepath.Join(dir, "catalog")
			writeStackCatalog(t, catalog, hosts, map[string]map[string]any{cloud.provider: provider})
			applyStack(t, e, hosts, catalog, cloud)
		})
	}
}

// allowLoopback adds 127.0.0.1 to a plugin definition's permissions.http,
// as an operator adds a private endpoint's host.
func allowLoopback(t *testing.T, def string) {
	t.Helper()
	data, err := os.ReadFile(def)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	perms := d["permissions"].(map[string]any)
	perms["http"] = append(perms["http"].([]any), "127.0.0.1")
	writeJSON(t, def, d)
}

// applyStack applies the web-stack template on a cloud, checks what
// chef-solo and the containers did on every node, and destroys it.
func applyStack(t *testing.T, e *clusterEnv, hosts *cloudHosts, catalog string, cloud stackCloud) {
	t.Helper()
	out, errs := e.loomd(0, "apply", "--template", "web-stack", "--size", "3", "shop", "--catalog", catalog, "--provider", cloud.provider, "--local")
	if !strings.Contains(out+errs, "Layout: template web-stack, 3 nodes, provider "+cloud.provider) {
		t.Fatalf("apply did not show the layout:\n%s\n%s", out, errs)
	}

	// The cloud made one machine per node, each carrying its node id.
	var cl struct {
		Status string               `json:"status"`
		Nodes  map[string]stackNode `json:"nodes"`
	}
	got, _ := e.loomd(0, "cluster", "get", "shop")
	if err := json.Unmarshal([]byte(got), &cl); err != nil {
		t.Fatal(err)
	}
	if cl.Status != "active" || len(cl.Nodes) != 3 {
		t.Fatalf("cluster %s with %d nodes:\n%s", cl.Status, len(cl.Nodes), got)
	}
	machines := cloud.machines()
	if len(machines) != 3 {
		t.Fatalf("%d machines in the cloud, want 3", len(machines))
	}
	for _, m := range machines {
		n, ok := cl.Nodes[m.node]
		if !ok || !strings.HasPrefix(n.Hostname, m.name) || n.IPAddresses["access_v4"] != m.addr {
			t.Fatalf("machine %s (%s, node %s) does not match the cluster's nodes:\n%s", m.name, m.addr, m.node, got)
		}
	}
	// chef-solo ran on every host with Coopr's attributes; the db node ran
	// its role, and its configure got the web nodes' addresses.
	var dbAddr string
	var webAddrs []string
	for id, n := range cl.Nodes {
		if slices.Contains(n.Services, "db") {
			dbAddr = n.IPAddresses["bind_v4"]
		} else {
			webAddrs = append(webAddrs, n.IPAddresses["bind_v4"])
		}
		runs := chefRuns(t, hosts.byAddr(n.IPAddresses["access_v4"]))
		var lists []string
		for _, r := range runs {
			lists = append(lists, strings.Join(r.RunList, ","))
			a := r.Attributes
			coopr, _ := a["coopr"].(map[string]any)
			nodes, _ := a["nodes"].(map[string]any)
			if coopr["clusterId"] == nil || coopr["hostname"] != n.Hostname || len(nodes) != 3 ||
				a["app"].(map[string]any)["name"] != "shop" {
				t.Fatalf("%s: attributes of %v: %v", id, r.RunList, a)
			}
		}
		want := []string{"recipe[base]", "recipe[base::configure]"}
		if slices.Contains(n.Services, "db") {
			want = append(want, "role[db]", "recipe[db::configure]", "recipe[db::start]")
		}
		sort.Strings(lists)
		sort.Strings(want)
		if !slices.Equal(lists, want) {
			t.Fatalf("%s (%v) ran chef-solo with %v, want %v", id, n.Services, lists, want)
		}
		for _, r := range runs {
			if strings.Join(r.RunList, ",") == "recipe[base::configure]" {
				if motd := r.Attributes["base"].(map[string]any)["motd"]; motd != "node "+n.Hostname {
					t.Fatalf("%s: motd %v: the macro was not expanded for the node", id, motd)
				}
			}
		}
	}
	sort.Strings(webAddrs)
	if dbAddr == "" || len(webAddrs) != 2 {
		t.Fatalf("db at %q, web at %v", dbAddr, webAddrs)
	}
	for _, r := range chefRuns(t, hosts.byAddr(dbAddr)) {
		if strings.Join(r.RunList, ",") == "role[db]" && !slices.Equal(r.Recipes, []string{"base::default", "db::default"}) {
			t.Fatalf("role[db] expanded to %v", r.Recipes)
		}
		if strings.Join(r.RunList, ",") == "recipe[db::configure]" {
			// The web nodes' addresses, in nodenum order (loomd's macros).
			clients := strings.Fields(fmt.Sprint(r.Attributes["db"].(map[string]any)["clients"]))
			sort.Strings(clients)
			if !slices.Equal(clients, webAddrs) {
				t.Fatalf("db.clients %v, want %v", clients, webAddrs)
			}
		}
	}

	// The web containers run under podman on their hosts, published on
	// the node's address, with the db's address in their environment.
	for id, n := range cl.Nodes {
		if !slices.Contains(n.Services, "web") {
			continue
		}
		base := fmt.Sprintf("http://%s:%d", n.IPAddresses["bind_v4"], hosts.appPort)
		if got := httpGet(t, base+"/"); got != "hello-from-"+n.Hostname+" --role web" {
			t.Fatalf("%s answers %q", id, got)
		}
		if got := httpGet(t, base+"/env/DB"); got != dbAddr {
			t.Fatalf("%s: DB=%q, want %q", id, got, dbAddr)
		}
	}

	// Destroy: the cloud has no machine left.
	e.loomd(0, "destroy", "shop", "--local")
	if left := cloud.machines(); len(left) != 0 {
		t.Fatalf("machines left after destroy: %+v", left)
	}
	for _, p := range cloud.problems() {
		t.Errorf("fake cloud: %s", p)
	}
}
