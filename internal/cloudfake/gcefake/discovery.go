package gcefake

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// discoveryJSON is the part of Google's discovery document for the
// Compute Engine API v1 that the google provider uses (discovery/README.md
// says where it comes from).
//
//go:embed discovery/compute-v1-subset.json
var discoveryJSON []byte

type schema = map[string]any

type param struct {
	Location string   `json:"location"`
	Type     string   `json:"type"`
	Format   string   `json:"format"`
	Pattern  string   `json:"pattern"`
	Enum     []string `json:"enum"`
	Required bool     `json:"required"`
	Minimum  string   `json:"minimum"`
}

type methodDoc struct {
	ID         string           `json:"id"`
	HTTPMethod string           `json:"httpMethod"`
	Path       string           `json:"path"`
	Parameters map[string]param `json:"parameters"`
	Request    *struct {
		Ref string `json:"$ref"`
	} `json:"request"`
	Response *struct {
		Ref string `json:"$ref"`
	} `json:"response"`
}

// Method is a method of the discovery document, ready to match requests.
type Method struct {
	methodDoc
	re    *regexp.Regexp
	names []string
}

// Discovery validates requests and responses against the discovery
// document: the method a request calls (HTTP method and path, the path
// parameters' patterns), its query parameters (declared, typed, enums,
// patterns), its body (the request schema: no unknown properties, types,
// formats, enums, patterns, the properties the method requires), and a
// response's body (the response schema, no unknown properties).
type Discovery struct {
	Revision    string
	servicePath string
	global      map[string]param
	schemas     map[string]schema
	methods     []*Method
}

var loadDiscovery = sync.OnceValues(func() (*Discovery, error) {
	var doc struct {
		Revision    string           `json:"revision"`
		ServicePath string           `json:"servicePath"`
		Parameters  map[string]param `json:"parameters"`
		Schemas     map[string]schema
		Resources   map[string]struct {
			Methods map[string]methodDoc `json:"methods"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(discoveryJSON, &doc); err != nil {
		return nil, fmt.Errorf("the discovery document does not parse: %w", err)
	}
	d := &Discovery{Revision: doc.Revision, servicePath: "/" + doc.ServicePath, global: doc.Parameters, schemas: doc.Schemas}
	for _, r := range doc.Resources {
		for _, m := range r.Methods {
			md := &Method{methodDoc: m}
			var b strings.Builder
			b.WriteString("^" + regexp.QuoteMeta(d.servicePath))
			rest := m.Path
			for {
				i := strings.Index(rest, "{")
				if i < 0 {
					b.WriteString(regexp.QuoteMeta(rest))
					break
				}
				j := strings.Index(rest, "}")
				b.WriteString(regexp.QuoteMeta(rest[:i]) + "([^/]+)")
				md.names = append(md.names, rest[i+1:j])
				rest = rest[j+1:]
			}
			b.WriteString("$")
			md.re = regexp.MustCompile(b.String())
			d.methods = append(d.methods, md)
		}
	}
	sort.Slice(d.methods, func(i, j int) bool { return d.methods[i].ID < d.methods[j].ID })
	return d, nil
})

// LoadDiscovery returns the embedded document, parsed.
func LoadDiscovery() (*Discovery, error) { return loadDiscovery() }

// Request finds the method a request calls and checks it; the method is
// returned with the error for a request that reached one.
func (d *Discovery) Request(httpMethod, path string, query url.Values, body []byte) (*Method, error) {
	var m *Method
	var vals []string
	for _, c := range d.methods {
		if c.HTTPMethod != httpMethod {
			continue
		}
		if sub := c.re.FindStringSubmatch(path); sub != nil {
			m, vals = c, sub[1:]
			break
		}
	}
	if m == nil {
		return nil, fmt.Errorf("%s %s is no method of the discovery document (revision %s)", httpMethod, path, d.Revision)
	}
	var errs []string
	for i, n := range m.names {
		v, _ := url.PathUnescape(vals[i])
		if err := checkParam(m.Parameters[n], v); err != nil {
			errs = append(errs, fmt.Sprintf("path parameter %s=%q: %v", n, v, err))
		}
	}
	for k, vs := range query {
		p, ok := m.Parameters[k]
		if !ok || p.Location != "query" {
			if p, ok = d.global[k]; !ok {
				errs = append(errs, fmt.Sprintf("query parameter %s is not a parameter of %s", k, m.ID))
				continue
			}
		}
		for _, v := range vs {
			if err := checkParam(p, v); err != nil {
				errs = append(errs, fmt.Sprintf("query parameter %s=%q: %v", k, v, err))
			}
		}
	}
	for n, p := range m.Parameters {
		if p.Required && p.Location == "query" && query.Get(n) == "" {
			errs = append(errs, "required query parameter "+n+" is missing")
		}
	}
	switch {
	case m.Request == nil && len(body) > 0:
		errs = append(errs, m.ID+" takes no request body")
	case m.Request != nil:
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			errs = append(errs, fmt.Sprintf("the body is not JSON: %v", err))
		} else {
			errs = append(errs, d.validate(schema{"$ref": m.Request.Ref}, v, "body", m.ID, true)...)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return m, fmt.Errorf("%s (%s %s) violates the discovery document: %s", m.ID, httpMethod, path, strings.Join(errs, "; "))
	}
	return m, nil
}

// Response checks a 2xx answer's body against the method's response
// schema, and an error answer against Google's error envelope.
func (d *Discovery) Response(m *Method, status int, body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("%s: the %d answer is not JSON: %v", m.ID, status, err)
	}
	var errs []string
	if status >= 200 && status < 300 {
		if m.Response != nil {
			errs = d.validate(schema{"$ref": m.Response.Ref}, v, "answer", m.ID, false)
		}
	} else {
		errs = d.validate(errorEnvelope, v, "error answer", m.ID, false)
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("%s: the %d answer violates the discovery document: %s", m.ID, status, strings.Join(errs, "; "))
	}
	return nil
}

// errorEnvelope is the shape of Google APIs' JSON errors (not in the
// discovery document): {"error": {"code", "message", "errors": [{"domain",
// "reason", "message"}], "status", "details"}}.
var errorEnvelope = schema{"type": "object", "properties": map[string]any{
	"error": map[string]any{"type": "object", "properties": map[string]any{
		"code":    map[string]any{"type": "integer", "format": "int32"},
		"message": map[string]any{"type": "string"},
		"status":  map[string]any{"type": "string"},
		"details": map[string]any{"type": "array", "items": map[string]any{"type": "any"}},
		"errors": map[string]any{"type": "array", "items": map[string]any{"type": "object", "properties": map[string]any{
			"domain": map[string]any{"type": "string"}, "reason": map[string]any{"type": "string"},
			"message": map[string]any{"type": "string"}, "location": map[string]any{"type": "string"},
			"locationType": map[string]any{"type": "string"},
		}}},
	}},
}}

func checkParam(p param, v string) error {
	switch p.Type {
	case "boolean":
		if v != "true" && v != "false" {
			return fmt.Errorf("not a boolean")
		}
	case "integer":
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("not an integer")
		}
		if p.Minimum != "" {
			if min, _ := strconv.ParseInt(p.Minimum, 10, 64); n < min {
				return fmt.Errorf("below the minimum %s", p.Minimum)
			}
		}
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return fmt.Errorf("not one of %v", p.Enum)
	}
	if p.Pattern != "" && !regexp.MustCompile(`^(?:`+p.Pattern+`)$`).MatchString(v) {
		return fmt.Errorf("does not match %s", p.Pattern)
	}
	return nil
}

// validate checks v against s. request says whether v is sent to the
// API (then the properties the method requires must be there).
func (d *Discovery) validate(s schema, v any, path, methodID string, request bool) []string {
	if ref, ok := s["$ref"].(string); ok {
		t, ok := d.schemas[ref]
		if !ok {
			return []string{path + ": unknown schema " + ref}
		}
		s = t
	}
	typ, _ := s["type"].(string)
	bad := func(format string, args ...any) []string { return []string{path + ": " + fmt.Sprintf(format, args...)} }
	switch typ {
	case "any", "":
		return nil
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return bad("want an object, got %s", kind(v))
		}
		props, _ := s["properties"].(map[string]any)
		addl, _ := s["additionalProperties"].(map[string]any)
		var errs []string
		keys := make([]string, 0, len(obj))
		for k := range obj {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				errs = append(errs, d.validate(ps, obj[k], path+"."+k, methodID, request)...)
			} else if addl != nil {
				errs = append(errs, d.validate(addl, obj[k], path+"["+strconv.Quote(k)+"]", methodID, request)...)
			} else {
				errs = append(errs, fmt.Sprintf("%s: unknown property %q", path, k))
			}
		}
		if request {
			for k, p := range props {
				ps, _ := p.(map[string]any)
				ann, _ := ps["annotations"].(map[string]any)
				req, _ := ann["required"].([]any)
				if slices.Contains(req, any(methodID)) {
					if _, ok := obj[k]; !ok {
						errs = append(errs, fmt.Sprintf("%s: property %q is required by %s", path, k, methodID))
					}
				}
			}
		}
		return errs
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return bad("want an array, got %s", kind(v))
		}
		items, _ := s["items"].(map[string]any)
		var errs []string
		for i, x := range arr {
			errs = append(errs, d.validate(items, x, fmt.Sprintf("%s[%d]", path, i), methodID, request)...)
		}
		return errs
	case "string":
		str, ok := v.(string)
		if !ok {
			return bad("want a string, got %s", kind(v))
		}
		switch s["format"] {
		case "int64":
			if _, err := strconv.ParseInt(str, 10, 64); err != nil {
				return bad("%q is not an int64", str)
			}
		case "uint64":
			if _, err := strconv.ParseUint(str, 10, 64); err != nil {
				return bad("%q is not a uint64", str)
			}
		case "byte":
			if _, err := base64.StdEncoding.DecodeString(str); err != nil {
				if _, err := base64.URLEncoding.DecodeString(str); err != nil {
					return bad("%q is not base64", str)
				}
			}
		case "google-datetime", "date-time":
			if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
				return bad("%q is not an RFC 3339 time", str)
			}
		}
		if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, any(str)) {
			return bad("%q is not one of %v", str, enum)
		}
		if pat, ok := s["pattern"].(string); ok && !regexp.MustCompile(`^(?:`+pat+`)$`).MatchString(str) {
			return bad("%q does not match %s", str, pat)
		}
		return nil
	case "integer":
		n, ok := v.(float64)
		if !ok || n != math.Trunc(n) {
			return bad("want an integer, got %v", v)
		}
		switch s["format"] {
		case "int32":
			if n < math.MinInt32 || n > math.MaxInt32 {
				return bad("%v is out of int32's range", n)
			}
		case "uint32":
			if n < 0 || n > math.MaxUint32 {
				return bad("%v is out of uint32's range", n)
			}
		}
		return nil
	case "number":
		if _, ok := v.(float64); !ok {
			return bad("want a number, got %s", kind(v))
		}
		return nil
	case "boolean":
		if _, ok := v.(bool); !ok {
			return bad("want a boolean, got %s", kind(v))
		}
		return nil
	}
	return bad("schema type %q is not known to the validator", typ)
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
