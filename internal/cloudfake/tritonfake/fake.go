// Package tritonfake is a strict fake of the Triton CloudAPI calls the
// joyent provider plugin makes: ListMachines (with tag filters),
// CreateMachine, GetMachine and DeleteMachine for one account, on one
// loopback HTTP server.
//
// It is strict where CloudAPI is: every request is authenticated with an
// HTTP Signature over its Date header (rsa-sha256, ecdsa-sha256/384/512,
// keyId /<login>/keys/<MD5 fingerprint>, a Date within five minutes) or,
// when Options.Password is set, Basic credentials; every request carries
// Accept-Version; a create names a package and an image that exist and a
// name no other machine of the account has, and its unknown parameters
// are refused (CloudAPI's 409 InvalidArgument).
package tritonfake

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/md5"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/internal/cloudfake/fakehttp"
)

// Options configure the fake. Zero values get the defaults noted.
type Options struct {
	// Login is the account ("loom").
	Login string
	// Keys are the account's SSH public keys (authorized_keys lines):
	// requests signed by their private halves are the account's.
	Keys []string
	// Password, when set, is also accepted as Basic credentials (CloudAPI
	// 7 and older).
	Password string
	// Packages and Images are the names or ids a create may name
	// (default "g4-highcpu-1G" and one image id).
	Packages, Images []string
	// Addresses are the IPv4 addresses new machines get, in order, each
	// machine all of one entry (comma-separated); past the list, machines
	// get 165.225.x.y and 10.88.x.y.
	Addresses []string
	// ProvisionReads is how many reads of a new machine answer
	// "provisioning" before it is "running" (default 1; -1: at once).
	ProvisionReads int
	// Now is the server's clock (time.Now when nil).
	Now func() time.Time
}

// Image is the image id the zero Options accept.
const Image = "5c4a3ef6-6a0e-4d23-95b4-4a0b2b4f3c20"

// Machine is a machine as the fake keeps it.
type Machine struct {
	ID, Name, State, Package, Image string
	IPs                             []string
	Tags                            map[string]string
	Networks                        []string
	Created                         time.Time
	Reads                           int
}

// Exchange is one request and the fake's answer.
type Exchange struct {
	Method, Path string
	Query        map[string][]string
	Header       http.Header
	Body         []byte
	Status       int
	RespBody     []byte
}

// Fault is a canned failure for the next request matching Method and the
// Path prefix (below /<login>, such as "/machines").
type Fault struct {
	Method, Path string
	Status       int
	Code         string
	// Drop closes the connection without an answer; with After, the
	// request is carried out first (the answer is lost on the way back).
	Drop, After bool
}

// Fake is a running fake CloudAPI.
type Fake struct {
	o    Options
	srv  *httptest.Server
	keys map[string]crypto.PublicKey // MD5 fingerprint -> key

	mu       sync.Mutex
	machines map[string]*Machine
	order    []string
	faults   []Fault
	log      []Exchange
	problems []string
	seq      int
}

// Start starts a fake on 127.0.0.1.
func Start(o Options) *Fake {
	if o.Login == "" {
		o.Login = "loom"
	}
	if len(o.Packages) == 0 {
		o.Packages = []string{"g4-highcpu-1G"}
	}
	if len(o.Images) == 0 {
		o.Images = []string{Image}
	}
	if o.ProvisionReads == 0 {
		o.ProvisionReads = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	f := &Fake{o: o, keys: map[string]crypto.PublicKey{}, machines: map[string]*Machine{}}
	for _, line := range o.Keys {
		pk, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line))
		if err != nil {
			panic(fmt.Sprintf("tritonfake: key %q: %v", line, err))
		}
		sum := md5.Sum(pk.Marshal())
		var fp []string
		for _, b := range sum {
			fp = append(fp, fmt.Sprintf("%02x", b))
		}
		f.keys[strings.Join(fp, ":")] = pk.(ssh.CryptoPublicKey).CryptoPublicKey()
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// URL is the CloudAPI endpoint (joyent_api_url).
func (f *Fake) URL() string { return f.srv.URL }

// Close stops the server.
func (f *Fake) Close() { f.srv.Close() }

// FailNext makes the next matching request fail as flt says.
func (f *Fake) FailNext(flt Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, flt)
}

// Problems are requests CloudAPI would refuse for a plugin bug.
func (f *Fake) Problems() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.problems...)
}

// Exchanges returns the requests with method (or any: "") whose path
// below /<login> starts with prefix.
func (f *Fake) Exchanges(method, prefix string) []Exchange {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Exchange
	for _, e := range f.log {
		if (method == "" || e.Method == method) && strings.HasPrefix(e.Path, prefix) {
			out = append(out, e)
		}
	}
	return out
}

// Machines returns the machines that are not deleted, oldest first.
func (f *Fake) Machines() []Machine {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Machine
	for _, id := range f.order {
		if m := f.machines[id]; m.State != "deleted" {
			out = append(out, *m)
		}
	}
	return out
}

// SetState moves a machine to state (running, failed, stopped...).
func (f *Fake) SetState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.machines[id]; ok {
		m.State = state
	}
}

func (f *Fake) problem(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Request-Id", fmt.Sprintf("%08x-fake", time.Now().UnixNano()&0xffffffff))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError answers in CloudAPI's shape: {"code", "message"}.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	prefix := "/" + f.o.Login
	path := strings.TrimPrefix(r.URL.Path, prefix)
	ex := Exchange{Method: r.Method, Path: path, Query: r.URL.Query(), Header: r.Header.Clone(), Body: body}
	if !strings.HasPrefix(r.URL.Path, prefix+"/") {
		ex.Path = r.URL.Path
	}
	var flt *Fault
	f.mu.Lock()
	for i, x := range f.faults {
		if (x.Method == "" || x.Method == r.Method) && strings.HasPrefix(path, x.Path) {
			c := x
			flt = &c
			f.faults = append(f.faults[:i], f.faults[i+1:]...)
			break
		}
	}
	f.mu.Unlock()
	rec := &fakehttp.Recorder{ResponseWriter: w}
	switch {
	case flt != nil && flt.Drop && !flt.After:
		fakehttp.DropConn(w)
	case flt != nil && flt.Drop:
		lost := &fakehttp.Recorder{ResponseWriter: fakehttp.Discard{H: http.Header{}}}
		f.route(lost, r, path, body)
		rec.Status, rec.Body = lost.Status, lost.Body
		fakehttp.DropConn(w)
	case flt != nil:
		apiError(rec, flt.Status, flt.Code, "injected fault")
	default:
		f.route(rec, r, path, body)
	}
	ex.Status, ex.RespBody = rec.Status, rec.Body
	f.mu.Lock()
	f.log = append(f.log, ex)
	f.mu.Unlock()
}

var sigRe = regexp.MustCompile(`^Signature keyId="([^"]+)",algorithm="([^"]+)",headers="([^"]+)",signature="([^"]+)"$`)

// authenticate checks the request's credentials as CloudAPI does; it
// answers and returns false when they fail.
func (f *Fake) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Accept-Version") == "" {
		f.problem("%s %s: no Accept-Version header", r.Method, r.URL.Path)
	}
	auth := r.Header.Get("Authorization")
	if user, pass, ok := r.BasicAuth(); ok {
		if f.o.Password == "" || user != f.o.Login || pass != f.o.Password {
			apiError(w, 401, "InvalidCredentials", "The credentials provided are invalid")
			return false
		}
		return true
	}
	m := sigRe.FindStringSubmatch(auth)
	if m == nil {
		apiError(w, 401, "InvalidCredentials", "Authorization header is not a Signature or Basic credentials")
		if auth != "" {
			f.problem("%s %s: Authorization %q is not CloudAPI's Signature form", r.Method, r.URL.Path, auth)
		}
		return false
	}
	keyID, alg, headers, sig := m[1], m[2], m[3], m[4]
	if headers != "date" {
		f.problem("%s %s: signed headers %q, the plugin signs date", r.Method, r.URL.Path, headers)
	}
	date := r.Header.Get("Date")
	at, err := http.ParseTime(date)
	if err != nil {
		apiError(w, 401, "InvalidSignature", "Date header is missing or not an HTTP date")
		f.problem("%s %s: Date %q: %v", r.Method, r.URL.Path, date, err)
		return false
	}
	if d := f.o.Now().Sub(at); d > 5*time.Minute || d < -5*time.Minute {
		apiError(w, 401, "InvalidSignature", "Date header is more than 300 seconds off")
		return false
	}
	fp, ok := strings.CutPrefix(keyID, "/"+f.o.Login+"/keys/")
	pub := f.keys[fp]
	if !ok || pub == nil {
		apiError(w, 401, "InvalidCredentials", fmt.Sprintf("key %s is not a key of account %s", keyID, f.o.Login))
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil {
		apiError(w, 401, "InvalidSignature", "signature is not base64")
		f.problem("%s %s: signature is not standard base64: %v", r.Method, r.URL.Path, err)
		return false
	}
	signed := []byte("date: " + date)
	valid := false
	switch k := pub.(type) {
	case *rsa.PublicKey:
		sum := sha256.Sum256(signed)
		valid = alg == "rsa-sha256" && rsa.VerifyPKCS1v15(k, crypto.SHA256, sum[:], raw) == nil
	case *ecdsa.PublicKey:
		var digest []byte
		switch alg {
		case "ecdsa-sha256":
			s := sha256.Sum256(signed)
			digest = s[:]
		case "ecdsa-sha384":
			s := sha512.Sum384(signed)
			digest = s[:]
		case "ecdsa-sha512":
			s := sha512.Sum512(signed)
			digest = s[:]
		}
		valid = digest != nil && ecdsa.VerifyASN1(k, digest, raw)
	}
	if !valid {
		apiError(w, 401, "InvalidSignature", "The signature we calculated does not match the one you sent")
		f.problem("%s %s: signature (%s) does not verify", r.Method, r.URL.Path, alg)
		return false
	}
	return true
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func (f *Fake) route(w http.ResponseWriter, r *http.Request, path string, body []byte) {
	if !f.authenticate(w, r) {
		return
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case r.Method == "GET" && path == "/machines":
		f.list(w, r)
	case r.Method == "POST" && path == "/machines":
		f.create(w, body)
	case len(seg) == 2 && seg[0] == "machines" && r.Method == "GET":
		f.get(w, seg[1])
	case len(seg) == 2 && seg[0] == "machines" && r.Method == "DELETE":
		f.remove(w, seg[1])
	default:
		apiError(w, 404, "ResourceNotFound", r.URL.Path+" does not exist")
		f.problem("%s %s: not a CloudAPI route the plugin uses", r.Method, r.URL.Path)
	}
}

func (f *Fake) view(m *Machine) map[string]any {
	primary := ""
	if len(m.IPs) > 0 {
		primary = m.IPs[0]
	}
	tags := map[string]string{}
	for k, v := range m.Tags {
		tags[k] = v
	}
	return map[string]any{"id": m.ID, "name": m.Name, "type": "virtualmachine", "brand": "kvm", "state": m.State,
		"image": m.Image, "ips": m.IPs, "memory": 1024, "disk": 25600, "metadata": map[string]any{}, "tags": tags,
		"created": m.Created.UTC().Format("2006-01-02T15:04:05.000Z"), "updated": m.Created.UTC().Format("2006-01-02T15:04:05.000Z"),
		"networks": m.Networks, "primaryIp": primary, "package": m.Package, "firewall_enabled": false}
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	for k, v := range r.URL.Query() {
		tag, ok := strings.CutPrefix(k, "tag.")
		if !ok {
			apiError(w, 409, "InvalidArgument", "unknown query parameter "+k)
			f.problem("GET /machines: query parameter %q the plugin should not send", k)
			return
		}
		want[tag] = v[0]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []any{}
	for _, id := range f.order {
		m := f.machines[id]
		if m.State == "deleted" {
			continue
		}
		ok := true
		for k, v := range want {
			ok = ok && m.Tags[k] == v
		}
		if ok {
			out = append(out, f.view(m))
		}
	}
	writeJSON(w, 200, out)
}

func (f *Fake) create(w http.ResponseWriter, body []byte) {
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		apiError(w, 409, "InvalidArgument", "body is not JSON: "+err.Error())
		f.problem("POST /machines: %v", err)
		return
	}
	m := &Machine{Tags: map[string]string{}, Created: f.o.Now()}
	for k, v := range doc {
		s, isString := v.(string)
		switch {
		case k == "name" && isString:
			m.Name = s
		case k == "package" && isString:
			m.Package = s
		case k == "image" && isString:
			m.Image = s
		case k == "networks":
			list, ok := v.([]any)
			if !ok {
				apiError(w, 409, "InvalidArgument", "networks must be an array")
				f.problem("POST /machines: networks %v", v)
				return
			}
			for _, n := range list {
				m.Networks = append(m.Networks, fmt.Sprint(n))
			}
		case strings.HasPrefix(k, "tag.") && isString:
			m.Tags[strings.TrimPrefix(k, "tag.")] = s
		default:
			apiError(w, 409, "InvalidArgument", fmt.Sprintf("%s is not a valid parameter", k))
			f.problem("POST /machines: parameter %q", k)
			return
		}
	}
	if !slices.Contains(f.o.Packages, m.Package) {
		apiError(w, 409, "InvalidArgument", fmt.Sprintf("%s is not a valid package", m.Package))
		return
	}
	if !slices.Contains(f.o.Images, m.Image) {
		apiError(w, 409, "InvalidArgument", fmt.Sprintf("image %s does not exist", m.Image))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.machines {
		if x.Name == m.Name && m.Name != "" && x.State != "deleted" {
			apiError(w, 409, "InvalidArgument", fmt.Sprintf("name %s is already in use", m.Name))
			return
		}
	}
	f.seq++
	m.ID = fmt.Sprintf("%08x-0000-4000-8000-%012x", f.seq, f.seq)
	if f.seq <= len(f.o.Addresses) {
		m.IPs = strings.Split(f.o.Addresses[f.seq-1], ",")
	} else {
		m.IPs = []string{fmt.Sprintf("165.225.%d.%d", f.seq/250, f.seq%250+1), fmt.Sprintf("10.88.%d.%d", f.seq/250, f.seq%250+1)}
	}
	m.State = "provisioning"
	if f.o.ProvisionReads < 0 {
		m.State = "running"
	}
	f.machines[m.ID] = m
	f.order = append(f.order, m.ID)
	v := f.view(m)
	v["ips"], v["primaryIp"] = []string{}, ""
	writeJSON(w, 201, v)
}

func (f *Fake) get(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machines[id]
	switch {
	case !uuidRe.MatchString(id):
		apiError(w, 409, "InvalidArgument", id+" is not a UUID")
	case m == nil:
		apiError(w, 404, "ResourceNotFound", id+" not found")
	case m.State == "deleted":
		writeJSON(w, 410, f.view(m))
	default:
		m.Reads++
		if m.State == "provisioning" && m.Reads > f.o.ProvisionReads {
			m.State = "running"
		}
		writeJSON(w, 200, f.view(m))
	}
}

func (f *Fake) remove(w http.ResponseWriter, id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.machines[id]
	switch {
	case !uuidRe.MatchString(id):
		apiError(w, 409, "InvalidArgument", id+" is not a UUID")
	case m == nil:
		apiError(w, 404, "ResourceNotFound", id+" not found")
	case m.State == "deleted":
		writeJSON(w, 410, f.view(m))
	default:
		m.State = "deleted"
		w.WriteHeader(204)
	}
}
