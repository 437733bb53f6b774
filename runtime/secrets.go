package runtime

import (
	"context"
	"log/slog"

	"github.com/loomrt/loom/bindings/redact"
)

// redactHandler wraps a slog.Handler and redacts the task's secrets from
// the message and every string attribute, at the source.
type redactHandler struct {
	h       slog.Handler
	secrets *redact.Set
}

func (r *redactHandler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	if r.secrets.Empty() {
		return r.h.Handle(ctx, rec)
	}
	out := slog.NewRecord(rec.Time, rec.Level, r.secrets.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.redactAttr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *redactHandler) redactAttr(a slog.Attr) slog.Attr {
	a.Key = r.secrets.String(a.Key)
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.secrets.String(a.Value.String()))
	case slog.KindGroup:
		attrs := a.Value.Group()
		out := make([]any, len(attrs))
		for i, x := range attrs {
			out[i] = r.redactAttr(x)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, r.secrets.String(err.Error()))
		}
		return slog.Any(a.Key, r.secrets.Value(a.Value.Any(), false))
	case slog.KindInt64, slog.KindUint64, slog.KindFloat64:
		if red := r.secrets.String(a.Value.String()); red != a.Value.String() {
			return slog.String(a.Key, red)
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
