// Package gcefake is a strict fake of Google Compute Engine's API v1 and
// of Google's OAuth 2.0 token endpoint, for the methods Loom's google
// provider calls: the service-account JWT bearer grant, instances
// insert, get, list and delete, getGuestAttributes, and zone operations
// get and wait.
//
// Every request and every answer is checked against Google's discovery
// document for compute v1 (the part in discovery/, embedded): a request
// that violates it is refused with 400 and recorded as a violation, and so
// is an answer of the fake's own that does. The token endpoint verifies
// the JWT's RS256 signature with the service account's public key, its
// issuer, audience, scope and lifetime. Instances move PROVISIONING,
// STAGING, RUNNING as they are read; operations PENDING, RUNNING, DONE.
// A requestId seen before gets its operation again, as Compute Engine
// does for 60 minutes. Faults (429, 5xx, quota errors in an operation, an
// answer lost after the work was done) are queued per method.
package gcefake

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Options configure a fake. The zero value serves project "loom-test",
// zones us-central1-a and europe-west1-b, and one service account.
type Options struct {
	Project string
	// Now is the clock (time.Now when nil): tokens expire by it.
	Now func() time.Time
	// OpReads is how many reads (get or wait) of an operation answer it
	// RUNNING before it is DONE (default 1; -1: DONE at once).
	OpReads int
	// RunningAfter is how many reads of a new instance answer
	// PROVISIONING or STAGING before it runs (default 1).
	RunningAfter int
	// GuestAfter is how many getGuestAttributes calls of a running
	// instance answer 404 first (the guest agent posts its keys after
	// boot).
	GuestAfter int
	// Machines are handed to new instances in order: addresses and SSH
	// host keys; past the list, instances get 34.x.x.x / 10.128.0.x and a
	// generated ed25519 host key.
	Machines []Machine
}

// Machine is what a new instance is.
type Machine struct {
	NatIP, NetworkIP string
	HostKeys         []string // authorized_keys lines
}

// Fault is a queued answer for the next request of a method ("insert",
// "get", "list", "delete", "getGuestAttributes", "operations.get",
// "operations.wait", "token").
type Fault struct {
	Status int
	// Reason is errors[0].reason (rateLimitExceeded, backendError...).
	Reason     string
	Message    string
	RetryAfter int
	// Apply does the call first, then answers with the fault (or drops
	// the connection).
	Apply bool
	Drop  bool
	// OpError, for "insert", lets the call succeed and fails its
	// operation with this error code (QUOTA_EXCEEDED,
	// ZONE_RESOURCE_POOL_EXHAUSTED): no instance is made.
	OpError string
}

// Exchange is one request and its answer.
type Exchange struct {
	Method  string // the discovery method id, "token", or "" when none matched
	HTTP    string
	Path    string
	Query   url.Values
	Header  http.Header
	Body    []byte
	Status  int
	RBody   []byte
	Dropped bool
}

// Instance is the fake's record of an instance.
type Instance struct {
	Name, Zone, MachineType, Status string
	Labels                          map[string]string
	Metadata                        map[string]string
	NatIP, NetworkIP                string
	HostKeys                        []string
	Disks                           []map[string]any
	ID                              uint64
	Created                         time.Time
	reads, guestReads               int
	body                            map[string]any
}

type operation struct {
	id           uint64
	name, typ    string
	zone, target string
	status       string
	reads        int
	errCode      string
	errMsg       string
	httpCode     int
	insertTime   time.Time
	onDone       func()
	done         bool
}

// Server is a running fake.
type Server struct {
	o   Options
	d   *Discovery
	srv *httptest.Server
	key *rsa.PrivateKey
	kid string

	mu         sync.Mutex
	exchanges  []Exchange
	violations []string
	faults     map[string][]Fault
	instances  map[string]*Instance // zone/name
	order      []string
	ops        map[string]*operation // zone/name
	requests   map[string]string     // requestId -> zone/op
	tokens     map[string]time.Time
	seq        uint64
	machines   int
	images     map[string]bool
}

// Email is the service account's client_email.
const Email = "loom@loom-test.iam.gserviceaccount.com"

// TokenPath is where the token endpoint is served.
const TokenPath = "/token"

// Start starts a fake on a loopback port.
func Start(o Options) *Server {
	s := New(o)
	s.srv = httptest.NewServer(s)
	return s
}

// New returns a fake to serve with ServeHTTP.
func New(o Options) *Server {
	if o.Project == "" {
		o.Project = "loom-test"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.OpReads == 0 {
		o.OpReads = 1
	}
	if o.RunningAfter == 0 {
		o.RunningAfter = 1
	}
	d, err := LoadDiscovery()
	if err != nil {
		panic(err)
	}
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	return &Server{o: o, d: d, key: key, kid: "4f1c2d3e5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d", faults: map[string][]Fault{},
		instances: map[string]*Instance{}, ops: map[string]*operation{}, requests: map[string]string{}, tokens: map[string]time.Time{},
		images: map[string]bool{"projects/debian-cloud/global/images/family/debian-12": true,
			"projects/debian-cloud/global/images/debian-12-bookworm-v20261014": true, "global/images/loom-base": true}}
}

// URL is the fake's base URL (Start only).
func (s *Server) URL() string { return s.srv.URL }

// Close stops a started fake.
func (s *Server) Close() {
	if s.srv != nil {
		s.srv.Close()
	}
}

// KeyJSON is the service account's JSON key, as the Cloud console gives
// it; tokenURI is its token_uri.
func (s *Server) KeyJSON(tokenURI string) []byte {
	der, _ := x509.MarshalPKCS8PrivateKey(s.key)
	b, _ := json.MarshalIndent(map[string]string{
		"type": "service_account", "project_id": s.o.Project, "private_key_id": s.kid,
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": Email, "client_id": "104739223871662435421",
		"auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": tokenURI,
	}, "", "  ")
	return b
}

// FailNext queues f for the next request of method.
func (s *Server) FailNext(method string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[method] = append(s.faults[method], f)
}

// Exchanges returns the requests and answers, in order; method "" means
// all.
func (s *Server) Exchanges(method string) []Exchange {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Exchange
	for _, e := range s.exchanges {
		if method == "" || e.Method == method || strings.HasSuffix(e.Method, "."+method) {
			out = append(out, e)
		}
	}
	return out
}

// Violations are the requests and answers the discovery document does
// not allow, and requests for paths that are no method.
func (s *Server) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// Instances returns the instances that exist, in creation order.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, k := range s.order {
		if i, ok := s.instances[k]; ok {
			out = append(out, *i)
		}
	}
	return out
}

// Instance returns an instance by name.
func (s *Server) Instance(name string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, i := range s.instances {
		if i.Name == name {
			return *i, true
		}
	}
	return Instance{}, false
}

// Seed adds an instance as if made earlier (status RUNNING).
func (s *Server) Seed(zone, name string, labels map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.nextMachine()
	s.seq++
	i := &Instance{Name: name, Zone: zone, MachineType: "e2-small", Status: "RUNNING", Labels: labels, NatIP: m.NatIP,
		NetworkIP: m.NetworkIP, HostKeys: m.HostKeys, ID: 4000000000000000000 + s.seq, Created: s.o.Now(), Metadata: map[string]string{}}
	s.instances[zone+"/"+name] = i
	s.order = append(s.order, zone+"/"+name)
}

// ExpireTokens makes every issued token invalid (an hour passed).
func (s *Server) ExpireTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.tokens)
}

type apiError struct {
	status     int
	reason     string
	msg        string
	retryAfter int
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	defer s.mu.Unlock()
	x := Exchange{HTTP: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body}
	if r.URL.Path == TokenPath {
		x.Method = "token"
		s.token(w, r, body, &x)
		return
	}
	m, verr := s.d.Request(r.Method, r.URL.Path, r.URL.Query(), body)
	if m == nil {
		s.violations = append(s.violations, verr.Error())
		s.answerError(w, &x, nil, &apiError{404, "notFound", "Not Found: " + r.URL.Path, 0})
		return
	}
	x.Method = m.ID
	if verr != nil {
		s.violations = append(s.violations, verr.Error())
		s.answerError(w, &x, m, &apiError{400, "invalid", verr.Error(), 0})
		return
	}
	if !s.authorized(r) {
		s.answerError(w, &x, m, &apiError{401, "authError",
			"Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.", 0})
		return
	}
	short := strings.TrimPrefix(m.ID, "compute.instances.")
	short = strings.Replace(short, "compute.zoneOperations.", "operations.", 1)
	var (
		status = 200
		resp   any
		aerr   *apiError
		drop   bool
	)
	if q := s.faults[short]; len(q) > 0 {
		f := q[0]
		s.faults[short] = q[1:]
		switch {
		case f.OpError != "":
			resp, aerr = s.call(short, r, body, f.OpError)
		default:
			if f.Apply {
				s.call(short, r, body, "")
			}
			drop = f.Drop
			if f.Status != 0 {
				msg := f.Message
				if msg == "" {
					msg = http.StatusText(f.Status)
				}
				aerr = &apiError{f.Status, f.Reason, msg, f.RetryAfter}
			}
		}
	} else {
		resp, aerr = s.call(short, r, body, "")
	}
	if drop {
		x.Dropped = true
		s.exchanges = append(s.exchanges, x)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if aerr != nil {
		s.answerError(w, &x, m, aerr)
		return
	}
	out, _ := json.Marshal(resp)
	s.answer(w, &x, m, status, out, 0)
}

func (s *Server) answer(w http.ResponseWriter, x *Exchange, m *Method, status int, out []byte, retryAfter int) {
	if m != nil {
		if err := s.d.Response(m, status, out); err != nil {
			s.violations = append(s.violations, "the fake's own answer: "+err.Error())
		}
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	w.Write(out)
	x.Status, x.RBody = status, out
	s.exchanges = append(s.exchanges, *x)
}

var statusNames = map[int]string{400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
	409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}

func (s *Server) answerError(w http.ResponseWriter, x *Exchange, m *Method, e *apiError) {
	reason := e.reason
	if reason == "" {
		reason = map[int]string{429: "rateLimitExceeded", 500: "backendError", 503: "backendError"}[e.status]
	}
	out, _ := json.Marshal(map[string]any{"error": map[string]any{"code": e.status, "message": e.msg, "status": statusNames[e.status],
		"errors": []map[string]string{{"message": e.msg, "domain": "global", "reason": reason}}}})
	s.answer(w, x, m, e.status, out, e.retryAfter)
}

func (s *Server) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	exp, ok := s.tokens[tok]
	return ok && s.o.Now().Before(exp)
}

// token serves the JWT bearer grant (RFC 7523) as Google's endpoint does.
func (s *Server) token(w http.ResponseWriter, r *http.Request, body []byte, x *Exchange) {
	fail := func(status int, code, desc string) {
		out, _ := json.Marshal(map[string]string{"error": code, "error_description": desc})
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		w.Write(out)
		x.Status, x.RBody = status, out
		s.exchanges = append(s.exchanges, *x)
	}
	if q := s.faults["token"]; len(q) > 0 {
		f := q[0]
		s.faults["token"] = q[1:]
		fail(f.Status, f.Reason, f.Message)
		return
	}
	if r.Method != http.MethodPost || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		fail(400, "invalid_request", "the token request must be a form POST")
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		fail(400, "unsupported_grant_type", "Invalid grant_type: "+form.Get("grant_type"))
		return
	}
	parts := strings.Split(form.Get("assertion"), ".")
	if len(parts) != 3 {
		fail(400, "invalid_grant", "Invalid JWT: not three parts")
		return
	}
	var hdr struct{ Alg, Typ, Kid string }
	var claims struct {
		Iss, Scope, Aud, Sub string
		Iat, Exp             int64
	}
	hb, e1 := base64.RawURLEncoding.DecodeString(parts[0])
	cb, e2 := base64.RawURLEncoding.DecodeString(parts[1])
	sig, e3 := base64.RawURLEncoding.DecodeString(parts[2])
	if e1 != nil || e2 != nil || e3 != nil || json.Unmarshal(hb, &hdr) != nil || json.Unmarshal(cb, &claims) != nil {
		fail(400, "invalid_grant", "Invalid JWT: the parts are not base64url JSON")
		return
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if hdr.Alg != "RS256" || rsa.VerifyPKCS1v15(&s.key.PublicKey, crypto.SHA256, sum[:], sig) != nil {
		fail(400, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	if hdr.Kid != "" && hdr.Kid != s.kid {
		fail(400, "invalid_grant", "Invalid JWT Signature.")
		return
	}
	if claims.Iss != Email {
		fail(401, "invalid_client", "The OAuth client was not found.")
		return
	}
	now := s.o.Now().Unix()
	if claims.Aud != "https://oauth2.googleapis.com/token" {
		fail(400, "invalid_grant", "Invalid JWT: aud must be https://oauth2.googleapis.com/token")
		return
	}
	if claims.Iat > now+300 || claims.Exp <= now || claims.Exp-claims.Iat > 3600 {
		fail(400, "invalid_grant", "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
		return
	}
	scopes := strings.Fields(claims.Scope)
	if !slices.Contains(scopes, "https://www.googleapis.com/auth/compute") && !slices.Contains(scopes, "https://www.googleapis.com/auth/cloud-platform") {
		fail(400, "invalid_scope", "the scope must grant Compute Engine (compute or cloud-platform)")
		return
	}
	b := make([]byte, 24)
	rand.Read(b)
	tok := "ya29.c." + base64.RawURLEncoding.EncodeToString(b)
	s.tokens[tok] = s.o.Now().Add(time.Hour)
	out, _ := json.Marshal(map[string]any{"access_token": tok, "expires_in": 3599, "token_type": "Bearer"})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(200)
	w.Write(out)
	x.Status, x.RBody = 200, out
	s.exchanges = append(s.exchanges, *x)
}

var pathRe = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/zones/([^/]+)/(instances|operations)(?:/([^/]+))?`)

// call does a compute method; its parameters already passed the
// discovery document.
func (s *Server) call(method string, r *http.Request, body []byte, opError string) (any, *apiError) {
	m := pathRe.FindStringSubmatch(r.URL.Path)
	project, zone, name := m[1], m[2], m[4]
	if project != s.o.Project {
		return nil, &apiError{403, "forbidden", fmt.Sprintf("Required 'compute.instances.%s' permission for 'projects/%s'", strings.TrimPrefix(method, "operations."), project), 0}
	}
	if !slices.Contains([]string{"us-central1-a", "us-central1-b", "europe-west1-b"}, zone) {
		return nil, &apiError{400, "invalid", fmt.Sprintf("Invalid value for field 'zone': '%s'. Unknown zone.", zone), 0}
	}
	switch method {
	case "insert":
		return s.insert(zone, r.URL.Query().Get("requestId"), body, opError)
	case "get":
		i := s.instances[zone+"/"+name]
		if i == nil {
			return nil, notFound(project, zone, "instances/"+name)
		}
		i.reads++
		switch {
		case i.Status == "PROVISIONING" && i.reads > s.o.RunningAfter:
			i.Status = "STAGING"
		case i.Status == "STAGING":
			i.Status = "RUNNING"
		}
		return s.instanceJSON(i), nil
	case "list":
		return s.list(zone, r.URL.Query().Get("filter"))
	case "delete":
		i := s.instances[zone+"/"+name]
		if i == nil {
			return nil, notFound(project, zone, "instances/"+name)
		}
		i.Status = "STOPPING"
		key := zone + "/" + name
		return s.opJSON(s.newOp(zone, "delete", name, "", func() { delete(s.instances, key) })), nil
	case "getGuestAttributes":
		i := s.instances[zone+"/"+name]
		if i == nil {
			return nil, notFound(project, zone, "instances/"+name)
		}
		q := r.URL.Query().Get("queryPath")
		if i.Status != "RUNNING" || !strings.EqualFold(i.Metadata["enable-guest-attributes"], "true") || q != "hostkeys/" {
			return nil, notFound(project, zone, "instances/"+name+"/guestAttributes/"+q)
		}
		i.guestReads++
		if i.guestReads <= s.o.GuestAfter {
			return nil, notFound(project, zone, "instances/"+name+"/guestAttributes/"+q)
		}
		var items []map[string]string
		for _, k := range i.HostKeys {
			f := strings.Fields(k)
			items = append(items, map[string]string{"namespace": "hostkeys", "key": f[0], "value": f[1]})
		}
		return map[string]any{"kind": "compute#guestAttributes", "queryPath": q, "queryValue": map[string]any{"items": items},
			"selfLink": s.selfLink(zone, "instances/"+name+"/guestAttributes/"+q)}, nil
	case "operations.get", "operations.wait":
		op := s.ops[zone+"/"+name]
		if op == nil {
			return nil, notFound(project, zone, "operations/"+name)
		}
		op.reads++
		if op.reads > s.o.OpReads || s.o.OpReads < 0 {
			s.finish(op)
		} else if op.status == "PENDING" {
			op.status = "RUNNING"
		}
		return s.opJSON(op), nil
	}
	return nil, &apiError{400, "invalid", "the fake does not serve " + method, 0}
}

func notFound(project, zone, what string) *apiError {
	return &apiError{404, "notFound", fmt.Sprintf("The resource 'projects/%s/zones/%s/%s' was not found", project, zone, what), 0}
}

func (s *Server) selfLink(zone, rest string) string {
	return fmt.Sprintf("https://compute.googleapis.com/compute/v1/projects/%s/zones/%s/%s", s.o.Project, zone, rest)
}

var (
	labelKeyRe   = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)
	labelValueRe = regexp.MustCompile(`^[a-z0-9_-]{0,63}$`)
	machineRe    = regexp.MustCompile(`^(?:https://compute\.googleapis\.com/compute/v1/projects/[^/]+/)?zones/([^/]+)/machineTypes/([a-z0-9-]+)$`)
	diskTypeRe   = regexp.MustCompile(`^(?:https://compute\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?zones/([^/]+)/diskTypes/(pd-standard|pd-ssd|pd-balanced|pd-extreme|hyperdisk-balanced)$`)
	networkRe    = regexp.MustCompile(`^(?:https://compute\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?global/networks/([a-z0-9-]+)$`)
	subnetRe     = regexp.MustCompile(`^(?:https://compute\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?regions/([^/]+)/subnetworks/([a-z0-9-]+)$`)
	uuidRe       = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	machineTypes = []string{"e2-micro", "e2-small", "e2-medium", "e2-standard-2", "e2-standard-4", "n1-standard-1", "n1-standard-2", "n2-standard-2"}
)

func (s *Server) insert(zone, requestID string, body []byte, opError string) (any, *apiError) {
	if requestID != "" {
		if !uuidRe.MatchString(requestID) || requestID == "00000000-0000-0000-0000-000000000000" {
			return nil, &apiError{400, "invalid", fmt.Sprintf("Invalid value for field 'requestId': '%s'. The request ID must be a valid UUID with the exception that zero UUID is not supported.", requestID), 0}
		}
		if k, ok := s.requests[requestID]; ok {
			return s.opJSON(s.ops[k]), nil
		}
	}
	var in map[string]any
	json.Unmarshal(body, &in)
	name, _ := in["name"].(string)
	bad := func(format string, args ...any) (any, *apiError) {
		return nil, &apiError{400, "invalid", fmt.Sprintf(format, args...), 0}
	}
	if s.instances[zone+"/"+name] != nil {
		return nil, &apiError{409, "alreadyExists", fmt.Sprintf("The resource 'projects/%s/zones/%s/instances/%s' already exists", s.o.Project, zone, name), 0}
	}
	mt, _ := in["machineType"].(string)
	mm := machineRe.FindStringSubmatch(mt)
	if mm == nil {
		return bad("Invalid value for field 'resource.machineType': '%s'. Machine type must be a URL: zones/ZONE/machineTypes/TYPE.", mt)
	}
	if mm[1] != zone {
		return bad("Invalid value for field 'resource.machineType': '%s'. Machine type zone must match the instance's zone %s.", mt, zone)
	}
	if !slices.Contains(machineTypes, mm[2]) {
		return nil, &apiError{400, "invalid", fmt.Sprintf("Invalid value for field 'resource.machineType': '%s'. Machine type with name '%s' does not exist in zone '%s'.", mt, mm[2], zone), 0}
	}
	disks, _ := in["disks"].([]any)
	boots := 0
	var outDisks []map[string]any
	for i, d := range disks {
		dm, _ := d.(map[string]any)
		if b, _ := dm["boot"].(bool); b {
			boots++
		}
		ip, _ := dm["initializeParams"].(map[string]any)
		if ip == nil {
			return bad("Invalid value for field 'resource.disks[%d]': a new disk needs initializeParams (this fake attaches no existing disks)", i)
		}
		if dt, ok := ip["diskType"].(string); ok {
			if m := diskTypeRe.FindStringSubmatch(dt); m == nil || m[1] != zone {
				return bad("Invalid value for field 'resource.disks[%d].initializeParams.diskType': '%s'. Disk type must be zones/%s/diskTypes/TYPE.", i, dt, zone)
			}
		}
		if dm["boot"] == true {
			img, _ := ip["sourceImage"].(string)
			img = strings.TrimPrefix(img, "https://compute.googleapis.com/compute/v1/")
			if !s.images[img] {
				return nil, &apiError{404, "notFound", fmt.Sprintf("The resource '%s' was not found", img), 0}
			}
		}
		dev, _ := dm["deviceName"].(string)
		if dev == "" {
			dev = fmt.Sprintf("persistent-disk-%d", i)
		}
		outDisks = append(outDisks, map[string]any{"kind": "compute#attachedDisk", "type": "PERSISTENT", "mode": "READ_WRITE",
			"source": s.selfLink(zone, "disks/"+name+strings.TrimPrefix(dev, name)), "deviceName": dev, "index": i, "boot": dm["boot"] == true,
			"autoDelete": dm["autoDelete"] == true, "interface": "SCSI", "diskSizeGb": ip["diskSizeGb"]})
	}
	if boots != 1 {
		return bad("Invalid value for field 'resource.disks': an instance needs exactly one boot disk, got %d", boots)
	}
	nics, _ := in["networkInterfaces"].([]any)
	if len(nics) != 1 {
		return bad("Invalid value for field 'resource.networkInterfaces': this fake takes one network interface, got %d", len(nics))
	}
	nic, _ := nics[0].(map[string]any)
	if nw, ok := nic["network"].(string); ok {
		if m := networkRe.FindStringSubmatch(nw); m == nil || m[1] != "default" {
			return nil, &apiError{404, "notFound", fmt.Sprintf("The resource 'projects/%s/global/networks/%s' was not found", s.o.Project, strings.TrimPrefix(nw, "global/networks/")), 0}
		}
	}
	if sn, ok := nic["subnetwork"].(string); ok && subnetRe.FindStringSubmatch(sn) == nil {
		return bad("Invalid value for field 'resource.networkInterfaces[0].subnetwork': '%s'.", sn)
	}
	labels := map[string]string{}
	if l, ok := in["labels"].(map[string]any); ok {
		for k, v := range l {
			vs, _ := v.(string)
			if !labelKeyRe.MatchString(k) || !labelValueRe.MatchString(vs) {
				return bad("Invalid value for field 'resource.labels': label %s=%s: keys start with a lowercase letter; keys and values hold lowercase letters, digits, _ and -, at most 63", k, vs)
			}
			labels[k] = vs
		}
	}
	meta := map[string]string{}
	if md, ok := in["metadata"].(map[string]any); ok {
		items, _ := md["items"].([]any)
		for _, it := range items {
			im, _ := it.(map[string]any)
			k, _ := im["key"].(string)
			v, _ := im["value"].(string)
			if _, dup := meta[k]; dup {
				return bad("Invalid value for field 'resource.metadata': duplicate key '%s'", k)
			}
			meta[k] = v
		}
	}
	if keys := meta["ssh-keys"]; keys != "" {
		for _, line := range strings.Split(strings.TrimSpace(keys), "\n") {
			user, key, ok := strings.Cut(line, ":")
			if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(key)); !ok || user == "" || err != nil {
				return bad("Invalid value for field 'resource.metadata': ssh-keys line %q is not USER:KEY", line)
			}
		}
	}
	if opError != "" {
		op := s.newOp(zone, "insert", name, requestID, nil)
		op.errCode, op.errMsg, op.httpCode = opError, fmt.Sprintf("The zone '%s' does not have enough resources available to fulfill the request (%s).", zone, opError), 503
		if opError == "QUOTA_EXCEEDED" {
			op.errMsg, op.httpCode = "Quota 'CPUS' exceeded.  Limit: 8.0 in region us-central1.", 403
		}
		return s.opJSON(op), nil
	}
	m := s.nextMachine()
	s.seq++
	inst := &Instance{Name: name, Zone: zone, MachineType: mm[2], Status: "PROVISIONING", Labels: labels, Metadata: meta,
		NetworkIP: m.NetworkIP, HostKeys: m.HostKeys, Disks: outDisks, ID: 4000000000000000000 + s.seq, Created: s.o.Now(), body: in}
	if acs, _ := nic["accessConfigs"].([]any); len(acs) > 0 {
		inst.NatIP = m.NatIP
	}
	s.instances[zone+"/"+name] = inst
	s.order = append(s.order, zone+"/"+name)
	return s.opJSON(s.newOp(zone, "insert", name, requestID, nil)), nil
}

func (s *Server) nextMachine() Machine {
	s.machines++
	n := s.machines
	var m Machine
	if n <= len(s.o.Machines) {
		m = s.o.Machines[n-1]
	}
	if m.NatIP == "" && n > len(s.o.Machines) {
		m.NatIP = fmt.Sprintf("34.70.0.%d", 10+n)
	}
	if m.NetworkIP == "" {
		m.NetworkIP = fmt.Sprintf("10.128.0.%d", 10+n)
	}
	if len(m.HostKeys) == 0 {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		sp, _ := ssh.NewPublicKey(pub)
		m.HostKeys = []string{strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp)))}
	}
	return m
}

func (s *Server) newOp(zone, typ, target, requestID string, onDone func()) *operation {
	s.seq++
	op := &operation{id: 7000000000000000000 + s.seq, name: fmt.Sprintf("operation-%d-%x", s.o.Now().UnixMilli(), s.seq),
		typ: typ, zone: zone, target: target, status: "PENDING", insertTime: s.o.Now(), onDone: onDone}
	s.ops[zone+"/"+op.name] = op
	if requestID != "" {
		s.requests[requestID] = zone + "/" + op.name
	}
	if s.o.OpReads < 0 {
		s.finish(op)
	}
	return op
}

func (s *Server) finish(op *operation) {
	if op.done {
		return
	}
	op.done, op.status = true, "DONE"
	if op.onDone != nil {
		op.onDone()
	}
}

func (s *Server) opJSON(op *operation) map[string]any {
	ts := func(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000-07:00") }
	out := map[string]any{"kind": "compute#operation", "id": strconv.FormatUint(op.id, 10), "name": op.name,
		"zone": s.selfLink(op.zone, "")[:len(s.selfLink(op.zone, ""))-1], "operationType": op.typ,
		"targetLink": s.selfLink(op.zone, "instances/"+op.target), "targetId": strconv.FormatUint(op.id+1, 10),
		"status": op.status, "user": Email, "progress": 0, "insertTime": ts(op.insertTime), "startTime": ts(op.insertTime),
		"selfLink": s.selfLink(op.zone, "operations/"+op.name)}
	if op.status == "DONE" {
		out["progress"], out["endTime"] = 100, ts(s.o.Now())
		if op.errCode != "" {
			out["error"] = map[string]any{"errors": []map[string]any{{"code": op.errCode, "message": op.errMsg}}}
			out["httpErrorStatusCode"], out["httpErrorMessage"] = op.httpCode, http.StatusText(op.httpCode)
		}
	}
	return out
}

func (s *Server) instanceJSON(i *Instance) map[string]any {
	nic := map[string]any{"kind": "compute#networkInterface", "name": "nic0", "network": "https://compute.googleapis.com/compute/v1/projects/" + s.o.Project + "/global/networks/default",
		"networkIP": i.NetworkIP, "stackType": "IPV4_ONLY", "fingerprint": "rZf0KfG0VxA="}
	if i.NatIP != "" {
		nic["accessConfigs"] = []map[string]any{{"kind": "compute#accessConfig", "name": "External NAT", "type": "ONE_TO_ONE_NAT",
			"natIP": i.NatIP, "networkTier": "PREMIUM"}}
	}
	out := map[string]any{"kind": "compute#instance", "id": strconv.FormatUint(i.ID, 10), "name": i.Name,
		"creationTimestamp": i.Created.UTC().Format("2006-01-02T15:04:05.000-07:00"), "status": i.Status,
		"zone":        s.selfLink(i.Zone, "")[:len(s.selfLink(i.Zone, ""))-1],
		"machineType": s.selfLink(i.Zone, "machineTypes/"+i.MachineType), "networkInterfaces": []any{nic},
		"selfLink": s.selfLink(i.Zone, "instances/"+i.Name), "labelFingerprint": "42WmSpB8rSM=", "fingerprint": "0wS7hXuJ1vU=",
		"cpuPlatform": "Intel Broadwell", "deletionProtection": false, "canIpForward": false}
	if len(i.Labels) > 0 {
		out["labels"] = i.Labels
	}
	if len(i.Disks) > 0 {
		out["disks"] = i.Disks
	}
	if len(i.Metadata) > 0 {
		var items []map[string]string
		keys := make([]string, 0, len(i.Metadata))
		for k := range i.Metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			items = append(items, map[string]string{"key": k, "value": i.Metadata[k]})
		}
		out["metadata"] = map[string]any{"kind": "compute#metadata", "fingerprint": "FikclA7UBC0=", "items": items}
	}
	if i.Status == "RUNNING" {
		out["lastStartTimestamp"] = i.Created.UTC().Format("2006-01-02T15:04:05.000-07:00")
	}
	return out
}

var labelFilterRe = regexp.MustCompile(`^\(?\s*labels\.([a-z][a-z0-9_-]*)\s*=\s*"?([a-z0-9_-]*)"?\s*\)?$`)

func (s *Server) list(zone, filter string) (any, *apiError) {
	var key, val string
	if filter != "" {
		m := labelFilterRe.FindStringSubmatch(filter)
		if m == nil {
			return nil, &apiError{400, "invalid", fmt.Sprintf("Invalid value for field 'filter': '%s'. Invalid list filter expression (this fake takes labels.KEY = \"VALUE\").", filter), 0}
		}
		key, val = m[1], m[2]
	}
	items := []any{}
	for _, k := range s.order {
		i := s.instances[k]
		if i == nil || i.Zone != zone || (key != "" && i.Labels[key] != val) {
			continue
		}
		items = append(items, s.instanceJSON(i))
	}
	out := map[string]any{"kind": "compute#instanceList", "id": "projects/" + s.o.Project + "/zones/" + zone + "/instances",
		"selfLink": s.selfLink(zone, "instances")}
	if len(items) > 0 {
		out["items"] = items
	}
	return out, nil
}
