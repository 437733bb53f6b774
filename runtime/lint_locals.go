package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/yuin/gopher-lua/ast"
)

// localDecl is one local variable: a local statement's name or a loop
// variable (function parameters are not checked: hooks take input and
// self whether they use them or not).
type localDecl struct {
	name     string
	line     int
	loop     bool
	read     bool
	assigned bool // set again after its declaration
}

// localScan is the scope visitor behind UnusedLocals, as luacheck's
// unused-variable warnings (W211, W213, W231).
type localScan struct {
	scopes [][]*localDecl
	decls  []*localDecl
}

func (s *localScan) push() { s.scopes = append(s.scopes, nil) }
func (s *localScan) pop()  { s.scopes = s.scopes[:len(s.scopes)-1] }

// declare adds a local. Parameters only hide outer names: hooks take
// input and self whether they use them or not. In "for k, v in ...",
// k is how you get to v, so only an unused last name is reported
// (luacheck's default unused_secondaries does the same).
func (s *localScan) declare(name string, line int, kind declKind) {
	d := &localDecl{name: name, line: line, loop: kind == declLoop}
	if kind == declParam || kind == declLoopKey {
		d.read = true
	} else {
		s.decls = append(s.decls, d)
	}
	top := len(s.scopes) - 1
	s.scopes[top] = append(s.scopes[top], d)
}

// lookup finds the innermost local of that name (the latest declared in
// its scope, as Lua resolves it), or nil for a global.
func (s *localScan) lookup(name string) *localDecl {
	for i := len(s.scopes) - 1; i >= 0; i-- {
		sc := s.scopes[i]
		for j := len(sc) - 1; j >= 0; j-- {
			if sc[j].name == name {
				return sc[j]
			}
		}
	}
	return nil
}

func (s *localScan) read(name string, _ int) {
	if d := s.lookup(name); d != nil {
		d.read = true
	}
}

func (s *localScan) assign(name string, _ int) {
	if d := s.lookup(name); d != nil {
		d.assigned = true
	}
}

// UnusedLocals lists the locals of a chunk that are never read, in line
// order: luacheck's unused variable (W211), unused loop variable (W213)
// and set-but-never-accessed (W231) warnings. Names starting with "_" are
// left alone (the convention for "on purpose").
func UnusedLocals(chunk []ast.Stmt) []UnusedLocal {
	s := &localScan{}
	walkChunk(s, chunk)
	var out []UnusedLocal
	for _, d := range s.decls {
		if d.read || strings.HasPrefix(d.name, "_") {
			continue
		}
		u := UnusedLocal{Name: d.name, Line: d.line}
		switch {
		case d.loop:
			u.Message = fmt.Sprintf("unused loop variable %q: name it _ if it is there on purpose", d.name)
		case d.assigned:
			u.Message = fmt.Sprintf("local %q is assigned but never read: remove it, or use the value", d.name)
		default:
			u.Message = fmt.Sprintf("unused local %q: it is never read (remove it, or name it _%s if it is there on purpose)", d.name, d.name)
		}
		out = append(out, u)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// UnusedLocal is one local UnusedLocals reports.
type UnusedLocal struct {
	Name    string
	Line    int
	Message string
}

// lintLocals reports the unused locals of a plugin's files, as warnings.
func lintLocals(pt *pluginType) []*LoadError {
	var out []*LoadError
	for _, pf := range parsePluginFiles(pt) {
		for _, u := range UnusedLocals(pf.chunk) {
			out = append(out, &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: pf.file,
				Line: u.Line, Message: u.Message, Warning: true})
		}
	}
	return out
}
