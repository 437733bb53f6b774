// Package linodefake is a strict stand-in for the part of Linode's API v4
// a provider uses: Linode instances (list with X-Filter, create, get,
// delete), with the API's shapes, errors ({"errors": [{"field", "reason"}]})
// and rules (a Bearer token, label syntax, required fields, unknown
// fields refused). An instance is "provisioning", then "booting", then
// "running" as it is read. loomd test's acceptance mode is proven against
// it (cmd/linodefake serves it as a separate process); it is not a
// complete Linode.
package linodefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Instance is a Linode instance as the API shows it.
type Instance struct {
	ID      int      `json:"id"`
	Label   string   `json:"label"`
	Region  string   `json:"region"`
	Type    string   `json:"type"`
	Image   string   `json:"image"`
	Status  string   `json:"status"`
	IPv4    []string `json:"ipv4"`
	IPv6    string   `json:"ipv6"`
	Tags    []string `json:"tags"`
	Created string   `json:"created"`
	Updated string   `json:"updated"`
	reads   int
}

// Fake is the stand-in API: an http.Handler serving /v4.
type Fake struct {
	// Token is the only Bearer token accepted.
	Token string
	// ReadsPerState is how many GETs of an instance move it to its next
	// status (provisioning, booting, running). Default 1.
	ReadsPerState int

	mu        sync.Mutex
	next      int
	instances map[int]*Instance
	requests  []string
}

// New returns a stand-in accepting token.
func New(token string) *Fake {
	return &Fake{Token: token, next: 41000001, instances: map[int]*Instance{}}
}

// Instances lists the instances that exist, by id.
func (f *Fake) Instances() []Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Instance
	for _, i := range f.instances {
		out = append(out, *i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// Requests lists the requests served, as "METHOD path".
func (f *Fake) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{}, f.requests...)
}

type apiError struct {
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, errs ...apiError) {
	reply(w, status, map[string]any{"errors": errs})
}

// labelRule is Linode's: 3-64 characters, letters, digits, - _ and .,
// starting and ending with a letter or digit, no two of - _ . in a row.
var labelRule = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9._-]{1,62})[A-Za-z0-9]$`)

var doubled = regexp.MustCompile(`--|__|\.\.`)

// Types, Regions and Images are the plans, regions and images the fake
// knows (a few of Linode's); others get the API's 400.
var (
	Types   = []string{"g6-nanode-1", "g6-standard-1", "g6-standard-2", "g6-standard-4", "g6-dedicated-2"}
	Regions = []string{"us-east", "us-central", "us-west", "us-southeast", "eu-west", "eu-central", "ap-south", "ap-northeast"}
	Images  = []string{"linode/debian12", "linode/debian11", "linode/ubuntu24.04", "linode/ubuntu22.04", "linode/almalinux9"}
)

var createFields = map[string]bool{"label": true, "region": true, "type": true, "image": true, "root_pass": true,
	"authorized_keys": true, "authorized_users": true, "tags": true, "booted": true, "private_ip": true, "swap_size": true, "group": true}

// ServeHTTP implements http.Handler.
func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	if r.Header.Get("Authorization") != "Bearer "+f.Token {
		fail(w, 401, apiError{Reason: "Invalid Token"})
		return
	}
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/v4/linode/instances" && r.Method == http.MethodGet:
		f.list(w, r)
	case path == "/v4/linode/instances" && r.Method == http.MethodPost:
		f.create(w, r)
	case strings.HasPrefix(path, "/v4/linode/instances/"):
		id, err := strconv.Atoi(strings.TrimPrefix(path, "/v4/linode/instances/"))
		inst := f.instances[id]
		if err != nil || inst == nil {
			fail(w, 404, apiError{Reason: "Not found"})
			return
		}
		switch r.Method {
		case http.MethodGet:
			inst.reads++
			per := max(f.ReadsPerState, 1)
			switch {
			case inst.reads >= 2*per:
				inst.Status = "running"
			case inst.reads >= per:
				inst.Status = "booting"
			}
			reply(w, 200, inst)
		case http.MethodDelete:
			delete(f.instances, id)
			reply(w, 200, map[string]any{})
		default:
			fail(w, 405, apiError{Reason: "Method not allowed"})
		}
	default:
		fail(w, 404, apiError{Reason: "Not found"})
	}
}

// list answers GET /v4/linode/instances, filtered by X-Filter's label
// (an exact value, or {"+contains": "..."}).
func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	var filter map[string]any
	if h := r.Header.Get("X-Filter"); h != "" {
		if err := json.Unmarshal([]byte(h), &filter); err != nil {
			fail(w, 400, apiError{Field: "X-Filter", Reason: "Invalid JSON"})
			return
		}
	}
	data := []*Instance{}
	for _, id := range f.ids() {
		inst := f.instances[id]
		switch want := filter["label"].(type) {
		case nil:
		case string:
			if inst.Label != want {
				continue
			}
		case map[string]any:
			if s, ok := want["+contains"].(string); !ok || !strings.Contains(inst.Label, s) {
				continue
			}
		default:
			fail(w, 400, apiError{Field: "X-Filter", Reason: "Invalid filter on label"})
			return
		}
		data = append(data, inst)
	}
	reply(w, 200, map[string]any{"data": data, "page": 1, "pages": 1, "results": len(data)})
}

func (f *Fake) ids() []int {
	var ids []int
	for id := range f.instances {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// create answers POST /v4/linode/instances.
func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&body); err != nil {
		fail(w, 400, apiError{Reason: "Invalid JSON"})
		return
	}
	var errs []apiError
	for k := range body {
		if !createFields[k] {
			errs = append(errs, apiError{Field: k, Reason: "Unknown field"})
		}
	}
	str := func(k string) string { s, _ := body[k].(string); return s }
	for _, k := range []string{"region", "type"} {
		if str(k) == "" {
			errs = append(errs, apiError{Field: k, Reason: k + " is required"})
		}
	}
	if t := str("type"); t != "" && !slices.Contains(Types, t) {
		errs = append(errs, apiError{Field: "type", Reason: "A valid plan type by that ID was not found"})
	}
	if r := str("region"); r != "" && !slices.Contains(Regions, r) {
		errs = append(errs, apiError{Field: "region", Reason: "region is not valid"})
	}
	if i := str("image"); i != "" && !slices.Contains(Images, i) {
		errs = append(errs, apiError{Field: "image", Reason: "image is not valid"})
	}
	label := str("label")
	if label != "" && (!labelRule.MatchString(label) || doubled.MatchString(label)) {
		errs = append(errs, apiError{Field: "label", Reason: "Label must begin and end with an alphanumeric character, may only consist of alphanumeric characters, hyphens (-), underscores (_) or periods (.), cannot have two hyphens (--), underscores (__) or periods (..) in a row, and must be between 3 and 64 characters in length."})
	}
	if str("image") != "" && len(str("root_pass")) < 11 {
		errs = append(errs, apiError{Field: "root_pass", Reason: "root_pass is required with an image, and must be at least 11 characters long"})
	}
	for _, i := range f.instances {
		if label != "" && i.Label == label {
			errs = append(errs, apiError{Field: "label", Reason: "Label must be unique among your linodes"})
		}
	}
	if len(errs) > 0 {
		fail(w, 400, errs...)
		return
	}
	id := f.next
	f.next++
	if label == "" {
		label = fmt.Sprintf("linode%d", id)
	}
	now := time.Now().UTC().Format("2006-01-02T15:04:05")
	var tags []string
	if t, ok := body["tags"].([]any); ok {
		for _, x := range t {
			tags = append(tags, fmt.Sprint(x))
		}
	}
	n := id - 41000000
	inst := &Instance{ID: id, Label: label, Region: str("region"), Type: str("type"), Image: str("image"), Status: "provisioning",
		IPv4: []string{fmt.Sprintf("203.0.113.%d", n%250+1), fmt.Sprintf("192.168.%d.%d", 128+n/250%64, n%250+1)},
		IPv6: fmt.Sprintf("2600:3c00::f03c:91ff:fe%02x:%04x/128", n/65536%256, n%65536), Tags: tags, Created: now, Updated: now}
	if inst.Tags == nil {
		inst.Tags = []string{}
	}
	f.instances[id] = inst
	var b bytes.Buffer
	json.NewEncoder(&b).Encode(inst)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	w.Write(b.Bytes())
}
