package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/runtime"
)

// TypeSpec is one plugin type the supervisor runs workers for.
type TypeSpec struct {
	Name    string
	Version string
	// Memory is the budget of one hook run in bytes (the definition's
	// limits.memory, else the daemon's default).
	Memory int64
}

// Config configures a Supervisor.
type Config struct {
	// Command returns the command that starts a worker process for the
	// type (for loomd: its own binary with the hidden worker command).
	// The supervisor adds the connection as file descriptor 3 and reads
	// the process's stderr.
	Command func(spec TypeSpec) *exec.Cmd
	// Logger receives the workers' logs and the supervisor's own.
	Logger *slog.Logger
	// MaxWorkers bounds the worker processes kept: when starting one more
	// would pass it, an idle worker of another type is stopped first.
	// Default 8 (loomd serve: --concurrency).
	MaxWorkers int
	// IdleTimeout stops workers idle this long; default 5 minutes.
	IdleTimeout time.Duration
	// StartTimeout bounds a worker's start (loading the plugins);
	// default 30s.
	StartTimeout time.Duration
	// CancelGrace is how long a worker may take to stop a cancelled hook
	// before it is killed; default 2s.
	CancelGrace time.Duration
	// DeadlineGrace is how long past the task's own deadline (the
	// timeout argument of Run) a worker may stay silent before it is
	// killed and the task fails with kind "timeout"; default 5s.
	DeadlineGrace time.Duration
	// CgroupDir, when set, is where workers create their cgroups
	// (PrepareCgroup); the supervisor passes it in CgroupEnv.
	CgroupDir string
	// Listeners is the daemon's registry of its own listening sockets.
	// Every worker gets the list before its first run and every change
	// to it, so loom.http in a worker refuses what the daemon listens on
	// (issue 20). Nil sends none.
	Listeners *listeners.Registry
	// AckTimeout bounds how long a change of Listeners waits for each
	// running worker to confirm it; default 5s.
	AckTimeout time.Duration
}

// Supervisor runs tasks in worker processes, one hook at a time per
// worker. Idle workers are pooled per plugin type: a task takes an idle
// worker that last ran its type, else an idle worker of another type
// whose OS limit fits its budget (every worker loads every plugin, so
// more types than MaxWorkers do not make it start a process per task),
// else starts one. It is safe for concurrent use.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	runID atomic.Uint64

	mu     sync.Mutex
	specs  map[string]TypeSpec
	idle   map[string][]*proc // by the type of their last run, oldest first
	gen    int                // plugin generation: bumped by SetTypes when anything changed
	load   *Frame             // load frame sent to new workers (SetPlugins), or nil
	total  int                // live worker processes, busy or idle, including starting
	closed bool
	live   map[*proc]struct{} // every worker process with an open connection
	own    []listeners.Listener
	ownSeq uint64

	pingID    atomic.Uint64
	stopWatch func()

	stats     Stats
	stopReap  chan struct{}
	reapDone  chan struct{}
	closeOnce sync.Once
}

// Stats are the supervisor's counters.
type Stats struct {
	Started int64 `json:"workers_started"`
	Died    int64 `json:"workers_died"`
	OOM     int64 `json:"workers_oom"`
	Live    int   `json:"workers_live"`
	Idle    int   `json:"workers_idle"`
}

// New starts a supervisor. Call SetTypes before Run, and Close at the end.
func New(cfg Config) *Supervisor {
	if cfg.MaxWorkers <= 0 {
		cfg.MaxWorkers = 8
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 5 * time.Minute
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = 2 * time.Second
	}
	if cfg.DeadlineGrace <= 0 {
		cfg.DeadlineGrace = 5 * time.Second
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Supervisor{cfg: cfg, log: log, specs: map[string]TypeSpec{}, idle: map[string][]*proc{},
		live: map[*proc]struct{}{}, stopReap: make(chan struct{}), reapDone: make(chan struct{})}
	s.stopWatch = cfg.Listeners.Watch(s.forwardListeners)
	go s.reapIdle()
	return s
}

// forwardListeners is the registry watcher: it keeps the daemon's list
// for workers started later and sends it to every running worker,
// waiting until each has confirmed it (or AckTimeout), so a listener the
// daemon opens is refused in every worker by the time it accepts.
func (s *Supervisor) forwardListeners(ls []listeners.Listener, seq uint64) {
	s.mu.Lock()
	s.own, s.ownSeq = ls, seq
	procs := make([]*proc, 0, len(s.live))
	for w := range s.live {
		procs = append(procs, w)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.pushListeners(w, true)
		}()
	}
	wg.Wait()
}

// pushListeners sends w the current list unless it has it. A worker whose
// plugins are still being sent gets it right after them (start calls this
// once they are). With wait, a worker that already said hello is pinged
// after the list and the call waits for its pong: frames are handled in
// order, so the pong means the list is in force.
func (s *Supervisor) pushListeners(w *proc, wait bool) {
	w.ctl.Lock()
	if !w.loaded {
		w.ctl.Unlock()
		return
	}
	s.mu.Lock()
	ls, seq := s.own, s.ownSeq
	s.mu.Unlock()
	if w.ownSent && seq <= w.ownSeq {
		w.ctl.Unlock()
		return
	}
	err := w.conn.Send(&Frame{Type: TypeListeners, Listeners: ls, Seq: seq})
	w.ownSent, w.ownSeq = true, seq
	var pong chan struct{}
	if err == nil && wait && w.ready.Load() {
		id := s.pingID.Add(1)
		pong = w.expectPong(id)
		if err = w.conn.Send(&Frame{Type: TypePing, ID: id}); err != nil {
			pong = nil
		}
	}
	w.ctl.Unlock()
	if pong == nil {
		return
	}
	t := time.NewTimer(s.cfg.AckTimeout)
	defer t.Stop()
	select {
	case <-pong:
	case <-w.dead:
	case <-t.C:
		s.log.Warn("a worker did not confirm the daemon's new listeners in time; it refuses them once it reads them",
			"pid", w.pid, "type", w.spec.Name, "timeout", s.cfg.AckTimeout)
	}
}

// SetTypes declares the plugin types, their versions and budgets. When
// anything changed (a reload), workers finish their run in flight and
// exit, idle ones at once: new runs start workers that load the new
// plugin versions.
func (s *Supervisor) SetTypes(specs []TypeSpec) {
	next := make(map[string]TypeSpec, len(specs))
	for _, sp := range specs {
		next[sp.Name] = sp
	}
	s.mu.Lock()
	changed := len(next) != len(s.specs)
	for name, sp := range next {
		if s.specs[name] != sp {
			changed = true
		}
	}
	s.specs = next
	var stop []*proc
	if changed {
		s.gen++
		stop = s.takeIdleLocked(func(*proc) bool { return true })
	}
	s.mu.Unlock()
	for _, w := range stop {
		s.retire(w, "the plugins were reloaded")
	}
}

// SetPlugins is SetTypes for workers that load the daemon's plugin
// versions rather than the folders on disk: every worker started from now
// on first receives sources (runtime.Runtime.Sources) in a load frame
// (Child.ReceivePlugins), so it runs exactly what the daemon validated,
// even while a plugin is half-written or broken on disk. Sources too large
// for a frame are not sent (the worker then reads the folders), with a
// warning.
func (s *Supervisor) SetPlugins(specs []TypeSpec, sources []runtime.PluginSource) {
	load := &Frame{Type: TypeLoad}
	b, err := json.Marshal(sources)
	switch {
	case err != nil:
		s.log.Warn("workers will read the plugin folders themselves: encoding the plugins failed", "err", err)
	case len(b) > MaxFrame-1024:
		s.log.Warn("workers will read the plugin folders themselves: the plugins are too large to send them",
			"bytes", len(b), "max", MaxFrame-1024)
	default:
		load.Plugins = b
	}
	s.mu.Lock()
	s.load = load
	s.mu.Unlock()
	s.SetTypes(specs)
}

// takeIdleLocked removes the idle workers that match from the pool.
func (s *Supervisor) takeIdleLocked(match func(*proc) bool) []*proc {
	var out []*proc
	for typ, list := range s.idle {
		keep := list[:0]
		for _, w := range list {
			if match(w) {
				out = append(out, w)
				s.total--
			} else {
				keep = append(keep, w)
			}
		}
		if len(keep) == 0 {
			delete(s.idle, typ)
		} else {
			s.idle[typ] = keep
		}
	}
	return out
}

// Warm starts an idle worker for the type, so the first task does not
// wait for one, and a worker that cannot start is reported at once.
func (s *Supervisor) Warm(ctx context.Context, typ string) error {
	w, err := s.acquire(ctx, typ)
	if err != nil {
		return err
	}
	s.release(w, false)
	return nil
}

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("worker supervisor closed")

// Run runs one task (its JSON, which runtime.ParseTask accepted; its id
// for logs and messages) of plugin type typ in a worker and returns its Coopr result JSON and status, like
// an in-process run. timeout is the task's own deadline
// (runtime.TaskTimeout), enforced in the worker; when the worker has not
// answered DeadlineGrace after it, the hook is cancelled (the worker
// killed if it does not answer) and the task fails with error kind
// "timeout". Errors: a *RunError when the
// worker could not run the task (matching runtime.ErrPluginNotFound,
// ErrCancelled...), a *DeathError (ErrDied) when the worker died of
// something else than its memory budget, or a start failure. A worker
// dying of its memory budget is a failed result with error kind
// "memory", not an error.
func (s *Supervisor) Run(ctx context.Context, typ, taskID string, task []byte, timeout time.Duration) ([]byte, int, error) {
	w, err := s.acquire(ctx, typ)
	if err != nil {
		return nil, 0, err
	}
	id := s.runID.Add(1)
	w.setRun(id, taskID)
	if err := w.conn.Send(&Frame{Type: TypeRun, ID: id, Task: task, Memory: w.spec.Memory}); err != nil {
		<-w.dead
		return s.died(w, id, taskID)
	}

	var backstop <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout + s.cfg.DeadlineGrace)
		defer t.Stop()
		backstop = t.C
	}
	var grace <-chan time.Time
	var timedOut bool
	done := ctx.Done()
	for {
		var f *Frame
		select {
		case f = <-w.results:
		case <-w.dead:
			// A worker that retires sends its result, then exits: the
			// result is in the channel before dead is closed.
			select {
			case f = <-w.results:
			default:
			}
		case <-done:
			done = nil
			_ = w.conn.Send(&Frame{Type: TypeCancel, ID: id, Reason: fmt.Sprint(context.Cause(ctx))})
			grace = time.After(s.cfg.CancelGrace)
			continue
		case <-backstop:
			backstop = nil
			timedOut = true
			_ = w.conn.Send(&Frame{Type: TypeCancel, ID: id, Reason: "deadline passed"})
			grace = time.After(s.cfg.CancelGrace)
			continue
		case <-grace:
			s.log.Warn("worker did not stop a cancelled hook in time; killing it", "pid", w.pid, "type", typ, "task", taskID,
				"grace", s.cfg.CancelGrace)
			w.kill()
			<-w.dead
			s.forget(w)
			return s.abandoned(w, ctx, timedOut, timeout, taskID, typ)
		}
		if f == nil { // dead, without an answer
			if grace != nil {
				// We asked it to stop and it died on the way: the run was
				// cancelled or timed out, not crashed.
				s.forget(w)
				return s.abandoned(w, ctx, timedOut, timeout, taskID, typ)
			}
			return s.died(w, id, taskID)
		}
		if f.ID != id {
			continue // a late answer to an earlier, abandoned run
		}
		w.setRun(0, "")
		s.release(w, f.Retire)
		if f.Error != nil {
			switch {
			case f.Error.Kind == KindCancelled && ctx.Err() != nil:
				return nil, 0, fmt.Errorf("%w: %s (%v)", runtime.ErrCancelled, f.Error.Message, context.Cause(ctx))
			case f.Error.Kind == KindCancelled && timedOut:
				msg := fmt.Sprintf("task %s (%s) ran past its deadline of %s and was stopped", taskID, typ, timeout)
				return resultJSON(taskID, typ, w.spec.Version, msg, map[string]any{"kind": "timeout", "message": msg})
			}
			return nil, 0, f.Error
		}
		return f.Result, f.Status, nil
	}
}

// abandoned is the outcome of a run whose worker had to be stopped.
func (s *Supervisor) abandoned(w *proc, ctx context.Context, timedOut bool, timeout time.Duration, taskID, typ string) ([]byte, int, error) {
	if !timedOut {
		return nil, 0, fmt.Errorf("%w: task %s (%s): %v; its worker (pid %d) was stopped", runtime.ErrCancelled, taskID, typ, context.Cause(ctx), w.pid)
	}
	msg := fmt.Sprintf("task %s (%s) did not stop at its deadline of %s; its worker (pid %d) was killed", taskID, typ, timeout, w.pid)
	return resultJSON(taskID, typ, w.spec.Version, msg, map[string]any{"kind": "timeout", "message": msg})
}

// died is the outcome of a run whose worker died under it.
func (s *Supervisor) died(w *proc, id uint64, taskID string) ([]byte, int, error) {
	s.forget(w)
	de := w.death()
	s.log.Error("worker died running a task", "pid", w.pid, "type", w.spec.Name, "task", taskID, "cause", de.Cause, "oom", de.OOM)
	if de.OOM {
		msg := de.Error() + ": the hook needed more memory than its budget (raise limits.memory in the plugin definition, or loomd serve --plugin-memory)"
		return resultJSON(taskID, w.spec.Name, w.spec.Version, msg, map[string]any{"kind": "memory", "message": msg, "limit_bytes": w.spec.Memory})
	}
	return nil, 0, de
}

func resultJSON(taskID, typ, version, msg string, errObj map[string]any) ([]byte, int, error) {
	res := &runtime.Result{TaskID: taskID, Status: 1, Message: msg, Stderr: msg, Error: errObj, Plugin: typ + "@" + version}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding a result: %w", err)
	}
	return b, 1, nil
}

// acquire returns an idle worker for the type, or starts one.
func (s *Supervisor) acquire(ctx context.Context, typ string) (*proc, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	spec, ok := s.specs[typ]
	if !ok {
		s.mu.Unlock()
		return nil, &RunError{Kind: KindNotFound, Message: fmt.Sprintf("%v: no loaded plugin serves type %q", runtime.ErrPluginNotFound, typ)}
	}
	for {
		w := s.popIdleLocked(spec)
		if w == nil {
			break
		}
		select {
		case <-w.dead:
			s.total-- // died while idle (killed from outside)
			continue
		default:
		}
		w.mu.Lock()
		w.spec = spec
		w.mu.Unlock()
		s.mu.Unlock()
		return w, nil
	}
	var evict *proc
	if s.total >= s.cfg.MaxWorkers {
		evict = s.oldestIdleLocked()
	}
	s.total++
	s.stats.Started++
	gen, load := s.gen, s.load
	s.mu.Unlock()
	if evict != nil {
		s.retire(evict, "making room for a worker with a larger memory budget")
	}
	w, err := s.start(ctx, spec, load)
	if err != nil {
		s.mu.Lock()
		s.total--
		s.mu.Unlock()
		return nil, err
	}
	w.gen = gen
	return w, nil
}

// popIdleLocked takes the idle worker that last ran the type (the most
// recently used), else the longest idle worker whose OS limit fits the
// type's budget.
func (s *Supervisor) popIdleLocked(spec TypeSpec) *proc {
	if list := s.idle[spec.Name]; len(list) > 0 {
		w := list[len(list)-1]
		s.setIdleLocked(spec.Name, list[:len(list)-1])
		return w
	}
	var best *proc
	for _, list := range s.idle {
		for _, w := range list {
			if w.budget >= spec.Memory && (best == nil || w.idleSince.Before(best.idleSince)) {
				best = w
			}
		}
	}
	if best != nil {
		s.removeIdleLocked(best)
	}
	return best
}

func (s *Supervisor) setIdleLocked(typ string, list []*proc) {
	if len(list) == 0 {
		delete(s.idle, typ)
		return
	}
	s.idle[typ] = list
}

func (s *Supervisor) removeIdleLocked(w *proc) {
	list := s.idle[w.spec.Name]
	for i, x := range list {
		if x == w {
			s.setIdleLocked(w.spec.Name, append(list[:i:i], list[i+1:]...))
			return
		}
	}
}

// oldestIdleLocked takes the longest idle worker out of the pool and
// the count, to be stopped.
func (s *Supervisor) oldestIdleLocked() *proc {
	var best *proc
	for _, list := range s.idle {
		if len(list) > 0 && (best == nil || list[0].idleSince.Before(best.idleSince)) {
			best = list[0]
		}
	}
	if best != nil {
		s.removeIdleLocked(best)
		s.total--
	}
	return best
}

// release puts a worker back in the pool, or stops it.
func (s *Supervisor) release(w *proc, retire bool) {
	s.mu.Lock()
	if retire || s.closed || w.gen != s.gen {
		s.total--
		s.mu.Unlock()
		s.retire(w, "")
		return
	}
	w.idleSince = time.Now()
	s.idle[w.spec.Name] = append(s.idle[w.spec.Name], w)
	s.mu.Unlock()
}

// forget drops a dead worker from the count.
func (s *Supervisor) forget(w *proc) {
	s.mu.Lock()
	s.total--
	s.stats.Died++
	if w.death().OOM {
		s.stats.OOM++
	}
	s.mu.Unlock()
}

// retire stops a worker that is not running anything: closing its
// connection makes it exit; it is killed if it has not within a second.
func (s *Supervisor) retire(w *proc, why string) {
	if why != "" {
		s.log.Debug("stopping a worker", "pid", w.pid, "type", w.spec.Name, "reason", why)
	}
	_ = w.sock.Close()
	go func() {
		select {
		case <-w.dead:
		case <-time.After(time.Second):
			w.kill()
		}
	}()
}

func (s *Supervisor) reapIdle() {
	defer close(s.reapDone)
	t := time.NewTicker(min(s.cfg.IdleTimeout/2, 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.stopReap:
			return
		case <-t.C:
		}
		s.mu.Lock()
		stop := s.takeIdleLocked(func(w *proc) bool { return time.Since(w.idleSince) > s.cfg.IdleTimeout })
		s.mu.Unlock()
		for _, w := range stop {
			s.retire(w, "idle")
		}
	}
}

// LimitMode names the OS memory limit workers use: "cgroup" when
// Config.CgroupDir is set, else "rlimit" (workers fall back to it if
// their cgroup cannot be joined); off Linux, "watchdog" only.
func (s *Supervisor) LimitMode() string {
	if goruntime.GOOS != "linux" {
		return "watchdog"
	}
	if s.cfg.CgroupDir != "" {
		return "cgroup"
	}
	return "rlimit"
}

// Stats returns the supervisor's counters.
func (s *Supervisor) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Live = s.total
	for _, list := range s.idle {
		st.Idle += len(list)
	}
	return st
}

// Close stops the idle workers and refuses new runs. Runs in flight
// keep their workers until they finish (their callers cancel them on a
// forced shutdown); those workers then exit.
func (s *Supervisor) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		stop := s.takeIdleLocked(func(*proc) bool { return true })
		s.mu.Unlock()
		s.stopWatch()
		close(s.stopReap)
		<-s.reapDone
		for _, w := range stop {
			s.retire(w, "shutdown")
		}
		for _, w := range stop {
			<-w.dead
		}
	})
}

// proc is one worker process.
type proc struct {
	spec      TypeSpec // of the run in flight, or the last one
	budget    int64    // memory budget the OS limit was set for at start
	gen       int      // plugin generation it loaded
	cmd       *exec.Cmd
	conn      *Conn
	sock      *socket
	pid       int
	cgroup    string
	idleSince time.Time

	results chan *Frame   // result frames, read by the run in flight
	dead    chan struct{} // closed once the process exited and its output is read
	ready   atomic.Bool   // its hello arrived

	// ctl orders the listeners frames sent to it (see pushListeners).
	ctl     sync.Mutex
	loaded  bool   // its load frame (if any) was sent
	ownSent bool   // a listeners frame was sent
	ownSeq  uint64 // the version of the last one
	pongs   map[uint64]chan struct{}

	mu      sync.Mutex
	runID   uint64
	taskID  string
	waitErr error
	fatal   string // first line of a Go crash report on stderr
	first   string // first line on stderr
	deathOf *DeathError
}

func (w *proc) setRun(id uint64, taskID string) {
	w.mu.Lock()
	w.runID, w.taskID = id, taskID
	w.mu.Unlock()
}

// expectPong registers a ping id; the channel closes when its pong
// arrives.
func (w *proc) expectPong(id uint64) chan struct{} {
	ch := make(chan struct{})
	w.mu.Lock()
	if w.pongs == nil {
		w.pongs = map[uint64]chan struct{}{}
	}
	w.pongs[id] = ch
	w.mu.Unlock()
	return ch
}

func (w *proc) gotPong(id uint64) {
	w.mu.Lock()
	ch := w.pongs[id]
	delete(w.pongs, id)
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (w *proc) kill() {
	if w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
	}
}

// start launches a worker, sends it load (when not nil) and waits for
// its hello.
func (s *Supervisor) start(ctx context.Context, spec TypeSpec, load *Frame) (*proc, error) {
	began := time.Now()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("starting a worker for %q: socketpair: %w", spec.Name, err)
	}
	// Non-blocking: the netpoller reads it. (A blocking read costs fewer
	// syscalls, but its thread must win a P back when a frame arrives,
	// which a busy daemon makes slow: 1 ms more per task, measured.)
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("starting a worker for %q: %w", spec.Name, err)
	}
	sock := &socket{f: os.NewFile(uintptr(fds[0]), "worker-parent")}
	childEnd := os.NewFile(uintptr(fds[1]), "worker-child")
	cmd := s.cfg.Command(spec)
	cmd.ExtraFiles = []*os.File{childEnd}
	if s.cfg.CgroupDir != "" {
		cmd.Env = append(cmd.Environ(), CgroupEnv+"="+s.cfg.CgroupDir)
	}
	w := &proc{spec: spec, budget: spec.Memory, cmd: cmd, conn: NewConn(sock), sock: sock, cgroup: s.cfg.CgroupDir,
		results: make(chan *Frame, 4), dead: make(chan struct{})}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		sock.closeFile()
		childEnd.Close()
		return nil, fmt.Errorf("starting a worker for %q: %w", spec.Name, err)
	}
	cmd.Stderr = stderrW
	err = cmd.Start()
	childEnd.Close()
	stderrW.Close()
	if err != nil {
		sock.closeFile()
		stderrR.Close()
		return nil, fmt.Errorf("starting a worker for %q: %w", spec.Name, err)
	}
	w.pid = cmd.Process.Pid
	log := s.log.With("pid", w.pid)
	s.mu.Lock()
	s.live[w] = struct{}{}
	s.mu.Unlock()

	hello := make(chan *Frame, 1)
	stderrDone := make(chan struct{})
	go func() { defer close(stderrDone); w.readStderr(stderrR, log) }()
	go func() {
		w.readFrames(log, hello)
		// The connection is closed: the worker exited or is about to.
		exited := make(chan struct{})
		go func() {
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				w.kill()
			}
		}()
		err := cmd.Wait()
		close(exited)
		<-stderrDone
		stderrR.Close()
		w.mu.Lock()
		w.waitErr = err
		w.mu.Unlock()
		w.death() // settle the cause while the cgroup is still there
		s.mu.Lock()
		delete(s.live, w)
		s.mu.Unlock()
		close(w.dead)
	}()

	// Its own goroutine: a large frame fills the socket until the worker
	// reads it, and a worker dying first shows as w.dead. The daemon's
	// listeners follow the plugins, before any run.
	go func() {
		if load != nil {
			if err := w.conn.Send(load); err != nil {
				log.Debug("sending the plugins to a worker failed", "err", err)
			}
		}
		w.ctl.Lock()
		w.loaded = true
		w.ctl.Unlock()
		s.pushListeners(w, false)
	}()
	t := time.NewTimer(s.cfg.StartTimeout)
	defer t.Stop()
	select {
	case f := <-hello:
		w.ready.Store(true)
		if v, ok := f.Types[spec.Name]; !ok || v != spec.Version {
			log.Warn("the worker did not load the daemon's version of the plugin type (changed on disk since the daemon loaded it?); its runs will say why",
				"type", spec.Name, "version", spec.Version, "worker_version", v)
		}
		log.Debug("worker started", "type", spec.Name, "types", len(f.Types), "took", time.Since(began).Round(time.Microsecond))
		return w, nil
	case <-w.dead:
		return nil, fmt.Errorf("starting a worker for %q: it exited: %s", spec.Name, w.death().Cause)
	case <-t.C:
		w.kill()
		<-w.dead
		return nil, fmt.Errorf("starting a worker for %q: no answer within %s (loading the plugins)", spec.Name, s.cfg.StartTimeout)
	case <-ctx.Done():
		w.kill()
		<-w.dead
		return nil, fmt.Errorf("%w: while starting a worker for %q: %v", runtime.ErrCancelled, spec.Name, context.Cause(ctx))
	}
}

// readFrames dispatches the worker's frames until its connection closes.
func (w *proc) readFrames(log *slog.Logger, hello chan<- *Frame) {
	defer w.sock.closeFile()
	for {
		f, err := w.conn.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				log.Warn("reading from a worker failed; stopping it", "err", err)
				w.kill()
			}
			return
		}
		switch f.Type {
		case TypeHello:
			select {
			case hello <- f:
			default:
			}
		case TypeResult:
			w.results <- f
		case TypeLog:
			w.emit(log, f)
		case TypePing:
			_ = w.conn.Send(&Frame{Type: TypePong, ID: f.ID})
		case TypePong:
			w.gotPong(f.ID)
		}
	}
}

// emit re-logs a worker's log record with the task it belongs to.
func (w *proc) emit(log *slog.Logger, f *Frame) {
	if f.Log == nil {
		return
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.Log.Level)); err != nil {
		lvl = slog.LevelInfo
	}
	ctx := context.Background()
	if !log.Enabled(ctx, lvl) {
		return
	}
	args := make([]any, 0, 2*len(f.Log.Attrs)+4)
	w.mu.Lock()
	run, task, typ := w.runID, w.taskID, w.spec.Name
	w.mu.Unlock()
	args = append(args, "type", typ)
	if _, has := f.Log.Attrs["task"]; !has && f.ID != 0 && f.ID == run && task != "" {
		args = append(args, "task", task)
	}
	for k, v := range f.Log.Attrs {
		if k == "type" || k == "pid" || k == "component" {
			k = "worker_" + k
		}
		args = append(args, k, v)
	}
	log.Log(ctx, lvl, f.Log.Msg, args...)
}

// readStderr logs what the worker writes on stderr (a Go crash report,
// mostly) and keeps the last lines for the death report.
func (w *proc) readStderr(r io.Reader, log *slog.Logger) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	logged := 0
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 512 {
			line = line[:512] + "..."
		}
		w.mu.Lock()
		if w.first == "" && strings.TrimSpace(line) != "" {
			w.first = line
		}
		if w.fatal == "" && isFatalLine(line) {
			w.fatal = line
		}
		w.mu.Unlock()
		if logged < 20 && strings.TrimSpace(line) != "" {
			logged++
			w.mu.Lock()
			typ := w.spec.Name
			w.mu.Unlock()
			log.Warn("worker stderr", "type", typ, "line", line)
		}
	}
	if logged >= 20 {
		log.Warn("worker stderr: more lines not logged")
	}
	// A line past the scanner's buffer ends the scan: keep draining, or
	// the worker would block writing to a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// death describes why the worker exited.
func (w *proc) death() *DeathError {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deathOf != nil {
		return w.deathOf
	}
	d := &DeathError{Type: w.spec.Name, PID: w.pid, Limit: w.spec.Memory}
	first := w.fatal
	if first == "" {
		first = w.first
	}
	switch {
	case strings.Contains(w.fatal, "out of memory") || strings.Contains(w.fatal, "cannot allocate memory"):
		d.OOM = true
		d.Cause = "out of memory"
	case oomKilled(w.cgroup, w.pid):
		d.OOM = true
		d.Cause = "out of memory (killed by the cgroup OOM killer)"
	case w.waitErr != nil:
		d.Cause = w.waitErr.Error()
		if first != "" {
			d.Cause += ": " + first
		}
	default:
		d.Cause = "it closed its connection and exited"
		if first != "" {
			d.Cause += ": " + first
		}
	}
	w.deathOf = d
	return d
}

// isFatalLine tells the first line of a Go crash report (or of a fatal
// message from the worker command).
func isFatalLine(s string) bool {
	for _, p := range []string{"fatal error:", "panic:", "runtime: out of memory", "loomd:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	// A signal: "SIGSEGV: segmentation violation".
	name, _, ok := strings.Cut(s, ":")
	return ok && strings.HasPrefix(name, "SIG") && strings.ToUpper(name) == name && !strings.Contains(name, " ")
}

// socket is the parent's end of a worker's socket pair.
type socket struct {
	f    *os.File
	once sync.Once
}

func (b *socket) Read(p []byte) (int, error)  { return b.f.Read(p) }
func (b *socket) Write(p []byte) (int, error) { return b.f.Write(p) }

// Close shuts the socket down: the worker reads EOF and exits, and our
// reader sees EOF and closes the file.
func (b *socket) Close() error {
	b.once.Do(func() {
		if rc, err := b.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
		}
	})
	return nil
}

func (b *socket) closeFile() {
	_ = b.Close()
	_ = b.f.Close()
}
