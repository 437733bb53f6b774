// Package openstackfake is a strict fake of the OpenStack APIs the
// openstack provider plugin uses: Keystone v3 tokens (password and
// application credential) and Rackspace's identity service (Keystone v2.0
// tokens for an API key, at /identity/v2.0) with a service catalog, Nova servers and
// flavors, Neutron ports, networks and floating IPs, and Glance images, on
// one loopback HTTP server with devstack's path layout (/identity/v3,
// /compute/v2.1, /network, /image).
//
// It is strict where the real services are: a service call without a live
// token gets 401; a request body with a field the API does not define gets
// Nova's or Neutron's 400; a server names a flavor, image, key pair,
// security group and networks that exist. Its answers have the documented
// shapes; the plugin's tests (plugins/openstack) check them, and the
// plugin's requests, against gophercloud, OpenStack's Go SDK.
//
// The servers it makes get the addresses of Options.Machines in turn:
// give it the addresses of real sshd hosts (internal/sshdtest) and the
// automators that follow the provider really run on them.
package openstackfake

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/cloudfake/fakehttp"
)

// Options configure the fake cloud. Zero values get the defaults noted.
type Options struct {
	// Username, Password, UserDomain ("Default"): the one password user.
	Username, Password, UserDomain string
	// Project, ProjectID ("p-" + random), ProjectDomain ("Default").
	Project, ProjectID, ProjectDomain string
	// AppCredentials maps application credential ids to their secrets.
	AppCredentials map[string]string
	// Region of every catalog endpoint ("RegionOne").
	Region string
	// TokenTTL is how long a token lives (1h).
	TokenTTL time.Duration
	// KeyPairs, SecurityGroups ("default"), Networks (id -> name;
	// default one private network) and Flavors (id -> name; default
	// "1": m1.tiny, "2": m1.small) exist in the project.
	KeyPairs       []string
	SecurityGroups []string
	Networks       map[string]string
	Flavors        map[string]string
	// Images maps image ids to names (default one Debian image).
	Images map[string]string
	// ExternalNetwork is the floating IP pool's network ("ext-net",
	// named "public"); FloatingIPs are the addresses it hands out (default
	// 203.0.113.10 onwards).
	ExternalNetwork string
	FloatingIPs     []string
	// Machines are the fixed addresses servers get, in order; a server
	// made when none is left goes to ERROR ("No valid host was found"),
	// as Nova's scheduler says. Empty: 10.0.0.10 onwards, never exhausted.
	Machines []string
	// BuildReads is how many reads of a new server answer BUILD before it
	// is ACTIVE (default 1; -1: ACTIVE at once).
	BuildReads int
	// AdminPass makes Nova return a generated root password on create
	// (Rackspace-style clouds).
	AdminPass bool
	// APIKeys maps user names to the API keys Rackspace's identity
	// service (POST /identity/v2.0/tokens, RAX-KSKEY:apiKeyCredentials)
	// accepts. Its catalog is Rackspace's: v2.0 endpoints (publicURL,
	// internalURL) in Region, a first-generation compute endpoint without
	// a region, and no Neutron (type rax:network instead).
	APIKeys map[string]string
}

// Exchange is one request and the fake's answer.
type Exchange struct {
	Method, Path string
	Query        map[string][]string
	Header       http.Header
	Body         []byte
	Status       int
	RespHeader   http.Header
	RespBody     []byte
	// Service is "identity", "compute", "network" or "image".
	Service string
}

// Fault is a canned failure for the next matching request.
type Fault struct {
	Method, Path string // Path is a prefix of the request path below the service root ("/servers")
	Status       int
	Body         string
	RetryAfter   string
	// Drop closes the connection without an answer; with After, the
	// request is carried out first (the answer is lost on the way back).
	Drop, After bool
	Times       int
}

// Server is a server as the fake keeps it.
type Server struct {
	ID, Name, Status, KeyName, AZ string
	Metadata                      map[string]string
	Flavor, Image                 string
	Networks                      []string
	Groups                        []string
	Fixed                         string
	UserData                      string
	ConfigDrive                   bool
	Created                       time.Time
	Reads                         int
	Fault                         string
	AdminPass                     string
}

// FloatingIP is an allocated floating IP.
type FloatingIP struct {
	ID, Address, PortID, FixedIP, Description, Network string
}

// Fake is a running fake cloud.
type Fake struct {
	o   Options
	srv *httptest.Server

	mu       sync.Mutex
	tokens   map[string]time.Time
	servers  map[string]*Server
	order    []string
	fips     map[string]*FloatingIP
	fipOrder []string
	machine  int
	floating int
	log      []Exchange
	faults   []*Fault
	check    func(Exchange) error
	problems []string
	issued   int
	seq      int
}

// Start starts the fake on 127.0.0.1.
func Start(o Options) *Fake {
	if o.UserDomain == "" {
		o.UserDomain = "Default"
	}
	if o.ProjectDomain == "" {
		o.ProjectDomain = "Default"
	}
	if o.ProjectID == "" {
		o.ProjectID = "p" + randHex(15)
	}
	if o.Region == "" {
		o.Region = "RegionOne"
	}
	if o.TokenTTL == 0 {
		o.TokenTTL = time.Hour
	}
	if len(o.SecurityGroups) == 0 {
		o.SecurityGroups = []string{"default"}
	}
	if o.Networks == nil {
		o.Networks = map[string]string{"5f0b4f2c-1a7e-4c55-9d39-0d5e3c4b2a10": "private"}
	}
	if o.Flavors == nil {
		o.Flavors = map[string]string{"1": "m1.tiny", "2": "m1.small"}
	}
	if o.Images == nil {
		o.Images = map[string]string{"6e4b3a4e-0b5e-4c58-9e2b-6d5a1c0f9a10": "debian-12"}
	}
	if o.ExternalNetwork == "" {
		o.ExternalNetwork = "ext-net"
	}
	if o.BuildReads == 0 {
		o.BuildReads = 1
	}
	f := &Fake{o: o, tokens: map[string]time.Time{}, servers: map[string]*Server{}, fips: map[string]*FloatingIP{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Close stops the fake.
func (f *Fake) Close() { f.srv.Close() }

// URL is the server's root (http://127.0.0.1:PORT).
func (f *Fake) URL() string { return f.srv.URL }

// AuthURL is Keystone's v3 root, the provider's openstack_auth_url.
func (f *Fake) AuthURL() string { return f.srv.URL + "/identity/v3" }

// ProjectID is the project's id.
func (f *Fake) ProjectID() string { return f.o.ProjectID }

// SetCheck installs a function that sees every exchange; what it returns
// is kept as a problem (Problems).
func (f *Fake) SetCheck(fn func(Exchange) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.check = fn
}

// Problems are the fake's own complaints (requests the real API would
// refuse, answered 400) and the check function's.
func (f *Fake) Problems() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.problems)
}

// Fail queues a fault for the next matching requests.
func (f *Fake) Fail(flt Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if flt.Times == 0 {
		flt.Times = 1
	}
	f.faults = append(f.faults, &flt)
}

// Exchanges returns the recorded exchanges, optionally only those of
// method (""/"*": any) whose path below the service root starts with
// prefix.
func (f *Fake) Exchanges(method, prefix string) []Exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Exchange
	for _, e := range f.log {
		if (method == "" || method == "*" || e.Method == method) && strings.HasPrefix(e.Path, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// Servers returns copies of the live servers, oldest first.
func (f *Fake) Servers() []Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Server
	for _, id := range f.order {
		if s := f.servers[id]; s != nil {
			c := *s
			c.Metadata = mapsClone(s.Metadata)
			out = append(out, c)
		}
	}
	return out
}

// FloatingIPs returns the allocated floating IPs.
func (f *Fake) FloatingIPs() []FloatingIP {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []FloatingIP
	for _, id := range f.fipOrder {
		if x := f.fips[id]; x != nil {
			out = append(out, *x)
		}
	}
	return out
}

// TokensIssued counts the tokens Keystone gave out.
func (f *Fake) TokensIssued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issued
}

// Seed adds a server as if made earlier (for lookups and DELETE).
func (f *Fake) Seed(s Server) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Created.IsZero() {
		s.Created = time.Now().UTC()
	}
	if s.Status == "" {
		s.Status = "ACTIVE"
	}
	if s.Metadata == nil {
		s.Metadata = map[string]string{}
	}
	c := s
	f.servers[s.ID] = &c
	f.order = append(f.order, s.ID)
}

// SetStatus changes a server's status (ERROR with a fault message, say).
func (f *Fake) SetStatus(id, status, fault string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.servers[id]; s != nil {
		s.Status, s.Fault = status, fault
	}
}

// ExpireTokens makes every issued token invalid (Keystone restarted,
// tokens revoked).
func (f *Fake) ExpireTokens() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tokens = map[string]time.Time{}
}

var services = []struct{ prefix, name string }{
	{"/identity/v3", "identity"}, {"/identity/v2.0", "identity-v2"}, {"/compute/v2.1", "compute"}, {"/network", "network"}, {"/image", "image"},
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	service, path := "", r.URL.Path
	for _, s := range services {
		if strings.HasPrefix(r.URL.Path, s.prefix+"/") || r.URL.Path == s.prefix {
			service, path = s.name, strings.TrimPrefix(r.URL.Path, s.prefix)
			break
		}
	}
	ex := Exchange{Method: r.Method, Path: path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body, Service: service}

	if flt := f.takeFault(r.Method, path); flt != nil {
		if flt.Drop && !flt.After {
			f.record(ex, 0, nil, nil)
			fakehttp.DropConn(w)
			return
		}
		if !flt.Drop {
			h := w.Header()
			h.Set("Content-Type", "application/json")
			if flt.RetryAfter != "" {
				h.Set("Retry-After", flt.RetryAfter)
			}
			w.WriteHeader(flt.Status)
			io.WriteString(w, flt.Body)
			f.record(ex, flt.Status, h, []byte(flt.Body))
			return
		}
		// After: carry the request out, then lose the answer.
		rec := &fakehttp.Recorder{ResponseWriter: fakehttp.Discard{H: http.Header{}}}
		f.route(rec, r, service, path, body)
		f.record(ex, rec.Status, rec.Header(), rec.Body)
		fakehttp.DropConn(w)
		return
	}
	rec := &fakehttp.Recorder{ResponseWriter: w}
	f.route(rec, r, service, path, body)
	f.record(ex, rec.Status, w.Header(), rec.Body)
}

func (f *Fake) takeFault(method, path string) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, flt := range f.faults {
		if (flt.Method == "" || flt.Method == method) && strings.HasPrefix(path, flt.Path) {
			flt.Times--
			if flt.Times <= 0 {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
			}
			c := *flt
			return &c
		}
	}
	return nil
}

func (f *Fake) record(ex Exchange, status int, h http.Header, body []byte) {
	ex.Status, ex.RespBody = status, body
	if h != nil {
		ex.RespHeader = h.Clone()
	}
	f.mu.Lock()
	f.log = append(f.log, ex)
	check := f.check
	f.mu.Unlock()
	if check != nil {
		if err := check(ex); err != nil {
			f.problem("%s %s: %v", ex.Method, ex.Path, err)
		}
	}
}

func (f *Fake) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Openstack-Request-Id", "req-"+randHex(8))
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// novaError answers in Nova's error shape: {"badRequest": {"code", "message"}}.
func novaError(w http.ResponseWriter, status int, message string) {
	key := map[int]string{400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound", 409: "conflictingRequest"}[status]
	if key == "" {
		key = "computeFault"
	}
	writeJSON(w, status, map[string]any{key: map[string]any{"code": status, "message": message}})
}

// neutronError answers in Neutron's shape.
func neutronError(w http.ResponseWriter, status int, typ, message string) {
	writeJSON(w, status, map[string]any{"NeutronError": map[string]any{"type": typ, "message": message, "detail": ""}})
}

func (f *Fake) route(w http.ResponseWriter, r *http.Request, service, path string, body []byte) {
	if service == "" {
		http.NotFound(w, r)
		f.problem("%s %s: no such service (paths: /identity/v3, /compute/v2.1, /network, /image)", r.Method, r.URL.Path)
		return
	}
	if service == "identity-v2" {
		if r.Method == http.MethodPost && path == "/tokens" {
			f.tokenV2(w, body)
			return
		}
		writeJSON(w, 404, map[string]any{"itemNotFound": map[string]any{"code": 404, "message": "Resource not found"}})
		f.problem("%s %s: not an identity v2.0 route the provider uses", r.Method, path)
		return
	}
	if service == "identity" {
		if r.Method == http.MethodPost && path == "/auth/tokens" {
			f.token(w, r, body)
			return
		}
		writeJSON(w, 404, map[string]any{"error": map[string]any{"code": 404, "title": "Not Found", "message": "The resource could not be found."}})
		f.problem("%s %s: not an identity route the provider uses", r.Method, path)
		return
	}
	if !f.authorized(r) {
		// keystonemiddleware answers for every service, in Keystone's shape.
		w.Header().Set("WWW-Authenticate", "Keystone uri=\""+f.srv.URL+"/identity\"")
		writeJSON(w, 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}})
		return
	}
	if len(body) > 0 && r.Header.Get("Content-Type") != "application/json" {
		f.problem("%s %s: body with Content-Type %q", r.Method, path, r.Header.Get("Content-Type"))
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch service {
	case "compute":
		switch {
		case r.Method == "GET" && path == "/servers/detail":
			f.listServers(w, r)
		case r.Method == "POST" && path == "/servers":
			f.createServer(w, body)
		case len(seg) == 2 && seg[0] == "servers" && r.Method == "GET":
			f.getServer(w, seg[1])
		case len(seg) == 2 && seg[0] == "servers" && r.Method == "DELETE":
			f.deleteServer(w, seg[1])
		case r.Method == "GET" && path == "/flavors":
			f.listFlavors(w)
		case len(seg) == 2 && seg[0] == "flavors" && r.Method == "GET":
			f.getFlavor(w, seg[1])
		default:
			novaError(w, 404, "The resource could not be found.")
			f.problem("%s %s: not a compute route the provider uses", r.Method, path)
		}
	case "network":
		switch {
		case r.Method == "GET" && path == "/v2.0/ports":
			f.listPorts(w, r)
		case r.Method == "GET" && path == "/v2.0/networks":
			f.listNetworks(w, r)
		case r.Method == "GET" && path == "/v2.0/floatingips":
			f.listFIPs(w, r)
		case r.Method == "POST" && path == "/v2.0/floatingips":
			f.createFIP(w, body)
		case len(seg) == 3 && seg[1] == "floatingips" && r.Method == "DELETE":
			f.deleteFIP(w, seg[2])
		default:
			neutronError(w, 404, "HTTPNotFound", "The resource could not be found.")
			f.problem("%s %s: not a network route the provider uses", r.Method, path)
		}
	case "image":
		if r.Method == "GET" && path == "/v2/images" {
			f.listImages(w, r)
			return
		}
		w.WriteHeader(404)
		f.problem("%s %s: not an image route the provider uses", r.Method, path)
	}
}

func (f *Fake) authorized(r *http.Request) bool {
	tok := r.Header.Get("X-Auth-Token")
	f.mu.Lock()
	defer f.mu.Unlock()
	exp, ok := f.tokens[tok]
	return ok && time.Now().Before(exp)
}

// Keystone --------------------------------------------------------------------

func (f *Fake) token(w http.ResponseWriter, r *http.Request, body []byte) {
	unauthorized := func() {
		writeJSON(w, 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized",
			"message": "The request you have made requires authentication."}})
	}
	var req struct {
		Auth struct {
			Identity struct {
				Methods  []string `json:"methods"`
				Password *struct {
					User struct {
						ID       string `json:"id"`
						Name     string `json:"name"`
						Password string `json:"password"`
						Domain   *struct {
							ID   string `json:"id"`
							Name string `json:"name"`
						} `json:"domain"`
					} `json:"user"`
				} `json:"password"`
				AppCred *struct {
					ID     string `json:"id"`
					Name   string `json:"name"`
					Secret string `json:"secret"`
					User   *struct {
						Name   string `json:"name"`
						Domain *struct {
							Name string `json:"name"`
						} `json:"domain"`
					} `json:"user"`
				} `json:"application_credential"`
			} `json:"identity"`
			Scope *struct {
				Project *struct {
					ID     string `json:"id"`
					Name   string `json:"name"`
					Domain *struct {
						ID   string `json:"id"`
						Name string `json:"name"`
					} `json:"domain"`
				} `json:"project"`
			} `json:"scope"`
		} `json:"auth"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"code": 400, "title": "Bad Request", "message": "Invalid input for field 'auth': " + err.Error()}})
		f.problem("POST /auth/tokens: %v", err)
		return
	}
	id := req.Auth.Identity
	if len(id.Methods) != 1 {
		unauthorized()
		return
	}
	methods := id.Methods
	switch id.Methods[0] {
	case "password":
		p := id.Password
		if p == nil || p.User.Name != f.o.Username || p.User.Password != f.o.Password || f.o.Username == "" ||
			p.User.Domain == nil || p.User.Domain.Name != f.o.UserDomain {
			unauthorized()
			return
		}
		sc := req.Auth.Scope
		if sc == nil || sc.Project == nil {
			writeJSON(w, 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "An unscoped token cannot call the compute API."}})
			f.problem("POST /auth/tokens: an unscoped password token")
			return
		}
		pr := sc.Project
		ok := pr.ID == f.o.ProjectID || (pr.Name == f.o.Project && pr.Domain != nil && pr.Domain.Name == f.o.ProjectDomain)
		if !ok {
			unauthorized()
			return
		}
	case "application_credential":
		a := id.AppCred
		if a == nil || a.ID == "" || f.o.AppCredentials[a.ID] == "" || f.o.AppCredentials[a.ID] != a.Secret {
			unauthorized()
			return
		}
		if req.Auth.Scope != nil {
			writeJSON(w, 401, map[string]any{"error": map[string]any{"code": 401, "title": "Unauthorized", "message": "Application credentials cannot request a scope."}})
			return
		}
	default:
		unauthorized()
		return
	}
	tok := "gAAAAA" + randHex(40)
	exp := time.Now().Add(f.o.TokenTTL).UTC()
	f.mu.Lock()
	f.tokens[tok] = exp
	f.issued++
	f.mu.Unlock()
	ep := func(typ, name, path string) map[string]any {
		var eps []any
		for _, iface := range []string{"public", "internal", "admin"} {
			eps = append(eps, map[string]any{"id": randHex(16), "interface": iface, "region": f.o.Region,
				"region_id": f.o.Region, "url": f.srv.URL + path})
		}
		return map[string]any{"id": randHex(16), "type": typ, "name": name, "endpoints": eps}
	}
	w.Header().Set("X-Subject-Token", tok)
	writeJSON(w, 201, map[string]any{"token": map[string]any{
		"methods":    methods,
		"expires_at": exp.Format("2006-01-02T15:04:05.000000Z"),
		"issued_at":  time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
		"audit_ids":  []string{randHex(11)},
		"is_domain":  false,
		"roles":      []any{map[string]any{"id": randHex(16), "name": "member"}},
		"project": map[string]any{"id": f.o.ProjectID, "name": f.o.Project,
			"domain": map[string]any{"id": "default", "name": f.o.ProjectDomain}},
		"user": map[string]any{"id": randHex(16), "name": f.o.Username, "password_expires_at": nil,
			"domain": map[string]any{"id": "default", "name": f.o.UserDomain}},
		"catalog": []any{
			ep("identity", "keystone", "/identity/v3"),
			ep("compute", "nova", "/compute/v2.1"),
			ep("network", "neutron", "/network"),
			ep("image", "glance", "/image"),
		},
	}})
}

// tokenV2 is Rackspace's identity service: POST /v2.0/tokens with
// {"auth": {"RAX-KSKEY:apiKeyCredentials": {"username", "apiKey"}}}; 200
// with the token and a Keystone v2.0 catalog in "access".
func (f *Fake) tokenV2(w http.ResponseWriter, body []byte) {
	var req struct {
		Auth struct {
			Key *struct {
				Username string `json:"username"`
				APIKey   string `json:"apiKey"`
			} `json:"RAX-KSKEY:apiKeyCredentials"`
		} `json:"auth"`
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Auth.Key == nil {
		writeJSON(w, 400, map[string]any{"badRequest": map[string]any{"code": 400, "message": "Invalid json request body"}})
		f.problem("POST /v2.0/tokens: %v (want RAX-KSKEY:apiKeyCredentials)", err)
		return
	}
	k := req.Auth.Key
	if want, ok := f.o.APIKeys[k.Username]; !ok || want == "" || want != k.APIKey {
		writeJSON(w, 401, map[string]any{"unauthorized": map[string]any{"code": 401, "message": "Username or api key is invalid."}})
		return
	}
	tok := "AAD" + randHex(40)
	exp := time.Now().Add(f.o.TokenTTL)
	f.mu.Lock()
	f.tokens[tok] = exp
	f.issued++
	f.mu.Unlock()
	tenant := f.o.ProjectID
	ep := func(typ, name, path string) map[string]any {
		return map[string]any{"name": name, "type": typ, "endpoints": []any{map[string]any{
			"region": f.o.Region, "tenantId": tenant, "publicURL": f.srv.URL + path, "internalURL": f.srv.URL + "/servicenet" + path}}}
	}
	// Rackspace writes expiry times with its own zone offset.
	cst := time.FixedZone("CST", -6*3600)
	writeJSON(w, 200, map[string]any{"access": map[string]any{
		"token": map[string]any{"id": tok, "expires": exp.In(cst).Format("2006-01-02T15:04:05.000-07:00"),
			"tenant": map[string]any{"id": tenant, "name": tenant}, "RAX-AUTH:authenticatedBy": []string{"APIKEY"}},
		"user": map[string]any{"id": randHex(8), "name": k.Username, "RAX-AUTH:defaultRegion": f.o.Region,
			"roles": []any{map[string]any{"id": "3", "name": "identity:user-admin"}}},
		"serviceCatalog": []any{
			// First-generation servers: no region, another API.
			map[string]any{"name": "cloudServers", "type": "compute", "endpoints": []any{map[string]any{
				"tenantId": tenant, "publicURL": f.srv.URL + "/first-gen/v1.0/" + tenant, "versionInfo": "https://servers.api.rackspacecloud.com/v1.0"}}},
			ep("compute", "cloudServersOpenStack", "/compute/v2.1"),
			ep("image", "cloudImages", "/image"),
			ep("rax:network", "cloudNetworks", "/network"),
			ep("object-store", "cloudFiles", "/object-store"),
		},
	}})
}

// Nova ------------------------------------------------------------------------

// createKeys are the server create fields of Nova's API (2.1 schema,
// with the key pair, scheduler and config drive extensions).
var createKeys = map[string]bool{"name": true, "imageRef": true, "flavorRef": true, "adminPass": true,
	"metadata": true, "networks": true, "OS-DCF:diskConfig": true, "accessIPv4": true, "accessIPv6": true,
	"personality": true, "availability_zone": true, "block_device_mapping": true, "block_device_mapping_v2": true,
	"config_drive": true, "key_name": true, "min_count": true, "max_count": true, "return_reservation_id": true,
	"security_groups": true, "user_data": true}

func (f *Fake) createServer(w http.ResponseWriter, body []byte) {
	// bad answers a request Nova's schema refuses: a plugin bug, kept as a
	// problem. refuse answers one that names what does not exist: the
	// operator's mistake, answered as Nova does and nothing more.
	bad := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		novaError(w, 400, msg)
		f.problem("POST /servers: %s", msg)
	}
	refuse := func(format string, args ...any) { novaError(w, 400, fmt.Sprintf(format, args...)) }
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		bad("Malformed request body: %v", err)
		return
	}
	for k := range doc {
		if k != "server" && k != "os:scheduler_hints" {
			bad("Invalid input for field/attribute. Additional properties are not allowed ('%s' was unexpected)", k)
			return
		}
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(doc["server"], &s); err != nil {
		bad("Invalid input for field/attribute server: %v", err)
		return
	}
	for k := range s {
		if !createKeys[k] {
			bad("Invalid input for field/attribute server. Additional properties are not allowed ('%s' was unexpected)", k)
			return
		}
	}
	str := func(k string) (string, bool) {
		raw, ok := s[k]
		if !ok {
			return "", false
		}
		var v string
		if json.Unmarshal(raw, &v) != nil {
			bad("Invalid input for field/attribute %s. Value: %s. %s is not of type 'string'", k, raw, raw)
			return "", false
		}
		return v, true
	}
	name, _ := str("name")
	if name == "" || len(name) > 255 {
		bad("Invalid input for field/attribute name. Value: %q. name must be 1 to 255 characters", name)
		return
	}
	flavor, _ := str("flavorRef")
	if _, ok := f.o.Flavors[flavor]; !ok {
		refuse("Flavor %s could not be found.", flavor)
		return
	}
	image, _ := str("imageRef")
	if _, ok := f.o.Images[image]; !ok {
		refuse("Can not find requested image")
		return
	}
	srv := &Server{Name: name, Flavor: flavor, Image: image, Metadata: map[string]string{}, Status: "BUILD", Created: time.Now().UTC()}
	if raw, ok := s["metadata"]; ok {
		var md map[string]any
		if json.Unmarshal(raw, &md) != nil {
			bad("Invalid input for field/attribute metadata. Value: %s. %s is not of type 'object'", raw, raw)
			return
		}
		for k, v := range md {
			sv, ok := v.(string)
			if !ok || len(k) > 255 || len(sv) > 255 || k == "" {
				bad("Invalid input for field/attribute metadata. Value: %s. metadata values are strings of at most 255 characters", raw)
				return
			}
			srv.Metadata[k] = sv
		}
	}
	if k, ok := str("key_name"); ok {
		if !slices.Contains(f.o.KeyPairs, k) {
			refuse("Invalid key_name provided.")
			return
		}
		srv.KeyName = k
	}
	if raw, ok := s["security_groups"]; ok {
		var groups []map[string]string
		if json.Unmarshal(raw, &groups) != nil {
			bad("Invalid input for field/attribute security_groups. Value: %s", raw)
			return
		}
		for _, g := range groups {
			if len(g) != 1 || g["name"] == "" {
				bad("Invalid input for field/attribute security_groups. Value: %s", raw)
				return
			}
			if !slices.Contains(f.o.SecurityGroups, g["name"]) {
				refuse("Security group %s not found for project %s.", g["name"], f.o.ProjectID)
				return
			}
			srv.Groups = append(srv.Groups, g["name"])
		}
	}
	if raw, ok := s["networks"]; ok {
		var nets []map[string]string
		if json.Unmarshal(raw, &nets) != nil {
			bad("Invalid input for field/attribute networks. Value: %s", raw)
			return
		}
		for _, n := range nets {
			if len(n) != 1 || n["uuid"] == "" {
				bad("Invalid input for field/attribute networks. Value: %s", raw)
				return
			}
			if _, ok := f.o.Networks[n["uuid"]]; !ok {
				refuse("Network %s could not be found.", n["uuid"])
				return
			}
			srv.Networks = append(srv.Networks, n["uuid"])
		}
	}
	if ud, ok := str("user_data"); ok {
		dec, err := base64.StdEncoding.DecodeString(ud)
		if err != nil || len(ud) > 65535 {
			bad("User data needs to be valid base 64.")
			return
		}
		srv.UserData = string(dec)
	}
	if az, ok := str("availability_zone"); ok {
		srv.AZ = az
	}
	if raw, ok := s["config_drive"]; ok {
		if json.Unmarshal(raw, &srv.ConfigDrive) != nil {
			bad("Invalid input for field/attribute config_drive. Value: %s", raw)
			return
		}
	}
	f.mu.Lock()
	f.seq++
	srv.ID = fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", f.seq, f.seq%0x10000, f.seq%0x1000, f.seq%0x1000, f.seq)
	if len(f.o.Machines) == 0 {
		srv.Fixed = "10.0.0." + strconv.Itoa(9+f.seq)
	} else if f.machine < len(f.o.Machines) {
		srv.Fixed = f.o.Machines[f.machine]
		f.machine++
	} else {
		srv.Status, srv.Fault = "ERROR", "No valid host was found. There are not enough hosts available."
	}
	if f.o.AdminPass {
		srv.AdminPass = "Pw" + randHex(6)
	}
	if f.o.BuildReads < 0 && srv.Status == "BUILD" {
		srv.Status = "ACTIVE"
	}
	f.servers[srv.ID] = srv
	f.order = append(f.order, srv.ID)
	f.mu.Unlock()
	out := map[string]any{"id": srv.ID, "OS-DCF:diskConfig": "MANUAL",
		"links":           f.links("servers", srv.ID),
		"security_groups": groupList(srv.Groups)}
	if srv.AdminPass != "" {
		out["adminPass"] = srv.AdminPass
	}
	w.Header().Set("Location", f.srv.URL+"/compute/v2.1/servers/"+srv.ID)
	writeJSON(w, 202, map[string]any{"server": out})
}

func groupList(groups []string) []any {
	out := []any{}
	for _, g := range groups {
		out = append(out, map[string]any{"name": g})
	}
	return out
}

func (f *Fake) links(kind, id string) []any {
	return []any{
		map[string]any{"rel": "self", "href": f.srv.URL + "/compute/v2.1/" + f.o.ProjectID + "/" + kind + "/" + id},
		map[string]any{"rel": "bookmark", "href": f.srv.URL + "/compute/" + f.o.ProjectID + "/" + kind + "/" + id},
	}
}

// serverJSON is a server as Nova 2.1 shows it.
func (f *Fake) serverJSON(s *Server) map[string]any {
	addrs := map[string]any{}
	if s.Status != "BUILD" && s.Fixed != "" {
		net := "private"
		if len(s.Networks) > 0 {
			net = f.o.Networks[s.Networks[0]]
		}
		list := []any{map[string]any{"version": 4, "addr": s.Fixed, "OS-EXT-IPS:type": "fixed",
			"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:" + macTail(s.ID)}}
		for _, id := range f.fipOrder {
			if x := f.fips[id]; x != nil && x.PortID == portID(s.ID) {
				list = append(list, map[string]any{"version": 4, "addr": x.Address, "OS-EXT-IPS:type": "floating",
					"OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:" + macTail(s.ID)})
			}
		}
		addrs[net] = list
	}
	vm, power, task := map[string]string{"ACTIVE": "active", "BUILD": "building", "ERROR": "error"}[s.Status], 1, any(nil)
	if s.Status == "BUILD" {
		power, task = 0, "spawning"
	}
	out := map[string]any{
		"id": s.ID, "name": s.Name, "status": s.Status, "tenant_id": f.o.ProjectID, "user_id": "u" + f.o.ProjectID[1:],
		"metadata": s.Metadata, "hostId": "h" + macTail(s.ID), "created": s.Created.Format(time.RFC3339),
		"updated": s.Created.Format(time.RFC3339), "addresses": addrs, "accessIPv4": "", "accessIPv6": "",
		"links":    f.links("servers", s.ID),
		"image":    map[string]any{"id": s.Image, "links": f.links("images", s.Image)},
		"flavor":   map[string]any{"id": s.Flavor, "links": f.links("flavors", s.Flavor)},
		"key_name": nilIfEmpty(s.KeyName), "security_groups": groupList(s.Groups), "progress": 0,
		"OS-DCF:diskConfig": "MANUAL", "OS-EXT-AZ:availability_zone": orDefault(s.AZ, "nova"),
		"OS-EXT-STS:vm_state": vm, "OS-EXT-STS:power_state": power, "OS-EXT-STS:task_state": task,
		"OS-SRV-USG:launched_at": nil, "OS-SRV-USG:terminated_at": nil,
		"config_drive":                         map[bool]string{true: "True", false: ""}[s.ConfigDrive],
		"os-extended-volumes:volumes_attached": []any{},
	}
	if s.Status == "ACTIVE" {
		out["OS-SRV-USG:launched_at"] = s.Created.Format("2006-01-02T15:04:05.000000")
	}
	if s.Status == "ERROR" {
		out["fault"] = map[string]any{"code": 500, "created": s.Created.Format(time.RFC3339), "message": s.Fault}
	}
	return out
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func macTail(id string) string {
	h := strings.ReplaceAll(id, "-", "")
	h = h[len(h)-6:]
	return h[0:2] + ":" + h[2:4] + ":" + h[4:6]
}

func portID(serverID string) string { return "port-" + serverID }

func (f *Fake) listServers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var re *regexp.Regexp
	if n := q.Get("name"); n != "" {
		var err error
		if re, err = regexp.Compile(n); err != nil {
			novaError(w, 400, "Invalid name filter: "+err.Error())
			f.problem("GET /servers/detail: name %q is not a regular expression: %v", n, err)
			return
		}
	}
	limit := 1000
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			novaError(w, 400, "limit param must be an integer")
			return
		}
		limit = n
	}
	marker := q.Get("marker")
	f.mu.Lock()
	defer f.mu.Unlock()
	if marker != "" && f.servers[marker] == nil {
		novaError(w, 400, "marker ["+marker+"] not found")
		return
	}
	var out []any
	started := marker == ""
	for _, id := range f.order {
		s := f.servers[id]
		if s == nil {
			continue
		}
		if !started {
			started = id == marker
			continue
		}
		if re != nil && !re.MatchString(s.Name) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, f.serverJSON(s))
	}
	if out == nil {
		out = []any{}
	}
	resp := map[string]any{"servers": out}
	if len(out) == limit && limit > 0 {
		last := out[len(out)-1].(map[string]any)["id"].(string)
		resp["servers_links"] = []any{map[string]any{"rel": "next",
			"href": f.srv.URL + "/compute/v2.1/servers/detail?limit=" + strconv.Itoa(limit) + "&marker=" + last}}
	}
	writeJSON(w, 200, resp)
}

func (f *Fake) getServer(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.servers[id]
	if s == nil {
		novaError(w, 404, "Instance "+id+" could not be found.")
		return
	}
	s.Reads++
	if s.Status == "BUILD" && s.Reads > f.o.BuildReads {
		s.Status = "ACTIVE"
	}
	writeJSON(w, 200, map[string]any{"server": f.serverJSON(s)})
}

func (f *Fake) deleteServer(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.servers[id] == nil {
		novaError(w, 404, "Instance "+id+" could not be found.")
		return
	}
	delete(f.servers, id)
	// Nova deletes the server's ports; their floating IPs stay allocated,
	// unassociated (as in Neutron).
	for _, x := range f.fips {
		if x.PortID == portID(id) {
			x.PortID, x.FixedIP = "", ""
		}
	}
	w.WriteHeader(204)
}

func (f *Fake) listFlavors(w http.ResponseWriter) {
	var out []any
	for _, id := range sortedKeys(f.o.Flavors) {
		out = append(out, map[string]any{"id": id, "name": f.o.Flavors[id], "links": f.links("flavors", id)})
	}
	writeJSON(w, 200, map[string]any{"flavors": out})
}

func (f *Fake) getFlavor(w http.ResponseWriter, id string) {
	name, ok := f.o.Flavors[id]
	if !ok {
		novaError(w, 404, "Flavor "+id+" could not be found.")
		return
	}
	writeJSON(w, 200, map[string]any{"flavor": map[string]any{"id": id, "name": name, "ram": 2048, "vcpus": 1,
		"disk": 20, "OS-FLV-EXT-DATA:ephemeral": 0, "swap": "", "rxtx_factor": 1.0,
		"os-flavor-access:is_public": true, "OS-FLV-DISABLED:disabled": false, "links": f.links("flavors", id)}})
}

// Neutron and Glance ------------------------------------------------------------

func (f *Fake) listPorts(w http.ResponseWriter, r *http.Request) {
	dev := r.URL.Query().Get("device_id")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []any{}
	for _, id := range f.order {
		s := f.servers[id]
		if s == nil || s.Fixed == "" || (dev != "" && id != dev) {
			continue
		}
		net := "5f0b4f2c-1a7e-4c55-9d39-0d5e3c4b2a10"
		if len(s.Networks) > 0 {
			net = s.Networks[0]
		}
		out = append(out, map[string]any{"id": portID(id), "name": "", "network_id": net, "device_id": id,
			"device_owner": "compute:nova", "status": "ACTIVE", "admin_state_up": true, "tenant_id": f.o.ProjectID,
			"project_id": f.o.ProjectID, "mac_address": "fa:16:3e:" + macTail(id),
			"fixed_ips": []any{map[string]any{"subnet_id": "subnet-" + net[:8], "ip_address": s.Fixed}}})
	}
	writeJSON(w, 200, map[string]any{"ports": out})
}

func (f *Fake) listNetworks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	out := []any{}
	ext := map[string]any{"id": f.o.ExternalNetwork, "name": "public", "router:external": true, "status": "ACTIVE",
		"admin_state_up": true, "shared": false, "tenant_id": "admin", "project_id": "admin", "subnets": []string{}}
	if q.Get("router:external") == "true" {
		out = append(out, ext)
	} else {
		for _, id := range sortedKeys(f.o.Networks) {
			out = append(out, map[string]any{"id": id, "name": f.o.Networks[id], "router:external": false,
				"status": "ACTIVE", "admin_state_up": true, "shared": false, "tenant_id": f.o.ProjectID,
				"project_id": f.o.ProjectID, "subnets": []string{}})
		}
		out = append(out, ext)
	}
	writeJSON(w, 200, map[string]any{"networks": out})
}

func (f *Fake) fipJSON(x *FloatingIP) map[string]any {
	status := "DOWN"
	if x.PortID != "" {
		status = "ACTIVE"
	}
	return map[string]any{"id": x.ID, "floating_ip_address": x.Address, "floating_network_id": x.Network,
		"port_id": nilIfEmpty(x.PortID), "fixed_ip_address": nilIfEmpty(x.FixedIP), "router_id": nil,
		"status": status, "description": x.Description, "tenant_id": f.o.ProjectID, "project_id": f.o.ProjectID,
		"created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z"}
}

func (f *Fake) listFIPs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "port_id" && k != "description" && k != "floating_network_id" {
			neutronError(w, 400, "HTTPBadRequest", "[u'"+k+"'] is invalid attribute for filtering")
			f.problem("GET /v2.0/floatingips: filter %q", k)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []any{}
	for _, id := range f.fipOrder {
		x := f.fips[id]
		if x == nil {
			continue
		}
		if v, ok := q["port_id"]; ok && x.PortID != v[0] {
			continue
		}
		if v, ok := q["description"]; ok && x.Description != v[0] {
			continue
		}
		out = append(out, f.fipJSON(x))
	}
	writeJSON(w, 200, map[string]any{"floatingips": out})
}

func (f *Fake) createFIP(w http.ResponseWriter, body []byte) {
	var doc struct {
		FloatingIP map[string]any `json:"floatingip"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.FloatingIP == nil {
		neutronError(w, 400, "HTTPBadRequest", "Resource body required")
		f.problem("POST /v2.0/floatingips: no floatingip body")
		return
	}
	allowed := map[string]bool{"floating_network_id": true, "port_id": true, "fixed_ip_address": true,
		"floating_ip_address": true, "description": true, "subnet_id": true, "tenant_id": true, "project_id": true,
		"dns_name": true, "dns_domain": true, "qos_policy_id": true}
	for k := range doc.FloatingIP {
		if !allowed[k] {
			neutronError(w, 400, "HTTPBadRequest", "Unrecognized attribute(s) '"+k+"'")
			f.problem("POST /v2.0/floatingips: unknown attribute %q", k)
			return
		}
	}
	str := func(k string) string { s, _ := doc.FloatingIP[k].(string); return s }
	if str("floating_network_id") != f.o.ExternalNetwork {
		neutronError(w, 404, "ExternalGatewayForFloatingIPNotFound", "Network "+str("floating_network_id")+" is not a valid external network")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	port := str("port_id")
	var fixed string
	if port != "" {
		id := strings.TrimPrefix(port, "port-")
		s := f.servers[id]
		if s == nil || !strings.HasPrefix(port, "port-") {
			neutronError(w, 404, "PortNotFound", "Port "+port+" could not be found.")
			return
		}
		fixed = s.Fixed
		if want := str("fixed_ip_address"); want != "" && want != fixed {
			neutronError(w, 400, "BadRequest", "Port "+port+" does not have fixed ip "+want)
			return
		}
	}
	var addr string
	if f.floating < len(f.o.FloatingIPs) {
		addr = f.o.FloatingIPs[f.floating]
	} else if len(f.o.FloatingIPs) > 0 {
		neutronError(w, 409, "IpAddressGenerationFailure", "No more IP addresses available on network "+f.o.ExternalNetwork+".")
		return
	} else {
		addr = "203.0.113." + strconv.Itoa(10+f.floating)
	}
	f.floating++
	x := &FloatingIP{ID: fmt.Sprintf("f1%06x-0000-4000-8000-%012x", f.floating, f.floating), Address: addr, PortID: port,
		FixedIP: fixed, Description: str("description"), Network: f.o.ExternalNetwork}
	f.fips[x.ID] = x
	f.fipOrder = append(f.fipOrder, x.ID)
	writeJSON(w, 201, map[string]any{"floatingip": f.fipJSON(x)})
}

func (f *Fake) deleteFIP(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fips[id] == nil {
		neutronError(w, 404, "FloatingIPNotFound", "Floating IP "+id+" could not be found")
		return
	}
	delete(f.fips, id)
	w.WriteHeader(204)
}

func (f *Fake) listImages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	out := []any{}
	for _, id := range sortedKeys(f.o.Images) {
		name := f.o.Images[id]
		if n := q.Get("name"); n != "" && n != name {
			continue
		}
		if st := q.Get("status"); st != "" && st != "active" {
			continue
		}
		out = append(out, map[string]any{"id": id, "name": name, "status": "active", "visibility": "public",
			"disk_format": "qcow2", "container_format": "bare", "size": 536870912, "min_disk": 0, "min_ram": 0,
			"protected": false, "tags": []string{}, "created_at": "2024-01-01T00:00:00Z",
			"updated_at": "2024-01-01T00:00:00Z", "self": "/v2/images/" + id, "file": "/v2/images/" + id + "/file",
			"schema": "/v2/schemas/image"})
	}
	writeJSON(w, 200, map[string]any{"images": out, "first": "/v2/images", "schema": "/v2/schemas/images"})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func mapsClone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}
