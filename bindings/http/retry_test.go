package http_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nethttp "net/http"

	loomhttp "github.com/loomrt/loom/bindings/http"
)

// blockUntilGone blocks a handler until the client goes away or the test
// ends. A binding that failed to give up would see the handler return
// after 20s with a complete (short) response, and the test fail instead
// of hanging.
func blockUntilGone(t *testing.T) func(r *nethttp.Request) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return func(r *nethttp.Request) {
		select {
		case <-r.Context().Done():
		case <-done:
		case <-time.After(20 * time.Second):
		}
	}
}

func TestTimeoutOption(t *testing.T) {
	block := blockUntilGone(t)
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) { block(r) }))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	le := e.runErr(t, `http.get(URL .. "/slow", {timeout = 0.2})`)
	if le.Kind != "timeout" || !strings.Contains(le.Message, "GET "+srv.URL+"/slow: timed out after 200ms") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}

func TestHookDeadlineCutsSlowBody(t *testing.T) {
	block := blockUntilGone(t)
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		io.WriteString(w, `{"droplets": [`)
		w.(nethttp.Flusher).Flush()
		block(r) // the rest never comes
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e.h.Ctx = ctx
	e.set(map[string]string{"URL": srv.URL})
	// A generous opts.timeout is still bounded by the hook's deadline.
	le := e.runErr(t, `http.get(URL .. "/v2/droplets", {timeout = 3600, retries = 3})`)
	if le.Kind != "timeout" || !strings.Contains(le.Message, "hook deadline exceeded") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
	if ctx.Err() == nil {
		t.Errorf("call returned before the hook deadline: %s", le.Message)
	}
}

func TestHookCanceled(t *testing.T) {
	e := newEnv(t, loomhttp.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e.h.Ctx = ctx
	le := e.runErr(t, `http.get("http://127.0.0.1:1/")`)
	if le.Kind != "timeout" || !strings.Contains(le.Message, "hook canceled") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if hits.Add(1) <= 2 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(nethttp.StatusTooManyRequests)
			io.WriteString(w, `{"id":"too_many_requests"}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	// retry_max_delay is below the Retry-After: had the binding used its
	// own back-off it would still succeed, so also check the wait in logs.
	e.run(t, `
		local r = http.get(URL, {retries = 3, retry_delay = 0.01})
		assert(r.status == 200 and r:json().ok == true, r.status)
	`)
	if n := hits.Load(); n != 3 {
		t.Errorf("server hits = %d, want 3", n)
	}
	if logs := e.h.Logs(); strings.Count(logs, `"wait":1000000000`) != 2 {
		t.Errorf("want two retries waiting the Retry-After of 1s, logs:\n%s", logs)
	}
	if s := e.b.Stats(); s["retries"] != 2 || s["requests"] != 3 {
		t.Errorf("stats = %v", s)
	}
}

func TestRetryAfterBeyondMaxDelayStops(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(nethttp.StatusTooManyRequests)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL, {retries = 5}).status == 429)`)
	if n := hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1: a Retry-After of an hour must not be waited for", n)
	}
	le := e.runErr(t, `http.get(URL, {retries = 5, check = true})`)
	if le.Kind != "http" || le.Fields["status"] != float64(429) {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}

func TestRetryAfterBeyondDeadlineStops(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "20")
		w.WriteHeader(nethttp.StatusServiceUnavailable)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.h.Ctx = ctx
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL, {retries = 5, retry_max_delay = 60}).status == 503)`)
	if n := hits.Load(); n != 1 {
		t.Errorf("server hits = %d, want 1", n)
	}
	if ctx.Err() != nil {
		t.Errorf("the call waited until the deadline instead of giving up")
	}
}

func TestRetriesExhausted(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		hits.Add(1)
		nethttp.Error(w, "upstream broke", nethttp.StatusBadGateway)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL, {retries = 2, retry_delay = 0.01}).status == 502)`)
	if n := hits.Load(); n != 3 {
		t.Errorf("server hits = %d, want 3", n)
	}
	hits.Store(0)
	le := e.runErr(t, `http.delete(URL, {retries = 2, retry_delay = 0.01, check = true})`)
	if le.Kind != "http" || !strings.Contains(le.Message, "HTTP 502") || !strings.Contains(le.Message, "after 3 attempts") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
	if n := hits.Load(); n != 3 {
		t.Errorf("server hits = %d, want 3", n)
	}
}

func TestNonIdempotentNotRetriedByDefault(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		hits.Add(1)
		w.WriteHeader(nethttp.StatusServiceUnavailable)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	for _, fn := range []string{"post", "patch"} {
		hits.Store(0)
		e.run(t, `assert(http.`+fn+`(URL, {json = {name = "x"}, retries = 3, retry_delay = 0.01}).status == 503)`)
		if n := hits.Load(); n != 1 {
			t.Errorf("%s: server hits = %d, want 1", fn, n)
		}
	}
	hits.Store(0)
	e.run(t, `assert(http.post(URL, {json = {}, retries = 3, retry_delay = 0.01, retry_non_idempotent = true}).status == 503)`)
	if n := hits.Load(); n != 4 {
		t.Errorf("post with retry_non_idempotent: server hits = %d, want 4", n)
	}
}

func TestRetryAfterConnectionDrop(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if hits.Add(1) == 1 {
			conn, _, err := w.(nethttp.Hijacker).Hijack()
			if err == nil {
				conn.Close() // drop the connection without a response
			}
			return
		}
		io.WriteString(w, "second time lucky")
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL, {retries = 2, retry_delay = 0.01}).body == "second time lucky")`)

	hits.Store(0)
	e.b.Close() // fresh connection, so net/http's own retry of reused connections cannot mask the drop
	le := e.runErr(t, `http.get(URL)`)
	if le.Kind != "connect" || !strings.Contains(le.Message, "GET "+srv.URL) {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}

func TestBodyOverCap(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.URL.Path == "/chunked" { // no Content-Length: the cap must hold while reading
			for i := 0; i < len(big); i += 64 << 10 {
				io.WriteString(w, big[i:i+64<<10])
				w.(nethttp.Flusher).Flush()
			}
			return
		}
		io.WriteString(w, big)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{DefaultMaxBody: 1 << 20})
	e.set(map[string]string{"URL": srv.URL})
	for _, code := range []string{
		`http.get(URL .. "/sized")`,
		`http.get(URL .. "/chunked")`,
		`http.get(URL .. "/sized", {max_body = 1000})`,
	} {
		le := e.runErr(t, code)
		if le.Kind != "http" || !strings.Contains(le.Message, "exceeds max_body") {
			t.Errorf("%s: got %s: %s", code, le.Kind, le.Message)
		}
	}
	e.run(t, `assert(#http.get(URL .. "/chunked", {max_body = 4 * 1024 * 1024}).body == 2 * 1024 * 1024)`)
	le := e.runErr(t, `http.get(URL, {max_body = 1024 * 1024 * 1024})`)
	if le.Kind != "config" {
		t.Errorf("max_body above the limit: got %s: %s", le.Kind, le.Message)
	}
}
