package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/state"
)

// TestClusterEndpoints: /v1/clusters over the queue's JetStream store: the
// state round-trips; changes land; the human views redact and report
// progress (tasks not started counted from taskCount); the lock answers
// 409 with its holder; unknown clusters are 404, bad names 400.
func TestClusterEndpoints(t *testing.T) {
	f := newFixture(t, Config{})
	if code, body := f.do("GET", "/v1/clusters", ""); code != http.StatusOK || !strings.Contains(string(body), `"clusters":[]`) {
		t.Fatalf("empty list: %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters/shop", ""); code != http.StatusNotFound || !strings.Contains(string(body), "GET /v1/clusters lists") {
		t.Fatalf("unknown cluster: %d %s", code, body)
	}
	if code, _ := f.do("GET", "/v1/clusters/Bad_Name/state", ""); code != http.StatusBadRequest {
		t.Fatalf("bad name: %d", code)
	}
	now := time.Now().UTC()
	cl := &state.Cluster{Name: "shop", Status: state.Pending, Spec: "provider: {fields: {api_token: s3cret}}", SpecFile: "shop.yaml",
		Nodes: map[string]*state.Node{"shop-db-1": {ID: "shop-db-1", Num: 1000, State: state.NodeCreated,
			Results: map[string]any{"providerid": "vm-1", "api_token": "s3cret"}}},
		Jobs: []*state.Job{{ID: "shop-001", Action: "create", Status: state.JobRunning, Started: now, TaskCount: 5, Tasks: map[int]*state.Task{
			0: {Status: state.TaskDone, Name: "CREATE", Node: "shop-db-1", Stage: 1, Runs: []state.Run{{ID: "shop-001-0001-1", Name: "CREATE", Status: state.TaskDone}}},
		}}}}
	data, _ := json.Marshal(cl)
	if code, body := f.do("PUT", "/v1/clusters/shop/state", string(data)); code != http.StatusOK {
		t.Fatalf("PUT state: %d %s", code, body)
	}
	if code, body := f.do("PUT", "/v1/clusters/blog/state", string(data)); code != http.StatusBadRequest {
		t.Fatalf("PUT of shop's state as blog: %d %s", code, body)
	}
	// A spec over the cap (--spec-max-size) is refused before it is stored.
	big := *cl
	big.Spec = strings.Repeat("#", 9<<20)
	bigData, _ := json.Marshal(&big)
	if code, body := f.do("PUT", "/v1/clusters/shop/state", string(bigData)); code != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "--spec-max-size") {
		t.Fatalf("PUT of a 9 MiB spec: %d %s", code, body)
	}
	one := 1
	ch, _ := json.Marshal(ClusterChanges{Changes: []state.Change{{Job: "shop-001", Task: &one, Rec: &state.Task{Status: state.TaskRunning,
		Name: "CONFIRM", Node: "shop-db-1", Stage: 2, Runs: []state.Run{{ID: "shop-001-0002-1", Name: "CONFIRM", Status: state.TaskRunning, Started: now}}}}}})
	if code, body := f.do("POST", "/v1/clusters/shop/changes", string(ch)); code != http.StatusOK {
		t.Fatalf("POST changes: %d %s", code, body)
	}
	code, body := f.do("GET", "/v1/clusters/shop", "")
	rep := decode[ClusterReport](t, body)
	p := rep.LastJob.Progress
	if code != http.StatusOK || p.Total != 5 || p.Done != 1 || p.Running != 1 || p.Pending != 3 || p.Stage != 2 ||
		len(rep.LastJob.Running) != 1 || rep.LastJob.Running[0].TaskID != "shop-001-0002-1" || rep.LastJob.Running[0].Name != "CONFIRM" ||
		strings.Contains(string(body), "s3cret") || !strings.Contains(string(body), "vm-1") {
		t.Fatalf("GET cluster: %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters/shop/state", ""); code != http.StatusOK || !strings.Contains(string(body), "s3cret") {
		t.Fatalf("GET state (whole, for apply): %d %s", code, body)
	}
	// The state says running, but nobody runs it (no daemon's job record,
	// no apply holding the lock): the true state is interrupted.
	if code, body := f.do("GET", "/v1/clusters/shop/history", ""); code != http.StatusOK || !strings.Contains(string(body), `"id":"shop-001","action":"create","status":"interrupted"`) ||
		!strings.Contains(string(body), "nobody runs job shop-001") {
		t.Fatalf("history: %d %s", code, body)
	}
	// The lock.
	if code, body := f.do("POST", "/v1/clusters/shop/lock", `{"owner":"a","host":"h1","pid":10}`); code != http.StatusOK {
		t.Fatalf("lock: %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters", ""); code != http.StatusOK || !strings.Contains(string(body), `"status":"running"`) || !strings.Contains(string(body), `"runner":"a (h1 pid 10)"`) {
		t.Fatalf("list while an apply holds the lock: %d %s", code, body)
	}
	code, body = f.do("POST", "/v1/clusters/shop/lock", `{"owner":"b","host":"h2","pid":20}`)
	lc := decode[LockConflict](t, body)
	if code != http.StatusConflict || lc.Holder.Owner != "a" || lc.Holder.PID != 10 || !strings.Contains(lc.Error, "being applied by another loomd process (h1 pid 10") {
		t.Fatalf("second lock: %d %s", code, body)
	}
	if code, _ := f.do("DELETE", "/v1/clusters/shop/lock", ""); code != http.StatusBadRequest {
		t.Fatalf("unlock without owner: %d", code)
	}
	if code, _ := f.do("DELETE", "/v1/clusters/shop/lock?owner=a", ""); code != http.StatusOK {
		t.Fatalf("unlock: %d", code)
	}
	if code, body := f.do("POST", "/v1/clusters/shop/lock", `{"owner":"b"}`); code != http.StatusOK {
		t.Fatalf("lock after unlock: %d %s", code, body)
	}
	if code, _ := f.do("DELETE", "/v1/clusters/shop/state", ""); code != http.StatusOK {
		t.Fatalf("DELETE state: %d", code)
	}
	if code, _ := f.do("GET", "/v1/clusters/shop", ""); code != http.StatusNotFound {
		t.Fatalf("after DELETE: %d", code)
	}
}
