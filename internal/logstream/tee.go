package logstream

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
)

// Tee is a slog handler for a whole daemon: it copies the records about
// the tasks it tracks (their "task" attribute names a task registered
// with Track) to each tracked task's destinations, and passes every record
// on. A task's plugin lines thus reach its logs from whichever component
// logged them. A daemon has one Tee; a task may be tracked several times
// (its own log, its cluster job's log), each with its own destination.
type Tee struct {
	mu    sync.RWMutex
	tasks map[string][]*dest
	n     atomic.Int64 // tracked destinations: most records need no lookup
}

type dest struct{ f func(Entry) }

// NewTee returns a tee that tracks nothing yet.
func NewTee() *Tee { return &Tee{tasks: map[string][]*dest{}} }

// Track sends the records about task taskID to f (as KindLog entries,
// with the attributes given through With first, then the record's own)
// until the returned func is called. f runs on the logging goroutine: it
// must not block.
func (t *Tee) Track(taskID string, f func(Entry)) (untrack func()) {
	d := &dest{f: f}
	t.mu.Lock()
	t.tasks[taskID] = append(t.tasks[taskID], d)
	t.n.Add(1)
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			list := t.tasks[taskID]
			for i, x := range list {
				if x == d {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(t.tasks, taskID)
			} else {
				t.tasks[taskID] = list
			}
			t.n.Add(-1)
		})
	}
}

// Tracking reports whether any destination tracks task taskID.
func (t *Tee) Tracking(taskID string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.tasks[taskID]) > 0
}

func (t *Tee) lookup(id string) []*dest {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.tasks[id]
}

// Handler wraps next: every record goes to next as before.
func (t *Tee) Handler(next slog.Handler) slog.Handler { return &teeHandler{t: t, next: next} }

type teeHandler struct {
	t      *Tee
	next   slog.Handler
	attrs  []Attr
	groups string
	task   string // the "task" attribute among attrs
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.t.n.Load() == 0 {
		return h.next.Handle(ctx, r)
	}
	task := h.task
	if h.groups == "" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "task" {
				task = a.Value.String()
			}
			return true
		})
	}
	if task != "" {
		if ds := h.t.lookup(task); len(ds) > 0 {
			e := Entry{Time: r.Time, Kind: KindLog, Level: r.Level.String(), Msg: r.Message,
				Attrs: make([]Attr, len(h.attrs), len(h.attrs)+r.NumAttrs())}
			copy(e.Attrs, h.attrs)
			r.Attrs(func(a slog.Attr) bool {
				e.Attrs = AppendAttr(e.Attrs, h.groups, a)
				return true
			})
			// Destinations share the entry: none may append to its
			// attributes in place (Clean copies them).
			e.Attrs = e.Attrs[:len(e.Attrs):len(e.Attrs)]
			for _, d := range ds {
				d.f(e)
			}
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.next = h.next.WithAttrs(as)
	n.attrs = append([]Attr(nil), h.attrs...)
	for _, a := range as {
		n.attrs = AppendAttr(n.attrs, h.groups, a)
		if h.groups == "" && a.Key == "task" {
			n.task = a.Value.String()
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
