// Package logstream keeps the logs of the daemons' work, apart from any
// terminal: a cluster job's log (internal/cluster/joblog) and every task's
// own log (internal/tasklog) are made of the same parts.
//
//   - Entry: one record of such a log (a log line, a task state change, a
//     job-level event), redacted and bounded by Clean before it is stored.
//   - Tee: a slog handler for the whole daemon that copies the records
//     about the tasks it tracks (their "task" attribute) to where each
//     tracked task's lines go, whichever component logged them (the
//     plugin through its worker process, the runtime, the supervisor).
//   - Stream: a JetStream stream shared by the daemons, one subject per
//     key (a cluster, a task): entries are batched in memory and published
//     in the background, bounded per entry, per key and in all, and read
//     back or followed from any daemon.
package logstream

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loomrt/loom/bindings/redact"
)

// Entry kinds.
const (
	// KindLog is a log line: the executor's, the runtime's or a plugin's.
	KindLog = "log"
	// KindTask is a task state change of a cluster job (Entry.Task), for
	// live views.
	KindTask = "task"
	// KindJob is a job-level event: a step began or ended, the job was
	// interrupted, resumed or taken over, the whole change ended.
	KindJob = "job"
)

// Entry is one record of a log.
type Entry struct {
	Time  time.Time `json:"time"`
	Kind  string    `json:"kind"`
	Job   string    `json:"job,omitempty"`
	Level string    `json:"level,omitempty"`
	Msg   string    `json:"msg,omitempty"`
	Attrs []Attr    `json:"attrs,omitempty"`
	// Task is set for KindTask entries.
	Task *TaskEvent `json:"task,omitempty"`
	// Attempt is the attempt of a queued task the line is from (a task's
	// own log; 0 when unknown, as for a Coopr server's tasks).
	Attempt int `json:"attempt,omitempty"`
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
	// MaxMsg bounds an entry's message, in bytes.
	MaxMsg = 8 << 10
	// MaxAttrs bounds an entry's attributes; one more says how many
	// were dropped.
	MaxAttrs = 32
	// MaxAttrValue bounds one attribute's value, in bytes.
	MaxAttrValue = 2 << 10
)

// Clean redacts and bounds an entry, in that order (a cut first would
// leave a secret's first characters behind). set may be nil.
func Clean(e Entry, set *redact.Set) Entry {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	red := func(s string) string {
		if set != nil {
			s = set.String(s)
		}
		return s
	}
	e.Msg = CapText(red(e.Msg), MaxMsg)
	if len(e.Attrs) > 0 {
		attrs := make([]Attr, 0, min(len(e.Attrs), MaxAttrs+1))
		for i, a := range e.Attrs {
			if i == MaxAttrs {
				attrs = append(attrs, Attr{K: "attrs_dropped", V: fmt.Sprint(len(e.Attrs) - MaxAttrs)})
				break
			}
			attrs = append(attrs, Attr{K: CapText(red(a.K), 128), V: CapText(red(a.V), MaxAttrValue)})
		}
		e.Attrs = attrs
	}
	if e.Task != nil {
		t := *e.Task
		t.Message = CapText(red(t.Message), MaxMsg)
		e.Task = &t
	}
	return e
}

// CapText cuts s to at most n bytes on a rune boundary, saying so.
func CapText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... [%d bytes cut]", len(s)-cut)
}

// Size is about what an entry takes encoded.
func Size(e Entry) int {
	n := 96 + len(e.Msg) + len(e.Job) + len(e.Level) + len(e.Source)
	for _, a := range e.Attrs {
		n += len(a.K) + len(a.V) + 14
	}
	if e.Task != nil {
		n += 64 + len(e.Task.Run) + len(e.Task.Message)
	}
	return n
}

// AppendAttr flattens a slog attribute into key/value pairs, group names
// and prefix joined by dots.
func AppendAttr(out []Attr, prefix string, a slog.Attr) []Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			out = AppendAttr(out, p, g)
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
// log through its own handler (text or JSON).
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
