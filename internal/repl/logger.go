package repl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
)

// lineHandler is a compact slog handler for the prompt: one line per
// record, "[info] hello.install: message key=value", without the time.
// The task id is left out (the REPL has one task at a time).
type lineHandler struct {
	mu     *sync.Mutex
	w      io.Writer
	level  slog.Leveler
	attrs  []slog.Attr
	groups []string
}

// newLineHandler returns a handler writing to w at level and above.
func newLineHandler(w io.Writer, level slog.Leveler) *lineHandler {
	return &lineHandler{mu: &sync.Mutex{}, w: w, level: level}
}

// Enabled implements slog.Handler.
func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

// Handle implements slog.Handler.
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var plugin, hook string
	var b strings.Builder
	add := func(a slog.Attr) {
		a.Value = a.Value.Resolve()
		switch a.Key {
		case "task":
			return
		case "plugin":
			plugin = a.Value.String()
			return
		case "hook":
			hook = a.Value.String()
			return
		}
		key := a.Key
		if len(h.groups) > 0 {
			key = strings.Join(h.groups, ".") + "." + key
		}
		v := a.Value.String()
		if v == "" || strings.ContainsAny(v, " \t\n\"=") {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", key, v)
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(func(a slog.Attr) bool { add(a); return true })
	// Statements typed at the prompt log with hook "repl": no prefix.
	where := ""
	if hook != "repl" && plugin != "" {
		where = " " + plugin
		if hook != "" {
			where += "." + hook
		}
		where += ":"
	}
	line := fmt.Sprintf("[%s]%s %s%s\n", strings.ToLower(r.Level.String()), where, r.Message, b.String())
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, line)
	return err
}

// WithAttrs implements slog.Handler.
func (h *lineHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &n
}

// WithGroup implements slog.Handler.
func (h *lineHandler) WithGroup(name string) slog.Handler {
	n := *h
	n.groups = append(append([]string{}, h.groups...), name)
	return &n
}
