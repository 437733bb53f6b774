package api

import (
	"encoding/json"
	"net/http"
	"reflect"
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

// GET /v1/clusters/{name}/state?job=ID&brief=true: that job alone, the
// records of its tasks that finished well cut to their status, a failed
// task's whole (what loomd apply's summary shows); the whole state
// otherwise.
func TestClusterStateJobBrief(t *testing.T) {
	f := newFixture(t, Config{})
	now := time.Now().UTC()
	run := func(id, status string) []state.Run {
		return []state.Run{{ID: id, Name: "INSTALL", Status: status, Started: now, Message: "ran " + id}}
	}
	cl := &state.Cluster{Name: "shop", Status: state.Active, Spec: "name: shop", SpecFile: "shop.yaml",
		Nodes: map[string]*state.Node{"shop-db-1": {ID: "shop-db-1", Hostname: "db1.example", State: state.NodeActive}},
		Jobs: []*state.Job{
			{ID: "shop-001", Action: "create", Status: state.JobComplete, Started: now, TaskCount: 1, Tasks: map[int]*state.Task{
				0: {Status: state.TaskDone, Name: "CREATE", Node: "shop-db-1", Runs: run("shop-001-0000-1", state.TaskDone)}}},
			{ID: "shop-002", Action: "apply", Status: state.JobFailed, Started: now, TaskCount: 3, Tasks: map[int]*state.Task{
				0: {Status: state.TaskDone, Name: "INSTALL", Node: "shop-db-1", Service: "db", Runs: run("shop-002-0000-1", state.TaskDone)},
				1: {Status: state.TaskSkipped, Name: "START", Node: "shop-db-1", Service: "db"},
				2: {Status: state.TaskFailed, Name: "INSTALL", Node: "shop-db-1", Service: "web", Runs: run("shop-002-0002-1", state.TaskFailed)}}},
		}}
	data, _ := json.Marshal(cl)
	if code, body := f.do("PUT", "/v1/clusters/shop/state", string(data)); code != http.StatusOK {
		t.Fatalf("PUT state: %d %s", code, body)
	}
	code, body := f.do("GET", "/v1/clusters/shop/state?job=shop-002&brief=true", "")
	got, err := state.Unmarshal("shop", body)
	if code != http.StatusOK || err != nil {
		t.Fatalf("GET state?job&brief: %d %v %s", code, err, body)
	}
	if len(got.Jobs) != 1 || got.Jobs[0].ID != "shop-002" || got.Nodes["shop-db-1"] == nil || got.Nodes["shop-db-1"].Hostname != "db1.example" || got.Status != state.Active {
		t.Fatalf("GET state?job&brief: %s", body)
	}
	j := got.Jobs[0]
	if !reflect.DeepEqual(j.Tasks[0], &state.Task{Status: state.TaskDone}) || !reflect.DeepEqual(j.Tasks[1], &state.Task{Status: state.TaskSkipped}) {
		t.Errorf("finished tasks not cut to their status: %+v, %+v", j.Tasks[0], j.Tasks[1])
	}
	if ft := j.Tasks[2]; ft.Name != "INSTALL" || ft.Service != "web" || len(ft.Runs) != 1 || ft.Runs[0].Message != "ran shop-002-0002-1" {
		t.Errorf("the failed task's record: %+v", ft)
	}
	if j.DoneTasks() != 1 || j.TaskCount != 3 || j.Status != state.JobFailed {
		t.Errorf("the job: %d done of %d, %s", j.DoneTasks(), j.TaskCount, j.Status)
	}
	// No such job: the cluster without jobs. Brief alone: every job.
	if code, body := f.do("GET", "/v1/clusters/shop/state?job=shop-009", ""); code != http.StatusOK || strings.Contains(string(body), "shop-00") || !strings.Contains(string(body), "db1.example") {
		t.Errorf("GET state?job=shop-009: %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters/shop/state?brief=1", ""); code != http.StatusOK || strings.Contains(string(body), "shop-001-0000-1") || !strings.Contains(string(body), "shop-002-0002-1") {
		t.Errorf("GET state?brief=1: %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters/shop/state", ""); code != http.StatusOK || !strings.Contains(string(body), "shop-001-0000-1") || !strings.Contains(string(body), "shop-002-0000-1") {
		t.Errorf("GET state (whole): %d %s", code, body)
	}
	if code, body := f.do("GET", "/v1/clusters/shop/state?brief=maybe", ""); code != http.StatusBadRequest || !strings.Contains(string(body), "want true or false") {
		t.Errorf("GET state?brief=maybe: %d %s", code, body)
	}
}
