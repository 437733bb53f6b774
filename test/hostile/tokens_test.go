package hostile

// Scoped API tokens (issue 20 item 9): the suite's daemon takes a
// --tokens-file of an admin token (every request of the suite carries
// it), two tenant tokens and a read-only one. A tenant's client must not
// see or touch another tenant's tasks, nor the daemon's own endpoints.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The suite's tokens. adminToken goes on every request of the harness.
const (
	adminToken  = "hostile-admin-0123456789abcdef"
	acmeToken   = "hostile-acme-0123456789abcdef"
	victimToken = "hostile-victim-0123456789abcdef"
	acmeRO      = "hostile-acme-ro-0123456789abcdef"
)

func tokensDoc(withAcme bool) string {
	acme := ""
	if withAcme {
		acme = `{"name": "acme-ci", "tenant": "acme", "token": "` + acmeToken + `"},`
	}
	return `{"tokens": [
  {"name": "suite-admin", "admin": true, "token": "` + adminToken + `"},
  ` + acme + `
  {"name": "victim-ci", "tenant": "victim", "token": "` + victimToken + `"},
  {"name": "acme-dashboard", "tenant": "acme", "readOnly": true, "token": "` + acmeRO + `"}
]}`
}

// tokenArgs writes the suite's tokens file and returns the serve flag.
func (s *suite) tokenArgs(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(s.dir, "tokens.json")
	if err := os.WriteFile(path, []byte(tokensDoc(true)), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--tokens-file", path}
}

func bearer(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

// victimTask submits a task of tenant victim with victim's token and
// returns its id.
func (s *suite) victimTask(t *testing.T, typ string) string {
	t.Helper()
	code, b := s.d.call("POST", "/v1/tasks", taskFor(typ, s.d.nextID("vt"), ""), bearer(victimToken))
	if code != http.StatusAccepted {
		t.Fatalf("the victim's POST = %d %s", code, clip(string(b), 300))
	}
	var r struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(b, &r)
	return r.TaskID
}

func tokenCases() []hcase {
	return []hcase{
		{name: "tenant-other-tenant-task", class: "tenancy", plugin: &plugin{body: `time.sleep(3)`, timeout: "30s"},
			attack: "with tenant acme's token: GET, long-poll, cancel and DELETE a running task of tenant victim, list the tasks",
			expect: "404 for each, as for a task that does not exist; the list leaves it out; the victim's task runs to success",
			run: func(t *testing.T, s *suite) string {
				id := s.victimTask(t, "h-tenant-other-tenant-task")
				var obs []string
				for _, c := range []struct{ method, path string }{
					{"GET", "/v1/tasks/" + id},
					{"GET", "/v1/tasks/" + id + "?wait=20s"},
					{"POST", "/v1/tasks/" + id + "/cancel"},
					{"DELETE", "/v1/tasks/" + id},
				} {
					code, b := s.d.call(c.method, c.path, "", bearer(acmeToken))
					obs = append(obs, fmt.Sprintf("%s %d", c.method, code))
					if code != http.StatusNotFound || strings.Contains(string(b), "victim") {
						t.Errorf("%s %s as acme: %d %s, want 404 without a word of the victim", c.method, c.path, code, clip(string(b), 200))
					}
				}
				code, b := s.d.call("GET", "/v1/tasks?limit=1000", "", bearer(acmeToken))
				if code != http.StatusOK || strings.Contains(string(b), id) {
					t.Errorf("acme's list: %d, holds the victim's task: %v", code, strings.Contains(string(b), id))
				}
				r := s.d.wait(t, id)
				if r.State != "succeeded" || str(r.raw["tenantId"]) != "victim" {
					t.Errorf("the victim's task: %s tenant %v, want it to run to success as tenant victim", r, r.raw["tenantId"])
				}
				return strings.Join(obs, ", ") + "; list without it; the victim's task " + r.State
			}},
		{name: "tenant-submits-as-other", class: "tenancy",
			attack: "with tenant acme's token: POST a task and a call naming `\"tenantId\": \"victim\"`",
			expect: "403 naming the token's tenant for both; nothing is queued",
			run: func(t *testing.T, s *suite) string {
				task := strings.Replace(ordinaryTask(s.d.nextID("as-victim")), `{`, `{"tenantId": "victim", `, 1)
				code, b := s.d.call("POST", "/v1/tasks", task, bearer(acmeToken))
				if code != http.StatusForbidden || !strings.Contains(string(b), "tenant acme") {
					t.Errorf("a task of tenant victim: %d %s, want 403", code, clip(string(b), 300))
				}
				obs := fmt.Sprintf("task: HTTP %d %s", code, clip(strings.TrimSpace(string(b)), 140))
				code, b = s.d.call("POST", "/v1/calls", `{"type": "gkelike", "kind": "clusterdriver", "hook": "create", "tenantId": "victim"}`, bearer(acmeToken))
				if code != http.StatusForbidden {
					t.Errorf("a call of tenant victim: %d %s, want 403", code, clip(string(b), 300))
				}
				return obs + fmt.Sprintf("; call: HTTP %d", code)
			}},
		{name: "tenant-daemon-endpoints", class: "tenancy",
			attack: "with tenant acme's token: GET /metrics, /debug/pprof/goroutine?debug=2 and /debug/pprof/heap",
			expect: "403: metrics and pprof need an admin token",
			run: func(t *testing.T, s *suite) string {
				var obs []string
				for _, p := range []string{"/metrics", "/debug/pprof/goroutine?debug=2", "/debug/pprof/heap"} {
					code, b := s.d.call("GET", p, "", bearer(acmeToken))
					obs = append(obs, fmt.Sprintf("%s %d", p, code))
					if code != http.StatusForbidden || !strings.Contains(string(b), "admin token") {
						t.Errorf("%s as acme: %d %s, want 403", p, code, clip(string(b), 200))
					}
				}
				return strings.Join(obs, ", ")
			}},
		{name: "readonly-token-writes", class: "tenancy",
			attack: "with acme's read-only token: POST a task, cancel and DELETE one of acme's tasks",
			expect: "403 (read-only) for each; the task is untouched",
			run: func(t *testing.T, s *suite) string {
				code, b := s.d.call("POST", "/v1/tasks", ordinaryTask(s.d.nextID("acme")), bearer(acmeToken))
				if code != http.StatusAccepted {
					t.Fatalf("acme's POST = %d %s", code, clip(string(b), 200))
				}
				var sub struct {
					TaskID string `json:"taskId"`
				}
				_ = json.Unmarshal(b, &sub)
				var obs []string
				for _, c := range []struct{ method, path, body string }{
					{"POST", "/v1/tasks", ordinaryTask(s.d.nextID("ro"))},
					{"POST", "/v1/tasks/" + sub.TaskID + "/cancel", ""},
					{"DELETE", "/v1/tasks/" + sub.TaskID, ""},
				} {
					code, b := s.d.call(c.method, c.path, c.body, bearer(acmeRO))
					obs = append(obs, fmt.Sprintf("%s %d", c.method, code))
					if code != http.StatusForbidden || !strings.Contains(string(b), "may only read") {
						t.Errorf("%s %s read-only: %d %s, want 403", c.method, c.path, code, clip(string(b), 200))
					}
				}
				if code, _ := s.d.call("GET", "/v1/tasks/"+sub.TaskID, "", bearer(acmeRO)); code != http.StatusOK {
					t.Errorf("the read-only token reading its tenant's task: %d", code)
				}
				if r := s.d.wait(t, sub.TaskID); r.State != "succeeded" {
					t.Errorf("acme's task after the attempts: %s", r)
				}
				return strings.Join(obs, ", ")
			}},
		{name: "token-guessing", class: "tenancy",
			attack: "500 requests with wrong bearer tokens (empty, near misses of a real one, another tenant's with a space), 8 at a time",
			expect: "401 for each; the daemon keeps serving",
			run: func(t *testing.T, s *suite) string {
				guesses := []string{"", "x", acmeToken[:len(acmeToken)-1], acmeToken + "x", " " + victimToken + " x", strings.ToUpper(acmeToken)}
				sem := make(chan struct{}, 8)
				bad := make(chan string, 500)
				for i := range 500 {
					sem <- struct{}{}
					go func() {
						defer func() { <-sem }()
						g := guesses[i%len(guesses)]
						if code, _ := s.d.call("GET", "/v1/tasks", "", bearer(g)); code != http.StatusUnauthorized {
							bad <- fmt.Sprintf("%q: %d", g, code)
						}
					}()
				}
				for range cap(sem) {
					sem <- struct{}{}
				}
				close(bad)
				for b := range bad {
					t.Errorf("a wrong token got %s, want 401", b)
				}
				return "500 × 401"
			}},
		{name: "tokens-file-revoked", class: "tenancy", serial: true,
			attack: "the operator removes acme's token from the tokens file (rewritten by a rename) while acme's client keeps calling, then writes a broken file",
			expect: "acme's token gets 401 within seconds, without a restart; the broken file keeps the tokens in force (the others still work)",
			run: func(t *testing.T, s *suite) string {
				path := filepath.Join(s.dir, "tokens.json")
				rewrite := func(doc string) {
					if err := os.WriteFile(path+".new", []byte(doc), 0o600); err != nil {
						t.Fatal(err)
					}
					if err := os.Rename(path+".new", path); err != nil {
						t.Fatal(err)
					}
				}
				defer rewrite(tokensDoc(true))
				rewrite(tokensDoc(false))
				start := time.Now()
				for {
					code, _ := s.d.call("GET", "/v1/tasks", "", bearer(acmeToken))
					if code == http.StatusUnauthorized {
						break
					}
					if time.Since(start) > bound {
						t.Fatalf("acme's revoked token still answers %d after %v", code, bound)
					}
					time.Sleep(50 * time.Millisecond)
				}
				took := time.Since(start)
				rewrite(`{"tokens": [`)
				time.Sleep(time.Second)
				if code, _ := s.d.call("GET", "/v1/tasks", "", bearer(victimToken)); code != http.StatusOK {
					t.Errorf("after a broken tokens file, the victim's token: %d, want the tokens in force kept", code)
				}
				if code, _ := s.d.call("GET", "/v1/tasks", "", bearer(acmeToken)); code != http.StatusUnauthorized {
					t.Errorf("after a broken tokens file, the revoked token: %d, want 401", code)
				}
				return fmt.Sprintf("revoked token refused after %s; the broken file kept the tokens in force", took.Round(10*time.Millisecond))
			}},
	}
}
