package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// TestApplyRollback: loomd apply --local --on-failure rollback reports the
// failed create, then destroys what it made; the next plan is a create.
func TestApplyRollback(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"plugins/p/p.json": `{"name": "p", "providertypes": ["p"], "p": {"name": "p", "classname": "P",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/p/p.lua": `local loom = require("loom")
P = loom.Provider:extend("P")
function P:create(input) self.result.result.providerid = "m-" .. self.task.nodeId end
function P:confirm(input) self.result.ipaddresses = { access_v4 = "192.0.2.7" } end
function P:delete(input) log.info("deleted %s", tostring(input.providerid)) end
return P
`,
		"plugins/a/a.json": `{"name": "a", "automatortypes": ["a"], "a": {"name": "a", "classname": "A",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/a/a.lua": `local loom = require("loom")
A = loom.Automator:extend("A")
function A:bootstrap(input) end
function A:install(input) error({kind = "config", message = "no package for " .. self.task.nodeId}, 0) end
return A
`,
		"c.yaml": `name: c
provider: {type: p}
nodegroups: [{name: n, count: 2, services: [s]}]
services:
  s: {actions: {install: {type: a}}}
`,
	}
	for rel, c := range files {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		a := testApp(map[string]string{"HOME": dir}, &out, &errb)
		args = append(args, "--plugins", filepath.Join(dir, "plugins"), "--work-dir", filepath.Join(dir, "work"),
			"--state-dir", filepath.Join(dir, "state"))
		code := a.Execute(args)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("apply", filepath.Join(dir, "c.yaml"), "--local", "--on-failure", "rollback", "--yes")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"Job c-001 rolled-back: INSTALL s on c-n-", "failed: no package for c-n-", "step 2: roll back failed step 1: destroy the 2 node(s) it created: complete",
		"Cluster c: terminated (job c-001, apply: rolled-back"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(errs, "deleted m-c-n-") != 2 {
		t.Errorf("the provider did not delete both machines:\n%s", errs)
	}
	// Each step's summary (the failed step's once its end is saved, with
	// the rollback step it led to: 1 of 2); the job log keeps the
	// executor's and the plugins' lines of both jobs.
	if !strings.Contains(out, "Step 1/2, create (new cluster): failed") || !strings.Contains(out, "Step 2/2, rollback (--on-failure rollback: roll back failed step 1") {
		t.Errorf("step summaries:\n%s", out)
	}
	if code, logs, _ := run("cluster", "logs", "c", "--local"); code != 0 || strings.Count(logs, "deleted m-c-n-") != 2 ||
		!strings.Contains(logs, "task failed") || !strings.Contains(logs, "step 2/2: rollback") {
		t.Errorf("cluster logs --local: %d\n%s", code, logs)
	}
	if code, logs, _ := run("cluster", "logs", "c", "--local", "--job", "c-001", "--json"); code != 0 || strings.Contains(logs, `"job":"c-002"`) || !strings.Contains(logs, `"job":"c-001"`) {
		t.Errorf("cluster logs --job c-001 --json: %d\n%s", code, logs)
	}
	if code, hist, _ := run("cluster", "history", "c", "--local"); code != 0 || !strings.Contains(hist, "started") || !strings.Contains(hist, "loomd apply --local") {
		t.Errorf("history: %d\n%s", code, hist)
	}
	if code, out, _ := run("plan", filepath.Join(dir, "c.yaml")); code != 0 || !strings.Contains(out, "Plan: apply c: new cluster") {
		t.Errorf("plan after the rollback: %d\n%s", code, out)
	}
	if code, _, errs := run("apply", filepath.Join(dir, "c.yaml"), "--local", "--on-failure", "undo"); code != 2 || !strings.Contains(errs, "want keep or rollback") {
		t.Errorf("bad --on-failure: %d %s", code, errs)
	}
}

// TestPlanCommand: loomd plan prints the table, --json and --dot; a bad
// spec exits 2 with file:line.
func TestPlanCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "c.yaml")
	os.WriteFile(good, []byte(`name: c
provider: {type: p}
nodegroups: [{name: n, count: 2, services: [s, w]}]
services:
  s: {actions: {install: {type: a}, start: {type: a}}}
  w: {runtime: {requires: [s]}, actions: {start: {type: a}}}
`), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: c\nprovider: {type: p}\nnodegroups: [{name: n, count: 1, services: [x]}]\n"), 0o644)
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := testApp(map[string]string{"HOME": dir}, &out, &errb).Execute(append(args, "--state-dir", filepath.Join(dir, "state")))
		return code, out.String(), errb.String()
	}
	code, out, _ := run("plan", good)
	if code != 0 || !strings.Contains(out, "Plan: apply c: new cluster (12 task(s) in 1 step(s))") || !strings.Contains(out, "create cluster c: 12 tasks on 2 nodes") ||
		!strings.Contains(out, "START s on 2 nodes") {
		t.Errorf("plan: %d\n%s", code, out)
	}
	code, out, _ = run("plan", good, "--json")
	if code != 0 || !strings.Contains(out, `"format": "loomd-plan"`) || !strings.Contains(out, `"reason": "new cluster"`) || !strings.Contains(out, `"taskName": "CONFIRM"`) {
		t.Errorf("plan --json: %d\n%s", code, out)
	}
	code, out, _ = run("plan", good, "--dot")
	if code != 0 || !strings.HasPrefix(out, "digraph ") || !strings.Contains(out, "->") || strings.Count(out, "{") != strings.Count(out, "}") {
		t.Errorf("plan --dot: %d\n%s", code, out)
	}
	code, _, errs := run("plan", bad)
	if code != 2 || !strings.Contains(errs, bad+`:3: node group "n" lists service "x"`) {
		t.Errorf("bad spec: %d %s", code, errs)
	}
	code, _, errs = run("plan", good, "--action", "explode")
	if code != 2 || !strings.Contains(errs, `unknown service action "explode"`) {
		t.Errorf("bad action: %d %s", code, errs)
	}
}

// TestRedactCluster: cluster get never prints passwords, keys or the spec.
func TestRedactCluster(t *testing.T) {
	cl := &state.Cluster{Name: "c", Spec: "provider: {fields: {ssh_password: hunter2}}", Nodes: map[string]*state.Node{
		"n": {ID: "n", Results: map[string]any{"providerid": "m1", "ssh-auth": map[string]any{"user": "root", "password": "hunter2"},
			"api_token": "t0k", "ssh_host_keys": map[string]any{"ed25519": "AAAA"}}}},
		Jobs: []*state.Job{{ID: "c-001", Spec: "ssh_password: hunter2"}}}
	data, _ := json.Marshal(cl.Redacted())
	out := string(data)
	if strings.Contains(out, "hunter2") || strings.Contains(out, "t0k") || !strings.Contains(out, "AAAA") || !strings.Contains(out, "m1") {
		t.Errorf("redacted: %s", out)
	}
	if cl.Nodes["n"].Results["api_token"] != "t0k" {
		t.Errorf("redaction changed the state itself")
	}
}

// twoNodePlan is the create plan of cluster c: node group n of two nodes
// with service s.
func twoNodePlan(t *testing.T) *plan.Plan {
	t.Helper()
	sp, err := spec.Parse("c.yaml", []byte(`name: c
provider: {type: p}
nodegroups: [{name: n, count: 2, services: [s]}]
services:
  s: {actions: {install: {type: a}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	w, err := plan.CooprWork(sp, sp.Nodes(), plan.Create, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(plan.Input{Spec: sp, Nodes: sp.Nodes(), Action: plan.Create, Work: w})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLiveView: the terminal view shows progress per stage, running tasks
// with their elapsed time and failures with their message.
func TestLiveView(t *testing.T) {
	p := twoNodePlan(t)
	var buf bytes.Buffer
	v := newLiveView(&buf, p, &state.Job{ID: "c-001"})
	t0 := time.Now()
	v.observe(apply.Event{Task: 0, Run: "CREATE", Status: "done", Time: t0})
	v.observe(apply.Event{Task: 1, Run: "CONFIRM", Status: "running", Time: t0})
	v.observe(apply.Event{Task: 4, Run: "CREATE", Status: "failed", Message: "quota exceeded", Time: t0})
	v.close()
	frame := buf.String()
	frame = frame[strings.LastIndex(frame, "job c-001"):]
	for _, want := range []string{"job c-001 create: 1/8 tasks done, 1 running, 1 failed", "stage 1: 1/2 done, 0 running, 0 pending, 1 failed or retrying", "running  c-n-1", "CONFIRM",
		"failed   c-n-2        CREATE: quota exceeded"} {
		if !strings.Contains(frame, want) {
			t.Errorf("frame lacks %q:\n%s", want, frame)
		}
	}
}

// TestSummary: the summary names every node with its address and every
// failed task with its message (a task that never started included), and
// the command that resumes the job.
func TestSummary(t *testing.T) {
	p := twoNodePlan(t)
	job := &state.Job{ID: "c-001", Action: "apply", Status: state.JobFailed, Message: "CREATE on c-n-2 failed: quota", Tasks: map[int]*state.Task{},
		TaskCount: len(p.Tasks)}
	for i, tk := range p.Tasks {
		job.Tasks[i] = &state.Task{Status: state.TaskDone, Name: tk.Name, Node: tk.Node, Service: tk.Service}
		switch {
		case tk.Name == "CREATE" && tk.Node == "c-n-2":
			job.Tasks[i].Status, job.Tasks[i].Runs = state.TaskFailed, []state.Run{{ID: "c-001-0005-3", Name: "CREATE", Message: "quota exceeded"}}
		case tk.Name == "INSTALL" && tk.Node == "c-n-1":
			job.Tasks[i].Status, job.Tasks[i].Message = state.TaskFailed, "macro %ip.service.s%: node c-n-2 has no bind_v4 address yet"
		}
	}
	cl := &state.Cluster{Name: "c", Status: state.Incomplete, Nodes: map[string]*state.Node{
		"c-n-1": {ID: "c-n-1", Num: 1000, Hostname: "c-n-1.local", State: state.NodeCreated, IPAddresses: map[string]any{"access_v4": "192.0.2.1"}},
		"c-n-2": {ID: "c-n-2", Num: 1001, Hostname: "c-n-2.local", State: state.NodeNew}}}
	var out bytes.Buffer
	a := &App{Out: &out}
	o := &clusterOptions{local: true}
	if err := a.printClusterSummary(cl, job, o.retryCommand("apply", "c.yaml")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Cluster c: incomplete (job c-001, apply: failed", "c-n-1  c-n-1.local  192.0.2.1", "c-n-2  c-n-2.local  -",
		"failed: CREATE on c-n-2 (task c-001-0005-3, CREATE, 1 runs): quota exceeded",
		"failed: INSTALL s on c-n-1 (never started): macro %ip.service.s%",
		"run 'loomd apply c.yaml --local' again: it resumes job c-001"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}
