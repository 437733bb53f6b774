package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
)

// Template is a JSON Terraform template being built (template.go).
type Template struct {
	Resource map[string]interface{} `json:"resource,omitempty"`
	Provider map[string]interface{} `json:"provider,omitempty"`
	Variable map[string]interface{} `json:"variable,omitempty"`
	Output   map[string]interface{} `json:"output,omitempty"`
}

// ParseTemplate parses a JSON Terraform template (template.go; kloud's
// also takes a logger and keeps an HCL tree).
func ParseTemplate(content string) (*Template, error) {
	t := &Template{
		Resource: make(map[string]interface{}),
		Provider: make(map[string]interface{}),
		Variable: make(map[string]interface{}),
		Output:   make(map[string]interface{}),
	}
	if err := json.Unmarshal([]byte(content), t); err != nil {
		return nil, err
	}
	return t, nil
}

// Flush updates the template's internal representation (template.go):
// kloud re-parses its HCL tree from JsonOutput; the mirror checks that
// the template still encodes.
func (t *Template) Flush() error {
	_, err := t.JsonOutput()
	return err
}

// JsonOutput is the template as JSON (template.go).
func (t *Template) JsonOutput() (string, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(t); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// String is the template as JSON, or <ERROR>.
func (t *Template) String() string {
	out, err := t.JsonOutput()
	if err != nil {
		return "<ERROR>"
	}
	return out
}

// DecodeResource decodes the resource block into out (template.go; kloud
// decodes through HCL, the mirror through JSON).
func (t *Template) DecodeResource(out interface{}) error {
	raw, err := json.Marshal(t.Resource)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// InjectVariables adds each of meta's values as a variable default,
// named with the prefix (template.go).
func (t *Template) InjectVariables(prefix string, meta interface{}) error {
	t.inject(prefix, meta)
	return t.Flush()
}

// InjectCredentials adds each credential's and bootstrap's values as
// variable defaults named <provider>_<field> (template.go), which a
// template reads as ${var.<provider>_<field>}.
func (t *Template) InjectCredentials(creds ...*stack.Credential) error {
	for _, c := range creds {
		t.inject(c.Provider, c.Credential)
		t.inject(c.Provider, c.Bootstrap)
	}
	return t.Flush()
}

func (t *Template) inject(prefix string, meta interface{}) {
	if t.Variable == nil {
		t.Variable = make(map[string]interface{})
	}
	for k, v := range flatten(prefix, meta) {
		if strings.HasPrefix(k, "custom___") {
			continue // kloud leaves custom variables (interpolations) alone
		}
		t.Variable[k] = map[string]interface{}{"default": v}
	}
}

// flatten is kloud's HCL object builder (utils/object, tag hcl, separator
// "_", recursive): struct fields by their hcl tag (else the lowercased
// name), map keys as they are, nested values joined with "_".
func flatten(prefix string, v interface{}) map[string]interface{} {
	out := map[string]interface{}{}
	var walk func(key string, rv reflect.Value)
	join := func(a, b string) string {
		if a == "" {
			return b
		}
		return a + "_" + b
	}
	walk = func(key string, rv reflect.Value) {
		for rv.IsValid() && (rv.Kind() == reflect.Ptr || rv.Kind() == reflect.Interface) {
			if rv.IsNil() {
				return
			}
			rv = rv.Elem()
		}
		if !rv.IsValid() {
			return
		}
		switch {
		case rv.Kind() == reflect.Struct && rv.Type() != reflect.TypeOf(struct{}{}):
			for i := 0; i < rv.NumField(); i++ {
				f := rv.Type().Field(i)
				if f.PkgPath != "" {
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("hcl"), ",")
				if name == "-" {
					continue
				}
				if name == "" {
					name = strings.ToLower(f.Name)
				}
				walk(join(key, name), rv.Field(i))
			}
		case rv.Kind() == reflect.Map && rv.Type().Key().Kind() == reflect.String:
			keys := rv.MapKeys()
			sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
			for _, k := range keys {
				walk(join(key, k.String()), rv.MapIndex(k))
			}
		case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
			out[key] = string(rv.Bytes())
		default:
			out[key] = rv.Interface()
		}
	}
	walk(prefix, reflect.ValueOf(v))
	return out
}

// ShadowVariables replaces the given variables in the template's
// resources with holder (template.go): a whole ${var.x} becomes holder,
// and var.x inside a larger expression becomes "holder". kloud uses it
// so that a user's resources cannot read credential variables (and put
// them in user data, say); the provider block may.
func (t *Template) ShadowVariables(holder string, vars ...string) error {
	if len(vars) == 0 {
		return nil
	}
	shadow := map[string]bool{}
	for _, v := range vars {
		shadow[v] = true
	}
	var err error
	t.Resource, err = replaceStrings(t.Resource, func(s string) string { return shadowString(s, holder, shadow) })
	return err
}

func replaceStrings(m map[string]interface{}, f func(string) string) (map[string]interface{}, error) {
	var walk func(v interface{}) interface{}
	walk = func(v interface{}) interface{} {
		switch x := v.(type) {
		case string:
			return f(x)
		case map[string]interface{}:
			for k, e := range x {
				x[k] = walk(e)
			}
			return x
		case []interface{}:
			for i, e := range x {
				x[i] = walk(e)
			}
			return x
		case map[string]map[string]interface{}:
			for k, e := range x {
				x[k] = walk(e).(map[string]interface{})
			}
			return x
		}
		return v
	}
	if m == nil {
		return nil, nil
	}
	out, ok := walk(m).(map[string]interface{})
	if !ok {
		return nil, errors.New("resource block is not an object")
	}
	return out, nil
}

// shadowString rewrites the ${...} interpolations of s that read a
// shadowed variable.
func shadowString(s, holder string, shadow map[string]bool) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		expr := s[i+2 : i+j]
		if name, ok := strings.CutPrefix(strings.TrimSpace(expr), "var."); ok && shadow[name] {
			b.WriteString(holder)
		} else {
			b.WriteString("${" + shadowExpr(expr, holder, shadow) + "}")
		}
		s = s[i+j+1:]
	}
}

// shadowExpr replaces var.<name> references inside an expression.
func shadowExpr(expr, holder string, shadow map[string]bool) string {
	var b strings.Builder
	for {
		i := strings.Index(expr, "var.")
		if i < 0 || (i > 0 && isVarChar(rune(expr[i-1]))) {
			if i < 0 {
				b.WriteString(expr)
				return b.String()
			}
			b.WriteString(expr[:i+4])
			expr = expr[i+4:]
			continue
		}
		j := i + 4
		for j < len(expr) && isVarChar(rune(expr[j])) {
			j++
		}
		name := expr[i+4 : j]
		b.WriteString(expr[:i])
		if shadow[name] {
			b.WriteString(fmt.Sprintf("%q", holder))
		} else {
			b.WriteString(expr[i:j])
		}
		expr = expr[j:]
	}
}

func isVarChar(r rune) bool {
	return r == '-' || r == '_' || (r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
}
