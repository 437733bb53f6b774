package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loomrt/loom/internal/api"
)

// TestClientRetriesUnreadRefusals: a request the daemon refused unread
// (its in-flight budget was full) is sent again after Retry-After; any
// other 503 is not, since the daemon may have acted on it.
func TestClientRetriesUnreadRefusals(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/v1/tasks" && n <= 2:
			w.Header().Set("Retry-After", "1")
			w.Header().Set(api.NotReadHeader, "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error": "the API holds 64 MiB of request bodies"}`))
		case r.URL.Path == "/v1/tasks":
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"taskId": "t1", "state": "queued", "served": true}`))
		default:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error": "the queue did not answer"}`))
		}
	}))
	defer srv.Close()
	c := &apiClient{base: srv.URL, hc: srv.Client()}
	var out api.SubmitResponse
	if err := c.do(context.Background(), "POST", "/v1/tasks", []byte(`{}`), &out); err != nil || out.TaskID != "t1" || calls.Load() != 3 {
		t.Fatalf("submit: %v %+v after %d calls, want t1 on the third", err, out, calls.Load())
	}
	calls.Store(0)
	err := c.do(context.Background(), "POST", "/v1/other", []byte(`{}`), nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusServiceUnavailable || calls.Load() != 1 {
		t.Errorf("a 503 the daemon may have acted on: %v after %d calls, want it returned at once", err, calls.Load())
	}
}

// TestWaitTaskAfterSubmit: a task this command just queued may be unknown
// for a moment (accepted during a NATS leader election, recorded when a
// worker claims it): waitTask asks again after a 404 then; for an id the
// user gave, a 404 is the answer at once.
func TestWaitTaskAfterSubmit(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error": "task \"t1\" not found"}`))
			return
		}
		w.Write([]byte(`{"taskId": "t1", "state": "succeeded"}`))
	}))
	defer srv.Close()
	c := &apiClient{base: srv.URL, hc: srv.Client()}
	got, err := c.waitTask(context.Background(), "t1", 0, true)
	if err != nil || got.State != "succeeded" || calls.Load() != 3 {
		t.Fatalf("after a submit: %+v %v in %d calls, want succeeded on the third", got, err, calls.Load())
	}
	calls.Store(0)
	var ae *apiError
	if _, err := c.waitTask(context.Background(), "t1", 0, false); !errors.As(err, &ae) || ae.code != http.StatusNotFound || calls.Load() != 1 {
		t.Errorf("an id the user gave: %v after %d calls, want the 404 at once", err, calls.Load())
	}
}

// TestSubmitWait: submit --wait's one request. A finished task in the
// answer is the result (no GET); an answer without "created" (a loomd
// older than POST ?wait=) is followed by GET ?wait=; a task without id
// gets one from the client, named when the request gets no answer.
func TestSubmitWait(t *testing.T) {
	var posts, gets atomic.Int32
	var lastBody atomic.Value
	var old atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/tasks" && r.URL.Query().Get("wait") != "":
			posts.Add(1)
			b, _ := io.ReadAll(r.Body)
			lastBody.Store(string(b))
			if old.Load() {
				w.WriteHeader(http.StatusOK)
				w.Write([]byte(`{"taskId": "t1", "state": "succeeded", "duplicate": true, "served": true}`))
				return
			}
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"taskId": "t1", "state": "succeeded", "created": "2026-11-26T08:00:00Z", "result": {"status": 0}, "served": true}`))
		case r.Method == "GET" && r.URL.Path == "/v1/tasks/t1":
			gets.Add(1)
			w.Write([]byte(`{"taskId": "t1", "state": "succeeded", "created": "2026-11-26T08:00:00Z", "result": {"status": 0, "from": "get"}}`))
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := &apiClient{base: srv.URL, hc: srv.Client()}
	task := []byte(`{"taskName": "INSTALL", "config": {"service": {"action": {"type": "shell"}}}}`)
	got, err := c.submitWait(context.Background(), task, 0, func(string) {})
	if err != nil || got.State != "succeeded" || posts.Load() != 1 || gets.Load() != 0 {
		t.Fatalf("new loomd: %+v %v after %d POSTs and %d GETs, want the POST's answer alone", got, err, posts.Load(), gets.Load())
	}
	if b := lastBody.Load().(string); !strings.Contains(b, `"taskId"`) {
		t.Errorf("the task was sent without an id: %s", b)
	}
	old.Store(true)
	got, err = c.submitWait(context.Background(), []byte(`{"taskId": "t1", "taskName": "INSTALL", "config": {}}`), 0, func(string) {})
	if err != nil || !strings.Contains(string(got.Result), `"get"`) || gets.Load() != 1 {
		t.Errorf("old loomd: %+v %v after %d GETs, want the GET's result", got, err, gets.Load())
	}
	srv.Close()
	_, err = c.submitWait(context.Background(), []byte(`{"taskId": "t9", "taskName": "INSTALL", "config": {"service": {"action": {"type": "shell"}}}}`), 0, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "loomd task wait t9") {
		t.Errorf("no answer: %v, want the error to name the task", err)
	}
}
