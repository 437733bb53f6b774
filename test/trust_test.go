package test

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/sshdtest"
)

// plantingPlugins adds two automators to the env's plugins: "planter",
// whose INSTALL tries to make loomd trust a host key by writing
// known_hosts lines wherever it can think of, and "connector", whose
// INSTALL logs in to the node with the default (strict) host-key policy
// and no pinned keys.
func (e *e2eEnv) plantingPlugins() {
	e.t.Helper()
	for name, files := range map[string]map[string]string{
		"planter": {
			"planter.json": `{"name": "planter", "automatortypes": ["planter"], "planter": {"name": "planter", "classname": "Planter"}}`,
			"planter.lua": `
local fs = require("loom.fs")
Planter = require("loom").Automator:extend("Planter")
function Planter:install(input)
  local out = {}
  for _, p in ipairs({self.env.work_root .. "/known_hosts", "../../../known_hosts", input.fields.own, input.fields.operator}) do
    local ok, err = pcall(fs.write, p, input.fields.line .. "\n", {mode = "0644"})
    out[#out + 1] = ok and ("wrote " .. p) or ("refused: " .. tostring(type(err) == "table" and err.message or err))
  end
  self.result.result.attempts = out
  self.result.status = 0
end`,
		},
		"connector": {
			"connector.json": `{"name": "connector", "automatortypes": ["connector"], "connector": {"name": "connector", "classname": "Connector"}}`,
			"connector.lua": `
local ssh = require("loom.ssh")
Connector = require("loom").Automator:extend("Connector")
function Connector:install(input)
  local c = ssh.from_input(input, self.task, {port = tonumber(input.sshauth.port)})
  self.result.stdout = c:exec("echo logged-in", {check = true}).stdout
  self.result.status = 0
end`,
		},
	} {
		for f, content := range files {
			e.writeFile(filepath.Join(e.plugins, name, f), content, 0o644)
		}
	}
}

func (e *e2eEnv) automatorTask(id, typ string, fields map[string]any) map[string]any {
	return map[string]any{
		"taskId": id, "taskName": "INSTALL", "tenantId": e.tenant,
		"config": map[string]any{
			"hostname":    "node1",
			"ipaddresses": map[string]any{"access_v4": e.srv.Host},
			"ssh-auth":    map[string]any{"user": e.srv.User, "password": e.srv.Password, "port": e.srv.Port},
			"service":     map[string]any{"name": "svc", "action": map[string]any{"type": typ, "fields": fields}},
		},
	}
}

// Issue 10 item 1: a plugin cannot add or change a trusted host key. A
// plugin writes "* <key>" lines into loomd's old known_hosts location, its
// own host-key file and the operator's --known-hosts file; every write is
// refused, and another plugin's strict connection to a host with that key
// still fails as unknown. On the old main the first write succeeded and
// the connection accepted the impostor.
func TestPluginCannotPlantHostKeys(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	e := newE2EEnv(t, srv)
	e.plantingPlugins()
	var lines []string
	for _, k := range srv.HostKeys {
		lines = append(lines, "* "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k))),
			knownhosts.Line([]string{net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))}, k))
	}
	own := filepath.Join(e.home, ".local", "state", "loomd", "known_hosts")
	r := e.run(e.automatorTask("plant-1", "planter", map[string]any{
		"line": strings.Join(lines, "\n"), "own": own, "operator": e.knownHosts,
	}))
	if r.status() != 0 {
		t.Fatalf("planter: %s", r)
	}
	attempts, _ := r.Result["result"].(map[string]any)["attempts"].([]any)
	if len(attempts) != 4 {
		t.Fatalf("planter attempts: %v", r.Result)
	}
	for _, a := range attempts {
		if s, _ := a.(string); !strings.HasPrefix(s, "refused: ") || !strings.Contains(s, "outside the hook's work dir") {
			t.Errorf("a plugin wrote a known_hosts file: %v", a)
		}
	}
	for _, f := range []string{own, e.knownHosts, filepath.Join(e.work, "known_hosts")} {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			t.Errorf("%s holds %q after the planter ran", f, b)
		}
	}
	c := e.run(e.automatorTask("connect-1", "connector", map[string]any{}))
	errObj, _ := c.Result["error"].(map[string]any)
	if c.status() == 0 || errObj["kind"] != "host_key" || !strings.Contains(c.str("message"), "unknown") {
		t.Fatalf("a strict connection to a host nobody trusted was not refused as unknown:\n%s", c)
	}

	// The old location is ignored even when it holds the key (a file a
	// plugin planted before the upgrade), with a warning that says so.
	e.writeFile(filepath.Join(e.work, "known_hosts"), strings.Join(lines, "\n")+"\n", 0o644)
	c = e.run(e.automatorTask("connect-2", "connector", map[string]any{}))
	if c.status() == 0 || !strings.Contains(c.Stderr, "ignoring the known_hosts file of older loomd versions") {
		t.Fatalf("the old <work-dir>/known_hosts was trusted, or silently ignored:\n%s", c)
	}

	// Keys the operator puts in loomd's own file are trusted.
	e.writeFile(own, strings.Join(lines, "\n")+"\n", 0o600)
	c = e.run(e.automatorTask("connect-3", "connector", map[string]any{}))
	if c.status() != 0 || !strings.Contains(c.str("stdout"), "logged-in") {
		t.Fatalf("a key in loomd's own known_hosts was not trusted:\n%s", c)
	}
}

// Trusted known_hosts files inside the work dir are refused at startup.
func TestKnownHostsInsideWorkDirRefused(t *testing.T) {
	e := newE2EEnv(t, nil)
	task := map[string]any{"taskId": "x", "taskName": "INSTALL", "config": map[string]any{
		"service": map[string]any{"name": "s", "action": map[string]any{"type": "shell", "fields": map[string]any{"script": "x"}}}}}
	for _, args := range [][]string{
		{"--host-keys", filepath.Join(e.work, "known_hosts")},
		{"--known-hosts", filepath.Join(e.work, e.tenant, "automatortypes", "shell", "kh")},
	} {
		r := e.run(task, args...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "is inside --work-dir") {
			t.Errorf("loomd run %v: want exit 2 refusing a known_hosts file in the work dir, got\n%s", args, r)
		}
	}
}

// loomd serve trusts the host keys the operator puts in <data>/known_hosts
// (the default --host-keys), in the daemon and in its worker processes,
// and carries the task's tenantId to the record and the result.
func TestServeTrustsDataKnownHosts(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Config{})
	e := newE2EEnv(t, srv)
	e.plantingPlugins()
	dir := filepath.Dir(e.plugins)
	var lines []string
	for _, k := range srv.HostKeys {
		lines = append(lines, knownhosts.Line([]string{net.JoinHostPort(srv.Host, strconv.Itoa(srv.Port))}, k))
	}
	e.writeFile(filepath.Join(dir, "data", "known_hosts"), strings.Join(lines, "\n")+"\n", 0o600)
	d := startDaemon(t, dir, "loomd.log", nil)
	body, err := json.Marshal(e.automatorTask("serve-connect-1", "connector", map[string]any{}))
	if err != nil {
		t.Fatal(err)
	}
	d.submit(string(body))
	task := d.wait("serve-connect-1")
	if task.State != queue.Succeeded || !strings.Contains(string(task.Result), "logged-in") {
		t.Fatalf("a key in <data>/known_hosts was not trusted by loomd serve: %+v\n%s", task, d.logTail())
	}
	if task.TenantID != e.tenant || !strings.Contains(string(task.Result), `"tenantId":"`+e.tenant+`"`) {
		t.Fatalf("tenantId %q not carried to the record and result: %+v", e.tenant, task)
	}
}
