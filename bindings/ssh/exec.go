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
	ctl     *sudoCtl

	stdinMu     sync.Mutex
	stdin       io.WriteCloser
	stdinClosed bool

	phase   int // see the phase constants
	phaseC  <-chan time.Time
	started bool // sudo: the command itself is running
	pid     int  // sudo: pid of the root shell
	prompts int  // sudo: password prompts seen
}

const (
	running = iota
	termSent
	killSent
	closedSession
	abandoned
)

// sudoCtl are the markers that let us talk to sudo over plain pipes: the
// password is written only when sudo prompts with our random marker, and
// the user's stdin only once the command printed its start marker, so
// neither can land in the wrong place.
type sudoCtl struct {
	prompt  []byte // sudo -p marker
	started []byte // printed by the root shell with its pid
}

func randToken() string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		panic("ssh: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b)
}

func (r *runner) commandLine() string {
	spec := r.spec
	keys := make([]string, 0, len(spec.env))
	for k := range spec.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var prefix strings.Builder
	if !r.useSudo {
		// Setenv first; sshd accepts only what AcceptEnv lists, so fall
		// back to exports (visible in ps: pass secrets on stdin instead).
		for _, k := range keys {
			if err := r.sess.Setenv(k, spec.env[k]); err != nil {
				fmt.Fprintf(&prefix, "export %s=%s; ", k, Quote(spec.env[k]))
			}
		}
		return prefix.String() + spec.cmd
	}
	for _, k := range keys {
		fmt.Fprintf(&prefix, "export %s=%s; ", k, Quote(spec.env[k]))
	}
	r.ctl = &sudoCtl{prompt: []byte("[loom-sudo-" + randToken() + "]"), started: []byte("loom-started-" + randToken() + ":")}
	inner := prefix.String() + "echo " + string(r.ctl.started) + "$$ >&2; " + spec.cmd
	auth := "-n"
	if spec.sudo.password != "" {
		auth = "-S -p " + Quote(string(r.ctl.prompt))
	}
	return fmt.Sprintf("sudo %s -u %s -- sh -c %s", auth, Quote(spec.sudo.user), Quote(inner))
}

// event is something a stream reader saw.
type event struct {
	kind   int
	stream *stream
	line   string
	pid    int
}

const (
	evLine = iota
	evPrompt
	evStarted
	evEOF
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
	if r.ctl != nil {
		// With a pty, sudo's prompt and our marker arrive on stdout.
		if spec.pty {
			out.ctl = r.ctl
		} else {
			errS.ctl = r.ctl
		}
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
	if r.ctl == nil {
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
	)
	if spec.timeout > 0 {
		t := time.NewTimer(spec.timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	for eofs < 2 || !waited {
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
			case evStarted:
				r.started, r.pid = true, ev.pid
				r.feedStdin()
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
	if ctxErr != nil {
		e := r.cfg.connError("timeout", "hook deadline reached while running %s; the command was terminated", shorten(spec.cmd))
		return nil, e
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
func (r *runner) feedStdin() {
	src := r.spec.stdin
	if src == nil {
		r.closeStdin()
		return
	}
	go func() {
		r.stdinMu.Lock()
		defer r.stdinMu.Unlock()
		if !r.stdinClosed {
			tw := &tailWriter{w: r.stdin}
			io.Copy(tw, src)
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

// terminate starts TERM -> grace -> KILL -> close. sshd delivers session
// signals to the command's process group; a command under sudo runs as
// another user, so it is signalled through sudo on a second session.
func (r *runner) terminate() {
	if r.phase != running {
		return
	}
	r.phase = termSent
	r.signal(ssh.SIGTERM)
	r.phaseC = time.After(r.spec.grace)
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
		// Nothing answers: give up on the whole connection so the
		// readers and Wait return.
		r.phase = abandoned
		r.phaseC = nil
		r.c.kill(errors.New("a terminated command's session did not close"))
	}
}

func (r *runner) signal(sig ssh.Signal) {
	if !r.useSudo {
		r.sess.Signal(sig)
		return
	}
	if !r.started {
		// sudo is still authenticating: EOF on stdin makes it give up.
		r.closeStdin()
		r.sess.Signal(sig)
		return
	}
	go r.sudoKill(sig, r.pid)
}

// sudoKill signals the root command's process group through sudo.
func (r *runner) sudoKill(sig ssh.Signal, pid int) {
	s, err := r.c.client.NewSession()
	if err != nil {
		r.logger.Warn("ssh: could not open a session to signal a sudo command", "conn", r.cfg.String(), "err", err)
		return
	}
	defer s.Close()
	script := fmt.Sprintf("g=$(ps -o pgid= -p %d | tr -d ' '); kill -%s ${g:+-$g} %d 2>/dev/null; true", pid, sig, pid)
	auth := "-n"
	if r.spec.sudo.password != "" {
		auth = "-S -p ''"
		s.Stdin = strings.NewReader(r.spec.sudo.password + "\n")
	}
	t := time.AfterFunc(10*time.Second, func() { s.Close() })
	defer t.Stop()
	s.Run(fmt.Sprintf("sudo %s -u %s -- sh -c %s", auth, Quote(r.spec.sudo.user), Quote(script)))
}

// stream drains one output stream: it keeps the first max bytes, counts
// the rest, and (when asked) cuts lines for callbacks and sudo markers.
type stream struct {
	name   string
	r      io.Reader
	max    int64
	lines  bool
	ctl    *sudoCtl
	events chan<- event

	buf     []byte
	total   int64
	pending []byte
	started bool
}

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
	if s.scanning() {
		if rest, ok := bytes.CutPrefix([]byte(text), s.ctl.started); ok {
			pid, _ := strconv.Atoi(string(rest))
			s.started = true
			s.events <- event{kind: evStarted, stream: s, pid: pid}
			return
		}
		if text == "" {
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
