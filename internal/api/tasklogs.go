package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
)

// TaskLogResponse answers GET /v1/tasks/{id}/logs.
type TaskLogResponse struct {
	TaskID string `json:"taskId"`
	// State is the task's state; empty for a Coopr server's task, which
	// loomd keeps no record of.
	State queue.State `json:"state,omitempty"`
	// Lines are the stored lines after the cursor, oldest first; each
	// carries the cursor (seq) of the batch it came in.
	Lines []tasklog.Line `json:"lines"`
	// Next is the cursor to pass as after= next time.
	Next uint64 `json:"next"`
	// More: more lines are stored after Next (limit= stopped this page).
	More bool `json:"more,omitempty"`
	// Done: the task finished and every line stored for it was read: no
	// line will come after Next.
	Done bool `json:"done"`
}

// Bounds of a task log page.
const (
	defaultLogLines = 1000
	maxLogLines     = 10000
)

// logSource is where a task's log is read from and who may read it.
type logSource struct {
	filter tasklog.Filter
	// queued: the queue keeps the task's record (its state says when the
	// log is done); otherwise a Coopr server's task.
	queued bool
}

// taskLogs answers GET /v1/tasks/{id}/logs: the task's own log lines
// (its plugin's, the runtime's about it), after=SEQ on, limit= lines; with
// wait=DURATION it waits for the first new line (or the task's end) when
// there is none yet; with "Accept: text/event-stream" it streams them as
// server-sent events until the task is done.
func (s *Server) taskLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.lateReady(w, r) {
		return
	}
	if s.taskLogStore() == nil {
		writeError(w, http.StatusServiceUnavailable, "this loomd keeps no task logs (started with --task-log-max 0): the task's lines are in the daemon's own log, with task="+id)
		return
	}
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "after", "limit", "wait":
		default:
			writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %q: GET /v1/tasks/{id}/logs takes after, limit and wait", k))
			return
		}
	}
	after, limit, wait, ok := s.logCursor(w, q, "the next cursor of the previous answer", "lines", defaultLogLines, maxLogLines)
	if !ok {
		return
	}
	src, ok := s.logSource(w, r, id)
	if !ok {
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if last := r.Header.Get("Last-Event-ID"); last != "" {
			if n, err := strconv.ParseUint(last, 10, 64); err == nil {
				after = n
			}
		}
		s.streamTaskLog(w, r, id, src, after, limit)
		return
	}
	out, err := s.readTaskLog(r.Context(), id, src, after, limit)
	if err == nil && len(out.Lines) == 0 && !out.Done && wait > 0 {
		s.waitTaskLog(r.Context(), id, src, out.Next, wait)
		out, err = s.readTaskLog(r.Context(), id, src, after, limit)
	}
	if err != nil {
		s.taskLogError(w, err, id)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// logSource finds whose the task is: a queued task's record (the
// request's token must reach it), else a Coopr server's task (or a
// cluster job's task run without the queue) this daemon's log has lines of (their tenant, in the log, must be the
// token's). Another tenant's task is answered 404, as one that does not
// exist.
func (s *Server) logSource(w http.ResponseWriter, r *http.Request, id string) (logSource, bool) {
	rec, err := s.cfg.Queue.Get(r.Context(), id)
	switch {
	case err == nil:
		if !s.tenantOK(w, r, rec) {
			return logSource{}, false
		}
		// The lines of an earlier task of the same id (swept, then
		// submitted again) are older than this one's record, give or
		// take the clocks of the daemons.
		return logSource{filter: tasklog.Filter{Origin: tasklog.OriginQueue, Since: rec.Created.Add(-time.Minute)}, queued: true}, true
	case !errors.Is(err, queue.ErrNotFound):
		s.queueError(w, err, id)
		return logSource{}, false
	}
	origin := tasklog.OriginCoopr
	tenant, err := s.taskLogStore().Owner(r.Context(), id, origin)
	if errors.Is(err, tasklog.ErrNoLog) {
		// A cluster job's task its daemon ran itself (--cluster-tasks local).
		origin = tasklog.OriginCluster
		tenant, err = s.taskLogStore().Owner(r.Context(), id, origin)
	}
	switch {
	case errors.Is(err, tasklog.ErrNoLog):
		s.queueError(w, queue.ErrNotFound, id)
		return logSource{}, false
	case err != nil:
		s.taskLogError(w, err, id)
		return logSource{}, false
	case !tokenOf(r).SeesTenant(tenant, s.cfg.DefaultTenant):
		s.queueError(w, queue.ErrNotFound, id)
		return logSource{}, false
	}
	return logSource{filter: tasklog.Filter{Origin: origin}}, true
}

// readTaskLog reads a page. The record is read first: a task whose
// record says finished had its lines stored before that was written, so
// reading them after it finds them all.
func (s *Server) readTaskLog(ctx context.Context, id string, src logSource, after uint64, limit int) (TaskLogResponse, error) {
	out := TaskLogResponse{TaskID: id, Lines: []tasklog.Line{}, Next: after}
	finished := false
	if src.queued {
		rec, err := s.cfg.Queue.Get(ctx, id)
		if err != nil {
			return out, err
		}
		out.State = rec.State
		finished = rec.State.Terminal()
	}
	page, err := s.taskLogStore().Read(ctx, id, after, limit, src.filter)
	if err != nil {
		return out, err
	}
	if page.Lines != nil {
		out.Lines = page.Lines
	}
	out.Next, out.More = page.Next, page.More
	if !src.queued && !page.More {
		// A Coopr server's task: done once its last attempt here ended.
		if n := len(page.Lines); n > 0 {
			finished = page.Lines[n-1].Kind == tasklog.KindEnd
		} else if finished, err = s.taskLogStore().Ended(ctx, id); err != nil {
			return out, err
		}
	}
	out.Done = finished && !page.More
	return out, nil
}

// waitTaskLog returns once the task's log has a line after next, the task
// finished, or wait passed (quiet: nothing happened).
func (s *Server) waitTaskLog(ctx context.Context, id string, src logSource, next uint64, wait time.Duration) (quiet bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	go func() {
		_ = s.taskLogStore().Wait(ctx, id, next)
		cancel()
	}()
	if src.queued {
		go func() {
			_, _ = s.cfg.Queue.Wait(ctx, id)
			cancel()
		}()
	}
	<-ctx.Done()
	return errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// streamTaskLog sends the log as server-sent events: "line" events (the
// line's JSON; the id of a batch's last line is its cursor, so a client
// that reconnects with Last-Event-ID goes on after it), an "end" event
// once the task is done, and a comment line every 15 s while nothing
// happens, which keeps proxies from closing the stream.
func (s *Server) streamTaskLog(w http.ResponseWriter, r *http.Request, id string, src logSource, after uint64, limit int) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	send := func(text string) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprint(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send("retry: 3000\n\n") {
		return
	}
	ctx := r.Context()
	for ctx.Err() == nil {
		out, err := s.readTaskLog(ctx, id, src, after, limit)
		if err != nil {
			data, _ := json.Marshal(Error{Error: fmt.Sprintf("reading the log of task %s: %v", id, err)})
			send("event: error\ndata: " + string(data) + "\n\n")
			return
		}
		var b strings.Builder
		for i, l := range out.Lines {
			data, _ := json.Marshal(l)
			if i == len(out.Lines)-1 || out.Lines[i+1].Seq != l.Seq {
				fmt.Fprintf(&b, "id: %d\n", l.Seq)
			}
			fmt.Fprintf(&b, "event: line\ndata: %s\n\n", data)
		}
		if out.Done {
			data, _ := json.Marshal(map[string]any{"taskId": id, "state": out.State, "next": out.Next})
			fmt.Fprintf(&b, "event: end\ndata: %s\n\n", data)
		}
		if b.Len() > 0 && !send(b.String()) {
			return
		}
		if out.Done {
			return
		}
		after = out.Next
		if out.More {
			continue
		}
		if s.waitTaskLog(ctx, id, src, after, 15*time.Second) && ctx.Err() == nil && !send(": heartbeat\n\n") {
			return
		}
	}
}

func (s *Server) taskLogError(w http.ResponseWriter, err error, id string) {
	if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrClosed) {
		s.queueError(w, err, id)
		return
	}
	writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("reading the log of task %s: %v (the store may be unreachable; try again)", id, err))
}

// logCursor reads a log read's after, limit and wait parameters (the task
// log's and the cluster log's): after is a cursor described by cursor,
// limit counts units (lines or batches, def when absent, at most max), and
// wait is capped at the server's MaxWait. It answers 400 and returns false
// on a bad value.
func (s *Server) logCursor(w http.ResponseWriter, q url.Values, cursor, units string, def, max int) (after uint64, limit int, wait time.Duration, ok bool) {
	if a := q.Get("after"); a != "" {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after=%q: want %s (a number)", a, cursor))
			return 0, 0, 0, false
		}
		after = n
	}
	limit = def
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: want a number of %s, 1 to %d", l, units, max))
			return 0, 0, 0, false
		}
		limit = min(n, max)
	}
	if ws := q.Get("wait"); ws != "" {
		d, err := time.ParseDuration(ws)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait=%q is not a duration: use e.g. wait=30s", ws))
			return 0, 0, 0, false
		}
		wait = min(d, s.cfg.MaxWait)
	}
	return after, limit, wait, true
}
