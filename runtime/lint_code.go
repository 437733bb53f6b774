package runtime

import (
	"fmt"
	"sort"
	"strings"

	"github.com/yuin/gopher-lua/ast"

	"github.com/loomrt/loom/bindings"
)

// The code passes of plugins check beyond undefined globals and unused
// locals: globals written by mistake (a forgotten local), unknown keys in
// the option tables given to the loom.* bindings, and, with --strict,
// luacheck's shadowing and unreachable code warnings. One walk of each
// file's AST with Lua's scopes.

// LintOptions select plugins check's passes.
type LintOptions struct {
	// Strict adds luacheck-class warnings: a local shadowing another,
	// code after an endless loop or error() that never runs.
	Strict bool
}

// codeBinding is what a local name holds, as far as the walk can tell: a
// loom.* module (require("loom.http")), or a value of a binding's class
// (ssh.connect's ssh.Conn).
type codeBinding struct {
	line   int
	module string // "loom.http"
	class  string // "ssh.Conn"
	param  bool
}

// codeScan is the walk's state for one file.
type codeScan struct {
	file    string
	specs   *optionSpecs
	strict  bool
	scopes  []map[string]*codeBinding
	depth   int // functions entered
	writes  []globalWrite
	out     []*LoadError
	plugin  string
	typ     string
	topLine map[string]int // globals written at load time, first line
	// classnames are the definition's entry tables: globals on purpose,
	// and so are aliases of them (FogProviderAWS = AWS, for Coopr).
	classnames map[string]bool
}

// globalWrite is an assignment to a global name.
type globalWrite struct {
	name   string
	line   int
	inFunc bool
}

// optionSpecs indexes the bindings' specs for the options pass.
type optionSpecs struct {
	funcs   map[string]bindings.FuncSpec // "loom.http.request", "ssh.Conn:exec"
	types   map[string]bindings.TypeSpec // "http.RequestOptions"
	classOf map[string]string            // a method receiver word ("conn") -> its class ("ssh.Conn")
}

func newOptionSpecs(reg *bindings.Registry) *optionSpecs {
	s := &optionSpecs{funcs: map[string]bindings.FuncSpec{}, types: map[string]bindings.TypeSpec{}, classOf: map[string]string{}}
	if reg == nil {
		return s
	}
	for _, name := range reg.Names() {
		b, ok := reg.Lookup(name)
		if !ok {
			continue
		}
		spec := b.Spec()
		recv := map[string]string{}
		for _, t := range spec.Types {
			s.types[t.Name] = t
			if t.Methods != "" {
				recv[t.Methods] = t.Name
			}
		}
		for _, f := range spec.Funcs {
			if r, m, ok := strings.Cut(f.Name, ":"); ok {
				if class := recv[r]; class != "" {
					s.funcs[class+":"+m] = f
				}
				continue
			}
			s.funcs["loom."+spec.Name+"."+f.Name] = f
		}
	}
	return s
}

// exactParam is the exact options class of a function's parameter i, or
// "".
func (s *optionSpecs) exactParam(f bindings.FuncSpec, i int) string {
	if i >= len(f.Params) {
		return ""
	}
	_, typ, _ := strings.Cut(f.Params[i], " ")
	for _, t := range strings.Split(typ, "|") {
		if ts, ok := s.types[strings.TrimSpace(t)]; ok && ts.Exact {
			return ts.Name
		}
	}
	return ""
}

// returns is the class a function returns, or "".
func (s *optionSpecs) returns(f bindings.FuncSpec) string {
	if len(f.Returns) == 0 {
		return ""
	}
	if _, ok := s.types[f.Returns[0]]; ok {
		return f.Returns[0]
	}
	return ""
}

func (c *codeScan) push() { c.scopes = append(c.scopes, map[string]*codeBinding{}) }
func (c *codeScan) pop()  { c.scopes = c.scopes[:len(c.scopes)-1] }

func (c *codeScan) lookup(name string) (*codeBinding, int) {
	for i := len(c.scopes) - 1; i >= 0; i-- {
		if b, ok := c.scopes[i][name]; ok {
			return b, i
		}
	}
	return nil, -1
}

func (c *codeScan) add(line int, warning bool, format string, args ...any) {
	c.out = append(c.out, &LoadError{Plugin: c.plugin, Type: c.typ, File: c.file, Line: line, Warning: warning,
		Message: fmt.Sprintf(format, args...)})
}

// declare adds a local; with --strict, one that shadows a local of an
// enclosing scope (or redefines one of its own) is a warning.
func (c *codeScan) declare(name string, b *codeBinding) {
	if c.strict && name != "_" && name != "self" && !strings.HasPrefix(name, "_") {
		if prev, at := c.lookup(name); prev != nil {
			what := "shadows the local"
			if prev.param {
				what = "shadows the parameter"
			}
			if at == len(c.scopes)-1 {
				what = "redefines the local"
			}
			c.add(b.line, true, "local %q %s %q of line %d: rename one of them (luacheck W4xx)", name, what, name, prev.line)
		}
	}
	c.scopes[len(c.scopes)-1][name] = b
}

// binding is what an expression assigned to a local holds.
func (c *codeScan) binding(e ast.Expr) *codeBinding {
	call, ok := e.(*ast.FuncCallExpr)
	if !ok {
		return nil
	}
	if id, ok := call.Func.(*ast.IdentExpr); ok && id.Value == "require" && len(call.Args) == 1 {
		if s, ok := call.Args[0].(*ast.StringExpr); ok && strings.HasPrefix(s.Value, "loom.") {
			if b, _ := c.lookup("require"); b == nil {
				return &codeBinding{module: s.Value}
			}
		}
	}
	if f, _, ok := c.callSpec(call); ok {
		if cl := c.specs.returns(f); cl != "" {
			return &codeBinding{class: cl}
		}
	}
	return nil
}

// callSpec finds the binding function a call calls: module.fn(...) on a
// local bound to require("loom.x"), or obj:method(...) on a value of a
// binding's class.
func (c *codeScan) callSpec(call *ast.FuncCallExpr) (bindings.FuncSpec, string, bool) {
	if call.Receiver != nil {
		if id, ok := call.Receiver.(*ast.IdentExpr); ok {
			if b, _ := c.lookup(id.Value); b != nil && b.class != "" {
				f, ok := c.specs.funcs[b.class+":"+call.Method]
				return f, id.Value + ":" + call.Method, ok
			}
		}
		return bindings.FuncSpec{}, "", false
	}
	get, ok := call.Func.(*ast.AttrGetExpr)
	if !ok {
		return bindings.FuncSpec{}, "", false
	}
	id, ok1 := get.Object.(*ast.IdentExpr)
	key, ok2 := get.Key.(*ast.StringExpr)
	if !ok1 || !ok2 {
		return bindings.FuncSpec{}, "", false
	}
	b, _ := c.lookup(id.Value)
	if b == nil || b.module == "" {
		return bindings.FuncSpec{}, "", false
	}
	f, ok := c.specs.funcs[b.module+"."+key.Value]
	return f, strings.TrimPrefix(b.module, "loom.") + "." + key.Value, ok
}

// checkOptions reports the unknown keys of a table written in a call.
func (c *codeScan) checkOptions(call *ast.FuncCallExpr) {
	f, name, ok := c.callSpec(call)
	if !ok {
		return
	}
	for i, a := range call.Args {
		t, ok := a.(*ast.TableExpr)
		if !ok {
			continue
		}
		if class := c.specs.exactParam(f, i); class != "" {
			c.checkTable(t, class, name, "")
		}
	}
}

func (c *codeScan) checkTable(t *ast.TableExpr, class, fn, prefix string) {
	ts := c.specs.types[class]
	var known []string
	fields := map[string]bindings.FieldSpec{}
	for _, fs := range ts.Fields {
		known = append(known, fs.Name)
		fields[fs.Name] = fs
	}
	for _, fl := range t.Fields {
		k, ok := fl.Key.(*ast.StringExpr)
		if !ok {
			continue
		}
		fs, found := fields[k.Value]
		if !found {
			c.add(k.Line(), false, "unknown option %q in %s's options%s: the binding refuses it when the hook runs (options of %s: %s)",
				prefix+k.Value, fn, bindings.DidYouMean(k.Value, known), class, strings.Join(known, ", "))
			continue
		}
		if sub, ok := fl.Value.(*ast.TableExpr); ok {
			for _, typ := range strings.Split(fs.Type, "|") {
				if st, ok := c.specs.types[typ]; ok && st.Exact {
					c.checkTable(sub, typ, fn, prefix+k.Value+".")
					break
				}
			}
		}
	}
}

// block walks a block; with --strict, code after a statement that never
// lets the block go on (error(...), an endless loop) is a warning.
func (c *codeScan) block(stmts []ast.Stmt) {
	c.push()
	for i, s := range stmts {
		c.stmt(s)
		if why := neverReturns(s); why != "" && c.strict && i+1 < len(stmts) {
			c.add(stmts[i+1].Line(), true, "unreachable code: %s at line %d never lets it run (luacheck W511)", why, s.Line())
			for _, rest := range stmts[i+1:] {
				c.stmt(rest)
			}
			break
		}
	}
	c.pop()
}

// neverReturns says why a statement never lets the next one run, or "".
func neverReturns(s ast.Stmt) string {
	switch st := s.(type) {
	case *ast.FuncCallStmt:
		if call, ok := st.Expr.(*ast.FuncCallExpr); ok {
			if id, ok := call.Func.(*ast.IdentExpr); ok && id.Value == "error" {
				return "error(...)"
			}
		}
	case *ast.WhileStmt:
		if _, ok := st.Condition.(*ast.TrueExpr); ok && !breaks(st.Stmts) {
			return "a while true loop with no break"
		}
	case *ast.RepeatStmt:
		if _, ok := st.Condition.(*ast.FalseExpr); ok && !breaks(st.Stmts) {
			return "a repeat ... until false loop with no break"
		}
	}
	return ""
}

// breaks says whether a loop body breaks out of its loop (or leaves it
// with goto).
func breaks(stmts []ast.Stmt) bool {
	for _, s := range stmts {
		switch st := s.(type) {
		case *ast.BreakStmt, *ast.GotoStmt:
			return true
		case *ast.IfStmt:
			if breaks(st.Then) || breaks(st.Else) {
				return true
			}
		case *ast.DoBlockStmt:
			if breaks(st.Stmts) {
				return true
			}
		}
	}
	return false
}

func (c *codeScan) assignGlobal(name string, line int) {
	if b, _ := c.lookup(name); b != nil {
		return
	}
	c.writes = append(c.writes, globalWrite{name: name, line: line, inFunc: c.depth > 0})
	if c.depth == 0 {
		if _, ok := c.topLine[name]; !ok {
			c.topLine[name] = line
		}
	}
}

func (c *codeScan) stmt(s ast.Stmt) {
	switch st := s.(type) {
	case *ast.AssignStmt:
		for _, e := range st.Rhs {
			c.expr(e)
		}
		for i, l := range st.Lhs {
			if id, ok := l.(*ast.IdentExpr); ok {
				alias := false
				if i < len(st.Rhs) && c.depth == 0 {
					if r, ok := st.Rhs[i].(*ast.IdentExpr); ok && c.classnames[r.Value] {
						alias = true
					}
				}
				if !alias {
					c.assignGlobal(id.Value, id.Line())
				}
				if b, _ := c.lookup(id.Value); b != nil && i < len(st.Rhs) {
					if nb := c.binding(st.Rhs[i]); nb != nil {
						b.module, b.class = nb.module, nb.class
					}
				}
				continue
			}
			c.expr(l)
		}
	case *ast.LocalAssignStmt:
		declared := map[int]bool{}
		for i, e := range st.Exprs {
			if _, isFn := e.(*ast.FunctionExpr); isFn && i < len(st.Names) {
				c.declare(st.Names[i], &codeBinding{line: st.Line()})
				declared[i] = true
			}
			c.expr(e)
		}
		for i, n := range st.Names {
			if declared[i] {
				continue
			}
			b := &codeBinding{line: st.Line()}
			if i < len(st.Exprs) {
				if nb := c.binding(st.Exprs[i]); nb != nil {
					b.module, b.class = nb.module, nb.class
				}
			}
			c.declare(n, b)
		}
	case *ast.FuncCallStmt:
		c.expr(st.Expr)
	case *ast.DoBlockStmt:
		c.block(st.Stmts)
	case *ast.WhileStmt:
		c.expr(st.Condition)
		c.block(st.Stmts)
	case *ast.RepeatStmt:
		c.push()
		for _, s := range st.Stmts {
			c.stmt(s)
		}
		c.expr(st.Condition)
		c.pop()
	case *ast.IfStmt:
		c.expr(st.Condition)
		c.block(st.Then)
		c.block(st.Else)
	case *ast.NumberForStmt:
		c.expr(st.Init)
		c.expr(st.Limit)
		if st.Step != nil {
			c.expr(st.Step)
		}
		c.push()
		c.declare(st.Name, &codeBinding{line: st.Line()})
		c.block(st.Stmts)
		c.pop()
	case *ast.GenericForStmt:
		for _, e := range st.Exprs {
			c.expr(e)
		}
		c.push()
		for _, n := range st.Names {
			c.declare(n, &codeBinding{line: st.Line()})
		}
		c.block(st.Stmts)
		c.pop()
	case *ast.FuncDefStmt:
		if st.Name.Func != nil {
			if id, ok := st.Name.Func.(*ast.IdentExpr); ok {
				c.assignGlobal(id.Value, id.Line())
			} else {
				c.expr(st.Name.Func)
			}
			c.function(st.Func, false)
		} else {
			c.expr(st.Name.Receiver)
			c.function(st.Func, true)
		}
	case *ast.ReturnStmt:
		for _, e := range st.Exprs {
			c.expr(e)
		}
	}
}

func (c *codeScan) function(f *ast.FunctionExpr, method bool) {
	c.depth++
	c.push()
	if method {
		c.scopes[len(c.scopes)-1]["self"] = &codeBinding{line: f.Line(), param: true}
	}
	if f.ParList != nil {
		for _, n := range f.ParList.Names {
			c.declare(n, &codeBinding{line: f.Line(), param: true})
		}
	}
	c.block(f.Stmts)
	c.pop()
	c.depth--
}

func (c *codeScan) expr(e ast.Expr) {
	switch ex := e.(type) {
	case *ast.AttrGetExpr:
		c.expr(ex.Object)
		c.expr(ex.Key)
	case *ast.TableExpr:
		for _, f := range ex.Fields {
			if f.Key != nil {
				c.expr(f.Key)
			}
			c.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		c.checkOptions(ex)
		if ex.Func != nil {
			c.expr(ex.Func)
		}
		if ex.Receiver != nil {
			c.expr(ex.Receiver)
		}
		for _, a := range ex.Args {
			c.expr(a)
		}
	case *ast.LogicalOpExpr:
		c.expr(ex.Lhs)
		c.expr(ex.Rhs)
	case *ast.RelationalOpExpr:
		c.expr(ex.Lhs)
		c.expr(ex.Rhs)
	case *ast.StringConcatOpExpr:
		c.expr(ex.Lhs)
		c.expr(ex.Rhs)
	case *ast.ArithmeticOpExpr:
		c.expr(ex.Lhs)
		c.expr(ex.Rhs)
	case *ast.UnaryMinusOpExpr:
		c.expr(ex.Expr)
	case *ast.UnaryNotOpExpr:
		c.expr(ex.Expr)
	case *ast.UnaryLenOpExpr:
		c.expr(ex.Expr)
	case *ast.FunctionExpr:
		c.function(ex, false)
	}
}

// lintCode runs the code passes over a plugin's files: global writes
// (errors in functions for a global nothing sets at load time, warnings
// otherwise), unknown binding options (errors), and with opts.Strict the
// luacheck-class warnings.
func (rt *Runtime) lintCode(pt *pluginType, opts LintOptions) []*LoadError {
	specs := newOptionSpecs(rt.bindings)
	classnames := map[string]bool{}
	for _, td := range pt.plugin.def.Types {
		if td.Classname != "" {
			classnames[td.Classname] = true
		}
	}
	type fileWrites struct {
		file   string
		writes []globalWrite
	}
	var all []fileWrites
	top := map[string]int{}
	var out []*LoadError
	for _, pf := range parsePluginFiles(pt) {
		c := &codeScan{file: pf.file, specs: specs, strict: opts.Strict, plugin: pt.plugin.def.Name, typ: pt.name, topLine: top, classnames: classnames}
		c.block(pf.chunk)
		out = append(out, c.out...)
		all = append(all, fileWrites{pf.file, c.writes})
	}
	var main []string
	for n := range classnames {
		main = append(main, n)
	}
	sort.Strings(main)
	for _, fw := range all {
		reported := map[globalWrite]bool{}
		for _, w := range fw.writes {
			key := globalWrite{name: w.name, inFunc: w.inFunc}
			if classnames[w.name] || reported[key] {
				continue
			}
			reported[key] = true
			le := &LoadError{Plugin: pt.plugin.def.Name, Type: pt.name, File: fw.file, Line: w.line}
			_, setAtLoad := top[w.name]
			switch {
			case w.inFunc && !setAtLoad:
				le.Message = fmt.Sprintf("global %q is set inside a function: did you mean \"local %s\"? A global keeps its value in the VM for the next tasks it runs (and every hook and file sees it)",
					w.name, w.name)
			case w.inFunc:
				le.Warning = true
				le.Message = fmt.Sprintf("global %q (set at load time, line %d) is changed inside a function: its value carries over to the next tasks this VM runs; keep such state in a module-level local on purpose, or did you mean \"local %s\"?",
					w.name, top[w.name], w.name)
			default:
				le.Warning = true
				le.Message = fmt.Sprintf("%q is set as a global at load time: did you mean \"local %s\"? Only the entry table (%s) needs to be global",
					w.name, w.name, strings.Join(main, ", "))
			}
			out = append(out, le)
		}
	}
	return out
}
