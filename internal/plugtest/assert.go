package plugtest

import (
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// assertMarker marks the error tables assertions raise, so the runner
// reports their message, location and diff instead of a raw error.
const assertMarker = "__loomtest_assert"

// raiseFailure raises an assertion failure located at the Lua code that
// called the assertion (level 1), or further up for helpers.
func raiseFailure(L *lua.LState, level int, msg, diff string) {
	t := L.CreateTable(0, 4)
	t.RawSetString(assertMarker, lua.LTrue)
	t.RawSetString("message", lua.LString(msg))
	t.RawSetString("location", lua.LString(strings.TrimSuffix(L.Where(level), ":")))
	if diff != "" {
		t.RawSetString("diff", lua.LString(diff))
	}
	mt := L.CreateTable(0, 1)
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		self := L.CheckTable(1)
		L.Push(lua.LString(self.RawGetString("location").String() + ": " + self.RawGetString("message").String()))
		return 1
	}))
	t.Metatable = mt
	L.Error(t, 0)
}

// withMsg prefixes a failure with the caller's optional message.
func withMsg(L *lua.LState, idx int, s string) string {
	if m, ok := L.Get(idx).(lua.LString); ok && m != "" {
		return string(m) + ": " + s
	}
	return s
}

// newAssert builds the assert table: busted's names (assert.equals,
// assert.same, assert.are.same, assert.is_true...) and assert(v, msg).
func newAssert(L *lua.LState) *lua.LTable {
	equals := func(L *lua.LState) int {
		e, a := L.CheckAny(1), L.CheckAny(2)
		if !rawEqual(e, a) {
			msg := fmt.Sprintf("expected %s, got %s", brief(e), brief(a))
			diff := ""
			if _, isT := e.(*lua.LTable); isT {
				msg = "expected the same table (equals compares tables by identity; use assert.same to compare contents)"
				diff = "expected: " + show(e) + "\ngot:      " + show(a)
			}
			raiseFailure(L, 1, withMsg(L, 3, msg), diff)
		}
		return 0
	}
	notEquals := func(L *lua.LState) int {
		e, a := L.CheckAny(1), L.CheckAny(2)
		if rawEqual(e, a) {
			raiseFailure(L, 1, withMsg(L, 3, fmt.Sprintf("expected a value other than %s", brief(e))), "")
		}
		return 0
	}
	same := func(L *lua.LState) int {
		e, a := L.CheckAny(1), L.CheckAny(2)
		if lines := deepDiff(e, a, 30); len(lines) > 0 {
			msg := fmt.Sprintf("values differ at %s", strings.SplitN(lines[0], ":", 2)[0])
			if _, isT := e.(*lua.LTable); !isT {
				msg = fmt.Sprintf("expected %s, got %s", brief(e), brief(a))
			}
			diff := strings.Join(lines, "\n")
			if _, isT := e.(*lua.LTable); isT {
				diff += "\nexpected: " + show(e) + "\ngot:      " + show(a)
			}
			raiseFailure(L, 1, withMsg(L, 3, msg), diff)
		}
		return 0
	}
	notSame := func(L *lua.LState) int {
		e, a := L.CheckAny(1), L.CheckAny(2)
		if len(deepDiff(e, a, 1)) == 0 {
			raiseFailure(L, 1, withMsg(L, 3, "expected different values, got the same: "+brief(a)), "")
		}
		return 0
	}
	truthy := func(L *lua.LState) int {
		if v := L.Get(1); !lua.LVAsBool(v) {
			raiseFailure(L, 1, withMsg(L, 2, fmt.Sprintf("expected a truthy value, got %s", brief(v))), "")
		}
		return 0
	}
	falsy := func(L *lua.LState) int {
		if v := L.Get(1); lua.LVAsBool(v) {
			raiseFailure(L, 1, withMsg(L, 2, fmt.Sprintf("expected nil or false, got %s", brief(v))), "")
		}
		return 0
	}
	isTrue := func(L *lua.LState) int {
		if v := L.Get(1); v != lua.LTrue {
			raiseFailure(L, 1, withMsg(L, 2, fmt.Sprintf("expected true, got %s", brief(v))), "")
		}
		return 0
	}
	isFalse := func(L *lua.LState) int {
		if v := L.Get(1); v != lua.LFalse {
			raiseFailure(L, 1, withMsg(L, 2, fmt.Sprintf("expected false, got %s", brief(v))), "")
		}
		return 0
	}
	isNil := func(L *lua.LState) int {
		if v := L.Get(1); v != lua.LNil {
			raiseFailure(L, 1, withMsg(L, 2, fmt.Sprintf("expected nil, got %s", brief(v))), "")
		}
		return 0
	}
	notNil := func(L *lua.LState) int {
		if L.Get(1) == lua.LNil {
			raiseFailure(L, 1, withMsg(L, 2, "expected a value, got nil"), "")
		}
		return 0
	}
	// matches uses the sandbox's own string.find, so the pattern means
	// what it means in the plugin.
	matches := func(L *lua.LState) int {
		pat := L.CheckString(1)
		s := L.Get(2)
		str, ok := s.(lua.LString)
		if !ok {
			raiseFailure(L, 1, withMsg(L, 3, fmt.Sprintf("expected a string matching %q, got %s", pat, brief(s))), "")
		}
		find := L.GetField(L.GetGlobal("string"), "find")
		L.Push(find)
		L.Push(str)
		L.Push(lua.LString(pat))
		L.Call(2, 1)
		found := L.Get(-1)
		L.Pop(1)
		if found == lua.LNil {
			raiseFailure(L, 1, withMsg(L, 3, fmt.Sprintf("%s does not match the pattern %q", brief(str), pat)), "string: "+string(str))
		}
		return 0
	}
	contains := func(L *lua.LState) int {
		needle, hay := L.CheckAny(1), L.Get(2)
		switch h := hay.(type) {
		case lua.LString:
			if n, ok := needle.(lua.LString); ok && strings.Contains(string(h), string(n)) {
				return 0
			}
		case *lua.LTable:
			found := false
			h.ForEach(func(_, v lua.LValue) {
				if !found && len(deepDiff(needle, v, 1)) == 0 {
					found = true
				}
			})
			if found {
				return 0
			}
		}
		raiseFailure(L, 1, withMsg(L, 3, fmt.Sprintf("%s does not contain %s", brief(hay), brief(needle))), "")
		return 0
	}
	// errors calls fn and passes when it raises. With expected, a string
	// must be part of the error's message, and a table's fields must all
	// be in the error table. It returns the error.
	errorsFn := func(L *lua.LState) int {
		fn := L.CheckFunction(1)
		expected := L.Get(2)
		L.Push(fn)
		err := L.PCall(0, 0, nil)
		if err == nil {
			raiseFailure(L, 1, withMsg(L, 3, "expected an error, but the function returned normally"), "")
		}
		obj := errorObject(err)
		switch e := expected.(type) {
		case lua.LString:
			msg := errorMessage(obj)
			if !strings.Contains(msg, string(e)) {
				raiseFailure(L, 1, withMsg(L, 3, fmt.Sprintf("the error does not contain %q", string(e))), "error: "+msg)
			}
		case *lua.LTable:
			got, ok := obj.(*lua.LTable)
			if !ok {
				raiseFailure(L, 1, withMsg(L, 3, "expected an error table, got "+brief(obj)), "")
			}
			var lines []string
			e.ForEach(func(k, v lua.LValue) {
				lines = append(lines, deepDiff(v, got.RawGet(k), 10)...)
				for i := range lines {
					if strings.HasPrefix(lines[i], "(value)") {
						lines[i] = pathKey("", k) + strings.TrimPrefix(lines[i], "(value)")
					}
				}
			})
			if len(lines) > 0 {
				raiseFailure(L, 1, withMsg(L, 3, "the error table differs"), strings.Join(lines, "\n")+"\nerror: "+show(got))
			}
		}
		L.Push(obj)
		return 1
	}
	failFn := func(L *lua.LState) int {
		raiseFailure(L, 1, L.OptString(1, "failed"), "")
		return 0
	}
	fns := map[string]lua.LGFunction{
		"equals": equals, "equal": equals, "not_equals": notEquals, "not_equal": notEquals,
		"same": same, "not_same": notSame, "truthy": truthy, "is_truthy": truthy,
		"falsy": falsy, "is_falsy": falsy, "is_true": isTrue, "is_false": isFalse,
		"is_nil": isNil, "not_nil": notNil, "is_not_nil": notNil, "matches": matches,
		"contains": contains, "errors": errorsFn, "has_error": errorsFn, "fail": failFn,
	}
	t := L.CreateTable(0, len(fns)+2)
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	// busted's chained forms: assert.are.same, assert.is.equal...
	are := L.CreateTable(0, 4)
	for _, n := range []string{"same", "equal", "equals"} {
		are.RawSetString(n, t.RawGetString(n))
	}
	t.RawSetString("are", are)
	t.RawSetString("is", are)
	mt := L.CreateTable(0, 1)
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

// errorObject is the value a Lua error carries.
func errorObject(err error) lua.LValue {
	if ae, ok := err.(*lua.ApiError); ok {
		return ae.Object
	}
	return lua.LString(err.Error())
}

// errorMessage is an error value's message: the string, or a table's
// message field.
func errorMessage(v lua.LValue) string {
	if t, ok := v.(*lua.LTable); ok {
		if m, ok := t.RawGetString("message").(lua.LString); ok {
			return string(m)
		}
		return show(t)
	}
	return v.String()
}
