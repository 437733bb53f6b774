package kloud

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// luaStack is the provider's Stack for one kite request: kloud builds a
// BaseStack per request and hands it to the provider's Stack
// constructor.
type luaStack struct {
	a  *adapter
	bs *kBaseStack
}

var _ kStack = (*luaStack)(nil)

func (a *adapter) newStack(bs *kBaseStack) (kStack, error) {
	return &luaStack{a: a, bs: bs}, nil
}

// template is the hooks' Template: {key, content}.
type template struct {
	Key     string `json:"key,omitempty"`
	Content string `json:"content"`
}

// VerifyCredential runs valid_credential, then verify_credential. kloud's
// authenticate turns an error into {verified: false, message}; it is a
// *stack.Error (kloud logs it as an expected failure) unless it carries
// a code (a kite error).
func (s *luaStack) VerifyCredential(c *kCredential) error {
	if err := s.a.validate("valid_credential", c.Identifier, c.Credential, s.a.schema.credential); err != nil {
		return expected(err)
	}
	in := map[string]any{"credential": s.a.credentialIn(c)}
	if err := s.a.call(s.a.opts.Context, "verify_credential", c.Identifier, in, nil, s.a.secrets(c)...); err != nil {
		return expected(err)
	}
	return nil
}

// expected is a failed verification as kloud's providers return it: a
// coded kite error as it is, anything else as a *stack.Error.
func expected(err error) error {
	if ke := kloudError(err); ke != err {
		return ke
	}
	return &kStackError{Err: err}
}

// BootstrapTemplates runs valid_credential, then bootstrap_templates:
// the Terraform templates of the credential's own resources. kloud
// applies each (key default <provider>-<group>-<identifier>) and decodes
// their outputs into the credential's bootstrap.
func (s *luaStack) BootstrapTemplates(c *kCredential) ([]*kTemplate, error) {
	if err := s.a.validate("valid_credential", c.Identifier, c.Credential, s.a.schema.credential); err != nil {
		return nil, err
	}
	var out []template
	in := map[string]any{"credential": s.a.credentialIn(c)}
	if err := s.a.call(s.a.opts.Context, "bootstrap_templates", c.Identifier, in, &out, s.a.secrets(c)...); err != nil {
		return nil, kloudError(err)
	}
	tpls := make([]*kTemplate, 0, len(out))
	for i, t := range out {
		if !json.Valid([]byte(t.Content)) {
			return nil, fmt.Errorf("%s bootstrap_templates: template %d (key %q) is not JSON", s.a.t.Name(), i+1, t.Key)
		}
		tpls = append(tpls, &kTemplate{Key: t.Key, Content: t.Content})
	}
	return tpls, nil
}

// ApplyTemplate rewrites the user's template, which kloud has parsed
// into BaseStack.Builder.Template with the credentials and the request's
// variables injected:
//
//  1. valid_credential, and valid_bootstrap when the credential has
//     bootstrap data;
//  2. the plugin's apply_template gets the template and returns it
//     rewritten for the cloud (bootstrap outputs, defaults); with
//     host.no_cloud_init it also gets a fresh kite key per machine;
//  3. unless no_cloud_init, each machine resource
//     (<provider>_<resource_name>) gets Klient's cloud-init and its kite
//     keys (BaseStack.BuildUserdata), wrapping the user data the plugin
//     left;
//  4. the credential's secret variables are shadowed in the resources
//     (Template.ShadowVariables "FORBIDDEN"), so user data cannot read
//     them.
func (s *luaStack) ApplyTemplate(c *kCredential) (*kTemplate, error) {
	a, bs := s.a, s.bs
	if bs.Builder == nil || bs.Builder.Template == nil {
		return nil, errors.New("kloud: ApplyTemplate: kloud built no template (BaseStack.Builder.Template is nil)")
	}
	if err := a.validate("valid_credential", c.Identifier, c.Credential, a.schema.credential); err != nil {
		return nil, err
	}
	if a.schema.bootstrap != nil && !empty(c.Bootstrap) {
		if err := a.validate("valid_bootstrap", c.Identifier, c.Bootstrap, a.schema.bootstrap); err != nil {
			return nil, err
		}
	}
	t := bs.Builder.Template
	content, err := t.JsonOutput()
	if err != nil {
		return nil, fmt.Errorf("kloud: encoding the template: %w", err)
	}
	in := map[string]any{"credential": a.credentialIn(c), "template": map[string]any{"content": content}}
	id := c.Identifier
	if req, ok := bs.Arg.(*kApplyRequest); ok && req != nil {
		if len(req.Variables) > 0 {
			in["variables"] = req.Variables
		}
		if req.GroupName != "" {
			in["group"] = req.GroupName
		}
		if req.StackID != "" {
			in["stack_id"] = req.StackID
			id = req.StackID
		}
	}
	username := ""
	if bs.Req != nil {
		username = bs.Req.Username
		if username != "" {
			in["username"] = username
		}
	}
	machines := a.p.Name + "_" + resourceName(a.p)
	// Without cloud-init the plugin hands Klient its kite key itself: by
	// label in kite_keys, and, for a resource with count, through the
	// variable kitekeys_<name> indexed by count.index, as kloud's own
	// cloud-init reads them.
	keyVars := map[string]map[string]any{}
	if a.p.NoCloudInit {
		keys := map[string]any{}
		for _, m := range machineLabels(t.Resource[machines]) {
			key, err := bs.BuildKiteKey(m.label, username)
			if err != nil {
				return nil, fmt.Errorf("kloud: a kite key for %s: %w", m.label, err)
			}
			keys[m.label] = key
			if keyVars[m.name] == nil {
				keyVars[m.name] = map[string]any{}
			}
			keyVars[m.name][fmt.Sprint(m.index)] = key
		}
		in["kite_keys"] = keys
	}
	// The template carries the credential's values as variable defaults:
	// they are this call's secrets too.
	secrets := a.secrets(c)
	var out template
	if err := a.call(a.opts.Context, "apply_template", id, in, &out, secrets...); err != nil {
		return nil, kloudError(err)
	}
	var rewritten struct {
		Resource map[string]any `json:"resource"`
		Provider map[string]any `json:"provider"`
		Variable map[string]any `json:"variable"`
		Output   map[string]any `json:"output"`
	}
	dec := json.NewDecoder(strings.NewReader(out.Content))
	dec.UseNumber()
	if err := dec.Decode(&rewritten); err != nil {
		return nil, fmt.Errorf("%s apply_template: the template it returned is not a JSON object: %v", a.t.Name(), err)
	}
	t.Resource = integers(rewritten.Resource).(map[string]any)
	t.Provider = integers(rewritten.Provider).(map[string]any)
	t.Variable = integers(rewritten.Variable).(map[string]any)
	t.Output = integers(rewritten.Output).(map[string]any)
	if !a.p.NoCloudInit {
		if err := s.buildUserdata(machines); err != nil {
			return nil, err
		}
	}
	for name, keys := range keyVars {
		t.Variable["kitekeys_"+name] = map[string]any{"default": keys}
	}
	if err := t.ShadowVariables("FORBIDDEN", a.secretVariables(c)...); err != nil {
		return nil, fmt.Errorf("kloud: shadowing the credential's variables: %w", err)
	}
	if err := t.Flush(); err != nil {
		return nil, fmt.Errorf("kloud: %w", err)
	}
	content, err = t.JsonOutput()
	if err != nil {
		return nil, fmt.Errorf("kloud: encoding the template: %w", err)
	}
	return &kTemplate{Key: out.Key, Content: content}, nil
}

// buildUserdata runs kloud's BuildUserdata on every machine resource.
func (s *luaStack) buildUserdata(resource string) error {
	block, _ := s.bs.Builder.Template.Resource[resource].(map[string]any)
	labels := make([]string, 0, len(block))
	for label := range block {
		labels = append(labels, label)
	}
	sort.Strings(labels)
	for _, label := range labels {
		vm, ok := block[label].(map[string]any)
		if !ok {
			return fmt.Errorf("%s apply_template: resource %s.%s is not an object", s.a.t.Name(), resource, label)
		}
		if err := s.bs.BuildUserdata(label, vm); err != nil {
			return fmt.Errorf("kloud: Klient user data for %s.%s: %w", resource, label, err)
		}
	}
	return nil
}

func resourceName(p *Provider) string {
	if p.ResourceName != "" {
		return p.ResourceName
	}
	return "instance"
}

// machine is one machine a resource block declares: the resource's
// name, its label (name, or name.i with count) and count.index.
type machine struct {
	name, label string
	index       int
}

// machineLabels lists the machines a resource block declares, expanded
// by count as kloud labels them.
func machineLabels(block any) []machine {
	m, _ := block.(map[string]any)
	var out []machine
	for name, v := range m {
		count := 1
		if vm, ok := v.(map[string]any); ok {
			if n, ok := number(vm["count"]); ok && n > 1 {
				count = n
			}
		}
		if count == 1 {
			out = append(out, machine{name: name, label: name})
			continue
		}
		for i := 0; i < count; i++ {
			out = append(out, machine{name: name, label: fmt.Sprintf("%s.%d", name, i), index: i})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].label < out[j].label })
	return out
}

func number(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case float64:
		if n == math.Trunc(n) {
			return int(n), true
		}
	case json.Number:
		if i, err := n.Int64(); err == nil {
			return int(i), true
		}
	}
	return 0, false
}

// integers turns the JSON numbers of a decoded template into int when
// they are whole and float64 otherwise: kloud reads its templates through
// HCL, which gives ints (BuildUserdata reads count as an int).
func integers(v any) any {
	switch x := v.(type) {
	case nil:
		return map[string]any{}
	case map[string]any:
		for k, e := range x {
			if e != nil {
				x[k] = integers(e)
			}
		}
		return x
	case []any:
		for i, e := range x {
			if e != nil {
				x[i] = integers(e)
			}
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return int(i)
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// empty reports whether a value holds nothing yet (a credential never
// bootstrapped): kloud's store validates the data it holds, so the
// adapter validates a bootstrap once there is one.
func empty(v any) bool {
	for _, e := range toLua(v) {
		if e != nil && !reflect.ValueOf(e).IsZero() {
			return false
		}
	}
	return true
}

// credentialIn is the hooks' Credential table.
func (a *adapter) credentialIn(c *kCredential) map[string]any {
	out := map[string]any{"title": c.Title, "provider": c.Provider, "identifier": c.Identifier}
	if m := toLua(c.Credential); m != nil {
		out["credential"] = m
	}
	if m := toLua(c.Bootstrap); m != nil {
		out["bootstrap"] = m
	}
	return out
}

// secrets are the credential's and bootstrap's secret values: the
// fields the schema marks secret, or, for a free-form credential, its
// values under the kind's secret names.
func (a *adapter) secrets(c *kCredential) []string {
	var out []string
	if a.schema.credential != nil {
		out = append(out, a.schema.credential.secretValues(c.Credential)...)
	} else {
		for k, v := range toLua(c.Credential) {
			if s, ok := v.(string); ok && secretName(k) {
				out = append(out, s)
			}
		}
	}
	if a.schema.bootstrap != nil {
		out = append(out, a.schema.bootstrap.secretValues(c.Bootstrap)...)
	}
	return out
}

// secretVariables are the template variables kloud injected for the
// credential's secret fields (<provider>_<field>).
func (a *adapter) secretVariables(c *kCredential) []string {
	var names []string
	if a.schema.credential != nil {
		for _, d := range a.schema.credential.fields {
			if d.Secret {
				names = append(names, d.Name)
			}
		}
	} else {
		for k := range toLua(c.Credential) {
			if secretName(k) {
				names = append(names, k)
			}
		}
	}
	if a.schema.bootstrap != nil {
		for _, d := range a.schema.bootstrap.fields {
			if d.Secret {
				names = append(names, d.Name)
			}
		}
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = c.Provider + "_" + n
	}
	return out
}

// secretName reports whether a free-form credential's key names a secret
// (the kind's secret keys, anywhere in the key).
func secretName(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"secret", "password", "token", "key"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// validate runs a valid_* hook on v, the value kloud decoded (kloud
// calls a Go value's Valid() there). A value of kloud's default types,
// or none, is not validated.
func (a *adapter) validate(hook, id string, v any, td *typeDef) error {
	if td == nil {
		return nil
	}
	m := toLua(v)
	if m == nil {
		m = map[string]any{}
	}
	var secrets []string
	secrets = append(secrets, td.secretValues(v)...)
	if err := a.call(a.opts.Context, hook, id, map[string]any{"value": m}, nil, secrets...); err != nil {
		return kloudError(err)
	}
	return nil
}
