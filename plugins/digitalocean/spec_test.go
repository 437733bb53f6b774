// Validation against DigitalOcean's official OpenAPI specification: every
// request the plugin sends to the fake, and every response the fake
// gives, is checked against testdata/openapi/digitalocean-v2.json (the
// operations the plugin uses, bundled from github.com/digitalocean/openapi
// by testdata/openapi/bundle.sh). Offline: the spec is committed.
package digitalocean_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

const specFile = "testdata/openapi/digitalocean-v2.json"

// apiSpec is the loaded spec and its router, shared by every test of the
// package: loading and validating it once keeps the tests fast.
type apiSpec struct {
	doc    *openapi3.T
	router routers.Router
}

var loadSpec = sync.OnceValues(func() (*apiSpec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(specFile)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", specFile, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", specFile, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("routing %s: %w", specFile, err)
	}
	return &apiSpec{doc: doc, router: router}, nil
})

func mustSpec(t *testing.T) *apiSpec {
	t.Helper()
	s, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// briefErrors leaves the offending schema out of error messages: the
// path and the reason say enough, and a schema dump is pages long.
var briefErrors = []openapi3.SchemaValidationOption{openapi3.DisableSchemaErrorDetails()}

// bearerOnly accepts any bearer token: the fake checks the token itself,
// and answers a wrong one with 401 as DigitalOcean does.
func bearerOnly(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if !strings.HasPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ") {
		return fmt.Errorf("no bearer token")
	}
	return nil
}

// checkRequest validates a request as DigitalOcean's API receives it
// (https://api.digitalocean.com) and returns the validation input for its
// response, or an error saying what the spec does not allow.
func (s *apiSpec) checkRequest(r *http.Request, body []byte) (*openapi3filter.RequestValidationInput, error) {
	vr := r.Clone(r.Context())
	vr.URL.Scheme, vr.URL.Host, vr.Host = "https", apiHost, apiHost
	vr.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := s.router.FindRoute(vr)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not an operation of the spec: %w", r.Method, r.URL.Path, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: bearerOnly, MultiError: true,
			SchemaValidationOptions: briefErrors},
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return in, fmt.Errorf("request %s %s violates the spec: %w", r.Method, r.URL.RequestURI(), err)
	}
	return in, nil
}

// checkResponse validates a response to the request in.
func checkResponse(in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true,
			SchemaValidationOptions: briefErrors},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("response %d to %s %s violates the spec: %w\nbody: %s",
			status, in.Request.Method, in.Request.URL.RequestURI(), err, body)
	}
	return nil
}

// validating wraps the fake's handler: a request the spec does not allow
// fails the test (the plugin sent it), and so does a response the spec
// does not allow (the fake is wrong).
func (f *fakeDO) validating(next func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	spec := mustSpec(f.t)
	return func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		in, err := spec.checkRequest(r, raw)
		if err != nil {
			f.t.Errorf("the plugin sent a request DigitalOcean's OpenAPI spec does not allow: %v", err)
		}
		rec := httptest.NewRecorder()
		next(rec, r, raw)
		if in != nil {
			if err := checkResponse(in, rec.Code, rec.Header(), rec.Body.Bytes()); err != nil {
				f.t.Errorf("the fake gave a response DigitalOcean's OpenAPI spec does not allow: %v", err)
			}
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
}

// createFields are the fields of a droplet create request, from the spec:
// the fake refuses only what DigitalOcean would not understand.
func createFields(t *testing.T) []string {
	spec := mustSpec(t)
	var fields []string
	var walk func(s *openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		for name := range s.Value.Properties {
			if !slices.Contains(fields, name) {
				fields = append(fields, name)
			}
		}
		for _, sub := range slices.Concat(s.Value.AllOf, s.Value.OneOf, s.Value.AnyOf) {
			walk(sub)
		}
	}
	op := spec.doc.Paths.Find("/v2/droplets").Post
	walk(op.RequestBody.Value.Content.Get("application/json").Schema)
	slices.Sort(fields)
	return fields
}

// TestFakeConformsToTheSpec drives every route of the fake, in every
// state the tests use, with requests the spec allows; the validating
// wrapper checks each answer. It also passes requests that the spec
// allows and the plugin does not send (every create field, a multi-page
// listing, type=droplets).
func TestFakeConformsToTheSpec(t *testing.T) {
	f := newFakeDO(t, token)
	f.seed(&droplet{Name: "gpu.example.com", Status: "active", GPU: true, Size: "gpu-h100x1-80gb", Region: "nyc3",
		Image: "gpu-h100x1-base", Tags: []string{"coopr-node-gpu"}})
	client := &http.Client{Transport: f.transport()}
	do := func(method, path, body string, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "https://"+apiHost+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	want := func(got, want int, what, body string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: HTTP %d, want %d: %s", what, got, want, body)
		}
	}
	code, body := do("POST", "/v2/droplets", `{"name":"web-1.example.com","region":"nyc3","size":"s-1vcpu-1gb",
		"image":"debian-12-x64","ssh_keys":[512189,"3b:16:bf:e4:8b:00:8b:b8:59:8c:a9:d3:f0:19:45:fa"],"backups":false,
		"ipv6":true,"monitoring":true,"tags":["web"],"user_data":"#cloud-config","private_networking":true,
		"vpc_uuid":"760e09ef-dc84-11e8-981e-3cfdfeaae000","with_droplet_agent":true,"volumes":[]}`, token)
	want(code, 202, "create with every field", body)
	code, body = do("POST", "/v2/droplets", `{"name":"small","size":"s-1vcpu-1gb","image":12345}`, token)
	want(code, 202, "create without region, image by id", body)
	code, body = do("POST", "/v2/droplets", `{"name":"bad","size":"s-999vcpu-9tb","image":"debian-12-x64"}`, token)
	want(code, 422, "create with an invalid size", body)
	for _, path := range []string{"/v2/droplets?tag_name=web", "/v2/droplets?type=gpus&name=GPU.example.com",
		"/v2/droplets?type=droplets&name=small", "/v2/account/keys", "/v2/account/keys?page=2&per_page=1"} {
		code, body = do("GET", path, "", token)
		want(code, 200, "GET "+path, body)
	}
	for id := range 3 { // new, then active (with networks), then active again
		code, body = do("GET", fmt.Sprintf("/v2/droplets/%d", 3164494), "", token)
		want(code, 200, fmt.Sprintf("read %d", id), body)
	}
	code, body = do("GET", "/v2/droplets/3164494/actions", "", token)
	want(code, 200, "actions", body)
	code, body = do("GET", "/v2/droplets/999", "", token)
	want(code, 404, "read a gone droplet", body)
	code, body = do("GET", "/v2/account/keys", "", "dop_v1_wrong")
	want(code, 401, "wrong token", body)
	code, body = do("DELETE", "/v2/droplets?tag_name=web", "", token)
	want(code, 204, "delete by tag", body)
	code, body = do("DELETE", "/v2/droplets/3164496", "", token)
	want(code, 204, "delete", body)
	f.mu.Lock()
	f.quotaLeft = 0
	f.mu.Unlock()
	code, body = do("GET", "/v2/droplets/3164494", "", token)
	want(code, 429, "quota used up", body)
}

// TestSpecValidationCatchesViolations: the validator is able to fail, on
// requests and on responses.
func TestSpecValidationCatchesViolations(t *testing.T) {
	spec := mustSpec(t)
	req := func(method, path, body string) *http.Request {
		r := httptest.NewRequest(method, "https://"+apiHost+path, strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		return r
	}
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/v2/droplets?per_page=500", "", "per_page"},
		{"GET", "/v2/droplets?type=cpus", "", "type"},
		{"DELETE", "/v2/droplets", "", "tag_name"},
		{"GET", "/v2/droplets/abc", "", "droplet_id"},
		{"POST", "/v2/droplets", `{"name":"web_1","size":"s-1vcpu-1gb","image":"debian-12-x64"}`, "regular expression"},
		{"POST", "/v2/droplets", `{"name":"web-1","image":"debian-12-x64"}`, "size"},
		{"POST", "/v2/droplets", `{"name":"web-1","size":"s-1vcpu-1gb","image":"debian-12-x64","ipv6":"yes"}`, "ipv6"},
	} {
		r := req(c.method, c.path, c.body)
		body, _ := io.ReadAll(r.Body)
		if _, err := spec.checkRequest(r, body); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s %s: error %v, want one naming %q", c.method, c.path, c.body, err, c.want)
		}
	}
	r := req("GET", "/v2/droplets/42", "")
	in, err := spec.checkRequest(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}}
	// The fake's droplets before it was checked against the spec.
	old := `{"droplet":{"id":42,"name":"web","memory":1024,"vcpus":1,"disk":25,"locked":false,"status":"active",
		"created_at":"2026-11-21T07:00:00Z","size_slug":"s-1vcpu-1gb","region":{"slug":"nyc3"},"image":{"slug":"debian-12-x64"},
		"networks":{"v4":[],"v6":[]},"tags":[],"features":[],"volume_ids":[]}}`
	err = checkResponse(in, 200, h, []byte(old))
	for _, want := range []string{"backup_ids", "snapshot_ids", "size"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a droplet without %s passed validation: %v", want, err)
		}
	}
	if err := checkResponse(in, 200, h, []byte(`{"droplet":{"id":"42"}}`)); err == nil {
		t.Error("a droplet with a string id passed validation")
	}
}
