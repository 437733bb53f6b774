package runtime

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// cooprName is what a Coopr server accepts as an entity name
// (NamedEntity: [\w.-]+, at most 255 characters). The length is checked
// apart: a counted repetition ({1,255}) compiles into as many copies of
// its class, 1.4 ms at the start of every loomd process.
var cooprName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func validCooprName(s string) bool { return len(s) <= 255 && cooprName.MatchString(s) }

// cooprPermissions is a resource file mode a Coopr server accepts (3 or 4
// digits) that is also an octal mode loomd can apply.
var cooprPermissions = regexp.MustCompile(`^[0-7]{3,4}$`)

// CooprProblems lists what a Coopr server would refuse in a plugin type's
// object when loomd registers it (PUT /v2/plugins/<family>types/<name>):
// the checks of its codecs and specs (ProviderTypeCodec, FieldSchemaCodec,
// ParametersSpecification, ResourceTypeSpecification, NamedEntity), each
// message naming the key at fault and what the server expects. A missing
// "name" is not one: loomd fills it in from the type's name.
func CooprProblems(name string, raw json.RawMessage) []string {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if !validCooprName(name) {
		add("type name %q: a Coopr server accepts 1 to 255 letters, digits, '_', '.' or '-'", name)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		add("the type's object is not a JSON object: %v", err)
		return probs
	}
	for _, k := range []string{"name", "label", "description", "icon"} {
		if v, ok := obj[k]; ok && v != nil {
			if _, isStr := v.(string); !isStr {
				add("%q must be a string for a Coopr server", k)
			}
		}
	}
	if v, ok := obj["version"]; ok && v != nil {
		if f, isNum := v.(float64); !isNum || f != float64(int32(f)) {
			add("\"version\" must be an integer for a Coopr server")
		}
	}
	if v, ok := obj["parameters"]; ok && v != nil {
		params, isObj := v.(map[string]any)
		if !isObj {
			add("\"parameters\" must be an object with \"admin\" and/or \"user\"")
		}
		for _, g := range sortedKeys(params) {
			if g != "admin" && g != "user" {
				add("parameters.%s: a Coopr server knows only the groups \"admin\" and \"user\" (lower case)", g)
				continue
			}
			probs = append(probs, cooprGroupProblems("parameters."+g, params[g])...)
		}
	}
	if v, ok := obj["resourceTypes"]; ok && v != nil {
		rts, isObj := v.(map[string]any)
		if !isObj {
			add("\"resourceTypes\" must be an object of {format, permissions?} objects")
		}
		for _, rname := range sortedKeys(rts) {
			where := "resourceTypes." + rname
			if !validCooprName(rname) {
				add("%s: a resource type name is 1 to 255 letters, digits, '_', '.' or '-'", where)
			}
			rt, isObj := rts[rname].(map[string]any)
			if !isObj {
				add("%s must be an object {\"format\": \"file\"|\"archive\", \"permissions\"?}", where)
				continue
			}
			format, _ := rt["format"].(string)
			if format != "file" && format != "archive" {
				add("%s.format must be \"file\" or \"archive\" (lower case); a Coopr server refuses %s", where, describe(rt["format"]))
			}
			if p, ok := rt["permissions"]; ok && p != nil {
				ps, isStr := p.(string)
				switch {
				case format == "archive":
					add("%s.permissions: a Coopr server allows permissions only for the file format", where)
				case !isStr || !cooprPermissions.MatchString(ps):
					add("%s.permissions must be an octal mode string such as \"0755\" (3 or 4 digits), not %s", where, describe(p))
				}
			}
		}
	}
	return probs
}

func cooprGroupProblems(where string, v any) []string {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if v == nil {
		return nil
	}
	g, isObj := v.(map[string]any)
	if !isObj {
		return []string{where + " must be an object {\"fields\": {...}, \"required\": [[...]]}"}
	}
	fields, _ := g["fields"].(map[string]any)
	if f, ok := g["fields"]; ok && f != nil && fields == nil {
		add("%s.fields must be an object of field objects", where)
	}
	for _, name := range sortedKeys(fields) {
		fw := where + ".fields." + name
		f, isObj := fields[name].(map[string]any)
		if !isObj {
			add("%s must be an object {label, type, tip, default, override, sensitive, options}", fw)
			continue
		}
		for _, k := range []string{"label", "type", "tip"} {
			switch f[k].(type) {
			case nil, string, float64, bool:
			default:
				add("%s.%s must be a string", fw, k)
			}
		}
		for _, k := range []string{"override", "sensitive"} {
			switch x := f[k].(type) {
			case nil, bool:
			case string:
				if x != "true" && x != "false" {
					add("%s.%s must be true or false", fw, k)
				}
			default:
				add("%s.%s must be true or false", fw, k)
			}
		}
		if o, ok := f["options"]; ok && o != nil {
			list, isList := o.([]any)
			if !isList {
				add("%s.options must be a list of strings", fw)
			}
			for _, item := range list {
				switch item.(type) {
				case string, float64, bool:
				default:
					add("%s.options must be a list of strings, not %s", fw, describe(item))
				}
			}
		}
	}
	if r, ok := g["required"]; ok && r != nil {
		sets, isList := r.([]any)
		if !isList {
			add("%s.required must be a list of lists of field names", where)
		}
		var unknown []string
		seen := map[string]bool{}
		for _, s := range sets {
			set, isList := s.([]any)
			if !isList {
				add("%s.required must be a list of lists of field names, not a list of %s", where, describe(s))
				continue
			}
			for _, n := range set {
				ns, isStr := n.(string)
				if !isStr {
					add("%s.required holds %s; field names are strings", where, describe(n))
					continue
				}
				if _, declared := fields[ns]; !declared && !seen[ns] {
					seen[ns] = true
					unknown = append(unknown, ns)
				}
			}
		}
		if len(unknown) > 0 {
			add("%s.required names %s, not declared in %s.fields (a Coopr server refuses: \"specified as required, but are not fields\")",
				where, strings.Join(unknown, ", "), where)
		}
	}
	return probs
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func describe(v any) string {
	if v == nil {
		return "a missing value"
	}
	b, _ := json.Marshal(v)
	if len(b) > 40 {
		b = append(b[:40], "..."...)
	}
	return string(b)
}
