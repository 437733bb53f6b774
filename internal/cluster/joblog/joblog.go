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
// in all) and redact what the runner registered as secret. The entries,
// the stream and the tee that copies plugin lines are package logstream's,
// which every task's own log (internal/tasklog) is made of too.
package joblog

import (
	"context"
	"log/slog"
	"sync"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/logstream"
)

// The entries of a job log are logstream's.
type (
	// Entry is one record of a cluster's job log.
	Entry = logstream.Entry
	// Attr is one key and value of a log line, in the order written.
	Attr = logstream.Attr
	// TaskEvent is a task state change of a job's plan.
	TaskEvent = logstream.TaskEvent
	// Batch is one stored message of the stream.
	Batch = logstream.Batch
)

// Entry kinds.
const (
	// KindLog is a log line: the executor's or a plugin's.
	KindLog = logstream.KindLog
	// KindTask is a task state change (Entry.Task), for live views.
	KindTask = logstream.KindTask
	// KindJob is a job-level event: a step began or ended, the job was
	// interrupted, resumed or taken over, the whole change ended.
	KindJob = logstream.KindJob
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

// For implements logstream.Redactor: the secrets of cluster's job.
func (s *Secrets) For(cluster string) *redact.Set {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sets[cluster].set
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
			e.Attrs = logstream.AppendAttr(e.Attrs, h.groups, a)
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
		n.attrs = logstream.AppendAttr(n.attrs, h.groups, a)
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

// Record turns an entry back into a slog record, for a CLI that prints a
// job log through its own handler (text or JSON).
func Record(e Entry) slog.Record { return logstream.Record(e) }

// Format renders an entry as one line of text (the log's own wording:
// time, level, message, then key=value pairs).
func Format(e Entry) string { return logstream.Format(e) }

// Copy is the destination (logstream.Tee.Track) that copies a cluster
// job's task's log lines into the cluster's job log, naming source (this
// daemon) in them. The queue's own lines about the task are not copied:
// the job's executor says the same in its own words.
func Copy(sink Sink, source, cluster, job string) func(Entry) {
	return func(e Entry) {
		if e.Attr("component") == "queue" {
			return
		}
		e.Job, e.Source = job, source
		sink.Write(cluster, e)
	}
}
