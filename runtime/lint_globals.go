package runtime

import (
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// globalUse is one read of a global name.
type globalUse struct {
	name string
	line int
}

// globalScan is the scope visitor that collects the globals a chunk
// reads and the globals it assigns.
type globalScan struct {
	scopes   []map[string]bool
	reads    []globalUse
	assigned map[string]bool
}

func (g *globalScan) push() { g.scopes = append(g.scopes, map[string]bool{}) }
func (g *globalScan) pop()  { g.scopes = g.scopes[:len(g.scopes)-1] }
func (g *globalScan) declare(name string, _ int, _ declKind) {
	g.scopes[len(g.scopes)-1][name] = true
}

func (g *globalScan) local(name string) bool {
	for i := len(g.scopes) - 1; i >= 0; i-- {
		if g.scopes[i][name] {
			return true
		}
	}
	return false
}

func (g *globalScan) read(name string, line int) {
	if !g.local(name) {
		g.reads = append(g.reads, globalUse{name, line})
	}
}

func (g *globalScan) assign(name string, _ int) {
	if !g.local(name) {
		g.assigned[name] = true
	}
}

// lintGlobals reports reads of global names that nothing defines: not the
// sandbox (and what the plugin's code set at load), and no assignment in
// any of the plugin's files. Such a read is nil at run time, almost
// always a typo ("slef", "json" without its require).
func (rt *Runtime) lintGlobals(pt *pluginType, v *vm) []*LoadError {
	known := map[string]bool{}
	v.L.G.Global.ForEach(func(k, _ lua.LValue) {
		if s, ok := k.(lua.LString); ok {
			known[string(s)] = true
		}
	})
	type scanned struct {
		file  string
		reads []globalUse
	}
	var all []scanned
	assigned := map[string]bool{}
	for _, pf := range parsePluginFiles(pt) {
		g := &globalScan{assigned: assigned}
		walkChunk(g, pf.chunk)
		all = append(all, scanned{file: pf.file, reads: g.reads})
	}
	names := []string{"self"}
	for n := range known {
		names = append(names, n)
	}
	for n := range assigned {
		names = append(names, n)
	}
	var out []*LoadError
	for _, s := range all {
		reported := map[string]bool{}
		for _, r := range s.reads {
			if known[r.name] || assigned[r.name] || reported[r.name] {
				continue
			}
			reported[r.name] = true
			out = append(out, &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: s.file, Line: r.line,
				Message: fmt.Sprintf("undefined global %q%s: nothing defines it, so it is nil at run time (a typo, or a missing local x = require(...)?)",
					r.name, DidYouMean(r.name, names))})
		}
	}
	return out
}
