package test

// The web console in a real browser: Debian's headless Chromium driven
// over the DevTools protocol (chromedp) against loomd serve as a real
// process, with a token, real sshd hosts for a cluster, and axe-core
// (from npm) checking every page for accessibility. LOOM_UI_SCREENSHOTS=DIR
// saves the screenshots docs/ui.md shows.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/loomrt/loom/internal/queue"
)

const uiToken = "ui-test-token-5f2c9a7e41d8"

// uiSecret is a sensitive field's value in a task: no page may show it.
const uiSecret = "vault-word-Z8q4u1x9"

// browser is one headless Chromium with one tab.
type browser struct {
	t       *testing.T
	ctx     context.Context
	base    string
	axe     string
	shots   string
	mu      sync.Mutex
	console []string // CSP violations and script errors seen
	ok      []string // URLs that fail on purpose
}

func findAxe() string {
	if p := os.Getenv("LOOM_AXE_JS"); p != "" {
		return p
	}
	for _, p := range []string{"/usr/local/lib/node_modules/axe-core/axe.min.js", "/usr/lib/node_modules/axe-core/axe.min.js"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if out, err := exec.Command("npm", "root", "-g").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "axe-core", "axe.min.js")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	chromium := "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("Debian's chromium is not installed: .ci/run installs it (apt-get install chromium)")
		}
		t.Skip("no /usr/bin/chromium (apt-get install chromium)")
	}
	axePath := findAxe()
	if axePath == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("axe-core is not installed: .ci/run installs it (npm install -g axe-core)")
		}
		t.Skip("no axe-core (npm install -g axe-core, or LOOM_AXE_JS=path/to/axe.min.js)")
	}
	axeSrc, err := os.ReadFile(axePath)
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	b := &browser{t: t, ctx: bctx, base: base, axe: string(axeSrc), shots: os.Getenv("LOOM_UI_SCREENSHOTS")}
	chromedp.ListenTarget(bctx, func(ev any) {
		switch e := ev.(type) {
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.LevelError && !b.expected(e.Entry.URL) {
				b.mu.Lock()
				b.console = append(b.console, e.Entry.Text)
				b.mu.Unlock()
			}
		case *cdpruntime.EventExceptionThrown:
			b.mu.Lock()
			b.console = append(b.console, "exception: "+e.ExceptionDetails.Text)
			b.mu.Unlock()
		}
	})
	if err := chromedp.Run(bctx, cdplog.Enable(), emulation.SetTimezoneOverride("America/New_York")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return b
}

// run runs actions with a deadline, failing the test on error.
// expect marks requests whose failure the test causes on purpose.
func (b *browser) expect(url string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ok = append(b.ok, url)
}

func (b *browser) expected(url string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, u := range b.ok {
		if strings.HasSuffix(url, u) {
			return true
		}
	}
	return false
}

func (b *browser) run(what string, d time.Duration, actions ...chromedp.Action) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		var html string
		_ = chromedp.Run(b.ctx, chromedp.OuterHTML("main", &html, chromedp.ByQuery))
		b.t.Fatalf("%s: %v\nmain now:\n%.3000s", what, err, html)
	}
}

func (b *browser) open(path string) {
	b.t.Helper()
	b.run("open "+path, 30*time.Second, chromedp.Navigate(b.base+path), chromedp.WaitReady("body", chromedp.ByQuery))
}

func (b *browser) eval(js string, out any) {
	b.t.Helper()
	b.run("eval "+js, 30*time.Second, chromedp.Evaluate(js, out))
}

// text is the text of the first element matching sel.
func (b *browser) text(sel string) string {
	b.t.Helper()
	// Read in one script, not by node id: a live update may replace the
	// node between chromedp's lookup and its read ("No node with given id").
	var r struct{ T string }
	b.run("text of "+sel, 30*time.Second, chromedp.Poll(fmt.Sprintf(`(() => {
		const e = document.querySelector(%q);
		return e !== null && e.offsetParent !== null ? {T: e.innerText} : false;
	})()`, sel), &r, chromedp.WithPollingInterval(100*time.Millisecond)))
	return r.T
}

// follow clicks sel, which leads to another page, and waits until that
// page has loaded and shows want. Waiting for want alone could find it
// on the page being left (the cluster page has an ol.steps of its own)
// and then act on a document the browser is replacing ("Cannot find
// context with specified id"); chromedp's Poll does not survive the
// navigation either, so the wait is a loop of evaluations here.
func (b *browser) follow(what, sel, want string) {
	b.t.Helper()
	b.run(what+": click "+sel, 30*time.Second,
		chromedp.Evaluate(`window.loomLeaving = true`, nil),
		chromedp.Click(sel, chromedp.ByQuery))
	pred := fmt.Sprintf(`window.loomLeaving === undefined && document.readyState === "complete" && (() => {
		const e = document.querySelector(%q);
		return e !== null && e.offsetParent !== null;
	})()`, want)
	deadline := time.Now().Add(time.Minute)
	var err error
	for time.Now().Before(deadline) {
		var shown bool
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		err = chromedp.Run(ctx, chromedp.Evaluate(pred, &shown))
		cancel()
		if err == nil && shown {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var html string
	_ = chromedp.Run(b.ctx, chromedp.OuterHTML("main", &html, chromedp.ByQuery))
	b.t.Fatalf("%s: the next page did not show %s within a minute (last error: %v)\nmain now:\n%.3000s", what, want, err, html)
}

// waitJS waits until a JavaScript expression is true, the page not
// reloaded meanwhile (what changes comes from the live updates).
func (b *browser) waitJS(what, expr string, d time.Duration) {
	b.t.Helper()
	b.run("waiting for "+what, d, chromedp.Poll(expr, nil, chromedp.WithPollingInterval(200*time.Millisecond)))
}

// check runs axe-core on the page and fails on serious or critical
// violations; it also checks that the page shows no secret and that the
// browser reported no CSP violation or script error.
func (b *browser) check(name string) {
	b.t.Helper()
	var html string
	b.run("page html", 30*time.Second, chromedp.OuterHTML("html", &html, chromedp.ByQuery))
	if strings.Contains(html, uiSecret) || strings.Contains(html, uiToken) {
		b.t.Errorf("%s: the page shows a secret", name)
	}
	var violations []string
	b.run("axe on "+name, 60*time.Second,
		chromedp.Evaluate(b.axe, nil),
		chromedp.Evaluate(`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations
			.filter(v => v.impact === "serious" || v.impact === "critical")
			.map(v => v.id + " (" + v.impact + "): " + v.help + " at " + v.nodes.map(n => n.target.join(" ")).slice(0, 3).join(", ")))`,
			&violations, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams { return p.WithAwaitPromise(true) }))
	for _, v := range violations {
		b.t.Errorf("%s: axe: %s", name, v)
	}
	b.mu.Lock()
	for _, c := range b.console {
		b.t.Errorf("%s: browser console: %s", name, c)
	}
	b.console = nil
	b.mu.Unlock()
}

// shot saves a screenshot of the element sel.
func (b *browser) shot(name, sel string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	var png []byte
	b.run("screenshot of "+sel, 30*time.Second, chromedp.Screenshot(sel, &png, chromedp.ByQuery))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) screenshot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	var png []byte
	b.run("screenshot", 30*time.Second, chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// writeUIPlugins writes the test's plugins: noop (answers its VERSION,
// declares the sensitive field vault_word) and failing (logs what it
// checks, the vault word given, waits for the file config.gate names in
// its work dir when given, then fails with a message naming the task).
func writeUIPlugins(t *testing.T, plugins, version string) {
	t.Helper()
	dir := filepath.Join(plugins, "noop")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "plugin.json"), `{"name": "noop", "main": "main.lua", "automatortypes": ["noop"],
  "noop": {"name": "noop", "classname": "NoopAutomator", "description": "answers its version",
    "parameters": {"admin": {"fields": {"vault_word": {"label": "Vault word", "type": "text", "sensitive": true}}}}}}`)
	writeAtomic(t, filepath.Join(dir, "main.lua"), fmt.Sprintf(noopLua, version))
	dir = filepath.Join(plugins, "failing")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "plugin.json"), `{"name": "failing", "main": "main.lua", "automatortypes": ["failing"],
  "failing": {"name": "failing", "classname": "FailingAutomator", "parameters": {}}}`)
	writeAtomic(t, filepath.Join(dir, "main.lua"), `local loom = require("loom")
local fs = require("loom.fs")
local time = require("loom.time")
FailingAutomator = loom.Automator:extend("FailingAutomator")
function FailingAutomator:install(input)
  local c = self.task.config
  log.info("checking the disk of " .. self.task.taskId, {device = "sda"})
  if c.vault_word then log.warn("unlocking with " .. c.vault_word) end
  if c.gate then
    log.info("waiting for " .. c.gate)
    while not fs.exists(c.gate) do time.sleep(0.05) end
    log.info("let through by " .. c.gate)
  end
  error("the disk of " .. self.task.taskId .. " is full")
end
return FailingAutomator
`)
}

func TestConsoleInBrowser(t *testing.T) {
	e := newClusterEnv(t, 3)
	writeUIPlugins(t, e.plugins, "v1")
	d := startDaemon(t, e.dir, "serve.log", []string{"LOOM_TOKEN=" + uiToken},
		"--tenant", clTenant, "--known-hosts", e.known, "--plugins", e.plugins, "--work-dir", e.work, "--reload-debounce", "100ms")
	b := newBrowser(t, d.url())

	// Log in: the console sends a stranger to its login page.
	b.open("/ui/tasks")
	b.waitJS("the login page", `location.pathname === "/ui/login"`, 30*time.Second)
	b.check("login")
	b.screenshot("login")
	b.run("log in", 30*time.Second,
		chromedp.SendKeys("#token", uiToken, chromedp.ByQuery),
		chromedp.Submit("#token", chromedp.ByQuery),
		chromedp.WaitVisible("table.tasks, main p.muted", chromedp.ByQuery))
	var path string
	b.eval(`location.pathname`, &path)
	if path != "/ui/tasks" {
		t.Fatalf("after the login the browser is at %s, want /ui/tasks", path)
	}
	// The cookie is out of reach of scripts.
	var cookies string
	b.eval(`document.cookie`, &cookies)
	if strings.Contains(cookies, "loom_ui") {
		t.Fatalf("the session cookie is readable by scripts: %q", cookies)
	}

	// A failed task: open it from the list and read its stderr.
	fail := d.submit(fmt.Sprintf(`{"taskId": "fail-1", "taskName": "INSTALL", "config": {"vault_word": %q, "service": {"name": "web", "action": {"type": "failing"}}}}`, uiSecret))
	if got := d.wait(fail.TaskID); got.State != queue.Failed {
		t.Fatalf("the failing task is %s", got.State)
	}
	b.open("/ui/tasks?state=failed")
	b.follow("open the failed task", `a[href="/ui/tasks/fail-1"]`, "#stderr-text")
	if s := b.text("#stderr-text"); !strings.Contains(s, "the disk of fail-1 is full") || !strings.Contains(s, "stack traceback") {
		t.Fatalf("the failed task's stderr reads %q", s)
	}
	if s := b.text("#input-text"); !strings.Contains(s, `"taskId": "fail-1"`) {
		t.Fatalf("the failed task's input reads %q", s)
	}
	// Its own log: the plugin's lines (the vault word redacted) and how
	// the attempt ended, under the attempt and the daemon that ran it.
	logs := b.text("#log-lines")
	for _, want := range []string{"Attempt 1 on ", "checking the disk of fail-1", "device=sda", "unlocking with [REDACTED]", "the attempt ended: status 1"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the failed task's log lacks %q:\n%s", want, logs)
		}
	}
	// Times are in the viewer's zone (the browser runs in New York).
	var when string
	b.eval(`document.querySelector("ol.timeline time").textContent`, &when)
	if !strings.Contains(when, "EST") && !strings.Contains(when, "EDT") && !strings.Contains(when, "GMT-") {
		t.Errorf("a time reads %q, not in the viewer's zone", when)
	}
	b.check("failed task")
	b.screenshot("task-failed")
	// Run it again: a new task, which fails the same way.
	b.follow("run the failed task again", `a[href="/ui/tasks/fail-1/retry"]`, "section.confirm button[type=submit]")
	b.follow("confirm running it again", "section.confirm button[type=submit]", "p.flash")
	var again string
	b.eval(`location.pathname.replace("/ui/tasks/", "")`, &again)
	if again == "fail-1" || again == "" {
		t.Fatalf("the run again is at %q", again)
	}
	if got := d.wait(again); got.State != queue.Failed {
		t.Fatalf("the new run of fail-1 is %s", got.State)
	}

	// A running task's log, live: its page shows the lines so far, then
	// the ones it logs once let through, without a reload.
	gate := filepath.Join(e.work, clTenant, "automatortypes", "failing", "gate-live-1")
	if err := os.MkdirAll(filepath.Dir(gate), 0o755); err != nil {
		t.Fatal(err)
	}
	d.submit(`{"taskId": "live-1", "taskName": "INSTALL", "config": {"gate": "gate-live-1", "service": {"name": "web", "action": {"type": "failing"}}}}`)
	b.open("/ui/tasks/live-1")
	b.waitJS("the running task's first lines", `(() => {
		const l = document.querySelector("#log-lines");
		return l !== null && l.textContent.includes("waiting for gate-live-1");
	})()`, time.Minute)
	b.eval(`window.loomNotReloaded = true`, nil)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the line logged after the gate, live", `(() => {
		const l = document.querySelector("#log-lines");
		return window.loomNotReloaded === true && l !== null && l.textContent.includes("let through by gate-live-1") &&
			l.textContent.includes("the attempt ended: status 1");
	})()`, time.Minute)
	b.check("task logs")
	b.shot("task-logs", "#log-lines")

	// A queued task (no daemon serves its type) with a secret in its
	// input: the page shows the input redacted; then cancel it.
	q := d.submit(fmt.Sprintf(`{"taskId": "wait-1", "taskName": "INSTALL", "config": {"vault_word": %q, "service": {"name": "web", "action": {"type": "nobody"}}}}`, uiSecret))
	b.open("/ui/tasks/" + q.TaskID)
	b.run("the queued task's input", 30*time.Second, chromedp.WaitVisible("#input-text", chromedp.ByQuery))
	if s := b.text("#input-text"); !strings.Contains(s, "vault_word") || !strings.Contains(s, "[REDACTED]") {
		t.Fatalf("the queued task's input reads %q", s)
	}
	b.check("queued task")

	// An action without the CSRF token is refused, from a script in the
	// console's own page, and from a form another site posts.
	var status int
	b.expect("/ui/tasks/wait-1/cancel")
	b.run("POST without the token", 30*time.Second, chromedp.Evaluate(
		`fetch("/ui/tasks/wait-1/cancel", {method: "POST", body: new URLSearchParams({}), credentials: "same-origin"}).then(r => r.status)`,
		&status, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if status != 403 {
		t.Fatalf("a cancel without the CSRF token answered %d, want 403", status)
	}
	evil := startEvilSite(t, d.url()+"/ui/tasks/wait-1/cancel")
	b.open("/ui/") // the session cookie is set; now another site posts
	b.run("the other site's form", 30*time.Second, chromedp.Navigate(evil), chromedp.Sleep(2*time.Second))
	if got := d.task("wait-1"); got.State != queue.Queued {
		t.Fatalf("a form from another site changed the task: %s", got.State)
	}
	b.open("/ui/tasks/wait-1")
	b.follow("cancel from the console", `a[href="/ui/tasks/wait-1/cancel"]`, "section.confirm button[type=submit]")
	b.check("confirm cancel")
	b.screenshot("confirm")
	b.follow("confirm", "section.confirm button[type=submit]", "p.flash")
	if got := d.task("wait-1"); got.State != queue.Cancelled {
		t.Fatalf("after the console's cancel the task is %s", got.State)
	}
	if s := b.text("h1 .state"); s != "cancelled" {
		t.Fatalf("the task page says %q after the cancel", s)
	}

	// Reload a plugin: the open plugins page shows the new version by
	// itself.
	b.open("/ui/plugins")
	b.check("plugins")
	var before string
	b.eval(`document.querySelector("#type-automator-noop .version").textContent`, &before)
	writeUIPlugins(t, e.plugins, "v2")
	b.waitJS("the new version of noop", fmt.Sprintf(`(document.querySelector("#type-automator-noop .version") || {}).textContent !== %q`, before), 60*time.Second)
	var after string
	b.eval(`document.querySelector("#type-automator-noop .version").textContent`, &after)
	var plugins struct {
		Types []struct{ Name, Version string }
	}
	_, body := d.call("GET", "/v1/plugins", "")
	_ = json.Unmarshal(body, &plugins)
	for _, ty := range plugins.Types {
		if ty.Name == "noop" && !strings.Contains(after, ty.Version) {
			t.Fatalf("the page shows %q, the API version %s", after, ty.Version)
		}
	}
	b.screenshot("plugins")

	// A 3-node cluster applied from the console on real sshd hosts: the
	// plan first, then the cluster page follows the job live until every
	// node is active.
	e.writeSpec(2, "hello")
	spec, err := os.ReadFile(e.spec)
	if err != nil {
		t.Fatal(err)
	}
	// START db waits on the hosts until the test opens the gate: the page
	// is seen mid-job for sure, then reaches the end by itself.
	e.hold("START db")
	b.open("/ui/apply")
	b.check("apply")
	b.run("paste the spec", 30*time.Second, chromedp.SetValue("#spec", string(spec), chromedp.ByQuery))
	b.follow("plan the pasted spec", "form.spec button[type=submit]", "ol.steps")
	if s := b.text("ol.steps"); !strings.Contains(s, "create") {
		t.Fatalf("the plan reads %q", s)
	}
	b.check("plan")
	b.screenshot("plan")
	b.follow("apply", "form.actions button[type=submit]", "#nodes")
	var mark string
	b.eval(`document.body.dataset.mark = "same-page"`, &mark)
	b.waitJS("START db running", `[...document.querySelectorAll(".stage li.task.st-running .tname")].some(n => n.textContent.trim() === "START db")`, 3*time.Minute)
	var mid []string
	b.eval(`[...document.querySelectorAll("table.nodes tr[data-node]")].map(r => r.dataset.state)`, &mid)
	if len(mid) != 3 {
		t.Fatalf("mid-job the page shows nodes %v, want 3", mid)
	}
	for _, st := range mid {
		if st == "active" {
			t.Fatalf("a node is active while START db is held: %v", mid)
		}
	}
	var waiting bool
	b.eval(`[...document.querySelectorAll(".stage li.task.st-pending")].some(li => li.textContent.includes("waits for START db on shop-db-1"))`, &waiting)
	if !waiting {
		t.Error("no waiting task says it waits for START db")
	}
	b.screenshot("cluster-running")
	b.shot("cluster-stages", `section[aria-labelledby="job"]`)
	e.gate()
	b.waitJS("every node active", `(() => {
		const rows = [...document.querySelectorAll("table.nodes tr[data-node]")];
		return rows.length === 3 && rows.every(r => r.dataset.state === "active");
	})()`, 5*time.Minute)
	var same string
	b.eval(`document.body.dataset.mark || ""`, &same)
	if same != "same-page" {
		t.Fatal("the page was reloaded: the nodes' states did not come from the live updates")
	}
	b.waitJS("the job complete", `document.querySelector("#job .state.st-complete") !== null`, 2*time.Minute)
	b.check("cluster")
	b.screenshot("cluster")

	// A cluster task's page has its plugin's log lines (from the job
	// log): the shell automator says which script it ran.
	var taskLink string
	b.eval(`(() => { const a = [...document.querySelectorAll(".stage li.task")].find(li => li.querySelector(".tname").textContent.startsWith("INSTALL")); return a ? a.querySelector("a").getAttribute("href") : ""; })()`, &taskLink)
	if taskLink == "" {
		t.Fatal("no INSTALL task linked from the stages")
	}
	b.open(taskLink)
	b.waitJS("the task's log lines", `document.querySelector("table.logs") !== null && document.querySelector("table.logs").textContent.includes("running effect.sh")`, 30*time.Second)
	b.check("cluster task")
	b.open("/ui/clusters/shop")

	// A service action: restart web, after its plan; the web nodes stop
	// and start it, the db node does not.
	e.effects() // clears the hosts' logs
	b.run("restart web: the form", 30*time.Second,
		chromedp.SetValue(`select[name="verb"]`, "restart", chromedp.ByQuery),
		chromedp.SetValue(`select[name="services"]`, "web", chromedp.ByQuery))
	// The cluster page has an ol.steps of its own (the job's steps):
	// follow waits for the plan page, not for the page being left.
	b.follow("restart web: the plan", `form[aria-label="Service action"] button[type=submit]`, "ol.steps")
	b.check("service action plan")
	b.follow("restart web", "form.actions button[type=submit]", "p.flash")
	b.waitJS("the restart complete", `(() => {
		const h = document.querySelector("#job");
		return h !== null && h.textContent.includes("restart") && h.querySelector(".state.st-complete") !== null;
	})()`, 3*time.Minute)
	got := map[string]bool{}
	for _, fx := range e.effects() {
		got[fx.key()] = true
	}
	for _, want := range []string{"STOP web@shop-web-1", "START web@shop-web-1", "STOP web@shop-web-2", "START web@shop-web-2"} {
		if !got[want] {
			t.Errorf("the restart did not run %s (ran %v)", want, got)
		}
	}
	for k := range got {
		if strings.Contains(k, "db") {
			t.Errorf("the restart of web ran %s", k)
		}
	}

	// The overview, in dark mode and on a phone: readable, nothing wider
	// than the screen.
	b.open("/ui/")
	b.check("overview")
	b.screenshot("overview")
	b.run("dark", 30*time.Second, emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}))
	b.open("/ui/clusters/shop")
	b.check("cluster, dark")
	b.screenshot("cluster-dark")
	b.run("phone", 30*time.Second, emulation.SetDeviceMetricsOverride(390, 844, 3, true))
	for _, p := range []string{"/ui/", "/ui/tasks", "/ui/tasks/fail-1", "/ui/clusters/shop", "/ui/plugins"} {
		b.open(p)
		var overflow bool
		b.eval(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow)
		if overflow {
			t.Errorf("%s is wider than a phone's screen", p)
		}
		b.check(p + " on a phone")
	}
	b.screenshot("phone-plugins")

	// Keyboard: the first Tab reaches the skip link, which moves focus to
	// the content.
	b.run("desktop", 30*time.Second, emulation.ClearDeviceMetricsOverride())
	b.open("/ui/tasks")
	var focused string
	b.run("tab", 30*time.Second, chromedp.KeyEvent("\t"), chromedp.Evaluate(`document.activeElement.textContent`, &focused))
	if focused != "Skip to content" {
		t.Fatalf("the first Tab focuses %q, want the skip link", focused)
	}
}

// startEvilSite serves, on another origin, a page whose form posts to
// target as soon as it loads.
func startEvilSite(t *testing.T, target string) string {
	t.Helper()
	dir := t.TempDir()
	page := fmt.Sprintf(`<!doctype html><html><body><form id="f" method="post" action="%s"><input name="csrf" value="guess"></form>
<script>document.getElementById("f").submit()</script></body></html>`, target)
	if err := os.WriteFile(filepath.Join(dir, "index.html"), []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	// localhost is another site than 127.0.0.1: SameSite=Strict keeps
	// the cookie home, and the console refuses the form all the same.
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/index.html"
}
