package bindings

import (
	"fmt"
	"regexp"
	"strings"
)

// builtinTypes are the LuaLS type names that need no declaration.
var builtinTypes = map[string]bool{
	"any": true, "nil": true, "boolean": true, "string": true, "number": true, "integer": true,
	"function": true, "table": true, "thread": true, "userdata": true, "lightuserdata": true,
	"unknown": true, "self": true, "fun": true, "true": true, "false": true,
}

// typeName matches a type name in a LuaLS type expression. A name followed
// by ":" (after an optional "?") is a key of an inline table or a fun()
// parameter, not a type, and is skipped by TypeNames.
var typeName = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_.]*(\??\s*:)?`)

// TypeNames returns the type names an expression such as
// "string|ssh.SudoOptions", "{mode?: string}" or "fun(line: string)" uses.
func TypeNames(expr string) []string {
	// Quoted literals ("strict"|"pinned") are values, not names.
	expr = regexp.MustCompile(`"[^"]*"|'[^']*'`).ReplaceAllString(expr, "")
	var out []string
	for _, m := range typeName.FindAllStringSubmatch(expr, -1) {
		if m[1] != "" {
			continue
		}
		out = append(out, m[0])
	}
	return out
}

// UndeclaredTypes lists, as "where: name", every type that the module's
// Params, Returns and fields use and that is neither a LuaLS builtin, nor a
// class or alias of the module, nor in extra. A typo in a spec
// ("ssh.ExecOption") shows up here instead of as a silent "any" in the
// editor.
func (s ModuleSpec) UndeclaredTypes(extra map[string]bool) []string {
	declared := map[string]bool{}
	for _, t := range s.Types {
		declared[t.Name] = true
		for _, a := range t.Aliases {
			declared[a] = true
		}
	}
	var bad []string
	check := func(where, expr string) {
		for _, n := range TypeNames(expr) {
			if !builtinTypes[n] && !declared[n] && !extra[n] {
				bad = append(bad, fmt.Sprintf("%s: %s", where, n))
			}
		}
	}
	for _, f := range s.Funcs {
		for _, p := range f.Params {
			name, typ, _ := strings.Cut(p, " ")
			if strings.HasPrefix(name, "...") && typ == "" {
				typ = strings.TrimPrefix(name, "...")
			}
			check(s.Name+"."+f.Name+" param "+name, typ)
		}
		for _, r := range f.Returns {
			check(s.Name+"."+f.Name+" return", strings.TrimSuffix(r, "..."))
		}
	}
	for _, t := range s.Types {
		for _, f := range t.Fields {
			check(t.Name+"."+f.Name, f.Type)
		}
	}
	return bad
}

// IsBuiltinType reports whether name is a LuaLS builtin type ("string",
// "table", "fun").
func IsBuiltinType(name string) bool { return builtinTypes[name] }
