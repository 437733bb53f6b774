package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

type fakePlugins struct{}

func (fakePlugins) Types() []runtime.TypeInfo {
	return []runtime.TypeInfo{{Name: "shell", Family: runtime.Automator, Version: "abc123", Hooks: []string{"install"}}}
}

func (fakePlugins) LoadErrors() []*runtime.LoadError {
	return []*runtime.LoadError{{Plugin: "broken", File: "broken/init.lua", Line: 3, Message: "syntax error"}}
}

func (fakePlugins) Stats() runtime.Stats {
	return runtime.Stats{Types: 1, LoadErrors: 1, VMsIdle: 2, VMsInUse: 1, Bindings: map[string]float64{"ssh_connections_open": 4}}
}

// runs counts executions per task id.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) Run(_ context.Context, data []byte) ([]byte, int, error) {
	t, err := runtime.ParseTask(data)
	if err != nil {
		return nil, 0, err
	}
	r.mu.Lock()
	r.n[t.TaskID]++
	r.mu.Unlock()
	if strings.HasPrefix(t.TaskID, "fail-") {
		return []byte(`{"status":1,"message":"install failed","result":{"id":"` + t.TaskID + `"}}`), 1, nil
	}
	var pad struct {
		Config struct {
			Pad int `json:"pad"`
		} `json:"config"`
	}
	if json.Unmarshal(data, &pad) == nil && pad.Config.Pad > 0 {
		n := pad.Config.Pad
		// A task asking for a result of n bytes (a large result is kept
		// in the object store).
		return []byte(`{"status":0,"message":"ok","result":{"id":"` + t.TaskID + `","pad":"` + strings.Repeat("p", int(n)) + `"}}`), 0, nil
	}
	return []byte(`{"status":0,"message":"ok","result":{"id":"` + t.TaskID + `"}}`), 0, nil
}

func (r *runs) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// fixture is an API over a real embedded queue with a worker.
type fixture struct {
	t    *testing.T
	h    http.Handler
	q    *queue.Queue
	runs *runs
	tok  string
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	m := NewMetrics()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{
		DataDir: t.TempDir(), AckWait: time.Second, MaxAttempts: 2, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler), OnTransition: m.Observe,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	r := &runs{n: map[string]int{}}
	if err := q.SetTypes(ctx, []queue.Route{{Family: "automator", Type: "shell"}}); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Serve(sctx, r, 4); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	cfg.Queue, cfg.Plugins, cfg.Metrics = q, fakePlugins{}, m
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, h: s.Handler(), q: q, runs: r, tok: cfg.Token}
}

func (f *fixture) do(method, path, body string) (int, []byte) {
	f.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if f.tok != "" {
		req.Header.Set("Authorization", "Bearer "+f.tok)
	}
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, req)
	if ct := w.Header().Get("Content-Type"); method != "HEAD" && !strings.HasPrefix(ct, "application/json") && !strings.HasPrefix(ct, "text/plain") {
		f.t.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return w.Code, w.Body.Bytes()
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

const installTask = `{"taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`

func TestSubmitAndLongPoll(t *testing.T) {
	f := newFixture(t, Config{})
	code, body := f.do("POST", "/v1/tasks", installTask)
	if code != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", code, body)
	}
	sub := decode[SubmitResponse](t, body)
	if sub.TaskID == "" || sub.State == "" {
		t.Fatalf("POST body = %s, want taskId and state", body)
	}
	code, body = f.do("GET", "/v1/tasks/"+sub.TaskID+"?wait=10s", "")
	if code != http.StatusOK {
		t.Fatalf("GET wait = %d %s", code, body)
	}
	task := decode[Task](t, body)
	if task.State != queue.Succeeded || task.Attempts != 1 || task.Type != "shell" || task.Hook != "install" ||
		task.Started == nil || task.Finished == nil || !strings.Contains(string(task.Result), sub.TaskID) {
		t.Fatalf("task = %s, want succeeded with the result", body)
	}
	code, body = f.do("GET", "/v1/tasks/"+sub.TaskID, "")
	if code != http.StatusOK || decode[Task](t, body).State != queue.Succeeded {
		t.Fatalf("GET = %d %s", code, body)
	}
}

func TestMalformedTaskIs400(t *testing.T) {
	f := newFixture(t, Config{})
	for _, body := range []string{`{`, `{"taskName":"NOPE","config":{}}`, `{"taskName":"INSTALL","config":{}}`, ``} {
		code, resp := f.do("POST", "/v1/tasks", body)
		e := decode[Error](t, resp)
		if code != http.StatusBadRequest || !strings.Contains(e.Error, "invalid task") {
			t.Errorf("POST %q = %d %s, want 400 with the reason", body, code, resp)
		}
	}
}

func TestSameIDTwiceRunsOnce(t *testing.T) {
	f := newFixture(t, Config{})
	task := `{"taskId":"same-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`
	c1, b1 := f.do("POST", "/v1/tasks", task)
	c2, b2 := f.do("POST", "/v1/tasks", task)
	if c1 != http.StatusAccepted || c2 != http.StatusOK || !decode[SubmitResponse](t, b2).Duplicate {
		t.Fatalf("POSTs = %d %s / %d %s; want 202 then 200 duplicate", c1, b1, c2, b2)
	}
	f.do("GET", "/v1/tasks/same-1?wait=10s", "")
	// Once more after it finished.
	if c, b := f.do("POST", "/v1/tasks", task); c != http.StatusOK || decode[SubmitResponse](t, b).State != queue.Succeeded {
		t.Fatalf("POST after finish = %d %s", c, b)
	}
	f.do("POST", "/v1/tasks", `{"taskId":"after","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	f.do("GET", "/v1/tasks/after?wait=10s", "")
	if n := f.runs.count("same-1"); n != 1 {
		t.Errorf("same-1 ran %d times, want 1", n)
	}
}

func TestLongPollTimesOutWithCurrentState(t *testing.T) {
	f := newFixture(t, Config{})
	f.do("POST", "/v1/tasks", `{"taskId":"w-1","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`)
	code, body := f.do("GET", "/v1/tasks/w-1?wait=100ms", "")
	if code != http.StatusOK || decode[Task](t, body).State != queue.Queued {
		t.Fatalf("GET wait = %d %s, want 200 queued", code, body)
	}
	if code, body := f.do("GET", "/v1/tasks/w-1?wait=0s", ""); code != http.StatusOK || decode[Task](t, body).State != queue.Queued {
		t.Errorf("GET wait=0s = %d %s, want 200 queued at once", code, body)
	}
	if code, body := f.do("GET", "/v1/tasks/w-1?wait=soon", ""); code != http.StatusBadRequest {
		t.Errorf("bad wait = %d %s, want 400", code, body)
	}
	if code, body := f.do("GET", "/v1/tasks/nope", ""); code != http.StatusNotFound || !strings.Contains(decode[Error](t, body).Error, "not found") {
		t.Errorf("unknown id = %d %s, want 404", code, body)
	}
	if code, _ := f.do("GET", "/v1/tasks/nope?wait=1s", ""); code != http.StatusNotFound {
		t.Errorf("unknown id with wait = %d, want 404", code)
	}
}

func TestListByState(t *testing.T) {
	f := newFixture(t, Config{})
	f.do("POST", "/v1/tasks", `{"taskId":"l-run","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	f.do("POST", "/v1/tasks", `{"taskId":"l-wait","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`)
	f.do("GET", "/v1/tasks/l-run?wait=10s", "")
	code, body := f.do("GET", "/v1/tasks?state=queued", "")
	list := decode[ListResponse](t, body)
	if code != http.StatusOK || len(list.Tasks) != 1 || list.Tasks[0].TaskID != "l-wait" {
		t.Fatalf("list queued = %d %s", code, body)
	}
	_, body = f.do("GET", "/v1/tasks", "")
	if n := len(decode[ListResponse](t, body).Tasks); n != 2 {
		t.Errorf("list all = %d tasks, want 2", n)
	}
	if code, _ := f.do("GET", "/v1/tasks?state=done", ""); code != http.StatusBadRequest {
		t.Errorf("bad state = %d, want 400", code)
	}
	if code, _ := f.do("GET", "/v1/tasks?limit=x", ""); code != http.StatusBadRequest {
		t.Errorf("bad limit = %d, want 400", code)
	}
}

func TestPluginsHealthMetrics(t *testing.T) {
	f := newFixture(t, Config{})
	code, body := f.do("GET", "/v1/plugins", "")
	p := decode[PluginsResponse](t, body)
	if code != 200 || len(p.Types) != 1 || p.Types[0].Version != "abc123" || len(p.LoadErrors) != 1 {
		t.Errorf("plugins = %d %s", code, body)
	}
	if code, body := f.do("GET", "/healthz", ""); code != 200 || decode[HealthResponse](t, body).Status != "ok" {
		t.Errorf("healthz = %d %s", code, body)
	}
	f.do("POST", "/v1/tasks", `{"taskId":"m-1","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	f.do("GET", "/v1/tasks/m-1?wait=10s", "")
	f.do("POST", "/v1/tasks", `{"taskId":"m-2","taskName":"INSTALL","config":{"service":{"action":{"type":"nobody"}}}}`)
	code, body = f.do("GET", "/metrics", "")
	for _, want := range []string{
		`loom_tasks_total{family="automator",hook="install",state="succeeded",type="shell"} 1`,
		`loom_task_duration_seconds_count{family="automator",hook="install",state="succeeded",type="shell"} 1`,
		`loom_queue_depth{family="automator",type="nobody"} 1`,
		`loom_tasks_running{family="automator",hook="install",type="shell"} 0`,
		`loom_plugin_load_errors 1`, `loom_vms{state="idle"} 2`, `loom_ssh_connections_open 4`,
		`loom_http_requests_total{code="202",route="tasks"}`, `process_resident_memory_bytes`,
	} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if code != 200 {
		t.Errorf("metrics = %d", code)
	}
}

func TestJSONErrorsForUnknownRoutesAndMethods(t *testing.T) {
	f := newFixture(t, Config{})
	if code, body := f.do("PUT", "/v1/tasks/x", ""); code != http.StatusMethodNotAllowed || decode[Error](t, body).Error == "" {
		t.Errorf("PUT = %d %s, want a JSON 405", code, body)
	}
	if code, body := f.do("GET", "/v2/nothing", ""); code != http.StatusNotFound || decode[Error](t, body).Error == "" {
		t.Errorf("unknown path = %d %s, want a JSON 404", code, body)
	}
}

func TestAuth(t *testing.T) {
	q := &queue.Queue{}
	if _, err := New(Config{Addr: "0.0.0.0:7070", Queue: q}); err == nil || !strings.Contains(err.Error(), "token") {
		t.Errorf("public address without a token: err = %v, want a refusal naming the token", err)
	}
	if _, err := New(Config{Addr: ":7070", Queue: q}); err == nil {
		t.Errorf("all interfaces without a token: want a refusal")
	}
	f := newFixture(t, Config{Addr: "0.0.0.0:0", Token: "s3cret"})
	if code, _ := f.do("GET", "/healthz", ""); code != 200 {
		t.Errorf("with the token: %d", code)
	}
	for _, h := range []string{"", "Bearer nope", "Basic s3cret", "Bearer s3cre"} {
		req := httptest.NewRequest("GET", "/v1/tasks", nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, req)
		if w.Code != http.StatusUnauthorized || decode[Error](t, w.Body.Bytes()).Error == "" || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q = %d %s, want a JSON 401", h, w.Code, w.Body)
		}
	}
}

func TestStartServesOnLoopback(t *testing.T) {
	f := newFixture(t, Config{})
	s, err := New(Config{Addr: "127.0.0.1:0", Queue: f.q, Plugins: fakePlugins{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+s.Addr()+"/v1/tasks", "application/json", strings.NewReader(installTask))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST over TCP = %d %s", resp.StatusCode, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
