package ssh

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// execSpec is one command to run.
type execSpec struct {
	cmd        string
	stdin      io.Reader // nil: stdin is closed at once
	env        map[string]string
	pty        bool
	sudo       *sudoSpec
	timeout    time.Duration // 0: only the hook's deadline applies
	grace      time.Duration // between TERM and KILL
	maxCapture int64         // per stream
	// Line callbacks, called on the caller's goroutine (the Lua VM's).
	// An error aborts the command (it is terminated) and is returned.
	onStdout, onStderr func(line string) error
	// cleanup is shell code run on the node after a command we stopped
	// (timeout, hook deadline, callback error) is dead: as the same user
	// (through the same sudo), on a second session. It removes what the
	// command could not remove itself after a KILL (task files).
	cleanup string
	// shell runs cmd on the node: "" is the login shell ($SHELL, as sshd
	// runs a command), or sh under sudo. The binding's own commands use
	// /bin/sh: a second start of a login shell whose rc files are slow
	// (they already ran once for the session) would double their cost.
	shell string
	// loginEnv gives a command run through sudo the login user's
	// environment back, as sudo -E would: read and restored in the
	// command's own session (see loginEnvCapture).
	loginEnv bool
}

// sudoSpec asks for the command to run through sudo.
type sudoSpec struct {
	user     string // default root
	password string // "" means sudo -n
}

// execResult is what exec returns to Lua.
type execResult struct {
	stdout, stderr []byte
	exitCode       int
	signal         string
	timedOut       bool
	truncated      bool
	duration       time.Duration
	// stopped says what became of a command we stopped (timeout, hook
	// deadline, callback error); "" when it ran to its end.
	stopped string
}

// callbackError carries an error raised by a Lua line callback.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }
func (e callbackError) Unwrap() error { return e.err }

const (
	defaultMaxCapture = 4 << 20
	maxLine           = 64 << 10 // longer lines reach callbacks in pieces
	killWait          = 2 * time.Second
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// run executes spec on a pooled connection for cfg. A non-zero exit is
// data; errors are *bindings.Error (or callbackError).
func (b *Binding) run(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, spec execSpec) (*execResult, error) {
	for k := range spec.env {
		if !envName.MatchString(k) {
			return nil, bindings.Errorf("config", "exec: env name %q is not a valid shell variable name", k)
		}
	}
	if spec.maxCapture <= 0 {
		spec.maxCapture = defaultMaxCapture
	}
	if spec.grace <= 0 {
		spec.grace = b.opts.KillGrace
	}
	c, sess, err := b.session(ctx, cfg, key, logger)
	if err != nil {
		return nil, err
	}
	defer b.pool.release(c)
	defer sess.Close()
	r := &runner{b: b, c: c, cfg: cfg, sess: sess, spec: spec, logger: logger}
	return r.run(ctx)
}

// runner is the state of one running command.
type runner struct {
	b      *Binding
	c      *pconn
	cfg    *connConfig
	sess   *ssh.Session
	spec   execSpec
	logger *slog.Logger

	useSudo bool
	ctl     *markers
	// loginEnv: the environment read from the ctl stream (complete once
	// envDone), and the line that ends its block on stdin.
	env     []byte
	envDone bool
	envOver bool
	envEnd  string

	stdinMu     sync.Mutex
	stdin       io.WriteCloser
	stdinClosed bool

	phase   int // see the phase constants
	phaseC  <-chan time.Time
	started bool // the wrapper reported the command's process group
	group   int  // that process group (or, when !ownPG, the command's pid)
	ownPG   bool // group is a process group of the command's own
	prompts int  // sudo: password prompts seen

	killC     <-chan killReport // the kill session's report; nil until started
	killing   bool              // the kill session is still running
	killGrace time.Duration     // the grace it gave between TERM and KILL
	killed    *killReport       // what it found
}

const (
	running = iota
	termSent
	killSent
	closedSession
	abandoned
)

// markers are the random strings that let us talk to the remote side
// over plain pipes. The wrapper prints started (with the command's
// process group) before the command runs; it is stripped from the
// output. Under sudo, the password is written only when sudo prompts with
// our prompt marker, and the user's stdin only once the start marker
// came, so neither can land in the wrong place.
type markers struct {
	prompt  []byte // sudo -p marker
	started []byte // "loom-started-<hex>:", then "<pgid>:g" or "<pid>:p"
	sudo    bool   // the command runs through sudo
	// env is the line that opens and closes the login environment
	// (loginEnv): the export -p lines between two of them are kept apart,
	// never captured. "" when not asked for.
	env string
}

func randToken() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic("ssh: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// groupWrapper runs a command in a process group of its own and reports
// that group, so that a stop can kill everything the command started,
// from a second session, even where sshd refuses signals (root logins) or
// the command runs as another user (sudo). POSIX sh (dash, bash, busybox
// ash), one line, so that any login shell that takes POSIX single quotes
// can start it. Arguments: $1 the start marker, $2 the shell for the
// command ("" means the login shell, $SHELL, as sshd would use), $3 the
// command.
//
// sshd makes each session's process a session and group leader, and sudo
// with use_pty does the same for its command: then the group is ours
// already and nothing forks. Otherwise (sudo without a pty, a login shell
// that forks) setsid(1) makes one in place (it only forks for a leader,
// which we are not). Without setsid only the process itself is known: the
// marker says so ("p") and the stop kills that pid and its children.
// Every step execs, so the pid the marker names is the command's own and
// its exit status and signal reach sshd unchanged. A wrapper that cannot
// write its report (we gave up waiting and closed the session: a login
// shell slow to read its rc files) exits before the command runs.
var groupWrapper = strings.Join(append(wrapperReport[:len(wrapperReport):len(wrapperReport)],
	`exec $x "$s" -c "$3" "${s##*/}"`), "; ")

// wrapperReport finds the command's group and reports it: groupWrapper
// without its exec. x is setsid when the command needs a group of its own.
var wrapperReport = []string{
	`g=`,
	`{ read -r _ _ _ _ g _ </proc/$$/stat; } 2>/dev/null || g=$(ps -o pgid= -p $$ 2>/dev/null)`,
	`g=${g#"${g%%[! ]*}"}`,
	`s=${2:-${SHELL:-/bin/sh}}`,
	`x=`,
	`if [ "$g" = "$$" ]; then m=g; elif command -v setsid >/dev/null 2>&1; then m=g x=setsid; else m=p; fi`,
	`echo "$1$$:$m" >&2 || exit 125`,
}

// loginEnvCapture runs as the login user, in the command's own session,
// before sudo: it prints the user's exported environment (as
// `sh -c 'export -p'` would) between two $1 lines on stderr, where the
// binding takes it out of the stream, then execs sudo ("$@"). Printed by
// /bin/sh and read back by /bin/sh on the node, so the format is that
// shell's own, whichever it is.
const loginEnvCapture = `printf '%s\n' "$1" >&2; export -p >&2; printf '%s\n' "$1" >&2; shift; exec "$@"`

// groupEnvWrapper is groupWrapper for loginEnv, run as the sudo target:
// after the report (the binding writes stdin only once it has it), it
// reads shell code from stdin up to a line "$4" (loginEnvBlock: the
// captured environment and what sudo -E would have removed again) and
// evaluates it, then execs the command with the rest of stdin. Without
// that line (the binding gave up) the command does not run. The shell and
// setsid go into the positional parameters first: the environment may
// set any variable, and export -p's output never sets those.
var groupEnvWrapper = strings.Join(append(wrapperReport[:len(wrapperReport):len(wrapperReport)],
	`__loom_e= __loom_k=`,
	`while IFS= read -r __loom_l; do if [ "$__loom_l" = "$4" ]; then __loom_k=1; break; fi; __loom_e="$__loom_e$__loom_l
"; done`,
	`[ -n "$__loom_k" ] || exit 125`,
	`set -- "$x" "$s" "$3"`,
	`eval "$__loom_e"`,
	`exec $1 "$2" -c "$3" "${2##*/}"`), "; ")

// sudoEnvDelete are the variables sudo removes even with -E (its
// env_delete list): they change how programs load code or parse input.
// LD_* and _RLD* are removed as well (loginEnvBlock).
const sudoEnvDelete = "IFS CDPATH ENV BASH_ENV PS4 GLOBIGNORE BASHOPTS SHELLOPTS LOCALDOMAIN RES_OPTIONS HOSTALIASES " +
	"NLSPATH PATH_LOCALE TERMINFO TERMINFO_DIRS TERMPATH TERMCAP JAVA_TOOL_OPTIONS PERLIO_DEBUG PERLLIB " +
	"PERL5LIB PERL5OPT PERL5DB FPATH NULLCMD READNULLCMD ZDOTDIR TMPPREFIX PYTHONHOME PYTHONPATH " +
	"PYTHONINSPECT PYTHONUSERBASE RUBYLIB RUBYOPT"

// loaderVar matches an export -p line of a variable the dynamic loader
// reads (LD_PRELOAD...), which sudo never passes on.
var loaderVar = regexp.MustCompile(`(?m)^(?:export|declare -x) +((?:LD_|_RLD)[A-Za-z0-9_]*)`)

// loginEnvBlock is what the binding writes to stdin ahead of the
// command's own input when loginEnv is set: shell code that sets the
// login user's environment (env, as export -p printed it) as sudo -E
// would, except for the variables that say who and where the command
// runs (HOME, USER, LOGNAME, SHELL, PWD) and PATH (sudo's secure path),
// which keep sudo's values, and what sudo never passes on; then end,
// the line that closes the block.
func loginEnvBlock(env, end string) []byte {
	var b strings.Builder
	b.WriteString(`__loom_p=$PATH __loom_h=${HOME-} __loom_u=${USER-} __loom_n=${LOGNAME-} __loom_s=${SHELL-} __loom_w=${PWD-}` + "\n")
	b.WriteString(env)
	if env != "" && !strings.HasSuffix(env, "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(`PATH=$__loom_p HOME=$__loom_h USER=$__loom_u LOGNAME=$__loom_n SHELL=$__loom_s PWD=$__loom_w` + "\n")
	b.WriteString("export PATH HOME USER LOGNAME SHELL PWD\n")
	b.WriteString("unset __loom_p __loom_h __loom_u __loom_n __loom_s __loom_w __loom_e __loom_k __loom_l OLDPWD MAIL " + sudoEnvDelete)
	seen := map[string]bool{}
	for _, m := range loaderVar.FindAllStringSubmatch(env, -1) {
		if !seen[m[1]] {
			seen[m[1]] = true
			b.WriteString(" " + m[1])
		}
	}
	b.WriteString(" 2>/dev/null\n" + end + "\n")
	return []byte(b.String())
}

func (r *runner) commandLine() string {
	spec := r.spec
	keys := make([]string, 0, len(spec.env))
	for k := range spec.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var prefix strings.Builder
	r.ctl = &markers{prompt: []byte("[loom-sudo-" + randToken() + "]"), started: []byte("loom-started-" + randToken() + ":"), sudo: r.useSudo}
	if !r.useSudo {
		// Setenv first; sshd accepts only what AcceptEnv lists, so fall
		// back to exports (visible in ps: pass secrets on stdin instead).
		for _, k := range keys {
			if err := r.sess.Setenv(k, spec.env[k]); err != nil {
				fmt.Fprintf(&prefix, "export %s=%s; ", k, Quote(spec.env[k]))
			}
		}
		return fmt.Sprintf("/bin/sh -c %s sh %s %s %s", Quote(groupWrapper), r.ctl.started, Quote(spec.shell), Quote(prefix.String()+spec.cmd))
	}
	for _, k := range keys {
		fmt.Fprintf(&prefix, "export %s=%s; ", k, Quote(spec.env[k]))
	}
	auth := "-n"
	if spec.sudo.password != "" {
		auth = "-S -p " + Quote(string(r.ctl.prompt))
	}
	shell := spec.shell
	if shell == "" {
		shell = "sh"
	}
	if !spec.loginEnv {
		return fmt.Sprintf("sudo %s -u %s -- /bin/sh -c %s sh %s %s %s", auth, Quote(spec.sudo.user),
			Quote(groupWrapper), r.ctl.started, Quote(shell), Quote(prefix.String()+spec.cmd))
	}
	// One session: the login shell's /bin/sh prints the environment, then
	// becomes sudo; the wrapper restores it from stdin before the command.
	r.ctl.env = "loom-env-" + randToken()
	r.envEnd = "loom-env-end-" + randToken()
	return fmt.Sprintf("/bin/sh -c %s sh %s sudo %s -u %s -- /bin/sh -c %s sh %s %s %s %s", Quote(loginEnvCapture), r.ctl.env,
		auth, Quote(spec.sudo.user), Quote(groupEnvWrapper), r.ctl.started, Quote(shell), Quote(prefix.String()+spec.cmd), r.envEnd)
}

// event is something a stream reader saw.
type event struct {
	kind   int
	stream *stream
	line   string
	pid    int
	ownPG  bool
	over   bool // evEnv: the environment was over maxLoginEnv
}

const (
	evLine = iota
	evPrompt
	evStarted
	evEOF
	evEnv // line: the login environment, whole
)

func (r *runner) run(ctx context.Context) (*execResult, error) {
	spec := r.spec
	r.useSudo = spec.sudo != nil && spec.sudo.user != r.cfg.user
	if spec.pty {
		modes := ssh.TerminalModes{ssh.ECHO: 0, ssh.TTY_OP_ISPEED: 14400, ssh.TTY_OP_OSPEED: 14400}
		if err := r.sess.RequestPty("xterm", 40, 120, modes); err != nil {
			return nil, r.cfg.connError("command", "the server refused a pty: %v", err)
		}
	}
	line := r.commandLine()
	stdoutR, err1 := r.sess.StdoutPipe()
	stderrR, err2 := r.sess.StderrPipe()
	stdinW, err3 := r.sess.StdinPipe()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, bindings.Errorf("io", "exec: setting up pipes: %v", err)
	}
	r.stdin = stdinW

	events := make(chan event, 256)
	out := &stream{name: "stdout", r: stdoutR, max: spec.maxCapture, lines: spec.onStdout != nil, events: events}
	errS := &stream{name: "stderr", r: stderrR, max: spec.maxCapture, lines: spec.onStderr != nil, events: events}
	// With a pty, sudo's prompt and our marker arrive on stdout.
	if spec.pty {
		out.ctl = r.ctl
	} else {
		errS.ctl = r.ctl
	}

	start := time.Now()
	if err := r.sess.Start(line); err != nil {
		if r.c.isDead() {
			return nil, lostError(r.cfg, "exec", r.c)
		}
		return nil, r.cfg.connError("command", "starting the command: %v", err)
	}
	go out.pump()
	go errS.pump()
	waitCh := make(chan error, 1)
	go func() { waitCh <- r.sess.Wait() }()
	if !r.useSudo {
		r.feedStdin()
	}

	var (
		timeoutC <-chan time.Time
		ctxDone  = ctx.Done()
		waitErr  error
		waited   bool
		eofs     int
		timedOut bool
		ctxErr   error
		cbErr    error
		envErr   error
	)
	if spec.timeout > 0 {
		t := time.NewTimer(spec.timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	for eofs < 2 || !waited || r.killing {
		select {
		case ev := <-events:
			switch ev.kind {
			case evEOF:
				eofs++
			case evLine:
				cb := spec.onStdout
				if ev.stream == errS {
					cb = spec.onStderr
				}
				if cb != nil && r.phase == running && cbErr == nil {
					if err := cb(ev.line); err != nil {
						cbErr = callbackError{err}
						r.terminate()
					}
				}
			case evPrompt:
				r.prompts++
				if r.prompts == 1 && spec.sudo.password != "" {
					r.writeStdin([]byte(spec.sudo.password + "\n"))
				} else {
					// A second prompt: the password was wrong. Give sudo EOF.
					r.closeStdin()
				}
			case evEnv:
				r.env, r.envDone, r.envOver = []byte(ev.line), true, ev.over
			case evStarted:
				r.started, r.group, r.ownPG = true, ev.pid, ev.ownPG
				if r.useSudo && r.spec.loginEnv {
					if !r.envDone || r.envOver {
						// The wrapper waits for its block: without it,
						// EOF makes it exit before the command runs.
						why := "nothing came back before the command started (is /bin/sh a POSIX shell?)"
						if r.envOver {
							why = fmt.Sprintf("it is over %d MiB", maxLoginEnv>>20)
						}
						envErr = r.cfg.connError("command", "reading the login environment for sudo (login_env): %s; the command did not run", why)
						r.closeStdin()
					} else {
						r.feedStdinAfter(loginEnvBlock(string(r.env), r.envEnd))
					}
				} else if r.useSudo {
					r.feedStdin()
				}
				if r.phase != running {
					// Stopped while it was starting: kill it now.
					r.startKiller()
					if r.phase == termSent {
						r.phaseC = time.After(r.killGrace + afterKillWait + killWait)
					}
				}
			}
		case rep := <-r.killC:
			r.killing, r.killC, r.killed = false, nil, &rep
			if r.phase == termSent && !waited {
				// The group is dead (or beyond help): KILL through the
				// session too (all there is if the kill session failed),
				// give sshd a moment to report the exit, then close.
				r.phase = killSent
				r.signal(ssh.SIGKILL)
				r.phaseC = time.After(killWait)
			}
		case err := <-waitCh:
			waitErr, waited, waitCh = err, true, nil
		case <-timeoutC:
			timedOut, timeoutC = true, nil
			r.terminate()
		case <-ctxDone:
			// The hook is out of time: stop the command quickly.
			ctxErr, ctxDone = ctx.Err(), nil
			r.spec.grace = min(r.spec.grace, time.Second)
			r.terminate()
		case <-r.phaseC:
			r.advance()
		}
	}
	r.closeStdin()

	res := &execResult{
		stdout: out.buf, stderr: errS.buf, timedOut: timedOut, duration: time.Since(start),
		truncated: out.total > out.max || errS.total > errS.max,
	}
	if r.phase != running {
		res.stopped = r.stopReport()
		level := slog.LevelDebug
		if r.killed == nil || r.killed.outcome == "alive" || r.killed.err != nil || r.killed.cleanup != 0 {
			level = slog.LevelWarn
		}
		r.logger.Log(context.Background(), level, "ssh: stopped a remote command", "conn", r.cfg.String(),
			"cmd", shorten(spec.cmd), "outcome", res.stopped)
	}
	var exitErr *ssh.ExitError
	switch {
	case waitErr == nil:
	case errors.As(waitErr, &exitErr):
		res.exitCode = exitErr.ExitStatus()
		res.signal = exitErr.Signal()
	case r.phase >= closedSession:
		// We closed the session after TERM and KILL: no status came back.
		res.exitCode = -1
	default:
		if !r.c.isDead() && !r.c.ping(2*time.Second) {
			r.c.kill(fmt.Errorf("no answer after a command lost its exit status: %v", waitErr))
		}
		if r.c.isDead() {
			return nil, lostError(r.cfg, fmt.Sprintf("exec of %s", shorten(spec.cmd)), r.c)
		}
		res.exitCode = -1
	}
	if cbErr != nil {
		return nil, cbErr
	}
	if envErr != nil {
		return nil, envErr
	}
	if ctxErr != nil {
		if errors.Is(ctxErr, context.Canceled) {
			return nil, r.cfg.connError("cancelled", "the hook was cancelled while running %s; %s", shorten(spec.cmd), res.stopped)
		}
		return nil, r.cfg.connError("timeout", "hook deadline reached while running %s; %s", shorten(spec.cmd), res.stopped)
	}
	if r.useSudo && !r.started && !timedOut && res.exitCode != 0 {
		return nil, r.sudoError(res)
	}
	return res, nil
}

// sudoError explains why sudo refused to start the command.
func (r *runner) sudoError(res *execResult) error {
	msg := strings.TrimSpace(string(res.stderr))
	if r.spec.pty {
		msg = strings.TrimSpace(string(res.stdout))
	}
	user := r.spec.sudo.user
	switch {
	case r.prompts >= 2:
		return r.cfg.connError("auth", "sudo rejected the password (sudo -u %s)", user)
	case strings.Contains(msg, "a password is required"):
		return r.cfg.connError("auth", "sudo needs a password (sudo -n -u %s refused); pass sudo={password=...}", user)
	default:
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", res.exitCode)
		}
		return r.cfg.connError("permission", "sudo -u %s refused to run the command: %s", user, shorten(msg))
	}
}

// feedStdin copies the caller's stdin (if any) and then closes stdin.
func (r *runner) feedStdin() { r.feedStdinAfter(nil) }

// feedStdinAfter writes head, then the caller's stdin (if any), then
// closes stdin.
func (r *runner) feedStdinAfter(head []byte) {
	src := r.spec.stdin
	if src == nil && head == nil {
		r.closeStdin()
		return
	}
	go func() {
		r.stdinMu.Lock()
		defer r.stdinMu.Unlock()
		if !r.stdinClosed {
			tw := &tailWriter{w: r.stdin}
			if _, err := tw.Write(head); err == nil && src != nil {
				io.Copy(tw, src)
			}
			r.endStdin(tw.last)
		}
	}()
}

// tailWriter remembers the last byte written.
type tailWriter struct {
	w    io.Writer
	last byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	if len(p) > 0 {
		t.last = p[len(p)-1]
	}
	return t.w.Write(p)
}

// endStdin sends EOF. On a pty, closing the channel does not reach the
// command: the terminal's EOF character does (twice after a partial
// line: the first one only flushes it). Callers hold stdinMu.
func (r *runner) endStdin(last byte) {
	if r.spec.pty {
		eof := "\x04"
		if last != 0 && last != '\n' {
			eof = "\x04\x04"
		}
		io.WriteString(r.stdin, eof)
	}
	r.stdin.Close()
	r.stdinClosed = true
}

func (r *runner) writeStdin(p []byte) {
	r.stdinMu.Lock()
	defer r.stdinMu.Unlock()
	if !r.stdinClosed {
		r.stdin.Write(p)
	}
}

func (r *runner) closeStdin() {
	go func() {
		r.stdinMu.Lock()
		defer r.stdinMu.Unlock()
		if !r.stdinClosed {
			r.endStdin(0)
		}
	}()
}

// terminate stops the command. Once the wrapper has reported the
// command's process group, a second session kills that group: TERM,
// kill_grace, KILL, then the cleanup code (startKiller). sshd's own
// session signals go out too: they are all there is before the group is
// known, but sshd refuses them for root logins and they cannot reach a
// command under sudo. Whatever happens, the session is closed after
// KILL, and the whole connection is given up if even that hangs.
func (r *runner) terminate() {
	if r.phase != running {
		return
	}
	r.phase = termSent
	r.signal(ssh.SIGTERM)
	r.startKiller()
	if r.killing {
		// The kill session's budget, then the fallback takes over.
		r.phaseC = time.After(r.killGrace + afterKillWait + killWait)
		return
	}
	// Not started yet (a slow login shell, sudo authenticating): wait for
	// the wrapper to report its group, then kill it. If it never does,
	// the session is closed, and a wrapper that starts after that dies
	// writing its report into the closed pipe, before the command runs.
	r.phaseC = time.After(startWait)
}

func (r *runner) advance() {
	switch r.phase {
	case termSent:
		r.phase = killSent
		r.signal(ssh.SIGKILL)
		r.phaseC = time.After(killWait)
	case killSent:
		r.phase = closedSession
		r.sess.Close()
		r.phaseC = time.After(killWait)
	case closedSession:
		if r.killing {
			// The kill session (or its cleanup) is still at work; it
			// has its own time limit.
			r.phaseC = time.After(killWait)
			return
		}
		// Nothing answers: give up on the whole connection so the
		// readers and Wait return.
		r.phase = abandoned
		r.phaseC = nil
		r.c.kill(errors.New("a terminated command's session did not close"))
	}
}

// signal sends sig through the command's own session (sshd signals the
// session's process group; it refuses for root logins). Under sudo, a
// command still authenticating gets EOF on stdin, which makes sudo give up.
func (r *runner) signal(sig ssh.Signal) {
	if r.useSudo && !r.started {
		r.closeStdin()
	}
	r.sess.Signal(sig)
}

// killReport is what the kill session found.
type killReport struct {
	outcome string // "gone" (ended on TERM), "killed" (needed KILL), "alive" (survived KILL)
	left    int    // live processes left, for "alive"
	cleanup int    // exit status of the cleanup code; 0 when it worked or there was none
	err     error  // the kill session could not run
}

const (
	afterKillWait = 2 * time.Second // how long the kill session waits for KILL to take
	cleanupBudget = 10 * time.Second
	// startWait is how long a command stopped before it started gets to
	// report its process group; loginBudget what a kill session may spend
	// starting (the login shell reads its rc files, slow on busy nodes).
	startWait   = 15 * time.Second
	loginBudget = 30 * time.Second
)

// startKiller starts the kill session, once the group is known.
func (r *runner) startKiller() {
	if r.group <= 1 || r.killC != nil {
		return
	}
	ch := make(chan killReport, 1)
	r.killC, r.killing, r.killGrace = ch, true, r.spec.grace
	script := killScript(r.group, r.ownPG, r.killGrace)
	budget := loginBudget + r.killGrace + afterKillWait + cleanupBudget
	go func() { ch <- r.kill(script, budget) }()
}

// killScript is the remote side of a stop: TERM to the group, up to
// grace for it to end, KILL, up to afterKillWait for that to take, then
// the cleanup code ($1), and one status line. Processes are counted in
// /proc so that zombies (dead, waiting for a parent that may never reap
// them) do not count as alive; kill -0 serves where there is no /proc.
func killScript(target int, ownPG bool, grace time.Duration) string {
	mode := "p"
	if ownPG {
		mode = "g"
	}
	steps := int(grace / (100 * time.Millisecond))
	return strings.Join([]string{
		fmt.Sprintf("t=%d; m=%s; n=%d; a=%d", target, mode, steps, afterKillWait/(100*time.Millisecond)),
		`sig() { if [ $m = g ]; then kill -$1 -$t 2>/dev/null || kill -$1 $t 2>/dev/null; else command -v pkill >/dev/null 2>&1 && pkill -$1 -P $t; kill -$1 $t 2>/dev/null; fi; }`,
		`live() { c=0; if [ -r /proc/self/stat ]; then for f in /proc/[0-9]*/stat; do { read -r p _ st _ pg _ <"$f"; } 2>/dev/null || continue; if [ $m = g ]; then k=$pg; else k=$p; fi; [ "$k" = $t ] && [ "$st" != Z ] && c=$((c+1)); done; elif [ $m = g ]; then kill -0 -$t 2>/dev/null && c=1; else kill -0 $t 2>/dev/null && c=1; fi; [ $c -gt 0 ]; }`,
		`pause() { sleep 0.1 2>/dev/null || { sleep 1; i=$((i+9)); }; }`,
		`sig TERM; i=0; while [ $i -lt $n ] && live; do pause; i=$((i+1)); done`,
		`if live; then sig KILL; i=0; while [ $i -lt $a ] && live; do pause; i=$((i+1)); done; if live; then echo "loom-kill:alive:$c"; else echo loom-kill:killed; fi; else echo loom-kill:gone; fi`,
		`if [ -n "$1" ]; then sh -c "$1" </dev/null >/dev/null 2>&1 || echo "loom-kill:cleanup:$?"; fi`,
	}, "; ")
}

// kill runs script on a second session of the same connection, as the
// command's user (through the same sudo), and reads its report.
func (r *runner) kill(script string, budget time.Duration) killReport {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	s, err := r.c.newSession(ctx)
	if err != nil {
		return killReport{err: fmt.Errorf("opening a session to kill it: %w", err)}
	}
	defer s.Close()
	if r.spec.pty && r.useSudo {
		// sudoers that demanded a tty for the command (requiretty)
		// demand one for the kill too.
		modes := ssh.TerminalModes{ssh.ECHO: 0, ssh.TTY_OP_ISPEED: 14400, ssh.TTY_OP_OSPEED: 14400}
		if err := s.RequestPty("xterm", 40, 120, modes); err != nil {
			return killReport{err: fmt.Errorf("the server refused a pty to kill it: %w", err)}
		}
	}
	line := "/bin/sh -c " + Quote(script) + " sh " + Quote(r.spec.cleanup)
	if r.useSudo {
		auth := "-n"
		if r.spec.sudo.password != "" {
			auth = "-S -p ''"
			s.Stdin = strings.NewReader(r.spec.sudo.password + "\n")
		}
		line = fmt.Sprintf("sudo %s -u %s -- %s", auth, Quote(r.spec.sudo.user), line)
	}
	var out, errOut bytes.Buffer
	s.Stdout, s.Stderr = &out, &limitedBuffer{b: &errOut, max: 4 << 10}
	// Run's wait is not bounded by Close alone (it waits for the server to
	// answer the close): past the budget, give up on this session and
	// report; the goroutine ends with the session or the connection.
	done := make(chan error, 1)
	go func() { done <- s.Run(line) }()
	var runErr error
	select {
	case runErr = <-done:
	case <-ctx.Done():
		return killReport{err: fmt.Errorf("the kill session did not finish within %s", budget)}
	}
	rep := killReport{}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Split(strings.TrimRight(l, "\r"), ":")
		if len(f) < 2 || f[0] != "loom-kill" {
			continue
		}
		switch f[1] {
		case "gone", "killed":
			rep.outcome = f[1]
		case "alive":
			rep.outcome = f[1]
			if len(f) > 2 {
				rep.left, _ = strconv.Atoi(f[2])
			}
		case "cleanup":
			if len(f) > 2 {
				rep.cleanup, _ = strconv.Atoi(f[2])
			}
		}
	}
	if rep.outcome == "" {
		why := strings.TrimSpace(errOut.String())
		if why == "" && runErr != nil {
			why = runErr.Error()
		}
		rep.err = fmt.Errorf("the kill session reported nothing: %s", shorten(why))
	}
	return rep
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// stopReport says, for the result and the log, what became of a command
// we stopped.
func (r *runner) stopReport() string {
	if r.group <= 1 {
		why := "it was still starting"
		if r.useSudo {
			why = "it was still starting, or sudo was still authenticating"
		}
		return "it never reported its process group (" + why + "); its session was signalled and closed"
	}
	what := fmt.Sprintf("remote process group %d", r.group)
	if !r.ownPG {
		what = fmt.Sprintf("remote process %d", r.group)
	}
	k := r.killed
	var msg string
	switch {
	case k == nil:
		msg = fmt.Sprintf("%s: the kill session did not finish in time; it may still run on the node", what)
	case k.err != nil:
		msg = fmt.Sprintf("%s could not be killed (%v); it may still run on the node", what, k.err)
	case k.outcome == "gone":
		msg = what + " ended on TERM"
	case k.outcome == "killed":
		msg = fmt.Sprintf("%s killed with KILL after a %s grace", what, r.killGrace)
	default:
		msg = fmt.Sprintf("%s still had %d live processes after KILL; check the node", what, k.left)
	}
	if !r.ownPG {
		msg += " (the node has no setsid, so the command had no process group of its own: processes it started beyond its children may still run)"
	}
	if k != nil && k.cleanup != 0 {
		msg += fmt.Sprintf("; the cleanup code exited with status %d", k.cleanup)
	}
	return msg
}

// stream drains one output stream: it keeps the first max bytes, counts
// the rest, and (when asked) cuts lines for callbacks and sudo markers.
type stream struct {
	name   string
	r      io.Reader
	max    int64
	lines  bool
	ctl    *markers
	events chan<- event

	buf     []byte
	total   int64
	pending []byte
	started bool
	// The login environment between two ctl.env lines (inEnv while
	// reading it); envOver once it passed maxLoginEnv.
	inEnv   bool
	env     []byte
	envOver bool
}

// maxLoginEnv bounds the login environment read for loginEnv (the
// kernel bounds a process's environment to about as much).
const maxLoginEnv = 4 << 20

func (s *stream) pump() {
	chunk := make([]byte, 32<<10)
	for {
		n, err := s.r.Read(chunk)
		if n > 0 {
			s.feed(chunk[:n])
		}
		if err != nil {
			if len(s.pending) > 0 {
				s.emit(s.pending)
				s.pending = nil
			}
			s.events <- event{kind: evEOF, stream: s}
			return
		}
	}
}

func (s *stream) capture(p []byte) {
	if room := s.max - s.total; room > 0 {
		if int64(len(p)) > room {
			s.buf = append(s.buf, p[:room]...)
		} else {
			s.buf = append(s.buf, p...)
		}
	}
	s.total += int64(len(p))
}

func (s *stream) scanning() bool { return s.ctl != nil && !s.started }

func (s *stream) feed(p []byte) {
	if !s.lines && !s.scanning() {
		s.capture(p)
		return
	}
	s.pending = append(s.pending, p...)
	for {
		if s.scanning() {
			for {
				i := bytes.Index(s.pending, s.ctl.prompt)
				if i < 0 {
					break
				}
				s.pending = append(s.pending[:i], s.pending[i+len(s.ctl.prompt):]...)
				s.events <- event{kind: evPrompt, stream: s}
			}
		}
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			if len(s.pending) >= maxLine {
				s.emit(s.pending)
				s.pending = s.pending[:0]
			}
			return
		}
		line := s.pending[:i+1]
		s.pending = s.pending[i+1:]
		s.emit(line)
		if !s.lines && !s.scanning() {
			// The start marker passed: back to the fast path.
			s.capture(s.pending)
			s.pending = nil
			return
		}
	}
}

// emit handles one line (with its newline, unless it was cut or last).
func (s *stream) emit(line []byte) {
	text := strings.TrimRight(string(line), "\r\n")
	if s.scanning() && s.ctl.env != "" && (s.inEnv || text == s.ctl.env) {
		switch {
		case text == s.ctl.env && s.inEnv:
			s.inEnv = false
			s.events <- event{kind: evEnv, stream: s, line: string(s.env), over: s.envOver}
			s.env = nil
		case text == s.ctl.env:
			s.inEnv = true
		case !s.envOver:
			// Lines keep their newline (a cut line has none), minus the
			// terminal's carriage return.
			if l, ok := bytes.CutSuffix(line, []byte("\r\n")); ok {
				s.env = append(append(s.env, l...), '\n')
			} else {
				s.env = append(s.env, line...)
			}
			if len(s.env) > maxLoginEnv {
				s.envOver, s.env = true, nil
			}
		}
		return
	}
	if s.scanning() {
		if rest, ok := bytes.CutPrefix([]byte(text), s.ctl.started); ok {
			pid, mode, _ := strings.Cut(string(rest), ":")
			n, _ := strconv.Atoi(pid)
			s.started = true
			s.events <- event{kind: evStarted, stream: s, pid: n, ownPG: mode == "g"}
			return
		}
		if text == "" && s.ctl.sudo {
			return // sudo -S may end its prompt with a newline
		}
	}
	s.capture(line)
	if s.lines {
		s.events <- event{kind: evLine, stream: s, line: text}
	}
}

// shorten keeps error messages readable.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return strconv.Quote(s)
}
