package console

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/api"
)

// The console's pages wait for what the daemon opens after its API
// listens (Config.Late): once it failed to open, a page answers 503
// with Retry-After and what failed; the login page does not wait.
func TestLatePartsFailed(t *testing.T) {
	late := api.NewLate("the cluster jobs' and task logs' streams and buckets")
	late.Set(api.LateParts{}, errors.New("creating stream LOOM_JOBLOG: insufficient resources"))
	h := newHarness(t, Config{Token: testToken, Late: late})
	cl := h.client()
	h.login(cl)
	for _, p := range []string{"/ui/clusters", "/ui/tasks"} {
		resp, body := h.do(cl, "GET", p, nil)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			!strings.Contains(body, "could not open the cluster jobs") || !strings.Contains(body, "insufficient resources") {
			t.Errorf("GET %s after a failed open: %d Retry-After %q\n%s", p, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
}

// Once open, the parts are what the pages use.
func TestLatePartsOpen(t *testing.T) {
	late := api.NewLate("the cluster jobs' and task logs' streams and buckets")
	late.Set(api.LateParts{}, nil)
	h := newHarness(t, Config{Token: testToken, Late: late})
	cl := h.client()
	h.login(cl)
	if resp, body := h.do(cl, "GET", "/ui/tasks", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/tasks once open: %d\n%s", resp.StatusCode, body)
	}
}
