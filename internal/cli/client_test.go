package cli

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
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
