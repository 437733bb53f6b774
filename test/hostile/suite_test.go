package hostile

// The suite runner: writes the attack plugins, starts the daemon, runs the
// cases (concurrently unless a case is serial), then checks the daemon's
// health and peak RSS and writes the report.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/sshdtest"
)

// plugin is an attack plugin: an automator type whose INSTALL hook runs
// body (a Lua chunk with self and input in scope).
type plugin struct {
	body string
	// timeout is the hook deadline in the definition (default 1s).
	timeout string
	// memory is limits.memory in the definition ("" leaves the default).
	memory string
	// top is Lua run at load time, before the class is defined.
	top string
	// params is the definition's parameters (JSON; default {}).
	params string
}

// want is the secure outcome of a plugin attack.
type want struct {
	// state is the task's final state (default failed).
	state string
	// kinds lists the accepted result error kinds (empty: any).
	kinds []string
	// msg lists substrings the outcome's messages must all hold
	// (case-insensitive).
	msg []string
	// within bounds how long the hook may run: a generous bound against a
	// deadline that does not bite, never a latency check (0: none).
	within time.Duration
	// check runs extra assertions on the finished record.
	check func(t *testing.T, s *suite, r record)
}

// hcase is one attack of the suite.
type hcase struct {
	name   string // test name; plugin cases also use it for the plugin type
	attack string // what the attack does, for the report (plugin cases: their Lua)
	class  string // attack class, for the report and docs/security.md
	expect string // the secure outcome, in words
	// gap, when set, names the issue item whose fix has not landed: the
	// case is skipped unless LOOM_HOSTILE_GAPS=1.
	gap    string
	serial bool // runs alone, after the concurrent cases
	// plugin and want describe a plugin attack: its task is submitted and
	// its record checked against want.
	plugin *plugin
	config string // extra JSON members of the task's config
	want   want
	// run is any other attack; it returns the observed outcome.
	run func(t *testing.T, s *suite) string
}

// suite is the shared state of one run.
type suite struct {
	d      *daemon
	dir    string
	canary string // content of a file outside every plugin's reach
	mark   int64  // daemon log size when the running serial case began

	// own is what the daemon listens on besides its API (listeners_test.go).
	own *ownSetup
	// sshd is a real sshd the resource cases connect to (nil when none
	// can run here: those cases skip).
	sshd *sshdtest.Server
}

// logMark is the daemon log's size when the running serial case began.
func (s *suite) logMark() int64 { return s.mark }

func (c hcase) pluginType() string { return "h-" + c.name }

const ordinaryType = "ordinary"

// ordinaryTask is an INSTALL task for the ordinary plugin: it completes at
// once when the daemon is healthy.
func ordinaryTask(id string) string {
	return taskFor(ordinaryType, id, "")
}

// taskFor is an INSTALL task for automator type typ; extra holds more
// members of config (JSON, without braces).
func taskFor(typ, id, extra string) string {
	if extra != "" {
		extra += ", "
	}
	return fmt.Sprintf(`{"taskId": %q, "taskName": "INSTALL", "config": {%s"service": {"name": "web", "action": {"type": %q}}}}`, id, extra, typ)
}

const ordinaryLua = `local loom = require("loom")
Ordinary = loom.Automator:extend("Ordinary")
function Ordinary:install(input)
  self.result.result.ok = true
end
return Ordinary
`

const attackLua = `local CANARY, ROOT = %q, %q
local loom = require("loom")
local json = require("loom.json")
local fs = require("loom.fs")
local time = require("loom.time")
local ssh = require("loom.ssh")
%s
Attack = loom.Automator:extend("Attack")
function Attack:install(input)
%s
end
return Attack
`

// writePlugin writes automator type typ with its Lua main and extra
// definition members.
func writePlugin(t *testing.T, pluginsDir, typ, classname, lua, extra string) {
	t.Helper()
	dir := filepath.Join(pluginsDir, typ)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(extra, `"parameters"`) {
		extra = strings.TrimSuffix(`"parameters": {}, `+extra, ", ")
	}
	def := fmt.Sprintf(`{"name": %q, "main": "main.lua", "automatortypes": [%q], %q: {"name": %q, "classname": %q, %s}}`,
		typ, typ, typ, typ, classname, extra)
	if err := os.WriteFile(filepath.Join(dir, "plugin.json"), []byte(def), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.lua"), []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (p *plugin) definitionExtra() string {
	timeout := p.timeout
	if timeout == "" {
		timeout = "1s"
	}
	extra := fmt.Sprintf(`"timeouts": {"default": %q}`, timeout)
	if p.memory != "" {
		extra += fmt.Sprintf(`, "limits": {"memory": %q}`, p.memory)
	}
	if p.params != "" {
		extra = `"parameters": ` + p.params + ", " + extra
	}
	return extra
}

func gapsEnabled() bool { return os.Getenv("LOOM_HOSTILE_GAPS") == "1" }

// TestHostile runs every case against one daemon.
func TestHostile(t *testing.T) {
	cases := allCases()
	dir := t.TempDir()
	s := &suite{dir: dir, canary: fmt.Sprintf("CANARY-%d-%d", os.Getpid(), time.Now().UnixNano())}
	if err := os.WriteFile(filepath.Join(dir, "canary.txt"), []byte(s.canary), 0o644); err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(dir, "plugins")
	writePlugin(t, plugins, ordinaryType, "Ordinary", ordinaryLua, "")
	names := map[string]bool{}
	for _, c := range cases {
		if names[c.name] {
			t.Fatalf("two cases named %s", c.name)
		}
		names[c.name] = true
		if c.plugin != nil {
			writePlugin(t, plugins, c.pluginType(), "Attack", fmt.Sprintf(attackLua, filepath.Join(dir, "canary.txt"), dir, c.plugin.top, c.plugin.body), c.plugin.definitionExtra())
		}
	}
	for _, f := range setupFiles(s) {
		path := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s.startSSHD(t)
	s.d = startDaemon(t, dir, slices.Concat(daemonArgs(), s.ownListenerArgs(t), s.tokenArgs(t))...)
	d := s.d
	s.checkPluginsLoaded(t, cases)

	var baseline []time.Duration
	for range 5 {
		baseline = append(baseline, d.probe(t))
	}
	t.Logf("ordinary task latency before the attacks: median %s", median(baseline))

	t.Run("concurrent", func(t *testing.T) {
		for _, c := range cases {
			if !c.serial {
				t.Run(c.name, func(t *testing.T) { t.Parallel(); s.runCase(t, c) })
			}
		}
	})
	t.Run("serial", func(t *testing.T) {
		for _, c := range cases {
			if c.serial {
				t.Run(c.name, func(t *testing.T) { s.runCase(t, c) })
			}
		}
	})

	if !d.alive() {
		t.Fatalf("loomd died during the suite (exit %d):\n%s", d.code, d.logTail())
	}
	after := d.probe(t)
	t.Logf("ordinary task latency after the attacks: %s", after.Round(time.Millisecond))
	hwm := procStatus(d.cmd.Process.Pid, "VmHWM")
	d.mu.Lock()
	seen := d.peakRSS
	d.mu.Unlock()
	t.Logf("daemon peak RSS: VmHWM %.1f MiB (watchdog saw %.1f MiB)", float64(hwm)/(1<<20), float64(seen)/(1<<20))
	switch {
	case hwm <= 0:
		t.Errorf("cannot read VmHWM of loomd (pid %d)", d.cmd.Process.Pid)
	case hwm <= maxPeakRSS:
	case !isolationLanded() && !gapsEnabled():
		// Hooks still run inside the daemon, so every VM's memory is the
		// daemon's: the budget cannot hold until they move out.
		t.Logf("known gap: daemon peak RSS %.1f MiB is over the %d MiB budget; %s", float64(hwm)/(1<<20), maxPeakRSS>>20, gapMemory)
	default:
		t.Errorf("daemon peak RSS %.1f MiB is over the %d MiB budget", float64(hwm)/(1<<20), maxPeakRSS>>20)
	}
	for _, bad := range []string{"fatal error:", "goroutine stack exceeds", "panic:", "SIGSEGV"} {
		if d.logContains(bad) {
			t.Errorf("the daemon's output holds %q:\n%s", bad, d.logTail())
		}
	}
	d.writeReport(t, baseline, hwm)
}

// daemonArgs are the serve flags of the suite's daemon.
func daemonArgs() []string {
	return []string{"--concurrency", "8", "--max-attempts", "3", "--api-read-timeout", "5s"}
}

// runCase runs one case, probes the daemon and records the outcome.
func (s *suite) runCase(t *testing.T, c hcase) {
	row := reportRow{name: c.name, attack: c.attackText(), class: c.class, expect: c.expect, gap: c.gap}
	if c.gap != "" && !gapsEnabled() {
		s.d.report(row)
		t.Skip("known gap: " + c.gap)
	}
	row.gap = ""
	if !s.d.alive() {
		t.Fatalf("loomd is not running (exit %d)", s.d.code)
	}
	if c.serial {
		s.mark = s.d.logSize()
	}
	var observed string
	if c.run != nil {
		observed = c.run(t, s)
	} else {
		observed = s.runPlugin(t, c)
	}
	row.observed = observed
	row.probe = s.d.probe(t)
	if t.Failed() {
		row.observed = "FAILED: " + observed
	}
	s.d.report(row)
	t.Logf("observed: %s; ordinary task after: %s", observed, row.probe.Round(time.Millisecond))
}

// runPlugin submits the case's task and checks its record against want.
func (s *suite) runPlugin(t *testing.T, c hcase) string {
	t.Helper()
	config := fmt.Sprintf(`"api": %q`, s.d.url())
	if c.config != "" {
		config += ", " + c.config
	}
	id := s.d.submit(t, taskFor(c.pluginType(), s.d.nextID(c.name), config))
	r := s.d.wait(t, id)
	s.checkRecord(t, c.want, r)
	return r.short()
}

func (s *suite) checkRecord(t *testing.T, w want, r record) {
	t.Helper()
	state := w.state
	if state == "" {
		state = "failed"
	}
	if state == "any" {
		if r.State != "failed" && r.State != "succeeded" {
			t.Errorf("state %s, want a finished task", r.State)
		}
	} else if r.State != state {
		t.Errorf("state %s, want %s (%s)", r.State, state, r)
	}
	if len(w.kinds) > 0 && !contains(w.kinds, r.kind()) {
		t.Errorf("error kind %q, want one of %q (%s)", r.kind(), w.kinds, r)
	}
	msg := strings.ToLower(r.message())
	for _, m := range w.msg {
		if !strings.Contains(msg, strings.ToLower(m)) {
			t.Errorf("outcome does not say %q: %s", m, r)
		}
	}
	if w.within > 0 && r.Duration > w.within {
		t.Errorf("the hook ran %s, past the %s bound: its deadline did not bite", r.Duration.Round(time.Millisecond), w.within)
	}
	if raw, _ := json.Marshal(r.raw); strings.Contains(string(raw), s.canary) {
		t.Errorf("the record holds the canary from outside the sandbox: %s", clip(string(raw), 500))
	}
	if w.check != nil {
		w.check(t, s, r)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// setupFile is a file the suite plants before the daemon starts, relative
// to the suite dir.
type setupFile struct{ path, content string }

// expectStatus posts body to path and checks the HTTP status is one of
// codes; it returns the observed outcome.
func (s *suite) expectStatus(t *testing.T, method, path, body string, codes ...int) string {
	t.Helper()
	code, b := s.d.call(method, path, body, nil)
	obs := fmt.Sprintf("HTTP %d %s", code, clip(strings.TrimSpace(string(b)), 200))
	for _, c := range codes {
		if code == c {
			return obs
		}
	}
	t.Errorf("%s %s: %s, want one of %v", method, path, obs, codes)
	return obs
}

// checkPluginsLoaded fails the suite when an attack plugin did not load: its
// tasks would sit queued and the case would test nothing.
func (s *suite) checkPluginsLoaded(t *testing.T, cases []hcase) {
	t.Helper()
	code, b := s.d.call("GET", "/v1/plugins", "", nil)
	var pr struct {
		Types []struct {
			Name string `json:"name"`
		} `json:"types"`
		LoadErrors []struct {
			Message string `json:"message"`
			Warning bool   `json:"warning"`
		} `json:"loadErrors"`
	}
	if code != 200 || json.Unmarshal(b, &pr) != nil {
		t.Fatalf("GET /v1/plugins = %d %s", code, clip(string(b), 500))
	}
	for _, e := range pr.LoadErrors {
		if !e.Warning {
			t.Fatalf("an attack plugin failed to load: %s", e.Message)
		}
	}
	loaded := map[string]bool{}
	for _, ty := range pr.Types {
		loaded[ty.Name] = true
	}
	for _, c := range cases {
		if c.plugin != nil && !loaded[c.pluginType()] {
			t.Fatalf("plugin type %s is not loaded: %s", c.pluginType(), clip(string(b), 3000))
		}
	}
}

// isolationLanded reports whether loomd serve runs hooks outside the
// daemon process (it has an --isolation flag).
func isolationLanded() bool {
	out, _ := exec.Command(loomdBin, "serve", "--help").CombinedOutput()
	return strings.Contains(string(out), "--isolation")
}

// attackText is the attack in a few words: its own text, else the start
// of its Lua.
func (c hcase) attackText() string {
	if c.attack != "" || c.plugin == nil {
		return c.attack
	}
	return "`" + clip(strings.Join(strings.Fields(c.plugin.body), " "), 90) + "`"
}
