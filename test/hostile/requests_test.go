package hostile

// Hostile requests to the HTTP API and hostile files for `loomd run`.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// nested returns JSON nesting depth arrays inside a task's config.
func nestedTask(id string, depth int) string {
	return taskFor(ordinaryType, id, `"deep": `+strings.Repeat("[", depth)+strings.Repeat("]", depth))
}

func requestCases() []hcase {
	brackets := strings.Repeat("[", 4<<20)
	return []hcase{
		{name: "post-4mib-brackets", attack: "POST /v1/tasks with 4 MiB of `[`", class: "input", expect: "HTTP 400 or 413; the scanner is bounded (depth 64), no GB-sized recursion",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", brackets, 400, 413)
			}},
		{name: "post-brackets-parallel", attack: "four 4 MiB `[` bodies at once", class: "input", expect: "four at once: each HTTP 400 or 413, daemon alive",
			run: func(t *testing.T, s *suite) string {
				var wg sync.WaitGroup
				obs := make([]string, 4)
				for i := range obs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						obs[i] = s.expectStatus(t, "POST", "/v1/tasks", brackets, 400, 413)
					}()
				}
				wg.Wait()
				return obs[0] + " (x4)"
			}},
		{name: "post-deep-config", attack: "a task whose config nests arrays 10,000 deep", class: "input", expect: "HTTP 400: config nested 10,000 deep is past the depth limit",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", nestedTask(s.d.nextID("deep"), 10000), 400)
			}},
		{name: "post-nested-ok", attack: "a task whose config nests 32 deep", class: "input", expect: "a config nested 32 deep (within the limit) is accepted and runs",
			run: func(t *testing.T, s *suite) string {
				id := s.d.submit(t, nestedTask(s.d.nextID("nested"), 32))
				r := s.d.wait(t, id)
				s.checkRecord(t, want{state: "succeeded"}, r)
				return r.String()
			}},
		{name: "post-malformed-json", attack: "truncated JSON body", class: "input", expect: "HTTP 400 naming the syntax error",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", `{"taskName": "INSTALL", "config": {`, 400)
			}},
		{name: "post-not-an-object", attack: `bodies '[]', '"x"', 'null', '1e999', empty`, class: "input", expect: "HTTP 400 for [], \"x\", null, 1e999 and an empty body",
			run: func(t *testing.T, s *suite) string {
				var obs []string
				for _, b := range []string{`[]`, `"x"`, `null`, `1e999`, ``} {
					obs = append(obs, s.expectStatus(t, "POST", "/v1/tasks", b, 400))
				}
				return obs[0] + " (all 5)"
			}},
		{name: "post-oversized", attack: "a 5 MiB task", class: "input", expect: "HTTP 413: a 5 MiB task is over --max-body",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", taskFor(ordinaryType, s.d.nextID("big"), `"pad": "`+strings.Repeat("p", 5<<20)+`"`), 413)
			}},
		{name: "post-unknown-type", attack: "a task for a type no daemon serves", class: "input", expect: "HTTP 400, or 202 and left queued for a daemon that serves the type (docs/api.md); nothing runs here",
			run: func(t *testing.T, s *suite) string {
				code, b := s.d.call("POST", "/v1/tasks", taskFor("no-such-type", s.d.nextID("unknown"), ""), nil)
				if code == http.StatusBadRequest {
					return fmt.Sprintf("HTTP 400 %s", clip(string(b), 200))
				}
				if code != http.StatusAccepted {
					t.Fatalf("POST = %d %s, want 400 or 202", code, b)
				}
				time.Sleep(time.Second)
				r := s.d.get(t, gjsonID(t, b))
				if r.State != "queued" || r.Attempts != 0 {
					t.Errorf("a task for a type no daemon serves: %s, want it left queued", r)
				}
				return fmt.Sprintf("HTTP 202, %s", r)
			}},
		{name: "post-unknown-taskname", attack: "taskName `PWN`", class: "input", expect: "HTTP 400 listing the task names",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", `{"taskName": "PWN", "config": {}}`, 400)
			}},
		{name: "post-hostile-taskid", attack: "task ids `..`, `a*`, `a>`, `../../x`, `a b`, 10,000 chars", class: "input", expect: "HTTP 400 for task ids holding NATS wildcards, slashes, spaces, only dots, or 10 KB",
			run: func(t *testing.T, s *suite) string {
				var obs []string
				for _, id := range []string{"..", "a*", "a>", "../../x", "a b", strings.Repeat("i", 10000)} {
					obs = append(obs, clip(id, 8)+": "+s.expectStatus(t, "POST", "/v1/tasks", taskFor(ordinaryType, id, ""), 400))
				}
				return strings.Join(obs, "; ")
			}},
		{name: "post-hostile-tenant", attack: "tenantId `../../etc`", class: "input", expect: "HTTP 400: tenantId must be a safe token (no traversal)",
			run: func(t *testing.T, s *suite) string {
				body := strings.Replace(taskFor(ordinaryType, s.d.nextID("tenant"), ""), `{`, `{"tenantId": "../../etc", `, 1)
				return s.expectStatus(t, "POST", "/v1/tasks", body, 400)
			}},
		{name: "get-bad-wait", attack: "GET ?wait=forever, ?wait=-1s", class: "input", expect: "HTTP 400 for a negative or malformed ?wait",
			run: func(t *testing.T, s *suite) string {
				s.expectStatus(t, "GET", "/v1/tasks/x?wait=forever", "", 400)
				return s.expectStatus(t, "GET", "/v1/tasks/x?wait=-1s", "", 400)
			}},
		{name: "get-traversal-id", attack: "GET /v1/tasks/..%2F..%2Fetc%2Fpasswd", class: "input", expect: "HTTP 404 or 400 for a task id with traversal",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "GET", "/v1/tasks/..%2F..%2Fetc%2Fpasswd", "", 400, 404)
			}},
		{name: "huge-header", attack: "a 2 MiB request header", class: "input", expect: "HTTP 431 for 2 MiB of headers",
			run: func(t *testing.T, s *suite) string {
				code, b := s.d.call("GET", "/healthz", "", http.Header{"X-Pad": {strings.Repeat("h", 2<<20)}})
				if code != http.StatusRequestHeaderFieldsTooLarge && code != 0 {
					t.Errorf("GET with 2 MiB of headers: %d %s, want 431 or a closed connection", code, clip(string(b), 200))
				}
				return fmt.Sprintf("HTTP %d", code)
			}},
		{name: "slow-body-200", attack: "200 connections sending a 100 KB body a byte every 2 s", class: "connections", expect: "200 slow-body connections: the API keeps answering and closes them after its read timeout", serial: true,
			run: func(t *testing.T, s *suite) string { return s.slowConns(t, true) }},
		{name: "slow-headers-200", attack: "200 connections whose headers never end", class: "connections", expect: "200 connections that never finish their headers are closed after the read-header timeout", serial: true,
			run: func(t *testing.T, s *suite) string { return s.slowConns(t, false) }},
		{name: "concurrent-attacks", attack: "8 CPU, pattern and memory attacks at once, 10 ordinary tasks alongside", class: "concurrency", expect: "ordinary tasks complete while 8 CPU, pattern and memory attacks run at once", serial: true,
			run: func(t *testing.T, s *suite) string { return s.concurrentAttacks(t) }},
		{name: "run-nested-16mib", attack: "`loomd run` on 16 MiB of `[`", class: "input", expect: "loomd run exits 2 with a clear error, no Go stack overflow",
			run: func(t *testing.T, s *suite) string {
				return s.runFile(t, strings.Repeat("[", 16<<20), 2)
			}},
		{name: "run-deep-config", attack: "`loomd run` on a config nested 10,000 deep", class: "input", expect: "loomd run exits 2 for a config nested 10,000 deep",
			run: func(t *testing.T, s *suite) string {
				return s.runFile(t, nestedTask("deep", 10000), 2)
			}},
		{name: "run-malformed", attack: "`loomd run` on malformed JSON", class: "input", expect: "loomd run exits 2 naming the syntax error",
			run: func(t *testing.T, s *suite) string {
				return s.runFile(t, `{"taskName": "INSTALL", "config": {"x": tru}}`, 2)
			}},
	}
}

func gjsonID(t *testing.T, b []byte) string {
	t.Helper()
	i := bytes.Index(b, []byte(`"taskId":"`))
	if i < 0 {
		t.Fatalf("no taskId in %s", b)
	}
	rest := b[i+len(`"taskId":"`):]
	return string(rest[:bytes.IndexByte(rest, '"')])
}

// runFile runs `loomd run` on content and checks its exit code and that it
// did not die of a Go runtime failure.
func (s *suite) runFile(t *testing.T, content string, wantCode int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.json")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, loomdBin, "run", path, "--plugins", filepath.Join(s.dir, "plugins"),
		"--work-dir", filepath.Join(t.TempDir(), "work"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Env = []string{"HOME=" + s.dir, "PATH=" + os.Getenv("PATH")}
	_ = cmd.Run()
	code := cmd.ProcessState.ExitCode()
	msg := stderr.String()
	for _, bad := range []string{"fatal error", "goroutine stack exceeds", "panic:", "runtime: "} {
		if strings.Contains(msg, bad) {
			t.Errorf("loomd run died of a Go runtime failure (%q), exit %d:\n%s", bad, code, clip(msg, 1500))
			return fmt.Sprintf("exit %d, Go runtime failure", code)
		}
	}
	if code != wantCode {
		t.Errorf("loomd run exit %d, want %d:\n%s", code, wantCode, clip(msg, 1500))
	}
	return fmt.Sprintf("exit %d: %s", code, clip(strings.TrimSpace(msg), 200))
}

// slowConns opens 200 connections that send a request slowly (a body a
// byte every 2 s, or headers that never end), checks the API still answers
// while they are open, and that the server closes them within the bound.
func (s *suite) slowConns(t *testing.T, body bool) string {
	t.Helper()
	const n = 200
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.DialTimeout("tcp", s.d.addr, 5*time.Second)
		if err != nil {
			break // a connection cap may refuse at accept time: that is fine
		}
		conns = append(conns, c)
		if body {
			fmt.Fprintf(c, "POST /v1/tasks HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", adminToken)
		} else {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		}
	}
	// Keep trickling so only a read timeout (not idleness) can end them.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(2 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				for _, c := range conns {
					_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
					_, _ = c.Write([]byte("a"))
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	start := time.Now()
	code, _ := s.d.call("GET", "/healthz", "", nil)
	answered := time.Since(start)
	if code != http.StatusOK && code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
		t.Errorf("GET /healthz with %d slow connections open: %d, want 200 (or 503/429 from a connection cap)", len(conns), code)
	}
	// Every slow connection must be closed by the server: a read on it
	// ends (EOF, reset or a 408/400 answer) before the bound.
	closed := 0
	deadline := time.Now().Add(bound)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		if _, err := io.ReadAll(c); err == nil || !isTimeout(err) {
			closed++
		}
	}
	took := time.Since(start)
	if closed < len(conns) {
		t.Errorf("%d of %d slow connections still open after %s: no read timeout", len(conns)-closed, len(conns), bound)
	}
	return fmt.Sprintf("%d connections opened, healthz answered %d in %s, all closed by the server within %s",
		len(conns), code, answered.Round(time.Millisecond), took.Round(time.Second))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// concurrentAttacks submits 8 CPU and pattern attacks at once and, while
// they run, 10 ordinary tasks; every ordinary task must succeed.
func (s *suite) concurrentAttacks(t *testing.T) string {
	t.Helper()
	attacks := []string{"busy-loop", "pcall-swallows-deadline", "gsub-300k", "pattern-frontier", "tailcall-to-deadline", "mem-concat-table", "mem-closures", "sleep-past-deadline"}
	var ids []string
	for _, a := range attacks {
		ids = append(ids, s.d.submit(t, taskFor("h-"+a, s.d.nextID("storm-"+a), "")))
	}
	var lat []time.Duration
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			id := s.d.submit(t, ordinaryTask(s.d.nextID("storm-ordinary")))
			r := s.d.wait(t, id)
			if r.State != "succeeded" {
				t.Errorf("ordinary task %s during the attacks: %s", id, r)
			}
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, id := range ids {
		r := s.d.wait(t, id)
		if r.State != "failed" {
			t.Errorf("attack %s: %s, want failed", id, r)
		}
	}
	return fmt.Sprintf("10 ordinary tasks succeeded during 8 attacks, median latency %s", median(lat))
}
