package machinecontroller

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8c.io/machine-controller/sdk/providerconfig"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
)

// configVar is one entry of the type's host.config_vars: a
// cloudProviderSpec field holding a ConfigVarString or ConfigVarBool.
type configVar struct {
	path []string // the field's dotted path under cloudProviderSpec
	typ  string   // "string" or "bool"
	env  string   // the environment variable read when it resolves to nothing
}

// configVars reads host.config_vars from the type's settings (already
// checked against the kind's shape at load), sorted by path.
func configVars(settings map[string]any) []configVar {
	m, _ := settings["config_vars"].(map[string]any)
	out := make([]configVar, 0, len(m))
	for path, v := range m {
		d, _ := v.(map[string]any)
		typ, _ := d["type"].(string)
		env, _ := d["env"].(string)
		out = append(out, configVar{path: strings.Split(path, "."), typ: typ, env: env})
	}
	sort.Slice(out, func(i, j int) bool { return strings.Join(out[i].path, ".") < strings.Join(out[j].path, ".") })
	return out
}

// resolved builds r's input: extra, plus obj (a Machine or a MachineSpec)
// under key, with the cloudProviderSpec fields the type declares in
// host.config_vars resolved through the controller's ConfigVarResolver,
// as machine-controller's Go providers resolve theirs in getConfig. obj
// itself is not changed: the controller owns it. Values read from a
// Secret or the environment are registered as the call's secrets.
func (p *Provider) resolved(r *request, key string, obj any, extra map[string]any) error {
	in := make(map[string]any, len(extra)+1)
	for k, v := range extra {
		in[k] = v
	}
	r.in = in
	vars := configVars(p.settings())
	if len(vars) == 0 {
		in[key] = obj
		return nil
	}
	fail := func(class, msg string) error {
		ce := &kindcall.Error{Type: p.t.Name(), Family: runtime.CloudProvider, Hook: r.hook, CallID: r.id, Class: class, Message: msg}
		ce.Host = hostErrors(r.hook, ce)
		return ce
	}
	if p.cvr == nil {
		return fail(runtime.ClassTerminal, "the type declares host.config_vars but the adapter has no ConfigVarResolver: "+
			"pass the resolver machine-controller hands the provider factory to machinecontroller.New")
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		return fail(runtime.ClassTerminal, fmt.Sprintf("encoding the %s as JSON: %v", key, err))
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		// A nil machine or spec: nothing to resolve; the contract's input
		// check says what is missing.
		in[key] = obj
		return nil
	}
	in[key] = m
	spec := m
	if key == "machine" {
		spec, _ = m["spec"].(map[string]any)
	}
	value, _ := dig(spec, "providerSpec", "value").(map[string]any)
	if value == nil {
		return nil // no providerSpec: the hook says so
	}
	cps, _ := value["cloudProviderSpec"].(map[string]any)
	if cps == nil {
		cps = map[string]any{}
	}
	for _, cv := range vars {
		name := "cloudProviderSpec." + strings.Join(cv.path, ".")
		raw, present, ok := lookup(cps, cv.path)
		if !ok {
			return fail(runtime.ClassTerminal, fmt.Sprintf("%s: a field on its path is not an object (host.config_vars declares it a %s ConfigVar)", name, cv.typ))
		}
		resolved, secret, set, err := p.resolve(cv, raw, present)
		if err != nil {
			class := runtime.ClassRetry // a Secret or ConfigMap not there (yet)
			if _, malformed := err.(*malformedError); malformed {
				class = runtime.ClassTerminal
			}
			return fail(class, fmt.Sprintf("resolving %s (a %s, host.config_vars): %v", name, cvName(cv.typ), err))
		}
		switch {
		case set:
			store(cps, cv.path, resolved)
		case present:
			store(cps, cv.path, nil)
		}
		if s, ok := resolved.(string); ok && secret {
			r.secrets = append(r.secrets, s)
		}
	}
	value["cloudProviderSpec"] = cps
	return nil
}

func cvName(typ string) string {
	if typ == "bool" {
		return "ConfigVarBool"
	}
	return "ConfigVarString"
}

// malformedError is a field that is no ConfigVar at all: the same spec
// fails the same way every time.
type malformedError struct{ err error }

func (e *malformedError) Error() string { return e.err.Error() }

// resolve resolves one field's raw JSON value. set is false when it
// resolves to nothing (no value, no reference, no environment variable):
// the field is left out, as an unset pointer in a Go provider's config.
// secret is set for values read from a Secret or the environment.
func (p *Provider) resolve(cv configVar, raw any, present bool) (v any, secret, set bool, err error) {
	var data []byte
	if present && raw != nil {
		if data, err = json.Marshal(raw); err != nil {
			return nil, false, false, &malformedError{err}
		}
	}
	switch cv.typ {
	case "bool":
		var b providerconfig.ConfigVarBool
		if data != nil {
			if err := json.Unmarshal(data, &b); err != nil {
				return nil, false, false, &malformedError{fmt.Errorf("want a boolean or {value, secretKeyRef, configMapKeyRef}: %v", err)}
			}
		}
		val, ok, err := p.cvr.GetBoolValue(b)
		if err != nil {
			return nil, false, false, err
		}
		if ok {
			return val, b.SecretKeyRef.Name != "", true, nil
		}
		if cv.env == "" {
			return nil, false, false, nil
		}
		// GetBoolValueOrEnv is false for an unset variable; tell unset
		// apart as the string getter does.
		if _, found := os.LookupEnv(cv.env); !found {
			return nil, false, false, nil
		}
		val, err = p.cvr.GetBoolValueOrEnv(b, cv.env)
		if err != nil {
			return nil, false, false, fmt.Errorf("environment variable %s: %v", cv.env, err)
		}
		return val, false, true, nil
	default:
		var s providerconfig.ConfigVarString
		if data != nil {
			if err := json.Unmarshal(data, &s); err != nil {
				return nil, false, false, &malformedError{fmt.Errorf("want a string or {value, secretKeyRef, configMapKeyRef}: %v", err)}
			}
		}
		fromSecret := s.SecretKeyRef.Name != "" && s.SecretKeyRef.Namespace != "" && s.SecretKeyRef.Key != ""
		val, err := p.cvr.GetStringValue(s)
		if err != nil {
			return nil, false, false, err
		}
		if val == "" && cv.env != "" {
			// GetStringValueOrEnv: the variable when the field gives nothing.
			if val, err = p.cvr.GetStringValueOrEnv(s, cv.env); err != nil {
				return nil, false, false, err
			}
			fromSecret = val != ""
		}
		if val == "" && !present {
			return nil, false, false, nil
		}
		return val, fromSecret, true, nil
	}
}

// lookup finds the value at path; ok is false when a value on the way is
// not an object.
func lookup(m map[string]any, path []string) (v any, present, ok bool) {
	for i, k := range path {
		next, has := m[k]
		if i == len(path)-1 {
			return next, has, true
		}
		if !has || next == nil {
			return nil, false, true
		}
		child, isObj := next.(map[string]any)
		if !isObj {
			return nil, false, false
		}
		m = child
	}
	return nil, false, true
}

// store sets the value at path, creating the objects on the way; a nil
// v removes the field (it resolved to nothing).
func store(m map[string]any, path []string, v any) {
	for _, k := range path[:len(path)-1] {
		child, ok := m[k].(map[string]any)
		if !ok {
			child = map[string]any{}
			m[k] = child
		}
		m = child
	}
	if v == nil {
		delete(m, path[len(path)-1])
		return
	}
	m[path[len(path)-1]] = v
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
