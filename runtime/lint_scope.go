package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// parsedFile is one of a plugin's Lua files, parsed for a lint pass.
type parsedFile struct {
	file  string // as problems name it
	chunk []ast.Stmt
}

// parsePluginFiles parses the plugin's own Lua files (not its tests), in
// name order; a file that does not parse is left out (the loader
// reported it).
func parsePluginFiles(pt *pluginType) []parsedFile {
	files := make([]string, 0, len(pt.plugin.protos))
	for rel := range pt.plugin.protos {
		files = append(files, rel)
	}
	sort.Strings(files)
	var out []parsedFile
	for _, rel := range files {
		src, err := os.ReadFile(filepath.Join(pt.plugin.dir, filepath.FromSlash(rel)))
		if err != nil {
			continue
		}
		chunk, err := parse.Parse(bytes.NewReader(src), rel)
		if err != nil {
			continue
		}
		out = append(out, parsedFile{file: displayPath(pt.plugin, rel), chunk: chunk})
	}
	return out
}

// declKind says what declared a name.
type declKind int

const (
	declLocal   declKind = iota // a local statement (or local function)
	declLoop                    // a numeric for variable, or a generic for's last name
	declLoopKey                 // a generic for's other names (k in k, v)
	declParam                   // a function parameter, or self
)

// scopeVisitor receives what a scoped walk of a chunk's AST finds, in
// source order: the lint passes (undefined globals, unused locals) are
// visitors of one walk.
type scopeVisitor interface {
	push()
	pop()
	declare(name string, line int, kind declKind)
	// read is a use of a name's value; assign a store to the name
	// itself (x = 1, function x() end).
	read(name string, line int)
	assign(name string, line int)
}

// walkChunk walks a chunk with Lua's lexical scopes.
func walkChunk(v scopeVisitor, chunk []ast.Stmt) {
	w := scopeWalker{v}
	w.block(chunk)
}

type scopeWalker struct{ v scopeVisitor }

func (w scopeWalker) block(stmts []ast.Stmt) {
	w.v.push()
	for _, s := range stmts {
		w.stmt(s)
	}
	w.v.pop()
}

func (w scopeWalker) stmt(s ast.Stmt) {
	switch st := s.(type) {
	case *ast.AssignStmt:
		for _, e := range st.Rhs {
			w.expr(e)
		}
		for _, l := range st.Lhs {
			if id, ok := l.(*ast.IdentExpr); ok {
				w.v.assign(id.Value, id.Line())
				continue
			}
			w.expr(l)
		}
	case *ast.LocalAssignStmt:
		// "local function f" sees f in its body; so does this, for any
		// function expression (the AST does not tell the two forms apart).
		declared := map[int]bool{}
		for i, e := range st.Exprs {
			if _, isFn := e.(*ast.FunctionExpr); isFn && i < len(st.Names) {
				w.v.declare(st.Names[i], st.Line(), declLocal)
				declared[i] = true
			}
			w.expr(e)
		}
		for i, n := range st.Names {
			if !declared[i] {
				w.v.declare(n, st.Line(), declLocal)
			}
		}
	case *ast.FuncCallStmt:
		w.expr(st.Expr)
	case *ast.DoBlockStmt:
		w.block(st.Stmts)
	case *ast.WhileStmt:
		w.expr(st.Condition)
		w.block(st.Stmts)
	case *ast.RepeatStmt:
		// The condition sees the body's locals.
		w.v.push()
		for _, s := range st.Stmts {
			w.stmt(s)
		}
		w.expr(st.Condition)
		w.v.pop()
	case *ast.IfStmt:
		w.expr(st.Condition)
		w.block(st.Then)
		w.block(st.Else)
	case *ast.NumberForStmt:
		w.expr(st.Init)
		w.expr(st.Limit)
		if st.Step != nil {
			w.expr(st.Step)
		}
		w.v.push()
		w.v.declare(st.Name, st.Line(), declLoop)
		w.block(st.Stmts)
		w.v.pop()
	case *ast.GenericForStmt:
		for _, e := range st.Exprs {
			w.expr(e)
		}
		w.v.push()
		for i, n := range st.Names {
			kind := declLoopKey
			if i == len(st.Names)-1 {
				kind = declLoop
			}
			w.v.declare(n, st.Line(), kind)
		}
		w.block(st.Stmts)
		w.v.pop()
	case *ast.FuncDefStmt:
		if st.Name.Func != nil {
			if id, ok := st.Name.Func.(*ast.IdentExpr); ok {
				w.v.assign(id.Value, id.Line())
			} else {
				w.expr(st.Name.Func)
			}
			w.function(st.Func, false)
		} else {
			w.expr(st.Name.Receiver)
			w.function(st.Func, true)
		}
	case *ast.ReturnStmt:
		for _, e := range st.Exprs {
			w.expr(e)
		}
	}
}

func (w scopeWalker) function(f *ast.FunctionExpr, method bool) {
	w.v.push()
	if method {
		w.v.declare("self", f.Line(), declParam)
	}
	if f.ParList != nil {
		for _, n := range f.ParList.Names {
			w.v.declare(n, f.Line(), declParam)
		}
	}
	w.block(f.Stmts)
	w.v.pop()
}

func (w scopeWalker) expr(e ast.Expr) {
	switch ex := e.(type) {
	case *ast.IdentExpr:
		w.v.read(ex.Value, ex.Line())
	case *ast.AttrGetExpr:
		w.expr(ex.Object)
		w.expr(ex.Key)
	case *ast.TableExpr:
		for _, f := range ex.Fields {
			if f.Key != nil {
				w.expr(f.Key)
			}
			w.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		if ex.Func != nil {
			w.expr(ex.Func)
		}
		if ex.Receiver != nil {
			w.expr(ex.Receiver)
		}
		for _, a := range ex.Args {
			w.expr(a)
		}
	case *ast.LogicalOpExpr:
		w.expr(ex.Lhs)
		w.expr(ex.Rhs)
	case *ast.RelationalOpExpr:
		w.expr(ex.Lhs)
		w.expr(ex.Rhs)
	case *ast.StringConcatOpExpr:
		w.expr(ex.Lhs)
		w.expr(ex.Rhs)
	case *ast.ArithmeticOpExpr:
		w.expr(ex.Lhs)
		w.expr(ex.Rhs)
	case *ast.UnaryMinusOpExpr:
		w.expr(ex.Expr)
	case *ast.UnaryNotOpExpr:
		w.expr(ex.Expr)
	case *ast.UnaryLenOpExpr:
		w.expr(ex.Expr)
	case *ast.FunctionExpr:
		w.function(ex, false)
	}
}
