package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// Keys a definition may hold, by where they sit. A key elsewhere is a
// typo ("defualt") that loading would silently ignore.
var (
	lintTopKeys   = []string{"name", "description", "main", "timeouts", "permissions", "limits", "label", "icon", "version"}
	lintTypeKeys  = []string{"name", "classname", "description", "parameters", "resourceTypes", "main", "timeouts", "permissions", "limits", "host", "label", "icon", "version"}
	lintGroupKeys = []string{"fields", "required"}
	lintFieldKeys = []string{"label", "type", "tip", "default", "override", "sensitive", "options"}
	lintPermKeys  = []string{"http"}
	lintLimitKeys = []string{"memory", "connections", "descriptors"}
	lintResKeys   = []string{"format", "permissions"}
	// Field types a Coopr UI knows; others render as text.
	lintFieldTypes = []string{"text", "password", "checkbox", "select", "textarea", "number", "list"}
)

// Lint checks the loaded plugins more strictly than loading does, for
// loomd plugins check: keys a definition does not know (with a
// suggestion), field defaults that do not fit the field's type,
// entry-table functions named like a hook they do not define ("comfirm"),
// reads of globals nothing defines ("slef") and locals never read. It
// runs no hook. Problems that make a hook misbehave are
// errors; the rest are warnings.
func (rt *Runtime) Lint() []*LoadError { return rt.LintWith(LintOptions{}) }

// LintWith is Lint with options: LintOptions.Strict adds luacheck-class
// warnings (shadowing, unreachable code).
func (rt *Runtime) LintWith(opts LintOptions) []*LoadError {
	snap := rt.snap.Load()
	var out []*LoadError
	seen := map[*plugin]bool{}
	names := make([]string, 0, len(snap.types))
	for n := range snap.types {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		pt := snap.types[n]
		v, err := pt.pool.get(rt.opts.Tenant)
		if err != nil {
			continue // loading reported why
		}
		if !seen[pt.plugin] {
			// Once per plugin: its types share the definition and files.
			seen[pt.plugin] = true
			out = append(out, lintDefinition(pt.plugin)...)
			out = append(out, rt.lintGlobals(pt, v)...)
			out = append(out, lintLocals(pt)...)
			out = append(out, rt.lintCode(pt, opts)...)
		}
		out = append(out, lintHooks(pt, v)...)
		pt.pool.put(v)
	}
	return out
}

// lintDefinition checks a definition file's keys and defaults.
func lintDefinition(p *plugin) []*LoadError {
	data, err := os.ReadFile(p.defFile)
	if err != nil {
		return nil
	}
	var top map[string]any
	if json.Unmarshal(data, &top) != nil {
		return nil
	}
	lines := jsonKeyLines(data)
	var out []*LoadError
	add := func(typ, path string, warning bool, format string, args ...any) {
		out = append(out, &LoadError{Plugin: p.def.Name, Type: typ, File: p.defFile, Line: lines[path],
			Warning: warning, Message: fmt.Sprintf(format, args...)})
	}
	unknown := func(typ, path string, m map[string]any, known []string, where string) {
		for _, k := range sortedKeys(m) {
			if !contains(known, k) {
				add(typ, path+"/"+k, false, "unknown key %q in %s%s: it is ignored (known keys: %s)",
					k, where, DidYouMean(k, known), strings.Join(known, ", "))
			}
		}
	}
	topKnown := append([]string(nil), lintTopKeys...)
	for _, k := range kindTable {
		if _, used := top[k.Key]; used || k.Coopr {
			topKnown = append(topKnown, k.Key)
		}
	}
	for name := range p.def.Types {
		topKnown = append(topKnown, name)
	}
	// A type's object that no kind key lists also lands here.
	unknown("", "", top, topKnown, "the definition")
	subObj := func(m map[string]any, k string) map[string]any {
		v, _ := m[k].(map[string]any)
		return v
	}
	if perm := subObj(top, "permissions"); perm != nil {
		unknown("", "/permissions", perm, lintPermKeys, "permissions")
	}
	if lim := subObj(top, "limits"); lim != nil {
		unknown("", "/limits", lim, lintLimitKeys, "limits")
	}
	for _, name := range sortedKeys(toAnyMap(p.def.Types)) {
		tobj := subObj(top, name)
		if tobj == nil {
			continue
		}
		tp := "/" + name
		unknown(name, tp, tobj, lintTypeKeys, "type "+name)
		if perm := subObj(tobj, "permissions"); perm != nil {
			unknown(name, tp+"/permissions", perm, lintPermKeys, name+".permissions")
		}
		if lim := subObj(tobj, "limits"); lim != nil {
			unknown(name, tp+"/limits", lim, lintLimitKeys, name+".limits")
		}
		for rname, rv := range subObj(tobj, "resourceTypes") {
			if r, ok := rv.(map[string]any); ok {
				unknown(name, tp+"/resourceTypes/"+rname, r, lintResKeys, name+".resourceTypes."+rname)
			}
		}
		params := subObj(tobj, "parameters")
		for _, g := range sortedKeys(params) {
			gobj, ok := params[g].(map[string]any)
			if !ok {
				continue
			}
			gp := tp + "/parameters/" + g
			unknown(name, gp, gobj, lintGroupKeys, "parameters."+g)
			fields := subObj(gobj, "fields")
			for _, fname := range sortedKeys(fields) {
				f, ok := fields[fname].(map[string]any)
				if !ok {
					continue
				}
				fp := gp + "/fields/" + fname
				where := "parameters." + g + ".fields." + fname
				unknown(name, fp, f, lintFieldKeys, where)
				lintField(f, func(warning bool, key, format string, args ...any) {
					path := fp
					if key != "" {
						path += "/" + key
					}
					add(name, path, warning, where+": "+format, args...)
				})
			}
		}
	}
	return out
}

// lintField checks a field's type and that its default fits it.
func lintField(f map[string]any, add func(warning bool, key, format string, args ...any)) {
	typ, _ := f["type"].(string)
	if typ != "" && !contains(lintFieldTypes, typ) {
		add(true, "type", "type %q is not a field type a Coopr UI knows%s (%s)", typ, DidYouMean(typ, lintFieldTypes), strings.Join(lintFieldTypes, ", "))
	}
	def, has := f["default"]
	if !has || def == nil {
		return
	}
	switch d := def.(type) {
	case map[string]any, []any:
		add(false, "default", "default is a JSON %s; a field's default is a string, number or boolean", describe(d))
		return
	case bool:
		if typ != "checkbox" && typ != "" {
			add(true, "default", "default %v is a boolean, but the field's type is %q (a checkbox's default is true or false)", d, typ)
		}
	case string:
		if typ == "checkbox" && d != "true" && d != "false" {
			add(false, "default", "default %q does not fit a checkbox: use true or false", d)
		}
	}
	if typ == "select" {
		opts, _ := f["options"].([]any)
		found := false
		for _, o := range opts {
			if fmt.Sprint(o) == fmt.Sprint(def) {
				found = true
			}
		}
		if !found {
			add(false, "default", "default %s is not one of the options %s", describe(def), describe(opts))
		}
	}
}

func toAnyMap[V any](m map[string]V) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// lintHooks finds entry-table functions whose names are near the name of
// a hook the table does not define: "comfirm" is never called, and
// CONFIRM tasks fail.
func lintHooks(pt *pluginType, v *vm) []*LoadError {
	hooks := pt.kind().HookNames()
	var out []*LoadError
	var names []string
	v.entry.ForEach(func(k, val lua.LValue) {
		if s, ok := k.(lua.LString); ok {
			if _, isFn := val.(*lua.LFunction); isFn {
				names = append(names, string(s))
			}
		}
	})
	sort.Strings(names)
	for _, n := range names {
		if contains(hooks, n) {
			continue
		}
		for _, h := range hooks {
			// Only when the hook itself is missing: a helper named near
			// a hook ("remote" beside remove) is fine. One edit away, or
			// two in a long name: "comfirm", "bootstap".
			d := bindings.EditDistance(strings.ToLower(n), h)
			if contains(pt.hooks, h) || d == 0 || len(n) < 4 || !(d == 1 || d == 2 && len(n) >= 7) {
				continue
			}
			le := &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: pt.plugin.defFile,
				Message: fmt.Sprintf("%s defines %s, which is not a hook, and does not define %s: did you mean %s? (%s tasks fail with \"unimplemented %s\")",
					pt.def.Classname, n, h, h, strings.ToUpper(h), h)}
			if fn, ok := v.entry.RawGetString(n).(*lua.LFunction); ok && fn.Proto != nil {
				le.File, le.Line = fn.Proto.SourceName, fn.Proto.LineDefined
			}
			out = append(out, le)
			break
		}
	}
	return out
}

// DidYouMean returns ` (did you mean "x"?)` for the known name nearest
// to s (at most 2 edits away), or "".
func DidYouMean(s string, known []string) string { return bindings.DidYouMean(s, known) }

// jsonKeyLines maps each object key's path ("/type/parameters/admin") to
// the line it is on.
func jsonKeyLines(data []byte) map[string]int {
	out := map[string]int{}
	dec := json.NewDecoder(bytes.NewReader(data))
	lineAt := func(off int64) int {
		i := int(off)
		for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r' || data[i] == ',') {
			i++
		}
		return bytes.Count(data[:i], []byte("\n")) + 1
	}
	var walk func(path string, depth int) bool
	walk = func(path string, depth int) bool {
		if depth > 64 {
			return false
		}
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return true
		}
		switch d {
		case '{':
			for dec.More() {
				off := dec.InputOffset()
				kt, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := kt.(string)
				out[path+"/"+key] = lineAt(off)
				if !walk(path+"/"+key, depth+1) {
					return false
				}
			}
		case '[':
			for i := 0; dec.More(); i++ {
				if !walk(path+"/"+strconv.Itoa(i), depth+1) {
					return false
				}
			}
		}
		_, err = dec.Token() // the closing delimiter
		return err == nil
	}
	walk("", 0)
	return out
}
