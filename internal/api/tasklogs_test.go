package api

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/runtime"
)

// chatty is a runner that logs through the daemon's tee as a plugin
// would: "line 1..3 of <id>" and, for a task whose config says so, waits
// for gate before its last line.
type chatty struct {
	log    *slog.Logger
	logs   *tasklog.Log
	gate   chan struct{}
	status int
}

func (c *chatty) Run(_ context.Context, data []byte) ([]byte, int, error) {
	t, err := runtime.ParseTask(data)
	if err != nil {
		return nil, 0, err
	}
	end := c.logs.Start(tasklog.Task{ID: t.TaskID, Tenant: t.TenantID, Origin: tasklog.OriginQueue, Attempt: 1})
	l := c.log.With("task", t.TaskID, "plugin", "shell")
	l.Info("line 1 of " + t.TaskID)
	l.Warn("line 2 of "+t.TaskID, "disk", "sda")
	if strings.Contains(string(data), `"gated"`) {
		<-c.gate
	}
	l.Info("line 3 of " + t.TaskID)
	end(c.status, nil)
	return []byte(`{"status":0,"message":"ok"}`), 0, nil
}

type logFixture struct {
	*scoped
	q    *queue.Queue
	logs *tasklog.Log
	tee  *logstream.Tee
	run  *chatty
	srv  *httptest.Server
}

func newLogFixture(t *testing.T) *logFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), AckWait: time.Second, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	tee := logstream.NewTee()
	logs, err := tasklog.Open(ctx, q.JetStream(), tee, tasklog.Options{Source: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(logs.Close)
	run := &chatty{log: slog.New(tee.Handler(slog.NewTextHandler(io.Discard, nil))), logs: logs, gate: make(chan struct{})}
	if err := q.SetTypes(ctx, []queue.Route{{Family: "automator", Type: "shell"}}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Serve(sctx, run, 4); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	path := filepath.Join(t.TempDir(), "tokens.json")
	doc := `{"tokens": [
		{"name": "ops", "admin": true, "token": "` + opsTok + `"},
		{"name": "acme-ci", "tenant": "acme", "token": "` + acmeTok + `"},
		{"name": "victim-ci", "tenant": "victim", "token": "` + victimTok + `"}
	]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := tokens.Load(path, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Queue: q, Plugins: fakePlugins{}, Tokens: set, DefaultTenant: "default", TaskLogs: logs})
	if err != nil {
		t.Fatal(err)
	}
	f := &logFixture{scoped: &scoped{fixture: &fixture{t: t, q: q}, h: s.Handler()}, q: q, logs: logs, tee: tee, run: run}
	f.srv = httptest.NewServer(f.h)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *logFixture) logsAs(t *testing.T, tok, id, query string) (int, TaskLogResponse, string) {
	t.Helper()
	code, b := f.as(tok, "GET", "/v1/tasks/"+id+"/logs"+query, "")
	var r TaskLogResponse
	if code == http.StatusOK {
		r = decode[TaskLogResponse](t, b)
	}
	return code, r, string(b)
}

func msgs(ls []tasklog.Line) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Msg)
	}
	return strings.Join(out, "|")
}

// TestTaskLogsAPI: GET /v1/tasks/{id}/logs returns a task's lines to the
// tokens that reach the task and 404 to the others, pages with a cursor,
// says done once the task finished and its lines are read, waits for the
// first new line with wait=, streams as server-sent events until the end,
// serves a Coopr server's task by the tenant its log names, and a deleted
// task's log goes with it.
func TestTaskLogsAPI(t *testing.T) {
	f := newLogFixture(t)
	id := f.submit(t, acmeTok, `{"taskId": "log-1", "taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	f.as(acmeTok, "GET", "/v1/tasks/"+id+"?wait=20s", "")
	code, r, body := f.logsAs(t, acmeTok, id, "")
	if code != http.StatusOK || !r.Done || r.State != queue.Succeeded ||
		msgs(r.Lines) != "line 1 of log-1|line 2 of log-1|line 3 of log-1|the attempt ended: status 0" {
		t.Fatalf("logs as acme: %d %s", code, body)
	}
	if l := r.Lines[1]; l.Level != "WARN" || l.Attr("disk") != "sda" || l.Attempt != 1 || l.Source != "d1" || l.Seq == 0 {
		t.Errorf("line 2: %+v", l)
	}
	for _, tok := range []string{victimTok} {
		if code, _, body := f.logsAs(t, tok, id, ""); code != http.StatusNotFound || strings.Contains(body, "acme") {
			t.Errorf("another tenant's token: %d %s, want 404", code, body)
		}
	}
	if code, _, _ := f.logsAs(t, opsTok, id, ""); code != http.StatusOK {
		t.Errorf("admin: %d", code)
	}
	if code, _, body := f.logsAs(t, acmeTok, "nobody", ""); code != http.StatusNotFound {
		t.Errorf("unknown task: %d %s", code, body)
	}
	if code, _, body := f.logsAs(t, acmeTok, id, "?after=x"); code != http.StatusBadRequest || !strings.Contains(body, "after=") {
		t.Errorf("bad cursor: %d %s", code, body)
	}
	if code, _, body := f.logsAs(t, acmeTok, id, "?follow=1"); code != http.StatusBadRequest || !strings.Contains(body, "takes after, limit and wait") {
		t.Errorf("unknown parameter: %d %s", code, body)
	}
	// Paging: limit=1 pages whole batches; the last page says done.
	var got []string
	next := uint64(0)
	for i := 0; ; i++ {
		_, p, body := f.logsAs(t, acmeTok, id, "?limit=1&after="+itoa(next))
		got = append(got, msgs(p.Lines))
		next = p.Next
		if p.Done {
			break
		}
		if i > 10 || len(p.Lines) == 0 {
			t.Fatalf("paging: %s", body)
		}
	}
	if strings.Join(got, "|") != msgs(r.Lines) {
		t.Errorf("paged %q", got)
	}

	// Long poll: a task held after its second line; the poll after it
	// returns with the third once it is let go.
	f.submit(t, acmeTok, `{"taskId": "log-2", "taskName":"INSTALL","config":{"gated": true, "service":{"action":{"type":"shell"}}}}`)
	var first TaskLogResponse
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, first, _ = f.logsAs(t, acmeTok, "log-2", "")
		if len(first.Lines) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if first.Done || first.State != queue.Running || msgs(first.Lines) != "line 1 of log-2|line 2 of log-2" {
		t.Fatalf("a running task's log: %+v", first)
	}
	polled := make(chan TaskLogResponse, 1)
	go func() {
		_, p, _ := f.logsAs(t, acmeTok, "log-2", "?wait=30s&after="+itoa(first.Next))
		polled <- p
	}()
	time.Sleep(100 * time.Millisecond)
	close(f.run.gate)
	p := <-polled
	if !strings.HasPrefix(msgs(p.Lines), "line 3 of log-2") {
		t.Fatalf("the long poll returned %+v", p)
	}

	// Server-sent events: every line, then "end".
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1/tasks/log-1/logs", nil)
	req.Header.Set("Authorization", "Bearer "+acmeTok)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
		if len(events) > 0 && events[len(events)-1] == "end" {
			break
		}
	}
	resp.Body.Close()
	if strings.Join(events, ",") != "line,line,line,line,end" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("events %v (%s)", events, resp.Header.Get("Content-Type"))
	}

	// A Coopr server's task: no record, its log names its tenant.
	end := f.logs.Start(tasklog.Task{ID: "00000139-001-001", Tenant: "acme", Origin: tasklog.OriginCoopr})
	f.run.log.Info("coopr line", "task", "00000139-001-001")
	end(0, nil)
	if code, p, body := f.logsAs(t, acmeTok, "00000139-001-001", ""); code != http.StatusOK || !p.Done || p.State != "" || msgs(p.Lines) != "coopr line|the attempt ended: status 0" {
		t.Errorf("a Coopr task's log as its tenant: %d %s", code, body)
	}
	if code, _, body := f.logsAs(t, victimTok, "00000139-001-001", ""); code != http.StatusNotFound {
		t.Errorf("a Coopr task's log as another tenant: %d %s", code, body)
	}

	// Deleting the task deletes its log: the id starts afresh.
	if code, b := f.as(acmeTok, "DELETE", "/v1/tasks/log-1", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, _, body := f.logsAs(t, acmeTok, "log-1", ""); code != http.StatusNotFound {
		t.Errorf("a deleted task's log: %d %s", code, body)
	}
	if n, _ := f.logs.Read(context.Background(), "log-1", 0, 100, tasklog.Filter{}); len(n.Lines) != 0 {
		t.Errorf("the deleted task's log still holds %d lines", len(n.Lines))
	}
}

// TestTaskLogsOff: a daemon without task logs says so.
func TestTaskLogsOff(t *testing.T) {
	f := newFixture(t, Config{})
	code, b := f.do("GET", "/v1/tasks/x/logs", "")
	var e Error
	_ = json.Unmarshal(b, &e)
	if code != http.StatusServiceUnavailable || !strings.Contains(e.Error, "--task-log-max 0") {
		t.Errorf("%d %s", code, b)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
