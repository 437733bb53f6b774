package http_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/bindingstest"
	loomhttp "github.com/loomrt/loom/bindings/http"
	"github.com/loomrt/loom/bindings/luaval"
)

// env is one binding, one fake host and one Lua state with "http" loaded.
type env struct {
	b *loomhttp.Binding
	h *bindingstest.Host
	L *lua.LState
}

func newEnv(t *testing.T, opts loomhttp.Options) *env {
	t.Helper()
	b := loomhttp.New(opts)
	t.Cleanup(func() { b.Close() })
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, b)
	bindingstest.Run(t, L, `http = require("loom.http")`)
	return &env{b: b, h: h, L: L}
}

// set defines Lua globals.
func (e *env) set(kv map[string]string) {
	for k, v := range kv {
		e.L.SetGlobal(k, lua.LString(v))
	}
}

func (e *env) run(t *testing.T, code string) {
	t.Helper()
	bindingstest.Run(t, e.L, code)
}

// luaErr is a structured error raised by the binding.
type luaErr struct {
	Kind, Message string
	Fields        map[string]any
}

// runErr runs code that must raise a loom error and returns it.
func (e *env) runErr(t *testing.T, code string) luaErr {
	t.Helper()
	err := e.L.DoString(code)
	if err == nil {
		t.Fatalf("lua: expected an error, got none")
	}
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		t.Fatalf("lua: error %T %v is not an ApiError", err, err)
	}
	tbl, ok := ae.Object.(*lua.LTable)
	if !ok {
		t.Fatalf("lua: error is not a structured table: %v", err)
	}
	v, cerr := luaval.ToGo(e.L, tbl, luaval.Limits{})
	if cerr != nil {
		t.Fatalf("converting error table: %v", cerr)
	}
	m := v.(map[string]any)
	out := luaErr{Fields: m}
	out.Kind, _ = m["kind"].(string)
	out.Message, _ = m["message"].(string)
	return out
}

// global converts a Lua global to Go.
func (e *env) global(t *testing.T, name string) any {
	t.Helper()
	v, err := luaval.ToGo(e.L, e.L.GetGlobal(name), luaval.Limits{})
	if err != nil {
		t.Fatalf("global %s: %v", name, err)
	}
	return v
}

func TestJSONRoundTrip(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.Method != "POST" || r.URL.Path != "/v2/droplets" {
			nethttp.Error(w, "wrong route "+r.Method+" "+r.URL.Path, 400)
			return
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			nethttp.Error(w, "content-type "+ct, 415)
			return
		}
		if got := r.Header.Get("Authorization"); got != "Bearer tok-123" {
			nethttp.Error(w, "auth", 401)
			return
		}
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			nethttp.Error(w, err.Error(), 400)
			return
		}
		in["id"] = "d-1"
		in["query"] = r.URL.RawQuery
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(map[string]any{"droplet": in})
	}))
	defer srv.Close()

	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `
		local resp = http.post(URL .. "/v2/droplets", {
			bearer = "tok-123",
			query = {tag = "loom", n = 2},
			json = {name = "web-1", size = "s-1vcpu-1gb", tags = {"a", "b"}, backups = false},
		})
		status, ok = resp.status, resp.ok
		ctype, multi = resp.headers["content-type"], resp.headers["x-multi"]
		got = resp:json().droplet
	`)
	if s := e.global(t, "status"); s != float64(201) {
		t.Fatalf("status = %v, want 201", s)
	}
	if ok := e.global(t, "ok"); ok != true {
		t.Errorf("ok = %v, want true", ok)
	}
	if ct := e.global(t, "ctype"); ct != "application/json" {
		t.Errorf("content-type = %v", ct)
	}
	if m := e.global(t, "multi"); m != "a, b" {
		t.Errorf("x-multi = %q, want %q", m, "a, b")
	}
	want := map[string]any{
		"name": "web-1", "size": "s-1vcpu-1gb", "tags": []any{"a", "b"}, "backups": false,
		"id": "d-1", "query": "n=2&tag=loom",
	}
	if got := e.global(t, "got"); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %#v\nwant %#v", got, want)
	}
}

func TestStatusIsDataUnlessCheck(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		io.WriteString(w, `{"id":"not_found","message":"The resource you were accessing could not be found."}`)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `
		local resp = http.get(URL .. "/v2/droplets/1")
		assert(resp.status == 404, "status " .. tostring(resp.status))
		assert(resp.ok == false)
		assert(resp:json().id == "not_found")
	`)
	le := e.runErr(t, `http.get(URL .. "/v2/droplets/1", {check = true})`)
	if le.Kind != "http" {
		t.Fatalf("kind = %q, want http (%s)", le.Kind, le.Message)
	}
	if le.Fields["status"] != float64(404) {
		t.Errorf("status field = %v", le.Fields["status"])
	}
	for _, want := range []string{"GET " + srv.URL + "/v2/droplets/1", "HTTP 404", "could not be found"} {
		if !strings.Contains(le.Message, want) {
			t.Errorf("message %q lacks %q", le.Message, want)
		}
	}
	if body, _ := le.Fields["body"].(string); !strings.Contains(body, "not_found") {
		t.Errorf("body excerpt = %q", body)
	}
}

func TestJSONEmptyAndInvalid(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if r.URL.Path == "/empty" {
			w.WriteHeader(204)
			return
		}
		io.WriteString(w, "<html>not json</html>")
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.delete(URL .. "/empty"):json() == nil)`)
	le := e.runErr(t, `http.get(URL .. "/html"):json()`)
	if le.Kind != "http" || !strings.Contains(le.Message, "decoding JSON response from "+srv.URL+"/html") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}

func TestHeadersQueryAndRequestFunction(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s|%s|%s|%s|%s|%s", r.Method, r.URL.RawQuery, r.Header.Get("X-One"),
			strings.Join(r.Header.Values("X-Many"), ","), r.Header.Get("User-Agent"), body)
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{UserAgent: "loom-test/1"})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `
		got = http.request("purge", URL .. "/x?a=1", {
			headers = {["X-One"] = "1", ["x-many"] = {"p", "q"}},
			query = {b = {"2", "3"}},
			body = "raw body",
		}).body
	`)
	want := "PURGE|a=1&b=2&b=3|1|p,q|loom-test/1|raw body"
	if got := e.global(t, "got"); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestConfigErrors(t *testing.T) {
	e := newEnv(t, loomhttp.Options{})
	for _, tc := range []struct{ code, want string }{
		{`http.get("http://127.0.0.1:1/", {timout = 3})`, `unknown option timout (did you mean "timeout"?)`},
		{`http.post("http://127.0.0.1:1/", {body = "x", json = {}})`, "exclusive"},
		{`http.request("BAD METHOD", "http://127.0.0.1:1/")`, "invalid method"},
		{`http.get("ftp://127.0.0.1/")`, "scheme must be http or https"},
		{`http.get("http://127.0.0.1:1/", {retries = 1000})`, "more than the limit"},
		{`http.get("http://127.0.0.1:1/", {tls = {client_cert = "x"}})`, "go together"},
		{`http.get("http://127.0.0.1:1/", {tls = {ca = "not pem"}})`, "no PEM certificate"},
		{`http.get("http://127.0.0.1:1/", {headers = {["X-A"] = "a\r\nX-B: b"}})`, "line break"},
		{`http.get("http://127.0.0.1:1/", {json = {f = function() end}})`, "encoding opts.json"},
		{`http.get(42)`, "url must be a string"},
	} {
		le := e.runErr(t, tc.code)
		if le.Kind != "config" || !strings.Contains(le.Message, tc.want) {
			t.Errorf("%s:\n got %s: %s\nwant config error containing %q", tc.code, le.Kind, le.Message, tc.want)
		}
	}
}

func TestConnectErrorNamesMethodURLAndCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": "http://admin:hunter2pass@" + addr + "/v1/things?api_key=k3y-value&page=2"})
	le := e.runErr(t, `http.put(URL, {body = "x"})`)
	if le.Kind != "connect" {
		t.Fatalf("kind = %q (%s)", le.Kind, le.Message)
	}
	wantURL := "http://" + addr + "/v1/things?api_key=REDACTED&page=2"
	if !strings.HasPrefix(le.Message, "PUT "+wantURL+": ") || !strings.Contains(le.Message, "refused") {
		t.Errorf("message = %q, want PUT %s: ...refused", le.Message, wantURL)
	}
	if le.Fields["url"] != wantURL || le.Fields["method"] != "PUT" {
		t.Errorf("fields = %v", le.Fields)
	}
	for _, secret := range []string{"hunter2pass", "k3y-value", "admin"} {
		if strings.Contains(le.Message, secret) || strings.Contains(e.h.Logs(), secret) {
			t.Errorf("%q leaked: message %q logs %s", secret, le.Message, e.h.Logs())
		}
	}
}

func TestRedirects(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/loop":
			nethttp.Redirect(w, r, "/loop", nethttp.StatusFound)
		case "/old":
			nethttp.Redirect(w, r, "/new", nethttp.StatusMovedPermanently)
		default:
			io.WriteString(w, "new place")
		}
	}))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{MaxRedirects: 3})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `
		local r = http.get(URL .. "/old")
		assert(r.status == 200 and r.body == "new place" and r.url == URL .. "/new", r.url)
		local r2 = http.get(URL .. "/old", {follow_redirects = false})
		assert(r2.status == 301 and r2.headers["location"] == "/new", r2.status)
	`)
	hits.Store(0)
	le := e.runErr(t, `http.get(URL .. "/loop", {follow_redirects = 50})`)
	if le.Kind != "http" || !strings.Contains(le.Message, "stopped after 3 redirects") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
	if n := hits.Load(); n != 4 {
		t.Errorf("server hits = %d, want 4 (1 + 3 redirects)", n)
	}
}

func TestClientReusedAcrossVMs(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s nethttp.ConnState) {
		if s == nethttp.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	b := loomhttp.New(loomhttp.Options{})
	defer b.Close()
	for vm := 0; vm < 3; vm++ { // three VMs, as three tasks would use
		h := bindingstest.NewHost(t)
		L := bindingstest.NewState(t, h, b)
		L.SetGlobal("URL", lua.LString(srv.URL))
		bindingstest.Run(t, L, `
			local http = require("loom.http")
			for i = 1, 3 do assert(http.get(URL).body == "ok") end
		`)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("server saw %d connections for 9 sequential requests from 3 VMs, want 1", n)
	}
	if s := b.Stats(); s["requests"] != 9 {
		t.Errorf("stats = %v", s)
	}
}

func TestProxyOption(t *testing.T) {
	var sawAbsolute atomic.Value
	proxy := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		sawAbsolute.Store(r.RequestURI)
		io.WriteString(w, "via proxy")
	}))
	defer proxy.Close()
	e := newEnv(t, loomhttp.Options{Proxy: func(*nethttp.Request) (*url.URL, error) { return url.Parse(proxy.URL) }})
	e.run(t, `assert(http.get("http://api.example.test/v1/x").body == "via proxy")`)
	if got := sawAbsolute.Load(); got != "http://api.example.test/v1/x" {
		t.Errorf("proxy saw request-uri %v", got)
	}
}

func TestSpecMatchesModule(t *testing.T) {
	b := loomhttp.New(loomhttp.Options{})
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, b)
	bindingstest.Run(t, L, `http = require("loom.http")`)
	mod := L.GetGlobal("http").(*lua.LTable)
	spec := b.Spec()
	if spec.Name != "http" {
		t.Fatalf("name = %q", spec.Name)
	}
	inSpec := map[string]bool{}
	for _, f := range spec.Funcs {
		inSpec[f.Name] = true
		if f.Doc == "" || f.Returns == nil {
			t.Errorf("%s: incomplete spec %+v", f.Name, f)
		}
		if strings.HasPrefix(f.Name, "resp:") {
			continue
		}
		if _, ok := mod.RawGetString(f.Name).(*lua.LFunction); !ok {
			t.Errorf("spec lists %s, module lacks it", f.Name)
		}
	}
	mod.ForEach(func(k, _ lua.LValue) {
		if !inSpec[k.String()] {
			t.Errorf("module has %s, spec lacks it", k)
		}
	})
	var _ bindings.Binding = b
}

// TestDescriptorGuard (issue 20 item 7): with the process's descriptors
// nearly used up, a request that needs a new connection fails with kind
// limit and says why, instead of "too many open files".
func TestDescriptorGuard(t *testing.T) {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL).status == 200)`)
	open, _ := bindings.Descriptors()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	lim := syscall.Rlimit{Cur: uint64(open + 10), Max: old.Max} // under the reserve of 32
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	defer syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	le := e.runErr(t, `http.get(URL, {headers = {Connection = "close"}}); http.get(URL)`)
	if le.Kind != "limit" || !strings.Contains(le.Message, "file descriptors open (RLIMIT_NOFILE") {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
}
