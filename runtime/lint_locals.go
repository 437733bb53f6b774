package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
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

// localScan walks a chunk's AST with its lexical scopes, as luacheck
// does for its unused-variable warnings (W211, W213, W231).
type localScan struct {
	scopes [][]*localDecl
	decls  []*localDecl
}

func (s *localScan) push() { s.scopes = append(s.scopes, nil) }
func (s *localScan) pop()  { s.scopes = s.scopes[:len(s.scopes)-1] }

// declare adds a checked local (nil line: a name that only hides outer
// ones, such as a parameter).
func (s *localScan) declare(name string, line int, loop, checked bool) {
	d := &localDecl{name: name, line: line, loop: loop}
	if !checked {
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

func (s *localScan) block(stmts []ast.Stmt) {
	s.push()
	for _, st := range stmts {
		s.stmt(st)
	}
	s.pop()
}

func (s *localScan) stmt(st ast.Stmt) {
	switch x := st.(type) {
	case *ast.AssignStmt:
		for _, e := range x.Rhs {
			s.expr(e)
		}
		for _, l := range x.Lhs {
			if id, ok := l.(*ast.IdentExpr); ok {
				if d := s.lookup(id.Value); d != nil {
					d.assigned = true
				}
				continue
			}
			s.expr(l)
		}
	case *ast.LocalAssignStmt:
		// "local function f" sees f in its body (the AST does not tell it
		// from "local f = function", which does not; treating both as the
		// first only hides a read of an outer f, which is rare).
		for i, e := range x.Exprs {
			if fn, isFn := e.(*ast.FunctionExpr); isFn && i < len(x.Names) && len(x.Exprs) == len(x.Names) {
				s.declare(x.Names[i], x.Line(), false, true)
				s.function(fn, false)
				continue
			}
			s.expr(e)
		}
		for i, n := range x.Names {
			if i < len(x.Exprs) && len(x.Exprs) == len(x.Names) {
				if _, isFn := x.Exprs[i].(*ast.FunctionExpr); isFn {
					continue // declared above
				}
			}
			s.declare(n, x.Line(), false, true)
		}
	case *ast.FuncCallStmt:
		s.expr(x.Expr)
	case *ast.DoBlockStmt:
		s.block(x.Stmts)
	case *ast.WhileStmt:
		s.expr(x.Condition)
		s.block(x.Stmts)
	case *ast.RepeatStmt:
		s.push() // the condition sees the body's locals
		for _, b := range x.Stmts {
			s.stmt(b)
		}
		s.expr(x.Condition)
		s.pop()
	case *ast.IfStmt:
		s.expr(x.Condition)
		s.block(x.Then)
		s.block(x.Else)
	case *ast.NumberForStmt:
		s.expr(x.Init)
		s.expr(x.Limit)
		if x.Step != nil {
			s.expr(x.Step)
		}
		s.push()
		s.declare(x.Name, x.Line(), true, true)
		s.block(x.Stmts)
		s.pop()
	case *ast.GenericForStmt:
		for _, e := range x.Exprs {
			s.expr(e)
		}
		s.push()
		for i, n := range x.Names {
			// for k, v in pairs(t) with only v used: k is how you get
			// to v, so only a last unused name is reported (luacheck
			// does the same with its default unused_secondaries).
			s.declare(n, x.Line(), true, i == len(x.Names)-1)
		}
		s.block(x.Stmts)
		s.pop()
	case *ast.FuncDefStmt:
		if x.Name.Func != nil {
			if id, ok := x.Name.Func.(*ast.IdentExpr); ok {
				if d := s.lookup(id.Value); d != nil {
					d.assigned = true
				}
			} else {
				s.expr(x.Name.Func)
			}
			s.function(x.Func, false)
		} else {
			s.expr(x.Name.Receiver)
			s.function(x.Func, true)
		}
	case *ast.ReturnStmt:
		for _, e := range x.Exprs {
			s.expr(e)
		}
	}
}

func (s *localScan) function(f *ast.FunctionExpr, method bool) {
	s.push()
	if method {
		s.declare("self", 0, false, false)
	}
	if f.ParList != nil {
		for _, n := range f.ParList.Names {
			s.declare(n, 0, false, false)
		}
	}
	s.block(f.Stmts)
	s.pop()
}

func (s *localScan) expr(e ast.Expr) {
	switch x := e.(type) {
	case *ast.IdentExpr:
		if d := s.lookup(x.Value); d != nil {
			d.read = true
		}
	case *ast.AttrGetExpr:
		s.expr(x.Object)
		s.expr(x.Key)
	case *ast.TableExpr:
		for _, f := range x.Fields {
			if f.Key != nil {
				s.expr(f.Key)
			}
			s.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if x.Func != nil {
			s.expr(x.Func)
		}
		if x.Receiver != nil {
			s.expr(x.Receiver)
		}
		for _, a := range x.Args {
			s.expr(a)
		}
	case *ast.LogicalOpExpr:
		s.expr(x.Lhs)
		s.expr(x.Rhs)
	case *ast.RelationalOpExpr:
		s.expr(x.Lhs)
		s.expr(x.Rhs)
	case *ast.StringConcatOpExpr:
		s.expr(x.Lhs)
		s.expr(x.Rhs)
	case *ast.ArithmeticOpExpr:
		s.expr(x.Lhs)
		s.expr(x.Rhs)
	case *ast.UnaryMinusOpExpr:
		s.expr(x.Expr)
	case *ast.UnaryNotOpExpr:
		s.expr(x.Expr)
	case *ast.UnaryLenOpExpr:
		s.expr(x.Expr)
	case *ast.FunctionExpr:
		s.function(x, false)
	}
}

// UnusedLocals lists the locals of a chunk that are never read, in line
// order: luacheck's unused variable (W211), unused loop variable (W213)
// and set-but-never-accessed (W231) warnings. Names starting with "_" are
// left alone (the convention for "on purpose").
func UnusedLocals(chunk []ast.Stmt) []UnusedLocal {
	s := &localScan{}
	s.block(chunk)
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
	files := make([]string, 0, len(pt.plugin.protos))
	for rel := range pt.plugin.protos {
		files = append(files, rel)
	}
	sort.Strings(files)
	var out []*LoadError
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(pt.plugin.dir, filepath.FromSlash(rel)))
		if err != nil {
			continue
		}
		chunk, err := parse.Parse(bytes.NewReader(src), rel)
		if err != nil {
			continue // the loader reported it
		}
		for _, u := range UnusedLocals(chunk) {
			out = append(out, &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: displayPath(pt.plugin, rel),
				Line: u.Line, Message: u.Message, Warning: true})
		}
	}
	return out
}
