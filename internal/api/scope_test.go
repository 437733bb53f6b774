package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/tokens"
)

const (
	opsTok    = "ops-secret-0123456789"
	acmeTok   = "acme-secret-0123456789"
	victimTok = "victim-secret-0123456789"
	roTok     = "acme-readonly-0123456789"
	defTok    = "default-tenant-0123456789"
)

// scoped is a fixture whose API takes the tokens of a tokens file.
type scoped struct {
	*fixture
	h http.Handler
}

func newScoped(t *testing.T) *scoped {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	doc := `{"tokens": [
		{"name": "ops", "admin": true, "token": "` + opsTok + `"},
		{"name": "acme-ci", "tenant": "acme", "token": "` + acmeTok + `"},
		{"name": "victim-ci", "tenant": "victim", "token": "` + victimTok + `"},
		{"name": "acme-ro", "tenant": "acme", "readOnly": true, "token": "` + roTok + `"},
		{"name": "default-ci", "tenant": "default", "token": "` + defTok + `"}
	]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := tokens.Load(path, "")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Config{})
	s, err := New(Config{Queue: f.q, Plugins: fakePlugins{}, Tokens: set, DefaultTenant: "default", Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	return &scoped{fixture: f, h: s.Handler()}
}

func (s *scoped) as(tok, method, path, body string) (int, []byte) {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	w := httptest.NewRecorder()
	s.h.ServeHTTP(w, req)
	return w.Code, w.Body.Bytes()
}

func (s *scoped) submit(t *testing.T, tok, body string) string {
	t.Helper()
	code, b := s.as(tok, "POST", "/v1/tasks", body)
	if code != http.StatusAccepted {
		t.Fatalf("POST as %s: %d %s", tok[:4], code, b)
	}
	return decode[SubmitResponse](t, b).TaskID
}

// TestTenantTokens: a tenant token sees and acts on its tenant's tasks
// only; another tenant's task answers 404 as if it did not exist, to
// reading, waiting, cancelling and deleting; lists leave it out; a task
// naming another tenant is refused; one naming none gets the token's.
func TestTenantTokens(t *testing.T) {
	s := newScoped(t)
	victim := s.submit(t, victimTok, installTask)
	if code, b := s.as(opsTok, "GET", "/v1/tasks/"+victim+"?wait=10s", ""); code != http.StatusOK || decode[Task](t, b).TenantID != "victim" {
		t.Fatalf("the victim's task, as admin: %d %s, want tenantId victim (set from the token)", code, b)
	}
	mine := s.submit(t, acmeTok, installTask)
	def := s.submit(t, opsTok, installTask) // no tenantId: the daemon's --tenant
	s.as(opsTok, "GET", "/v1/tasks/"+mine+"?wait=10s", "")
	s.as(opsTok, "GET", "/v1/tasks/"+def+"?wait=10s", "")

	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/tasks/" + victim},
		{"GET", "/v1/tasks/" + victim + "?wait=30s"},
		{"POST", "/v1/tasks/" + victim + "/cancel"},
		{"DELETE", "/v1/tasks/" + victim},
		{"GET", "/v1/tasks/" + def},
	} {
		start := time.Now()
		code, b := s.as(acmeTok, c.method, c.path, "")
		if code != http.StatusNotFound || !strings.Contains(string(b), "not found") || strings.Contains(string(b), "victim") {
			t.Errorf("%s %s as tenant acme: %d %s, want 404 as for a task that does not exist", c.method, c.path, code, b)
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("%s %s as tenant acme waited for another tenant's task", c.method, c.path)
		}
	}
	if code, b := s.as(opsTok, "GET", "/v1/tasks/"+victim, ""); code != http.StatusOK {
		t.Fatalf("the victim's task after the attempts: %d %s", code, b)
	}
	list := func(tok string) map[string]string {
		code, b := s.as(tok, "GET", "/v1/tasks", "")
		if code != http.StatusOK {
			t.Fatalf("list: %d %s", code, b)
		}
		out := map[string]string{}
		for _, tk := range decode[ListResponse](t, b).Tasks {
			out[tk.TaskID] = tk.TenantID
		}
		return out
	}
	if got := list(acmeTok); len(got) != 1 || got[mine] != "acme" {
		t.Errorf("acme's list: %v, want only its own task", got)
	}
	if got := list(defTok); len(got) != 1 || got[def] != "" {
		t.Errorf("the default tenant's list: %v, want the task without tenantId", got)
	}
	if got := list(opsTok); len(got) != 3 {
		t.Errorf("the admin's list: %v, want every task", got)
	}
	if code, b := s.as(defTok, "GET", "/v1/tasks/"+def, ""); code != http.StatusOK {
		t.Errorf("a task without tenantId, as the default tenant's token: %d %s", code, b)
	}

	other := strings.Replace(installTask, `{`, `{"tenantId": "victim", `, 1)
	if code, b := s.as(acmeTok, "POST", "/v1/tasks", other); code != http.StatusForbidden || !strings.Contains(string(b), `may submit only tasks of tenant acme, not of tenant victim`) {
		t.Errorf("a task of another tenant: %d %s, want 403", code, b)
	}
	if code, b := s.as(acmeTok, "POST", "/v1/calls", `{"type": "gkelike", "hook": "create", "kind": "clusterdriver", "tenantId": "victim"}`); code != http.StatusForbidden {
		t.Errorf("a call of another tenant: %d %s, want 403", code, b)
	}
	if code, b := s.as(acmeTok, "POST", "/v1/calls", `{"type": "gkelike", "hook": "create", "kind": "clusterdriver", "callId": "c1", "input": {"options": {}}}`); code != http.StatusAccepted {
		t.Errorf("a call of its own tenant: %d %s", code, b)
	} else if code, b := s.as(opsTok, "GET", "/v1/tasks/c1", ""); code != http.StatusOK || decode[Task](t, b).TenantID != "acme" {
		t.Errorf("the call's task: %d %s, want tenantId acme", code, b)
	}
}

// TestReadOnlyAndAdminOnly: read-only tokens only read; metrics and pprof
// need an admin token; a missing or unknown token is 401.
func TestReadOnlyAndAdminOnly(t *testing.T) {
	s := newScoped(t)
	id := s.submit(t, acmeTok, installTask)
	if code, _ := s.as(roTok, "GET", "/v1/tasks/"+id, ""); code != http.StatusOK {
		t.Errorf("a read-only token reading: %d", code)
	}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/tasks", installTask},
		{"POST", "/v1/tasks/" + id + "/cancel", ""},
		{"DELETE", "/v1/tasks/" + id, ""},
		{"PUT", "/v1/clusters/shop/state", "{}"},
	} {
		if code, b := s.as(roTok, c.method, c.path, c.body); code != http.StatusForbidden || !strings.Contains(string(b), `acme-ro\" (tenant acme, read-only) may only read`) {
			t.Errorf("%s %s with a read-only token: %d %s, want 403", c.method, c.path, code, b)
		}
	}
	for _, p := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		if code, b := s.as(acmeTok, "GET", p, ""); code != http.StatusForbidden || !strings.Contains(string(b), "needs an admin token") {
			t.Errorf("%s with a tenant token: %d %s, want 403", p, code, b)
		}
		if code, _ := s.as(opsTok, "GET", p, ""); code != http.StatusOK {
			t.Errorf("%s with the admin token: %d", p, code)
		}
	}
	if code, _ := s.as(acmeTok, "GET", "/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz with a tenant token: %d", code)
	}
	for _, tok := range []string{"", "nope", opsTok + "x"} {
		if code, _ := s.as(tok, "GET", "/v1/tasks", ""); code != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, code)
		}
	}
}

// TestTenantClusters: a cluster belongs to the tenant whose token created
// it; other tenants' tokens neither list nor reach it.
func TestTenantClusters(t *testing.T) {
	s := newScoped(t)
	cl := &state.Cluster{Name: "shop", Status: state.Pending, Spec: "name: shop", SpecFile: "shop.yaml", Nodes: map[string]*state.Node{}}
	data, _ := json.Marshal(cl)
	if code, b := s.as(victimTok, "PUT", "/v1/clusters/shop/state", string(data)); code != http.StatusOK {
		t.Fatalf("PUT state as victim: %d %s", code, b)
	}
	if code, b := s.as(opsTok, "GET", "/v1/clusters/shop/state", ""); code != http.StatusOK || decode[state.Cluster](t, b).Tenant != "victim" {
		t.Fatalf("the cluster's tenant: %d %s, want victim (from the token)", code, b)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/clusters/shop", ""},
		{"GET", "/v1/clusters/shop/state", ""},
		{"GET", "/v1/clusters/shop/history", ""},
		{"PUT", "/v1/clusters/shop/state", string(data)},
		{"DELETE", "/v1/clusters/shop/state", ""},
		{"POST", "/v1/clusters/shop/changes", `{"changes": []}`},
		{"POST", "/v1/clusters/shop/lock", `{"owner": "x"}`},
		{"DELETE", "/v1/clusters/shop/lock?owner=x", ""},
	} {
		if code, b := s.as(acmeTok, c.method, c.path, c.body); code != http.StatusNotFound {
			t.Errorf("%s %s as tenant acme: %d %s, want 404", c.method, c.path, code, b)
		}
	}
	if code, b := s.as(acmeTok, "GET", "/v1/clusters", ""); code != http.StatusOK || strings.Contains(string(b), "shop") {
		t.Errorf("acme's cluster list: %d %s, want it without shop", code, b)
	}
	if code, b := s.as(victimTok, "GET", "/v1/clusters", ""); code != http.StatusOK || !strings.Contains(string(b), `"name":"shop"`) {
		t.Errorf("the victim's cluster list: %d %s", code, b)
	}
	if code, _ := s.as(opsTok, "GET", "/v1/clusters/shop", ""); code != http.StatusOK {
		t.Errorf("the admin reading the cluster: %d", code)
	}
	wrong := *cl
	wrong.Name, wrong.Tenant = "blog", "victim"
	data, _ = json.Marshal(&wrong)
	if code, b := s.as(acmeTok, "PUT", "/v1/clusters/blog/state", string(data)); code != http.StatusForbidden {
		t.Errorf("acme writing a cluster of tenant victim: %d %s, want 403", code, b)
	}
}

// TestTenantClusterJobs: a tenant token's cluster job makes a cluster of
// its tenant whose tasks run with its tenantId; another tenant's token
// reaches neither the job, its log, nor the cluster.
func TestTenantClusterJobs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	doc := `{"tokens": [{"name": "ops", "admin": true, "token": "` + opsTok + `"},
		{"name": "acme-ci", "tenant": "acme", "token": "` + acmeTok + `"},
		{"name": "victim-ci", "tenant": "victim", "token": "` + victimTok + `"}]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := tokens.Load(path, "")
	if err != nil {
		t.Fatal(err)
	}
	f := newJobsFixtureWith(t, func(c *Config) { c.Tokens, c.DefaultTenant = set, "default" })
	as := func(tok, method, path, body string) (int, []byte) {
		f.tok = tok
		return f.do(method, path, body)
	}
	req, _ := json.Marshal(runner.Request{Verb: "apply", Spec: jobSpec, SpecFile: "shop.yaml", Tenant: "victim"})
	if code, b := as(acmeTok, "POST", "/v1/clusters/shop/jobs", string(req)); code != http.StatusForbidden {
		t.Fatalf("a job naming another tenant: %d %s, want 403", code, b)
	}
	req, _ = json.Marshal(runner.Request{Verb: "apply", Spec: jobSpec, SpecFile: "shop.yaml"})
	if code, b := as(acmeTok, "POST", "/v1/clusters/shop/jobs", string(req)); code != http.StatusAccepted {
		t.Fatalf("acme's job: %d %s", code, b)
	}
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, b := as(acmeTok, "GET", "/v1/clusters/shop/job", "")
		if jv := decode[JobView](t, b); jv.State != runner.StateRunning || time.Now().After(end) {
			if jv.State != runner.StateComplete {
				t.Fatalf("acme's job: %s", b)
			}
			break
		}
	}
	_, b := as(opsTok, "GET", "/v1/clusters/shop/state", "")
	if c := decode[state.Cluster](t, b); c.Tenant != "acme" {
		t.Errorf("the cluster's tenant is %q, want acme", c.Tenant)
	}
	_, b = as(opsTok, "GET", "/v1/tasks?cluster=shop", "")
	tasks := decode[ListResponse](t, b).Tasks
	if len(tasks) == 0 {
		t.Fatal("the job ran no task")
	}
	for _, tk := range tasks {
		if tk.TenantID != "acme" {
			t.Errorf("task %s of acme's cluster has tenantId %q", tk.TaskID, tk.TenantID)
		}
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/clusters/shop/job", ""},
		{"POST", "/v1/clusters/shop/job/cancel", ""},
		{"GET", "/v1/clusters/shop/jobs/shop-001", ""},
		{"GET", "/v1/clusters/shop/log", ""},
		{"POST", "/v1/clusters/shop/jobs", string(req)},
		{"GET", "/v1/clusters/shop", ""},
		{"GET", "/v1/tasks/" + tasks[0].TaskID, ""},
	} {
		if code, b := as(victimTok, c.method, c.path, c.body); code != http.StatusNotFound {
			t.Errorf("%s %s as tenant victim: %d %s, want 404", c.method, c.path, code, b)
		}
	}
	if _, b := as(victimTok, "GET", "/v1/tasks?cluster=shop", ""); len(decode[ListResponse](t, b).Tasks) != 0 {
		t.Errorf("tenant victim lists acme's cluster tasks: %s", b)
	}
}
