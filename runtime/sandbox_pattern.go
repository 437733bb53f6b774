package runtime

import (
	"errors"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/runtime/internal/lpattern"
)

// The sandbox's string.find, match, gmatch (and its Lua 5.0 name gfind) and
// gsub run on lpattern, a port of Lua 5.1's matcher with a step budget and
// the hook's deadline, instead of gopher-lua's: its matcher recursed once
// per subject byte, could not be stopped, and its gsub rebuilt the whole
// result for every match (a 300 KB gsub took 68 s).

// patternSteps is the fixed part of the step budget of one pattern call.
// A pathological pattern, ("a"):rep(300) against ("a-"):rep(3).."b",
// takes billions of steps (13.5 s and 2.7 GiB in gopher-lua's matcher).
const patternSteps = 20_000_000

// patternStepsPerByte is the part that grows with the subject, so linear
// work over a big input always fits: an ordinary pattern takes a few
// steps per byte.
const patternStepsPerByte = 64

func patternBudget(n int) int { return patternSteps + patternStepsPerByte*n }

// newMatcher prepares a pattern call whose budget fits its subject and
// which stops at the hook's deadline.
func newMatcher(L *lua.LState, src, pat string, anchor bool) *lpattern.Matcher {
	return lpattern.New(src, pat, anchor, patternBudget(len(src)), hookDone(L))
}

// hookDone is the hook's context's done channel, or nil outside a hook.
func hookDone(L *lua.LState) <-chan struct{} {
	if ctx := L.Context(); ctx != nil {
		return ctx.Done()
	}
	return nil
}

// matchAt runs m at s, raising its failures: a malformed pattern as the
// plugin's error, an exhausted budget as kind limit.
func matchAt(L *lua.LState, name string, m *lpattern.Matcher, s int) int {
	e, err := m.MatchAt(s)
	if err != nil {
		raisePattern(L, name, err)
	}
	return e
}

func raisePattern(L *lua.LState, name string, err error) {
	var pe *lpattern.Error
	if errors.As(err, &pe) && pe.Kind == lpattern.Budget {
		raiseLimit(L, "string.%s: %v", name, err)
	}
	L.RaiseError("string.%s: %v", name, err)
}

func pushCapture(L *lua.LState, name string, m *lpattern.Matcher, i, s, e int) {
	c, err := m.Capture(i, s, e)
	if err != nil {
		raisePattern(L, name, err)
	}
	if c.IsPos {
		L.Push(lua.LNumber(c.Pos))
	} else {
		L.Push(lua.LString(c.Str))
	}
}

// pushCaptures pushes the captures of the match [s, e), or the whole
// match when the pattern has none and whole is set.
func pushCaptures(L *lua.LState, name string, m *lpattern.Matcher, s, e int, whole bool) int {
	n := m.NumCaptures(whole)
	for i := 0; i < n; i++ {
		pushCapture(L, name, m, i, s, e)
	}
	return n
}

// startOffset is Lua 5.1's init argument as a 0-based offset in [0, n].
func startOffset(init, n int) int {
	return min(max(posRelative(init, n)-1, 0), n)
}

// sbFind is string.find (find) or string.match (!find), Lua 5.1's
// str_find_aux.
func sbFind(find bool) lua.LGFunction {
	name := "match"
	if find {
		name = "find"
	}
	return func(L *lua.LState) int {
		s := L.CheckString(1)
		p := L.CheckString(2)
		init := startOffset(L.OptInt(3, 1), len(s))
		if find && (lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(p, lpattern.Specials)) {
			// a plain search
			if i := strings.Index(s[init:], p); i >= 0 {
				L.Push(lua.LNumber(init + i + 1))
				L.Push(lua.LNumber(init + i + len(p)))
				return 2
			}
			L.Push(lua.LNil)
			return 1
		}
		m := newMatcher(L, s, p, true)
		for s1 := init; ; s1++ {
			if e := matchAt(L, name, m, s1); e >= 0 {
				if find {
					L.Push(lua.LNumber(s1 + 1))
					L.Push(lua.LNumber(e))
					return pushCaptures(L, name, m, 0, 0, false) + 2
				}
				return pushCaptures(L, name, m, s1, e, true)
			}
			if s1 >= len(s) || m.Anchored() {
				break
			}
		}
		L.Push(lua.LNil)
		return 1
	}
}

// sbGmatch is string.gmatch: an iterator over the matches. Each call of
// the iterator is one Go call with its own budget; between calls the
// hook's deadline applies as to any Lua code.
func sbGmatch(L *lua.LState) int {
	s := L.CheckString(1)
	p := L.CheckString(2)
	pos := 0
	m := newMatcher(L, s, p, false)
	L.Push(L.NewFunction(func(L *lua.LState) int {
		// The iterator may outlive the call that made it (a global kept
		// for a later task): the budget and deadline are this call's.
		m.Reset(patternBudget(len(s)), hookDone(L))
		for src := pos; src <= len(s); src++ {
			if e := matchAt(L, "gmatch", m, src); e >= 0 {
				pos = e
				if e == src { // an empty match: move on at least one byte
					pos++
				}
				return pushCaptures(L, "gmatch", m, src, e, true)
			}
		}
		pos = len(s) + 1 // exhausted: later calls return at once
		return 0
	}))
	return 1
}

// sbGsub is string.gsub, Lua 5.1's str_gsub: linear in the subject, and
// never building a result over the string cap. With a string
// replacement, a first pass sizes the result without allocating and
// fails with kind limit before anything is built; the second builds it in
// one allocation. A function or table replacement cannot be run twice, so
// its result is checked before every append instead.
func sbGsub(maxSize int) lua.LGFunction {
	return func(L *lua.LState) int {
		src := L.CheckString(1)
		p := L.CheckString(2)
		repl := L.Get(3)
		switch repl.(type) {
		case lua.LString, lua.LNumber, *lua.LTable, *lua.LFunction:
		default:
			L.ArgError(3, "string/function/table expected, got "+repl.Type().String())
		}
		maxN := L.OptInt(4, len(src)+1)
		tooBig := func() {
			raiseLimit(L, "string.gsub: the result exceeds the %d-byte string limit", maxSize)
		}
		var b strings.Builder
		switch repl.(type) {
		case lua.LString, lua.LNumber:
			size := 0
			gsubPass(L, newMatcher(L, src, p, true), repl, src, maxN, func(s string) {
				if size += len(s); size > maxSize {
					tooBig()
				}
			})
			b.Grow(size)
		}
		n := gsubPass(L, newMatcher(L, src, p, true), repl, src, maxN, func(s string) {
			if b.Len()+len(s) > maxSize {
				tooBig()
			}
			b.WriteString(s)
		})
		L.Push(lua.LString(b.String()))
		L.Push(lua.LNumber(n))
		return 2
	}
}

// gsubPass runs gsub's loop, handing every piece of the result to add,
// and returns the number of matches.
func gsubPass(L *lua.LState, m *lpattern.Matcher, repl lua.LValue, src string, maxN int, add func(string)) int {
	n, s := 0, 0
	for n < maxN {
		e := matchAt(L, "gsub", m, s)
		if e >= 0 {
			n++
			gsubValue(L, m, repl, src, s, e, add)
		}
		switch {
		case e > s: // a non-empty match: skip it
			s = e
		case s < len(src):
			add(src[s : s+1])
			s++
		default:
			s = len(src) + 1
		}
		if s > len(src) || m.Anchored() {
			break
		}
	}
	if s < len(src) {
		add(src[s:])
	}
	return n
}

// gsubValue appends the replacement of the match [s, e): Lua 5.1's
// add_value and add_s.
func gsubValue(L *lua.LState, m *lpattern.Matcher, repl lua.LValue, src string, s, e int, add func(string)) {
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		news := lua.LVAsString(r)
		if strings.IndexByte(news, '%') < 0 {
			add(news)
			return
		}
		for i := 0; i < len(news); i++ {
			c := news[i]
			if c != '%' {
				add(news[i : i+1])
				continue
			}
			i++
			switch {
			case i == len(news):
				L.RaiseError("string.gsub: invalid use of '%%' in replacement string (write %%%% for a '%%')")
			case news[i] == '0':
				add(src[s:e])
			case news[i] >= '1' && news[i] <= '9':
				c, err := m.Capture(int(news[i]-'1'), s, e)
				if err != nil {
					raisePattern(L, "gsub", err)
				}
				if c.IsPos {
					add(lua.LNumber(c.Pos).String())
				} else {
					add(c.Str)
				}
			default:
				add(news[i : i+1])
			}
		}
		return
	case *lua.LFunction:
		L.Push(r)
		n := pushCaptures(L, "gsub", m, s, e, true)
		L.Call(n, 1)
		v = L.Get(-1)
		L.Pop(1)
	case *lua.LTable:
		pushCapture(L, "gsub", m, 0, s, e)
		key := L.Get(-1)
		L.Pop(1)
		v = L.GetTable(r, key)
	}
	switch x := v.(type) {
	case *lua.LNilType:
		add(src[s:e]) // keep the original text
	case lua.LBool:
		if !bool(x) {
			add(src[s:e])
			return
		}
		L.RaiseError("string.gsub: invalid replacement value (a boolean)")
	case lua.LString, lua.LNumber:
		add(lua.LVAsString(x))
	default:
		L.RaiseError("string.gsub: invalid replacement value (a %s)", v.Type().String())
	}
}
