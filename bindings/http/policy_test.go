package http_test

import (
	"encoding/base64"
	"io"
	"log"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loomrt/loom/bindings"
	loomhttp "github.com/loomrt/loom/bindings/http"
)

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &nethttp.Server{Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"path":"`+r.URL.Path+`","host":"`+r.Host+`"}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"SOCK": sock})
	// No permissions.http grants every host but no socket: a local
	// socket (docker.sock) can be root on the machine.
	if le := e.runErr(t, `http.get("http://docker/_ping", {unix_socket = SOCK})`); le.Kind != "permission" || !strings.Contains(le.Message, `add "unix:`+sock) {
		t.Errorf("a socket without an allow-list entry: %s: %s", le.Kind, le.Message)
	}
	e.h.Perms = bindings.Permissions{HTTP: []string{"unix:" + sock}}
	e.run(t, `
		local v = http.get("http://docker/v1.43/info", {unix_socket = SOCK}):json()
		assert(v.path == "/v1.43/info" and v.host == "docker", v.path .. " " .. v.host)
	`)

	// With an allow-list, the socket must be granted by path; the URL's
	// nominal host does not matter.
	e.h.Perms = bindings.Permissions{HTTP: []string{"api.example.com"}}
	le := e.runErr(t, `http.get("http://api.example.com/info", {unix_socket = SOCK})`)
	if le.Kind != "permission" || !strings.Contains(le.Message, sock) {
		t.Errorf("got %s: %s", le.Kind, le.Message)
	}
	e.h.Perms = bindings.Permissions{HTTP: []string{"unix:" + sock}}
	e.run(t, `assert(http.get("http://docker/_ping", {unix_socket = SOCK}).status == 200)`)
}

func TestAllowList(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		targetHits.Add(1)
		io.WriteString(w, "secret stuff")
	}))
	defer target.Close()
	_, port, _ := net.SplitHostPort(target.Listener.Addr().String())
	// The same server reached by a name the allow-list does not grant.
	otherURL := "http://localhost:" + port

	front := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		switch r.URL.Path {
		case "/away":
			nethttp.Redirect(w, r, otherURL+"/loot", nethttp.StatusFound)
		case "/here":
			nethttp.Redirect(w, r, "/ok", nethttp.StatusFound)
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer front.Close()

	e := newEnv(t, loomhttp.Options{})
	e.h.Perms = bindings.Permissions{HTTP: []string{"api.example.com", "*.example.net", "127.0.0.1"}}
	e.set(map[string]string{"FRONT": front.URL, "OTHER": otherURL})

	e.run(t, `assert(http.get(FRONT .. "/here").body == "ok")`)

	le := e.runErr(t, `http.get(OTHER .. "/loot")`)
	if le.Kind != "permission" {
		t.Fatalf("got %s: %s", le.Kind, le.Message)
	}
	for _, want := range []string{`host "localhost"`, `"api.example.com"`, `"*.example.net"`, "GET " + otherURL + "/loot"} {
		if !strings.Contains(le.Message, want) {
			t.Errorf("message %q lacks %s", le.Message, want)
		}
	}
	if le.Fields["host"] != "localhost" {
		t.Errorf("host field = %v", le.Fields["host"])
	}

	le = e.runErr(t, `http.get(FRONT .. "/away")`)
	if le.Kind != "permission" || !strings.Contains(le.Message, "redirected to "+otherURL+"/loot") {
		t.Errorf("redirect: got %s: %s", le.Kind, le.Message)
	}
	if n := targetHits.Load(); n != 0 {
		t.Errorf("the disallowed host was reached %d times", n)
	}
}

func TestRedaction(t *testing.T) {
	const (
		bearer    = "bearer-TOKEN-4f9a1c"
		basicPass = "basic-PASS-77e2"
		urlPass   = "url-PASS-a1b2"
		hdrToken  = "hdr-TOKEN-d00d"
	)
	// A server that echoes the credentials it receives, as badly behaved
	// APIs do in their error bodies.
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.WriteHeader(nethttp.StatusUnauthorized)
		io.WriteString(w, "denied: authorization="+r.Header.Get("Authorization")+" x-auth-token="+r.Header.Get("X-Auth-Token"))
	}))
	defer srv.Close()
	hostport := strings.TrimPrefix(srv.URL, "http://")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	deadAddr := ln.Addr().String()
	ln.Close()

	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{
		"URL": srv.URL, "PWURL": "http://robot:" + urlPass + "@" + hostport + "/x",
		"DEAD":   "http://robot:" + urlPass + "@" + deadAddr + "/x",
		"BEARER": bearer, "BASIC": basicPass, "HDR": hdrToken,
	})
	var msgs []string
	for _, code := range []string{
		`http.get(URL, {bearer = BEARER, check = true})`,
		`http.get(URL, {basic_auth = {user = "robot", password = BASIC}, check = true})`,
		`http.get(URL, {basic_auth = {"robot", BASIC}, check = true})`,
		`http.get(PWURL, {check = true})`,
		`http.get(DEAD, {bearer = BEARER, retries = 1, retry_delay = 0.01})`,
		`http.get(URL, {headers = {Authorization = "Token " .. HDR, ["X-Auth-Token"] = HDR}, check = true})`,
		`http.get(URL, {bearer = BEARER, timout = 1})`, // config error after credentials were seen
	} {
		le := e.runErr(t, code)
		msgs = append(msgs, le.Message)
		if body, ok := le.Fields["body"].(string); ok {
			msgs = append(msgs, body)
			if !strings.Contains(body, "[REDACTED]") {
				t.Errorf("%s: echoed credentials not scrubbed from body excerpt %q", code, body)
			}
		}
	}
	// The response table is data, not an error: it is returned as is, and
	// the runtime's secret redaction covers results.
	e.run(t, `resp_status = http.get(URL, {bearer = BEARER}).status`)

	everything := strings.Join(msgs, "\n") + "\n" + e.h.Logs()
	basicB64 := base64.StdEncoding.EncodeToString([]byte("robot:" + basicPass))
	for _, s := range []string{bearer, basicPass, urlPass, hdrToken, basicB64} {
		if strings.Contains(everything, s) {
			t.Errorf("secret %q leaked into errors or logs:\n%s", s, everything)
		}
	}
	registered := strings.Join(e.h.Secrets(), "\n")
	for _, s := range []string{bearer, basicPass, urlPass, hdrToken, basicB64} {
		if !strings.Contains(registered, s) {
			t.Errorf("secret %q not registered with the host", s)
		}
	}
	if !strings.Contains(e.h.Logs(), `"msg":"http request"`) {
		t.Errorf("requests were not debug-logged:\n%s", e.h.Logs())
	}
}
