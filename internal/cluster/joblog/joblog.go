// Package joblog is a cluster's job log: what its jobs did, line by line,
// kept apart from any terminal. It holds the executor's lines (a task
// started, finished, failed, is retried), the plugins' own log lines of
// the job's tasks (whichever daemon ran them), the task state changes a
// live view redraws from, and the job-level events (a step began or
// ended, a daemon took the job over). A live view never shows plugin
// lines: `loomd cluster logs NAME` does.
//
// Two stores: a JetStream stream shared by the daemons (Stream, for jobs
// run by loomd serve) and a file beside the cluster's state files (File,
// for loomd apply --local). Both are bounded (per entry, per cluster and
// in all) and redact what the runner registered as secret.
package joblog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/loomrt/loom/bindings/redact"
)

// Entry kinds.
const (
	// KindLog is a log line: the executor's or a plugin's.
	KindLog = "log"
	// KindTask is a task state change (Entry.Task), for live views.
	KindTask = "task"
	// KindJob is a job-level event: a step began or ended, the job was
	// interrupted, resumed or taken over, the whole change ended.
	KindJob = "job"
)

// Entry is one record of a cluster's job log.
type Entry struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Job   string    `json:"job,omitempty"`
	Level string    `json:"level,omitempty"`
	Msg   string    `json:"msg,omitempty"`
	Attrs []Attr    `json:"attrs,omitempty"`
	// Task is set for KindTask entries.
	Task *TaskEvent `json:"task,omitempty"`
	// Source names the daemon (or CLI) that wrote the entry.
	Source string `json:"source,omitempty"`
}

// Attr is one key and value of a log line, in the order written.
type Attr struct {
	K string `json:"k"`
	V string `json:"v"`
}

// TaskEvent is a task state change of a job's plan.
type TaskEvent struct {
	Index   int    `json:"index"`
	Run     string `json:"run,omitempty"`
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// Attr returns the value of key, or "".
func (e Entry) Attr(key string) string {
	for _, a := range e.Attrs {
		if a.K == key {
			return a.V
		}
	}
	return ""
}

// Bounds of one entry: a plugin that logs a megabyte per line must not
// make the log useless for everyone else.
const (
	maxMsg       = 8 << 10
	maxAttrs     = 32
	maxAttrValue = 2 << 10
)

// Sink takes a cluster's entries. Write never blocks for long: a log
// store that is slow or gone drops entries (and says how many) rather
// than hold up a job.
type Sink interface {
	Write(cluster string, e Entry)
}

// Secrets are the values a cluster's log entries must never show, per
// cluster: the runner registers the secret-looking provider fields of a
// job's spec before the job runs (and every daemon does for the running
// jobs it sees, since it may run their tasks).
type Secrets struct {
	mu   sync.RWMutex
	sets map[string]secretSet
}

type secretSet struct {
	job string
	set *redact.Set
}

// Set registers the secrets of cluster's job (nil forgets them).
func (s *Secrets) Set(cluster, job string, set *redact.Set) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sets == nil {
		s.sets = map[string]secretSet{}
	}
	if set == nil {
		delete(s.sets, cluster)
		return
	}
	s.sets[cluster] = secretSet{job: job, set: set}
}

// Has reports whether the secrets of cluster's job are registered.
func (s *Secrets) Has(cluster, job string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sets[cluster].job == job && s.sets[cluster].set != nil
}

func (s *Secrets) get(cluster string) *redact.Set {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sets[cluster].set
}

// clean redacts and bounds an entry, in that order (a cut first would
// leave a secret's first characters behind).
func clean(e Entry, set *redact.Set) Entry {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	red := func(s string) string {
		if set != nil {
			s = set.String(s)
		}
		return s
	}
	e.Msg = capText(red(e.Msg), maxMsg)
	if len(e.Attrs) > 0 {
		attrs := make([]Attr, 0, min(len(e.Attrs), maxAttrs+1))
		for i, a := range e.Attrs {
			if i == maxAttrs {
				attrs = append(attrs, Attr{K: "attrs_dropped", V: fmt.Sprint(len(e.Attrs) - maxAttrs)})
				break
			}
			attrs = append(attrs, Attr{K: capText(red(a.K), 128), V: capText(red(a.V), maxAttrValue)})
		}
		e.Attrs = attrs
	}
	if e.Task != nil {
		t := *e.Task
		t.Message = capText(red(t.Message), maxMsg)
		e.Task = &t
	}
	return e
}

// capText cuts s to at most n bytes on a rune boundary, saying so.
func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... [%d bytes cut]", len(s)-cut)
}

// size is about what an entry takes encoded.
func size(e Entry) int {
	n := 96 + len(e.Msg) + len(e.Job) + len(e.Level) + len(e.Source)
	for _, a := range e.Attrs {
		n += len(a.K) + len(a.V) + 14
	}
	if e.Task != nil {
		n += 64 + len(e.Task.Run) + len(e.Task.Message)
	}
	return n
}

// Handler is a slog handler that writes every record to a job's log (as
// KindLog entries of job, in cluster) and passes it on to next (nil: to
// nothing). The executor of a job logs through it.
func Handler(sink Sink, cluster, job, source string, next slog.Handler) slog.Handler {
	return &jobHandler{sink: sink, cluster: cluster, job: job, source: source, next: next}
}

type jobHandler struct {
	sink                 Sink
	cluster, job, source string
	next                 slog.Handler
	attrs                []Attr
	groups               string
}

func (h *jobHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || (h.next != nil && h.next.Enabled(ctx, l))
}

func (h *jobHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		e := Entry{Time: r.Time, Kind: KindLog, Job: h.job, Level: r.Level.String(), Msg: r.Message, Source: h.source,
			Attrs: append([]Attr(nil), h.attrs...)}
		r.Attrs(func(a slog.Attr) bool {
			e.Attrs = appendAttr(e.Attrs, h.groups, a)
			return true
		})
		h.sink.Write(h.cluster, e)
	}
	if h.next != nil && h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h *jobHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append([]Attr(nil), h.attrs...)
	for _, a := range as {
		n.attrs = appendAttr(n.attrs, h.groups, a)
	}
	if h.next != nil {
		n.next = h.next.WithAttrs(as)
	}
	return &n
}

func (h *jobHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.groups = h.groups + name + "."
	if h.next != nil {
		n.next = h.next.WithGroup(name)
	}
	return &n
}

// appendAttr flattens a slog attribute into key/value pairs.
func appendAttr(out []Attr, prefix string, a slog.Attr) []Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			out = appendAttr(out, p, g)
		}
		return out
	}
	if a.Key == "" {
		return out
	}
	v := a.Value.String()
	if a.Value.Kind() == slog.KindAny {
		if b, err := json.Marshal(a.Value.Any()); err == nil {
			v = string(b)
		}
	}
	return append(out, Attr{K: prefix + a.Key, V: v})
}

// Record turns an entry back into a slog record, for a CLI that prints a
// job log through its own handler (text or JSON).
func Record(e Entry) slog.Record {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(e.Level)); err != nil {
		lvl = slog.LevelInfo
	}
	r := slog.NewRecord(e.Time, lvl, e.Msg, 0)
	for _, a := range e.Attrs {
		r.AddAttrs(slog.String(a.K, a.V))
	}
	return r
}

// Tee is a slog handler for a whole daemon: it copies the records that
// belong to a cluster job's task (their "task" attribute names a task
// registered with Track) into that cluster's job log, and passes every
// record on. The plugin lines of a job's tasks thus reach its log from
// whichever daemon runs them. The queue's own lines about the task are
// not copied: the job's executor says the same in its own words.
type Tee struct {
	sink   Sink
	source string
	mu     sync.RWMutex
	tasks  map[string]taskRef
	n      atomic.Int64 // len(tasks): most records need no lookup
}

type taskRef struct{ cluster, job string }

// NewTee returns a tee; until SetSink it copies nothing.
func NewTee() *Tee { return &Tee{tasks: map[string]taskRef{}} }

// SetSink sets where copies go, naming source (this daemon) in them.
func (t *Tee) SetSink(sink Sink, source string) {
	t.mu.Lock()
	t.sink, t.source = sink, source
	t.mu.Unlock()
}

// Track registers a running task of a cluster job; the returned func
// forgets it.
func (t *Tee) Track(taskID, cluster, job string) func() {
	t.mu.Lock()
	t.tasks[taskID] = taskRef{cluster: cluster, job: job}
	t.n.Store(int64(len(t.tasks)))
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		delete(t.tasks, taskID)
		t.n.Store(int64(len(t.tasks)))
		t.mu.Unlock()
	}
}

func (t *Tee) lookup(id string) (taskRef, Sink, string, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	r, ok := t.tasks[id]
	return r, t.sink, t.source, ok && t.sink != nil
}

// Handler wraps next: every record goes to next as before.
func (t *Tee) Handler(next slog.Handler) slog.Handler { return &teeHandler{t: t, next: next} }

type teeHandler struct {
	t      *Tee
	next   slog.Handler
	attrs  []Attr
	groups string
	task   string // the "task" attribute among attrs
	queue  bool   // component=queue among attrs
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	task, queue := h.task, h.queue
	if h.t.n.Load() == 0 {
		return h.next.Handle(ctx, r)
	}
	{
		r.Attrs(func(a slog.Attr) bool {
			switch {
			case a.Key == "task" && h.groups == "":
				task = a.Value.String()
			case a.Key == "component" && a.Value.String() == "queue":
				queue = true
			}
			return true
		})
	}
	if task != "" && !queue {
		if ref, sink, source, ok := h.t.lookup(task); ok {
			e := Entry{Time: r.Time, Kind: KindLog, Job: ref.job, Level: r.Level.String(), Msg: r.Message, Source: source,
				Attrs: append([]Attr(nil), h.attrs...)}
			r.Attrs(func(a slog.Attr) bool {
				e.Attrs = appendAttr(e.Attrs, h.groups, a)
				return true
			})
			sink.Write(ref.cluster, e)
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.next = h.next.WithAttrs(as)
	n.attrs = append([]Attr(nil), h.attrs...)
	for _, a := range as {
		n.attrs = appendAttr(n.attrs, h.groups, a)
		if h.groups == "" && a.Key == "task" {
			n.task = a.Value.String()
		}
		if a.Key == "component" && a.Value.String() == "queue" {
			n.queue = true
		}
	}
	return &n
}

func (h *teeHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.next = h.next.WithGroup(name)
	n.groups = h.groups + name + "."
	return &n
}

// Format renders an entry as one line of text (the log's own wording:
// time, level, message, then key=value pairs).
func Format(e Entry) string {
	var b strings.Builder
	b.WriteString(e.Time.UTC().Format("2006-01-02T15:04:05.000Z"))
	b.WriteByte(' ')
	lvl := e.Level
	if lvl == "" {
		lvl = strings.ToUpper(e.Kind)
	}
	b.WriteString(lvl)
	b.WriteByte(' ')
	b.WriteString(e.Msg)
	for _, a := range e.Attrs {
		b.WriteByte(' ')
		b.WriteString(a.K)
		b.WriteByte('=')
		if strings.ContainsAny(a.V, " \t\n\"=") || a.V == "" {
			b.WriteString(fmt.Sprintf("%q", a.V))
		} else {
			b.WriteString(a.V)
		}
	}
	return b.String()
}
