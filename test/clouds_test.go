package test

// End-to-end tests of the aws and google providers: a 3-node cluster
// through `loomd apply` and `loomd destroy` on each fake cloud
// (internal/cloudfake/ec2fake, internal/cloudfake/gcefake), whose machines
// are real sshd hosts on 127.0.0.12-14 (one port, one key, as a cloud's
// machines). The fakes publish each host's real SSH host keys where the
// cloud does (EC2: the console output; Compute Engine: the guest
// attributes), so CONFIRM pins them, checks sshd against them, and the
// shell automator then runs on every node with strict host-key checking
// and an empty known_hosts.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/internal/cloudfake/ec2fake"
	"github.com/loomrt/loom/internal/cloudfake/gcefake"
	"github.com/loomrt/loom/internal/sshdtest"
)

const cloudFx = "/var/lib/loom-cloudfx"

// markScript appends "<taskName> <nodeId> <access_v4>" to the host's log.
const markScript = `#!/bin/sh
set -e
mkdir -p ` + cloudFx + `
echo "$(loom_lookup_key taskName) $(loom_lookup_key nodeId) $(loom_lookup_key config/ipaddresses/access_v4)" >> ` + cloudFx + `/marks
`

type cloudMachines struct {
	addrs    []string
	port     int
	keyPEM   []byte
	hostKeys [][]string // per host, authorized_keys lines
	servers  []*sshdtest.Server
}

func startMachines(t *testing.T) *cloudMachines {
	t.Helper()
	m := &cloudMachines{addrs: []string{"127.0.0.12", "127.0.0.13", "127.0.0.14"}}
	var err error
	if m.port, err = sshdtest.FreePort(m.addrs...); err != nil {
		t.Fatal(err)
	}
	for _, a := range m.addrs {
		srv := sshdtest.Start(t, sshdtest.Config{Host: a, Port: m.port, UserKeyPEM: m.keyPEM, PrivateDirs: []string{"/var/cache/loom", cloudFx}})
		if m.keyPEM == nil {
			m.keyPEM = srv.KeyPEM
		}
		var lines []string
		for _, k := range srv.HostKeys {
			lines = append(lines, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))))
		}
		slices.Sort(lines)
		m.hostKeys = append(m.hostKeys, lines)
		m.servers = append(m.servers, srv)
	}
	return m
}

// marks reads a host's log: its node id and the tasks that ran there.
func (m *cloudMachines) marks(t *testing.T, i int) (node string, tasks []string) {
	t.Helper()
	data, err := os.ReadFile(m.servers[i].HostPath(cloudFx + "/marks"))
	if err != nil {
		t.Fatalf("host %s: %v", m.addrs[i], err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != m.addrs[i] || (node != "" && f[1] != node) {
			t.Fatalf("host %s: mark %q", m.addrs[i], line)
		}
		node = f[1]
		tasks = append(tasks, f[0])
	}
	return node, tasks
}

// cloudEnv copies the cloud's plugin (allowing the fake on loopback, as an
// operator adds a private endpoint's host) and the shell automator.
func cloudEnv(t *testing.T, cloud string, m *cloudMachines) *clusterEnv {
	t.Helper()
	dir := t.TempDir()
	e := &clusterEnv{t: t, dir: dir, plugins: filepath.Join(dir, "plugins"), work: filepath.Join(dir, "work"),
		state: filepath.Join(dir, "state"), known: filepath.Join(dir, "known_hosts"), spec: filepath.Join(dir, "shop.yaml")}
	for _, p := range []string{cloud, "shell"} {
		if err := os.CopyFS(filepath.Join(e.plugins, p), os.DirFS(filepath.Join(repoRoot(), "plugins", p))); err != nil {
			t.Fatal(err)
		}
	}
	def := filepath.Join(e.plugins, cloud, cloud+".json")
	data, _ := os.ReadFile(def)
	var d map[string]any
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	perms := d["permissions"].(map[string]any)
	perms["http"] = append(perms["http"].([]any), "127.0.0.1")
	out, _ := json.MarshalIndent(d, "", "  ")
	e.write(def, string(out), 0o644)
	e.write(filepath.Join(e.work, clTenant, "providertypes", cloud, "ssh_keys", "loom.pem"), string(m.keyPEM), 0o400)
	e.write(filepath.Join(e.work, clTenant, "automatortypes", "shell", "scripts", "mark.sh"), markScript, 0o755)
	e.write(e.known, "", 0o644)
	return e
}

func (e *clusterEnv) writeCloudSpec(cloud, flavor, image string, fields map[string]any) {
	f, _ := json.Marshal(fields)
	e.write(e.spec, fmt.Sprintf(`name: shop
provider:
  type: %s
  fields: %s
nodegroups:
  - {name: node, count: 3, flavor: %s, image: %s, sshuser: %s, services: [mark]}
services:
  mark:
    actions:
      install:   {type: shell, fields: {script: mark.sh}}
      configure: {type: shell, fields: {script: mark.sh}}
`, cloud, f, flavor, image, sshdtest.NoPasswdUser), 0o644)
}

// checkCluster checks the applied cluster: 3 active nodes, each on one
// of the machines with its host keys pinned, the shell automator's tasks
// run on each. It returns the node ids.
func checkCluster(t *testing.T, e *clusterEnv, m *cloudMachines) []string {
	t.Helper()
	s := e.readState()
	if s.Status != "active" || len(s.Nodes) != 3 {
		t.Fatalf("cluster %s with %d nodes", s.Status, len(s.Nodes))
	}
	var nodes []string
	for i := range m.addrs {
		node, tasks := m.marks(t, i)
		slices.Sort(tasks)
		if !slices.Equal(tasks, []string{"CONFIGURE", "INSTALL"}) {
			t.Errorf("host %s (node %s) ran %v", m.addrs[i], node, tasks)
		}
		n, ok := s.Nodes[node]
		if !ok || n.IPAddresses["access_v4"] != m.addrs[i] {
			t.Errorf("host %s: node %s is %+v", m.addrs[i], node, n)
			continue
		}
		keys, _ := n.Results["ssh_host_keys"].(map[string]any)
		if len(keys) == 0 {
			t.Errorf("node %s has no ssh_host_keys", node)
		}
		nodes = append(nodes, node)
	}
	slices.Sort(nodes)
	return nodes
}

func TestClusterOnAWS(t *testing.T) {
	m := startMachines(t)
	var machines []ec2fake.Machine
	for i, a := range m.addrs {
		machines = append(machines, ec2fake.Machine{PublicIP: a, PrivateIP: a, HostKeys: m.hostKeys[i]})
	}
	fake := ec2fake.Start(ec2fake.Options{Machines: machines, KeyPairs: []string{"loom"}, ConsoleAfter: 1})
	t.Cleanup(fake.Close)
	e := cloudEnv(t, "aws", m)
	e.writeCloudSpec("aws", "t3.small", ec2fake.DefaultImage, map[string]any{
		"api_user": ec2fake.AccessKeyID, "api_password": ec2fake.SecretAccessKey, "aws_region": "us-east-1",
		"aws_endpoint": fake.URL(), "ssh_keypair": "loom", "ssh_key_resource": "loom.pem",
		"ssh_port": fmt.Sprint(m.port), "poll_interval": "0.2", "host_key_wait": "20", "ssh_wait": "30"})
	out, errs := e.loomd(0, "apply", e.spec, "--local")
	if strings.Contains(out+errs, ec2fake.SecretAccessKey) {
		t.Error("the secret key is in loomd's output")
	}
	nodes := checkCluster(t, e, m)
	var tagged []string
	for _, i := range fake.Live() {
		tagged = append(tagged, i.Tag("coopr-node"))
	}
	slices.Sort(tagged)
	if !slices.Equal(tagged, nodes) {
		t.Errorf("instances tagged %v, nodes %v", tagged, nodes)
	}
	e.loomd(0, "destroy", "shop", "--local")
	if live := fake.Live(); len(live) != 0 {
		t.Errorf("instances left after destroy: %+v", live)
	}
	if s := e.readState(); s.Status != "terminated" {
		t.Errorf("state after destroy: %s", s.Status)
	}
}

func TestClusterOnGoogle(t *testing.T) {
	m := startMachines(t)
	var machines []gcefake.Machine
	for i, a := range m.addrs {
		machines = append(machines, gcefake.Machine{NatIP: a, NetworkIP: a, HostKeys: m.hostKeys[i]})
	}
	fake := gcefake.Start(gcefake.Options{Machines: machines, GuestAfter: 1})
	t.Cleanup(fake.Close)
	e := cloudEnv(t, "google", m)
	e.write(filepath.Join(e.work, clTenant, "providertypes", "google", "api_keys", "sa.json"), string(fake.KeyJSON(fake.URL()+gcefake.TokenPath)), 0o400)
	e.writeCloudSpec("google", "e2-small", "debian-12", map[string]any{
		"google_project": "loom-test", "api_key_resource": "sa.json", "zone_name": "us-central1-a",
		"api_url": fake.URL(), "token_url": fake.URL() + gcefake.TokenPath, "ssh_key_resource": "loom.pem",
		"google_data_disk_size_gb": "0", "ssh_port": fmt.Sprint(m.port), "poll_interval": "0.2", "host_key_wait": "20", "ssh_wait": "30"})
	out, errs := e.loomd(0, "apply", e.spec, "--local")
	if strings.Contains(out+errs, "PRIVATE KEY") {
		t.Error("the service account key is in loomd's output")
	}
	nodes := checkCluster(t, e, m)
	var labelled []string
	for _, i := range fake.Instances() {
		labelled = append(labelled, i.Labels["coopr-node"])
	}
	slices.Sort(labelled)
	if !slices.Equal(labelled, nodes) {
		t.Errorf("instances labelled %v, nodes %v", labelled, nodes)
	}
	e.loomd(0, "destroy", "shop", "--local")
	if left := fake.Instances(); len(left) != 0 {
		t.Errorf("instances left after destroy: %+v", left)
	}
	for _, v := range fake.Violations() {
		t.Errorf("discovery document violation: %s", v)
	}
}
