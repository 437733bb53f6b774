package runtime

import (
	lua "github.com/yuin/gopher-lua"
)

// funcName names a Lua function for tracebacks where its call site does
// not: a hook the runtime calls from Go (which gopher-lua would call
// "main chunk"), a function called through pcall or a binding, or one
// that replaced its caller by a tail call. It answers the shortest of
// the names the function is reachable by: a key of the plugin's entry
// table ("SkeletonProvider:confirm"), a global function or a function in
// a global table ("helpers.retry"), or one in a loaded module
// ("loom.Base:fail"). A function whose first parameter is self is a
// method and is joined with ":". "" when it is not reachable.
//
// It reads tables raw (no metamethod runs) and only when a traceback is
// being built; answers are cached until the next task.
func (v *vm) funcName(L *lua.LState, fn *lua.LFunction) string {
	if name, ok := v.names[fn]; ok {
		return name
	}
	name := v.searchFuncName(L, fn)
	if v.names == nil || len(v.names) >= funcNameCache {
		v.names = make(map[*lua.LFunction]string, 8)
	}
	v.names[fn] = name
	return name
}

// funcNameCache bounds the names cached per task: closures made in a
// loop are new functions each time.
const funcNameCache = 256

// searchFuncName is funcName without the cache.
func (v *vm) searchFuncName(L *lua.LState, fn *lua.LFunction) string {
	sep := "."
	if isMethod(fn) {
		sep = ":"
	}
	best := ""
	consider := func(name string) {
		if best == "" || len(name) < len(best) || (len(name) == len(best) && name < best) {
			best = name
		}
	}
	// in looks for fn in t (and, with depth 2, in the tables t holds),
	// within a budget of entries: a traceback is built for every error,
	// caught ones too, and must stay cheap however large the globals are.
	budget := funcNameBudget
	var in func(t *lua.LTable, prefix string, depth int)
	in = func(t *lua.LTable, prefix string, depth int) {
		for k, val := t.Next(lua.LNil); k != lua.LNil && budget > 0; k, val = t.Next(k) {
			budget--
			ks, ok := k.(lua.LString)
			if !ok || !luaIdent(string(ks)) {
				continue
			}
			switch x := val.(type) {
			case *lua.LFunction:
				if x == fn {
					if prefix == "" {
						consider(string(ks))
					} else {
						consider(prefix + sep + string(ks))
					}
				}
			case *lua.LTable:
				if depth > 1 && x != t && x != L.G.Global {
					in(x, joinName(prefix, string(ks)), depth-1)
				}
			}
		}
	}
	if v.entry != nil {
		name := v.pt.def.Classname
		if name == "" {
			name = v.pt.name
		}
		in(v.entry, name, 1)
	}
	in(L.G.Global, "", 2)
	if v.loaded != nil {
		v.loaded.ForEach(func(k, val lua.LValue) {
			ks, ok := k.(lua.LString)
			if t, isT := val.(*lua.LTable); ok && isT {
				in(t, string(ks), 2)
			}
		})
	}
	return best
}

// funcNameBudget bounds the table entries funcName reads for one name.
const funcNameBudget = 4096

func joinName(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// isMethod reports whether fn was defined with a colon (or takes self
// first), so its name reads Class:method.
func isMethod(fn *lua.LFunction) bool {
	p := fn.Proto
	return p != nil && p.NumParameters > 0 && len(p.DbgLocals) > 0 && p.DbgLocals[0].Name == "self"
}

// luaIdent reports whether s is a Lua name (so it reads as a path).
func luaIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
