package console

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/runtime"
)

// fakeQueue is an in-memory api.Queue with OnChange and Input.
type fakeQueue struct {
	mu        sync.Mutex
	recs      map[string]queue.Record
	inputs    map[string][]byte
	order     []string // newest last
	cancelled []string
	deleted   []string
	subs      []func(queue.Change)
}

func newFakeQueue() *fakeQueue {
	return &fakeQueue{recs: map[string]queue.Record{}, inputs: map[string][]byte{}}
}

func (f *fakeQueue) add(rec queue.Record, input string) {
	f.mu.Lock()
	if rec.Created.IsZero() {
		rec.Created = time.Now().UTC()
	}
	f.recs[rec.TaskID] = rec
	f.inputs[rec.TaskID] = []byte(input)
	f.order = append(f.order, rec.TaskID)
	subs := slices.Clone(f.subs)
	f.mu.Unlock()
	for _, s := range subs {
		s(queue.Change{TaskID: rec.TaskID, State: rec.State, Type: rec.Type, Cluster: rec.ClusterID})
	}
}

func (f *fakeQueue) Submit(ctx context.Context, task []byte) (queue.Record, bool, error) {
	t, err := runtime.ParseTask(task)
	if err != nil {
		return queue.Record{}, false, err
	}
	rec := queue.Record{TaskID: t.TaskID, State: queue.Queued, Family: "automator", Type: "shell", TaskName: t.TaskName}
	f.add(rec, string(task))
	return rec, true, nil
}

func (f *fakeQueue) Get(ctx context.Context, id string) (queue.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	if !ok {
		return r, queue.ErrNotFound
	}
	return r, nil
}

func (f *fakeQueue) Wait(ctx context.Context, id string) (queue.Record, error) { return f.Get(ctx, id) }

func (f *fakeQueue) WaitSubmitted(ctx context.Context, sub queue.Record) (queue.Record, error) {
	return f.Get(ctx, sub.TaskID)
}

func (f *fakeQueue) List(ctx context.Context, fl queue.Filter) (queue.Page, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	start := len(f.order) - 1
	if fl.After != "" {
		i := slices.Index(f.order, fl.After)
		if i < 0 {
			return queue.Page{}, queue.ErrBadCursor
		}
		start = i - 1
	}
	var p queue.Page
	for i := start; i >= 0; i-- {
		r := f.recs[f.order[i]]
		if fl.State != "" && r.State != fl.State || fl.Type != "" && r.Type != fl.Type || fl.Cluster != "" && r.ClusterID != fl.Cluster {
			continue
		}
		p.Records = append(p.Records, r)
		if len(p.Records) == fl.Limit {
			p.Next = r.TaskID
			break
		}
	}
	return p, nil
}

func (f *fakeQueue) Delete(ctx context.Context, id string) (queue.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	if !ok {
		return r, queue.ErrNotFound
	}
	if !r.State.Terminal() {
		return r, queue.ErrNotFinished
	}
	delete(f.recs, id)
	f.order = slices.DeleteFunc(f.order, func(s string) bool { return s == id })
	f.deleted = append(f.deleted, id)
	return r, nil
}

func (f *fakeQueue) Cancel(ctx context.Context, id string) (queue.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	if !ok {
		return r, queue.ErrNotFound
	}
	if r.State.Terminal() {
		return r, queue.ErrFinished
	}
	r.State = queue.Cancelled
	f.recs[id] = r
	f.cancelled = append(f.cancelled, id)
	return r, nil
}

func (f *fakeQueue) Depth(ctx context.Context) (map[queue.Route]int, error) {
	return map[queue.Route]int{{Family: "automator", Type: "shell"}: 2}, nil
}
func (f *fakeQueue) Health(ctx context.Context) error { return nil }
func (f *fakeQueue) Served(r queue.Route) (bool, []queue.Route) {
	return r.Type == "shell", []queue.Route{{Family: "automator", Type: "shell"}}
}

func (f *fakeQueue) OnChange(fn func(queue.Change)) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, fn)
	return func() {}
}

func (f *fakeQueue) Input(ctx context.Context, id string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.recs[id]
	if ok && len(r.Input) > 0 {
		return r.Input, nil
	}
	if !ok || r.State.Terminal() {
		return nil, queue.ErrNoInput
	}
	return f.inputs[id], nil
}

// fakePlugins declares one sensitive field, api_token.
type fakePlugins struct{}

func (fakePlugins) Types() []runtime.TypeInfo {
	return []runtime.TypeInfo{{Name: "shell", Family: "automator", Key: "automatortypes", Plugin: "shell", Version: "abc123",
		Hooks: []string{"install"}, Raw: []byte(`{"parameters": {"admin": {"fields": {"api_token": {"type": "text", "sensitive": true, "default": "s3cr3t-default"}, "script": {"type": "text", "tip": "<b>run</b>"}}}}}`)}}
}
func (fakePlugins) LoadErrors() []*runtime.LoadError {
	return []*runtime.LoadError{{Plugin: "broken", File: "broken/init.lua", Line: 3, Message: "'=' expected near 'x'"}}
}
func (fakePlugins) Stats() runtime.Stats { return runtime.Stats{Types: 1} }
func (fakePlugins) RedactTask(b []byte) []byte {
	return runtime.RedactJSON(b, map[string]bool{"api_token": true})
}

const testToken = "test-token-0123456789"

type harness struct {
	t   *testing.T
	q   *fakeQueue
	c   *Console
	srv *httptest.Server
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	q := newFakeQueue()
	cfg.Queue, cfg.Changes = q, q
	if cfg.Tokens == nil {
		cfg.Tokens = tokens.New(cfg.Token)
	}
	if cfg.Plugins == nil {
		cfg.Plugins = fakePlugins{}
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = 50 * time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := api.New(api.Config{Addr: "127.0.0.1:0", Tokens: cfg.Tokens, Queue: q, UI: c.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(func() { c.Close(); srv.Close() })
	return &harness{t: t, q: q, c: c, srv: srv}
}

// client returns a browser-like client: a cookie jar, no redirects
// followed, and same-origin fetch metadata.
func (h *harness) client() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *harness) do(cl *http.Client, method, path string, form url.Values, hdr ...string) (*http.Response, string) {
	h.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, h.srv.URL+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := cl.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func (h *harness) login(cl *http.Client) {
	h.t.Helper()
	resp, _ := h.do(cl, "POST", "/ui/login", url.Values{"token": {testToken}, "next": {"/ui/tasks"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/tasks" {
		h.t.Fatalf("login: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in the page:\n%.2000s", page)
	}
	return m[1]
}

func TestLogin(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	cl := h.client()
	resp, _ := h.do(cl, "GET", "/ui/tasks?state=failed", nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login?next=%2Fui%2Ftasks%3Fstate%3Dfailed" {
		t.Fatalf("unauthenticated GET: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := h.do(cl, "POST", "/ui/login", url.Values{"token": {"wrong"}})
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not one of this loomd") {
		t.Fatalf("wrong token: %d\n%s", resp.StatusCode, body)
	}
	// The API's bearer token is not a console session, and a console
	// session is not the API's bearer token.
	resp, _ = h.do(cl, "GET", "/ui/", nil, "Authorization", "Bearer "+testToken)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("bearer on /ui: %d, want a redirect to the login", resp.StatusCode)
	}
	// A login from another site is refused.
	resp, _ = h.do(cl, "POST", "/ui/login", url.Values{"token": {testToken}}, "Sec-Fetch-Site", "cross-site")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-site login: %d", resp.StatusCode)
	}
	resp, _ = h.do(cl, "POST", "/ui/login", url.Values{"token": {testToken}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("open redirect: %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	ck := resp.Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/ui" {
		t.Fatalf("session cookie: %+v", ck)
	}
	resp, body = h.do(cl, "GET", "/ui/", nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Overview") {
		t.Fatalf("after login: %d", resp.StatusCode)
	}
	// The API still wants its bearer token.
	resp, _ = h.do(cl, "GET", "/v1/tasks", nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API with only the console cookie: %d, want 401", resp.StatusCode)
	}
	// A forged or altered cookie is no session.
	u, _ := url.Parse(h.srv.URL + "/ui/")
	good := cl.Jar.Cookies(u)[0].Value
	for _, bad := range []string{good[:len(good)-2] + "AA", "x" + good, "djF8MXwyfDN8NA.AAAA"} {
		cl2 := h.client()
		cl2.Jar.SetCookies(u, []*http.Cookie{{Name: cookieName, Value: bad, Path: "/ui"}})
		if resp, _ := h.do(cl2, "GET", "/ui/", nil); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("forged cookie %q: %d", bad, resp.StatusCode)
		}
	}
	// Sign out ends the session in this browser.
	_, page := h.do(cl, "GET", "/ui/", nil)
	resp, _ = h.do(cl, "POST", "/ui/logout", url.Values{"csrf": {csrfOf(t, page)}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	if resp, _ := h.do(cl, "GET", "/ui/", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after logout: %d", resp.StatusCode)
	}
}

func TestSessionsSurviveARestartWithTheSameToken(t *testing.T) {
	k1, k2, k3 := newSessionKeys("a", tokens.New("a")), newSessionKeys("a", tokens.New("a")), newSessionKeys("b", tokens.New("b"))
	now := time.Now()
	_, v := k1.newSession("token", now)
	if k2.parse(v, now) == nil {
		t.Fatal("a daemon with the same token refused the session")
	}
	if k3.parse(v, now) != nil {
		t.Fatal("a daemon with another token accepted the session")
	}
	if k1.parse(v, now.Add(sessionTTL+time.Second)) != nil {
		t.Fatal("an expired session was accepted")
	}
}

func TestActionsNeedCSRF(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	h.q.add(queue.Record{TaskID: "q1", State: queue.Queued, Family: "automator", Type: "shell", Hook: "install"}, `{}`)
	cl := h.client()
	h.login(cl)
	_, page := h.do(cl, "GET", "/ui/tasks/q1/cancel", nil)
	token := csrfOf(t, page)
	for _, c := range []struct {
		name string
		form url.Values
		hdr  []string
	}{
		{"no token", url.Values{}, nil},
		{"wrong token", url.Values{"csrf": {"x" + token}}, nil},
		{"cross-site", url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "cross-site"}},
		{"other origin", url.Values{"csrf": {token}}, []string{"Sec-Fetch-Site", "", "Origin", "http://evil.example"}},
	} {
		resp, body := h.do(cl, "POST", "/ui/tasks/q1/cancel", c.form, c.hdr...)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403\n%.500s", c.name, resp.StatusCode, body)
		}
	}
	if len(h.q.cancelled) != 0 {
		t.Fatalf("a refused request cancelled %v", h.q.cancelled)
	}
	// Another session's token is no good either.
	other := h.client()
	h.login(other)
	_, otherPage := h.do(other, "GET", "/ui/tasks/q1/cancel", nil)
	if resp, _ := h.do(cl, "POST", "/ui/tasks/q1/cancel", url.Values{"csrf": {csrfOf(t, otherPage)}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another session's token: %d", resp.StatusCode)
	}
	resp, _ := h.do(cl, "POST", "/ui/tasks/q1/cancel", url.Values{"csrf": {token}})
	if resp.StatusCode != http.StatusSeeOther || len(h.q.cancelled) != 1 {
		t.Fatalf("cancel with the token: %d, cancelled %v", resp.StatusCode, h.q.cancelled)
	}
	_, body := h.do(cl, "GET", resp.Header.Get("Location"), nil)
	if !strings.Contains(body, "The task was cancelled.") {
		t.Fatalf("no confirmation after the cancel:\n%.2000s", body)
	}
}

func TestOpenConsoleStillNeedsCSRF(t *testing.T) {
	h := newHarness(t, Config{})
	h.q.add(queue.Record{TaskID: "q1", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	cl := h.client()
	resp, page := h.do(cl, "GET", "/ui/tasks/q1/cancel", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("open console: %d", resp.StatusCode)
	}
	// A form posted from a page that never saw the console's cookie.
	if resp, _ := h.do(h.client(), "POST", "/ui/tasks/q1/cancel", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("POST without the session: %d", resp.StatusCode)
	}
	if resp, _ := h.do(cl, "POST", "/ui/tasks/q1/cancel", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST without the token: %d", resp.StatusCode)
	}
	if len(h.q.cancelled) != 0 {
		t.Fatal("cancelled without a CSRF token")
	}
	if resp, _ := h.do(cl, "POST", "/ui/tasks/q1/cancel", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST with the token: %d", resp.StatusCode)
	}
}

func TestReadOnly(t *testing.T) {
	h := newHarness(t, Config{Token: testToken, ReadOnly: true, Reload: func(context.Context) (ReloadResult, error) { return ReloadResult{}, nil }})
	h.q.add(queue.Record{TaskID: "q1", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	h.q.add(queue.Record{TaskID: "f1", State: queue.Failed, Family: "automator", Type: "shell"}, `{}`)
	cl := h.client()
	h.login(cl)
	for _, p := range []string{"/ui/tasks/q1", "/ui/tasks/f1", "/ui/plugins"} {
		_, body := h.do(cl, "GET", p, nil)
		for _, a := range []string{"/cancel\"", "/delete\"", "/plugins/reload\""} {
			if strings.Contains(body, a) {
				t.Errorf("%s links to %s in read-only mode", p, a)
			}
		}
		if !strings.Contains(body, "read-only") {
			t.Errorf("%s does not say it is read-only", p)
		}
	}
	_, page := h.do(cl, "GET", "/ui/tasks/q1", nil)
	if resp, _ := h.do(cl, "POST", "/ui/tasks/q1/cancel", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("read-only cancel: %d", resp.StatusCode)
	}
	if resp, _ := h.do(cl, "POST", "/ui/plugins/reload", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("read-only reload: %d", resp.StatusCode)
	}
	if len(h.q.cancelled) != 0 {
		t.Fatal("read-only console cancelled a task")
	}
}

// hostile is a value that breaks out of every HTML context it is not
// escaped for.
const hostile = `"><script>alert(1)</script><img src=x onerror=alert(2)>'`

func TestEveryPageIsSafe(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	st := 1
	fin := time.Now().UTC()
	res, _ := json.Marshal(map[string]any{"status": 1, "message": hostile, "stderr": "boom " + hostile + "\nstack traceback:\n\tinit.lua:3: in hook",
		"stdout": hostile, "error": map[string]any{"kind": hostile, "message": hostile},
		"result": map[string]any{"ssh-auth": map[string]any{"user": "root", "password": "pw-in-the-result-123"}, "note": hostile}})
	h.q.add(queue.Record{TaskID: "f1", State: queue.Failed, Family: "automator", Type: "shell", Hook: "install", TaskName: "INSTALL",
		ClusterID: "c-" + "x", TenantID: "acme", Status: &st, Finished: &fin, Result: res, Error: "plugin reported status 1: " + hostile}, `{}`)
	h.q.add(queue.Record{TaskID: "q1", State: queue.Queued, Family: "automator", Type: hostile, Hook: "install"},
		`{"taskId": "q1", "config": {"api_token": "tok-abcdef-123456", "provider": {"provisioner": {"password": "hunter2-secret"}}, "note": "`+strings.ReplaceAll(hostile, `"`, `\"`)+`"}}`)
	cl := h.client()
	h.login(cl)
	pages := []string{"/ui/", "/ui/tasks", "/ui/tasks?state=failed", "/ui/tasks/f1", "/ui/tasks/q1", "/ui/tasks/f1/delete", "/ui/tasks/q1/cancel",
		"/ui/plugins", "/ui/clusters", "/ui/nowhere", "/ui/tasks/nope", "/ui/tasks?state=" + url.QueryEscape(hostile)}
	scriptRe := regexp.MustCompile(`(?i)<script\b[^>]*>`)
	for _, p := range pages {
		resp, body := h.do(cl, "GET", p, nil)
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: security headers missing: %v", p, resp.Header)
		}
		for _, tag := range scriptRe.FindAllString(body, -1) {
			if !strings.Contains(tag, `src="/ui/static/app.js`) {
				t.Errorf("%s: a script that is not the console's file: %s", p, tag)
			}
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("%s: a hostile value came out unescaped", p)
		}
		if bad := inlineCode(body); bad != "" {
			t.Errorf("%s: %s", p, bad)
		}
		for _, secret := range []string{"tok-abcdef-123456", "hunter2-secret", "pw-in-the-result-123", "s3cr3t-default"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s shows the secret %q", p, secret)
			}
		}
	}
	_, body := h.do(cl, "GET", "/ui/tasks/f1", nil)
	for _, want := range []string{"stack traceback:", "init.lua:3: in hook", "[REDACTED]", "broken/init.lua"} {
		if want == "broken/init.lua" {
			_, body = h.do(cl, "GET", "/ui/plugins", nil)
		}
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	_, body = h.do(cl, "GET", "/ui/tasks/q1", nil)
	if !strings.Contains(body, "[REDACTED]") || !strings.Contains(body, "&#34;config&#34;") {
		t.Errorf("the queued task's input is not shown redacted:\n%.3000s", body)
	}
}

func TestTaskListFilters(t *testing.T) {
	h := newHarness(t, Config{Token: testToken, DefaultTenant: "default"})
	old := time.Now().Add(-48 * time.Hour)
	for i := range 30 {
		rec := queue.Record{TaskID: fmt.Sprintf("t%02d", i), State: queue.Succeeded, Family: "automator", Type: "shell", Hook: "install"}
		fin := time.Now().UTC()
		if i < 10 {
			fin = old
		}
		rec.Finished = &fin
		rec.Created = fin
		if i%3 == 0 {
			rec.TenantID = "acme"
		}
		h.q.add(rec, `{}`)
	}
	cl := h.client()
	h.login(cl)
	count := func(path string) int {
		_, body := h.do(cl, "GET", path, nil)
		return len(regexp.MustCompile(`<td><a href="/ui/tasks/t\d\d">`).FindAllString(body, -1))
	}
	if n := count("/ui/tasks?limit=100"); n != 30 {
		t.Errorf("all: %d rows", n)
	}
	if n := count("/ui/tasks?tenant=acme"); n != 10 {
		t.Errorf("tenant acme: %d rows, want 10", n)
	}
	if n := count("/ui/tasks?tenant=default"); n != 20 {
		t.Errorf("tenant default (tasks without a tenantId): %d rows, want 20", n)
	}
	if n := count("/ui/tasks?since=24h"); n != 20 {
		t.Errorf("since 24h: %d rows, want 20", n)
	}
	if n := count("/ui/tasks?since=24h&tenant=acme"); n != 6 {
		t.Errorf("since 24h, tenant acme: %d rows, want 6", n)
	}
	resp, body := h.do(cl, "GET", "/ui/tasks?state=nope", nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "unknown task state") {
		t.Errorf("bad state: %d", resp.StatusCode)
	}
	// Paging with the cursor reaches every task once.
	seen := map[string]bool{}
	next := "/ui/tasks?limit=7"
	for range 10 {
		_, body := h.do(cl, "GET", next, nil)
		for _, m := range regexp.MustCompile(`<td><a href="/ui/tasks/(t\d\d)">`).FindAllStringSubmatch(body, -1) {
			if seen[m[1]] {
				t.Fatalf("%s shown twice", m[1])
			}
			seen[m[1]] = true
		}
		m := regexp.MustCompile(`rel="next" href="([^"]+)"`).FindStringSubmatch(body)
		if m == nil {
			break
		}
		next = strings.ReplaceAll(m[1], "&amp;", "&") + "&limit=7"
	}
	if len(seen) != 30 {
		t.Errorf("paging saw %d tasks, want 30", len(seen))
	}
}

// inlineCode finds what the CSP forbids, as a browser parses the page:
// an event handler or style attribute, a script without src.
func inlineCode(page string) string {
	z := html.NewTokenizer(strings.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return ""
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			src := ""
			for _, a := range tok.Attr {
				if strings.HasPrefix(a.Key, "on") || a.Key == "style" {
					return fmt.Sprintf("attribute %s on <%s>", a.Key, tok.Data)
				}
				if a.Key == "src" {
					src = a.Val
				}
			}
			if tok.Data == "script" && !strings.HasPrefix(src, "/ui/static/app.js") {
				return fmt.Sprintf("script %q", src)
			}
			if tok.Data == "style" {
				return "a <style> element"
			}
		}
	}
}

// sseLines reads a stream's lines into a channel, closed at its end.
func sseLines(r io.Reader) <-chan string {
	ch := make(chan string, 1024)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}

// readEvents reads until n change events came, or fails after timeout.
func readEvents(t *testing.T, lines <-chan string, n int, timeout time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended after %v", out)
			}
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				out = append(out, d)
			}
		case <-deadline:
			t.Fatalf("got %v after %v, want %d events", out, timeout, n)
		}
	}
	return out
}

// waitHeartbeat reads until a heartbeat comes, and fails on an event or
// after timeout.
func waitHeartbeat(t *testing.T, lines <-chan string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended before its first heartbeat")
			}
			if d, ok := strings.CutPrefix(l, "data: "); ok {
				t.Fatalf("event %q on an idle stream", d)
			}
			if strings.HasPrefix(l, ": heartbeat") {
				return
			}
		case <-deadline:
			t.Fatalf("no heartbeat on an idle stream after %v", timeout)
		}
	}
}

// pendingTopics are the topics the hub's streams have pending, sorted.
func (h *hub) pendingTopics() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for s := range h.subs {
		for t := range s.pending {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// readEventsFor collects events and heartbeats for d.
func readEventsFor(lines <-chan string, d time.Duration) (events []string, beats int) {
	end := time.After(d)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return
			}
			if v, ok := strings.CutPrefix(l, "data: "); ok {
				events = append(events, v)
			}
			if strings.HasPrefix(l, ": heartbeat") {
				beats++
			}
		case <-end:
			return
		}
	}
}

func TestEventsThroughAProxy(t *testing.T) {
	// A stream sends at most one batch an interval: with an interval of
	// an hour, the first change is sent at once and every later one is
	// held back for the whole test, however slow the machine.
	h := newHarness(t, Config{Token: testToken, minInterval: time.Hour})
	h.q.add(queue.Record{TaskID: "q1", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	target, _ := url.Parse(h.srv.URL)
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	defer proxy.Close()
	cl := h.client()
	resp, _ := h.do(cl, "POST", "/ui/login", url.Values{"token": {testToken}})
	u, _ := url.Parse(proxy.URL + "/ui/")
	cl.Jar.SetCookies(u, resp.Cookies())
	req, _ := http.NewRequest("GET", proxy.URL+"/ui/events?topic=task:q1&topic=tasks", nil)
	stream, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	if ct := stream.Header.Get("Content-Type"); ct != "text/event-stream" || stream.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("stream headers: %v", stream.Header)
	}
	// The 200 response comes once the stream is subscribed. While idle
	// it sends heartbeats, and nothing else.
	lines := sseLines(stream.Body)
	waitHeartbeat(t, lines, 10*time.Second)
	// Change the task many times: the viewer gets the first change's
	// topics in one batch, then nothing for the rest until the interval
	// has passed (coalesced, not one event per write).
	for i := range 200 {
		h.q.add(queue.Record{TaskID: "q1", State: queue.Running, Family: "automator", Type: "shell", Attempts: i}, `{}`)
	}
	ev := readEvents(t, lines, 2, 10*time.Second)
	slices.Sort(ev)
	if !slices.Equal(ev, []string{"task:q1", "tasks"}) {
		t.Fatalf("events %v, want the first change's topics in one batch", ev)
	}
	h.q.add(queue.Record{TaskID: "q1", State: queue.Succeeded, Family: "automator", Type: "shell"}, `{}`)
	if more, _ := readEventsFor(lines, 1500*time.Millisecond); len(more) > 0 {
		t.Fatalf("201 changes gave %d more events within the interval: %v", len(more), more)
	}
	// The changes since are pending, to be sent once the interval passed.
	if p := h.c.hub.pendingTopics(); !slices.Equal(p, []string{"task:q1", "tasks"}) {
		t.Fatalf("pending after the batch: %v, want task:q1 and tasks", p)
	}
	// Streams need a session; an unknown topic is refused.
	if resp, _ := h.do(h.client(), "GET", "/ui/events?topic=tasks", nil); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("stream without a session: %d", resp.StatusCode)
	}
	if resp, _ := h.do(cl, "GET", "/ui/events?topic=secrets", nil); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("unknown topic: %d", resp.StatusCode)
	}
}

// TestEventsHeldBackAreSent: changes held back by the interval are sent
// once it passed, coalesced into one batch.
func TestEventsHeldBackAreSent(t *testing.T) {
	h := newHarness(t, Config{minInterval: 100 * time.Millisecond})
	cl := h.client()
	h.do(cl, "GET", "/ui/", nil)
	req, _ := http.NewRequest("GET", h.srv.URL+"/ui/events?topic=task:q1&topic=tasks", nil)
	stream, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	lines := sseLines(stream.Body)
	for round := range 3 {
		for i := range 50 {
			h.q.add(queue.Record{TaskID: "q1", State: queue.Running, Family: "automator", Type: "shell", Attempts: i}, `{}`)
		}
		ev := readEvents(t, lines, 2, 10*time.Second)
		slices.Sort(ev)
		if !slices.Equal(ev, []string{"task:q1", "tasks"}) {
			t.Fatalf("round %d: events %v, want task:q1 and tasks", round, ev)
		}
	}
}

func TestStreamCap(t *testing.T) {
	h := newHarness(t, Config{MaxStreams: 2})
	cl := h.client()
	h.do(cl, "GET", "/ui/", nil)
	var open []*http.Response
	defer func() {
		for _, r := range open {
			r.Body.Close()
		}
	}()
	for i := range 3 {
		req, _ := http.NewRequest("GET", h.srv.URL+"/ui/events?topic=tasks", nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, resp)
		want := http.StatusOK
		if i == 2 {
			want = http.StatusServiceUnavailable
		}
		if resp.StatusCode != want {
			t.Fatalf("stream %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
}

func TestQuantile(t *testing.T) {
	h := hist{bounds: []float64{0.1, 1, 10, math.Inf(1)}, cum: []float64{50, 90, 100, 100}, count: 100}
	if q := quantile(0.5, h, hist{}); math.Abs(q-0.1) > 1e-9 {
		t.Errorf("p50 = %v, want 0.1", q)
	}
	if q := quantile(0.95, h, hist{}); math.Abs(q-5.5) > 1e-9 {
		t.Errorf("p95 = %v, want 5.5", q)
	}
	base := hist{bounds: h.bounds, cum: []float64{50, 50, 50, 50}, count: 50}
	if q := quantile(0.5, h, base); math.Abs(q-0.6625) > 1e-9 {
		t.Errorf("windowed p50 = %v, want 0.6625", q)
	}
	if !math.IsNaN(quantile(0.5, base, base)) {
		t.Error("no observations should be NaN")
	}
}

func TestRetry(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	st := 1
	fin := time.Now().UTC()
	input := `{"taskId": "f1", "taskName": "INSTALL", "config": {"vault": {"password": "pw-0123456789"}, "service": {"action": {"type": "shell"}}}}`
	h.q.add(queue.Record{TaskID: "f1", State: queue.Failed, Family: "automator", Type: "shell", Status: &st, Finished: &fin, Input: json.RawMessage(input)}, input)
	h.q.add(queue.Record{TaskID: "c1", ClusterID: "shop", State: queue.Failed, Family: "automator", Type: "shell", Status: &st, Finished: &fin, Input: json.RawMessage(input)}, input)
	cl := h.client()
	h.login(cl)
	_, page := h.do(cl, "GET", "/ui/tasks/f1", nil)
	if !strings.Contains(page, `href="/ui/tasks/f1/retry"`) || strings.Contains(page, "pw-0123456789") || !strings.Contains(page, "[REDACTED]") {
		t.Fatalf("the failed task's page: no retry, or its input not redacted:\n%.3000s", page)
	}
	_, cpage := h.do(cl, "GET", "/ui/tasks/c1", nil)
	if strings.Contains(cpage, "/ui/tasks/c1/retry") || !strings.Contains(cpage, "runs again when the cluster") {
		t.Fatalf("a cluster's task offers a retry of its own")
	}
	_, confirm := h.do(cl, "GET", "/ui/tasks/f1/retry", nil)
	resp, _ := h.do(cl, "POST", "/ui/tasks/f1/retry", url.Values{"csrf": {csrfOf(t, confirm)}})
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/tasks/") || strings.HasPrefix(loc, "/ui/tasks/f1") {
		t.Fatalf("retry: %d to %q", resp.StatusCode, loc)
	}
	id := strings.TrimPrefix(strings.Split(loc, "?")[0], "/ui/tasks/")
	rec, err := h.q.Get(context.Background(), id)
	if err != nil || !strings.Contains(string(h.q.inputs[id]), "pw-0123456789") {
		t.Fatalf("the new run %s: %v, input %s", id, err, h.q.inputs[id])
	}
	_ = rec
	if resp, _ := h.do(cl, "POST", "/ui/tasks/c1/retry", url.Values{"csrf": {csrfOf(t, confirm)}}); resp.StatusCode != http.StatusConflict {
		t.Fatalf("retry of a cluster's task: %d, want 409", resp.StatusCode)
	}
}

func TestCooprPage(t *testing.T) {
	since := time.Now().Add(-time.Hour)
	h := newHarness(t, Config{Token: testToken, Coopr: func() coopr.Status {
		return coopr.Status{Server: "https://coopr:55055", ID: "loom-h1", API: "127.0.0.1:55056", Capacity: 4, Registered: false,
			RegError: "take: 403", Tenants: []coopr.TenantStatus{{ID: "acme", Workers: 2, Slots: []string{"w1", "w2"}, SyncError: "resource x: " + hostile}},
			Pending: []coopr.PendingFinish{{TaskID: "00000042-001-001", Since: since}}}
	}})
	cl := h.client()
	h.login(cl)
	resp, body := h.do(cl, "GET", "/ui/coopr", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("coopr page: %d", resp.StatusCode)
	}
	for _, want := range []string{"https://coopr:55055", "not registered", "take: 403", "acme", "w1, w2", "00000042-001-001", `href="/ui/coopr"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the Coopr page lacks %q", want)
		}
	}
	if bad := inlineCode(body); bad != "" || strings.Contains(body, "<script>alert") {
		t.Errorf("the Coopr page is unsafe: %s", bad)
	}
	// Without a Coopr link there is no page and no menu entry.
	h2 := newHarness(t, Config{Token: testToken})
	cl2 := h2.client()
	h2.login(cl2)
	if resp, body := h2.do(cl2, "GET", "/ui/coopr", nil); resp.StatusCode != http.StatusNotFound || strings.Contains(body, `href="/ui/coopr"`) {
		t.Errorf("coopr page without a link: %d", resp.StatusCode)
	}
}

// TestScopedTokens: a tenant token signs in and sees its tenant's tasks
// only; a read-only token looks and cannot act; a token removed from the
// file ends its sessions.
func TestScopedTokens(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "tokens.json")
	write := func(body string) {
		if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"tokens": [{"name": "acme-ops", "token": "acme-secret-0123456789", "tenant": "acme"},
		{"name": "acme-view", "token": "view-secret-0123456789", "tenant": "acme", "readOnly": true}]}`)
	set, err := tokens.Load(file, testToken)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{Token: testToken, Tokens: set, DefaultTenant: "default"})
	h.q.add(queue.Record{TaskID: "mine", TenantID: "acme", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	h.q.add(queue.Record{TaskID: "theirs", TenantID: "globex", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	h.q.add(queue.Record{TaskID: "dflt", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	login := func(secret string) *http.Client {
		cl := h.client()
		resp, _ := h.do(cl, "POST", "/ui/login", url.Values{"token": {secret}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("login with %s: %d", secret, resp.StatusCode)
		}
		return cl
	}
	ops := login("acme-secret-0123456789")
	_, list := h.do(ops, "GET", "/ui/tasks", nil)
	if !strings.Contains(list, "/ui/tasks/mine") || strings.Contains(list, "/ui/tasks/theirs") || strings.Contains(list, "/ui/tasks/dflt") {
		t.Fatalf("a tenant token's task list:\n%.3000s", list)
	}
	if !strings.Contains(list, "tenant acme") {
		t.Errorf("the header does not say which token is signed in")
	}
	if resp, _ := h.do(ops, "GET", "/ui/tasks/theirs", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's task: %d, want 404", resp.StatusCode)
	}
	if resp, _ := h.do(ops, "GET", "/ui/events?topic=task:theirs", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another tenant's task's events: %d, want 404", resp.StatusCode)
	}
	_, overview := h.do(ops, "GET", "/ui/", nil)
	if strings.Contains(overview, "Queue depth by plugin type") || strings.Contains(overview, "Worker processes") {
		t.Errorf("a tenant token sees the daemon-wide figures")
	}
	_, page := h.do(ops, "GET", "/ui/tasks/mine/cancel", nil)
	if resp, _ := h.do(ops, "POST", "/ui/tasks/mine/cancel", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the tenant cancels its task: %d", resp.StatusCode)
	}
	if resp, _ := h.do(ops, "POST", "/ui/plugins/reload", url.Values{"csrf": {csrfOf(t, page)}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a tenant token reloads the plugins: %d", resp.StatusCode)
	}
	view := login("view-secret-0123456789")
	h.q.add(queue.Record{TaskID: "mine2", TenantID: "acme", State: queue.Queued, Family: "automator", Type: "shell"}, `{}`)
	_, vpage := h.do(view, "GET", "/ui/tasks/mine2", nil)
	if strings.Contains(vpage, "/ui/tasks/mine2/cancel") || !strings.Contains(vpage, "read-only") {
		t.Fatalf("a read-only token is offered actions")
	}
	if resp, _ := h.do(view, "POST", "/ui/tasks/mine2/cancel", url.Values{"csrf": {csrfOf(t, vpage)}}); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a read-only token cancels: %d", resp.StatusCode)
	}
	// The ops token is removed from the file: its session ends.
	write(`{"tokens": [{"name": "acme-view", "token": "view-secret-0123456789", "tenant": "acme", "readOnly": true}]}`)
	if err := set.Reload(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := h.do(ops, "GET", "/ui/tasks", nil); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a removed token's session still works: %d", resp.StatusCode)
	}
	// The admin token sees every tenant.
	admin := login(testToken)
	_, all := h.do(admin, "GET", "/ui/tasks", nil)
	if !strings.Contains(all, "/ui/tasks/theirs") || !strings.Contains(all, "/ui/tasks/dflt") {
		t.Fatalf("the admin token does not see every tenant")
	}
}
