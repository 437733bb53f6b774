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
