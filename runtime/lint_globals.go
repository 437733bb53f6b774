package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// globalUse is one read of a global name.
type globalUse struct {
	name string
	line int
}

// globalScan walks a chunk's AST with its lexical scopes, collecting the
// globals it reads and the globals it assigns.
type globalScan struct {
	scopes   []map[string]bool
	reads    []globalUse
	assigned map[string]bool
}

func (g *globalScan) push() { g.scopes = append(g.scopes, map[string]bool{}) }
func (g *globalScan) pop()  { g.scopes = g.scopes[:len(g.scopes)-1] }
func (g *globalScan) declare(names ...string) {
	for _, n := range names {
		g.scopes[len(g.scopes)-1][n] = true
	}
}

func (g *globalScan) local(name string) bool {
	for i := len(g.scopes) - 1; i >= 0; i-- {
		if g.scopes[i][name] {
			return true
		}
	}
	return false
}

func (g *globalScan) block(stmts []ast.Stmt) {
	g.push()
	for _, s := range stmts {
		g.stmt(s)
	}
	g.pop()
}

func (g *globalScan) stmt(s ast.Stmt) {
	switch st := s.(type) {
	case *ast.AssignStmt:
		for _, e := range st.Rhs {
			g.expr(e)
		}
		for _, l := range st.Lhs {
			if id, ok := l.(*ast.IdentExpr); ok {
				if !g.local(id.Value) {
					g.assigned[id.Value] = true
				}
				continue
			}
			g.expr(l)
		}
	case *ast.LocalAssignStmt:
		// "local function f" sees f in its body; so does this, for any
		// function expression (the AST does not tell the two forms apart).
		for i, e := range st.Exprs {
			if _, isFn := e.(*ast.FunctionExpr); isFn && i < len(st.Names) {
				g.declare(st.Names[i])
			}
			g.expr(e)
		}
		g.declare(st.Names...)
	case *ast.FuncCallStmt:
		g.expr(st.Expr)
	case *ast.DoBlockStmt:
		g.block(st.Stmts)
	case *ast.WhileStmt:
		g.expr(st.Condition)
		g.block(st.Stmts)
	case *ast.RepeatStmt:
		// The condition sees the body's locals.
		g.push()
		for _, s := range st.Stmts {
			g.stmt(s)
		}
		g.expr(st.Condition)
		g.pop()
	case *ast.IfStmt:
		g.expr(st.Condition)
		g.block(st.Then)
		g.block(st.Else)
	case *ast.NumberForStmt:
		g.expr(st.Init)
		g.expr(st.Limit)
		if st.Step != nil {
			g.expr(st.Step)
		}
		g.push()
		g.declare(st.Name)
		g.block(st.Stmts)
		g.pop()
	case *ast.GenericForStmt:
		for _, e := range st.Exprs {
			g.expr(e)
		}
		g.push()
		g.declare(st.Names...)
		g.block(st.Stmts)
		g.pop()
	case *ast.FuncDefStmt:
		if st.Name.Func != nil {
			if id, ok := st.Name.Func.(*ast.IdentExpr); ok {
				if !g.local(id.Value) {
					g.assigned[id.Value] = true
				}
			} else {
				g.expr(st.Name.Func)
			}
			g.function(st.Func, false)
		} else {
			g.expr(st.Name.Receiver)
			g.function(st.Func, true)
		}
	case *ast.ReturnStmt:
		for _, e := range st.Exprs {
			g.expr(e)
		}
	}
}

func (g *globalScan) function(f *ast.FunctionExpr, method bool) {
	g.push()
	if method {
		g.declare("self")
	}
	if f.ParList != nil {
		g.declare(f.ParList.Names...)
	}
	g.block(f.Stmts)
	g.pop()
}

func (g *globalScan) expr(e ast.Expr) {
	switch ex := e.(type) {
	case *ast.IdentExpr:
		if !g.local(ex.Value) {
			g.reads = append(g.reads, globalUse{ex.Value, ex.Line()})
		}
	case *ast.AttrGetExpr:
		g.expr(ex.Object)
		g.expr(ex.Key)
	case *ast.TableExpr:
		for _, f := range ex.Fields {
			if f.Key != nil {
				g.expr(f.Key)
			}
			g.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if ex.Func != nil {
			g.expr(ex.Func)
		}
		if ex.Receiver != nil {
			g.expr(ex.Receiver)
		}
		for _, a := range ex.Args {
			g.expr(a)
		}
	case *ast.LogicalOpExpr:
		g.expr(ex.Lhs)
		g.expr(ex.Rhs)
	case *ast.RelationalOpExpr:
		g.expr(ex.Lhs)
		g.expr(ex.Rhs)
	case *ast.StringConcatOpExpr:
		g.expr(ex.Lhs)
		g.expr(ex.Rhs)
	case *ast.ArithmeticOpExpr:
		g.expr(ex.Lhs)
		g.expr(ex.Rhs)
	case *ast.UnaryMinusOpExpr:
		g.expr(ex.Expr)
	case *ast.UnaryNotOpExpr:
		g.expr(ex.Expr)
	case *ast.UnaryLenOpExpr:
		g.expr(ex.Expr)
	case *ast.FunctionExpr:
		g.function(ex, false)
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
	files := make([]string, 0, len(pt.plugin.protos))
	for rel := range pt.plugin.protos {
		files = append(files, rel)
	}
	sort.Strings(files)
	type scanned struct {
		file  string
		reads []globalUse
	}
	var all []scanned
	assigned := map[string]bool{}
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(pt.plugin.dir, filepath.FromSlash(rel)))
		if err != nil {
			continue
		}
		chunk, err := parse.Parse(bytes.NewReader(src), rel)
		if err != nil {
			continue // the loader reported it
		}
		g := &globalScan{assigned: assigned}
		g.block(chunk)
		all = append(all, scanned{file: displayPath(pt.plugin, rel), reads: g.reads})
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
