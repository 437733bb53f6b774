package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/runtime"
)

const testSpec = `name: t
provider: {type: fake, fields: {region: r1}}
config: {answer: 42}
nodegroups:
  - {name: db, count: 1, flavor: small, services: [db]}
  - {name: web, count: 2, flavor: small, services: [web]}
services:
  db:
    actions:
      install: {type: sh, fields: {script: db}}
      start:   {type: sh, fields: {script: db}}
  web:
    runtime: {requires: [db]}
    actions:
      install: {type: sh, fields: {script: web}}
      start:   {type: sh, fields: {script: web}}
`

// fakeRunner records every task and answers from a script: fail[key]
// lists the statuses of successive runs of "TASKNAME@node".
type fakeRunner struct {
	mu      sync.Mutex
	log     []string
	tasks   []map[string]any
	fail    map[string][]int
	running map[string]bool
	maxPar  int
	par     int
	delay   time.Duration
	overlap bool
}

func (f *fakeRunner) Run(ctx context.Context, id string, data []byte) (*runtime.Result, error) {
	var task map[string]any
	if err := json.Unmarshal(data, &task); err != nil {
		return nil, err
	}
	node, _ := task["nodeId"].(string)
	name, _ := task["taskName"].(string)
	key := name + "@" + node
	f.mu.Lock()
	if f.running[node] {
		f.overlap = true
	}
	f.running[node] = true
	f.par++
	f.maxPar = max(f.maxPar, f.par)
	f.log = append(f.log, key)
	f.tasks = append(f.tasks, task)
	status := 0
	if seq := f.fail[key]; len(seq) > 0 {
		status, f.fail[key] = seq[0], seq[1:]
	}
	f.mu.Unlock()
	time.Sleep(f.delay)
	f.mu.Lock()
	f.running[node] = false
	f.par--
	f.mu.Unlock()
	res := &runtime.Result{Status: status, Result: map[string]any{}}
	switch {
	case name == "CREATE":
		res.Result["providerid"] = "vm-" + id
		res.Result["ssh-auth"] = map[string]any{"user": "root"}
	case name == "CONFIRM" && status == 0:
		res.IPAddresses = map[string]any{"access_v4": "10.0.0." + node[len(node)-1:]}
		res.Hostname = node + ".confirmed"
	}
	if status != 0 {
		res.Message = fmt.Sprintf("%s failed\nsecond line", key)
	}
	res.Result["last_"+strings.ToLower(name)] = id
	return res, nil
}

func parse(t testing.TB, src string) *spec.Spec {
	t.Helper()
	sp, err := spec.Parse("t.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// planChange plans sp against cl.
func planChange(t testing.TB, cl *state.Cluster, sp *spec.Spec, o PlanOptions) *Change {
	t.Helper()
	ch, err := Plan(Input{Cluster: cl, Spec: sp, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// run plans, begins and runs a change; it returns the cluster and job.
func run(t testing.TB, cl *state.Cluster, sp *spec.Spec, f *fakeRunner, o PlanOptions, eo Options) (*state.Cluster, *state.Job, *Change) {
	t.Helper()
	ch := planChange(t, cl, sp, o)
	if ch.Empty() && ch.Resume == nil {
		return cl, nil, ch
	}
	cl, job := Begin(cl, ch, time.Now())
	if f.running == nil {
		f.running = map[string]bool{}
	}
	eo.Runner = f
	if err := Run(context.Background(), cl, job, eo); err != nil {
		t.Fatal(err)
	}
	return cl, job, ch
}

func count(log []string, key string) int {
	n := 0
	for _, l := range log {
		if l == key {
			n++
		}
	}
	return n
}

// The job's last step ends in the job's own last save: a store that
// keeps a journal folds it there once, not again for a state no reader
// needs (the job past its last step, still running).
func TestRunSavesTheLastStepWithTheJob(t *testing.T) {
	f := &fakeRunner{}
	type seen struct {
		step   int
		status string
	}
	var saves []seen
	var job *state.Job
	_, job, _ = run(t, nil, parse(t, testSpec), f, PlanOptions{}, Options{Parallelism: 4,
		Save: func(cl *state.Cluster) error {
			j := cl.LastJob()
			saves = append(saves, seen{j.Step, j.Status})
			return nil
		},
		Journal: func(*state.Cluster, []state.Change) error { return nil }})
	if job.Status != state.JobComplete || len(job.Steps) != 1 {
		t.Fatalf("job %s (%s), %d steps", job.Status, job.Message, len(job.Steps))
	}
	for i, s := range saves {
		if s.step == len(job.Steps) && s.status == state.JobRunning {
			t.Errorf("save %d of %d: the job past its last step and still running: %+v", i+1, len(saves), saves)
		}
	}
	if last := saves[len(saves)-1]; last.step != 1 || last.status != state.JobComplete {
		t.Errorf("last save %+v, want step 1 complete", last)
	}
}

// A step's end is saved with what follows it (the next step, a rollback
// step, the job's end), not in a save of its own just before: a store
// that keeps a journal reads the whole cluster at each save. OnStep is
// told a step ended once its end is saved (the daemon mirrors it into
// the job record: the record never says more than the state).
func TestRunSavesAStepsEndWithWhatFollows(t *testing.T) {
	sp := parse(t, testSpec)
	created, _, _ := run(t, nil, sp, &fakeRunner{}, PlanOptions{}, Options{})
	// web down to one node and a new group: a destroy step, then a create.
	grown := parse(t, strings.Replace(testSpec, "  - {name: web, count: 2, flavor: small, services: [web]}\n",
		"  - {name: web, count: 1, flavor: small, services: [web]}\n  - {name: api, count: 1, flavor: small, services: [web]}\n", 1))
	for _, tc := range []struct {
		name  string
		cl    *state.Cluster
		sp    *spec.Spec
		f     *fakeRunner
		po    PlanOptions
		steps int
	}{
		{"two steps", created, grown, &fakeRunner{}, PlanOptions{}, 2},
		{"rollback", nil, sp, &fakeRunner{fail: map[string][]int{"INSTALL@t-db-1": {1, 1, 1}}}, PlanOptions{Rollback: true}, 2},
		{"failed", nil, sp, &fakeRunner{fail: map[string][]int{"INSTALL@t-db-1": {1, 1, 1}}}, PlanOptions{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type saved struct {
				step     int
				status   string
				statuses []string
			}
			var saves []saved
			var told int
			var job *state.Job
			_, job, _ = run(t, tc.cl, tc.sp, tc.f, tc.po, Options{Parallelism: 4,
				Save: func(cl *state.Cluster) error {
					j := cl.LastJob()
					s := saved{step: j.Step, status: j.Status}
					for _, st := range j.Steps {
						s.statuses = append(s.statuses, st.Status)
					}
					saves = append(saves, s)
					return nil
				},
				Journal: func(*state.Cluster, []state.Change) error { return nil },
				OnStep: func(k int, st *state.Step, _ *plan.Plan, done bool) {
					if !done {
						return
					}
					told++
					if last := saves[len(saves)-1]; k >= len(last.statuses) || last.statuses[k] != st.Status {
						t.Errorf("told step %d ended (%s) before its end was saved: last save %+v", k+1, st.Status, last)
					}
				}})
			if len(job.Steps) != tc.steps || told != tc.steps {
				t.Fatalf("job %s (%s): %d steps, told of %d ends, want %d", job.Status, job.Message, len(job.Steps), told, tc.steps)
			}
			for i, s := range saves {
				if s.status == state.JobRunning && s.step < len(s.statuses) && (s.statuses[s.step] == state.JobComplete || s.statuses[s.step] == state.JobFailed) {
					t.Errorf("save %d of %d: step %d ended, the job not past it and running (a save of its own): %+v", i+1, len(saves), s.step+1, saves)
				}
			}
		})
	}
}

func TestExecuteCreate(t *testing.T) {
	f := &fakeRunner{delay: 5 * time.Millisecond}
	saves := 0
	cl, job, ch := run(t, nil, parse(t, testSpec), f, PlanOptions{}, Options{Parallelism: 2, Save: func(*state.Cluster) error { saves++; return nil }})
	p := ch.Steps[0].Plan
	if job.Status != state.JobComplete || cl.Status != state.Active {
		t.Fatalf("job %s (%s), cluster %s", job.Status, job.Message, cl.Status)
	}
	if f.overlap {
		t.Errorf("two tasks ran on one node at once")
	}
	if f.maxPar > 2 {
		t.Errorf("%d tasks ran at once, over --parallelism 2", f.maxPar)
	}
	if len(f.log) != len(p.Tasks) || saves == 0 {
		t.Errorf("%d runs for %d tasks, %d saves", len(f.log), len(p.Tasks), saves)
	}
	// START web waits for START db.
	idx := map[string]int{}
	for i, k := range f.log {
		idx[k] = i
	}
	if idx["START@t-web-1"] < idx["START@t-db-1"] || idx["START@t-web-2"] < idx["START@t-db-1"] {
		t.Errorf("START web ran before START db: %v", f.log)
	}
	// Every node has its addresses before any service task (Coopr's
	// stages made it so): no BOOTSTRAP before the last CONFIRM.
	for _, b := range []string{"BOOTSTRAP@t-db-1", "BOOTSTRAP@t-web-1", "BOOTSTRAP@t-web-2"} {
		for _, c := range []string{"CONFIRM@t-db-1", "CONFIRM@t-web-1", "CONFIRM@t-web-2"} {
			if idx[b] < idx[c] {
				t.Errorf("%s ran before %s: %v", b, c, f.log)
			}
		}
	}
	// Results reach later tasks as Coopr did.
	for _, task := range f.tasks {
		cfg := task["config"].(map[string]any)
		node := task["nodeId"].(string)
		switch task["taskName"] {
		case "CONFIRM":
			if !strings.HasPrefix(fmt.Sprint(cfg["providerid"]), "vm-") || cfg["ssh-auth"] == nil {
				t.Errorf("CONFIRM of %s lacks CREATE's providerid/ssh-auth: %v", node, cfg)
			}
		case "INSTALL":
			ip, _ := cfg["ipaddresses"].(map[string]any)
			if ip["access_v4"] == nil || cfg["hostname"] != node+".confirmed" || cfg["last_confirm"] == nil {
				t.Errorf("INSTALL on %s lacks CONFIRM's results: %v", node, cfg)
			}
			cluster, _ := cfg["cluster"].(map[string]any)
			svc, _ := cfg["service"].(map[string]any)
			prov, _ := cfg["provider"].(map[string]any)
			if cluster["answer"] != float64(42) || svc["action"] == nil || prov["providertype"] != "fake" || cfg["nodes"] == nil {
				t.Errorf("INSTALL config: %v", cfg)
			}
		}
	}
	n := cl.Nodes["t-web-2"]
	if n.State != state.NodeActive || n.Address() != "10.0.0.2" || n.ProviderID() == "" {
		t.Errorf("node state %+v", n)
	}
}

// TestExecuteRetries: a failed CONFIRM becomes DELETE, CREATE, CONFIRM; a
// failed CREATE is retried only after a DELETE, unless it said it made
// nothing (2xx); other tasks are run again.
func TestExecuteRetries(t *testing.T) {
	f := &fakeRunner{fail: map[string][]int{
		"CONFIRM@t-db-1":  {1},
		"CREATE@t-web-1":  {1},
		"CREATE@t-web-2":  {201},
		"INSTALL@t-db-1":  {1, 1},
		"INSTALL@t-web-1": {1},
	}}
	cl, job, _ := run(t, nil, parse(t, testSpec), f, PlanOptions{}, Options{})
	var db, web1, web2 []string
	for _, k := range f.log {
		switch {
		case strings.HasSuffix(k, "@t-db-1"):
			db = append(db, strings.TrimSuffix(k, "@t-db-1"))
		case strings.HasSuffix(k, "@t-web-1"):
			web1 = append(web1, strings.TrimSuffix(k, "@t-web-1"))
		case strings.HasSuffix(k, "@t-web-2"):
			web2 = append(web2, strings.TrimSuffix(k, "@t-web-2"))
		}
	}
	if got := strings.Join(db, " "); got != "CREATE CONFIRM DELETE CREATE CONFIRM BOOTSTRAP INSTALL INSTALL INSTALL START" {
		t.Errorf("db node ran %s", got)
	}
	if got := strings.Join(web1, " "); got != "CREATE DELETE CREATE CONFIRM BOOTSTRAP INSTALL INSTALL START" {
		t.Errorf("web-1 ran %s (a failed CREATE must be followed by DELETE)", got)
	}
	if got := strings.Join(web2, " "); got != "CREATE CREATE CONFIRM BOOTSTRAP INSTALL START" {
		t.Errorf("web-2 ran %s (a CREATE that made nothing is retried directly)", got)
	}
	if job.Status != state.JobComplete || cl.Status != state.Active {
		t.Errorf("job %s %q, cluster %s", job.Status, job.Message, cl.Status)
	}
	// The DELETE before the retried CREATE forgot the old machine.
	for _, task := range f.tasks {
		if task["taskName"] == "CREATE" && task["nodeId"] == "t-web-1" {
			cfg := task["config"].(map[string]any)
			if _, ok := cfg["providerid"]; ok && cfg["last_delete"] != nil {
				t.Errorf("CREATE after DELETE still carries providerid %v", cfg["providerid"])
			}
		}
	}

}

// TestExecuteFailureResume: a task failing 3 times fails the job; nothing
// that depends on it runs; a resumed job runs it again and never a task
// that finished.
func TestExecuteFailureResume(t *testing.T) {
	f := &fakeRunner{fail: map[string][]int{"INSTALL@t-db-1": {1, 1, 1}}}
	sp := parse(t, testSpec)
	cl, job, _ := run(t, nil, sp, f, PlanOptions{}, Options{})
	if count(f.log, "INSTALL@t-db-1") != 3 || count(f.log, "START@t-db-1") != 0 || count(f.log, "START@t-web-1") != 0 {
		t.Errorf("runs: %v", f.log)
	}
	if job.Status != state.JobFailed || cl.Status != state.Incomplete || !strings.Contains(job.Message, "INSTALL db on t-db-1 failed: INSTALL@t-db-1 failed") {
		t.Errorf("job %s %q, cluster %s", job.Status, job.Message, cl.Status)
	}
	ran := map[string]bool{}
	for _, k := range f.log {
		ran[k] = true
	}
	// The same spec again resumes the job.
	ch := planChange(t, cl, sp, PlanOptions{})
	if ch.Resume != job {
		t.Fatalf("plan after a failure: %s", ch.Reason)
	}
	before := len(f.log)
	cl, job2, _ := run(t, cl, sp, f, PlanOptions{}, Options{})
	if job2 != job {
		t.Errorf("resume ran job %s, not %s", job2.ID, job.ID)
	}
	again := f.log[before:]
	for _, k := range again {
		if ran[k] && k != "INSTALL@t-db-1" {
			t.Errorf("resume ran %s again: %v", k, again)
		}
	}
	if job.Status != state.JobComplete || cl.Status != state.Active || count(again, "INSTALL@t-db-1") != 1 || count(again, "START@t-web-2") != 1 {
		t.Errorf("after resume: job %s %q, cluster %s, runs %v", job.Status, job.Message, cl.Status, again)
	}
}

// describe renders a change as "action: TASK svc@node, ..." per step.
func describe(ch *Change) string {
	var out []string
	for _, st := range ch.Steps {
		var ts []string
		for _, t := range st.Plan.Tasks {
			ts = append(ts, strings.TrimSpace(t.Name+" "+t.Service)+"@"+strings.TrimPrefix(t.Node, "t-"))
		}
		out = append(out, st.State.Action+": "+strings.Join(ts, ", "))
	}
	return strings.Join(out, " | ")
}

// TestPlanChanges: what apply plans against a cluster's state, task by
// task: only what changed.
func TestPlanChanges(t *testing.T) {
	f := &fakeRunner{}
	sp := parse(t, testSpec)
	cl, _, _ := run(t, nil, sp, f, PlanOptions{}, Options{})
	if ch := planChange(t, cl, sp, PlanOptions{}); !ch.Empty() {
		t.Fatalf("plan of an applied spec: %s", describe(ch))
	}
	withConfigure := strings.Replace(testSpec, "      start:   {type: sh, fields: {script: web}}", "      configure: {type: sh, fields: {script: web}}\n      start:   {type: sh, fields: {script: web}}\n      stop:   {type: sh, fields: {script: web}}", 1)
	withConfigure = strings.Replace(withConfigure, "      start:   {type: sh, fields: {script: db}}", "      configure: {type: sh, fields: {script: db}}\n      start:   {type: sh, fields: {script: db}}\n      stop:   {type: sh, fields: {script: db}}\n      remove:   {type: sh, fields: {script: db}}", 1)
	base := parse(t, withConfigure)
	cl, _, _ = run(t, nil, base, f, PlanOptions{}, Options{})
	for _, c := range []struct {
		from, to, want string
	}{
		{"count: 2", "count: 3",
			"create: CREATE@web-3, CONFIRM@web-3, BOOTSTRAP@web-3, INSTALL web@web-3, CONFIGURE web@web-3, START web@web-3 | " +
				"reconfigure: CONFIGURE db@db-1, CONFIGURE web@web-1, CONFIGURE web@web-2"},
		{"count: 2", "count: 1",
			"destroy: STOP web@web-2, DELETE@web-2 | reconfigure: CONFIGURE db@db-1, CONFIGURE web@web-1"},
		// The cluster config is every service's input: each reconfigures
		// and restarts, web (which depends on db) stopped first.
		{"answer: 42", "answer: 43",
			"reconfigure: STOP db@db-1, CONFIGURE db@db-1, START db@db-1, STOP web@web-1, CONFIGURE web@web-1, START web@web-1, STOP web@web-2, CONFIGURE web@web-2, START web@web-2"},
		// One field of web: web only.
		{"configure: {type: sh, fields: {script: web}}", "configure: {type: sh, fields: {script: web, args: x}}",
			"reconfigure: STOP web@web-1, CONFIGURE web@web-1, START web@web-1, STOP web@web-2, CONFIGURE web@web-2, START web@web-2"},
		// One field of db: db, and web restarts (it depends on db).
		{"configure: {type: sh, fields: {script: db}}", "configure: {type: sh, fields: {script: db, args: x}}",
			"reconfigure: STOP db@db-1, CONFIGURE db@db-1, START db@db-1, STOP web@web-1, START web@web-1, STOP web@web-2, START web@web-2"},
		// A service added to a group: installed there, nothing else.
		{"services: [db]}", "services: [db, web]}",
			"add-services: INSTALL web@db-1, CONFIGURE web@db-1, START web@db-1"},
		// A service defined and used nowhere: nothing.
		{"services:\n", "services:\n  unused:\n    actions: {install: {type: sh}}\n", ""},
		// A service dropped from a group: stopped (dependents first) and
		// removed there.
		{"services: [web]}", "services: []}",
			"remove-services: STOP web@web-1, STOP web@web-2"},
	} {
		ch := planChange(t, cl, parse(t, strings.Replace(withConfigure, c.from, c.to, 1)), PlanOptions{})
		if got := describe(ch); got != c.want {
			t.Errorf("%s → %s:\n got %s\nwant %s", c.from, c.to, got, c.want)
		}
	}
	// Destroy: stop what runs (dependents first), remove what is
	// installed, delete.
	ch := planChange(t, cl, base, PlanOptions{Destroy: true})
	if got, want := describe(ch), "destroy: STOP db@db-1, REMOVE db@db-1, DELETE@db-1, STOP web@web-1, DELETE@web-1, STOP web@web-2, DELETE@web-2"; got != want {
		t.Errorf("destroy:\n got %s\nwant %s", got, want)
	}
	ch = planChange(t, cl, base, PlanOptions{Destroy: true, NoRemove: true})
	if got := describe(ch); strings.Contains(got, "REMOVE") {
		t.Errorf("destroy --no-remove: %s", got)
	}
}

// TestRollback: --on-failure rollback destroys the nodes a failed create
// made, stops only what started, and the cluster ends terminated with
// nothing left.
func TestRollback(t *testing.T) {
	f := &fakeRunner{fail: map[string][]int{"INSTALL@t-db-1": {1, 1, 1}}}
	cl, job, _ := run(t, nil, parse(t, testSpec), f, PlanOptions{Rollback: true}, Options{})
	for _, n := range []string{"t-db-1", "t-web-1", "t-web-2"} {
		if count(f.log, "DELETE@"+n) != 1 {
			t.Errorf("rollback ran %v, want one DELETE of %s", f.log, n)
		}
	}
	if job.Status != state.JobRolledBack || cl.Status != state.Terminated || len(cl.Nodes) != 0 || len(job.Steps) != 2 {
		t.Errorf("after rollback: job %s, cluster %s, %d nodes, %d steps", job.Status, cl.Status, len(cl.Nodes), len(job.Steps))
	}
}

// TestResumeWithRollback: how a failure is handled is the resuming run's
// choice: a create that failed kept its nodes; resumed with rollback, it
// fails again and rolls back; the job is the same one.
func TestResumeWithRollback(t *testing.T) {
	f := &fakeRunner{fail: map[string][]int{"INSTALL@t-db-1": {1, 1, 1, 1, 1, 1}}}
	sp := parse(t, testSpec)
	cl, job, _ := run(t, nil, sp, f, PlanOptions{}, Options{})
	if job.Status != state.JobFailed || len(cl.Nodes) != 3 || count(f.log, "DELETE@t-db-1") != 0 {
		t.Fatalf("first run: job %s, %d nodes, ran %v", job.Status, len(cl.Nodes), f.log)
	}
	ch := planChange(t, cl, sp, PlanOptions{Rollback: true})
	if _, j := Begin(cl, ch, time.Now()); j != job || j.Status != state.JobRunning || j.Message != "" {
		t.Fatalf("a resumed job, once begun: %s %q", j.Status, j.Message)
	}
	cl, again, ch := run(t, cl, sp, f, PlanOptions{Rollback: true}, Options{})
	if ch.Resume != job || again != job {
		t.Fatalf("the second run did not resume job %s: %s", job.ID, ch.Reason)
	}
	if job.Status != state.JobRolledBack || cl.Status != state.Terminated || len(cl.Nodes) != 0 || count(f.log, "DELETE@t-db-1") != 1 {
		t.Errorf("resumed with rollback: job %s, cluster %s, %d nodes, ran %v", job.Status, cl.Status, len(cl.Nodes), f.log)
	}
}

// TestMacros: service tasks get the cluster config and their action's
// fields with Coopr macros expanded for their node, from the addresses
// the CONFIRMs returned; hardware tasks get them as written.
func TestMacros(t *testing.T) {
	src := strings.Replace(testSpec, "config: {answer: 42}", `config: {answer: 42, dbs: "%join(map(ip.access_v4.service.db,'$:5432'),' ')%", me: "%instance.self.service.web%/%num.service.web%"}`, 1)
	src = strings.Replace(src, "install: {type: sh, fields: {script: web}}", `install: {type: sh, fields: {script: web, args: "%host.service.db[0]% %host.self%"}}`, 1)
	sp := parse(t, src)
	f := &fakeRunner{running: map[string]bool{}}
	if _, job, _ := run(t, nil, sp, f, PlanOptions{}, Options{}); job.Status != state.JobComplete {
		t.Fatalf("%s", job.Message)
	}
	seen := 0
	for _, task := range f.tasks {
		cfg := task["config"].(map[string]any)
		cluster := cfg["cluster"].(map[string]any)
		switch name, node := task["taskName"], task["nodeId"]; {
		case name == "CREATE":
			if cluster["dbs"] != "%join(map(ip.access_v4.service.db,'$:5432'),' ')%" {
				t.Errorf("CREATE got an expanded config: %v", cluster)
			}
		case name == "INSTALL" && node == "t-web-2":
			seen++
			fields := cfg["service"].(map[string]any)["action"].(map[string]any)["fields"].(map[string]any)
			if cluster["dbs"] != "10.0.0.1:5432" || cluster["me"] != "2/2" || fields["args"] != "t-db-1.confirmed t-web-2.confirmed" {
				t.Errorf("INSTALL web on t-web-2: cluster %v, fields %v", cluster, fields)
			}
		}
	}
	if seen != 1 {
		t.Errorf("INSTALL web on t-web-2 ran %d times", seen)
	}
	if sp.Config["dbs"] != "%join(map(ip.access_v4.service.db,'$:5432'),' ')%" {
		t.Error("expansion changed the spec")
	}
}

// TestMacroNeverComplete: a macro wanting an address no CONFIRM gives
// fails the tasks that wait for it, with the reason, once nothing else
// can run.
func TestMacroNeverComplete(t *testing.T) {
	src := strings.Replace(testSpec, "config: {answer: 42}", `config: {db: "%ip.private_v4.service.db%"}`, 1)
	src = strings.Replace(src, "provider: {type: fake,", "provider: {type: fake, addresstypes: [private_v4],", 1)
	f := &fakeRunner{running: map[string]bool{}}
	_, job, _ := run(t, nil, parse(t, src), f, PlanOptions{}, Options{})
	if job.Status != state.JobFailed || !strings.Contains(job.Message, "node t-db-1 has no private_v4 address yet (its CONFIRM has not run)") {
		t.Fatalf("job %s: %s", job.Status, job.Message)
	}
	if count(f.log, "CONFIRM@t-web-2") != 1 || count(f.log, "BOOTSTRAP@t-web-2") != 0 {
		t.Errorf("ran: %v", f.log)
	}
}

// TestRefresh: a CONFIRM that fails is a lost node (destroyed and made
// again), a failing check a stopped service (started again, and what
// depends on it left alone), changed addresses reconfigure what uses them.
func TestRefresh(t *testing.T) {
	src := strings.Replace(testSpec, "      start:   {type: sh, fields: {script: db}}", "      start:   {type: sh, fields: {script: db}}\n      check:   {type: sh, fields: {script: db}}", 1)
	sp := parse(t, src)
	f := &fakeRunner{}
	cl, _, _ := run(t, nil, sp, f, PlanOptions{}, Options{})
	f.fail = map[string][]int{"CHECK@t-db-1": {1}, "CONFIRM@t-web-2": {1}}
	drift, err := Refresh(context.Background(), cl, sp, f, RefreshOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(drift) != 2 || drift[0].Node != "t-db-1" || drift[0].Kind != state.DriftStopped || drift[1].Node != "t-web-2" || drift[1].Kind != state.DriftLost {
		t.Fatalf("drift: %+v", drift)
	}
	ch, err := Plan(Input{Cluster: cl, Spec: sp, Drift: drift})
	if err != nil {
		t.Fatal(err)
	}
	want := "destroy: DELETE@web-2 | create: START db@db-1, CREATE@web-2, CONFIRM@web-2, BOOTSTRAP@web-2, INSTALL web@web-2, START web@web-2"
	if got := describe(ch); got != want {
		t.Fatalf("plan with drift:\n got %s\nwant %s", got, want)
	}
	f.fail = nil
	before := len(f.log)
	cl, job := Begin(cl, ch, time.Now())
	if err := Run(context.Background(), cl, job, Options{Runner: f}); err != nil || job.Status != state.JobComplete {
		t.Fatalf("running the drift's plan: %v %s", err, job.Message)
	}
	if got := strings.Join(f.log[before:], " "); !strings.Contains(got, "DELETE@t-web-2") || !strings.Contains(got, "START@t-db-1") {
		t.Errorf("ran %s", got)
	}
	if ss := cl.Nodes["t-db-1"].Svc["db"]; !ss.Started || ss.Drift != "" {
		t.Errorf("db after its start: %+v", ss)
	}
	if n := cl.Nodes["t-web-2"]; n.State != state.NodeActive || n.Lost != "" || n.ProviderID() == "" {
		t.Errorf("web-2 made again: %+v", n)
	}
	if ch := planChange(t, cl, sp, PlanOptions{}); !ch.Empty() {
		t.Errorf("after the repair: %s", describe(ch))
	}
}

// TestStartOrder: a dependency found not running is started before a
// dependent that is new (one step: their START edge holds).
func TestStartOrder(t *testing.T) {
	src := strings.Replace(testSpec, "      start:   {type: sh, fields: {script: db}}", "      start:   {type: sh, fields: {script: db}}\n      check:   {type: sh, fields: {script: db}}", 1)
	sp := parse(t, src)
	f := &fakeRunner{}
	cl, _, _ := run(t, nil, sp, f, PlanOptions{}, Options{})
	grown := parse(t, strings.Replace(src, "count: 2", "count: 3", 1))
	ch, err := Plan(Input{Cluster: cl, Spec: grown, Drift: []state.Drift{{Node: "t-db-1", Service: "db", Kind: state.DriftStopped, What: "check failed"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := ch.Steps[0].Plan
	var startDB, startWeb3 int = -1, -1
	for i, tk := range p.Tasks {
		switch {
		case tk.Name == "START" && tk.Node == "t-db-1":
			startDB = i
		case tk.Name == "START" && tk.Node == "t-web-3":
			startWeb3 = i
		}
	}
	if startDB < 0 || startWeb3 < 0 || !slices.Contains(p.Prereqs(startWeb3), startDB) {
		t.Errorf("START web on the new node does not wait for START db: %s", describe(ch))
	}
}
