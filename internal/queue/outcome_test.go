package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// logBuffer collects JSON log lines for assertions, safely across the
// queue's goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String is everything logged so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the parsed lines whose msg is msg.
func (b *logBuffer) lines(msg string) []map[string]any {
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// waitLine waits (bounded) for a line with msg about task id.
func (b *logBuffer) waitLine(t *testing.T, msg, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range b.lines(msg) {
			if l["task"] == id {
				return l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no %q line for task %s in the log:\n%s", msg, id, b.buf.String())
	return nil
}

// A finished task logs one info "task finished" line, a failed one one
// warn "task failed" line, each with the task's id, type, hook, status,
// duration and its (truncated) message, and nothing else of the result.
func TestOutcomeLogLines(t *testing.T) {
	var logs logBuffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	q := open(t, cfg)
	long := strings.Repeat("é", 400)
	c := newCounter(func(_ context.Context, id string, _ int) ([]byte, int, error) {
		if id == "bad-1" {
			return []byte(`{"status":3,"message":"disk full ` + long + `","stdout":"SECRET-STDOUT","error":{"kind":"plugin"}}`), 3, nil
		}
		return []byte(`{"status":0,"message":"all good","stdout":"SECRET-STDOUT","result":{"k":"SECRET-RESULT"}}`), 0, nil
	})
	serve(t, q, c, 2, shell)
	submit(t, q, task("ok-1", "shell"))
	submit(t, q, task("bad-1", "shell"))
	wait(t, q, "ok-1")
	wait(t, q, "bad-1")

	ok := logs.waitLine(t, "task finished", "ok-1")
	if ok["level"] != "INFO" || ok["type"] != "shell" || ok["family"] != "automator" || ok["hook"] != "install" ||
		ok["taskName"] != "INSTALL" || ok["status"] != float64(0) || ok["message"] != "all good" || ok["duration"] == nil {
		t.Errorf("task finished line = %v", ok)
	}
	bad := logs.waitLine(t, "task failed", "bad-1")
	msg, _ := bad["message"].(string)
	if bad["level"] != "WARN" || bad["status"] != float64(3) || bad["error_kind"] != "plugin" ||
		!strings.HasPrefix(msg, "disk full é") || !strings.HasSuffix(msg, "…") || len(msg) > maxLogMessage+len("…") {
		t.Errorf("task failed line = %v", bad)
	}
	if n := len(logs.lines("task finished")) + len(logs.lines("task failed")); n != 2 {
		t.Errorf("%d outcome lines for 2 tasks", n)
	}
	if s := logs.buf.String(); strings.Contains(s, "SECRET-") {
		t.Errorf("the log carries result fields beyond the message:\n%s", s)
	}
}

// A task that fails without running (its attempts ran out) logs "task
// failed" with the reason as its message.
func TestOutcomeLogInfraFailure(t *testing.T) {
	var logs logBuffer
	cfg := testConfig(t)
	cfg.MaxAttempts = 1
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	q := open(t, cfg)
	c := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		return nil, 0, errors.New("lost the vm")
	})
	serve(t, q, c, 1, shell)
	submit(t, q, task("inf-1", "shell"))
	if got := wait(t, q, "inf-1"); got.State != Failed {
		t.Fatalf("inf-1 = %s", got.State)
	}
	l := logs.waitLine(t, "task failed", "inf-1")
	if m, _ := l["message"].(string); !strings.Contains(m, "lost the vm") {
		t.Errorf("task failed line = %v, want the reason in message", l)
	}
}

// A worker may claim a task, and write its record, between the submit's
// publish and the submit's own record: the submit still counts the task
// as queued, once (it undercounted 2 in 20,000 under load).
func TestSubmitCountsQueuedWhenWorkerWritesFirst(t *testing.T) {
	cfg := testConfig(t)
	seen := recordTransitions(&cfg)
	q := open(t, cfg)
	q.afterPublish = func(id string) { // a worker's claim wins the race
		now := time.Now().UTC()
		rec := Record{TaskID: id, State: Running, Attempts: 1, Family: "automator", Type: "shell", Hook: "install", Started: &now}
		if _, err := q.write(context.Background(), Record{}, rec); err != nil {
			t.Errorf("writing the worker's record: %v", err)
		}
	}
	rec, isNew, err := q.Submit(context.Background(), task("race-1", "shell"))
	if err != nil || !isNew {
		t.Fatalf("Submit = %+v, %v, %v; want a new task", rec, isNew, err)
	}
	q.afterPublish = nil
	if _, isNew, err := q.Submit(context.Background(), task("race-1", "shell")); err != nil || isNew {
		t.Fatalf("second Submit: new %v, err %v; want a duplicate", isNew, err)
	}
	queued := 0
	for _, tr := range seen() {
		if tr.From == "" && tr.Record.State == Queued && tr.Record.TaskID == "race-1" {
			queued++
		}
	}
	if queued != 1 {
		t.Errorf("%d queued transitions for race-1, want 1: %+v", queued, seen())
	}
}

// An attempt whose claim was taken over ends here with a Lost transition
// (no state change, no outcome line), so the running gauge can count it
// down.
func TestLostClaimNotifies(t *testing.T) {
	var logs logBuffer
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	transitions := recordTransitions(&cfg)
	q := open(t, cfg)
	ctx := context.Background()
	now := time.Now().UTC()
	mine := Record{TaskID: "lost-1", State: Running, Attempts: 1, Owner: "me", Family: "automator", Type: "shell", Hook: "install", Started: &now}
	rev, err := q.write(ctx, Record{}, mine)
	if err != nil {
		t.Fatal(err)
	}
	mine.Revision = rev
	theirs := mine
	theirs.Attempts, theirs.Owner = 2, "other"
	if _, err := q.write(ctx, mine, theirs); err != nil { // another daemon takes it over
		t.Fatal(err)
	}
	done := mine
	done.State, done.Finished = Succeeded, &now
	if q.commit(ctx, q.log, mine, done) {
		t.Fatal("commit over a taken-over claim succeeded")
	}
	if seen := transitions(); len(seen) != 1 || !seen[0].Lost || seen[0].Record.State != Running || seen[0].Record.TaskID != "lost-1" {
		t.Errorf("transitions = %+v, want one Lost transition of the running attempt", seen)
	}
	if n := len(logs.lines("task finished")) + len(logs.lines("task failed")); n != 0 {
		t.Errorf("%d outcome lines for an attempt whose outcome was dropped", n)
	}
}

// A try of an outcome write that was stored although its answer was lost
// (a timeout during a broker failover) makes the next try conflict with
// the attempt's own outcome: commit sees it is there and succeeds, with
// no Lost transition, so the message is acked instead of redelivered.
func TestCommitAfterLostAnswer(t *testing.T) {
	cfg := testConfig(t)
	transitions := recordTransitions(&cfg)
	q := open(t, cfg)
	ctx := context.Background()
	now := time.Now().UTC()
	mine := Record{TaskID: "la-1", State: Running, Attempts: 1, Owner: q.Owner(), Family: "automator", Type: "shell", Hook: "install", Started: &now, Seq: 7}
	rev, err := q.write(ctx, Record{}, mine)
	if err != nil {
		t.Fatal(err)
	}
	mine.Revision = rev
	done := mine
	fin := now.Add(time.Millisecond)
	done.State, done.Finished = Succeeded, &fin
	if _, err := q.write(ctx, mine, done); err != nil { // the try whose answer was lost
		t.Fatal(err)
	}
	if !q.commit(ctx, q.log, mine, done) {
		t.Fatal("commit of an outcome already stored by its own earlier try reported a lost claim")
	}
	other := done
	other.Owner = "someone-else"
	if q.commit(ctx, q.log, mine, other) {
		t.Error("commit over another attempt's outcome succeeded")
	}
	if seen := transitions(); len(seen) != 2 || seen[0].Lost || seen[0].Record.State != Succeeded || !seen[1].Lost {
		t.Errorf("transitions = %+v, want succeeded (not lost), then the other outcome's lost claim", seen)
	}
}

// recordTransitions makes cfg collect the transitions the queue reports;
// the function returned lists them so far.
func recordTransitions(cfg *Config) func() []Transition {
	var mu sync.Mutex
	var seen []Transition
	cfg.OnTransition = func(tr Transition) {
		mu.Lock()
		seen = append(seen, tr)
		mu.Unlock()
	}
	return func() []Transition {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
