package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
