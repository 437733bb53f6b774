// Package test holds Loom's end-to-end tests: they build loomd and drive
// the real binary (through pipes and a pseudo-terminal).
package test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// loomdBin is the loomd binary TestMain builds once for the package.
var loomdBin string

// deadline bounds every wait on the binary: generous, for -race on a
// loaded machine. It is a deadline, never an assertion about speed.
const deadline = 60 * time.Second

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "loomd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "creating a temp dir:", err)
		os.Exit(1)
	}
	loomdBin = filepath.Join(dir, "loomd")
	build := exec.Command("go", "build", "-o", loomdBin, "./cmd/loomd")
	build.Dir = repoRoot()
	// Static, as make build makes it: loomd bundle refuses a dynamic base.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building loomd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// repoRoot is the module root: this package lives in <root>/test.
func repoRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Dir(wd)
}

func examples(parts ...string) string {
	return filepath.Join(append([]string{repoRoot(), "examples"}, parts...)...)
}

// replEnv is a clean environment for the binary: its own HOME and history.
func replEnv(t *testing.T, history string) []string {
	t.Helper()
	home := t.TempDir()
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TERM=xterm", "LOOM_REPL_HISTORY=" + history}
	return env
}

type piped struct {
	stdout, stderr string
	code           int
}

// runPiped runs `loomd repl` with stdin from a pipe.
func runPiped(t *testing.T, stdin string, args ...string) piped {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	work := t.TempDir()
	full := append([]string{"repl", "--work-dir", work}, args...)
	if !hasFlag(args, "--plugins") {
		full = append(full, "--plugins", examples("plugins"))
	}
	cmd := exec.CommandContext(ctx, loomdBin, full...)
	cmd.Env = replEnv(t, filepath.Join(t.TempDir(), "history"))
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running loomd repl: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("loomd repl did not finish within %s\nstdout:\n%s\nstderr:\n%s", deadline, out.String(), errb.String())
	}
	return piped{out.String(), errb.String(), code}
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

// wantAll reports each of wants missing from one of p's streams.
func (p piped) wantAll(t *testing.T, name, stream string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(stream, w) {
			t.Errorf("%s lacks %q:\n%s", name, w, p)
		}
	}
}

func (p piped) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s\n--- stderr:\n%s", p.code, p.stdout, p.stderr)
}

func TestREPLPipedExpressions(t *testing.T) {
	in := strings.Join([]string{
		`1+1`,
		`=6*7`,
		`function double(x)`,
		`  return x * 2`,
		`end`,
		`=double(50)`,
		`t = {zeta = 1, alpha = {nested = "yes"}, "first"}`,
		`t.me = t`,
		`=t`,
		`=string.rep("ab", 400)`,
		`s = [[one`,
		`two]]`,
		`=#s`,
	}, "\n") + "\n"
	p := runPiped(t, in)
	if p.code != 0 || p.stderr != "" {
		t.Fatalf("want exit 0 and no errors:\n%s", p)
	}
	want := []string{
		"2\n", "42\n", "100\n",
		// Array part first, then keys sorted; nested tables indented; the cycle marked.
		"{\n  \"first\",\n  alpha = { nested = \"yes\" },\n  me = <cycle: back to the top>,\n  zeta = 1,\n}\n",
		"(truncated: 400 of 800 bytes shown)",
		"7\n",
	}
	for _, w := range want {
		if !strings.Contains(p.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, p)
		}
	}
}

// Without a plugins folder the REPL starts bare, with the loom modules,
// and says so, instead of refusing to start.
func TestREPLWithoutPluginsFolder(t *testing.T) {
	// loom itself is preloaded in the bare sandbox.
	p := runPiped(t, "=require(\"loom.json\").encode({a = 1})\n=type(loom.Provider)\n", "--plugins", filepath.Join(t.TempDir(), "absent"))
	if p.code != 0 || !strings.Contains(p.stdout, `{\"a\":1}`) || !strings.Contains(p.stdout, `"table"`) || !strings.Contains(p.stderr, "a bare sandbox") {
		t.Fatalf("want a bare sandbox answering:\n%s", p)
	}
}

func TestREPLPipedErrorKeepsSession(t *testing.T) {
	p := runPiped(t, "x = 5\nerror(\"boom\")\n=x + 1\nlocal y = \n")
	if p.code != 1 {
		t.Errorf("want exit status 1 after a failed statement, got:\n%s", p)
	}
	if !strings.Contains(p.stdout, "6\n") {
		t.Errorf("the session did not survive the error (no 6 on stdout):\n%s", p)
	}
	for _, w := range []string{"error: stdin:2: boom", "stack traceback:", "stdin:4: unexpected end of file"} {
		if !strings.Contains(p.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, p)
		}
	}
	if strings.Contains(p.stdout, "boom") {
		t.Errorf("errors must go to stderr, not stdout:\n%s", p)
	}
}

// Piped errors name the input line of the statement (stdin:N, counting
// command, blank and continuation lines), tracebacks name the plugin's
// methods, and self:fail blames the line that called it.
func TestREPLPipedErrorLocations(t *testing.T) {
	in := strings.Join([]string{
		`:load skeleton`, // 1
		`:task ` + examples("tasks", "confirm.json"),
		``,
		`function nested()`, // 4
		`  local t = nil`,
		`  return t.x`, // 6
		`end`,
		`nested()`, // 8
		`:run`,     // 9: the example's own error, in its confirm method
		`function SkeletonProvider:confirm(input)`, // 10
		`  self:fail("refused " .. tostring(input.providerid))`,
		`end`,
		`:run`,
		`error("last")`, // 14
		`:bogus`,        // 15: a command's error names its line too
	}, "\n") + "\n"
	p := runPiped(t, in)
	if p.code != 1 {
		t.Fatalf("want exit 1:\n%s", p)
	}
	p.wantAll(t, "stderr", p.stderr,
		"error: stdin:6: attempt to index local 't' (a nil value)",
		"stdin:6: in function 'nested'",
		"skeleton-provider.lua:51: in function 'SkeletonProvider:confirm'",
		// self:fail's message and traceback point at the prompt's line 11.
		"failed with status 1: stdin:11: refused skel-",
		"stdin:11: in function 'SkeletonProvider:confirm'",
		"error: stdin:14: last",
		"error: stdin:9: CONFIRM (skeleton confirm) failed with status 1: ",
		"error: stdin:15: unknown command :bogus",
	)
	for _, bad := range []string{"repl:1", "stdlib/loom.lua:45: refused"} {
		if strings.Contains(p.stderr, bad) {
			t.Errorf("stderr has %q:\n%s", bad, p)
		}
	}
	// Only the last statement's own chunk is a main chunk.
	if n := strings.Count(p.stderr, "in main chunk"); n != 1 {
		t.Errorf("want one main chunk in the tracebacks (error(\"last\")), got %d:\n%s", n, p)
	}
}

// :help shows a binding's spec and :test runs the plugin's Lua tests,
// against the real bindings and the bundled static provider.
func TestREPLPipedHelpAndTest(t *testing.T) {
	in := ":help loom.ssh.connect\n:help conn:exec\n:test claims a free host\n:result\n"
	p := runPiped(t, in, "--plugins", filepath.Join(repoRoot(), "plugins"), "static")
	if p.code != 0 || p.stderr != "" {
		t.Fatalf("want exit 0 and no errors:\n%s", p)
	}
	p.wantAll(t, "stdout", p.stdout,
		"loom.ssh.connect(opts ssh.ConnectOptions) -> ssh.Conn\n  Opens (or reuses) a pooled connection",
		"loom.ssh.conn:exec(cmd string, opts? ssh.ExecOptions) -> ssh.ExecResult",
		"ok 1 - CREATE claims a free host whose labels match the flavor and image",
		"# 1 passed, 0 failed",
		"no result yet: :run a hook first",
	)
	p = runPiped(t, ":test\n", "--plugins", filepath.Join(repoRoot(), "plugins"))
	if p.code != 1 || !strings.Contains(p.stderr, "no plugin loaded: :load TYPE first") {
		t.Errorf(":test in a bare sandbox should say to :load a type:\n%s", p)
	}
}

func TestREPLPipedTaskAndRun(t *testing.T) {
	in := strings.Join([]string{
		`:load hello`,
		`:task ` + examples("tasks", "install.json"),
		`=self.task.config.service.name`,
		`:run`,
		`:set config.service.action.fields.service_port "9090"`,
		`:run install`,
		`:result`,
		`=_.status .. "/" .. tostring(_.result.hello.web.port)`,
		`=self.result.status`,
		`:task`,
	}, "\n") + "\n"
	p := runPiped(t, in)
	if p.code != 0 || p.stderr != "" {
		t.Fatalf("want exit 0 and no errors:\n%s", p)
	}
	for _, w := range []string{
		"loaded hello",
		"task 00000042-001-004: INSTALL -> hello install",
		"\"web\"\n",
		// the hook's log line, shown as it happens
		"[info] hello.install: install web on web00000042-1000.example.com: now installed",
		"\"status\": 0",
		"-- INSTALL (hello install): status 0 in ",
		"config.service.action.fields.service_port = \"9090\"",
		"\"port\": \"9090\"",
		"-- install: status 0 in ",
		// the last result, visible to Lua as _ and as self.result
		"\"0/9090\"\n",
		"0\n",
		"\"service_port\": \"9090\"",
	} {
		if !strings.Contains(p.stdout, w) {
			t.Errorf("stdout lacks %q:\n%s", w, p)
		}
	}
}

func TestREPLPipedFailingHook(t *testing.T) {
	// CONFIRM of a machine that was never created fails in the plugin.
	in := ":load skeleton\n:task " + examples("tasks", "confirm.json") + "\n:run\n=\"still here\"\n"
	p := runPiped(t, in)
	if p.code != 1 {
		t.Errorf("want exit 1 for a failed hook:\n%s", p)
	}
	if !strings.Contains(p.stdout, "\"status\": 1") || !strings.Contains(p.stdout, "skeleton-provider.lua:") {
		t.Errorf("the result should show status 1 and the failing file:line:\n%s", p)
	}
	if !strings.Contains(p.stderr, "failed with status 1") || !strings.Contains(p.stderr, "was CREATE run?") {
		t.Errorf("stderr should say the hook failed and why:\n%s", p)
	}
	if !strings.Contains(p.stdout, "\"still here\"") {
		t.Errorf("the session should continue after a failed hook:\n%s", p)
	}
}

func TestREPLPipedSandboxProbes(t *testing.T) {
	probes := []string{
		`os.execute("id")`,
		`io.open("/etc/passwd")`,
		`loadstring("return 1")`,
		`setmetatable("", {})`,
		`require("../x")`,
		`dofile("/etc/passwd")`,
		`getfenv(1)`,
		`string.rep("x", 1e9)`,
		`require("os")`,
	}
	for _, probe := range probes {
		t.Run(probe, func(t *testing.T) {
			p := runPiped(t, ":load hello\n"+probe+"\n=\"after\"\n")
			if p.code != 1 {
				t.Errorf("the probe should fail (exit 1):\n%s", p)
			}
			if !strings.Contains(p.stderr, "error: ") {
				t.Errorf("the probe should print an error:\n%s", p)
			}
			if !strings.Contains(p.stdout, "\"after\"") {
				t.Errorf("the session should go on after the probe:\n%s", p)
			}
		})
	}
}

func TestREPLPipedUsage(t *testing.T) {
	p := runPiped(t, "", "nope")
	if p.code != 2 || !strings.Contains(p.stderr, `no plugin type "nope"`) {
		t.Errorf("an unknown type should be a usage error (exit 2):\n%s", p)
	}
	if p := runPiped(t, ":load hello\n:quit\nerror('not reached')\n"); p.code != 0 {
		t.Errorf(":quit should stop reading:\n%s", p)
	}
}

// TestREPLPipedReload is the debugging loop of docs/repl.md in one
// session: a hook fails, the file is fixed on disk (as an editor would,
// between two statements), :reload picks the fix up, and the run passes.
func TestREPLPipedReload(t *testing.T) {
	plugins := t.TempDir()
	copyDir(t, examples("plugins", "skeleton-automator"), filepath.Join(plugins, "skeleton-automator"))
	main := filepath.Join(plugins, "skeleton-automator", "skeleton-automator.lua")
	good, err := os.ReadFile(main)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Replace(good, []byte("input.fields.greeting"), []byte("input.fields.greting:upper()"), 1)
	if bytes.Equal(bad, good) {
		t.Fatal("the example plugin changed: update this test's edit")
	}
	if err := os.WriteFile(main, bad, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, loomdBin, "repl", "--plugins", plugins, "--work-dir", t.TempDir())
	cmd.Env = replEnv(t, filepath.Join(t.TempDir(), "history"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	var errb syncBuffer
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stdin, ":load hello\n:task %s\n:run\n=\"fixing\"\n", examples("tasks", "install.json"))
	if !out.waitFor(ctx, `"fixing"`) {
		t.Fatalf("no output from the first half; stdout:\n%s\nstderr:\n%s", out, &errb)
	}
	first := out.String()
	if !strings.Contains(first, `"status": 1`) || !strings.Contains(first, "skeleton-automator.lua:") {
		t.Fatalf("the broken hook should fail with its file:line:\n%s", first)
	}
	if err := os.WriteFile(main, good, 0o644); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stdin, ":reload\n:run\n")
	stdin.Close()
	err = cmd.Wait()
	rest := strings.TrimPrefix(out.String(), first)
	if !strings.Contains(rest, "reloaded: updated hello") || !strings.Contains(rest, `"status": 0`) {
		t.Fatalf("after the fix and :reload the run should pass:\n%s\nstderr:\n%s", rest, &errb)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("the session had a failed run, so it should exit 1: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a poller.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until the buffer holds want or ctx ends.
func (s *syncBuffer) waitFor(ctx context.Context, want string) bool {
	for ctx.Err() == nil {
		if strings.Contains(s.String(), want) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// term drives loomd repl on a pseudo-terminal.
type term struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	mu   sync.Mutex
	buf  bytes.Buffer
	seen int // output before this offset has been matched already
	done chan struct{}
}

func startTerm(t *testing.T, history string, args ...string) *term {
	t.Helper()
	full := append([]string{"repl", "--plugins", examples("plugins"), "--work-dir", t.TempDir()}, args...)
	cmd := exec.Command(loomdBin, full...)
	cmd.Env = replEnv(t, history)
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 132})
	if err != nil {
		t.Fatalf("starting loomd on a pty: %v", err)
	}
	tm := &term{t: t, cmd: cmd, pty: f, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		b := make([]byte, 4096)
		for {
			n, err := f.Read(b)
			tm.mu.Lock()
			tm.buf.Write(b[:n])
			tm.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
	})
	return tm
}

func (tm *term) send(s string) {
	tm.t.Helper()
	if _, err := tm.pty.Write([]byte(s)); err != nil {
		tm.t.Fatalf("writing to the pty: %v", err)
	}
}

// expect waits until the output after the last match contains want.
func (tm *term) expect(want string) {
	tm.t.Helper()
	if !tm.waitFor(want, deadline, nil) {
		tm.t.Fatalf("no %q on the terminal within %s; output since the last match:\n%q", want, deadline, tm.since())
	}
}

// waitFor polls the output for want, calling every (when not nil) at
// each poll; it reports whether want appeared before the deadline.
func (tm *term) waitFor(want string, limit time.Duration, every func()) bool {
	stop := time.Now().Add(limit)
	for time.Now().Before(stop) {
		tm.mu.Lock()
		out := tm.buf.String()
		if i := strings.Index(out[tm.seen:], want); i >= 0 {
			tm.seen += i + len(want)
			tm.mu.Unlock()
			return true
		}
		tm.mu.Unlock()
		if every != nil {
			every()
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// bareLF is a newline not preceded by a carriage return.
var bareLF = regexp.MustCompile(`(^|[^\r])\n`)

// all is everything the terminal showed.
func (tm *term) all() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.buf.String()
}

func (tm *term) since() string {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return tm.buf.String()[tm.seen:]
}

// exit sends Ctrl-D and waits for loomd to exit 0.
func (tm *term) exit() {
	tm.t.Helper()
	tm.send("\x04")
	errc := make(chan error, 1)
	go func() { errc <- tm.cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			tm.t.Fatalf("loomd repl exited with %v; output:\n%q", err, tm.since())
		}
	case <-time.After(deadline):
		tm.t.Fatalf("loomd repl did not exit on Ctrl-D; output:\n%q", tm.since())
	}
}

func TestREPLTerminalPromptAndHistory(t *testing.T) {
	history := filepath.Join(t.TempDir(), "state", "loom", "repl_history")

	tm := startTerm(t, history)
	tm.expect("Loom REPL on a bare sandbox")
	tm.expect("loom> ")
	tm.send("=1000+337\r")
	tm.expect("1337")
	tm.expect("loom> ")
	tm.send("=2000+448\r")
	tm.expect("2448")
	tm.expect("loom> ")
	tm.send("log.\t") // a completion list, written in raw mode too
	tm.expect("log.warn")
	tm.send("\x03\x03")
	tm.expect("loom> ")
	tm.exit()
	// The line editor writes in raw mode, where a bare LF moves down
	// without returning to column 0: the first line of output would start
	// at the cursor's column. Every newline on the terminal is CRLF.
	if out := tm.all(); bareLF.MatchString(out) {
		t.Errorf("bare LF on the terminal at %q", out[max(0, bareLF.FindStringIndex(out)[0]-40):bareLF.FindStringIndex(out)[1]])
	}

	data, err := os.ReadFile(history)
	if err != nil {
		t.Fatalf("no history file: %v", err)
	}
	if !strings.Contains(string(data), "=1000+337\n") {
		t.Fatalf("history lacks the statement:\n%s", data)
	}
	if st, err := os.Stat(history); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("the history file should be private (0600): %v %v", st.Mode(), err)
	}

	// A second run recalls both statements: Up arrow, then Ctrl-R search.
	tm = startTerm(t, history)
	tm.expect("loom> ")
	tm.send("\x1b[A\r") // Up: the last statement
	tm.expect("2448")
	tm.expect("loom> ")
	tm.send("\x121000+\r") // Ctrl-R "1000+": the older one
	tm.expect("1337")
	tm.expect("loom> ")
	tm.exit()
}

func TestREPLTerminalMultilineAndCompletion(t *testing.T) {
	tm := startTerm(t, filepath.Join(t.TempDir(), "history"), "hello")
	tm.expect("hello> ")

	// An open function continues with a continuation prompt.
	tm.send("function add(a, b)\r")
	tm.expect("....> ")
	tm.send("return a + b end\r")
	tm.expect("hello> ")
	tm.send("=add(40, 2)\r")
	tm.expect("42")
	tm.expect("hello> ")

	// Module names in require("loom.
	tm.send("j = require(\"loom.\t")
	tm.expect("json")
	tm.send("\x03\x03") // Ctrl-C leaves the candidate list, then discards the line
	tm.expect("^C")
	tm.expect("hello> ")
	tm.send("j = require(\"loom.json\")\r")
	tm.expect("hello> ")
	// A module's fields.
	tm.send("j.\t")
	tm.expect("decode")
	tm.expect("encode")
	tm.send("\x03\x03")
	tm.expect("^C")
	tm.expect("hello> ")
	// The log global's functions (completion reads the live state).
	tm.send("log.\t")
	tm.expect("debug")
	tm.send("\x03\x03")
	tm.expect("^C")
	tm.expect("hello> ")

	// self.task.config. paths, once a task is set.
	tm.send(":task " + examples("tasks", "install.json") + "\r")
	tm.expect("INSTALL -> hello install")
	tm.expect("hello> ")
	tm.send("=self.task.config.serv\t") // the common prefix first
	tm.expect("self.task.config.service")
	tm.send("\t") // then the list
	tm.expect("services")
	tm.send("\x03\x03")
	tm.expect("^C")
	tm.expect("hello> ")
	tm.send("=self.task.config.hostn\t\r")
	tm.expect("\"web00000042-1000.example.com\"")
	tm.expect("hello> ")
	tm.exit()
}

func TestREPLTerminalCtrlCInterrupts(t *testing.T) {
	tm := startTerm(t, filepath.Join(t.TempDir(), "history"))
	tm.expect("loom> ")
	tm.send("kept = 1\r")
	tm.expect("loom> ")
	tm.send("while true do end\r")
	tm.expect("while true do end")
	// Ctrl-C may reach the terminal before the loop starts (while the line
	// editor still owns it); send it until the statement reports the
	// interrupt.
	if !tm.waitFor("interrupted: Ctrl-C", deadline, func() { tm.send("\x03") }) {
		t.Fatalf("Ctrl-C did not interrupt the loop; output:\n%q", tm.since())
	}
	tm.expect("loom> ")
	tm.send("=\"back\" .. 1\r")
	tm.expect("\"back1\"")
	tm.expect("loom> ")
	tm.exit()
}
