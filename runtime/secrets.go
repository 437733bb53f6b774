package runtime

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
)

// redacted replaces secret values in logs, messages and errors.
const redacted = "[REDACTED]"

// secretSet holds the secret values of one task: sensitive parameter
// fields, ssh-auth passwords, and whatever bindings register.
type secretSet struct {
	mu   sync.RWMutex
	vals []string // longest first, so a secret containing another is replaced whole
}

func newSecretSet() *secretSet { return &secretSet{} }

// add registers a secret. Very short values are ignored: redacting "a"
// everywhere would destroy every message and protect nothing.
func (s *secretSet) add(v string) {
	if len(v) < 4 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.vals {
		if x == v {
			return
		}
	}
	s.vals = append(s.vals, v)
	sort.Slice(s.vals, func(i, j int) bool { return len(s.vals[i]) > len(s.vals[j]) })
}

// redact replaces every registered secret in str.
func (s *secretSet) redact(str string) string {
	if s == nil {
		return str
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.vals {
		if strings.Contains(str, v) {
			str = strings.ReplaceAll(str, v, redacted)
		}
	}
	return str
}

func (s *secretSet) empty() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.vals) == 0
}

// redactHandler wraps a slog.Handler and redacts the task's secrets from
// the message and every string attribute, at the source.
type redactHandler struct {
	h       slog.Handler
	secrets *secretSet
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	if r.secrets.empty() {
		return r.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, r.secrets.redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) redactAttr(a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.secrets.redact(a.Value.String()))
	case slog.KindGroup:
		attrs := a.Value.Group()
		out := make([]any, len(attrs))
		for i, x := range attrs {
			out[i] = r.redactAttr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, r.secrets.redact(err.Error()))
		}
	}
	return a
}

func (r *redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = r.redactAttr(a)
	}
	return &redactHandler{h: r.h.WithAttrs(red), secrets: r.secrets}
}

func (r *redactHandler) WithGroup(name string) slog.Handler {
	return &redactHandler{h: r.h.WithGroup(name), secrets: r.secrets}
}
