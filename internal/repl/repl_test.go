package repl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/plugtest"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

func newRuntime(t *testing.T) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(runtime.Options{PluginsDir: "../../examples/plugins", WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// lockedBuffer is written by the REPL (and its log handler) and read by
// the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newREPL(t *testing.T, opts Options) (*REPL, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	var out, errb lockedBuffer
	if opts.Runtime == nil {
		opts.Runtime = newRuntime(t)
	}
	opts.Out, opts.Err = &out, &errb
	opts.Modules = []bindings.ModuleSpec{{Name: "json", Funcs: []bindings.FuncSpec{{Name: "encode"}, {Name: "decode"}}},
		{Name: "log", Funcs: []bindings.FuncSpec{{Name: "info"}, {Name: "conn:method"}}}}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r, &out, &errb
}

func TestFormat(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	if err := L.DoString(`
		t = {3, 2, 1, b = {x = 1}, a = "s", [10] = true, ["not a name"] = false, f = print}
		t.loop = t
		deep = {}
		local d = deep
		for i = 1, 12 do d.next = {}; d = d.next end
	`); err != nil {
		t.Fatal(err)
	}
	got := Format(L.GetGlobal("t"))
	want := `{
  3,
  2,
  1,
  [10] = true,
  a = "s",
  b = { x = 1 },
  f = function: builtin,
  loop = <cycle: back to the top>,
  ["not a name"] = false,
}`
	if got != want {
		t.Errorf("Format(t) =\n%s\nwant\n%s", got, want)
	}
	if got := Format(L.GetGlobal("deep")); !strings.Contains(got, "{...} (nested too deep to show)") {
		t.Errorf("a deep table should be cut:\n%s", got)
	}
	for v, want := range map[lua.LValue]string{
		lua.LNumber(42):                       "42",
		lua.LNumber(0.5):                      "0.5",
		lua.LString("a\"b\n\x01"):             `"a\"b\n\001"`,
		lua.LNil:                              "nil",
		lua.LBool(true):                       "true",
		lua.LString(strings.Repeat("é", 300)): `... (truncated: 400 of 600 bytes shown)`,
	} {
		if got := Format(v); !strings.HasSuffix(got, want) {
			t.Errorf("Format(%v) = %s, want suffix %s", v, got, want)
		}
	}
}

func TestSetPath(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(`{"config":{"list":[1,2]}}`), &doc); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		v    any
	}{{"config.ipaddresses.access_v4", "127.0.0.1"}, {"config.list.1", "one"}, {"config.list.3", 3.0}} {
		var err error
		if doc, err = setPath(doc, strings.Split(c.path, "."), c.v, ""); err != nil {
			t.Fatalf("%s: %v", c.path, err)
		}
	}
	b, _ := json.Marshal(doc)
	if want := `{"config":{"ipaddresses":{"access_v4":"127.0.0.1"},"list":["one",2,3]}}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	if _, err := setPath(doc, []string{"config", "list", "9"}, 1, ""); err == nil {
		t.Error("an index past the end should fail")
	}
	if _, err := setPath(doc, []string{"config", "list", "1", "x"}, 1, ""); err == nil {
		t.Error("setting a field inside a string should fail")
	}
}

func TestComplete(t *testing.T) {
	r, _, errb := newREPL(t, Options{Type: "hello"})
	// A table whose __index is a function: completion must never call it.
	if _, err := r.s.Eval(context.Background(), `
		j = require("loom.json")
		called = false
		trap = setmetatable({visible = 1}, {__index = function() called = true end})
	`, r.logger); err != nil {
		t.Fatal(err)
	}
	if err := r.cmdTask("../../examples/tasks/install.json"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		head string
		want []string
	}{
		{"j.", []string{"j.array", "j.decode", "j.encode"}},
		{"x = j.en", []string{"j.encode"}},
		{`require("loom.j`, []string{"loom.json"}},
		{`require("lib.`, []string{"lib.state"}},
		{"self.task.config.serv", []string{"self.task.config.service", "self.task.config.services"}},
		{"self.ins", []string{"self.install"}}, // through the instance's __index (the entry table)
		{"HelloAutomator:ins", []string{"HelloAutomator:install"}},
		// The live state only: loom is nil in this plugin's VM (its
		// plugin keeps loom local), and loom.log is nil even where loom is set.
		{"loom.", nil},
		{"loom.log.", nil},
		{"log.inf", []string{"log.info"}},
		{"trap.", []string{"trap.visible"}},
		{"whil", []string{"while"}},
		{":ta", []string{":task"}},
		{":load he", []string{"hello"}},
		{":run ins", []string{"install"}},
		{":set config.ipaddr", []string{"config.ipaddresses"}},
		{`x = "self.`, nil},
	}
	for _, c := range cases {
		got, word := r.Complete(c.head)
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("Complete(%q) = %q, want %q", c.head, got, c.want)
		}
		for _, g := range got {
			if !strings.HasPrefix(g, word) {
				t.Errorf("Complete(%q): candidate %q does not extend %q", c.head, g, word)
			}
		}
	}
	vals, err := r.s.Eval(context.Background(), "called", r.logger)
	if err != nil || len(vals) != 1 || vals[0] != lua.LFalse {
		t.Errorf("completion ran an __index function: %v %v", vals, err)
	}
	if errb.String() != "" {
		t.Errorf("unexpected errors: %s", errb)
	}
	sfx, n := (&completer{r: r}).Do([]rune("j.en"), 4)
	if len(sfx) != 1 || string(sfx[0]) != "code" || n != 4 {
		t.Errorf("Do = %q, %d", sfx, n)
	}
}

func TestRunPiped(t *testing.T) {
	in := ":load hello\n:task ../../examples/tasks/install.json\nfunction f()\n  return 1, {a = 2}\nend\n=f()\n:run\n:set config.service.name db\n=self.task.config.service.name\n:timeout 50ms\n:timeout\nwhile true do end\n=\"alive\"\n"
	r, out, errb := newREPL(t, Options{In: strings.NewReader(in)})
	err := r.Run(context.Background())
	if !errors.Is(err, ErrFailed) {
		t.Errorf("a timed-out statement should fail the run: %v", err)
	}
	for _, w := range []string{"1\n{ a = 2 }\n", "[info] hello.install: install web", `"status": 0`, `"db"`, "timeout: 50ms", `"alive"`} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errb.String(), "interrupted: timed out after 50ms (:timeout)") {
		t.Errorf("stderr lacks the timeout:\n%s", errb)
	}
}

// TestSignalInterrupts cancels a running statement with SIGINT, then
// quits on SIGTERM while waiting for input.
func TestSignalInterrupts(t *testing.T) {
	pr, pw := io.Pipe()
	sigs := make(chan os.Signal, 1)
	r, out, errb := newREPL(t, Options{In: pr, Signals: sigs})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	// The loop is sent only once kept = 7 is done: a signal that reached
	// that statement instead would leave the loop running forever.
	if _, err := io.WriteString(pw, "kept = 7\n=\"set\"\n"); err != nil {
		t.Fatal(err)
	}
	stop := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), `"set"`) {
		if time.Now().After(stop) {
			t.Fatalf("no output from the first statements; stderr:\n%s", errb)
		}
		time.Sleep(5 * time.Millisecond)
	}
	running := func() bool {
		r.sigMu.Lock()
		defer r.sigMu.Unlock()
		return r.cancel != nil
	}
	for running() { // the statement that printed "set" is finishing
		time.Sleep(time.Millisecond)
	}
	if _, err := io.WriteString(pw, "while true do end\n"); err != nil {
		t.Fatal(err)
	}
	for {
		r.sigMu.Lock()
		running := r.cancel != nil
		r.sigMu.Unlock()
		if running {
			break
		}
		if time.Now().After(stop) {
			t.Fatal("the loop never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sigs <- os.Interrupt
	if _, err := io.WriteString(pw, "=\"after\"\n"); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), `"after"`) {
		if time.Now().After(stop) {
			t.Fatalf("no prompt after the interrupt; stderr:\n%s", errb)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !strings.Contains(errb.String(), "interrupted: Ctrl-C") {
		t.Errorf("stderr lacks the interrupt:\n%s", errb)
	}
	sigs <- os.Kill // anything but SIGINT quits
	select {
	case err := <-done:
		if !errors.Is(err, ErrInterrupted) {
			t.Errorf("Run = %v, want ErrInterrupted", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return after SIGTERM")
	}
	pw.Close()
}

// TestSignalInterruptsHook cancels a hook that :run is running, and the
// session goes on.
func TestSignalInterruptsHook(t *testing.T) {
	pr, pw := io.Pipe()
	sigs := make(chan os.Signal, 1)
	r, out, errb := newREPL(t, Options{In: pr, Signals: sigs, Type: "hello"})
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	stop := time.Now().Add(time.Minute)
	waitOut := func(want string) {
		t.Helper()
		for !strings.Contains(out.String(), want) {
			if time.Now().After(stop) {
				t.Fatalf("no %q in stdout:\n%s\nstderr:\n%s", want, out, errb)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	in := ":task ../../examples/tasks/install.json\nfunction HelloAutomator:start() while true do end end\n=\"defined\"\n"
	if _, err := io.WriteString(pw, in); err != nil {
		t.Fatal(err)
	}
	waitOut(`"defined"`)
	if _, err := io.WriteString(pw, ":run start\n"); err != nil {
		t.Fatal(err)
	}
	for {
		r.sigMu.Lock()
		running := r.cancel != nil
		r.sigMu.Unlock()
		if running {
			break
		}
		if time.Now().After(stop) {
			t.Fatal("the hook never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sigs <- os.Interrupt
	if _, err := io.WriteString(pw, "=self.task.taskId\n"); err != nil {
		t.Fatal(err)
	}
	waitOut(`"00000042-001-004"`)
	if !strings.Contains(errb.String(), "task cancelled") || !strings.Contains(errb.String(), "Ctrl-C") {
		t.Errorf("stderr lacks the cancelled hook:\n%s", errb)
	}
	pw.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrFailed) {
			t.Errorf("Run = %v, want ErrFailed (the hook was interrupted)", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return at EOF")
	}
}

// TestCallPiped loads a cluster driver and calls its hooks from the REPL.
func TestCallPiped(t *testing.T) {
	rt, err := runtime.New(runtime.Options{PluginsDir: "../../examples/kinds", WorkDir: t.TempDir(), Bindings: std.New(std.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	in := ":load gkelike\n:call capabilities\n:call etcd_save {\"cluster_info\": {}, \"options\": {}, \"snapshot_name\": \"s\"}\n:call\n=\"alive\"\n"
	r, out, errb := newREPL(t, Options{In: strings.NewReader(in), Runtime: rt})
	if err := r.Run(context.Background()); !errors.Is(err, ErrFailed) {
		t.Errorf("a failed call should fail the run: %v", err)
	}
	for _, w := range []string{`"get_cluster_size": true`, "-- call capabilities: status 0", `"reason": "unimplemented"`, `"alive"`} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	for _, w := range []string{"gkelike etcd_save failed (terminal): ETCD backup operations are not implemented", "usage: :call HOOK [JSON input]: create_options, update_options"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb)
		}
	}
}

func TestHelpTopics(t *testing.T) {
	r, out, _ := newREPL(t, Options{})
	cases := []struct {
		topic string
		want  []string // in the output, in order
	}{
		{"", []string{"Commands:", ":test [PATTERN]"}},
		{"run", []string{":run [HOOK]"}},
		{":set", []string{":set PATH VALUE", "(VALUE is JSON"}},
		{"loom", []string{"loom.json", "loom.log", "Base tables", "loom.Provider"}},
		{"loom.json", []string{"loom.json (require(\"loom.json\"))", "encode()", "decode()"}},
		{"json.encode", []string{"loom.json.encode()"}},
		{"loom.log.conn:method", []string{"loom.log.conn:method()"}},
		{"log.conn.method", []string{"loom.log.conn:method()"}},
		{"conn:method", []string{"loom.log.conn:method()"}},
		{"fail", []string{"loom.Base:fail(message string, status? integer)", "fails the task", "loom.Kind:fail(message, class, reason)"}},
		{"loom.Provider", []string{"loom.Provider:create(input loom.CreateInput)", "loom.Provider:delete("}},
		// Methods the stub leaves out come from the stdlib's source.
		{"ClusterDriver:option", []string{"loom.ClusterDriver:option(opts, typ, ...)", "DriverOptions"}},
	}
	for _, c := range cases {
		var b bytes.Buffer
		if err := r.help.write(&b, c.topic); err != nil {
			t.Errorf(":help %s: %v", c.topic, err)
			continue
		}
		out := b.String()
		at := 0
		for _, w := range c.want {
			i := strings.Index(out[at:], w)
			if i < 0 {
				t.Errorf(":help %s lacks %q (in order):\n%s", c.topic, w, out)
				break
			}
			at += i + len(w)
		}
	}
	// A Lua function of the live state that no spec covers.
	if !r.liveHelp("loom.Provider:extend") || r.liveHelp("loom.nope") {
		t.Error("liveHelp should document a function the session holds, and only that")
	}
	if want := "loom.Provider:extend(name, fields)\n  a Lua function defined at stdlib/loom.lua:"; !strings.Contains(out.String(), want) {
		t.Errorf("liveHelp output lacks %q:\n%s", want, out)
	}
	if err := r.help.write(io.Discard, "loom.nope.x"); err == nil || !strings.Contains(err.Error(), "no help on") {
		t.Errorf("an unknown topic should say what topics there are: %v", err)
	}
	got, word := r.Complete(":help loom.js")
	if strings.Join(got, " ") != "loom.json loom.json.decode loom.json.encode" || word != "loom.js" {
		t.Errorf("Complete(:help loom.js) = %q %q", got, word)
	}
}

// :test runs the current plugin's test files with loomd test's runner.
func TestTestCommand(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "mini", Family: "provider", Classname: "Mini", Files: map[string]string{
		"mini.lua": `Mini = require("loom").Provider:extend("Mini")
function Mini:create(input) self.result.result.providerid = "m-1" end`,
		"mini_test.lua": `describe("CREATE", function()
  it("returns the id", function()
    assert.equals("m-1", loom.test.run("CREATE", {}).result.providerid)
  end)
  it("fails on purpose", function()
    assert.equals(1, 2)
  end)
end)`}})
	rt, err := runtime.New(runtime.Options{PluginsDir: dir, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	r, out, errb := newREPL(t, Options{Runtime: rt, In: strings.NewReader(":test\n")})
	if err := r.Run(context.Background()); !errors.Is(err, ErrFailed) {
		t.Errorf("a bare sandbox has no tests to run: %v", err)
	}
	if !strings.Contains(errb.String(), "no plugin loaded: :load TYPE first") {
		t.Errorf("stderr: %s", errb)
	}

	r, out, errb = newREPL(t, Options{Runtime: rt, Type: "mini", In: strings.NewReader(":test\n:test returns\n:test nothing\n")})
	if err := r.Run(context.Background()); !errors.Is(err, ErrFailed) {
		t.Errorf("a failed test should fail the run: %v", err)
	}
	for _, w := range []string{"ok 1 - CREATE returns the id", "not ok 2 - CREATE fails on purpose", "# 1 passed, 1 failed", "# 1 passed, 0 failed"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("stdout lacks %q:\n%s", w, out)
		}
	}
	for _, w := range []string{"mini: 1 test(s) failed, 1 passed", `no test name matches "nothing"`} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q:\n%s", w, errb)
		}
	}
}

func TestCRLFWriter(t *testing.T) {
	var b bytes.Buffer
	w := &crlfWriter{w: &b}
	for _, p := range []string{"=1+1\n", "2\r\n", "a\r", "\nb\n\n", ""} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	// A CR at the end of one write still pairs with the LF of the next.
	if got, want := b.String(), "=1+1\r\n2\r\na\r\nb\r\n\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// newKitREPL is a REPL on the examples with loomd test's kit, wired as
// loomd repl wires it.
func newKitREPL(t *testing.T, in string, typ string) (*REPL, *lockedBuffer, *lockedBuffer) {
	t.Helper()
	kit, err := plugtest.NewKit(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kit.Close)
	reg := std.New(std.Options{HTTP: httpb.Options{Intercept: kit.Intercept},
		SSH: sshb.Options{Dial: kit.Dial, KnownHosts: []string{kit.KnownHosts()}}})
	rt, err := runtime.New(runtime.Options{PluginsDir: "../../examples", Folders: []string{"../../examples/linode", "../../examples/plugins/skeleton-automator"},
		WorkDir: t.TempDir(), Bindings: reg, InstructionHook: kit.InstructionHook, PermitHTTP: kit.Permitted})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return newREPL(t, Options{Runtime: rt, Type: typ, In: strings.NewReader(in), Kit: kit})
}

// The REPL has the test kit: :fake http HOST with a Lua handler served
// while :run's hook runs, :fake ssh HOST, require("loom.test"); :task
// redacts the sensitive fields; :set checks the definition's types.
func TestKitAtThePrompt(t *testing.T) {
	task := `{"taskId":"t-1","taskName":"CREATE","config":{"hostname":"web1","flavor":"g6-nanode-1","image":"linode/debian12","provider":{"providertype":"linode","provisioner":{"api_token":"tok-secret-98765","root_pass":"Root-pass-1234567"}}}}`
	in := strings.Join([]string{
		":fake http api.linode.com",
		"seen = {}",
		`fake:route("GET", "/v4/linode/instances", function(req) seen[#seen + 1] = req.headers["x-filter"]; return {json = {data = {}}} end)`,
		`fake:route("POST", "/v4/linode/instances", {json = {id = 7, label = "web1", status = "provisioning", ipv4 = {"203.0.113.9"}}})`,
		":task " + task,
		":task",
		":run",
		"=seen[1]",
		":set config.provider.provisioner.poll_interval 5",
		":set config.provider.provisioner.regoin \"eu-west\"",
		":set config.provider.provisioner.region \"eu-west\"",
		`t = require("loom.test").task("DELETE", {fields = {api_token = "x"}, providerid = "7"})`,
		"=t.config.provider.providertype, t.taskName",
		":fake ssh 10.0.0.9",
		`fake:on("uptime", "up 3 days")`,
		`c = require("loom.ssh").connect({host = "10.0.0.9", user = "root", password = "pw"})`,
		`=c:exec("uptime").stdout`,
		":fake",
	}, "\n") + "\n"
	r, out, errb := newKitREPL(t, in, "linode")
	if err := r.Run(context.Background()); !errors.Is(err, ErrFailed) {
		t.Errorf("the refused :set lines should fail the run: %v", err)
	}
	o, e := out.String(), errb.String()
	for _, w := range []string{
		"fake: an HTTP fake for api.linode.com",
		`"api_token": "[REDACTED]"`, `"root_pass": "[REDACTED]"`,
		"created linode 7 (web1)", `"providerid": "7"`,
		`"{\"label\":\"web1\"}"`,
		`config.provider.provisioner.region = "eu-west"`,
		`"linode"` + "\n" + `"DELETE"`,
		`"up 3 days"`,
		"http api.linode.com at http://127.0.0.1:", "ssh 10.0.0.9 port 22 (created at :fake ssh 10.0.0.9)",
	} {
		if !strings.Contains(o, w) {
			t.Errorf("stdout lacks %q:\n%s", w, o)
		}
	}
	if strings.Contains(o, "tok-secret-98765") {
		t.Errorf("the token was printed:\n%s", o)
	}
	for _, w := range []string{
		`not set: linode's field poll_interval (text) holds a string, and 5 is a number: quote it`,
		`not set: linode declares no field "regoin" (did you mean "region"?)`,
	} {
		if !strings.Contains(e, w) {
			t.Errorf("stderr lacks %q:\n%s", w, e)
		}
	}
}
