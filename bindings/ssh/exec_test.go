package ssh

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/internal/sshdtest"
)

func TestExecBasics(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn()
		r = c:exec("echo hello; echo oops >&2; echo \"$APP_COLOR/$OTHER\"", {env={APP_COLOR="blue", OTHER="it's"}})`)
	if got := e.str("r.stdout"); got != "hello\nblue/it's\n" {
		t.Fatalf("stdout = %q", got)
	}
	if got := e.str("r.stderr"); got != "oops\n" {
		t.Fatalf("stderr = %q", got)
	}
	if e.eval("r.exit_code").(lua.LNumber) != 0 || e.eval("r.ok") != lua.LTrue || e.eval("r.timed_out") != lua.LFalse {
		t.Fatalf("want exit 0, ok, not timed out")
	}
	if got := e.str(`c:exec("cat", {stdin="from stdin"}).stdout`); got != "from stdin" {
		t.Fatalf("stdin: got %q", got)
	}
	if got := e.str(`c:exec("tty >/dev/null && echo tty; echo err >&2", {pty=true}).stdout`); got != "tty\r\nerr\r\n" {
		t.Fatalf("pty: got %q", got)
	}
	// On a pty, stdin ends with the terminal's EOF character.
	if got := e.str(`c:exec("cat", {pty=true, stdin="abc"}).stdout`); got != "abc" {
		t.Fatalf("pty stdin: got %q", got)
	}
	if got := e.str(`c:exec("cat; echo end", {pty=true, timeout=10}).stdout`); got != "end\r\n" {
		t.Fatalf("pty without stdin: got %q", got)
	}
	if got := e.str(`tostring(c)`); got != "ssh.conn("+e.srv.User+"@"+e.addr()+")" {
		t.Fatalf("tostring = %q", got)
	}
	et := e.luaErr(`c:exec("true", {timout=1})`)
	wantKind(t, et, "config", "timout")
}

func TestExecExitCodesAndSignals(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn()
		r3 = c:exec("exit 3")
		rt = c:exec("kill -TERM $$")
		rn = c:exec("no-such-command-xyz")`)
	if e.eval("r3.exit_code") != lua.LNumber(3) || e.eval("r3.ok") != lua.LFalse {
		t.Fatalf("exit 3: got %v", e.eval("r3.exit_code"))
	}
	if e.eval("rt.exit_code") != lua.LNumber(143) || e.str("rt.signal") != "TERM" {
		t.Fatalf("kill -TERM: exit %v signal %v", e.eval("rt.exit_code"), e.eval("rt.signal"))
	}
	if e.eval("rn.exit_code") != lua.LNumber(127) || !strings.Contains(e.str("rn.stderr"), "not found") {
		t.Fatalf("missing command: exit %v stderr %q", e.eval("rn.exit_code"), e.str("rn.stderr"))
	}
	et := e.luaErr(`c:exec("echo out; echo bad >&2; exit 4", {check=true})`)
	wantKind(t, et, "command", "status 4", e.addr(), e.srv.User)
	if field(et, "stdout") != "out\n" || field(et, "stderr") != "bad\n" || field(et, "exit_code") != "4" ||
		field(et, "command") != "echo out; echo bad >&2; exit 4" {
		t.Fatalf("command error fields: stdout=%q stderr=%q exit=%q command=%q",
			field(et, "stdout"), field(et, "stderr"), field(et, "exit_code"), field(et, "command"))
	}
}

func TestExecLargeOutputBounded(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn()
		big = c:exec("head -c 52428800 /dev/zero; echo tail >&2")
		small = c:exec("head -c 100000 /dev/zero", {max_capture="1KiB"})
		noisy = c:exec("head -c 5000000 /dev/urandom >&2; echo done")`)
	if n := len(e.str("big.stdout")); n != defaultMaxCapture {
		t.Fatalf("50MB of stdout: captured %d bytes, want %d", n, defaultMaxCapture)
	}
	if e.eval("big.truncated") != lua.LTrue || e.str("big.stderr") != "tail\n" || e.eval("big.exit_code") != lua.LNumber(0) {
		t.Fatalf("big: truncated=%v stderr=%q", e.eval("big.truncated"), e.str("big.stderr"))
	}
	if n := len(e.str("small.stdout")); n != 1024 || e.eval("small.truncated") != lua.LTrue {
		t.Fatalf("max_capture=1KiB: captured %d", n)
	}
	// 5 MB of stderr while stdout stays idle must not stall stdout.
	if e.str("noisy.stdout") != "done\n" || e.eval("noisy.truncated") != lua.LTrue {
		t.Fatalf("noisy: stdout %q truncated %v", e.str("noisy.stdout"), e.eval("noisy.truncated"))
	}
}

func TestExecStreamingInterleaved(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`events = {}
		r = conn():exec("for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.3; done; printf partial", {
			on_stdout = function(l) events[#events+1] = "o:" .. l end,
			on_stderr = function(l) events[#events+1] = "e:" .. l end})
		got = table.concat(events, ",")`)
	got := strings.Split(e.str("got"), ",")
	if len(got) != 7 {
		t.Fatalf("events = %v", got)
	}
	// Each round's two lines arrive before the next round's (0.3 s apart).
	for i := 0; i < 3; i++ {
		pair := got[2*i] + "," + got[2*i+1]
		n := string(rune('1' + i))
		if pair != "o:out"+n+",e:err"+n && pair != "e:err"+n+",o:out"+n {
			t.Fatalf("round %d out of order: %v", i+1, got)
		}
	}
	if got[6] != "o:partial" {
		t.Fatalf("last partial line: %v", got)
	}
	if e.str("r.stdout") != "out1\nout2\nout3\npartial" {
		t.Fatalf("captured stdout %q", e.str("r.stdout"))
	}
	// An error in a callback aborts the command and surfaces as raised.
	e.run(`ok, err = pcall(function()
			conn():exec("echo one; sleep 3607", {on_stdout=function(l) error("stop here") end})
		end)`)
	if e.eval("ok") != lua.LFalse || !strings.Contains(e.str("tostring(err)"), "stop here") {
		t.Fatalf("callback error: ok=%v err=%v", e.eval("ok"), e.eval("tostring(err)"))
	}
	eventually(t, "no sleep 3607 left", func() bool { return len(sshdtest.ProcessesMatching("sleep 3607")) == 0 })
}

func TestExecSudo(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	// NOPASSWD user: sudo -n.
	if got := e.str(`conn(NPUSER):exec("id -u", {sudo=true, check=true}).stdout`); got != "0\n" {
		t.Fatalf("NOPASSWD sudo id -u = %q", got)
	}
	// Password user without a password: fails fast with a clear error.
	et := e.luaErr(`conn():exec("id -u", {sudo=true})`)
	wantKind(t, et, "auth", "needs a password", e.addr())
	// With the password; stdin still reaches the command, not sudo.
	e.run(`r = conn():exec("id -u; cat", {sudo={password=PASSWORD}, stdin="payload", check=true})`)
	if got := e.str("r.stdout"); got != "0\npayload" {
		t.Fatalf("password sudo stdout = %q", got)
	}
	if got := e.str("r.stderr"); got != "" {
		t.Fatalf("password sudo stderr = %q (markers must be stripped)", got)
	}
	// Another target user.
	if got := e.str(`conn():exec("id -un", {sudo={user=NPUSER, password=PASSWORD}}).stdout`); got != e.srv.NoPasswdUser+"\n" {
		t.Fatalf("sudo -u %s: %q", e.srv.NoPasswdUser, got)
	}
	// With a pty (requiretty setups).
	if got := e.str(`conn():exec("id -u", {sudo={password=PASSWORD}, pty=true}).stdout`); got != "0\r\n" {
		t.Fatalf("sudo with pty = %q", got)
	}
	// A wrong password.
	et = e.luaErr(`conn():exec("id -u", {sudo={password="wrong-password"}})`)
	wantKind(t, et, "auth", "rejected the password")
	for _, s := range []string{e.srv.Password, "wrong-password"} {
		if strings.Contains(e.h.Logs(), s) {
			t.Fatalf("a sudo password reached the log")
		}
	}
}

// luaQuoteString makes a Lua string literal.
func luaQuoteString(s string) string {
	return "[==[" + s + "]==]"
}

func TestExecHonoursHookDeadline(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn()`)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	e.h.Ctx = ctx
	et := e.luaErr(`c:exec("sleep 3640")`)
	wantKind(t, et, "timeout", "hook deadline", e.addr())
	eventually(t, "no sleep 3640 left", func() bool { return len(sshdtest.ProcessesMatching("sleep 3640")) == 0 })
	// Waiting for a connection is bounded by the deadline too.
	et = e.luaErr(`conn(USER, {reuse=false})`)
	wantKind(t, et, "timeout")
}

// uniqueSleeps returns two sleep commands no other test (or process on
// the machine) runs: their durations are random.
func uniqueSleeps() (a, b string) {
	n := 100000 + mrand.IntN(800000)
	return fmt.Sprintf("sleep %d", n), fmt.Sprintf("sleep %d", n+1)
}

// TestExecStopKillsProcessGroup: a timeout or a cancelled hook kills the
// command's whole process group on the node: logged in as root (sshd
// refuses signal requests for root sessions), as a plain user, and
// through sudo (NOPASSWD and with a password). The command has a child in
// the background; one variant ignores TERM, so only KILL ends it. After
// the stop no process of the command is left, the result says what was
// killed, and the cleanup code ran.
func TestExecStopKillsProcessGroup(t *testing.T) {
	e := newEnv(t, sshdtest.Config{AllowRoot: true}, nil)
	parent := e.t
	logins := []struct{ name, user, sudo, pty string }{
		{"root", `"root"`, "false", "false"},
		{"user", "USER", "false", "false"},
		{"sudo NOPASSWD", "NPUSER", "true", "false"},
		{"sudo password", "USER", "{password=PASSWORD}", "false"},
		// requiretty sudoers: the kill session gets a pty too.
		{"sudo password pty", "USER", "{password=PASSWORD}", "true"},
	}
	for _, lg := range logins {
		for _, stop := range []string{"timeout", "cancel"} {
			for _, trapTerm := range []bool{false, true} {
				if (trapTerm || lg.pty == "true") && stop == "cancel" && lg.name != "root" {
					continue // the same path as a timeout's; root's is the one that matters
				}
				name := lg.name + "/" + stop
				if trapTerm {
					name += "/ignores TERM"
				}
				t.Run(name, func(t *testing.T) {
					// Failures inside e's helpers belong to the subtest.
					e.t = t
					defer func() { e.t = parent }()
					a, b := uniqueSleeps()
					flag := flagPath(t)
					cmd := a + " & " + b + "; echo never"
					if trapTerm {
						cmd = "trap '' TERM; " + cmd
					}
					opts := `{kill_grace=0.5, sudo=` + lg.sudo + `, pty=` + lg.pty + `, cleanup=` + luaQuoteString("touch "+flag) + `}`
					started := true
					if stop == "timeout" {
						e.h.Ctx = context.Background()
						e.run(`r = conn(` + lg.user + `):exec(` + luaQuoteString(cmd) + `, {timeout=0.5, ` + opts[1:] + `)`)
						if e.eval("r.timed_out") != lua.LTrue || e.eval("r.ok") != lua.LFalse || e.str("r.stdout") != "" {
							t.Fatalf("timed_out = %v, stdout %q", e.eval("r.timed_out"), e.str("r.stdout"))
						}
						// Whether TERM came before the trap was set depends
						// on the machine's load: either account is honest.
						// So is a command that never started: a login shell
						// slow to read its rc files on a loaded machine (and
						// root's may be) can take longer than the timeout
						// plus the wait for its report.
						if stopped := e.str("r.stopped"); strings.HasPrefix(stopped, "it never reported its process group") {
							started = false
							t.Logf("the command did not start in time: %s", stopped)
						} else {
							wantStopped(t, stopped, false)
						}
					} else {
						ctx, cancel := context.WithCancel(context.Background())
						defer cancel()
						e.h.Ctx = ctx
						go func() {
							// Cancel once the command runs on the node
							// (not while sudo, whose arguments name it, is
							// still authenticating).
							for ctx.Err() == nil && !runningExactly(b) {
								time.Sleep(20 * time.Millisecond)
							}
							cancel()
						}()
						et := e.luaErr(`conn(` + lg.user + `):exec(` + luaQuoteString(cmd) + `, ` + opts + `)`)
						wantKind(t, et, "cancelled", "the hook was cancelled", e.addr())
						// Cancelled once the last sleep ran: the trap was set.
						wantStopped(t, field(et, "message"), trapTerm)
					}
					// A login shell still reading its rc files names the
					// command in its arguments: wait for it to go. The
					// command itself must never have run, or be dead.
					deadline := time.Now().Add(2 * time.Minute)
					for len(sshdtest.ProcessesMatching(a))+len(sshdtest.ProcessesMatching(b)) > 0 {
						if time.Now().After(deadline) {
							t.Fatalf("processes of the stopped command survive: %v %v", sshdtest.ProcessesMatching(a), sshdtest.ProcessesMatching(b))
						}
						time.Sleep(50 * time.Millisecond)
					}
					if _, err := os.Stat(flag); started && err != nil {
						t.Fatalf("the cleanup code did not run: %v", err)
					}
				})
			}
		}
	}
	e.h.Ctx = context.Background()
	// A command that ends by itself runs no cleanup; a checked timeout
	// says what was killed.
	flag := flagPath(t)
	e.run(`r = conn("root"):exec("true", {timeout=120, cleanup=` + luaQuoteString("touch "+flag) + `})`)
	if _, err := os.Stat(flag); err == nil || e.eval("r.stopped") != lua.LNil {
		t.Fatalf("cleanup ran (or stopped = %v) for a command that ended by itself", e.eval("r.stopped"))
	}
	a, _ := uniqueSleeps()
	et := e.luaErr(`conn("root"):exec("` + a + `", {timeout=0.5, check=true, cleanup="exit 3"})`)
	wantKind(t, et, "timeout", "timed out after 500ms; remote process group", "cleanup code exited with status 3")
	if !strings.Contains(field(et, "stopped"), "remote process group") {
		t.Fatalf("error field stopped = %q", field(et, "stopped"))
	}
}

// flagPath is a file path in a fresh directory every test user may
// write to; the file does not exist yet.
func flagPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "loom-flag-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "cleaned")
}

// runningExactly tells whether a process whose whole command line is cmdline
// runs on the machine.
func runningExactly(cmdline string) bool {
	for _, pid := range sshdtest.ProcessesMatching(cmdline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ") == cmdline {
			return true
		}
	}
	return false
}

// wantStopped checks the account of a stop: the group ended on TERM or
// was killed (a loaded machine may need KILL for anything), or, when
// needKill, was killed.
func wantStopped(t *testing.T, msg string, needKill bool) {
	t.Helper()
	want := `remote process group \d+ (ended on TERM|killed with KILL after a 500ms grace)`
	if needKill {
		want = `remote process group \d+ killed with KILL after a 500ms grace`
	}
	if !regexp.MustCompile(want).MatchString(msg) {
		t.Fatalf("%q does not match %q", msg, want)
	}
}

// TestExecSudoLoginEnv: login_env gives a command run through sudo the
// login user's environment (sudo -E), read in the command's own session:
// one session per exec, the login user's variables with their quoting
// intact, not the loader's or what sudo -E removes, sudo's HOME, USER and
// PATH, and stdin untouched behind the environment block.
func TestExecSudoLoginEnv(t *testing.T) {
	e := newEnv(t, sshdtest.Config{Extra: `SetEnv LOOM_KEPT=yes "LOOM_QUOTED=it's \"q\" $(id) ` + "`x`" + ` a\b" LD_LIBRARY_PATH=/nonexistent-loom BASH_ENV=/nonexistent-loom PYTHONPATH=/nonexistent-loom` + "\n"}, nil)
	script := `printf 'kept=%s\nquoted=%s\nld=%s\nbashenv=%s\npy=%s\nuser=%s\nhome=%s\nssh=%s\npath=%s\n' "${LOOM_KEPT-}" "${LOOM_QUOTED-}" "${LD_LIBRARY_PATH-}" "${BASH_ENV-}" "${PYTHONPATH-}" "$(id -un)" "$HOME" "${SSH_CONNECTION:+set}" "$PATH"; cat`
	e.L.SetGlobal("SCRIPT", lua.LString(script))
	e.run(`c = conn(NPUSER); c:exec("true")`)
	before := e.b.pool.sessionsOpened.Load()
	e.run(`r = c:exec(SCRIPT, {sudo=true, login_env=true, stdin="payload\nline 2", check=true})`)
	if n := e.b.pool.sessionsOpened.Load() - before; n != 1 {
		t.Errorf("exec with login_env opened %d sessions, want 1", n)
	}
	got := e.str("r.stdout")
	for _, want := range []string{"kept=yes\n", "quoted=it's \"q\" $(id) `x` a\\b\n", "ld=\n", "bashenv=\n", "py=\n", "user=root\n", "home=/root\n", "ssh=set\n", "payload\nline 2"} {
		if !strings.Contains(got, want) {
			t.Errorf("stdout lacks %q:\n%s", want, got)
		}
	}
	if !strings.Contains(got, "path=/usr/local/sbin:") {
		t.Errorf("PATH is not sudo's secure path:\n%s", got)
	}
	if s := e.str("r.stderr"); s != "" {
		t.Errorf("stderr = %q: the environment block must not reach it", s)
	}
	// Without login_env, sudo's own environment.
	e.run(`r = c:exec(SCRIPT, {sudo=true, check=true})`)
	if got := e.str("r.stdout"); !strings.Contains(got, "kept=\n") || !strings.Contains(got, "ssh=\n") {
		t.Errorf("without login_env the login environment came through:\n%s", got)
	}
	// With a sudo password and a pty.
	e.run(`r = conn():exec("echo kept=$LOOM_KEPT; cat", {sudo={password=PASSWORD}, login_env=true, pty=true, stdin="in", check=true})`)
	if got := e.str("r.stdout"); got != "kept=yes\r\nin" {
		t.Errorf("with a password and a pty: %q", got)
	}
	// Without sudo it changes nothing (the command has the login
	// environment already).
	if got := e.str(`c:exec("echo $LOOM_KEPT", {login_env=true}).stdout`); got != "yes\n" {
		t.Errorf("login_env without sudo: %q", got)
	}
	// A command stopped by its timeout still gets its group killed.
	e.run(`r = c:exec("sleep 3651", {sudo=true, login_env=true, timeout="300ms"})`)
	if e.eval("r.timed_out") != lua.LTrue {
		t.Errorf("the timeout did not stop the command: %s", e.str("r.stopped"))
	}
	eventually(t, "no sleep 3651 left", func() bool { return len(sshdtest.ProcessesMatching("sleep 3651")) == 0 })
}

func TestLoginEnvBlockRemovesLoaderVars(t *testing.T) {
	env := "export A='1'\nexport LD_PRELOAD='/x.so'\nexport B='multi\nexport LD_FAKE=y'\ndeclare -x _RLD_ROOT=\"/r\"\n"
	block := string(loginEnvBlock(env, "END"))
	if !strings.Contains(block, " LD_PRELOAD") || !strings.Contains(block, " _RLD_ROOT") || !strings.HasSuffix(block, " 2>/dev/null\nEND\n") {
		t.Errorf("block:\n%s", block)
	}
}

// TestExecShell: a command runs in the login shell (bash for the test
// users) unless exec names another one; under sudo, sh.
func TestExecShell(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	e.run(`c = conn(NPUSER)`)
	for code, want := range map[string]string{
		`c:exec("echo $0").stdout`:                                "bash\n",
		`c:exec("echo $0", {shell = "/bin/sh"}).stdout`:           "sh\n",
		`c:exec("echo $0", {sudo = true}).stdout`:                 "sh\n",
		`c:exec("echo $0", {sudo = true, shell = "bash"}).stdout`: "bash\n",
	} {
		if got := e.str(code); got != want {
			t.Errorf("%s = %q, want %q", code, got, want)
		}
	}
	wantKind(t, e.luaErr(`c:exec("true", {shell = "sh\nx"})`), "config", "shell")
}
