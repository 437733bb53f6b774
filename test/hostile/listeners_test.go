package hostile

// loomd's own sockets (issue 20 item 1): a plugin's loom.http must reach
// none of the listeners the daemon opens (the API, the Coopr provisioner
// API, the embedded NATS client port, pprof on the API), by any name of
// this machine, directly or through a redirect.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/coopr/coopfake"
)

// ownSetup is what the suite's daemon listens on besides its API.
type ownSetup struct {
	coopr      *coopfake.Server
	cooprAddr  string // --coopr-listen
	natsAddr   string // --nats-listen
	redirector *httptest.Server
}

// ownListenerArgs starts a fake Coopr server and returns the serve flags
// that make the suite's daemon open every listener it can: the Coopr
// provisioner API (with a tenant "victim" of 2 workers, the whole
// --coopr-capacity), the NATS client port and pprof.
func (s *suite) ownListenerArgs(t *testing.T) []string {
	t.Helper()
	srv, err := coopfake.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	s.own = &ownSetup{coopr: srv, cooprAddr: freeAddr(t), natsAddr: freeAddr(t)}
	return []string{"--coopr-server", srv.URL(), "--coopr-listen", s.own.cooprAddr, "--coopr-capacity", "2",
		"--coopr-tenants", "victim:2", "--coopr-poll", "2s", "--coopr-heartbeat", "1s", "--coopr-provisioner-id", "hostile",
		"--nats-listen", s.own.natsAddr, "--pprof"}
}

// ownDialLua calls every target of the task's config and records what
// each call gave: "HTTP <status>", or "<kind>: <message>".
const ownDialLua = `local http = require("loom.http")
local out = {}
for i, t in ipairs(self.task.config.targets) do
  local ok, res = pcall(http.request, t.method, t.url, {timeout = 2, body = t.body, follow_redirects = true})
  if ok then
    out[i] = "HTTP " .. tostring(res.status)
  elseif type(res) == "table" then
    out[i] = tostring(res.kind) .. ": " .. tostring(res.message)
  else
    out[i] = tostring(res)
  end
end
self.result.result.outcomes = out`

// spellingsOf names host:port's port on every address of this machine a
// plugin may try, IPv6 ones in URL form, plus the machine's first
// non-loopback IPv4 and IPv6 addresses when it has them.
func spellingsOf(t *testing.T, addr string) []string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1", "localhost", "[::1]", "[::ffff:127.0.0.1]", "0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "127.0.0.2"}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		var v4, v6 bool
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
				continue
			}
			if n.IP.To4() != nil && !v4 {
				hosts, v4 = append(hosts, n.IP.String()), true
			} else if n.IP.To4() == nil && !v6 {
				hosts, v6 = append(hosts, "["+n.IP.String()+"]"), true
			}
		}
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		out[i] = h + ":" + port
	}
	return out
}

type dialTarget struct {
	Method string `json:"method"`
	URL    string `json:"url"`
	Body   string `json:"body,omitempty"`
}

// dialOwn runs the dial plugin against targets and checks every call was
// refused with kind permission naming the listener; it returns the
// observed outcome.
func (s *suite) dialOwn(t *testing.T, c hcase, listener string, targets []dialTarget) string {
	t.Helper()
	b, _ := json.Marshal(targets)
	id := s.d.submit(t, taskFor(c.pluginType(), s.d.nextID(c.name), `"targets": `+string(b)))
	r := s.d.wait(t, id)
	if r.State != "succeeded" {
		t.Fatalf("the dial plugin did not run: %s", r)
	}
	res, _ := r.Result["result"].(map[string]any)
	outs, _ := res["outcomes"].([]any)
	if len(outs) != len(targets) {
		t.Fatalf("%d outcomes for %d targets: %v", len(outs), len(targets), res)
	}
	refusedN := 0
	for i, o := range outs {
		msg := fmt.Sprint(o)
		if strings.HasPrefix(msg, "permission: ") && strings.Contains(msg, listener) {
			refusedN++
			continue
		}
		t.Errorf("%s %s: %s, want a permission error naming %s", targets[i].Method, targets[i].URL, clip(msg, 300), listener)
	}
	return fmt.Sprintf("%d of %d refused: %s", refusedN, len(outs), clip(fmt.Sprint(outs[0]), 160))
}

func ownListenerCases() []hcase {
	dial := &plugin{body: ownDialLua, timeout: "60s"}
	expect := func(what string) string {
		return "every spelling of this machine (127.0.0.1, localhost, [::1], [::ffff:127.0.0.1], 0.0.0.0, [::], [::ffff:0.0.0.0], 127.0.0.2, its own addresses) fails with kind permission naming " + what + "; nothing reaches it"
	}
	return []hcase{
		{name: "own-api-every-spelling", class: "own listeners", plugin: dial,
			attack: "a plugin DELETEs another tenant's task through loomd's API (`--listen`) at every address of the machine",
			expect: expect("the API"),
			run: func(t *testing.T, s *suite) string {
				victim := s.d.submit(t, strings.Replace(ordinaryTask(s.d.nextID("victim")), `{`, `{"tenantId": "victim", `, 1))
				s.d.wait(t, victim)
				var targets []dialTarget
				for _, a := range spellingsOf(t, s.d.addr) {
					targets = append(targets, dialTarget{Method: "DELETE", URL: "http://" + a + "/v1/tasks/" + victim})
				}
				obs := s.dialOwn(t, hcase{name: "own-api-every-spelling"}, "API", targets)
				if code, b := s.d.call("GET", "/v1/tasks/"+victim, "", nil); code != http.StatusOK {
					t.Errorf("the victim's task is gone: GET = %d %s", code, clip(string(b), 200))
				}
				return obs
			}},
		{name: "own-pprof", class: "own listeners", plugin: dial,
			attack: "a plugin reads `/debug/pprof/goroutine?debug=2` (stacks) on the API port at every address",
			expect: expect("the API"),
			run: func(t *testing.T, s *suite) string {
				var targets []dialTarget
				for _, a := range spellingsOf(t, s.d.addr) {
					targets = append(targets, dialTarget{Method: "GET", URL: "http://" + a + "/debug/pprof/goroutine?debug=2"})
				}
				return s.dialOwn(t, hcase{name: "own-pprof"}, "API", targets)
			}},
		{name: "own-coopr-api-delete-tenant", class: "own listeners", plugin: dial,
			attack: "a plugin sends `DELETE /v2/tenants/victim` and `PUT /v2/tenants/bomb {\"workers\":300000}` to the Coopr provisioner API (`--coopr-listen`) at every address",
			expect: expect("the Coopr provisioner API") + "; the victim keeps its 2 workers",
			run: func(t *testing.T, s *suite) string {
				var targets []dialTarget
				for _, a := range spellingsOf(t, s.own.cooprAddr) {
					targets = append(targets, dialTarget{Method: "DELETE", URL: "http://" + a + "/v2/tenants/victim"},
						dialTarget{Method: "PUT", URL: "http://" + a + "/v2/tenants/bomb", Body: `{"workers": 300000}`})
				}
				obs := s.dialOwn(t, hcase{name: "own-coopr-api-delete-tenant"}, "Coopr provisioner API", targets)
				usage := s.cooprUsage(t)
				if usage["victim"] != 2 || usage["bomb"] != 0 {
					t.Errorf("tenant workers after the attack: %v, want victim 2 and no bomb", usage)
				}
				return obs + fmt.Sprintf("; workers %v", usage)
			}},
		{name: "own-nats-port", class: "own listeners", plugin: dial,
			attack: "a plugin connects to the embedded NATS client port (`--nats-listen`) at every address",
			expect: expect("the NATS client port"),
			run: func(t *testing.T, s *suite) string {
				var targets []dialTarget
				for _, a := range spellingsOf(t, s.own.natsAddr) {
					targets = append(targets, dialTarget{Method: "GET", URL: "http://" + a + "/"})
				}
				return s.dialOwn(t, hcase{name: "own-nats-port"}, "NATS", targets)
			}},
		{name: "own-api-redirect", class: "own listeners", plugin: dial,
			attack: "an outside server the plugin may call redirects it (307, keeping DELETE) to loomd's API at 0.0.0.0, [::] and localhost",
			expect: "each redirect fails with kind permission naming the API: the check is on the address dialled after every redirect",
			run: func(t *testing.T, s *suite) string {
				victim := s.d.submit(t, ordinaryTask(s.d.nextID("victim")))
				s.d.wait(t, victim)
				_, port, _ := net.SplitHostPort(s.d.addr)
				redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					http.Redirect(w, r, "http://"+r.URL.Query().Get("to")+":"+port+"/v1/tasks/"+victim, http.StatusTemporaryRedirect)
				}))
				defer redirector.Close()
				var targets []dialTarget
				for _, h := range []string{"0.0.0.0", "[::]", "[::ffff:0.0.0.0]", "localhost"} {
					targets = append(targets, dialTarget{Method: "DELETE", URL: redirector.URL + "/go?to=" + h})
				}
				obs := s.dialOwn(t, hcase{name: "own-api-redirect"}, "API", targets)
				if code, _ := s.d.call("GET", "/v1/tasks/"+victim, "", nil); code != http.StatusOK {
					t.Errorf("the victim's task is gone: GET = %d", code)
				}
				return obs
			}},
	}
}

// cooprUsage is the provisioner's own account of its tenants' workers
// (GET /heartbeat on the provisioner API, as the Coopr server reads it).
func (s *suite) cooprUsage(t *testing.T) map[string]int {
	t.Helper()
	resp, err := client.Get("http://" + s.own.cooprAddr + "/heartbeat")
	if err != nil {
		t.Fatalf("GET /heartbeat on the provisioner API: %v", err)
	}
	defer resp.Body.Close()
	var hb struct {
		Usage map[string]int `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&hb); err != nil {
		t.Fatalf("decoding /heartbeat: %v", err)
	}
	return hb.Usage
}
