package plugtest

import (
	"fmt"

	"sort"
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

// The assert object works as luassert's: a key is read as words split at
// "_" and ".", so assert.is_not.equal, assert.are_not.same,
// assert.has_no.errors, assert.spy(s).was.called_with(...) and
// assert.equals all work. Words are modifiers (is, are, was, has, does:
// no effect; not, no: negate; spy, stub: take the spy to check; message:
// take the failure message) and one assertion, the last one named.

// outcome is what an assertion found.
type outcome struct {
	pass bool
	// pos is the failure when the assertion should hold, neg when it
	// should not (a negated assertion).
	pos, neg, diff string
	// rets are returned by the assertion (errors returns the error).
	rets []lua.LValue
}

// assertion checks args; arity is how many arguments it takes (an
// argument after them is the failure message, as in busted; -1: all are
// arguments).
type assertion struct {
	arity int
	run   func(L *lua.LState, st *assertState, args []lua.LValue) outcome
}

// assertState is one chain of words being read.
type assertState struct {
	words   []string
	payload lua.LValue // the spy, for spy assertions
	hasPay  bool
	message string
	run     *fileRun
}

var modifierWords = map[string]bool{"is": true, "are": true, "was": true, "has": true, "does": true, "not": true, "no": true,
	"spy": true, "stub": true, "message": true}

var assertions map[string]assertion

// label names the spy in messages.
func (s *spyObj) label() string {
	kind := "the spy"
	if s.stub {
		kind = "the stub"
	}
	if s.name != "" {
		return fmt.Sprintf("%s on %s", kind, s.name)
	}
	return kind
}

// splitKeys splits the chain's words into modifiers and assertions,
// longest names first ("has_error" before "has" and "error").
func splitKeys(words []string) ([]string, error) {
	var out []string
	for i := 0; i < len(words); {
		found := 0
		for j := len(words); j > i; j-- {
			k := strings.Join(words[i:j], "_")
			if _, ok := assertions[k]; ok || modifierWords[k] {
				found = j
				break
			}
		}
		if found == 0 {
			return nil, fmt.Errorf("unknown word %q", words[i])
		}
		out = append(out, strings.Join(words[i:found], "_"))
		i = found
	}
	return out, nil
}

// spy is the spy a spy assertion checks.
func (st *assertState) spy(L *lua.LState) *spyObj {
	if !st.hasPay {
		L.RaiseError("spy assertions read assert.spy(s).was.called(...): give the spy first")
	}
	if s := st.run.spies.lookup(st.payload); s != nil {
		return s
	}
	L.RaiseError("assert.spy: %s is not a spy or stub (make one with spy.on(tbl, \"name\"), stub(tbl, \"name\") or spy.new(fn))", brief(st.payload))
	return nil
}

func assertionNames() []string {
	var out []string
	for k := range assertions {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
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
