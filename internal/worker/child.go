package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/runtime"
)

// ChildOptions configure a worker process.
type ChildOptions struct {
	// Type is the plugin type this worker serves (for messages).
	Type string
	// Memory is the memory budget of a hook run, in bytes; 0 means none.
	Memory int64
	// Mode picks the OS limit: "auto" (cgroup v2 when writable, else
	// rlimit), "cgroup", "rlimit" or "none". Empty means "auto".
	Mode string
	// WatchInterval is how often the memory watchdog samples the heap
	// while a hook runs; default 10ms.
	WatchInterval time.Duration
	// ExitGrace is how long runs may take to stop once the parent is
	// gone; default 1s.
	ExitGrace time.Duration
	// Listeners receives the daemon's own listeners from listeners
	// frames; the worker's loom.http refuses them. Nil ignores them.
	Listeners *listeners.Registry
	// IdleRelease is how long the worker waits without a run before it
	// gives memory back: the idle VMs of the types other than the last one
	// it ran, the heap's free pages, and its mappings of the binary's code
	// (releaseMemory); default 1s, negative never. A worker busy with
	// tasks never pays for it; the first task after an idle spell maps the
	// code it needs again, and a task of another type provisions a VM.
	IdleRelease time.Duration
}

// Child is the worker side of the protocol: it runs the tasks the parent
// sends through a runtime, one or more at a time, under a memory budget.
type Child struct {
	conn  *Conn
	rwc   io.ReadWriteCloser
	opts  ChildOptions
	limit string // how the OS limit is applied, for hello and logs

	current  atomic.Uint64 // id of the run in flight, for log frames
	mu       sync.Mutex
	runs     map[uint64]*childRun
	runq     chan queuedRun // runs execute in order on one goroutine, whose stack stays grown
	wg       sync.WaitGroup
	retired  atomic.Bool
	serving  atomic.Bool // log records before Serve are load warnings the daemon already reported
	watch    *watchdog
	released atomic.Int64 // idle spells that gave memory back
}

type childRun struct {
	cancel context.CancelCauseFunc
}

// queuedRun is a run frame waiting for the runner goroutine.
type queuedRun struct {
	ctx    context.Context
	id     uint64
	task   []byte
	cancel context.CancelCauseFunc
}

// NewChild prepares a worker on conn: it applies the OS memory limit and
// starts the memory watchdog, before any plugin code is loaded.
func NewChild(conn io.ReadWriteCloser, opts ChildOptions) (*Child, error) {
	if opts.WatchInterval <= 0 {
		opts.WatchInterval = 10 * time.Millisecond
	}
	if opts.ExitGrace <= 0 {
		opts.ExitGrace = time.Second
	}
	if opts.IdleRelease == 0 {
		opts.IdleRelease = time.Second
	}
	// One hook at a time: more Ps would only add scheduler threads
	// spinning for work in every worker (futex and nanosleep calls were
	// most of a worker's CPU per task).
	goruntime.GOMAXPROCS(1)
	stopProcSampler()
	c := &Child{conn: NewConn(conn), rwc: conn, opts: opts, runs: map[uint64]*childRun{}, runq: make(chan queuedRun, 64)}
	if opts.Memory > 0 {
		how, err := applyMemoryLimit(opts.Mode, opts.Memory)
		if err != nil {
			return nil, fmt.Errorf("worker for %q: applying the memory limit of %s: %w", opts.Type, runtime.FormatSize(opts.Memory), err)
		}
		c.limit = how
		c.watch = startWatchdog(opts.Memory, opts.WatchInterval, c.memoryExceeded)
	}
	return c, nil
}

// Limit says how the OS memory limit was applied ("rlimit-data 384 MiB",
// "cgroup /sys/fs/cgroup/...", or "" without one).
func (c *Child) Limit() string { return c.limit }

// MemoryError is the cause of a run stopped by the memory watchdog.
type MemoryError struct {
	Limit int64 // the budget
	Used  int64 // what the worker's Go runtime held when it was stopped
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("memory limit of %s exceeded (the worker held %s)", runtime.FormatSize(e.Limit), runtime.FormatSize(e.Used))
}

// memoryExceeded stops every run in flight: with one run per worker, the
// culprit.
func (c *Child) memoryExceeded(used, limit int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.runs {
		r.cancel(&MemoryError{Limit: limit, Used: used})
	}
}

// LogHandler returns a slog handler that sends records to the parent as
// log frames, tagged with the run in flight. Records at or above level
// are sent.
func (c *Child) LogHandler(level slog.Leveler) slog.Handler {
	return &logHandler{c: c, level: level}
}

// ReceivePlugins reads the load frame a supervisor given SetPlugins sends
// first, and returns the plugin sources for runtime.Options.Sources (nil
// when they were too large to send: then load the folders). Call it
// before building the runtime, only with such a supervisor.
func (c *Child) ReceivePlugins() ([]runtime.PluginSource, error) {
	f, err := c.conn.Recv()
	if err != nil {
		return nil, fmt.Errorf("worker for %q: reading the daemon's plugins: %w", c.opts.Type, err)
	}
	for f.Type == TypeListeners || f.Type == TypePing {
		// The daemon's listeners may change while it sends the plugins.
		c.handleControl(f)
		if f, err = c.conn.Recv(); err != nil {
			return nil, fmt.Errorf("worker for %q: reading the daemon's plugins: %w", c.opts.Type, err)
		}
	}
	if f.Type != TypeLoad {
		return nil, fmt.Errorf("worker for %q: the daemon sent a %q frame first, want %q (the plugins to load)", c.opts.Type, f.Type, TypeLoad)
	}
	if len(f.Plugins) == 0 {
		return nil, nil // too large for a frame: the daemon said to read the folders
	}
	var srcs []runtime.PluginSource
	if err := json.Unmarshal(f.Plugins, &srcs); err != nil {
		return nil, fmt.Errorf("worker for %q: decoding the daemon's plugins: %w", c.opts.Type, err)
	}
	if srcs == nil {
		srcs = []runtime.PluginSource{} // no plugins is still a set of sources
	}
	return srcs, nil
}

// Serve sends the hello frame, then runs the tasks the parent sends
// through rt, one at a time in the order received, until the parent
// closes the connection or ctx ends. It returns nil on a clean end.
func (c *Child) Serve(ctx context.Context, rt *runtime.Runtime) error {
	defer c.rwc.Close()
	if c.watch != nil {
		defer c.watch.stop()
	}
	types := map[string]string{}
	for _, t := range rt.Types() {
		types[t.Name] = t.Version
	}
	c.serving.Store(true)
	if err := c.conn.Send(&Frame{Type: TypeHello, PID: os.Getpid(), Types: types}); err != nil {
		return fmt.Errorf("greeting the parent: %w", err)
	}
	// Frames are handled on this goroutine: a run starts its own, so a
	// cancel is read while a hook runs. Ending ctx closes the connection
	// to end the read.
	stop := context.AfterFunc(ctx, func() { _ = c.rwc.Close() })
	defer stop()
	go c.runLoop(rt)
	defer close(c.runq)
	for {
		f, err := c.conn.Recv()
		if err != nil {
			c.stopAll("the daemon closed the connection")
			c.waitRuns()
			if errors.Is(err, io.EOF) || c.retired.Load() || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("reading from the parent: %w", err)
		}
		c.handle(ctx, rt, f)
	}
}

// runLoop runs the queued runs in order, and gives memory back once no
// run came for IdleRelease (once per idle spell: after the start, and
// after each run that ends one).
func (c *Child) runLoop(rt *runtime.Runtime) {
	var idle <-chan time.Time
	var timer *time.Timer
	if c.opts.IdleRelease > 0 {
		timer = time.NewTimer(c.opts.IdleRelease)
		defer timer.Stop()
		idle = timer.C
	}
	for {
		select {
		case r, ok := <-c.runq:
			if !ok {
				return
			}
			c.run(r.ctx, rt, r.id, r.task, r.cancel)
			if timer != nil && len(c.runq) == 0 {
				timer.Reset(c.opts.IdleRelease)
			}
		case <-idle:
			if len(c.runq) == 0 {
				c.released.Add(1)
				rt.TrimIdleVMs() // before releaseMemory's collection frees them
				releaseMemory()
			}
		}
	}
}

func (c *Child) handle(ctx context.Context, rt *runtime.Runtime, f *Frame) {
	switch f.Type {
	case TypeRun:
		if c.watch != nil {
			budget := c.opts.Memory
			if f.Memory > 0 && f.Memory < budget {
				budget = f.Memory
			}
			c.watch.setLimit(budget)
		}
		rctx, cancel := context.WithCancelCause(ctx)
		c.mu.Lock()
		c.runs[f.ID] = &childRun{cancel: cancel}
		c.mu.Unlock()
		c.wg.Add(1)
		c.runq <- queuedRun{ctx: rctx, id: f.ID, task: f.Task, cancel: cancel}
	case TypeCancel:
		c.mu.Lock()
		if r := c.runs[f.ID]; r != nil {
			r.cancel(fmt.Errorf("cancelled by the daemon: %s", f.Reason))
		}
		c.mu.Unlock()
	case TypePing, TypeListeners:
		c.handleControl(f)
	}
	// Other types are from a newer parent: ignored.
}

// handleControl applies a listeners frame or answers a ping. Both are
// handled on the reading goroutine, in the order received: the pong that
// follows a listeners frame tells the parent the list is in force.
func (c *Child) handleControl(f *Frame) {
	switch f.Type {
	case TypeListeners:
		c.opts.Listeners.Replace(f.Listeners, f.Seq)
	case TypePing:
		_ = c.conn.Send(&Frame{Type: TypePong, ID: f.ID})
	}
}

func (c *Child) run(ctx context.Context, rt *runtime.Runtime, id uint64, task []byte, cancel context.CancelCauseFunc) {
	defer c.wg.Done()
	c.current.Store(id)
	if c.watch != nil {
		c.watch.running(true)
	}
	res, err := rt.Run(ctx, task)
	if c.watch != nil {
		c.watch.running(false)
	}
	var memErr *MemoryError
	if errors.As(context.Cause(ctx), &memErr) {
		res, err = c.memoryResult(rt, task, memErr), nil
		c.retired.Store(true)
	}
	cancel(nil)
	c.mu.Lock()
	delete(c.runs, id)
	c.mu.Unlock()
	c.current.CompareAndSwap(id, 0)

	out := &Frame{Type: TypeResult, ID: id, Retire: c.retired.Load()}
	if err != nil {
		out.Error = runErrorOf(err)
	} else {
		b, merr := json.Marshal(res)
		if merr == nil && len(b) > MaxFrame-1024 {
			merr = fmt.Errorf("%d bytes, over the %s a worker may return", len(b), runtime.FormatSize(MaxFrame-1024))
		}
		if merr != nil {
			res = &runtime.Result{TaskID: res.TaskID, Status: 1, Plugin: res.Plugin, Message: fmt.Sprintf("encoding the result: %v", merr)}
			b, _ = json.Marshal(res)
		}
		out.Result, out.Status = b, res.Status
	}
	if err := c.conn.Send(out); err != nil {
		// The parent is gone or the socket broke: nothing to report to.
		c.retired.Store(true)
	}
	if c.retired.Load() {
		// Closing our end makes the parent see the exit; Serve's read
		// loop ends with it.
		_ = c.rwc.Close()
	}
}

// memoryResult is the failed result of a run stopped by the watchdog.
func (c *Child) memoryResult(rt *runtime.Runtime, task []byte, e *MemoryError) *runtime.Result {
	res := &runtime.Result{Status: 1}
	where := "limits.memory in the plugin definition"
	typ := c.opts.Type
	if t, err := runtime.ParseTask(task); err == nil {
		res.TaskID = t.TaskID
		if _, name, err := t.Route(); err == nil {
			typ = name
		}
	}
	for _, ti := range rt.Types() {
		if ti.Name == typ {
			where = "limits.memory in " + ti.Definition
			res.Plugin = ti.Name + "@" + ti.Version
		}
	}
	res.Message = fmt.Sprintf("plugin %q ran out of memory: the hook used more than its limit of %s and was stopped (raise %s, or loomd serve --plugin-memory)",
		typ, runtime.FormatSize(e.Limit), where)
	res.Error = map[string]any{"kind": "memory", "message": res.Message, "limit_bytes": e.Limit, "used_bytes": e.Used}
	return res
}

func (c *Child) stopAll(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.runs {
		r.cancel(errors.New(reason))
	}
}

// waitRuns waits for the runs to stop, at most ExitGrace.
func (c *Child) waitRuns() {
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.opts.ExitGrace):
	}
}

// logHandler sends slog records to the parent.
type logHandler struct {
	c      *Child
	level  slog.Leveler
	attrs  []slog.Attr
	groups string // "a.b." prefix of open groups
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level() && (l >= slog.LevelError || h.c.serving.Load())
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	attrs := make(map[string]any, len(h.attrs)+r.NumAttrs())
	for _, a := range h.attrs {
		addAttr(attrs, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(attrs, h.groups, a)
		return true
	})
	return h.c.conn.Send(&Frame{Type: TypeLog, ID: h.c.current.Load(),
		Log: &LogRecord{Level: r.Level.String(), Msg: r.Message, Attrs: attrs}})
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range as {
		if h.groups != "" {
			a.Key = h.groups + a.Key
		}
		n.attrs = append(n.attrs, a)
	}
	return &n
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.groups = h.groups + name + "."
	return &n
}

// addAttr flattens an attribute (groups become dotted keys) into m, with
// values JSON can carry.
func addAttr(m map[string]any, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			addAttr(m, p, g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	switch v.Kind() {
	case slog.KindString:
		m[prefix+a.Key] = v.String()
	case slog.KindInt64:
		m[prefix+a.Key] = v.Int64()
	case slog.KindUint64:
		m[prefix+a.Key] = v.Uint64()
	case slog.KindFloat64:
		m[prefix+a.Key] = v.Float64()
	case slog.KindBool:
		m[prefix+a.Key] = v.Bool()
	default:
		m[prefix+a.Key] = v.String()
	}
}
