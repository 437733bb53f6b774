package console

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/queue"
)

// TestLocalRunPage: a cluster task its daemon ran on its own workers
// (loomd serve --cluster-tasks local) has no queue record; its page shows
// its run from the cluster's state (status, message, output), offers no
// action, and says where to look. A run no cluster has is not found.
func TestLocalRunPage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	st, err := state.OpenKV(ctx, q.JetStream(), q.Replicas(), nil)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now().UTC().Add(-time.Minute)
	cl := &state.Cluster{Name: "shop-1", Status: state.Incomplete, Nodes: map[string]*state.Node{"shop-1-n-1": {ID: "shop-1-n-1"}},
		Jobs: []*state.Job{{ID: "shop-1-002", Action: "apply", Status: state.JobFailed, Tasks: map[int]*state.Task{
			0: {Status: state.TaskDone, Name: "INSTALL", Node: "shop-1-n-1", Service: "db",
				Runs: []state.Run{{ID: "shop-1-002-0001-1", Name: "INSTALL", Status: state.TaskDone, Started: started, Duration: 1500}}},
			1: {Status: state.TaskFailed, Name: "START", Node: "shop-1-n-1", Service: "db",
				Runs: []state.Run{{ID: "shop-1-002-0002-1", Name: "START", Status: state.TaskFailed, Code: 2, Message: "db did not start: port taken",
					Stderr: "bind: address already in use", Started: started, Duration: 300}}}}}}}
	if err := st.Put(cl); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{Token: testToken, Clusters: st})
	c := h.client()
	h.login(c)
	resp, page := h.do(c, "GET", "/ui/tasks/shop-1-002-0002-1", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the page of a local run: %d\n%.2000s", resp.StatusCode, page)
	}
	for _, want := range []string{"db did not start: port taken", "bind: address already in use", `href="/ui/clusters/shop-1"`,
		"--cluster-tasks local", "loomd cluster get shop-1", "START"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page of a failed local run lacks %q:\n%.4000s", want, page)
		}
	}
	if strings.Contains(page, "/ui/tasks/shop-1-002-0002-1/retry") || strings.Contains(page, "/ui/tasks/shop-1-002-0002-1/delete") {
		t.Error("a local run's page offers an action on a queued task it is not")
	}
	if resp, page := h.do(c, "GET", "/ui/tasks/shop-1-002-0001-1", nil); resp.StatusCode != http.StatusOK || !strings.Contains(page, "succeeded") {
		t.Errorf("the page of a finished local run: %d\n%.2000s", resp.StatusCode, page)
	}
	for _, id := range []string{"shop-1-002-0001-2", "shop-1-003-0001-1", "shop-2-002-0001-1", "nothing"} {
		if resp, _ := h.do(c, "GET", "/ui/tasks/"+id, nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", id, resp.StatusCode)
		}
	}
	if resp, _ := h.do(c, "GET", "/ui/tasks/shop-1-002-0002-1/retry", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the retry page of a local run: %d, want 404", resp.StatusCode)
	}
}
