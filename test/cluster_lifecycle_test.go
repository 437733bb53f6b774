package test

// The randomized lifecycle test (issue 21): sequences of random spec edits
// (scale up and down, add and remove a service, change a field, change the
// cluster config, change a script, service actions, destroy) interleaved
// with faults (kill -9 of the CLI mid-job, a failing action, a host down
// then back), each step applied until it succeeds; after each, invariants
// are checked on the hosts and in the store: the cluster matches the spec,
// every service is in the state the spec implies (files, process, config),
// no finished task ran twice, a destroy leaves no claim, process or file.
//
// Every LOOM_LIFECYCLE_DAEMON_EVERY-th sequence (default 4th; 0: none)
// runs through two loomd daemons sharing a 3-node NATS cluster instead of
// --local, with one more fault: kill -9 of the daemon that runs the job
// (the other takes it over; the killed one starts again), and a loomd
// older than the state journal (an announcement without its capability,
// see cluster_upgrade_test.go) joining or leaving before a change or, at
// a daemon's kill, mid-job: the job's journal is folded into the records
// before the kill, and the jobs write key by key while it is live.
//
// It runs with LOOM_LIFECYCLE=1 (make lifecycle): LOOM_LIFECYCLE_SEQUENCES
// sequences (default 10) of LOOM_LIFECYCLE_STEPS steps (default 6), no new
// sequence after LOOM_LIFECYCLE_BUDGET (default 4m). The seed is printed;
// LOOM_LIFECYCLE_SEED=<seed> replays a run, LOOM_LIFECYCLE_SEQ_SEED=<seed>
// one sequence of it (each sequence prints its own seed).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestClusterLifecycleRandom(t *testing.T) {
	if os.Getenv("LOOM_LIFECYCLE") == "" {
		t.Skip("the randomized lifecycle test runs with LOOM_LIFECYCLE=1 (make lifecycle)")
	}
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("LOOM_LIFECYCLE_SEED"), 10, 64); err == nil {
		seed = s
	}
	seqs, steps := envInt("LOOM_LIFECYCLE_SEQUENCES", 10), envInt("LOOM_LIFECYCLE_STEPS", 6)
	budget := 4 * time.Minute
	if d, err := time.ParseDuration(os.Getenv("LOOM_LIFECYCLE_BUDGET")); err == nil {
		budget = d
	}
	t.Logf("seed %d (replay: LOOM_LIFECYCLE_SEED=%d), %d sequences of %d steps, budget %v", seed, seed, seqs, steps, budget)
	rng := rand.New(rand.NewPCG(seed, 0x10014))
	start := time.Now()
	ran, faults := 0, map[string]int{}
	every := 4
	if v, err := strconv.Atoi(os.Getenv("LOOM_LIFECYCLE_DAEMON_EVERY")); err == nil && v >= 0 {
		every = v
	}
	if s, err := strconv.ParseUint(os.Getenv("LOOM_LIFECYCLE_SEQ_SEED"), 10, 64); err == nil {
		daemon := os.Getenv("LOOM_LIFECYCLE_SEQ_DAEMON") != ""
		t.Logf("sequence seed %d (daemon mode: %v)", s, daemon)
		lifecycleSequence(t, rand.New(rand.NewPCG(s, 0x10014)), steps, daemon, faults)
		t.Logf("faults: %v", faults)
		return
	}
	for i := 0; i < seqs; i++ {
		if time.Since(start) > budget {
			t.Logf("budget spent after %d sequences", i)
			break
		}
		s := rng.Uint64()
		daemon := every > 0 && i%every == every-1
		ok := t.Run(fmt.Sprintf("seq%d", i), func(t *testing.T) {
			t.Logf("sequence seed %d (daemon mode: %v)", s, daemon)
			lifecycleSequence(t, rand.New(rand.NewPCG(s, 0x10014)), steps, daemon, faults)
		})
		ran++
		if daemon {
			faults["daemon-sequences"]++
		}
		if !ok {
			replay := fmt.Sprintf("LOOM_LIFECYCLE_SEQ_SEED=%d", s)
			if daemon {
				replay += " LOOM_LIFECYCLE_SEQ_DAEMON=1"
			}
			t.Errorf("sequence %d failed (replay it with %s, the whole run with LOOM_LIFECYCLE_SEED=%d)", i, replay, seed)
		}
	}
	t.Logf("%d sequences in %v; faults: %v", ran, time.Since(start).Round(time.Second), faults)
}

// lcModel is what the spec says, and what the sequence did on top.
type lcModel struct {
	web       int  // web nodes (0-2)
	cache     bool // the web group carries cache
	tag       int  // web's configure field
	greeting  int  // the cluster config
	rev       int  // svc.sh's revision
	destroyed bool
	held      map[string]bool // "web@node" stopped by a stop action
}

func (m *lcModel) spec() regSpec {
	s := regSpec{db: 1, web: m.web, greeting: fmt.Sprintf("hello%d", m.greeting),
		webArgs: fmt.Sprintf("tag%d db=%%ip.access_v4.service.db%%", m.tag), extra: lcCache}
	s.webServices = []string{"web"}
	if m.cache {
		s.webServices = append(s.webServices, "cache")
	}
	return s
}

const lcCache = "  cache:\n    actions:\n      install: {type: shell, fields: {script: svc.sh}}\n      configure: {type: shell, fields: {script: svc.sh}}\n" +
	"      start: {type: shell, fields: {script: svc.sh}}\n      stop: {type: shell, fields: {script: svc.sh}}\n      remove: {type: shell, fields: {script: svc.sh}}\n"

// expected lists node → services.
func (m *lcModel) expected() map[string][]string {
	out := map[string][]string{}
	if m.destroyed {
		return out
	}
	out["shop-db-1"] = []string{"db"}
	for i := 1; i <= m.web; i++ {
		svcs := []string{"web"}
		if m.cache {
			svcs = append(svcs, "cache")
		}
		out[fmt.Sprintf("shop-web-%d", i)] = svcs
	}
	return out
}

// lcRun is one line of a host's effects log.
type lcRun struct {
	task, svc, node, runID string
}

type lcSeq struct {
	t     *testing.T
	e     *regEnv
	rng   *rand.Rand
	m     lcModel
	runs  map[string]int  // run id → times it ran (effects)
	flown map[string]bool // run ids in flight when the CLI (or daemon) was killed
	stats map[string]int
	// In daemon mode: the two daemons and how to start each again; the
	// store as another daemon sees it, and the older loomd's withdrawal
	// while it announces itself.
	daemons   [2]*daemon
	dargs     [2][]string
	view      *storeView
	stopOlder func()
}

func lifecycleSequence(t *testing.T, rng *rand.Rand, steps int, daemonMode bool, stats map[string]int) {
	e := newRegEnv(t, 4)
	e.write(filepath.Join(e.scripts(), "svc.sh"), lcScript(0), 0o755)
	s := &lcSeq{t: t, e: e, rng: rng, m: lcModel{web: 1, held: map[string]bool{}}, runs: map[string]int{}, flown: map[string]bool{}, stats: stats}
	if daemonMode {
		nc := startNATSCluster(t)
		for i, name := range []string{"a", "b"} {
			s.dargs[i] = append([]string{"--tenant", clTenant, "--ack-wait", "2s", "--known-hosts", e.known},
				nc.daemonArgs(filepath.Join(e.dir, "data-"+name))...)
			s.daemons[i] = startDaemon(t, e.dir, name+".log", nil, s.dargs[i]...)
		}
		e.server = s.daemons[0].url() + "," + s.daemons[1].url()
		s.view = openStoreView(t, s.daemons[0], connectNATS(t, strings.Join(nc.URLs(), ",")))
	}
	e.writeRegSpec(s.m.spec())
	s.apply("create", nil)
	for i := 0; i < steps; i++ {
		s.step(i)
	}
	if !s.m.destroyed {
		s.m.destroyed = true
		s.apply("final destroy", []string{"destroy", "shop", "--local"})
	}
}

// where drops --local in daemon mode: the command then goes to the
// daemons (e.server).
func (s *lcSeq) where(args []string) []string {
	if s.e.server == "" {
		return args
	}
	return slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--local" })
}

// owner is the daemon running the cluster's job (-1: none runs it).
func (s *lcSeq) owner() int {
	for _, d := range s.daemons {
		code, body := d.call("GET", "/v1/clusters/shop/job", "")
		if code != http.StatusOK {
			continue
		}
		var rec struct {
			State string `json:"state"`
			PID   int    `json:"pid"`
		}
		if json.Unmarshal(body, &rec) != nil || rec.State != "running" {
			return -1
		}
		for i, d := range s.daemons {
			if d.cmd.Process.Pid == rec.PID {
				return i
			}
		}
		return -1
	}
	return -1
}

// keep copies what explains a failure (the state, the daemons' logs, the
// job log of --local) out of the test's temporary dir, which goes away.
func (s *lcSeq) keep() string {
	dir, err := os.MkdirTemp("", "loom-lifecycle-fail-")
	if err != nil {
		return ""
	}
	if out, err := s.e.cmd(context.Background(), s.where([]string{"cluster", "get", "shop", "--local"})...).Output(); err == nil {
		os.WriteFile(filepath.Join(dir, "state.json"), out, 0o644)
	}
	for _, pat := range []string{filepath.Join(s.e.dir, "*.log"), filepath.Join(s.e.state, "*.log")} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			if data, err := os.ReadFile(f); err == nil {
				os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644)
			}
		}
	}
	return "state and logs kept in " + dir
}

// markFlown records the runs in flight now: they may run again. A CLI
// killed before its first save recorded nothing: the cluster is not
// there yet (nothing ran: a job is saved before its first task), and the
// apply that follows creates it.
func (s *lcSeq) markFlown(via ...string) {
	st, ok := s.stateIf(via...)
	if !ok {
		s.t.Logf("  nothing recorded yet")
		return
	}
	for _, j := range st.Jobs {
		for _, tk := range j.Tasks {
			for _, r := range tk.Runs {
				if r.Status == "running" {
					s.flown[r.ID] = true
				}
			}
		}
	}
}

// lcScript is svc.sh at a revision, logging each run's task id.
func lcScript(rev int) string {
	out := strings.Replace(svcScript, "$task $svc $node $(loom_lookup_key config/cluster/greeting) $*\" >> $d/effects.log",
		"$task $svc $node $(loom_lookup_key taskId) $*\" >> $d/effects.log", 1)
	if out == svcScript {
		panic("lcScript: svc.sh's effects line changed")
	}
	return out + fmt.Sprintf("# rev %d\n", rev)
}

// sshdtestProcs are the processes of one service on one node (not the
// forks of its loop caught before their exec).
func sshdtestProcs(token, svc, node string) []int {
	return sshdtest.TopProcessesMatching("loomfx-" + token + "-" + svc + "-" + node)
}

// step makes one random change, with a random fault, and checks.
func (s *lcSeq) step(i int) {
	m := &s.m
	var what string
	var args []string // nil: apply the spec
	if m.destroyed {
		m.destroyed, what = false, "create again"
	} else {
		switch s.rng.IntN(9) {
		case 0, 1:
			n := s.rng.IntN(3)
			if n == m.web {
				n = (n + 1) % 3
			}
			what = fmt.Sprintf("scale web %d -> %d", m.web, n)
			for j := n + 1; j <= m.web; j++ {
				delete(m.held, fmt.Sprintf("web@shop-web-%d", j))
			}
			m.web = n
		case 2:
			m.cache = !m.cache
			what = fmt.Sprintf("cache on web: %v", m.cache)
		case 3:
			m.tag++
			what = "change web's field"
		case 4:
			m.greeting++
			what = "change the cluster config"
		case 5:
			m.rev++
			what = fmt.Sprintf("change svc.sh (rev %d)", m.rev)
			s.e.write(filepath.Join(s.e.scripts(), "svc.sh"), lcScript(m.rev), 0o755)
		case 6:
			if m.web == 0 {
				what = "restart db"
				args = []string{"apply", s.e.spec, "--local", "--action", "restart", "--service", "db"}
				break
			}
			node := fmt.Sprintf("shop-web-%d", 1+s.rng.IntN(m.web))
			if m.held["web@"+node] {
				what = "start web on " + node
				delete(m.held, "web@"+node)
				args = []string{"apply", s.e.spec, "--local", "--action", "start", "--service", "web", "--node", node}
			} else {
				what = "stop web on " + node
				m.held["web@"+node] = true
				args = []string{"apply", s.e.spec, "--local", "--action", "stop", "--service", "web", "--node", node}
			}
		case 7:
			what = "restart web"
			args = []string{"apply", s.e.spec, "--local", "--action", "restart", "--service", "web"}
			if m.web == 0 {
				args[len(args)-1] = "db"
			}
			for k := range m.held {
				delete(m.held, k) // a restart starts the stopped ones too
			}
		case 8:
			what = "destroy"
			m.destroyed = true
			m.held = map[string]bool{}
			args = []string{"destroy", "shop", "--local"}
		}
	}
	s.e.writeRegSpec(m.spec())
	s.apply(fmt.Sprintf("step %d: %s", i+1, what), args)
}

// apply runs a change to its end, maybe through a fault first, then
// checks the invariants.
func (s *lcSeq) apply(what string, args []string) {
	t, e := s.t, s.e
	if args == nil {
		args = []string{"apply", e.spec, "--local"}
	}
	args = s.where(args)
	fault := "none"
	switch r := s.rng.IntN(10); {
	case r < 2:
		fault = "kill"
	case r < 4:
		fault = "fail"
	case r < 5:
		fault = "down"
	case r < 7 && e.server != "":
		fault = "daemon"
	}
	t.Logf("%s (fault: %s)", what, fault)
	s.stats[fault]++
	if s.view != nil && s.rng.IntN(4) == 0 {
		s.toggleOlder()
	}
	switch fault {
	case "kill":
		p := e.start(append(append([]string(nil), args...), "--log-format", "json")...)
		s.waitActivity(p)
		p.kill9()
		s.collect()
		// What was in flight may run again (locally, a killed run is run
		// again by its id); nothing that finished may.
		s.markFlown()
	case "daemon":
		// kill -9 of the daemon running the job: the other takes it over,
		// the CLI follows through it; the killed one starts again.
		p := e.start(append(append([]string(nil), args...), "--log-format", "json")...)
		s.waitActivity(p)
		if i := s.owner(); i >= 0 {
			if s.stopOlder == nil && s.rng.IntN(2) == 0 {
				s.toggleOlder() // mid-job
			}
			if s.stopOlder != nil {
				// What the older daemon would read if it took the job
				// over: the records alone, complete.
				s.view.waitFolded(s.daemons[i])
			}
			t.Logf("  daemon %c (running the job) killed", 'a'+i)
			addr := s.daemons[i].addr
			s.daemons[i].kill9()
			s.markFlown("--server", s.daemons[1-i].url())
			s.daemons[i] = startDaemon(t, e.dir, fmt.Sprintf("%c.log", 'a'+i), nil, append(s.dargs[i], "--listen", addr)...)
		}
		if code := p.wait(t, 4*time.Minute); code != 0 && code != 1 {
			t.Fatalf("%s across a daemon's death: exit %d\n%s\n%s", what, code, p.stdout.String(), lastLines(p.stderr.String(), 20))
		}
	case "fail":
		task, svc := s.pickTask(args)
		if task != "" {
			t.Logf("  %s %s fails", task, svc)
			e.inject(task, svc)
			code := s.run(args)
			e.clearInjected(task, svc)
			if code != 1 {
				t.Fatalf("%s with %s %s failing: exit %d, want 1", what, task, svc, code)
			}
		}
	case "down":
		if h := s.pickHost(); h >= 0 {
			t.Logf("  host h%d down", h+1)
			if err := e.hosts[h].Down(); err != nil {
				t.Fatal(err)
			}
			code := s.run(args)
			if err := e.hosts[h].Up(); err != nil {
				t.Fatal(err)
			}
			if code != 0 && code != 1 {
				t.Fatalf("%s with a host down: exit %d", what, code)
			}
		}
	}
	// A resume applies the same change: for a service action, the action
	// again (its job is resumed, or a new one runs it).
	if code := s.run(args); code != 0 {
		t.Fatalf("%s: exit %d after the fault %s", what, code, fault)
	}
	s.collect()
	s.check(what)
}

// toggleOlder makes a loomd older than the state journal announce itself
// (once both daemons saw it, their jobs write key by key), or leave.
func (s *lcSeq) toggleOlder() {
	if s.stopOlder != nil {
		s.t.Logf("  the older loomd leaves")
		s.stopOlder()
		s.stopOlder = nil
		return
	}
	s.t.Logf("  an older loomd (no cluster-journal capability) joins")
	s.stats["older"]++
	var seen [2]int
	for i, d := range s.daemons {
		seen[i] = d.logCount(seesOlder)
	}
	s.stopOlder = s.view.olderDaemon()
	for i, d := range s.daemons {
		d.waitFor("the daemon seeing the older loomd", func() bool { return d.logCount(seesOlder) > seen[i] })
	}
}

// run runs a loomd command to its end and returns its exit status.
func (s *lcSeq) run(args []string) int {
	p := s.e.start(args...)
	code := p.wait(s.t, 4*time.Minute)
	if code != 0 {
		s.t.Logf("  loomd %s: exit %d\n%s\n%s", strings.Join(args[:min(len(args), 3)], " "), code, lastLines(p.stdout.String(), 12), lastLines(p.stderr.String(), 4))
	}
	return code
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// waitActivity waits for the job to do something (a new effect, or the
// CLI to end), or a little while.
func (s *lcSeq) waitActivity(p *proc) {
	base := s.effectCount()
	end := time.Now().Add(time.Duration(1+s.rng.IntN(3)) * time.Second)
	for time.Now().Before(end) {
		select {
		case <-p.exited:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if s.effectCount() > base && s.rng.IntN(3) == 0 {
			return
		}
	}
}

func (s *lcSeq) effectCount() int {
	n := 0
	for _, h := range s.e.hosts {
		data, _ := os.ReadFile(h.HostPath(fxLog))
		n += strings.Count(string(data), "\n")
	}
	return n
}

// pickTask picks a service task the plan of args runs ("" when none).
func (s *lcSeq) pickTask(args []string) (string, string) {
	pargs := []string{"plan", s.e.spec, "--local", "--json"}
	switch {
	case args[0] == "destroy":
		pargs = []string{"plan", "--destroy", "shop", "--local", "--json"}
	case slices.Contains(args, "--action"):
		pargs = append(pargs, args[slices.Index(args, "--action"):]...)
	}
	out, _ := s.e.loomd(0, s.where(pargs)...)
	var doc planDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		s.t.Fatalf("plan --json: %v\n%s", err, out)
	}
	var cands [][2]string
	for _, st := range doc.Steps {
		for _, tk := range st.Tasks {
			if tk.Service != "" {
				cands = append(cands, [2]string{tk.TaskName, tk.Service})
			}
		}
	}
	if len(cands) == 0 {
		return "", ""
	}
	c := cands[s.rng.IntN(len(cands))]
	return c[0], c[1]
}

// pickHost picks a claimed host (-1 when none).
func (s *lcSeq) pickHost() int {
	var claimed []int
	for h := range s.e.claimsOrNone() {
		i, _ := strconv.Atoi(strings.TrimPrefix(h, "h"))
		claimed = append(claimed, i-1)
	}
	if len(claimed) == 0 {
		return -1
	}
	slices.Sort(claimed)
	return claimed[s.rng.IntN(len(claimed))]
}

func (e *regEnv) claimsOrNone() map[string]string {
	if _, err := os.Stat(filepath.Join(e.work, clTenant, "providertypes", "static", "claims.json")); err != nil {
		return map[string]string{}
	}
	return e.claims()
}

// collect moves every host's effects into runs.
func (s *lcSeq) collect() {
	for _, h := range s.e.hosts {
		p := h.HostPath(fxLog)
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			if len(f) >= 5 {
				s.runs[f[4]]++
			}
		}
		os.WriteFile(p, nil, 0o644)
	}
}

// lcState is what the checks read of 'loomd cluster get'.
type lcState struct {
	Status string `json:"status"`
	Nodes  map[string]struct {
		State string `json:"state"`
		Svc   map[string]struct {
			Installed bool              `json:"installed"`
			Started   bool              `json:"started"`
			Held      bool              `json:"held"`
			Done      map[string]string `json:"done"`
		} `json:"svc"`
	} `json:"nodes"`
	Jobs []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Tasks  map[string]struct {
			Name    string `json:"taskName"`
			Service string `json:"service"`
			Status  string `json:"status"`
			Runs    []struct {
				ID     string `json:"taskId"`
				Status string `json:"status"`
			} `json:"runs"`
		} `json:"tasks"`
	} `json:"jobs"`
}

// state reads the cluster's state (via: flags saying where, else the
// sequence's).
func (s *lcSeq) state(via ...string) lcState {
	st, ok := s.stateIf(via...)
	if !ok {
		s.t.Fatalf("cluster shop: no such cluster\n%s", s.keep())
	}
	return st
}

// stateIf is state, false when the cluster was never recorded.
func (s *lcSeq) stateIf(via ...string) (lcState, bool) {
	var st lcState
	args := s.where(append([]string{"cluster", "get", "shop", "--local"}, via...))
	var out, errb strings.Builder
	cmd := s.e.cmd(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if strings.Contains(errb.String(), "no such cluster") {
			return st, false
		}
		s.t.Fatalf("loomd %v: %v\n%s", args, err, errb.String())
	}
	if err := json.Unmarshal([]byte(out.String()), &st); err != nil {
		s.t.Fatal(err)
	}
	return st, true
}

// check asserts the invariants.
func (s *lcSeq) check(what string) {
	t, e, m := s.t, s.e, &s.m
	st := s.state()
	want := m.expected()
	fail := func(format string, a ...any) {
		t.Helper()
		ids := slices.Sorted(maps.Keys(s.runs))
		t.Fatalf("after %s: "+format+"\nruns seen on the hosts: %v\n%s", append(append([]any{what}, a...), ids, s.keep())...)
	}
	// The store: the cluster matches the spec, its last job completed.
	if j := st.Jobs[len(st.Jobs)-1]; j.Status != "complete" {
		fail("the last job %s is %s", j.ID, j.Status)
	}
	wantStatus := "active"
	if m.destroyed {
		wantStatus = "terminated"
	}
	if st.Status != wantStatus || len(st.Nodes) != len(want) {
		fail("cluster %s with %d nodes, want %s with %d", st.Status, len(st.Nodes), wantStatus, len(want))
	}
	for node, svcs := range want {
		n, ok := st.Nodes[node]
		if !ok || n.State != "active" {
			fail("node %s is %q", node, n.State)
		}
		var have []string
		for name, ss := range n.Svc {
			have = append(have, name)
			held := m.held[name+"@"+node]
			if ss.Started == held || ss.Held != held || !ss.Installed || ss.Done["install"] == "" {
				fail("%s on %s: %+v (held %v)", name, node, ss, held)
			}
		}
		slices.Sort(have)
		if !slices.Equal(have, slices.Sorted(slices.Values(svcs))) {
			fail("node %s records services %v, want %v", node, have, svcs)
		}
	}
	// The hosts: one claim per node; on each node's host, its services'
	// files, config and processes; elsewhere nothing.
	claims := e.claimsOrNone()
	if len(claims) != len(want) {
		fail("claims %v for nodes %v", claims, want)
	}
	byHost := map[int]string{}
	for h, node := range claims {
		i, _ := strconv.Atoi(strings.TrimPrefix(h, "h"))
		byHost[i-1] = node
		if _, ok := want[node]; !ok {
			fail("host %s is claimed by %s, which the spec does not have", h, node)
		}
	}
	for i, h := range e.hosts {
		node, ok := byHost[i]
		var svcs []string
		if ok {
			svcs = want[node]
		}
		var dirs []string
		for _, d := range e.svcDirs(h) {
			dirs = append(dirs, strings.TrimPrefix(d, "svc-"))
		}
		slices.Sort(dirs)
		if !slices.Equal(dirs, slices.Sorted(slices.Values(svcs))) {
			fail("host h%d (node %q) holds the files of %v, want %v", i+1, node, dirs, svcs)
		}
		for _, svc := range svcs {
			cfg, _ := os.ReadFile(h.HostPath(fxDir + "/svc-" + svc + "/config"))
			if !strings.Contains(string(cfg), fmt.Sprintf("hello%d", m.greeting)) || svc == "web" && !strings.Contains(string(cfg), fmt.Sprintf("tag%d ", m.tag)) {
				fail("%s on %s has a stale config %q", svc, node, cfg)
			}
		}
		if ok {
			shipped, _ := os.ReadFile(h.HostPath("/var/cache/loom/shell/scripts/svc.sh"))
			if !strings.Contains(string(shipped), fmt.Sprintf("# rev %d\n", m.rev)) {
				fail("host h%d runs a stale svc.sh (want rev %d)", i+1, m.rev)
			}
		}
	}
	procs := 0
	for node, svcs := range want {
		for _, svc := range svcs {
			n := len(sshdtestProcs(e.token, svc, node))
			if want := !m.held[svc+"@"+node]; (n == 1) != want || n > 1 {
				fail("%d process(es) of %s on %s, held %v", n, svc, node, m.held[svc+"@"+node])
			}
			procs += n
		}
	}
	if total := e.processes(); total != procs {
		fail("%d service processes run, want %d (a removed node or service left one)", total, procs)
	}
	// No finished task ran twice: a run recorded done ran once (unless it
	// was in flight when the CLI was killed: run again by its id).
	for _, j := range st.Jobs {
		for idx, tk := range j.Tasks {
			if tk.Service == "" {
				continue
			}
			for _, r := range tk.Runs {
				if r.Status == "done" && s.runs[r.ID] != 1 && !(s.flown[r.ID] && s.runs[r.ID] == 2) {
					fail("task %s #%s (%s %s) run %s ran %d times", j.ID, idx, tk.Name, tk.Service, r.ID, s.runs[r.ID])
				}
			}
		}
	}
}
