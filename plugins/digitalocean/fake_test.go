package digitalocean_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// apiHost is the host the plugin's definition allows. The test transport
// carries requests for it to the fake on loopback.
const apiHost = "api.digitalocean.com"

// fakeDO is a strict fake of the DigitalOcean API v2 endpoints the plugin
// uses, with the documented paths and JSON shapes. A request the real API
// would reject (wrong method, path, token, content type, unknown or
// missing JSON fields, invalid names or tags) fails the test.
type fakeDO struct {
	t     *testing.T
	token string
	srv   *httptest.Server

	mu       sync.Mutex
	requests []request
	keys     []sshKey
	keysPage int // page size for /v2/account/keys, small to force paging
	droplets map[int]*droplet
	nextID   int
	// activeAfter is how many GETs of a droplet answer "new" first.
	activeAfter int
	// networks are the v4 networks a droplet gets once active.
	networks []network
	// createErrors makes every create action end "errored".
	createErrors bool
	// quotaLeft is the account's request quota left (ratelimit-remaining):
	// every request spends one, and at 0 requests get 429 (without
	// retry-after, as for the hourly quota) until quotaReset, when the
	// quota is back to quotaRefill.
	quotaLeft   int
	quotaReset  time.Time
	quotaRefill int
	// keyListings are the times of the GET /v2/account/keys requests in
	// the last minute: DigitalOcean allows 10 a minute, and the fake
	// answers the 11th with 429 and retry-after.
	keyListings []time.Time
	// throttled counts the 429s the fake answered of its own accord.
	throttled int
	// createFields are the fields of a create request, from the spec.
	createFields []string
	// canned are responses served instead of the route, first in first
	// out, keyed by "METHOD /path".
	canned map[string][]canned
}

type request struct {
	Method, Path string
	Query        map[string][]string
	Body         map[string]any
}

type sshKey struct {
	ID          int    `json:"id"`
	Fingerprint string `json:"fingerprint"`
	PublicKey   string `json:"public_key"`
	Name        string `json:"name"`
}

type network struct {
	IPAddress string `json:"ip_address"`
	Netmask   string `json:"netmask,omitempty"`
	Gateway   string `json:"gateway,omitempty"`
	Type      string `json:"type"`
}

type droplet struct {
	ID       int
	Name     string
	Region   string
	Size     string
	Image    any
	Tags     []string
	SSHKeys  []string
	Status   string
	GPU      bool // a GPU droplet: listed only with type=gpus
	gets     int
	actionID int
}

// canned is a response to serve once. created makes the fake create the
// droplet first (a 500 after the work was done).
type canned struct {
	status  int
	headers map[string]string
	body    any
	created bool
}

func newFakeDO(t *testing.T, token string) *fakeDO {
	f := &fakeDO{
		t:     t,
		token: token,
		keys: []sshKey{
			{ID: 512189, Fingerprint: "3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa", Name: "loom-admin", PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAdmin"},
			{ID: 512190, Fingerprint: "aa:bb:cc:dd:ee:ff:00:11:22:33:44:55:66:77:88:99", Name: "ops", PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOps"},
			{ID: 512191, Fingerprint: "de:ad:be:ef:00:00:00:00:00:00:00:00:00:00:00:01", Name: "ci", PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICi"},
		},
		keysPage:    1,
		droplets:    map[int]*droplet{},
		nextID:      3164494,
		activeAfter: 1,
		networks: []network{
			{IPAddress: "203.0.113.10", Netmask: "255.255.255.0", Gateway: "203.0.113.1", Type: "public"},
			{IPAddress: "10.108.0.2", Netmask: "255.255.240.0", Gateway: "10.108.0.1", Type: "private"},
		},
		quotaLeft:   4999,
		quotaReset:  time.Now().Add(time.Minute),
		quotaRefill: 5000,
		canned:      map[string][]canned{},
	}
	f.createFields = createFields(t)
	f.srv = httptest.NewServer(f.validating(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// queue makes the next request to "METHOD /path" get c.
func (f *fakeDO) queue(route string, c canned) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canned[route] = append(f.canned[route], c)
}

// seed adds a droplet as if an earlier CREATE had made it.
func (f *fakeDO) seed(d *droplet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if d.ID == 0 {
		d.ID = f.nextID
		f.nextID++
	}
	f.droplets[d.ID] = d
}

func (f *fakeDO) dropletCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.droplets)
}

func (f *fakeDO) get(id int) *droplet {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.droplets[id]
}

// calls returns the recorded requests matching "METHOD /path" ("" = all).
func (f *fakeDO) calls(route string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.requests {
		if route == "" || r.Method+" "+r.Path == route {
			out = append(out, r)
		}
	}
	return out
}

// transport sends requests for apiHost to the fake, keeping the Host
// header, so the plugin runs with its production api_url and allow-list.
type transport struct {
	addr string
	base *http.Transport
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host != apiHost {
		return nil, fmt.Errorf("test transport: only %s is faked, not %s", apiHost, req.URL.Host)
	}
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("test transport: the plugin used %s, not https", req.URL.Scheme)
	}
	r := req.Clone(req.Context())
	r.URL.Scheme = "http"
	r.URL.Host = tr.addr
	r.Host = apiHost
	return tr.base.RoundTrip(r)
}

func (f *fakeDO) transport() http.RoundTripper {
	tr := &transport{addr: f.srv.Listener.Addr().String(), base: &http.Transport{}}
	f.t.Cleanup(tr.base.CloseIdleConnections)
	return tr
}

var (
	dropletPath = regexp.MustCompile(`^/v2/droplets/(\d+)$`)
	actionsPath = regexp.MustCompile(`^/v2/droplets/(\d+)/actions$`)
	validName   = regexp.MustCompile(`^[a-zA-Z0-9]?[a-z0-9A-Z.\-]*[a-z0-9A-Z]$`)
	validTag    = regexp.MustCompile(`^[a-zA-Z0-9_\-:]+$`)
)

func (f *fakeDO) serve(w http.ResponseWriter, r *http.Request, raw []byte) {
	f.t.Helper()
	rec := request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query()}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &rec.Body); err != nil {
			f.t.Errorf("%s %s: body is not a JSON object: %v: %s", r.Method, r.URL.Path, err, raw)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, rec)

	if f.throttle(w, r) {
		return
	}

	if r.Host != apiHost {
		f.t.Errorf("%s %s: Host %q, want %q", r.Method, r.URL.Path, r.Host, apiHost)
	}
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		f.fail(w, http.StatusUnauthorized, "Unauthorized", "Unable to authenticate you")
		return
	}
	route := r.Method + " " + r.URL.Path
	if q := f.canned[route]; len(q) > 0 {
		c := q[0]
		f.canned[route] = q[1:]
		if c.created {
			f.create(w, rec, true)
		}
		for k, v := range c.headers {
			w.Header().Set(k, v)
		}
		writeJSON(w, c.status, c.body)
		return
	}

	switch {
	case route == "GET /v2/account/keys":
		f.listKeys(w, r)
	case route == "GET /v2/droplets":
		f.listDroplets(w, r)
	case route == "POST /v2/droplets":
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			f.t.Errorf("POST /v2/droplets: Content-Type %q, want application/json", ct)
			f.fail(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
			return
		}
		f.create(w, rec, false)
	case route == "DELETE /v2/droplets":
		tag := r.URL.Query().Get("tag_name")
		if tag == "" {
			f.t.Errorf("DELETE /v2/droplets without tag_name would be refused")
			f.fail(w, http.StatusUnprocessableEntity, "unprocessable_entity", "tag_name is required")
			return
		}
		for id, d := range f.droplets {
			// Whether this reaches GPU droplets is not documented: the fake
			// assumes the worst, so the plugin must delete those itself.
			if slices.Contains(d.Tags, tag) && !d.GPU {
				delete(f.droplets, id)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == "GET" && dropletPath.MatchString(r.URL.Path):
		f.getDroplet(w, dropletPath.FindStringSubmatch(r.URL.Path)[1])
	case r.Method == "GET" && actionsPath.MatchString(r.URL.Path):
		f.listActions(w, actionsPath.FindStringSubmatch(r.URL.Path)[1])
	case r.Method == "DELETE" && dropletPath.MatchString(r.URL.Path):
		id, _ := strconv.Atoi(dropletPath.FindStringSubmatch(r.URL.Path)[1])
		if _, ok := f.droplets[id]; !ok {
			f.notFound(w)
			return
		}
		delete(f.droplets, id)
		w.WriteHeader(http.StatusNoContent)
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		f.notFound(w)
	}
}

// throttle spends one request of the quota and sets the ratelimit
// headers; it answers 429 and reports true when the quota is used up or
// the request is the 11th key listing within a minute.
func (f *fakeDO) throttle(w http.ResponseWriter, r *http.Request) bool {
	now := time.Now()
	if !now.Before(f.quotaReset) {
		f.quotaLeft = f.quotaRefill
		f.quotaReset = now.Add(time.Minute)
	}
	exhausted := f.quotaLeft <= 0
	if !exhausted {
		f.quotaLeft--
	}
	w.Header().Set("Ratelimit-Limit", "5000")
	w.Header().Set("Ratelimit-Remaining", strconv.Itoa(f.quotaLeft))
	w.Header().Set("Ratelimit-Reset", strconv.FormatInt(f.quotaReset.Unix(), 10))
	if exhausted {
		f.throttled++
		f.fail(w, http.StatusTooManyRequests, "too_many_requests", "API Rate limit exceeded.")
		return true
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v2/account/keys" {
		kept := f.keyListings[:0]
		for _, t := range f.keyListings {
			if now.Sub(t) < time.Minute {
				kept = append(kept, t)
			}
		}
		f.keyListings = kept
		if len(kept) >= 10 {
			f.throttled++
			wait := kept[len(kept)-10].Add(time.Minute).Sub(now)
			w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
			f.fail(w, http.StatusTooManyRequests, "too_many_requests", "API Rate limit exceeded.")
			return true
		}
		f.keyListings = append(f.keyListings, now)
	}
	return false
}

func (f *fakeDO) fail(w http.ResponseWriter, status int, id, message string) {
	writeJSON(w, status, map[string]any{"id": id, "message": message, "request_id": "4d9d8375-3c56-4925-a3e7-eb137fed17e9"})
}

func (f *fakeDO) notFound(w http.ResponseWriter) {
	f.fail(w, http.StatusNotFound, "not_found", "The resource you were accessing could not be found.")
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	if body == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// page reads DigitalOcean's page/per_page parameters.
func (f *fakeDO) page(r *http.Request) (page, perPage int) {
	q := r.URL.Query()
	page, perPage = 1, 20
	if s := q.Get("page"); s != "" {
		page, _ = strconv.Atoi(s)
	}
	if s := q.Get("per_page"); s != "" {
		perPage, _ = strconv.Atoi(s)
	}
	if page < 1 || perPage < 1 || perPage > 200 {
		f.t.Errorf("%s %s: page=%q per_page=%q out of range (per_page max 200)", r.Method, r.URL.Path, q.Get("page"), q.Get("per_page"))
	}
	return page, perPage
}

func (f *fakeDO) listKeys(w http.ResponseWriter, r *http.Request) {
	page, perPage := f.page(r)
	size := min(perPage, f.keysPage)
	start := min((page-1)*size, len(f.keys))
	end := min(start+size, len(f.keys))
	pages := map[string]any{}
	if end < len(f.keys) {
		pages["next"] = fmt.Sprintf("https://%s/v2/account/keys?page=%d&per_page=%d", apiHost, page+1, perPage)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ssh_keys": f.keys[start:end],
		"links":    map[string]any{"pages": pages},
		"meta":     map[string]any{"total": len(f.keys)},
	})
}

// listDroplets serves GET /v2/droplets as documented: tag_name filters by
// tag and cannot be combined with name or type; name is an exact,
// case-insensitive match; GPU droplets are left out unless type=gpus.
func (f *fakeDO) listDroplets(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tag, name, typ := q.Get("tag_name"), q.Get("name"), q.Get("type")
	if tag == "" && name == "" {
		f.t.Errorf("GET /v2/droplets without tag_name or name: the plugin must not list the whole account")
	}
	if tag != "" && (q.Has("name") || q.Has("type")) {
		f.fail(w, http.StatusUnprocessableEntity, "unprocessable_entity", "tag_name can not be combined with name or type")
		return
	}
	if typ != "" && typ != "droplets" && typ != "gpus" {
		f.fail(w, http.StatusUnprocessableEntity, "unprocessable_entity", "type must be droplets or gpus")
		return
	}
	f.page(r)
	list := []any{}
	for _, id := range slices.Sorted(maps.Keys(f.droplets)) {
		d := f.droplets[id]
		if d.GPU != (typ == "gpus") {
			continue
		}
		if (tag != "" && !slices.Contains(d.Tags, tag)) || (name != "" && !strings.EqualFold(d.Name, name)) {
			continue
		}
		list = append(list, f.dropletJSON(d))
	}
	writeJSON(w, http.StatusOK, map[string]any{"droplets": list, "links": map[string]any{}, "meta": map[string]any{"total": len(list)}})
}

func (f *fakeDO) create(w http.ResponseWriter, rec request, quiet bool) {
	b := rec.Body
	var problems []string
	for k := range b {
		if k != "name" && !slices.Contains(f.createFields, k) {
			problems = append(problems, "unknown field "+k)
		}
	}
	str := func(k string) string {
		s, ok := b[k].(string)
		if !ok || s == "" {
			problems = append(problems, k+" must be a non-empty string")
		}
		return s
	}
	name, size := str("name"), str("size")
	// The spec lets region out: DigitalOcean then picks one.
	region, _ := b["region"].(string)
	if region == "" {
		region = "nyc3"
	}
	if name != "" && (!validName.MatchString(name) || len(name) > 255) {
		problems = append(problems, "Name Only valid hostname characters are allowed. (a-z, A-Z, 0-9, . and -)")
	}
	switch img := b["image"].(type) {
	case string:
		if img == "" {
			problems = append(problems, "image must not be empty")
		}
	case float64:
		if img <= 0 || img != float64(int(img)) {
			problems = append(problems, "image id must be a positive integer")
		}
	default:
		problems = append(problems, "image must be a slug or an id")
	}
	for _, k := range []string{"backups", "ipv6", "monitoring"} {
		if v, ok := b[k]; ok {
			if _, isBool := v.(bool); !isBool {
				problems = append(problems, k+" must be a boolean")
			}
		}
	}
	var tags []string
	if v, ok := b["tags"]; ok {
		list, isList := v.([]any)
		if !isList {
			problems = append(problems, "tags must be an array")
		}
		for _, t := range list {
			s, _ := t.(string)
			if !validTag.MatchString(s) || len(s) > 255 {
				problems = append(problems, fmt.Sprintf("tag %q: tags may contain letters, numbers, colons, dashes, and underscores", t))
			}
			tags = append(tags, s)
		}
	}
	var keys []string
	if v, ok := b["ssh_keys"]; ok {
		list, _ := v.([]any)
		for _, k := range list {
			s := fmt.Sprint(k)
			if !slices.ContainsFunc(f.keys, func(key sshKey) bool { return key.Fingerprint == s || strconv.Itoa(key.ID) == s }) {
				problems = append(problems, fmt.Sprintf("ssh_keys: %v is not a key of this account", k))
			}
			keys = append(keys, s)
		}
	}
	if size == "s-999vcpu-9tb" {
		problems = append(problems, "You specified an invalid size for Droplet creation.")
	}
	if len(problems) > 0 {
		if !quiet {
			f.fail(w, http.StatusUnprocessableEntity, "unprocessable_entity", strings.Join(problems, "; "))
		}
		return
	}
	d := &droplet{ID: f.nextID, Name: name, Region: region, Size: size, Image: b["image"], Tags: tags, SSHKeys: keys, Status: "new", actionID: 36804636 + f.nextID}
	f.nextID++
	f.droplets[d.ID] = d
	if quiet {
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"droplet": f.dropletJSON(d),
		"links": map[string]any{"actions": []any{map[string]any{
			"id": d.actionID, "rel": "create", "href": fmt.Sprintf("https://%s/v2/actions/%d", apiHost, d.actionID),
		}}},
	})
}

func (f *fakeDO) getDroplet(w http.ResponseWriter, idStr string) {
	id, _ := strconv.Atoi(idStr)
	d, ok := f.droplets[id]
	if !ok {
		f.notFound(w)
		return
	}
	d.gets++
	if d.Status == "new" && d.gets > f.activeAfter && !f.createErrors {
		d.Status = "active"
	}
	writeJSON(w, http.StatusOK, map[string]any{"droplet": f.dropletJSON(d)})
}

func (f *fakeDO) listActions(w http.ResponseWriter, idStr string) {
	id, _ := strconv.Atoi(idStr)
	d, ok := f.droplets[id]
	if !ok {
		f.notFound(w)
		return
	}
	status := "in-progress"
	switch {
	case f.createErrors:
		status = "errored"
	case d.Status == "active":
		status = "completed"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"actions": []any{map[string]any{
			"id": d.actionID, "status": status, "type": "create", "resource_id": d.ID, "resource_type": "droplet",
			"started_at": "2026-11-21T07:00:00Z", "region_slug": d.Region,
		}},
		"links": map[string]any{}, "meta": map[string]any{"total": 1},
	})
}

// dropletJSON is a droplet as DigitalOcean returns it, with every field
// the spec requires.
func (f *fakeDO) dropletJSON(d *droplet) map[string]any {
	v4 := []network{}
	if d.Status == "active" {
		v4 = f.networks
	}
	tags := d.Tags
	if tags == nil {
		tags = []string{}
	}
	// Droplets seeded by a test may leave these out; DigitalOcean's never do.
	dd := *d
	d = &dd
	if d.Region == "" {
		d.Region = "nyc3"
	}
	if d.Size == "" {
		d.Size = "s-1vcpu-1gb"
	}
	if d.Image == nil {
		d.Image = "debian-12-x64"
	}
	size := map[string]any{
		"slug": d.Size, "memory": 1024, "vcpus": 1, "disk": 25, "transfer": 1.0,
		"price_monthly": 6.0, "price_hourly": 0.00893, "regions": []string{d.Region},
		"available": true, "description": "Basic",
	}
	// An image given by id is a snapshot or custom image without a slug.
	image := map[string]any{
		"id": 7555620, "name": "12 x64", "type": "base", "distribution": "Debian", "slug": d.Image,
		"public": true, "regions": []string{d.Region}, "created_at": "2026-06-10T00:00:00Z",
		"min_disk_size": 15, "size_gigabytes": 2.36, "description": "Debian 12 x64", "tags": []string{},
		"status": "available",
	}
	if id, ok := d.Image.(float64); ok {
		image["id"], image["slug"], image["type"], image["public"] = int(id), nil, "snapshot", false
	}
	out := map[string]any{
		"id": d.ID, "name": d.Name, "memory": 1024, "vcpus": 1, "disk": 25, "locked": false,
		"status": d.Status, "kernel": nil, "created_at": "2026-11-21T07:00:00Z",
		"features": []string{"monitoring"}, "backup_ids": []int{},
		// DigitalOcean sends null without backups, but the spec wraps the
		// nullable schema in allOf, which OpenAPI 3.0 reads as not nullable.
		"next_backup_window": map[string]any{"start": "2026-11-22T00:00:00Z", "end": "2026-11-22T23:00:00Z"},
		"snapshot_ids":       []int{}, "image": image, "volume_ids": []string{}, "size": size,
		"size_slug": d.Size, "networks": map[string]any{"v4": v4, "v6": []any{}},
		"region": map[string]any{
			"name": "New York 3", "slug": d.Region, "features": []string{"backups", "ipv6", "metadata"},
			"available": true, "sizes": []string{d.Size},
		},
		"tags": tags, "vpc_uuid": "760e09ef-dc84-11e8-981e-3cfdfeaae000",
	}
	if d.GPU {
		size["description"] = "GPU"
	}
	return out
}

// callsWith returns the recorded requests to route whose query has key=value.
func (f *fakeDO) callsWith(route, key, value string) []request {
	var out []request
	for _, r := range f.calls(route) {
		if slices.Contains(r.Query[key], value) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeDO) throttledCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.throttled
}
