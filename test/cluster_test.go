package test

// End-to-end test of loomd plan / apply / destroy: real sshd "hosts" on
// loopback (each with private /var/cache/loom and /var/lib/loom-fx, so
// they act as separate machines for the shell automator's cache and for
// the effects log), the static provider handing them out, the shell
// automator running a script that appends one line per task to the
// host's log. The test checks the order of those effects against the
// plan loomd plan printed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/sshdtest"
)

const (
	fxDir    = "/var/lib/loom-fx"
	fxLog    = fxDir + "/effects.log"
	fxGate   = fxDir + "/gate"
	fxHold   = fxDir + "/hold"
	clTenant = "cl"
)

// effectScript appends "<ns> <taskName> <service> <nodeId> <greeting>
// <peers>" (peers: the cluster config's macros, expanded for the node)
// to the host's log; while the hold file exists, the task it names
// ("<taskName> <service>"; empty: START db) then waits for the gate file
// (the kill tests stop an apply there).
const effectScript = `#!/bin/sh
set -e
mkdir -p ` + fxDir + `
echo "$(date +%s%N) $(loom_lookup_key taskName) $(loom_lookup_key config/service/name) $(loom_lookup_key nodeId) $(loom_lookup_key config/cluster/greeting) $(loom_lookup_key config/cluster/peers)" >> ` + fxLog + `
if [ -e ` + fxHold + ` ]; then
	want="$(cat ` + fxHold + `)"
	[ -n "$want" ] || want="START db"
	if [ "$(loom_lookup_key taskName) $(loom_lookup_key config/service/name)" = "$want" ]; then
		i=0
		while [ ! -e ` + fxGate + ` ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
	fi
fi
`

type clusterEnv struct {
	t                                *testing.T
	dir, plugins, work, state, known string
	spec                             string
	hosts                            []*sshdtest.Server
	byPort                           map[int]*sshdtest.Server
	// server, when set, is the loomd whose store keeps the state
	// (commands without --local get --server instead of --state-dir).
	server string
}

func newClusterEnv(t *testing.T, nhosts int) *clusterEnv {
	t.Helper()
	dir := t.TempDir()
	e := &clusterEnv{t: t, dir: dir, plugins: filepath.Join(dir, "plugins"), work: filepath.Join(dir, "work"),
		state: filepath.Join(dir, "state"), known: filepath.Join(dir, "known_hosts"), spec: filepath.Join(dir, "shop.yaml"),
		byPort: map[int]*sshdtest.Server{}}
	var inv []any
	for i := 0; i < nhosts; i++ {
		srv := sshdtest.Start(t, sshdtest.Config{PrivateDirs: []string{"/var/cache/loom", fxDir}})
		e.hosts = append(e.hosts, srv)
		e.byPort[srv.Port] = srv
		inv = append(inv, map[string]any{"id": fmt.Sprintf("h%d", i+1), "address": srv.Host, "port": srv.Port,
			"user": srv.NoPasswdUser, "key_file": fmt.Sprintf("keys/h%d", i+1), "labels": map[string]any{"flavor": "small", "image": "debian12"}})
	}
	for _, p := range []string{"shell", "static"} {
		if err := os.CopyFS(filepath.Join(e.plugins, p), os.DirFS(filepath.Join(repoRoot(), "plugins", p))); err != nil {
			t.Fatal(err)
		}
	}
	static := filepath.Join(e.work, clTenant, "providertypes", "static")
	invJSON, _ := json.Marshal(map[string]any{"hosts": inv})
	e.write(filepath.Join(static, "inventory.json"), string(invJSON), 0o600)
	for i, h := range e.hosts {
		e.write(filepath.Join(static, "keys", fmt.Sprintf("h%d", i+1)), string(h.KeyPEM), 0o600)
	}
	e.write(filepath.Join(e.work, clTenant, "automatortypes", "shell", "scripts", "effect.sh"), effectScript, 0o755)
	e.write(e.known, "", 0o644)
	return e
}

func (e *clusterEnv) write(path, content string, mode os.FileMode) {
	e.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
}

// writeSpec writes the cluster spec: one db node, web nodes, a greeting
// in the cluster config.
func (e *clusterEnv) writeSpec(web int, greeting string) {
	e.write(e.spec, fmt.Sprintf(`name: shop
provider:
  type: static
  fields: {confirm_wait: "5", ssh_timeout: "5"}
config:
  greeting: %s
  peers: "%%num.service.web%%/%%instance.self.service.web%%/%%ip.access_v4.service.db%%"
nodegroups:
  - {name: db, count: 1, flavor: small, image: debian12, services: [base, db]}
  - {name: web, count: %d, flavor: small, image: debian12, services: [base, web]}
services:
  base:
    actions:
      install:   {type: shell, fields: {script: effect.sh}}
      configure: {type: shell, fields: {script: effect.sh}}
  db:
    provides: [database]
    install: {requires: [base]}
    actions:
      install:    {type: shell, fields: {script: effect.sh}}
      configure:  {type: shell, fields: {script: effect.sh}}
      initialize: {type: shell, fields: {script: effect.sh}}
      start:      {type: shell, fields: {script: effect.sh}}
      stop:       {type: shell, fields: {script: effect.sh}}
  web:
    install: {requires: [base]}
    runtime: {requires: [database]}
    actions:
      install:   {type: shell, fields: {script: effect.sh}}
      configure: {type: shell, fields: {script: effect.sh}}
      start:     {type: shell, fields: {script: effect.sh}}
      stop:      {type: shell, fields: {script: effect.sh}}
`, greeting, web), 0o644)
}

func (e *clusterEnv) cmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append(args, "--plugins", e.plugins, "--work-dir", e.work, "--tenant", clTenant, "--known-hosts", e.known)
	if (args[0] == "apply" || args[0] == "destroy") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--yes") }) {
		full = append(full, "--yes")
	}
	if e.server == "" || slices.Contains(args, "--local") {
		full = append(full, "--state-dir", e.state)
	} else if !slices.Contains(args, "--server") {
		full = append(full, "--server", e.server)
	}
	cmd := exec.CommandContext(ctx, loomdBin, full...)
	cmd.Env = []string{"HOME=" + e.dir, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// loomd runs a loomd command to its end.
func (e *clusterEnv) loomd(want int, args ...string) (stdout, stderr string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := e.cmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("loomd %v: %v", args, err)
	}
	if code != want {
		e.t.Fatalf("loomd %v: exit %d, want %d\n--- stdout\n%s\n--- stderr\n%s", args, code, want, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// planStep is one step of 'loomd plan --json' (docs/clusters.md).
type planStep struct {
	Index  int    `json:"index"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	Tasks  []struct {
		Index    int    `json:"index"`
		TaskName string `json:"taskName"`
		NodeID   string `json:"nodeId"`
		Service  string `json:"service"`
		After    []int  `json:"after"`
	} `json:"tasks"`
}

// planDoc is 'loomd plan --json'.
type planDoc struct {
	Format  string     `json:"format"`
	Version int        `json:"version"`
	Action  string     `json:"action"`
	Reason  string     `json:"reason"`
	Resume  string     `json:"resume"`
	Tasks   int        `json:"tasks"`
	Steps   []planStep `json:"steps"`
	Notes   []string   `json:"notes"`
}

func (e *clusterEnv) planDoc(args ...string) planDoc {
	e.t.Helper()
	out, _ := e.loomd(0, append([]string{"plan", e.spec, "--json"}, args...)...)
	var p planDoc
	if err := json.Unmarshal([]byte(out), &p); err != nil || p.Format != "loomd-plan" || p.Version != 1 {
		e.t.Fatalf("plan --json: %v\n%s", err, out)
	}
	return p
}

func (e *clusterEnv) plan() []planStep { return e.planDoc().Steps }

type effect struct {
	ns                                   int64
	task, service, node, greeting, peers string
}

func (f effect) key() string { return f.task + " " + f.service + "@" + f.node }

// effects reads and clears every host's log, merged by time.
func (e *clusterEnv) effects() []effect {
	e.t.Helper()
	var all []effect
	for _, h := range e.hosts {
		p := h.HostPath(fxLog)
		data, err := os.ReadFile(p)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			fx := effect{ns: ns, task: f[1], service: f[2], node: f[3]}
			if len(f) > 4 {
				fx.greeting = f[4]
			}
			if len(f) > 5 {
				fx.peers = f[5]
			}
			all = append(all, fx)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].ns < all[j].ns })
	return all
}

// checkOrder asserts the effects are exactly the plan's service tasks
// (each once, unless listed in rerun: at least once), each after its
// prerequisites, and each step's after the step before.
func (e *clusterEnv) checkOrder(steps []planStep, fx []effect, rerun func(string) bool) {
	e.t.Helper()
	first, last := map[string]int64{}, map[string]int64{}
	count := map[string]int{}
	for _, f := range fx {
		k := f.key()
		if _, ok := first[k]; !ok {
			first[k] = f.ns
		}
		last[k] = f.ns
		count[k]++
	}
	want := map[string]bool{}
	var prevMax int64
	for si, st := range steps {
		var stepMin, stepMax int64 = 1 << 62, 0
		for _, t := range st.Tasks {
			if t.Service == "" {
				continue
			}
			k := t.TaskName + " " + t.Service + "@" + t.NodeID
			want[k] = true
			switch {
			case count[k] == 0:
				e.t.Errorf("step %d (%s): %s left no effect", si+1, st.Reason, k)
				continue
			case count[k] > 1 && (rerun == nil || !rerun(k)):
				e.t.Errorf("step %d (%s): %s ran %d times", si+1, st.Reason, k, count[k])
			}
			stepMin, stepMax = min(stepMin, first[k]), max(stepMax, last[k])
			for _, d := range t.After {
				p := st.Tasks[d]
				if p.Service == "" {
					continue
				}
				pk := p.TaskName + " " + p.Service + "@" + p.NodeID
				if last[pk] > first[k] {
					e.t.Errorf("step %d: %s ran before its prerequisite %s finished", si+1, k, pk)
				}
			}
		}
		if stepMax > 0 && stepMin < prevMax {
			e.t.Errorf("step %d (%s) began before the step before it ended", si+1, st.Reason)
		}
		if stepMax > 0 {
			prevMax = stepMax
		}
	}
	for k := range count {
		if !want[k] {
			e.t.Errorf("effect %s is in no planned task", k)
		}
	}
}

type clusterState struct {
	Status string `json:"status"`
	Nodes  map[string]struct {
		State       string         `json:"state"`
		IPAddresses map[string]any `json:"ipaddresses"`
		Results     map[string]any `json:"results"`
	} `json:"nodes"`
	Jobs []struct {
		ID     string `json:"id"`
		Action string `json:"action"`
		Status string `json:"status"`
		Tasks  map[string]struct {
			Status string `json:"status"`
		} `json:"tasks"`
	} `json:"jobs"`
}

func (e *clusterEnv) readState() clusterState {
	e.t.Helper()
	var s clusterState
	out, _ := e.loomd(0, "cluster", "get", "shop")
	data := []byte(out)
	if err := json.Unmarshal(data, &s); err != nil {
		e.t.Fatal(err)
	}
	return s
}

// claims reads the static provider's claims: host id -> node id.
func (e *clusterEnv) claims() map[string]string {
	e.t.Helper()
	data, err := os.ReadFile(filepath.Join(e.work, clTenant, "providertypes", "static", "claims.json"))
	if err != nil {
		e.t.Fatal(err)
	}
	var c struct {
		Claims map[string]struct {
			NodeID string `json:"node_id"`
		} `json:"claims"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for h, cl := range c.Claims {
		out[h] = cl.NodeID
	}
	return out
}

// TestClusterLifecycle: apply (killed mid-way, then resumed), scale
// 3→5→2, reconfigure with restart, destroy.
func TestClusterLifecycle(t *testing.T) {
	e := newClusterEnv(t, 5)

	// Create, held at START db; kill -9 the apply there.
	e.writeSpec(2, "hello")
	for _, h := range e.hosts {
		if err := os.WriteFile(h.HostPath(fxHold), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	create := e.plan()
	if len(create) != 1 || create[0].Action != "create" || len(create[0].Tasks) != 3*3+3*2+4+2*3 {
		t.Fatalf("create plan: %+v", create)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.cmd(ctx, "apply", e.spec, "--local", "--log-format", "json")
	var killedErr bytes.Buffer
	cmd.Stderr = &killedErr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	doneBefore := e.waitRunning(create, "START", "db", exited, &killedErr)
	select {
	case <-exited: // reaped: -pid may be another process's group by now
	default:
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	<-exited
	if len(doneBefore) == 0 {
		t.Fatalf("no task had finished before START db")
	}
	// Open the gate on every host, then resume.
	for _, h := range e.hosts {
		if err := os.WriteFile(h.HostPath(fxGate), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(h.HostPath(fxHold))
	}
	if resume := e.planDoc(); len(resume.Steps) != 1 || resume.Resume != "shop-001" || !strings.HasPrefix(resume.Reason, "resume job shop-001") {
		t.Fatalf("plan after the kill: %+v", resume)
	}
	out, _ := e.loomd(0, "apply", e.spec, "--local")
	if hist, _ := e.loomd(0, "cluster", "history", "shop", "--local"); !strings.Contains(hist, "interrupted") || !strings.Contains(hist, "resumed") {
		t.Errorf("history after the kill and the resume:\n%s", hist)
	}
	// Tasks that had not finished at the kill may run again; those
	// that had, never.
	fx := e.effects()
	e.checkOrder(create, fx, func(k string) bool { return !doneBefore[k] })
	for _, f := range fx {
		if f.greeting != "hello" {
			t.Errorf("%s saw greeting %q, want the cluster config's", f.key(), f.greeting)
		}
		// Coopr macros, expanded for the node: 2 web nodes, this one's
		// rank among them, the db node's address.
		want := "2//" + e.hosts[0].Host
		if n, ok := strings.CutPrefix(f.node, "shop-web-"); ok {
			want = "2/" + n + "/" + e.hosts[0].Host
		}
		if f.peers != want {
			t.Errorf("%s saw peers %q, want %q", f.key(), f.peers, want)
		}
	}
	e.onceEach(fx, doneBefore)
	for _, id := range []string{"shop-db-1", "shop-web-1", "shop-web-2"} {
		if !strings.Contains(out, id) || !strings.Contains(out, "127.0.0.1") {
			t.Errorf("summary lacks node %s with its address:\n%s", id, out)
		}
	}
	if s := e.readState(); s.Status != "active" || len(s.Nodes) != 3 {
		t.Fatalf("state after create: %+v", s)
	}
	if c := e.claims(); len(c) != 3 {
		t.Fatalf("claims after create: %v", c)
	}
	if out, _ := e.loomd(0, "plan", e.spec); !strings.Contains(out, "No changes") {
		t.Errorf("plan after apply:\n%s", out)
	}

	// Scale web 2 → 4 (3 → 5 nodes), then 4 → 1 (5 → 2 nodes): stop web on
	// 3 nodes, delete them.
	e.change(4, "hello", []string{"create", "reconfigure"}, 5)
	e.change(1, "hello", []string{"destroy", "reconfigure"}, 2)
	if s := e.readState(); len(s.Nodes) != 2 || s.Status != "active" {
		t.Fatalf("state after scale-down: %+v", s)
	}

	// Reconfigure: the greeting changes; services restart.
	fx = e.change(1, "bonjour", []string{"reconfigure"}, 2)
	order := []string{}
	for _, f := range fx {
		if f.greeting != "bonjour" {
			t.Errorf("%s saw greeting %q after the reconfigure", f.key(), f.greeting)
		}
		if f.task == "STOP" || f.task == "START" {
			order = append(order, f.task+" "+f.service)
		}
	}
	if got := strings.Join(order, ", "); got != "STOP web, STOP db, START db, START web" {
		t.Errorf("restart order %s; want web stopped first and started last", got)
	}

	// Destroy: stop web, then db, then delete every node.
	out, _ = e.loomd(0, "destroy", "shop", "--local")
	fx = e.effects()
	var stops []string
	for _, f := range fx {
		stops = append(stops, f.task+" "+f.service)
	}
	if strings.Join(stops, ", ") != "STOP web, STOP db" {
		t.Errorf("destroy effects: %v", stops)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("claims after destroy: %v", c)
	}
	if s := e.readState(); s.Status != "terminated" || len(s.Nodes) != 0 {
		t.Errorf("state after destroy: %+v\n%s", s, out)
	}
	list, _ := e.loomd(0, "cluster", "list")
	if strings.Contains(list, "shop") || !strings.Contains(list, "1 terminated cluster(s) not shown") {
		t.Errorf("cluster list:\n%s", list)
	}
	if list, _ = e.loomd(0, "cluster", "list", "--all"); !strings.Contains(list, "shop") || !strings.Contains(list, "terminated") {
		t.Errorf("cluster list --all:\n%s", list)
	}
	e.loomd(0, "cluster", "forget", "shop")
	if list, _ = e.loomd(0, "cluster", "list", "--all"); strings.Contains(list, "shop") {
		t.Errorf("cluster list --all after forget:\n%s", list)
	}
}

// change writes the spec, checks the plan's jobs, applies it, checks the
// effects against the plan and the number of hosts claimed, and returns
// the effects.
func (e *clusterEnv) change(web int, greeting string, actions []string, claims int) []effect {
	e.t.Helper()
	e.writeSpec(web, greeting)
	steps := e.plan()
	var got []string
	for _, st := range steps {
		got = append(got, st.Action)
	}
	if strings.Join(got, " ") != strings.Join(actions, " ") {
		e.t.Fatalf("plan for web=%d %s: jobs %v, want %v", web, greeting, got, actions)
	}
	e.loomd(0, "apply", e.spec, "--local")
	fx := e.effects()
	e.checkOrder(steps, fx, nil)
	if c := e.claims(); len(c) != claims {
		e.t.Fatalf("claims after web=%d: %v, want %d", web, c, claims)
	}
	return fx
}

// onceEach asserts each task of done ran exactly once.
func (e *clusterEnv) onceEach(fx []effect, done map[string]bool) {
	e.t.Helper()
	n := map[string]int{}
	for _, f := range fx {
		n[f.key()]++
	}
	for k := range done {
		if n[k] != 1 {
			e.t.Errorf("%s finished before the kill but ran %d times", k, n[k])
		}
	}
}

// waitRunning polls the cluster state (through loomd cluster get, which
// replays the running apply's journal) until the task is running, and
// returns the service tasks finished by then.
func (e *clusterEnv) waitRunning(steps []planStep, task, service string, exited chan struct{}, stderr fmt.Stringer) map[string]bool {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s %s never started:\n%s", task, service, stderr.String())
		}
		select {
		case <-exited:
			e.t.Fatalf("apply ended before %s %s:\n%s", task, service, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		data, err := e.cmd(context.Background(), "cluster", "get", "shop").Output()
		if err != nil {
			continue
		}
		var s clusterState
		if json.Unmarshal(data, &s) != nil || len(s.Jobs) == 0 {
			continue
		}
		for i, tk := range steps[0].Tasks {
			if tk.TaskName != task || tk.Service != service || s.Jobs[0].Tasks[strconv.Itoa(i)].Status != "running" {
				continue
			}
			done := map[string]bool{}
			for j, x := range steps[0].Tasks {
				if s.Jobs[0].Tasks[strconv.Itoa(j)].Status == "done" && x.Service != "" {
					done[x.TaskName+" "+x.Service+"@"+x.NodeID] = true
				}
			}
			return done
		}
	}
}

// TestClusterImport: a cluster whose state is in files (applied with
// --local) is not silently created anew through a daemon: plan and apply
// say where its state is and how to import it; loomd cluster import moves
// it into the daemon's store, once.
func TestClusterImport(t *testing.T) {
	dir := t.TempDir()
	writePlugin(t, filepath.Join(dir, "plugins"), "noop", "1")
	if err := os.CopyFS(filepath.Join(dir, "plugins", "static"), os.DirFS(filepath.Join(repoRoot(), "plugins", "static"))); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, "serve.log", nil)
	home := filepath.Join(dir, "home")
	fs := &state.FileStore{Dir: filepath.Join(home, ".local", "state", "loomd", "clusters")}
	spec := "name: old\nprovider: {type: static}\nnodegroups: [{name: n, count: 1, services: [s]}]\nservices: {s: {actions: {install: {type: noop}}}}\n"
	if err := os.WriteFile(filepath.Join(dir, "old.yaml"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	err := fs.Put(&state.Cluster{Name: "old", Status: state.Active, Spec: spec, SpecFile: "old.yaml", NextJob: 2, NextNum: 1001,
		Nodes: map[string]*state.Node{"old-n-1": {ID: "old-n-1", Num: 1000, Hostname: "old-n-1.local", State: state.NodeActive, Services: []string{"s"},
			IPAddresses: map[string]any{"access_v4": "192.0.2.1"},
			Results:     map[string]any{"providerid": "vm-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(want int, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(loomdBin, append(args, "--server", d.url())...)
		cmd.Dir = dir
		cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH")}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != want {
			t.Fatalf("loomd %v: exit %d, want %d\n%s%s", args, code, want, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	if _, errs := run(1, "plan", "old.yaml"); !strings.Contains(errs, "run 'loomd cluster import old --server "+d.url()+"'") {
		t.Errorf("plan of a cluster kept in files: %s", errs)
	}
	if _, errs := run(1, "apply", "old.yaml"); !strings.Contains(errs, "holds its state (applied with --local)") {
		t.Errorf("apply of a cluster kept in files: %s", errs)
	}
	if out, _ := run(0, "cluster", "import", "old"); !strings.Contains(out, "Cluster old (active, 1 nodes, 0 jobs) imported") {
		t.Errorf("import: %s", out)
	}
	if out, _ := run(0, "cluster", "get", "old"); !strings.Contains(out, `"providerid": "vm-1"`) {
		t.Errorf("get after import: %s", out)
	}
	if out, _ := run(0, "plan", "old.yaml"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after import: %s", out)
	}
	if _, errs := run(2, "cluster", "import", "old"); !strings.Contains(errs, "already in the store") {
		t.Errorf("second import: %s", errs)
	}
}
