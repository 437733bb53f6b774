package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// A client that trickles its body is cut off after ReadTimeout, while a
// long poll longer than ReadTimeout still answers: the deadline only
// covers reading the request.
func TestSlowBodyIsCutOffLongPollIsNot(t *testing.T) {
	f := newFixture(t, Config{})
	s, err := New(Config{Addr: "127.0.0.1:0", Queue: f.q, Plugins: fakePlugins{}, ReadTimeout: 300 * time.Millisecond, MaxConns: 8})
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

	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
	// A hang guard, not a timing assertion: the server must close the
	// connection long before this.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("slow body answered %d, want the connection cut or an error status", resp.StatusCode)
		}
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server kept a slow-body connection open")
	}

	base := "http://" + s.Addr()
	r, err := http.Post(base+"/v1/tasks", "application/json",
		strings.NewReader(`{"taskId":"lp-1","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	r, err = http.Get(base + "/v1/tasks/lp-1?wait=1s")
	if err != nil {
		t.Fatalf("long poll past the read timeout: %v", err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusOK || decode[Task](t, b).State != queue.Queued {
		t.Fatalf("long poll = %d %s, want 200 queued", r.StatusCode, b)
	}
}

// gatedQueue holds every Submit until its gate opens, so requests keep
// their bodies in flight.
type gatedQueue struct {
	Queue
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedQueue) Submit(ctx context.Context, task []byte) (queue.Record, bool, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.Queue.Submit(ctx, task)
}

// TestInflightBudget: request bodies held at once never pass
// MaxInflight. A body that does not fit is not kept: 503 with
// Retry-After, and it goes through once the others are done; a chunked
// body reserves MaxBody until read; one larger than the whole budget is
// 413.
func TestInflightBudget(t *testing.T) {
	f := newFixture(t, Config{})
	g := gatedQueue{Queue: f.q, entered: make(chan struct{}, 8), gate: make(chan struct{})}
	s, err := New(Config{Queue: g, Plugins: fakePlugins{}, MaxBody: 1 << 20, MaxInflight: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	task := func(id string) string {
		return `{"taskId":"` + id + `","taskName":"INSTALL","config":{"pad":"` + strings.Repeat("p", 900<<10) + `","service":{"action":{"type":"shell"}}}}`
	}
	postTo := func(path, body string, chunked bool) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		if chunked {
			req.ContentLength = -1
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	post := func(body string, chunked bool) *httptest.ResponseRecorder { return postTo("/v1/tasks", body, chunked) }
	held := make(chan *httptest.ResponseRecorder, 2)
	for _, id := range []string{"held-1", "held-2"} {
		go func() { held <- post(task(id), false) }()
	}
	<-g.entered
	<-g.entered // both bodies are read and held: 1.8 MiB of 2 MiB
	for _, chunked := range []bool{false, true} {
		w := post(task("third"), chunked)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "--api-max-inflight-bytes") {
			t.Errorf("a third body (chunked %v) while two are held: %d Retry-After %q %s, want 503 with Retry-After 1", chunked, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	// Small requests still fit beside them.
	if w := postTo("/v1/calls", `{"type": ""}`, false); w.Code != http.StatusBadRequest {
		t.Errorf("a small body beside the held ones: %d %s, want it read (400)", w.Code, w.Body)
	}
	close(g.gate)
	for range 2 {
		if w := <-held; w.Code != http.StatusAccepted {
			t.Errorf("a held request: %d %s", w.Code, w.Body)
		}
	}
	for i, chunked := range []bool{false, true} {
		if w := post(task(fmt.Sprint("after-", i)), chunked); w.Code != http.StatusAccepted {
			t.Errorf("after the others finished (chunked %v): %d %s, want 202", chunked, w.Code, w.Body)
		}
	}
	if _, err := New(Config{Queue: g, MaxBody: 4 << 20, MaxInflight: 1 << 20}); err == nil || !strings.Contains(err.Error(), "--api-max-inflight-bytes") {
		t.Errorf("a budget smaller than one body: %v", err)
	}
}

// bigResults answers every Get with a record whose result is pad bytes.
type bigResults struct {
	Queue
	pad int
}

func (b bigResults) Get(ctx context.Context, id string) (queue.Record, error) {
	res, _ := json.Marshal(map[string]string{"pad": strings.Repeat("r", b.pad)})
	st := 0
	return queue.Record{TaskID: id, State: queue.Succeeded, Type: "shell", Hook: "install", Status: &st, Result: res}, nil
}

// stalledWriter is a client that does not read: Write blocks until gate
// closes (a socket whose buffers are full).
type stalledWriter struct {
	*httptest.ResponseRecorder
	entered chan struct{}
	gate    chan struct{}
}

func (s stalledWriter) Write(p []byte) (int, error) {
	s.entered <- struct{}{}
	<-s.gate
	return s.ResponseRecorder.Write(p)
}

// TestInflightBudgetHoldsAnswers: a large answer to a read counts against
// the in-flight budget until the client has it, so slow readers of large
// results cannot hold more than the budget; the answer that does not fit
// is 503 with Retry-After and goes through once the others are read.
// Small answers and answers to changes are never refused.
func TestInflightBudgetHoldsAnswers(t *testing.T) {
	f := newFixture(t, Config{})
	s, err := New(Config{Queue: bigResults{Queue: f.q, pad: 900 << 10}, Plugins: fakePlugins{}, MaxBody: 64 << 10, MaxInflight: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	get := func(w http.ResponseWriter, path string) {
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	}
	// Two slow readers hold 1.8 MiB of the 2 MiB.
	entered, gate := make(chan struct{}, 2), make(chan struct{})
	var slow []stalledWriter
	done := make(chan struct{}, 2)
	for _, id := range []string{"slow-1", "slow-2"} {
		sw := stalledWriter{ResponseRecorder: httptest.NewRecorder(), entered: entered, gate: gate}
		slow = append(slow, sw)
		go func() { get(sw, "/v1/tasks/"+id); done <- struct{}{} }()
	}
	<-entered
	<-entered
	w := httptest.NewRecorder()
	get(w, "/v1/tasks/third")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || w.Header().Get(NotReadHeader) == "" || !strings.Contains(w.Body.String(), "--api-max-inflight-bytes") {
		t.Errorf("a third large answer while two are being read: %d Retry-After %q %.200s, want 503 naming the budget, safe to ask again (NotReadHeader)", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if e := decode[Error](t, w.Body.Bytes()); !strings.Contains(e.Error, "was not sent") {
		t.Errorf("503 body %q does not say the answer was not sent", e.Error)
	}
	// Small answers still go out beside them.
	w = httptest.NewRecorder()
	get(w, "/v1/plugins")
	if w.Code != http.StatusOK {
		t.Errorf("plugins beside two held answers: %d %s", w.Code, w.Body)
	}
	close(gate)
	<-done
	<-done
	for i, sw := range slow {
		if sw.Code != http.StatusOK || len(decode[Task](t, sw.Body.Bytes()).Result) < 900<<10 {
			t.Errorf("slow reader %d got %d (%d bytes), want 200 with the whole result", i+1, sw.Code, sw.Body.Len())
		}
	}
	w = httptest.NewRecorder()
	get(w, "/v1/tasks/after")
	if w.Code != http.StatusOK || len(decode[Task](t, w.Body.Bytes()).Result) < 900<<10 {
		t.Errorf("a large answer once the others were read: %d (%d bytes), want 200 with the result", w.Code, w.Body.Len())
	}
	if used := s.inflight.used; used != 0 {
		t.Errorf("%d bytes of the budget still held after every request ended", used)
	}
}

// TestInflightBudgetReservesLargeResults: a result kept in the object
// store takes twice its size from the in-flight budget before it is
// loaded, so concurrent reads of large results never load more than the
// budget holds: the read that does not fit is 503 before the result is in
// memory (the message names the task's result, not an answer already
// built), and goes through once the others are done.
func TestInflightBudgetReservesLargeResults(t *testing.T) {
	f := newFixture(t, Config{MaxBody: 64 << 10, MaxInflight: 12 << 20})
	const size = 5 << 20 // past the KV's largest value (4 MiB): an object
	if code, b := f.do("POST", "/v1/tasks", fmt.Sprintf(`{"taskId":"big","taskName":"INSTALL","config":{"pad":%d,"service":{"action":{"type":"shell"}}}}`, size)); code != http.StatusAccepted {
		t.Fatalf("submit: %d %s", code, b)
	}
	if code, b := f.do("GET", "/v1/tasks/big?wait=20s", ""); code != http.StatusOK || decode[Task](t, b).State != queue.Succeeded {
		t.Fatalf("wait: %d %.300s", code, b)
	}
	rec, err := f.q.Get(context.Background(), "big")
	if err != nil || rec.ResultRef == "" || rec.ResultSize < size {
		t.Fatalf("record %v (ref %q, size %d): want the result in the object store with its size", err, rec.ResultRef, rec.ResultSize)
	}
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	slow := stalledWriter{ResponseRecorder: httptest.NewRecorder(), entered: entered, gate: gate}
	done := make(chan struct{})
	go func() { f.h.ServeHTTP(slow, httptest.NewRequest("GET", "/v1/tasks/big", nil)); close(done) }()
	<-entered // it holds 10 MiB of the 12 MiB
	for _, path := range []string{"/v1/tasks/big", "/v1/tasks/big?wait=1s"} {
		code, b := f.do("GET", path, "")
		if code != http.StatusServiceUnavailable || !strings.Contains(string(b), "the result of task big was not sent") {
			t.Errorf("GET %s beside a slow reader: %d %.200s, want 503 before loading the result", path, code, b)
		}
	}
	close(gate)
	<-done
	if slow.Code != http.StatusOK || len(decode[Task](t, slow.Body.Bytes()).Result) < size {
		t.Errorf("the slow reader got %d (%d bytes)", slow.Code, slow.Body.Len())
	}
	if code, b := f.do("GET", "/v1/tasks/big", ""); code != http.StatusOK || len(decode[Task](t, b).Result) < size {
		t.Errorf("after the slow reader: %d (%d bytes)", code, len(b))
	}
}

// submitSpy records how many result bytes Submit handed the API.
type submitSpy struct {
	Queue
	loaded *atomic.Int64
}

func (s submitSpy) Submit(ctx context.Context, task []byte) (queue.Record, bool, error) {
	rec, isNew, err := s.Queue.Submit(ctx, task)
	s.loaded.Store(int64(len(rec.Result)))
	return rec, isNew, err
}

// TestDuplicateSubmitLeavesLargeResultUnloaded: submitting a known id
// again answers its state without reading its large result (kept as an
// object) into memory, outside the in-flight budget; with ?wait= the
// answer carries the result, loaded within the budget.
func TestDuplicateSubmitLeavesLargeResultUnloaded(t *testing.T) {
	f := newFixture(t, Config{MaxBody: 64 << 10, MaxInflight: 12 << 20})
	const size = 5 << 20
	body := fmt.Sprintf(`{"taskId":"big","taskName":"INSTALL","config":{"pad":%d,"service":{"action":{"type":"shell"}}}}`, size)
	if code, b := f.do("POST", "/v1/tasks?wait=20s", body); code != http.StatusAccepted || len(decode[SubmitWaitResponse](t, b).Result) < size {
		t.Fatalf("submit and wait: %d %.300s", code, b)
	}
	loaded := new(atomic.Int64)
	s, err := New(Config{Queue: submitSpy{f.q, loaded}, Plugins: fakePlugins{}, MaxBody: 64 << 10, MaxInflight: 12 << 20})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/tasks", strings.NewReader(body)))
	if got := decode[SubmitResponse](t, w.Body.Bytes()); w.Code != http.StatusOK || !got.Duplicate || got.State != queue.Succeeded || loaded.Load() != 0 {
		t.Errorf("POST of the known id: %d %s, %d result bytes loaded; want 200 duplicate succeeded, none loaded", w.Code, w.Body.Bytes(), loaded.Load())
	}
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("POST", "/v1/tasks?wait=5s", strings.NewReader(body)))
	if got := decode[SubmitWaitResponse](t, w.Body.Bytes()); w.Code != http.StatusOK || !got.Duplicate || len(got.Result) < size {
		t.Errorf("POST ?wait= of the known id: %d, %d result bytes; want 200 with the result", w.Code, len(got.Result))
	}
}
