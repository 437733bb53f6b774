package runtime

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// MaxTaskLog is how many bytes of log lines one task may write: a hook
// logging in a loop until its deadline must not fill the daemon's disk.
// Past it, the task's lines are dropped and one warning says so.
const MaxTaskLog = 16 << 20

// logBudget is shared by the handlers of one task's logger.
type logBudget struct {
	mu      sync.Mutex
	left    int
	dropped int
}

// budgetHandler drops a task's log lines past its budget.
type budgetHandler struct {
	h      slog.Handler
	budget *logBudget
}

func newBudgetHandler(h slog.Handler, max int) *budgetHandler {
	return &budgetHandler{h: h, budget: &logBudget{left: max}}
}

func (b *budgetHandler) Enabled(ctx context.Context, l slog.Level) bool { return b.h.Enabled(ctx, l) }

func (b *budgetHandler) Handle(ctx context.Context, rec slog.Record) error {
	size := len(rec.Message) + 64
	rec.Attrs(func(a slog.Attr) bool {
		size += len(a.Key) + len(a.Value.String()) + 4
		return true
	})
	b.budget.mu.Lock()
	if b.budget.left < size {
		b.budget.dropped++
		first := b.budget.dropped == 1
		b.budget.mu.Unlock()
		if !first {
			return nil
		}
		warn := slog.NewRecord(rec.Time, slog.LevelWarn,
			fmt.Sprintf("this task wrote its %d MiB of log lines; its further lines are dropped (log less, or log at debug level)", MaxTaskLog>>20), rec.PC)
		return b.h.Handle(ctx, warn)
	}
	b.budget.left -= size
	b.budget.mu.Unlock()
	return b.h.Handle(ctx, rec)
}

func (b *budgetHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &budgetHandler{h: b.h.WithAttrs(attrs), budget: b.budget}
}

func (b *budgetHandler) WithGroup(name string) slog.Handler {
	return &budgetHandler{h: b.h.WithGroup(name), budget: b.budget}
}
