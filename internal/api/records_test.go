package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/queue"
)

func nobodyTask(id string) string {
	return `{"taskId":"` + id + `","clusterId":"k1","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`
}

func TestListPagesWithCursor(t *testing.T) {
	f := newFixture(t, Config{})
	for i := range 5 {
		f.do("POST", "/v1/tasks", nobodyTask(fmt.Sprintf("pg-%d", i)))
	}
	var got []string
	path := "/v1/tasks?state=queued&type=nobody&cluster=k1&limit=2"
	for range 10 {
		code, body := f.do("GET", path, "")
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, code, body)
		}
		l := decode[ListResponse](t, body)
		for _, task := range l.Tasks {
			got = append(got, task.TaskID)
			if task.ClusterID != "k1" {
				t.Errorf("task %s clusterId = %q, want k1", task.TaskID, task.ClusterID)
			}
		}
		if l.Next == "" {
			break
		}
		path = "/v1/tasks?state=queued&type=nobody&cluster=k1&limit=2&after=" + l.Next
	}
	if strings.Join(got, " ") != "pg-4 pg-3 pg-2 pg-1 pg-0" {
		t.Errorf("pages = %v, want pg-4 .. pg-0", got)
	}
	if _, body := f.do("GET", "/v1/tasks?cluster=other", ""); len(decode[ListResponse](t, body).Tasks) != 0 {
		t.Errorf("cluster=other = %s, want no tasks", body)
	}
}

func TestListRejectsUnknownParameters(t *testing.T) {
	f := newFixture(t, Config{})
	for path, want := range map[string]string{
		"/v1/tasks?offset=10&cursor=x": `unknown query parameter "cursor", "offset"`,
		"/v1/tasks?limit=0":            "limit=",
		"/v1/tasks?limit=1001":         "from 1 to 1000",
		"/v1/tasks?after=nope":         "after=bad cursor",
		"/v1/tasks?state=cancelled":    "",
	} {
		code, body := f.do("GET", path, "")
		if want == "" {
			if code != http.StatusOK {
				t.Errorf("GET %s = %d %s, want 200", path, code, body)
			}
			continue
		}
		if code != http.StatusBadRequest || !strings.Contains(decode[Error](t, body).Error, want) {
			t.Errorf("GET %s = %d %s, want 400 with %q", path, code, body, want)
		}
	}
}

func TestCancelAndDelete(t *testing.T) {
	f := newFixture(t, Config{})
	f.do("POST", "/v1/tasks", nobodyTask("cd-q"))
	f.do("POST", "/v1/tasks", `{"taskId":"cd-done","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	f.do("GET", "/v1/tasks/cd-done?wait=10s", "")

	code, body := f.do("DELETE", "/v1/tasks/cd-q", "")
	if code != http.StatusConflict || !strings.Contains(decode[Error](t, body).Error, "POST /v1/tasks/cd-q/cancel") {
		t.Errorf("DELETE queued = %d %s, want 409 pointing at cancel", code, body)
	}
	code, body = f.do("POST", "/v1/tasks/cd-q/cancel", "")
	c := decode[CancelResponse](t, body)
	if code != http.StatusOK || c.State != queue.Cancelled || c.CancelRequested || !strings.Contains(string(c.Result), `"kind":"cancelled"`) {
		t.Errorf("cancel queued = %d %s, want 200 cancelled with error kind cancelled", code, body)
	}
	code, body = f.do("POST", "/v1/tasks/cd-done/cancel", "")
	if code != http.StatusConflict || !strings.Contains(decode[Error](t, body).Error, "already finished (succeeded)") {
		t.Errorf("cancel finished = %d %s, want 409", code, body)
	}
	if code, _ := f.do("GET", "/v1/tasks/cd-done/cancel", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("GET .../cancel = %d, want 405", code)
	}
	for _, id := range []string{"cd-q", "cd-done"} {
		code, body = f.do("DELETE", "/v1/tasks/"+id, "")
		if d := decode[DeleteResponse](t, body); code != http.StatusOK || !d.Deleted {
			t.Errorf("DELETE %s = %d %s, want 200", id, code, body)
		}
		if code, _ := f.do("GET", "/v1/tasks/"+id, ""); code != http.StatusNotFound {
			t.Errorf("GET %s after delete = %d, want 404", id, code)
		}
	}
	if code, _ := f.do("DELETE", "/v1/tasks/cd-done", ""); code != http.StatusNotFound {
		t.Errorf("second DELETE = %d, want 404", code)
	}
	if code, _ := f.do("POST", "/v1/tasks/unknown/cancel", ""); code != http.StatusNotFound {
		t.Errorf("cancel unknown = %d, want 404", code)
	}
	// The id is free again.
	code, body = f.do("POST", "/v1/tasks", `{"taskId":"cd-done","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	if code != http.StatusAccepted {
		t.Fatalf("submit after delete = %d %s, want 202", code, body)
	}
	if _, body := f.do("GET", "/v1/tasks/cd-done?wait=10s", ""); decode[Task](t, body).State != queue.Succeeded || f.runs.count("cd-done") != 2 {
		t.Errorf("resubmitted task = %s after %d runs", body, f.runs.count("cd-done"))
	}
}
