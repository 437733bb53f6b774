package plugtest

import (
	"fmt"
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/pm"
)

// matcher is one of luassert's argument matchers (match._,
// match.is_string(), match.is_same(t), ...): in called_with,
// returned_with, on_call_with, and anywhere in assert.same's expected
// value.
type matcher struct {
	desc  string
	check func(v lua.LValue) bool
}

const matcherType = "loom.test.matcher"

// asMatcher returns v's matcher, or nil.
func asMatcher(v lua.LValue) *matcher {
	if ud, ok := v.(*lua.LUserData); ok {
		if m, ok := ud.Value.(*matcher); ok {
			return m
		}
	}
	return nil
}

func pushMatcher(L *lua.LState, m *matcher) lua.LValue {
	ud := L.NewUserData()
	ud.Value = m
	mt := L.NewTypeMetatable(matcherType)
	if mt.RawGetString("__tostring") == lua.LNil {
		mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
			if m := asMatcher(L.Get(1)); m != nil {
				L.Push(lua.LString("match." + m.desc))
				return 1
			}
			L.Push(lua.LString("matcher"))
			return 1
		}))
	}
	ud.Metatable = mt
	return ud
}

// matches is check for a value or a matcher: a matcher checks, a value
// must be deeply equal.
func matchesValue(want, got lua.LValue) bool {
	if m := asMatcher(want); m != nil {
		return m.check(got)
	}
	return len(deepDiff(want, got, 1)) == 0
}

// luaFind reports whether a Lua pattern finds a match in s.
func luaFind(pattern, s string) (bool, error) {
	ms, err := pm.Find(pattern, []byte(s), 0, 1)
	if err != nil {
		return false, err
	}
	return len(ms) > 0, nil
}

var typeMatchers = map[string]lua.LValueType{
	"nil": lua.LTNil, "string": lua.LTString, "number": lua.LTNumber, "table": lua.LTTable,
	"function": lua.LTFunction, "boolean": lua.LTBool, "userdata": lua.LTUserData, "thread": lua.LTThread,
}

// matcherWords are the words luassert allows around a matcher's name:
// match.is_string(), match.is_not_nil(), match.no.matches(...).
var matcherWords = map[string]bool{"is": true, "are": true, "has": true, "was": true, "does": true, "a": true, "an": true}

// newMatch builds match: match._ and, through __index, every matcher by
// its luassert names, negated by a "not" or "no" among the words.
func newMatch(L *lua.LState) *lua.LTable {
	t := L.CreateTable(0, 2)
	t.RawSetString("_", pushMatcher(L, &matcher{desc: "_", check: func(lua.LValue) bool { return true }}))
	mt := L.CreateTable(0, 1)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		key := strings.ToLower(L.CheckString(2))
		neg := false
		var name []string
		for _, w := range strings.Split(key, "_") {
			switch {
			case w == "not" || w == "no":
				neg = !neg
			case matcherWords[w]:
			case w != "":
				name = append(name, w)
			}
		}
		n := strings.Join(name, "_")
		L.Push(L.NewFunction(func(L *lua.LState) int {
			m, err := makeMatcher(n, spyValues(L, 1))
			if err != "" {
				L.RaiseError("match.%s: %s", key, err)
			}
			if neg {
				inner := m
				m = &matcher{desc: "is_not_" + inner.desc, check: func(v lua.LValue) bool { return !inner.check(v) }}
			}
			L.Push(pushMatcher(L, m))
			return 1
		}))
		return 1
	}))
	t.Metatable = mt
	return t
}

// makeMatcher builds the matcher called name with arguments args.
func makeMatcher(name string, args []lua.LValue) (*matcher, string) {
	arg := func(i int) lua.LValue {
		if i < len(args) {
			return args[i]
		}
		return lua.LNil
	}
	if typ, ok := typeMatchers[name]; ok {
		return &matcher{desc: "is_" + name + "()", check: func(v lua.LValue) bool { return v.Type() == typ }}, ""
	}
	switch name {
	case "_", "any":
		return &matcher{desc: "_", check: func(lua.LValue) bool { return true }}, ""
	case "truthy":
		return &matcher{desc: "is_truthy()", check: lua.LVAsBool}, ""
	case "falsy":
		return &matcher{desc: "is_falsy()", check: func(v lua.LValue) bool { return !lua.LVAsBool(v) }}, ""
	case "true":
		return &matcher{desc: "is_true()", check: func(v lua.LValue) bool { return v == lua.LTrue }}, ""
	case "false":
		return &matcher{desc: "is_false()", check: func(v lua.LValue) bool { return v == lua.LFalse }}, ""
	case "same":
		want := arg(0)
		return &matcher{desc: "is_same(" + brief(want) + ")", check: func(v lua.LValue) bool { return len(deepDiff(want, v, 1)) == 0 }}, ""
	case "equal", "equals":
		want := arg(0)
		return &matcher{desc: "is_equal(" + brief(want) + ")", check: func(v lua.LValue) bool { return rawEqual(want, v) }}, ""
	case "ref":
		want := arg(0)
		return &matcher{desc: "is_ref(" + brief(want) + ")", check: func(v lua.LValue) bool { return want == v }}, ""
	case "type":
		s, _ := arg(0).(lua.LString)
		typ, ok := typeMatchers[string(s)]
		if !ok {
			return nil, "want a type name such as \"string\" or \"table\""
		}
		return &matcher{desc: "is_type(" + string(s) + ")", check: func(v lua.LValue) bool { return v.Type() == typ }}, ""
	case "matches", "match":
		p, ok := arg(0).(lua.LString)
		if !ok {
			return nil, "want a Lua pattern"
		}
		return &matcher{desc: fmt.Sprintf("matches(%q)", string(p)), check: func(v lua.LValue) bool {
			s, ok := v.(lua.LString)
			if !ok {
				return false
			}
			found, err := luaFind(string(p), string(s))
			return err == nil && found
		}}, ""
	case "near":
		want, ok1 := arg(0).(lua.LNumber)
		tol, ok2 := arg(1).(lua.LNumber)
		if !ok1 || !ok2 {
			return nil, "want a number and a tolerance"
		}
		return &matcher{desc: fmt.Sprintf("near(%v, %v)", want, tol), check: func(v lua.LValue) bool {
			n, ok := v.(lua.LNumber)
			return ok && math.Abs(float64(n-want)) <= float64(tol)
		}}, ""
	case "any_of", "all_of", "none_of":
		var parts []string
		for _, a := range args {
			parts = append(parts, brief(a))
		}
		return &matcher{desc: name + "(" + strings.Join(parts, ", ") + ")", check: func(v lua.LValue) bool {
			hits := 0
			for _, a := range args {
				if matchesValue(a, v) {
					hits++
				}
			}
			switch name {
			case "any_of":
				return hits > 0
			case "all_of":
				return hits == len(args)
			}
			return hits == 0
		}}, ""
	}
	return nil, "unknown matcher (matchers: _, is_nil, is_string, is_number, is_table, is_function, is_boolean, is_truthy, is_falsy, is_true, is_false, is_same(v), is_equal(v), is_ref(v), is_type(t), matches(pattern), near(n, tol), any_of, all_of, none_of; is_not_... negates)"
}
