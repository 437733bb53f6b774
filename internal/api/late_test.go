package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/queue"
)

// call is one request to h, with the answer's headers.
func call(t *testing.T, h http.Handler, ctx context.Context, method, path string) (int, string, http.Header) {
	t.Helper()
	req := httptest.NewRequestWithContext(ctx, method, path, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code, w.Body.String(), w.Header()
}

// While the daemon still opens the parts it opens after the API listens
// (Config.Late), the requests that need them wait, then answer 503 with
// Retry-After and what is being opened; task requests do not wait. Once
// they are open the same requests work; when they failed, the answer
// says what failed.
func TestLateParts(t *testing.T) {
	late := NewLate("the cluster jobs' and task logs' streams and buckets")
	late.wait = 100 * time.Millisecond
	f := newFixture(t, Config{Late: late})
	ctx := context.Background()
	for _, p := range []string{"/v1/tasks/t1/logs", "/v1/clusters", "/v1/clusters/shop/job", "/v1/clusters/shop/log"} {
		code, body, hdr := call(t, f.h, ctx, "GET", p)
		if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" ||
			!strings.Contains(body, "still opening the cluster jobs' and task logs' streams and buckets") {
			t.Errorf("GET %s while opening: %d Retry-After %q %s", p, code, hdr.Get("Retry-After"), body)
		}
	}
	if code, body := f.do("POST", "/v1/tasks", installTask); code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("submit while the late parts open: %d %s", code, body)
	}
	// Opened: a request waiting meanwhile goes through.
	got := make(chan int, 1)
	late.wait = 10 * time.Second
	go func() {
		code, _, _ := call(t, f.h, ctx, "GET", "/v1/clusters")
		got <- code
	}()
	late.Set(LateParts{}, nil) // no task logs (--task-log-max 0); the cluster bucket opens on first use
	if code := <-got; code != http.StatusOK {
		t.Fatalf("GET /v1/clusters once open: %d", code)
	}
	if code, body, _ := call(t, f.h, ctx, "GET", "/v1/tasks/t1/logs"); code != http.StatusServiceUnavailable || !strings.Contains(body, "keeps no task logs") {
		t.Fatalf("task logs off: %d %s", code, body)
	}

	failed := NewLate("the cluster jobs' and task logs' streams and buckets")
	failed.Set(LateParts{}, errors.New("creating stream LOOM_JOBLOG: insufficient resources"))
	g := newFixture(t, Config{Late: failed})
	code, body, hdr := call(t, g.h, ctx, "GET", "/v1/clusters/shop/job")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(body, "could not open the cluster jobs") ||
		!strings.Contains(body, "insufficient resources") {
		t.Fatalf("after a failed open: %d %s", code, body)
	}
}

// swappedJS is the fixture's queue with its JetStream context swapped
// for one on another server.
type swappedJS struct {
	*queue.Queue
	js atomic.Pointer[jetstream.JetStream]
}

func (s *swappedJS) JetStream() jetstream.JetStream { return *s.js.Load() }

// The API's lazy open of the cluster bucket (no ClusterStore given)
// retries what the NATS cluster cannot do right now while the request
// lasts, then answers 503 with Retry-After and what to do; the next
// request tries again.
func TestClusterBucketOpenRetries(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}) // no JetStream
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	noJS, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Config{})
	sq := &swappedJS{Queue: f.q}
	sq.js.Store(&noJS)
	s, err := New(Config{Addr: "127.0.0.1:0", Queue: sq, Plugins: fakePlugins{}, Metrics: NewMetrics()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	code, body, hdr := call(t, s.Handler(), ctx, "GET", "/v1/clusters")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(body, "kv bucket LOOM_CLUSTERS (1 replica)") ||
		!strings.Contains(body, "no NATS server answered the JetStream API") || !strings.Contains(body, "tries") {
		t.Fatalf("GET /v1/clusters without JetStream: %d %s", code, body)
	}
	t.Logf("answered after %v: %s", time.Since(start).Round(time.Millisecond), body)
	real := f.q.JetStream()
	sq.js.Store(&real)
	if code, body, _ := call(t, s.Handler(), context.Background(), "GET", "/v1/clusters"); code != http.StatusOK {
		t.Fatalf("GET /v1/clusters with JetStream back: %d %s", code, body)
	}
}
