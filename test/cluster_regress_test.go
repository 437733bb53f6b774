package test

// Regression tests for issue 21's bugs, each against real sshd hosts (one
// per loopback sshd with its own /var/lib/loom-fx and /var/cache/loom, so
// they act as separate machines), the static provider and the shell
// automator running svc.sh: a stand-in service with state on its host
// (installed, configured, a process while started) and failures injected
// by a file on the host.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/sshdtest"
)

// svcScript is a stand-in service: every run appends "<ns> <taskName>
// <service> <nodeId> <greeting> <args>" to the host's effects log; a file
// fail-<TASK>-<service> on the host fails that task; hold/gate as
// effect.sh. INSTALL makes /var/lib/loom-fx/svc-<service>, CONFIGURE
// writes its config there, START runs a process named
// loomfx-<token>-<service>-<node> (its pid in the dir), STOP kills it and
// fails on a service never installed (a script that assumes its install),
// REMOVE removes the dir, CHECK says whether the process runs.
const svcScript = `#!/bin/sh
set -e
d=` + fxDir + `
task=$(loom_lookup_key taskName)
svc=$(loom_lookup_key config/service/name)
node=$(loom_lookup_key nodeId)
mkdir -p $d
echo "$(date +%s%N) $task $svc $node $(loom_lookup_key config/cluster/greeting) $*" >> $d/effects.log
if [ -e $d/fail-$task-$svc ]; then echo "injected failure of $task $svc on $node" >&2; exit 1; fi
if [ -e $d/hold ] && [ "$task $svc" = "$(cat $d/hold)" ]; then
	i=0
	while [ ! -e $d/gate ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
fi
s=$d/svc-$svc
case "$task" in
INSTALL) mkdir -p $s; echo installed > $s/installed ;;
CONFIGURE) [ -d $s ] || { echo "$svc is not installed" >&2; exit 3; }; echo "$(loom_lookup_key config/cluster/greeting) $*" > $s/config ;;
INITIALIZE) [ -d $s ] || exit 3; touch $s/initialized ;;
START)
	[ -d $s ] || { echo "$svc is not installed" >&2; exit 3; }
	# One START or STOP at a time: a run the killed apply left going on
	# the host and its resumed run must not both start a process.
	exec 9>$s/.lock; flock 9
	st=$(sed 's/.*) //' /proc/$(cat $s/pid 2>/dev/null || echo 0)/stat 2>/dev/null | cut -d' ' -f1)
	if [ -n "$st" ] && [ "$st" != Z ]; then exit 0; fi
	rm -f $s/pid
	setsid sh -c 'echo $$ > "$1"; while :; do sleep 1; done' loomfx-$(loom_lookup_key config/cluster/token)-$svc-$node $s/pid </dev/null >/dev/null 2>&1 9>&- &
	i=0; while [ ! -s $s/pid ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done ;;
STOP)
	[ -d $s ] || { echo "$svc was never installed: nothing to stop" >&2; exit 4; }
	exec 9>$s/.lock; flock 9
	if [ -s $s/pid ]; then kill "$(cat $s/pid)" 2>/dev/null || true; rm -f $s/pid; fi ;;
REMOVE) rm -rf $s ;;
CHECK)
	# Alive, and not a zombie nobody reaped (a container's init may not).
	pid=$(cat $s/pid 2>/dev/null || true)
	st=$(sed 's/.*) //' /proc/$pid/stat 2>/dev/null | cut -d' ' -f1)
	if [ -z "$pid" ] || [ -z "$st" ] || [ "$st" = Z ]; then echo "$svc is not running" >&2; exit 1; fi ;;
esac
`

// regEnv is a cluster env with svc.sh and a token naming its processes.
type regEnv struct {
	*clusterEnv
	token string
}

func newRegEnv(t *testing.T, hosts int) *regEnv {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	e := &regEnv{clusterEnv: newClusterEnv(t, hosts), token: hex.EncodeToString(b[:])}
	e.write(filepath.Join(e.scripts(), "svc.sh"), svcScript, 0o755)
	t.Cleanup(func() {
		// The service processes are this test's (their name holds its
		// token): none may outlive it.
		for _, pid := range sshdtest.ProcessesMatching("loomfx-" + e.token) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return e
}

// TestRegSpecToken: the token naming a test's service processes reaches
// the hosts as written. Unquoted, a token of decimal digits with a
// leading zero (00881509, about 1 in 400 random tokens) was a YAML number
// (881509): svc.sh named its processes after that, the checks found none
// of the token's ("0 process(es) of web" right after a create, in a
// sequence its seed replayed fine: the token is not the seed's), and the
// cleanup left them running.
func TestRegSpecToken(t *testing.T) {
	for _, token := range []string{"00881509", "12345678", "1234e567", "0a1b2c3d"} {
		e := &regEnv{clusterEnv: &clusterEnv{t: t, spec: filepath.Join(t.TempDir(), "shop.yaml")}, token: token}
		e.writeRegSpec(regSpec{db: 1, web: 1})
		data, err := os.ReadFile(e.spec)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := spec.Parse(e.spec, data)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(sp.Config["token"]); got != token {
			t.Errorf("token %s reads %q in the spec's config", token, got)
		}
	}
}

func (e *regEnv) scripts() string {
	return filepath.Join(e.work, clTenant, "automatortypes", "shell", "scripts")
}

// regSpec is what the spec says; the zero value is one db, two web.
type regSpec struct {
	db, web  int
	greeting string
	// webArgs are web's configure args (macros allowed).
	webArgs string
	// webServices are the web group's services (default [web]).
	webServices []string
	// stopScript is the stop action's script of web (default svc.sh).
	stopScript string
	// stopArgs are web's stop args.
	stopArgs string
	// extra is more services (YAML lines under services:).
	extra string
}

func (e *regEnv) writeRegSpec(s regSpec) {
	if s.greeting == "" {
		s.greeting = "hello"
	}
	if s.webServices == nil {
		s.webServices = []string{"web"}
	}
	if s.stopScript == "" {
		s.stopScript = "svc.sh"
	}
	if s.webArgs == "" {
		s.webArgs = "db=%ip.access_v4.service.db%"
	}
	act := func(script, args string) string {
		if args == "" {
			return fmt.Sprintf("{type: shell, fields: {script: %s}}", script)
		}
		return fmt.Sprintf("{type: shell, fields: {script: %s, args: %q}}", script, args)
	}
	e.write(e.spec, fmt.Sprintf(`name: shop
provider:
  type: static
  fields: {confirm_wait: "3", ssh_timeout: "3"}
config:
  greeting: %s
  token: "%s"
nodegroups:
  - {name: db, count: %d, flavor: small, image: debian12, services: [db]}
  - {name: web, count: %d, flavor: small, image: debian12, services: [%s]}
services:
  db:
    provides: [database]
    actions:
      install:   %s
      configure: %s
      start:     %s
      stop:      %s
      remove:    %s
      check:     %s
  web:
    runtime: {requires: [database]}
    actions:
      install:   %s
      configure: %s
      start:     %s
      stop:      %s
      remove:    %s
      check:     %s
%s`, s.greeting, e.token, s.db, s.web, strings.Join(s.webServices, ", "),
		act("svc.sh", ""), act("svc.sh", ""), act("svc.sh", ""), act("svc.sh", ""), act("svc.sh", ""), act("svc.sh", ""),
		act("svc.sh", ""), act("svc.sh", s.webArgs), act("svc.sh", ""), act(s.stopScript, s.stopArgs), act("svc.sh", ""), act("svc.sh", ""),
		s.extra), 0o644)
}

// fxLines reads and clears every host's effects as "TASK svc@node" (with
// the args after a space when withArgs), in time order.
func (e *regEnv) fxLines() []string {
	e.t.Helper()
	var out []string
	for _, f := range e.effects() {
		out = append(out, f.task+" "+f.service+"@"+f.node)
	}
	return out
}

// inject makes TASK of svc fail on every host (until cleared).
func (e *regEnv) inject(task, svc string) {
	for _, h := range e.hosts {
		e.write(h.HostPath(fxDir+"/fail-"+task+"-"+svc), "", 0o644)
	}
}

func (e *regEnv) clearInjected(task, svc string) {
	for _, h := range e.hosts {
		os.Remove(h.HostPath(fxDir + "/fail-" + task + "-" + svc))
	}
}

// hostOf is the sshd a node's claim holds.
func (e *regEnv) hostOf(node string) *sshdtest.Server {
	e.t.Helper()
	for h, n := range e.claims() {
		if n == node {
			i, _ := strconv.Atoi(strings.TrimPrefix(h, "h"))
			return e.hosts[i-1]
		}
	}
	e.t.Fatalf("node %s holds no host: %v", node, e.claims())
	return nil
}

// svcFiles lists what a service left on the node's host (its dir).
func (e *regEnv) svcDirs(h *sshdtest.Server) []string {
	entries, _ := os.ReadDir(h.HostPath(fxDir))
	var out []string
	for _, en := range entries {
		if strings.HasPrefix(en.Name(), "svc-") {
			out = append(out, en.Name())
		}
	}
	return out
}

// processes counts this test's service processes (not the forks of their
// loops caught before their exec).
func (e *regEnv) processes() int { return len(sshdtest.TopProcessesMatching("loomfx-" + e.token)) }

func has(lines []string, want ...string) bool {
	for _, w := range want {
		if !slices.Contains(lines, w) {
			return false
		}
	}
	return true
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// TestRegressScale: bugs 1 and 2. A failed scale-up, fixed and resumed,
// finishes its second step (the nodes that stay are reconfigured with the
// new node list); a scale-down killed -9 mid-way and run again ends well
// and reconfigures the nodes that stay. Each change is one job.
func TestRegressScale(t *testing.T) {
	e := newRegEnv(t, 4)
	e.writeRegSpec(regSpec{db: 1, web: 1})
	e.loomd(0, "apply", e.spec, "--local")
	e.fxLines()

	// Bug 1: web 1 -> 2 with INSTALL web failing on the new node; web's
	// configure args name the web nodes, so db... the web nodes that stay
	// get them; fix, resume.
	e.writeRegSpec(regSpec{db: 1, web: 2, webArgs: "%join(host.service.web,'+')%"})
	e.inject("INSTALL", "web")
	out, _ := e.loomd(1, "apply", e.spec, "--local")
	if !strings.Contains(out, "resumes job shop-002") {
		t.Errorf("the failed scale-up does not say how to resume:\n%s", out)
	}
	e.clearInjected("INSTALL", "web")
	if p := e.planDoc(); p.Resume != "shop-002" || len(p.Steps) != 2 {
		t.Fatalf("plan after the failure: %+v", p)
	}
	e.loomd(0, "apply", e.spec, "--local")
	fx := e.fxLines()
	if !has(fx, "INSTALL web@shop-web-2", "CONFIGURE web@shop-web-1", "START web@shop-web-2") {
		t.Errorf("the resumed scale-up did not finish both steps: %v", fx)
	}
	if cfg, _ := os.ReadFile(e.hostOf("shop-web-1").HostPath(fxDir + "/svc-web/config")); !strings.Contains(string(cfg), "shop-web-1.local+shop-web-2.local") {
		t.Errorf("web on the node that stayed has a stale node list: %q", cfg)
	}
	if out, _ := e.loomd(0, "plan", e.spec, "--local"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after the resumed scale-up:\n%s", out)
	}

	// Bug 2: web 2 -> 1, the CLI killed -9 while STOP web runs.
	e.writeRegSpec(regSpec{db: 1, web: 1, webArgs: "%join(host.service.web,'+')%"})
	e.hold("STOP web")
	p := e.start("apply", e.spec, "--local", "--log-format", "json")
	e.waitEffect("STOP web", p)
	p.kill9()
	e.gate()
	out, errs := e.loomd(0, "apply", e.spec, "--local")
	if !strings.Contains(out, "Cluster shop: active") {
		t.Errorf("the rerun scale-down:\n%s\n%s", out, errs)
	}
	fx = e.fxLines()
	if !has(fx, "CONFIGURE web@shop-web-1") {
		t.Errorf("the nodes that stay were not reconfigured: %v", fx)
	}
	if cfg, _ := os.ReadFile(e.hostOf("shop-web-1").HostPath(fxDir + "/svc-web/config")); strings.Contains(string(cfg), "shop-web-2") {
		t.Errorf("web still lists the removed node: %q", cfg)
	}
	if c := e.claims(); len(c) != 2 {
		t.Errorf("claims after the scale-down: %v", c)
	}
	if out, _ := e.loomd(0, "plan", e.spec, "--local"); !strings.Contains(out, "No changes") {
		t.Errorf("plan after the scale-down:\n%s", out)
	}
	hist, _ := e.loomd(0, "cluster", "history", "shop", "--local")
	jobs := 0
	for _, l := range strings.Split(hist, "\n") {
		if strings.HasPrefix(l, "shop-00") {
			jobs++
		}
	}
	if jobs != 3 {
		t.Errorf("each change is one job:\n%s", hist)
	}
}

// TestRegressDestroyAlwaysFinishes: bugs 3, 4 and 11. A node whose CREATE
// failed (no free host) and another whose CREATE failed after claiming a
// host (no providerid came back) are destroyed, rollback and destroy
// alike: no STOP where nothing started, no connection to a node without
// an address, every claim released; destroy runs REMOVE and leaves no
// file and no process.
func TestRegressDestroyAlwaysFinishes(t *testing.T) {
	e := newRegEnv(t, 3)
	// 4 nodes on 3 hosts: web-3's CREATE finds no free host.
	e.writeRegSpec(regSpec{db: 1, web: 3})
	out, _ := e.loomd(1, "apply", e.spec, "--local")
	if !strings.Contains(out, "Cluster shop: incomplete") {
		t.Fatalf("create with too few hosts:\n%s", out)
	}
	e.fxLines()
	out, errs := e.loomd(0, "destroy", "shop", "--local")
	if !strings.Contains(out, "Cluster shop: terminated") {
		t.Fatalf("destroy of the incomplete cluster:\n%s\n%s", out, errs)
	}
	fx := e.fxLines()
	if strings.Contains(errs, "connecting on") || strings.Contains(errs, "never confirmed") {
		t.Errorf("destroy connected to a node without an address:\n%s", errs)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("claims after destroy: %v", c)
	}
	for _, h := range e.hosts {
		if d := e.svcDirs(h); len(d) != 0 {
			t.Errorf("destroy left %v on a host (REMOVE never ran)", d)
		}
	}
	if n := e.processes(); n != 0 {
		t.Errorf("destroy left %d service processes", n)
	}

	// Rollback, bug 4: INSTALL db fails, nothing started: the rollback
	// runs no STOP (STOP of a service never installed fails), removes
	// what INSTALL may have left, releases every host.
	e.writeRegSpec(regSpec{db: 1, web: 2})
	e.inject("INSTALL", "db")
	out, _ = e.loomd(1, "apply", e.spec, "--local", "--on-failure", "rollback")
	e.clearInjected("INSTALL", "db")
	fx = e.fxLines()
	if !strings.Contains(out, "rolled-back") || countPrefix(fx, "STOP") != 0 {
		t.Errorf("rollback: STOP of services never started: %v\n%s", fx, out)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("claims after the rollback: %v\n%s", c, out)
	}

	// Bug 11: a CREATE that claims a host and then fails with no
	// providerid (the static provider cannot write the node's key: its
	// ssh_keys is a file). The rollback DELETEs the node anyway: the
	// provider finds the claim by the node.
	inv := filepath.Join(e.work, clTenant, "providertypes", "static", "inventory.json")
	data, _ := os.ReadFile(inv)
	var doc map[string]any
	json.Unmarshal(data, &doc)
	hosts := doc["hosts"].([]any)
	for _, h := range hosts {
		hm := h.(map[string]any)
		key, _ := os.ReadFile(filepath.Join(e.work, clTenant, "providertypes", "static", hm["key_file"].(string)))
		delete(hm, "key_file")
		hm["key"] = string(key)
	}
	data, _ = json.Marshal(doc)
	e.write(inv, string(data), 0o600)
	keys := filepath.Join(e.work, clTenant, "providertypes", "static", "ssh_keys")
	os.RemoveAll(keys)
	e.write(keys, "not a directory", 0o600)
	e.writeRegSpec(regSpec{db: 1, web: 0})
	out, _ = e.loomd(1, "apply", e.spec, "--local", "--on-failure", "rollback")
	if !strings.Contains(out, "rolled-back") {
		t.Fatalf("create failing after its claim:\n%s", out)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("the rollback skipped the node whose CREATE failed without providerid: claims %v\n%s", c, out)
	}
}

// TestRegressFixedScriptReachesDestroy: bug 5. A destroy whose stop script
// is broken fails; the script fixed in the work dir is shipped before the
// destroy runs again (BOOTSTRAP), and a spec with a fixed stop action
// given to destroy is used, not the one last applied.
func TestRegressFixedScriptReachesDestroy(t *testing.T) {
	e := newRegEnv(t, 2)
	broken := "#!/bin/sh\necho 'stop-web.sh: broken' >&2\nexit 7\n"
	e.write(filepath.Join(e.scripts(), "stop-web.sh"), broken, 0o755)
	e.writeRegSpec(regSpec{db: 1, web: 1, stopScript: "stop-web.sh"})
	e.loomd(0, "apply", e.spec, "--local")
	out, _ := e.loomd(1, "destroy", "shop", "--local")
	if !strings.Contains(out, "stop-web.sh: broken") {
		t.Fatalf("destroy with a broken stop script:\n%s", out)
	}
	e.write(filepath.Join(e.scripts(), "stop-web.sh"), "#!/bin/sh\nexec svc.sh \"$@\"\n", 0o755)
	e.fxLines()
	out, errs := e.loomd(0, "destroy", "shop", "--local")
	if !strings.Contains(out, "Cluster shop: terminated") || !strings.Contains(errs, "shipped") {
		t.Fatalf("destroy after fixing the script:\n%s\n%s", out, errs)
	}

	// The same with the stop action's args, fixed in a spec given to
	// destroy: svc.sh fails its STOP with the broken args.
	e.write(filepath.Join(e.scripts(), "stop-web.sh"), "#!/bin/sh\n[ \"$1\" = broken ] && { echo 'stop-web.sh: bad args' >&2; exit 8; }\nexec svc.sh \"$@\"\n", 0o755)
	e.writeRegSpec(regSpec{db: 1, web: 1, stopScript: "stop-web.sh", stopArgs: "broken"})
	e.loomd(0, "apply", e.spec, "--local")
	if out, _ := e.loomd(1, "destroy", "shop", "--local"); !strings.Contains(out, "bad args") {
		t.Fatalf("destroy with broken args:\n%s", out)
	}
	e.writeRegSpec(regSpec{db: 1, web: 1, stopScript: "stop-web.sh", stopArgs: "ok"})
	if out, errs := e.loomd(0, "destroy", e.spec, "--local"); !strings.Contains(out, "Cluster shop: terminated") {
		t.Fatalf("destroy SPEC with the fixed args:\n%s\n%s", out, errs)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("claims: %v", c)
	}
}

// TestRegressMinimalChanges: bugs 6 and 7. One field of one service: that
// service only, on its nodes; a service added to one group: installed
// there, nothing else; a service defined and used nowhere: no change; a
// service dropped from a group: stopped and removed there. Every time,
// what ran is exactly what the plan printed (and --json has its shape).
func TestRegressMinimalChanges(t *testing.T) {
	e := newRegEnv(t, 3)
	cache := "  cache:\n    actions:\n      install: {type: shell, fields: {script: svc.sh}}\n      start: {type: shell, fields: {script: svc.sh}}\n      stop: {type: shell, fields: {script: svc.sh}}\n      remove: {type: shell, fields: {script: svc.sh}}\n"
	e.writeRegSpec(regSpec{db: 1, web: 2})
	e.loomd(0, "apply", e.spec, "--local")
	e.fxLines()
	step := func(s regSpec, want string, flags ...string) {
		t.Helper()
		e.writeRegSpec(s)
		steps := e.planDoc(flags...).Steps
		e.loomd(0, append([]string{"apply", e.spec, "--local"}, flags...)...)
		fx := e.effects()
		e.checkOrder(steps, fx, nil)
		var got []string
		for _, f := range fx {
			got = append(got, f.task+" "+f.service+"@"+f.node)
		}
		slices.Sort(got)
		if strings.Join(got, ", ") != want {
			t.Errorf("ran %s\nwant %s", strings.Join(got, ", "), want)
		}
	}
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned"},
		"CONFIGURE web@shop-web-1, CONFIGURE web@shop-web-2, START web@shop-web-1, START web@shop-web-2, STOP web@shop-web-1, STOP web@shop-web-2")
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned", extra: cache}, "")
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned", extra: cache, webServices: []string{"web", "cache"}},
		"INSTALL cache@shop-web-1, INSTALL cache@shop-web-2, START cache@shop-web-1, START cache@shop-web-2")
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned", extra: cache},
		"REMOVE cache@shop-web-1, REMOVE cache@shop-web-2, STOP cache@shop-web-1, STOP cache@shop-web-2")
	for _, h := range e.hosts {
		if slices.Contains(e.svcDirs(h), "svc-cache") {
			t.Errorf("cache left its files on a host after it was dropped")
		}
	}
	// --no-remove: dropped, it is stopped and its files stay.
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned", extra: cache, webServices: []string{"web", "cache"}},
		"INSTALL cache@shop-web-1, INSTALL cache@shop-web-2, START cache@shop-web-1, START cache@shop-web-2")
	step(regSpec{db: 1, web: 2, webArgs: "db=%ip.access_v4.service.db% tuned", extra: cache},
		"STOP cache@shop-web-1, STOP cache@shop-web-2", "--no-remove")
	kept := 0
	for _, h := range e.hosts {
		if slices.Contains(e.svcDirs(h), "svc-cache") {
			kept++
		}
	}
	if kept != 2 {
		t.Errorf("--no-remove: cache's files are on %d host(s), want the 2 web hosts", kept)
	}
	if doc := e.planDoc(); doc.Tasks != 0 || len(doc.Steps) != 0 {
		t.Errorf("plan --json of no change: %+v", doc)
	}
}

// TestRegressSavedPlan: bug 7. plan -o saves a plan; apply PLAN runs
// exactly its tasks, or refuses (exit 2) once the cluster changed; an
// interactive apply without a terminal refuses without --yes.
func TestRegressSavedPlan(t *testing.T) {
	e := newRegEnv(t, 3)
	e.writeRegSpec(regSpec{db: 1, web: 1})
	planFile := filepath.Join(e.dir, "plan.json")
	e.loomd(0, "plan", e.spec, "--local", "-o", planFile)
	if _, errs := e.loomd(2, "apply", e.spec, "--local", "--yes=false"); !strings.Contains(errs, "stdin is not a terminal") {
		t.Errorf("apply without a terminal and without --yes:\n%s", errs)
	}
	e.writeRegSpec(regSpec{db: 1, web: 2}) // the file changes; the saved plan holds the old text
	e.loomd(0, "apply", planFile, "--local")
	if s := e.readState(); len(s.Nodes) != 2 || s.Status != "active" {
		t.Errorf("the saved plan did not run as saved: %+v", s)
	}
	// The cluster changed since: the old plan is refused, nothing runs.
	e.fxLines()
	if _, errs := e.loomd(2, "apply", planFile, "--local"); !strings.Contains(errs, "not in the state the plan was made from") {
		t.Errorf("applying a stale plan:\n%s", errs)
	}
	if fx := e.fxLines(); len(fx) != 0 {
		t.Errorf("a refused plan ran %v", fx)
	}
	e.loomd(0, "destroy", "shop", "--local")
}

// TestRegressActionsAndDrift: bugs 9 and 11. apply --action restart of one
// service on one node runs that (and what depends on it); a stopped
// service stays stopped across applies; a service process killed behind
// loomd's back is drift for plan --refresh, and apply --refresh starts it.
// Run locally, then through a daemon (which plans, refreshes and runs).
func TestRegressActionsAndDrift(t *testing.T) {
	t.Run("local", func(t *testing.T) { actionsAndDrift(t, false) })
	t.Run("daemon", func(t *testing.T) { actionsAndDrift(t, true) })
}

func actionsAndDrift(t *testing.T, daemon bool) {
	e := newRegEnv(t, 3)
	if daemon {
		d := startDaemon(t, e.dir, "d.log", nil, "--tenant", clTenant, "--known-hosts", e.known)
		e.server = d.url()
	}
	where := func(args ...string) []string {
		if daemon {
			return args
		}
		return append(args, "--local")
	}
	e.writeRegSpec(regSpec{db: 1, web: 2})
	e.loomd(0, where("apply", e.spec)...)
	e.fxLines()

	e.loomd(0, where("apply", e.spec, "--action", "restart", "--service", "web", "--node", "shop-web-2")...)
	if fx := e.fxLines(); strings.Join(fx, ", ") != "STOP web@shop-web-2, START web@shop-web-2" {
		t.Errorf("restart web on shop-web-2 ran %v", fx)
	}
	// Restarting db restarts web too (it depends on db at runtime).
	e.loomd(0, where("apply", e.spec, "--action", "restart", "--service", "db")...)
	if fx := e.fxLines(); !has(fx, "STOP db@shop-db-1", "START db@shop-db-1", "STOP web@shop-web-1", "START web@shop-web-2") {
		t.Errorf("restart db ran %v", fx)
	}
	// A stop holds: apply leaves web stopped; start brings it back.
	e.loomd(0, where("apply", e.spec, "--action", "stop", "--service", "web", "--node", "shop-web-1")...)
	e.fxLines()
	if out, _ := e.loomd(0, where("plan", e.spec)...); !strings.Contains(out, "No changes") || !strings.Contains(out, "was stopped by a stop action") {
		t.Errorf("plan after a stop action:\n%s", out)
	}
	// Both stopped: starting one leaves the other stopped.
	e.loomd(0, where("apply", e.spec, "--action", "stop", "--service", "web", "--node", "shop-web-2")...)
	e.fxLines()
	e.loomd(0, where("apply", e.spec, "--action", "start", "--service", "web", "--node", "shop-web-1")...)
	if fx := e.fxLines(); strings.Join(fx, ", ") != "START web@shop-web-1" {
		t.Errorf("start web on shop-web-1 ran %v", fx)
	}
	e.loomd(0, where("apply", e.spec, "--action", "start", "--service", "web", "--node", "shop-web-2")...)
	if fx := e.fxLines(); strings.Join(fx, ", ") != "START web@shop-web-2" {
		t.Errorf("start web on shop-web-2 ran %v", fx)
	}

	// A process killed behind loomd's back.
	pid, _ := os.ReadFile(e.hostOf("shop-web-2").HostPath(fxDir + "/svc-web/pid"))
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatalf("web's pid on shop-web-2: %q", pid)
	}
	syscall.Kill(n, syscall.SIGKILL)
	time.Sleep(200 * time.Millisecond)
	if out, _ := e.loomd(0, where("plan", e.spec)...); !strings.Contains(out, "No changes") {
		t.Errorf("plan without --refresh sees no drift:\n%s", out)
	}
	out, _ := e.loomd(0, where("plan", e.spec, "--refresh")...)
	if !strings.Contains(out, "Drift: web on shop-web-2: its check failed") || !strings.Contains(out, "START   web") && !strings.Contains(out, "START") {
		t.Errorf("plan --refresh:\n%s", out)
	}
	e.fxLines()
	e.loomd(0, where("apply", e.spec, "--refresh")...)
	if fx := e.fxLines(); !has(fx, "START web@shop-web-2") || countPrefix(fx, "START") != 1 || countPrefix(fx, "CHECK") != 3 {
		t.Errorf("apply --refresh ran %v", fx)
	}
	if out, _ := e.loomd(0, where("plan", e.spec, "--refresh")...); !strings.Contains(out, "No changes") {
		t.Errorf("plan --refresh after the repair:\n%s", out)
	}
	e.loomd(0, where("destroy", "shop")...)
	if n := e.processes(); n != 0 {
		t.Errorf("destroy left %d service processes", n)
	}
}

// TestRegressValidation: bug 8. plan refuses, before anything runs and all
// at once, each at its own line with a suggestion: an unknown provider
// type, a misspelt macro address type, a requires naming a near alias.
func TestRegressValidation(t *testing.T) {
	e := newRegEnv(t, 1)
	e.write(e.spec, `name: shop
provider:
  type: statik
config:
  db: "%ip.acess_v4.service.db%"
nodegroups:
  - {name: db, count: 1, services: [db]}
  - {name: web, count: 1, services: [web]}
services:
  db:
    provides: [foundation]
    actions: {install: {type: shell, fields: {script: svc.sh}}}
  web:
    runtime:
      requires: [fundation]
    actions: {install: {type: shell, fields: {script: svc.sh}}}
`, 0o644)
	_, errs := e.loomd(2, "plan", e.spec, "--local")
	for _, want := range []string{`shop.yaml:3: provider type "statik" is not a loaded provider plugin`, `(did you mean "static"?)`,
		`shop.yaml:5: config: macro %ip.acess_v4.service.db% names address type "acess_v4"`, `(did you mean "access_v4"?)`,
		`shop.yaml:15: service "web": runtime.requires names "fundation"`, `(did you mean "foundation"?)`} {
		if !strings.Contains(errs, want) {
			t.Errorf("plan's errors lack %q:\n%s", want, errs)
		}
	}
	if _, errs := e.loomd(2, "apply", e.spec, "--local"); !strings.Contains(errs, "statik") {
		t.Errorf("apply of the bad spec:\n%s", errs)
	}
	if _, err := os.Stat(filepath.Join(e.work, clTenant, "providertypes", "static", "claims.json")); err == nil {
		t.Errorf("a bad spec claimed hosts: %v", e.claims())
	}
}
