package http_test

import (
	"fmt"
	"io"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loomrt/loom/bindings"
	loomhttp "github.com/loomrt/loom/bindings/http"
	"github.com/loomrt/loom/bindings/listeners"
)

// ownServer is a listener of "the daemon", registered under name, that
// counts the requests that reach it.
type ownServer struct {
	name string
	port string
	hits atomic.Int32
	ln   net.Listener
}

func startOwn(t *testing.T, reg *listeners.Registry, name, network, addr string) *ownServer {
	t.Helper()
	ln, err := reg.Listen(name, network, addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &ownServer{name: name, ln: ln}
	if network == "tcp" {
		_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	}
	srv := &nethttp.Server{Handler: nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		s.hits.Add(1)
		io.WriteString(w, "other tenants' tasks")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

// spellings are the ways of naming this machine a plugin may try, IPv6
// ones in URL form; the machine's own non-loopback addresses are added
// when it has any.
func spellings(t *testing.T) []string {
	out := []string{"127.0.0.1", "localhost", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "127.1.2.3"}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Logf("no interface addresses: %v", err)
		return out
	}
	var v4, v6 bool
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		switch {
		case n.IP.To4() != nil && !v4:
			out = append(out, n.IP.String(), "[::ffff:"+n.IP.String()+"]")
			v4 = true
		case n.IP.To4() == nil && !v6:
			out = append(out, "["+n.IP.String()+"]")
			v6 = true
		}
	}
	if !v4 && !v6 {
		t.Log("this machine has no non-loopback interface address: that spelling is not tried")
	}
	return out
}

// TestOwnListenersRefusedOnEverySpelling: a plugin reaches none of the
// process's registered listeners, by any name of this machine, whatever
// its allow-list says, and the listener never sees the request.
func TestOwnListenersRefusedOnEverySpelling(t *testing.T) {
	reg := listeners.New()
	own := []*ownServer{
		startOwn(t, reg, "API (--listen)", "tcp", "127.0.0.1:0"),
		startOwn(t, reg, "Coopr provisioner API (--coopr-listen)", "tcp", "0.0.0.0:0"),
		startOwn(t, reg, "NATS client port (--nats-listen)", "tcp", "[::1]:0"),
	}
	e := newEnv(t, loomhttp.Options{Listeners: reg})
	for _, allow := range [][]string{nil, {"*"}} {
		e.h.Perms = bindings.Permissions{HTTP: allow}
		for _, s := range own {
			for _, host := range spellings(t) {
				u := fmt.Sprintf("http://%s:%s/v1/tasks", host, s.port)
				le := e.runErr(t, fmt.Sprintf(`http.request("DELETE", %q, {timeout = 2})`, u))
				if le.Kind != "permission" || !strings.Contains(le.Message, s.name) || !strings.Contains(le.Message, "plugins may not call the daemon") {
					t.Errorf("allow %v: DELETE %s: %s: %s, want a permission error naming %s", allow, u, le.Kind, le.Message, s.name)
				}
			}
		}
	}
	for _, s := range own {
		if n := s.hits.Load(); n != 0 {
			t.Errorf("%s answered %d requests from the plugin", s.name, n)
		}
	}
}

// TestOwnListenerAfterRedirect: an outside server (here, an unregistered
// local one) that redirects to loomd's own API does not get the plugin
// through.
func TestOwnListenerAfterRedirect(t *testing.T) {
	reg := listeners.New()
	api := startOwn(t, reg, "API (--listen)", "tcp", "127.0.0.1:0")
	for _, host := range []string{"0.0.0.0", "[::]", "localhost", "127.0.0.1"} {
		target := fmt.Sprintf("http://%s:%s/v1/tasks/victim", host, api.port)
		redirector := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			nethttp.Redirect(w, r, target, nethttp.StatusTemporaryRedirect)
		}))
		e := newEnv(t, loomhttp.Options{Listeners: reg})
		e.set(map[string]string{"URL": redirector.URL})
		le := e.runErr(t, `http.request("DELETE", URL .. "/innocent", {timeout = 2, follow_redirects = true})`)
		if le.Kind != "permission" || !strings.Contains(le.Message, "API (--listen)") {
			t.Errorf("redirect to %s: %s: %s, want permission", target, le.Kind, le.Message)
		}
		redirector.Close()
	}
	if n := api.hits.Load(); n != 0 {
		t.Errorf("the API answered %d redirected requests", n)
	}
}

// TestOwnListenerOpenedLater: the registry is read at dial time, so a
// listener opened after the binding was built (the Coopr API starts after
// the runtime) is refused too, and one that closed is reachable again by
// whatever listens there next.
func TestOwnListenerOpenedLater(t *testing.T) {
	reg := listeners.New()
	e := newEnv(t, loomhttp.Options{Listeners: reg})
	late := startOwn(t, reg, "Coopr provisioner API (--coopr-listen)", "tcp", "127.0.0.1:0")
	e.set(map[string]string{"URL": "http://0.0.0.0:" + late.port + "/v2/tenants/victim"})
	if le := e.runErr(t, `http.request("DELETE", URL, {timeout = 2})`); le.Kind != "permission" {
		t.Errorf("a listener opened after the binding: %s: %s", le.Kind, le.Message)
	}
	late.ln.Close()
	if ls, _ := reg.List(); len(ls) != 0 {
		t.Errorf("a closed listener is still registered: %v", ls)
	}
}

// TestOwnUnixSocket: a registered unix socket is refused even when the
// plugin's allow-list grants its path.
func TestOwnUnixSocket(t *testing.T) {
	reg := listeners.New()
	sock := filepath.Join(t.TempDir(), "loomd.sock")
	s := startOwn(t, reg, "API socket", "unix", sock)
	e := newEnv(t, loomhttp.Options{Listeners: reg})
	e.h.Perms = bindings.Permissions{HTTP: []string{"unix:" + sock}}
	e.set(map[string]string{"SOCK": sock})
	if le := e.runErr(t, `http.get("http://loomd/v1/tasks", {unix_socket = SOCK})`); le.Kind != "permission" || !strings.Contains(le.Message, "API socket") {
		t.Errorf("own unix socket: %s: %s", le.Kind, le.Message)
	}
	if n := s.hits.Load(); n != 0 {
		t.Errorf("the socket answered %d requests", n)
	}
}

// TestOwnListenerThroughProxy: a proxy would connect to the target for
// the plugin, so a target that is an own listener is refused before the
// proxy is asked.
func TestOwnListenerThroughProxy(t *testing.T) {
	reg := listeners.New()
	api := startOwn(t, reg, "API (--listen)", "tcp", "127.0.0.1:0")
	var proxied atomic.Int32
	proxy := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		proxied.Add(1)
		io.WriteString(w, "via proxy")
	}))
	defer proxy.Close()
	e := newEnv(t, loomhttp.Options{Listeners: reg, Proxy: func(*nethttp.Request) (*url.URL, error) { return url.Parse(proxy.URL) }})
	for _, host := range []string{"0.0.0.0", "[::ffff:0.0.0.0]", "localhost"} {
		u := fmt.Sprintf("http://%s:%s/v1/tasks", host, api.port)
		if le := e.runErr(t, fmt.Sprintf(`http.get(%q, {timeout = 2})`, u)); le.Kind != "permission" {
			t.Errorf("%s through a proxy: %s: %s", u, le.Kind, le.Message)
		}
	}
	if n := proxied.Load(); n != 0 {
		t.Errorf("the proxy was asked %d times", n)
	}
	// Other targets still go through it.
	e.run(t, `assert(http.get("http://api.example.test/x").body == "via proxy")`)
}
