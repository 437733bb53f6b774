package queue

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"
	"unicode/utf8"
)

// maxLogMessage caps the result message an outcome line carries: enough
// to see what went wrong, never a whole output dump.
const maxLogMessage = 256

// logOutcome writes the operator's line for a task that reached its final
// state here: info "task finished" for a success, info "task cancelled"
// for a cancellation, warn "task failed" for a failure. It carries only the result's message field (already redacted
// where the result was made, and truncated here), never the result map,
// stdout or stderr.
func (q *Queue) logOutcome(t Transition) {
	r := t.Record
	if t.Lost || !r.State.Terminal() || t.From == r.State {
		return
	}
	level := slog.LevelWarn
	if r.State == Succeeded || r.State == Cancelled { // on request: not a failure to warn about
		level = slog.LevelInfo
	}
	if !q.log.Enabled(context.Background(), level) {
		return // at the default level (warn) a success writes nothing: no attributes to build, no result to read
	}
	attrs := []any{"task", r.TaskID, "family", r.Family, "type", r.Type, "hook", r.Hook, "taskName", r.TaskName,
		"state", string(r.State), "attempts", r.Attempts}
	if r.Status != nil {
		attrs = append(attrs, "status", *r.Status)
	}
	if d := r.Duration(); r.Started != nil && r.Finished != nil {
		attrs = append(attrs, "duration", roundDuration(d).String())
	}
	if r.Finished != nil && !r.Created.IsZero() {
		attrs = append(attrs, "since_submit", roundDuration(max(r.Finished.Sub(r.Created), 0)).String())
	}
	msg, kind := resultMessage(r.Result)
	if r.State == Failed && msg == "" {
		msg = r.Error
	}
	if kind != "" {
		attrs = append(attrs, "error_kind", kind)
	}
	if msg != "" {
		attrs = append(attrs, "message", truncate(msg, maxLogMessage))
	}
	switch r.State {
	case Succeeded:
		q.log.Info("task finished", attrs...)
	case Cancelled: // on request: not a failure to warn about
		q.log.Info("task cancelled", attrs...)
	default:
		q.log.Warn("task failed", attrs...)
	}
}

// resultMessage reads the message field and the error kind of a Coopr
// result, if it has them.
func resultMessage(result json.RawMessage) (msg, kind string) {
	if len(result) == 0 {
		return "", ""
	}
	var r struct {
		Message string `json:"message"`
		Error   struct {
			Kind string `json:"kind"`
		} `json:"error"`
	}
	if json.Unmarshal(result, &r) != nil {
		return "", ""
	}
	return r.Message, truncate(r.Error.Kind, 32)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// roundDuration keeps three significant digits or so: 1.234s, 12.3ms.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
