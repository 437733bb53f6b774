package plugtest

import (
	"fmt"
	"math"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The assertions, by their luassert names (and the kit's own contains).
func init() {
	equals := assertion{2, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		e, g := a[0], a[1]
		o := outcome{pass: rawEqual(e, g), neg: fmt.Sprintf("expected a value other than %s", brief(e))}
		o.pos = fmt.Sprintf("expected %s, got %s", brief(e), brief(g))
		if _, isT := e.(*lua.LTable); isT {
			o.pos = "expected the same table (equals compares tables by identity; use assert.same to compare contents)"
			o.diff = "expected: " + show(e) + "\ngot:      " + show(g)
		}
		return o
	}}
	same := assertion{2, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		e, g := a[0], a[1]
		lines := deepDiff(e, g, 30)
		o := outcome{pass: len(lines) == 0, neg: "expected different values, got the same: " + brief(g)}
		if len(lines) > 0 {
			o.pos = fmt.Sprintf("values differ at %s", strings.SplitN(lines[0], ":", 2)[0])
			o.diff = strings.Join(lines, "\n")
			if _, isT := e.(*lua.LTable); isT {
				o.diff += "\nexpected: " + show(e) + "\ngot:      " + show(g)
			} else {
				o.pos = fmt.Sprintf("expected %s, got %s", brief(e), brief(g))
			}
		}
		return o
	}}
	truthy := assertion{1, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		return outcome{pass: lua.LVAsBool(a[0]), pos: "expected a truthy value, got " + brief(a[0]), neg: "expected nil or false, got " + brief(a[0])}
	}}
	falsy := assertion{1, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		return outcome{pass: !lua.LVAsBool(a[0]), pos: "expected nil or false, got " + brief(a[0]), neg: "expected a truthy value, got " + brief(a[0])}
	}}
	exact := func(want lua.LValue, what string) assertion {
		return assertion{1, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
			pos := fmt.Sprintf("expected %s, got %s", what, brief(a[0]))
			if want == lua.LNil {
				pos = "expected nil, got " + brief(a[0])
			}
			neg := fmt.Sprintf("expected a value other than %s", what)
			if want == lua.LNil {
				neg = "expected a value, got nil"
			}
			return outcome{pass: a[0] == want, pos: pos, neg: neg}
		}}
	}
	isType := func(typ lua.LValueType) assertion {
		return assertion{1, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
			return outcome{pass: a[0].Type() == typ,
				pos: fmt.Sprintf("expected a %s, got %s (%s)", typ, brief(a[0]), a[0].Type()),
				neg: fmt.Sprintf("expected a value that is not a %s, got %s", typ, brief(a[0]))}
		}}
	}
	// matches uses Lua patterns, as the sandbox's string.find does.
	matches := assertion{2, func(L *lua.LState, _ *assertState, a []lua.LValue) outcome {
		pat, ok := a[0].(lua.LString)
		if !ok {
			L.ArgError(1, "want a Lua pattern, then the string")
		}
		s, isStr := a[1].(lua.LString)
		if n, isNum := a[1].(lua.LNumber); isNum {
			s, isStr = lua.LString(n.String()), true
		}
		if !isStr {
			return outcome{pos: fmt.Sprintf("expected a string matching %q, got %s", string(pat), brief(a[1])),
				neg: fmt.Sprintf("expected a string not matching %q, got %s", string(pat), brief(a[1]))}
		}
		found, err := luaFind(string(pat), string(s))
		if err != nil {
			L.RaiseError("assert.matches: bad pattern %q: %v", string(pat), err)
		}
		return outcome{pass: found, pos: fmt.Sprintf("%s does not match the pattern %q", brief(s), string(pat)),
			neg: fmt.Sprintf("%s matches the pattern %q", brief(s), string(pat)), diff: "string: " + string(s)}
	}}
	contains := assertion{2, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		needle, hay := a[0], a[1]
		found := false
		switch h := hay.(type) {
		case lua.LString:
			if n, ok := needle.(lua.LString); ok && strings.Contains(string(h), string(n)) {
				found = true
			}
		case *lua.LTable:
			h.ForEach(func(_, v lua.LValue) {
				if !found && matchesValue(needle, v) {
					found = true
				}
			})
		}
		return outcome{pass: found, pos: fmt.Sprintf("%s does not contain %s", brief(hay), brief(needle)),
			neg: fmt.Sprintf("%s contains %s", brief(hay), brief(needle))}
	}}
	near := assertion{3, func(L *lua.LState, _ *assertState, a []lua.LValue) outcome {
		e, ok1 := a[0].(lua.LNumber)
		g, ok2 := a[1].(lua.LNumber)
		tol, ok3 := a[2].(lua.LNumber)
		if !ok1 || !ok3 {
			L.RaiseError("assert.near(expected, actual, tolerance): want numbers")
		}
		pass := ok2 && math.Abs(float64(g-e)) <= float64(tol)
		return outcome{pass: pass,
			pos: fmt.Sprintf("expected %s within %s of %s", brief(a[1]), showNumber(float64(tol)), showNumber(float64(e))),
			neg: fmt.Sprintf("expected %s to differ from %s by more than %s", brief(a[1]), showNumber(float64(e)), showNumber(float64(tol)))}
	}}
	unique := assertion{1, func(L *lua.LState, _ *assertState, a []lua.LValue) outcome {
		t, ok := a[0].(*lua.LTable)
		if !ok {
			L.RaiseError("assert.unique: want a list")
		}
		var vals []lua.LValue
		t.ForEach(func(_, v lua.LValue) { vals = append(vals, v) })
		for i := range vals {
			for j := i + 1; j < len(vals); j++ {
				if len(deepDiff(vals[i], vals[j], 1)) == 0 {
					return outcome{pos: "the list holds " + brief(vals[i]) + " more than once", neg: "expected a value to repeat, all are unique"}
				}
			}
		}
		return outcome{pass: true, neg: "expected a value to repeat, all are unique"}
	}}
	// errors calls fn and passes when it raises. With expected, a string
	// must be part of the error's message, and a table's fields must all
	// be in the error table. It returns the error.
	var errorsA assertion
	errorsA = assertion{2, func(L *lua.LState, _ *assertState, a []lua.LValue) outcome {
		fn, ok := a[0].(*lua.LFunction)
		if !ok {
			L.RaiseError("assert.errors: want a function that should raise an error, got %s", brief(a[0]))
		}
		L.Push(fn)
		err := L.PCall(0, 0, nil)
		if err == nil {
			return outcome{pos: "expected an error, but the function returned normally", neg: "no error, as expected"}
		}
		obj := errorObject(err)
		msg := errorMessage(obj)
		o := outcome{pass: true, rets: []lua.LValue{obj}, neg: "expected no error, got: " + msg}
		switch e := a[1].(type) {
		case lua.LString:
			if !strings.Contains(msg, string(e)) {
				return outcome{pos: fmt.Sprintf("the error does not contain %q", string(e)), diff: "error: " + msg, rets: o.rets,
					neg: "expected no error containing " + brief(e) + ", got: " + msg}
			}
			o.neg = fmt.Sprintf("expected no error containing %q, got: %s", string(e), msg)
		case *lua.LTable:
			got, ok := obj.(*lua.LTable)
			if !ok {
				return outcome{pos: "expected an error table, got " + brief(obj), neg: "an error that is not a table, as expected", rets: o.rets}
			}
			var lines []string
			e.ForEach(func(k, v lua.LValue) {
				for _, l := range deepDiff(v, got.RawGet(k), 10) {
					if strings.HasPrefix(l, "(value)") {
						l = pathKey("", k) + strings.TrimPrefix(l, "(value)")
					}
					lines = append(lines, l)
				}
			})
			if len(lines) > 0 {
				sort.Strings(lines)
				return outcome{pos: "the error table differs", diff: strings.Join(lines, "\n") + "\nerror: " + show(got),
					neg: "expected no such error table", rets: o.rets}
			}
		}
		return o
	}}
	errorMatches := assertion{2, func(L *lua.LState, st *assertState, a []lua.LValue) outcome {
		o := errorsA.run(L, st, []lua.LValue{a[0], lua.LNil})
		if !o.pass {
			return o
		}
		pat, ok := a[1].(lua.LString)
		if !ok {
			L.RaiseError("assert.error_matches(fn, pattern): want a Lua pattern the error's message must match")
		}
		msg := errorMessage(o.rets[0])
		found, err := luaFind(string(pat), msg)
		if err != nil {
			L.RaiseError("assert.error_matches: bad pattern %q: %v", string(pat), err)
		}
		return outcome{pass: found, rets: o.rets, pos: fmt.Sprintf("the error does not match the pattern %q", string(pat)), diff: "error: " + msg,
			neg: fmt.Sprintf("expected no error matching %q, got: %s", string(pat), msg)}
	}}
	called := func(name string, cmp func(n, want int) bool, rel string) assertion {
		return assertion{1, func(L *lua.LState, st *assertState, a []lua.LValue) outcome {
			s := st.spy(L)
			n := len(s.calls)
			want, counted := a[0].(lua.LNumber)
			if !counted {
				if name != "called" {
					L.RaiseError("assert.spy(s).was.%s(n): want a number of calls", name)
				}
				return outcome{pass: n > 0, pos: fmt.Sprintf("expected %s to be called, %s", s.label(), s.describeCalls(false)),
					neg: fmt.Sprintf("expected %s not to be called, it was called %d time(s)", s.label(), n), diff: s.describeCalls(false)}
			}
			return outcome{pass: cmp(n, int(want)),
				pos:  fmt.Sprintf("expected %s to be called %s %d time(s), it was called %d time(s)", s.label(), rel, int(want), n),
				neg:  fmt.Sprintf("expected %s not to be called %s %d time(s), it was called %d time(s)", s.label(), rel, int(want), n),
				diff: s.describeCalls(false)}
		}}
	}
	calledWith := assertion{-1, func(L *lua.LState, st *assertState, a []lua.LValue) outcome {
		s := st.spy(L)
		i := s.calledWith(a)
		o := outcome{pass: i >= 0, pos: fmt.Sprintf("expected %s to be called with (%s), %s", s.label(), showArgs(a), s.describeCalls(false))}
		if i >= 0 {
			o.neg = fmt.Sprintf("expected %s never to be called with (%s), call %d was", s.label(), showArgs(a), i+1)
		}
		return o
	}}
	returnedWith := assertion{-1, func(L *lua.LState, st *assertState, a []lua.LValue) outcome {
		s := st.spy(L)
		i := s.returnedWith(a)
		o := outcome{pass: i >= 0, pos: fmt.Sprintf("expected %s to return (%s), %s", s.label(), showArgs(a), s.describeCalls(true))}
		if i >= 0 {
			o.neg = fmt.Sprintf("expected %s never to return (%s), call %d did", s.label(), showArgs(a), i+1)
		}
		return o
	}}
	fail := assertion{1, func(_ *lua.LState, _ *assertState, a []lua.LValue) outcome {
		msg := "failed"
		if s, ok := a[0].(lua.LString); ok {
			msg = string(s)
		}
		return outcome{pos: msg, neg: msg}
	}}
	assertions = map[string]assertion{
		"equals": equals, "equal": equals, "same": same, "truthy": truthy, "falsy": falsy,
		"true": exact(lua.LTrue, "true"), "false": exact(lua.LFalse, "false"), "nil": exact(lua.LNil, "nil"),
		"boolean": isType(lua.LTBool), "number": isType(lua.LTNumber), "string": isType(lua.LTString),
		"table": isType(lua.LTTable), "function": isType(lua.LTFunction), "userdata": isType(lua.LTUserData),
		"thread": isType(lua.LTThread), "matches": matches, "match": matches, "contains": contains, "contain": contains,
		"near": near, "unique": unique, "error": errorsA, "errors": errorsA, "has_error": errorsA,
		"error_matches": errorMatches, "error_match": errorMatches, "fail": fail,
		"called":           called("called", func(n, w int) bool { return n == w }, "exactly"),
		"called_at_least":  called("called_at_least", func(n, w int) bool { return n >= w }, "at least"),
		"called_at_most":   called("called_at_most", func(n, w int) bool { return n <= w }, "at most"),
		"called_more_than": called("called_more_than", func(n, w int) bool { return n > w }, "more than"),
		"called_less_than": called("called_less_than", func(n, w int) bool { return n < w }, "less than"),
		"called_with":      calledWith, "returned_with": returnedWith,
	}
}

// newAssert builds assert: callable as Lua's assert(v, msg) (a test
// failure), and indexable with luassert's chains of words.
func newAssert(L *lua.LState, f *fileRun) *lua.LTable {
	t := L.CreateTable(0, 0)
	stateMeta := L.CreateTable(0, 2)
	newState := func(L *lua.LState, st *assertState) *lua.LUserData {
		ud := L.NewUserData()
		ud.Value = st
		ud.Metatable = stateMeta
		return ud
	}
	addWords := func(st *assertState, key string) *assertState {
		n := &assertState{payload: st.payload, hasPay: st.hasPay, message: st.message, run: f}
		n.words = append(append([]string{}, st.words...), strings.Split(strings.ToLower(key), "_")...)
		return n
	}
	stateMeta.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		st := L.CheckUserData(1).Value.(*assertState)
		L.Push(newState(L, addWords(st, L.CheckString(2))))
		return 1
	}))
	stateMeta.RawSetString("__call", L.NewFunction(func(L *lua.LState) int {
		st := L.CheckUserData(1).Value.(*assertState)
		args := spyValues(L, 2)
		keys, err := splitKeys(st.words)
		if err != nil {
			L.RaiseError("assert.%s: %v (assertions: %s)", strings.Join(st.words, "_"), err, strings.Join(assertionNames(), ", "))
		}
		name := ""
		for _, k := range keys {
			if _, ok := assertions[k]; ok {
				name = k
			}
		}
		if name == "" {
			// Modifiers that take an argument: spy(s), stub(s), message(m).
			n := &assertState{payload: st.payload, hasPay: st.hasPay, message: st.message, run: f}
			for _, k := range keys {
				switch k {
				case "spy", "stub":
					if len(args) == 0 {
						L.RaiseError("assert.%s(s): give the spy or stub", k)
					}
					n.payload, n.hasPay = args[0], true
				case "message":
					if len(args) > 0 {
						n.message = args[0].String()
					}
				default:
					n.words = append(n.words, k)
				}
			}
			L.Push(newState(L, n))
			return 1
		}
		negate := false
		for _, k := range keys {
			if k == "not" || k == "no" {
				negate = !negate
			}
		}
		a := assertions[name]
		msg := st.message
		if a.arity >= 0 {
			if len(args) > a.arity {
				if s, ok := args[a.arity].(lua.LString); ok && s != "" {
					msg = string(s)
				}
			}
			for len(args) < a.arity {
				args = append(args, lua.LNil)
			}
			args = args[:a.arity]
		}
		o := a.run(L, st, args)
		if o.pass == negate {
			text := o.pos
			if negate {
				text = o.neg
			}
			if msg != "" {
				text = msg + ": " + text
			}
			raiseFailure(L, 1, text, o.diff)
		}
		if negate {
			return 0
		}
		for _, r := range o.rets {
			L.Push(r)
		}
		return len(o.rets)
	}))
	mt := L.CreateTable(0, 2)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.Push(newState(L, addWords(&assertState{}, L.CheckString(2))))
		return 1
	}))
	mt.RawSetString("__call", L.NewFunction(func(L *lua.LState) int {
		// assert(v, msg) as in Lua, reported as a test failure.
		v := L.Get(2)
		if !lua.LVAsBool(v) {
			msg := "assertion failed!"
			if m, ok := L.Get(3).(lua.LString); ok {
				msg = string(m)
			}
			raiseFailure(L, 1, msg, "")
		}
		return L.GetTop() - 1
	}))
	t.Metatable = mt
	return t
}
