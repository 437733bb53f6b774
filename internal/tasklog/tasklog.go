// Package tasklog is every task's own log: the lines its plugin logged
// (loom.log), and what the runtime and the daemon said about it while it
// ran (a worker that died under it, a hook that did not stop in time, an
// attempt that ended without a result), whichever daemon ran it.
//
// Lines are captured where they already flow: every record of the
// daemon's logger that names a task this daemon is running (its "task"
// attribute, which the runtime, the worker supervisor and the plugins'
// loggers set) is copied by the daemon's logstream.Tee to that task's log,
// at the level the daemon logs at. They are redacted (the task's declared
// secrets; plugin lines are redacted at their source already), bounded per
// attempt (Options.MaxLines and MaxBytes: the first three quarters are
// stored as they come, then a note, then only the last quarter, stored
// when the attempt ends, after a note saying what was left out) and in all
// (the stream's MaxBytes, oldest first; MaxAge follows the task records'
// retention), and never written while the store is nearly full.
//
// The log lives in a JetStream stream shared by the daemons
// (LOOM_TASK_LOG, subject loom.tasklog.<key>, one message per batch of a
// task's lines), so any daemon serves it. A task that logs nothing costs
// nothing there: no message, no record change.
package tasklog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/jsretry"
	"github.com/loomrt/loom/internal/logstream"
)

// StreamName is the JetStream stream of the tasks' logs.
const StreamName = "LOOM_TASK_LOG"

const subjectPrefix = "loom.tasklog."

// Defaults of Options.
const (
	DefaultMaxBytes     = 256 << 20
	DefaultMaxLines     = 5000
	DefaultMaxTaskBytes = 512 << 10
)

// Origins: where a task came from. A queued task's log is read with its
// record; a Coopr server's task, or a cluster job's task its daemon ran on
// its own workers (loomd serve --cluster-tasks local), has no record here,
// so its log answers for itself (its tenant is in its messages' headers).
const (
	OriginQueue   = "queue"
	OriginCoopr   = "coopr"
	OriginCluster = "cluster"
)

// Headers of a task log message.
const (
	headerTenant = "Loom-Tenant"
	headerOrigin = "Loom-Origin"
)

// Options configure a Log; zero values pick the defaults.
type Options struct {
	// Replicas of the stream (1, or 3 on a NATS cluster).
	Replicas int
	// MaxBytes bounds the whole stream (default DefaultMaxBytes): past
	// it, the oldest tasks' lines go first.
	MaxBytes int64
	// MaxAge drops lines older than this; 0 keeps them until MaxBytes
	// pushes them out. loomd serve uses --retain plus an hour, so a
	// task's lines expire with its record.
	MaxAge time.Duration
	// MaxLines and MaxTaskBytes bound what one attempt of a task stores
	// (defaults DefaultMaxLines, DefaultMaxTaskBytes).
	MaxLines     int
	MaxTaskBytes int
	// Source names this daemon in the lines it stores.
	Source string
	// Paused stops storing lines while it says so (queue.Tight: the
	// store is nearly full); each task's log then says how many it lost.
	Paused func() (string, bool)
	// FlushEvery is how long lines wait to be batched (default 100 ms).
	FlushEvery time.Duration
	// Logger gets the log's own warnings.
	Logger *slog.Logger
	// Retry waits out what a NATS cluster cannot do right now while the
	// stream is created (a server offline, an election), until the
	// context of Open ends; nil: tried once.
	Retry *jsretry.Waiter
}

// Log keeps the tasks' logs. It is safe for concurrent use.
type Log struct {
	st  *logstream.Stream
	tee *logstream.Tee
	o   Options
}

// Open creates (or updates) the stream; the lines of the tasks Start
// tracks are taken from tee, which must wrap the daemon's log handler.
func Open(ctx context.Context, js jetstream.JetStream, tee *logstream.Tee, o Options) (*Log, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxLines <= 0 {
		o.MaxLines = DefaultMaxLines
	}
	if o.MaxTaskBytes <= 0 {
		o.MaxTaskBytes = DefaultMaxTaskBytes
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 100 * time.Millisecond
	}
	age := o.MaxAge
	if age <= 0 {
		age = 100 * 365 * 24 * time.Hour // JetStream: MaxAge 0 would take logstream's default
	}
	st, err := logstream.Open(ctx, js, logstream.Options{Name: StreamName, Prefix: subjectPrefix, What: "task log",
		Description: "loomd task logs: each task's plugin and runtime lines; subject loom.tasklog.<task id, escaped>",
		Replicas:    o.Replicas, MaxBytes: o.MaxBytes, MaxAge: age,
		// Every line of an attempt in its own message, for every attempt
		// loomd makes, and then some: the per-task cap is a backstop.
		MaxPerKey: int64(4 * (o.MaxLines + 16)),
		Source:    o.Source, FlushEvery: o.FlushEvery, Paused: o.Paused, Logger: o.Logger, Retry: o.Retry})
	if err != nil {
		return nil, err
	}
	return &Log{st: st, tee: tee, o: o}, nil
}

// Close stores what is pending (for up to 2 s) and stops.
func (l *Log) Close() { l.st.Close() }

// MaxBytes is the stream's bound.
func (l *Log) MaxBytes() int64 { return l.st.MaxBytes() }

// Key is the stream key of a task id: letters, digits, '-' and '=' as
// they are, every other byte as _xx (so '.' does not split the subject,
// and two ids never share a key).
func Key(id string) string {
	var b strings.Builder
	b.Grow(len(id) + 8)
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '=':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}

// Task is a task about to run in this daemon.
type Task struct {
	ID     string
	Tenant string
	// Origin is OriginQueue or OriginCoopr.
	Origin string
	// Attempt is the queue's attempt number (0: unknown).
	Attempt int
	// Secrets gives the task's declared secrets, asked once, when the
	// task logs its first line (nil: none beyond what its plugin's
	// logger redacts already).
	Secrets func() *redact.Set
}

// KindEnd is the entry that closes an attempt's lines: how it ended. It
// is stored only after lines of the attempt, or for an attempt that
// ended without a result.
const KindEnd = "end"

// Start tracks the task's lines until the returned end is called with the
// attempt's outcome: its result's status, or the error that left it
// without one. A task that logs nothing and ends with a result costs a
// map entry and nothing in the store. end stores what the task logged
// (waiting up to 2 s for the store) before it returns, so once a task's
// record says it finished, its lines can be read.
func (l *Log) Start(t Task) (end func(status int, runErr error)) {
	r := &run{l: l, t: t, key: Key(t.ID)}
	untrack := l.tee.Track(t.ID, r.line)
	return func(status int, runErr error) {
		untrack()
		r.end(status, runErr)
	}
}

// run is one attempt of a task in this daemon.
type run struct {
	l   *Log
	t   Task
	key string

	mu       sync.Mutex
	hdr      nats.Header
	set      *redact.Set
	lines    int // stored as they came
	bytes    int
	over     bool // past the head's bound: lines go to tail
	tail     []logstream.Entry
	tailSize int
	cut      int // lines dropped between head and tail
	cutBytes int
	wrote    bool
	ended    bool
}

func (r *run) headBounds() (lines, bytes int) {
	return r.l.o.MaxLines * 3 / 4, r.l.o.MaxTaskBytes * 3 / 4
}
func (r *run) tailBounds() (lines, bytes int) {
	hl, hb := r.headBounds()
	return r.l.o.MaxLines - hl, r.l.o.MaxTaskBytes - hb
}

// line takes one of the task's records (the tee's destination).
func (r *run) line(e logstream.Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	r.add(e)
}

// add bounds and stores one entry; r.mu is held.
func (r *run) add(e logstream.Entry) {
	r.prepare()
	e.Attempt = r.t.Attempt
	e.Attrs = dropKnown(e.Attrs, r.t.ID)
	e = logstream.Clean(e, r.set)
	n := logstream.Size(e)
	hl, hb := r.headBounds()
	if !r.over && r.lines < hl && r.bytes+n <= hb {
		r.lines++
		r.bytes += n
		r.put(e)
		return
	}
	if !r.over {
		r.over = true
		tl, tb := r.tailBounds()
		r.put(logstream.Entry{Time: e.Time, Kind: logstream.KindLog, Level: "WARN", Attempt: r.t.Attempt,
			Msg: fmt.Sprintf("this attempt's log reached %d lines or %s, three quarters of its bound (%d lines, %s per attempt): "+
				"from here only its last %d lines (%s) are kept, stored when it ends", r.lines, kib(r.bytes),
				r.l.o.MaxLines, kib(r.l.o.MaxTaskBytes), tl, kib(tb))})
	}
	tl, tb := r.tailBounds()
	r.tail = append(r.tail, e)
	r.tailSize += n
	for len(r.tail) > 0 && (len(r.tail) > tl || r.tailSize > tb) {
		r.cut++
		r.cutBytes += logstream.Size(r.tail[0])
		r.tailSize -= logstream.Size(r.tail[0])
		r.tail = r.tail[1:]
	}
}

// prepare makes, on the first entry, the messages' header and the task's
// secrets; r.mu is held.
func (r *run) prepare() {
	if r.hdr != nil {
		return
	}
	r.hdr = nats.Header{headerOrigin: []string{r.t.Origin}}
	if r.t.Tenant != "" {
		r.hdr.Set(headerTenant, r.t.Tenant)
	}
	if r.t.Secrets != nil {
		r.set = r.t.Secrets()
	}
}

func (r *run) put(e logstream.Entry) {
	r.wrote = true
	r.l.st.Put(r.key, r.hdr, e)
}

// end stores what the tail kept and the attempt's last entry.
func (r *run) end(status int, runErr error) {
	r.mu.Lock()
	r.ended = true
	if r.over && r.cut > 0 {
		r.put(logstream.Entry{Time: time.Now(), Kind: logstream.KindLog, Level: "WARN", Attempt: r.t.Attempt,
			Msg: fmt.Sprintf("%d lines (%s) of this attempt were not stored here: its log passed its bound of %d lines or %s",
				r.cut, kib(r.cutBytes), r.l.o.MaxLines, kib(r.l.o.MaxTaskBytes))})
	}
	for _, e := range r.tail {
		r.put(e)
	}
	r.tail = nil
	if r.wrote || runErr != nil {
		e := logstream.Entry{Time: time.Now(), Kind: KindEnd, Level: "INFO", Msg: fmt.Sprintf("the attempt ended: status %d", status)}
		switch {
		case runErr != nil:
			e.Level, e.Msg = "WARN", "the attempt ended without a result: "+runErr.Error()
		case status != 0:
			e.Level = "WARN"
		}
		r.prepare()
		e.Attempt = r.t.Attempt
		r.put(logstream.Clean(e, r.set))
	}
	wrote := r.wrote
	r.mu.Unlock()
	if wrote {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = r.l.st.Flush(ctx) // a store that does not answer keeps the lines pending
	}
}

// dropKnown removes the attributes every line of a task's log would
// repeat: its own id.
func dropKnown(attrs []logstream.Attr, id string) []logstream.Attr {
	out := attrs[:0:0]
	for _, a := range attrs {
		if a.K == "task" && a.V == id {
			continue
		}
		out = append(out, a)
	}
	return out
}

func kib(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", (n+1023)>>10)
}

// Line is a stored line with the cursor of the batch it came in.
type Line struct {
	Seq uint64 `json:"seq"`
	logstream.Entry
}

// Page is what Read returns.
type Page struct {
	Lines []Line
	// Next is the cursor to read after next time (the last batch read,
	// or after when there was none).
	Next uint64
	// More: there are stored lines after Next (a limit stopped the read).
	More bool
	// Tenant and Origin are those of the task's first batch read ("" when
	// none was).
	Tenant, Origin string
}

// Filter chooses the batches of a task's log Read returns.
type Filter struct {
	// Origin keeps only batches from this origin ("": any).
	Origin string
	// Since skips batches stored before it: the lines of an earlier task
	// of the same id (deleted, then submitted again).
	Since time.Time
}

// ErrNoLog is returned by Read for a task with no stored line at all
// when f asks for an origin (a Coopr task loomd does not know).
var ErrNoLog = errors.New("no log stored for this task")

// Read returns up to about limit lines of task id stored after cursor
// after (0: from the start), oldest first, in whole batches.
func (l *Log) Read(ctx context.Context, id string, after uint64, limit int, f Filter) (Page, error) {
	p := Page{Next: after}
	key := Key(id)
	for len(p.Lines) < limit {
		n := min(max(limit-len(p.Lines), 16), 1024)
		bs, err := l.st.Read(ctx, key, p.Next, n)
		if err != nil {
			return p, err
		}
		for _, b := range bs {
			if len(p.Lines) >= limit {
				p.More = true
				return p, nil
			}
			p.Next = b.Seq
			if (f.Origin != "" && b.Header.Get(headerOrigin) != f.Origin) || (!f.Since.IsZero() && !b.Time.IsZero() && b.Time.Before(f.Since)) {
				continue
			}
			if p.Origin == "" {
				p.Tenant, p.Origin = b.Header.Get(headerTenant), b.Header.Get(headerOrigin)
			}
			for _, e := range b.Entries {
				p.Lines = append(p.Lines, Line{Seq: b.Seq, Entry: e})
			}
		}
		if len(bs) < n {
			return p, nil
		}
	}
	last, err := l.st.Last(ctx, key)
	p.More = err == nil && last > p.Next
	return p, nil
}

// Owner reads the tenant and origin of task id's log from its first
// batch of the origin asked ("": any); ErrNoLog when it has none.
func (l *Log) Owner(ctx context.Context, id, origin string) (tenant string, err error) {
	var after uint64
	for {
		bs, err := l.st.Read(ctx, Key(id), after, 64)
		if err != nil {
			return "", err
		}
		if len(bs) == 0 {
			return "", ErrNoLog
		}
		for _, b := range bs {
			if origin == "" || b.Header.Get(headerOrigin) == origin {
				return b.Header.Get(headerTenant), nil
			}
			after = b.Seq
		}
	}
}

// Ended reports whether the newest entry stored for task id closes an
// attempt (KindEnd): for a task loomd keeps no record of (a Coopr
// server's), the end of its log as far as loomd knows.
func (l *Log) Ended(ctx context.Context, id string) (bool, error) {
	b, ok, err := l.st.LastBatch(ctx, Key(id))
	if err != nil || !ok || len(b.Entries) == 0 {
		return false, err
	}
	return b.Entries[len(b.Entries)-1].Kind == KindEnd, nil
}

// Wait returns once task id's log has a batch after cursor after, or ctx
// ends (without error).
func (l *Log) Wait(ctx context.Context, id string, after uint64) error {
	return l.st.Wait(ctx, Key(id), after)
}

// Notify calls f whenever a batch of task id's log is stored by any
// daemon, until stop. f must not block.
func (l *Log) Notify(id string, f func()) (stop func(), err error) {
	return l.st.Notify(Key(id), f)
}

// Purge removes task id's log (the task was deleted).
func (l *Log) Purge(ctx context.Context, id string) error {
	return l.st.Purge(ctx, Key(id))
}

// Flush waits until the lines written so far are stored.
func (l *Log) Flush(ctx context.Context) error { return l.st.Flush(ctx) }
