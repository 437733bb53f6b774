package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// sameTask compares two answers for tasks of different ids: equal once
// the ids and times are taken out.
func sameTask(t *testing.T, one, two Task) {
	t.Helper()
	norm := func(x Task) Task {
		x.Result = bytes.ReplaceAll(x.Result, []byte(x.TaskID), []byte("ID"))
		x.TaskID, x.Created, x.Started, x.Finished = "ID", time.Time{}, nil, nil
		return x
	}
	a, _ := json.Marshal(norm(one))
	b, _ := json.Marshal(norm(two))
	if !bytes.Equal(a, b) {
		t.Errorf("one request:  %s\ntwo requests: %s\nwant the same task", a, b)
	}
}

// TestSubmitWaitEqualsTwoRequests: POST /v1/tasks?wait= answers the task
// as POST then GET ?wait= do, for a task that succeeds and one that
// fails, with the submit's status code, Location and served.
func TestSubmitWaitEqualsTwoRequests(t *testing.T) {
	f := newFixture(t, Config{})
	for _, prefix := range []string{"ok-", "fail-"} {
		task := func(id string) string {
			return `{"taskId":"` + id + `","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`
		}
		code, body := f.do("POST", "/v1/tasks?wait=20s", task(prefix+"one"))
		one := decode[SubmitWaitResponse](t, body)
		if code != http.StatusAccepted || !one.State.Terminal() || !one.Served || one.Duplicate || one.Warning != "" {
			t.Fatalf("POST ?wait %s = %d %s, want 202, finished, served", prefix, code, body)
		}
		if c, b := f.do("POST", "/v1/tasks", task(prefix+"two")); c != http.StatusAccepted {
			t.Fatalf("POST %s = %d %s", prefix, c, b)
		}
		code, body = f.do("GET", "/v1/tasks/"+prefix+"two?wait=20s", "")
		if code != http.StatusOK {
			t.Fatalf("GET ?wait = %d %s", code, body)
		}
		two := decode[Task](t, body)
		want := queue.Succeeded
		if prefix == "fail-" {
			want = queue.Failed
		}
		if one.State != want || one.Status == nil || len(one.Result) == 0 || one.Started == nil || one.Finished == nil {
			t.Errorf("POST ?wait %s = %+v, want %s with status and result", prefix, one.Task, want)
		}
		sameTask(t, one.Task, two)
		// The same as GET answers it afterwards, field for field.
		_, body = f.do("GET", "/v1/tasks/"+prefix+"one", "")
		if later := decode[Task](t, body); !later.Created.Equal(one.Created) || !later.Finished.Equal(*one.Finished) || string(later.Result) != string(one.Result) {
			t.Errorf("GET after POST ?wait = %s, want the task POST ?wait answered", body)
		}
	}
}

// TestSubmitWaitRunsOut: a wait that runs out answers the task's current
// state (queued), with the submit's warning that nobody serves its type;
// the same as GET ?wait= answers then.
func TestSubmitWaitRunsOut(t *testing.T) {
	f := newFixture(t, Config{})
	code, body := f.do("POST", "/v1/tasks?wait=100ms", `{"taskId":"nobody-1","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`)
	got := decode[SubmitWaitResponse](t, body)
	if code != http.StatusAccepted || got.State != queue.Queued || got.Served || !strings.Contains(got.Warning, "no loomd serves plugin type automator/nobody") {
		t.Fatalf("POST ?wait=100ms = %d %s, want 202 queued with the unserved warning", code, body)
	}
	code, body = f.do("GET", "/v1/tasks/nobody-1?wait=100ms", "")
	if code != http.StatusOK {
		t.Fatalf("GET ?wait = %d %s", code, body)
	}
	two := decode[Task](t, body)
	if a, b := fmt.Sprint(got.Task.Created.UnixNano(), got.Task.State, got.Task.Attempts), fmt.Sprint(two.Created.UnixNano(), two.State, two.Attempts); a != b {
		t.Errorf("POST ?wait answered %s, GET ?wait %s", a, b)
	}
	sameTask(t, got.Task, two)
	// A duplicate of a waiting task waits as well, and says it.
	code, body = f.do("POST", "/v1/tasks?wait=0s", `{"taskId":"nobody-1","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`)
	if d := decode[SubmitWaitResponse](t, body); code != http.StatusOK || !d.Duplicate || d.State != queue.Queued || d.Served {
		t.Errorf("POST ?wait=0s of a known queued task = %d %s, want 200 duplicate queued unserved", code, body)
	}
}

// TestSubmitWaitBadWait: a wait that is not a duration is 400 as on GET,
// and nothing is queued.
func TestSubmitWaitBadWait(t *testing.T) {
	f := newFixture(t, Config{})
	for _, path := range []string{"/v1/tasks?wait=soon", "/v1/tasks?wait=-1s", "/v1/calls?wait=soon"} {
		code, body := f.do("POST", path, `{"taskId":"bw-1","callId":"bw-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
		if code != http.StatusBadRequest || !strings.Contains(decode[Error](t, body).Error, "is not a duration: use e.g. wait=30s") {
			t.Errorf("POST %s = %d %s, want 400 naming the wait", path, code, body)
		}
	}
	_, getBody := f.do("GET", "/v1/tasks/bw-1?wait=soon", "")
	_, postBody := f.do("POST", "/v1/tasks?wait=soon", `{"taskId":"bw-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	if string(getBody) != string(postBody) {
		t.Errorf("GET's 400 %s, POST's %s: want the same", getBody, postBody)
	}
	if code, body := f.do("GET", "/v1/tasks/bw-1", ""); code != http.StatusNotFound {
		t.Errorf("after the bad waits: GET = %d %s, want 404 (nothing queued)", code, body)
	}
	// A bad task is still 400 with its reason, not waited for.
	if code, body := f.do("POST", "/v1/tasks?wait=10s", `{"taskName":"INSTALL","config":{}}`); code != http.StatusBadRequest || !strings.Contains(string(body), "invalid task") {
		t.Errorf("a bad task with ?wait = %d %s, want 400", code, body)
	}
}

// TestSubmitWaitDedupe: the same id submitted with ?wait= twice runs once;
// the second answer is 200, duplicate, with the finished task.
func TestSubmitWaitDedupe(t *testing.T) {
	f := newFixture(t, Config{})
	task := `{"taskId":"dd-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`
	var wg sync.WaitGroup
	codes := make([]int, 3)
	answers := make([]SubmitWaitResponse, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, body := f.do("POST", "/v1/tasks?wait=20s", task)
			codes[i], answers[i] = code, decode[SubmitWaitResponse](t, body)
		}()
	}
	wg.Wait()
	news := 0
	for i, a := range answers {
		if codes[i] == http.StatusAccepted && !a.Duplicate {
			news++
		} else if codes[i] != http.StatusOK || !a.Duplicate {
			t.Errorf("answer %d: %d %+v, want 202 new or 200 duplicate", i, codes[i], a)
		}
		if a.State != queue.Succeeded || string(a.Result) != string(answers[0].Result) {
			t.Errorf("answer %d: %s %s, want the one succeeded result", i, a.State, a.Result)
		}
	}
	if news != 1 {
		t.Errorf("%d answers said the task was new, want 1", news)
	}
	code, body := f.do("POST", "/v1/tasks?wait=20s", task)
	if d := decode[SubmitWaitResponse](t, body); code != http.StatusOK || !d.Duplicate || d.State != queue.Succeeded {
		t.Errorf("after it finished: %d %s, want 200 duplicate succeeded", code, body)
	}
	if n := f.runs.count("dd-1"); n != 1 {
		t.Errorf("dd-1 ran %d times, want 1", n)
	}
}

// gatedWait holds every WaitSubmitted until gate closes.
type gatedWait struct {
	Queue
	entered chan string
	gate    chan struct{}
}

func (g gatedWait) WaitSubmitted(ctx context.Context, sub queue.Record) (queue.Record, error) {
	g.entered <- sub.TaskID
	<-g.gate
	return g.Queue.WaitSubmitted(ctx, sub)
}

// TestSubmitWaitLeavesTheBudget: a waiting POST holds none of the
// in-flight budget: four 900 KiB tasks wait at once over TCP under a 2 MiB
// budget (two bodies would fill it), and the budget is empty while they
// wait and after.
func TestSubmitWaitLeavesTheBudget(t *testing.T) {
	f := newFixture(t, Config{})
	g := gatedWait{Queue: f.q, entered: make(chan string, 4), gate: make(chan struct{})}
	s, err := New(Config{Addr: "127.0.0.1:0", Queue: g, Plugins: fakePlugins{}, MaxBody: 1 << 20, MaxInflight: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	used := func() int64 {
		s.inflight.mu.Lock()
		defer s.inflight.mu.Unlock()
		return s.inflight.used
	}
	type answer struct {
		code int
		body []byte
	}
	answers := make(chan answer, 4)
	for i := range 4 {
		// One at a time: a body counts while it is read and queued.
		go func() {
			task := fmt.Sprintf(`{"taskId":"big-%d","taskName":"INSTALL","config":{"pad":"%s","service":{"action":{"type":"shell"}}}}`, i, strings.Repeat("p", 900<<10))
			resp, err := http.Post("http://"+s.Addr()+"/v1/tasks?wait=20s", "application/json", strings.NewReader(task))
			if err != nil {
				answers <- answer{0, []byte(err.Error())}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, b}
		}()
		select {
		case <-g.entered:
		case a := <-answers:
			t.Fatalf("POST %d answered before it waited: %d %.300s (the budget should be free for it)", i, a.code, a.body)
		}
	}
	if u := used(); u != 0 {
		t.Errorf("four POSTs waiting hold %d bytes of the in-flight budget, want 0", u)
	}
	close(g.gate)
	for range 4 {
		a := <-answers
		if a.code != http.StatusAccepted || decode[SubmitWaitResponse](t, a.body).State != queue.Succeeded {
			t.Errorf("a waiting POST: %d %.300s, want 202 succeeded", a.code, a.body)
		}
	}
	if u := used(); u != 0 {
		t.Errorf("%d bytes of the budget held after every request ended", u)
	}
}

// bigWait answers every WaitSubmitted with a finished record whose result
// is 900 KiB.
type bigWait struct{ bigResults }

func (b bigWait) WaitSubmitted(ctx context.Context, sub queue.Record) (queue.Record, error) {
	return b.Get(ctx, sub.TaskID)
}

// TestSubmitWaitAnswerOverBudget: the answer to a POST ?wait= that the
// in-flight budget has no room for is not a 503 safe to send again (the
// task is queued) but 303 to the task's GET, which HTTP clients follow.
func TestSubmitWaitAnswerOverBudget(t *testing.T) {
	f := newFixture(t, Config{})
	s, err := New(Config{Queue: bigWait{bigResults{Queue: f.q, pad: 900 << 10}}, Plugins: fakePlugins{}, MaxBody: 64 << 10, MaxInflight: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	entered, gate := make(chan struct{}, 2), make(chan struct{})
	done := make(chan struct{}, 2)
	for _, id := range []string{"slow-1", "slow-2"} {
		sw := stalledWriter{ResponseRecorder: httptest.NewRecorder(), entered: entered, gate: gate}
		go func() {
			s.Handler().ServeHTTP(sw, httptest.NewRequest("GET", "/v1/tasks/"+id, nil))
			done <- struct{}{}
		}()
	}
	<-entered
	<-entered // two slow readers hold 1.8 MiB of the 2 MiB
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/tasks?wait=5s", strings.NewReader(`{"taskId":"so-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/v1/tasks/so-1" || w.Header().Get(NotReadHeader) != "" || !strings.Contains(w.Body.String(), "GET /v1/tasks/so-1") {
		t.Errorf("POST ?wait whose answer does not fit: %d Location %q NotRead %q %.300s, want 303 to the task", w.Code, w.Header().Get("Location"), w.Header().Get(NotReadHeader), w.Body)
	}
	close(gate)
	<-done
	<-done
	if rec, err := f.q.Get(context.Background(), "so-1"); err != nil || rec.TaskID != "so-1" {
		t.Errorf("the task behind the 303: %v, want it queued", err)
	}
}

// TestSubmitWaitTenants: POST ?wait= follows the tenant rules of POST and
// GET: a tenant token's task is put in its tenant and waited for; another
// tenant's task under the same id is 409 with or without ?wait= (its
// state hidden, as GET hides it; the submitter told that nothing was
// queued), not waited for; a read-only token cannot submit.
func TestSubmitWaitTenants(t *testing.T) {
	s := newScoped(t)
	task := `{"taskId":"tw-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`
	code, body := s.as(acmeTok, "POST", "/v1/tasks?wait=20s", task)
	if got := decode[SubmitWaitResponse](t, body); code != http.StatusAccepted || got.State != queue.Succeeded || got.TenantID != "acme" {
		t.Fatalf("acme's POST ?wait = %d %s, want 202 succeeded in tenant acme", code, body)
	}
	for _, path := range []string{"/v1/tasks?wait=20s", "/v1/tasks"} {
		code, body = s.as(victimTok, "POST", path, task)
		if code != http.StatusConflict || strings.Contains(string(body), `"state"`) || !strings.Contains(string(body), "nothing was queued") {
			t.Errorf("victim's POST %s of acme's id = %d %s, want 409 without the task's state", path, code, body)
		}
	}
	if code, body := s.as(victimTok, "GET", "/v1/tasks/tw-1?wait=1s", ""); code != http.StatusNotFound {
		t.Errorf("victim's GET ?wait of acme's task = %d %s, want 404 as the POST", code, body)
	}
	if code, body := s.as(roTok, "POST", "/v1/tasks?wait=1s", `{"taskId":"tw-2","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`); code != http.StatusForbidden {
		t.Errorf("a read-only token's POST ?wait = %d %s, want 403", code, body)
	}
	code, body = s.as(opsTok, "POST", "/v1/tasks?wait=20s", task)
	if got := decode[SubmitWaitResponse](t, body); code != http.StatusOK || !got.Duplicate || got.State != queue.Succeeded || got.TenantID != "acme" {
		t.Errorf("admin's POST ?wait of acme's id = %d %s, want 200 duplicate succeeded", code, body)
	}
	if n := s.runs.count("tw-1"); n != 1 {
		t.Errorf("tw-1 ran %d times, want 1", n)
	}
}

// unrecorded accepts every task without writing its record, as a submit
// during a NATS leader election does (the record is written when a worker
// claims the task).
type unrecorded struct{ Queue }

func (u unrecorded) Submit(_ context.Context, task []byte) (queue.Record, bool, error) {
	var t struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(task, &t)
	return queue.Record{TaskID: t.TaskID, State: queue.Queued, Family: "automator", Type: "shell", Hook: "install", TaskName: "INSTALL"}, true, nil
}

// TestSubmitWaitBeforeTheRecord: the task a POST ?wait= just queued is
// never answered 404 while its record is not written yet: the wait runs
// out with the task as queued. GET ?wait= of it is 404 then (clients of
// the two-request form ask again).
func TestSubmitWaitBeforeTheRecord(t *testing.T) {
	f := newFixture(t, Config{})
	s, err := New(Config{Queue: unrecorded{f.q}, Plugins: fakePlugins{}})
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body string) (int, []byte) {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest(method, path, strings.NewReader(body)))
		return w.Code, w.Body.Bytes()
	}
	code, body := do("POST", "/v1/tasks?wait=200ms", `{"taskId":"late-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	if got := decode[SubmitWaitResponse](t, body); code != http.StatusAccepted || got.TaskID != "late-1" || got.State != queue.Queued {
		t.Errorf("POST ?wait before the record = %d %s, want 202 queued", code, body)
	}
	if code, body := do("GET", "/v1/tasks/late-1?wait=200ms", ""); code != http.StatusNotFound {
		t.Errorf("GET ?wait before the record = %d %s, want 404", code, body)
	}
}
