package plugtest

import (
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Spies, stubs, mocks and matchers as luassert has them (busted's
// spy.on, stub(obj, "method"), mock(tbl), match._), on the test's VM,
// which the plugin's hooks share: a spy on LinodeProvider.delete or on
// a function of a plugin module is the function the hook calls.
//
// A spy puts a Go function in place of the original (the runtime calls a
// hook only if it is a function) and hands the test a spy object: a
// table with calls, returnvals and luassert's methods, callable like the
// function. assert.spy(x) takes either.

// spyCall is one call a spy saw.
type spyCall struct {
	args, rets []lua.LValue
}

// onCall is a stub's answer to calls with given arguments.
type onCall struct {
	args    []lua.LValue
	returns []lua.LValue
	invokes lua.LValue
	set     bool
}

// spyObj is one spy or stub.
type spyObj struct {
	obj      *lua.LTable    // the object the test holds
	fn       *lua.LFunction // what was put in the table
	callback lua.LValue     // the original function (spy)
	stub     bool
	target   *lua.LTable
	key      lua.LValue
	original lua.LValue
	reverted bool
	calls    []spyCall
	// What a stub does when no on_call_with matches.
	byDefault onCall
	onCalls   []*onCall
	name      string // for messages: "LinodeProvider.delete"
}

// spyRegistry finds spies by their function or object and reverts them
// by scope: a test's when it ends, a block's (made in its setup) when
// the block ends, the file's when the file ends.
type spyRegistry struct {
	byFn  map[*lua.LFunction]*spyObj
	byObj map[*lua.LTable]*spyObj
	scope map[any][]*spyObj
	cur   any
}

func newSpyRegistry() *spyRegistry {
	return &spyRegistry{byFn: map[*lua.LFunction]*spyObj{}, byObj: map[*lua.LTable]*spyObj{}, scope: map[any][]*spyObj{}}
}

// enter makes scope the one new spies belong to.
func (r *spyRegistry) enter(scope any) { r.cur = scope }

func (r *spyRegistry) add(s *spyObj) {
	r.byFn[s.fn] = s
	r.byObj[s.obj] = s
	r.scope[r.cur] = append(r.scope[r.cur], s)
}

// revertScope puts back what the scope's spies and stubs replaced, the
// last made first.
func (r *spyRegistry) revertScope(scope any) {
	list := r.scope[scope]
	for i := len(list) - 1; i >= 0; i-- {
		list[i].revert()
	}
	delete(r.scope, scope)
}

// lookup finds the spy behind a value: its object or its function.
func (r *spyRegistry) lookup(v lua.LValue) *spyObj {
	switch x := v.(type) {
	case *lua.LTable:
		return r.byObj[x]
	case *lua.LFunction:
		return r.byFn[x]
	}
	return nil
}

func (s *spyObj) revert() {
	if s.reverted {
		return
	}
	s.reverted = true
	if s.target != nil && s.target.RawGet(s.key) == s.fn {
		s.target.RawSet(s.key, s.original)
	}
}

// deepCopy copies a value for a spy's record (luassert keeps a copy, so
// a table the code changes later shows as it was at the call).
func deepCopy(L *lua.LState, v lua.LValue, seen map[*lua.LTable]*lua.LTable, budget *int) lua.LValue {
	t, ok := v.(*lua.LTable)
	if !ok {
		return v
	}
	if c, ok := seen[t]; ok {
		return c
	}
	if *budget <= 0 {
		return t
	}
	*budget--
	c := L.CreateTable(0, 0)
	seen[t] = c
	t.ForEach(func(k, val lua.LValue) { c.RawSet(k, deepCopy(L, val, seen, budget)) })
	c.Metatable = t.Metatable
	return c
}

func listTable(L *lua.LState, vals []lua.LValue) *lua.LTable {
	t := L.CreateTable(len(vals), 1)
	for i, v := range vals {
		t.RawSetInt(i+1, v)
	}
	t.RawSetString("n", lua.LNumber(len(vals)))
	return t
}

// recordCall keeps one call, before it runs (a call that raises counts),
// in Go and in the spy object's calls list: calls[i] holds a copy of the
// arguments (also as .vals) and .refs the values themselves.
func (s *spyObj) recordCall(L *lua.LState, args []lua.LValue) int {
	budget := 10000
	seen := map[*lua.LTable]*lua.LTable{}
	copied := make([]lua.LValue, len(args))
	for i, a := range args {
		copied[i] = deepCopy(L, a, seen, &budget)
	}
	s.calls = append(s.calls, spyCall{args: copied})
	call := listTable(L, copied)
	call.RawSetString("vals", listTable(L, copied))
	call.RawSetString("refs", listTable(L, args))
	if calls, ok := s.obj.RawGetString("calls").(*lua.LTable); ok {
		calls.Append(call)
	}
	return len(s.calls) - 1
}

// recordReturn keeps what call i returned (returnvals[i], .vals too).
func (s *spyObj) recordReturn(L *lua.LState, i int, rets []lua.LValue) {
	if i < len(s.calls) {
		s.calls[i].rets = rets
	}
	ret := listTable(L, rets)
	ret.RawSetString("vals", listTable(L, rets))
	if rv, ok := s.obj.RawGetString("returnvals").(*lua.LTable); ok {
		rv.Append(ret)
	}
}

// invoke is the function a spy puts in place of the original.
func (f *fileRun) invoke(s *spyObj) lua.LGFunction {
	return func(L *lua.LState) int {
		f.gate.enter(L)
		n := L.GetTop()
		args := make([]lua.LValue, n)
		for i := range args {
			args[i] = L.Get(i + 1)
		}
		var run lua.LValue = s.callback
		var canned []lua.LValue
		if s.stub {
			run = nil
			answer := &s.byDefault
			for _, oc := range s.onCalls {
				if argsMatch(oc.args, args) {
					answer = oc
					break
				}
			}
			if answer.invokes != nil {
				run = answer.invokes
			} else {
				canned = answer.returns
			}
		}
		idx := s.recordCall(L, args)
		var rets []lua.LValue
		if run != nil && run != lua.LNil {
			top := L.GetTop()
			L.Push(run)
			for _, a := range args {
				L.Push(a)
			}
			L.Call(n, lua.MultRet)
			f.gate.enter(L)
			for i := top + 1; i <= L.GetTop(); i++ {
				rets = append(rets, L.Get(i))
			}
			L.SetTop(top)
		} else {
			rets = canned
		}
		s.recordReturn(L, idx, rets)
		for _, r := range rets {
			L.Push(r)
		}
		return len(rets)
	}
}

// newSpy makes a spy on callback, or a stub when stub is set, put in
// target[key] when target is not nil.
func (f *fileRun) newSpy(L *lua.LState, target *lua.LTable, key lua.LValue, callback lua.LValue, stub bool) *spyObj {
	s := &spyObj{callback: callback, stub: stub, target: target, key: key}
	if target != nil {
		s.original = target.RawGet(key)
		s.name = fmt.Sprintf("%s", key)
		if k, ok := key.(lua.LString); ok {
			s.name = string(k)
		}
	}
	s.fn = L.NewFunction(f.invoke(s))
	s.obj = L.CreateTable(0, 16)
	s.obj.RawSetString("calls", L.CreateTable(0, 0))
	s.obj.RawSetString("returnvals", L.CreateTable(0, 0))
	s.obj.RawSetString("callback", callback)
	if target != nil {
		s.obj.RawSetString("target_table", target)
		s.obj.RawSetString("target_key", key)
	}
	// Methods work with a colon (s:revert(), as luassert's spy) and with a
	// dot (s.returns(1), as luassert's stub): from is the first argument.
	from := func(L *lua.LState) int {
		if t, ok := L.Get(1).(*lua.LTable); ok && t == s.obj {
			return 2
		}
		return 1
	}
	self := func(L *lua.LState) *spyObj { return s }
	methods := map[string]lua.LGFunction{
		"revert": func(L *lua.LState) int {
			self(L).revert()
			L.Push(s.original)
			return 1
		},
		"clear": func(L *lua.LState) int {
			self(L)
			s.calls = nil
			s.obj.RawSetString("calls", L.CreateTable(0, 0))
			s.obj.RawSetString("returnvals", L.CreateTable(0, 0))
			L.Push(s.obj)
			return 1
		},
		// s:called(n): whether it was called (n times), and how often.
		"called": func(L *lua.LState) int {
			self(L)
			if n, ok := L.Get(from(L)).(lua.LNumber); ok {
				L.Push(lua.LBool(len(s.calls) == int(n)))
			} else {
				L.Push(lua.LBool(len(s.calls) > 0))
			}
			L.Push(lua.LNumber(len(s.calls)))
			return 2
		},
		// s:called_with(...): whether a call had these arguments.
		"called_with": func(L *lua.LState) int {
			self(L)
			L.Push(lua.LBool(s.calledWith(spyArgs(L, from(L))) >= 0))
			return 1
		},
		"returned_with": func(L *lua.LState) int {
			self(L)
			L.Push(lua.LBool(s.returnedWith(spyArgs(L, from(L))) >= 0))
			return 1
		},
		// s:returns(...): what the stub returns.
		"returns": func(L *lua.LState) int {
			self(L)
			s.stubOnly(L, "returns")
			s.byDefault = onCall{returns: spyValues(L, from(L)), set: true}
			L.Push(s.obj)
			return 1
		},
		// s:invokes(fn): the stub calls fn with the arguments instead.
		"invokes": func(L *lua.LState) int {
			self(L)
			s.stubOnly(L, "invokes")
			s.byDefault = onCall{invokes: L.CheckFunction(from(L)), set: true}
			L.Push(s.obj)
			return 1
		},
		// s:on_call_with(...):returns(...) / :invokes(fn).
		"on_call_with": func(L *lua.LState) int {
			self(L)
			s.stubOnly(L, "on_call_with")
			oc := &onCall{args: spyArgs(L, from(L))}
			s.onCalls = append(s.onCalls, oc)
			L.Push(f.answerObject(L, s, oc))
			return 1
		},
	}
	for name, fn := range methods {
		s.obj.RawSetString(name, L.NewFunction(fn))
	}
	if stub {
		s.obj.RawSetString("by_default", f.answerObject(L, s, &s.byDefault))
	}
	mt := L.CreateTable(0, 2)
	mt.RawSetString("__call", L.NewFunction(func(L *lua.LState) int {
		// s(...) calls the spy, as the function it replaced.
		n := L.GetTop() - 1
		L.Push(s.fn)
		for i := 2; i <= n+1; i++ {
			L.Push(L.Get(i))
		}
		L.Call(n, lua.MultRet)
		return L.GetTop() - n - 1
	}))
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		kind := "spy"
		if s.stub {
			kind = "stub"
		}
		L.Push(lua.LString(fmt.Sprintf("%s (%s, %d calls)", kind, s.name, len(s.calls))))
		return 1
	}))
	s.obj.Metatable = mt
	if target != nil {
		target.RawSet(key, s.fn)
	}
	f.spies.add(s)
	return s
}

func (s *spyObj) stubOnly(L *lua.LState, what string) {
	if !s.stub {
		L.RaiseError("%s is for stubs: make one with stub(obj, %q)", what, s.name)
	}
}

// answerObject is the table on_call_with and by_default return: its
// returns and invokes set what the stub answers.
func (f *fileRun) answerObject(L *lua.LState, s *spyObj, oc *onCall) *lua.LTable {
	t := L.CreateTable(0, 2)
	t.RawSetString("returns", L.NewFunction(func(L *lua.LState) int {
		start := 1
		if L.Get(1) == t {
			start = 2
		}
		oc.returns, oc.invokes, oc.set = spyValues(L, start), nil, true
		L.Push(s.obj)
		return 1
	}))
	t.RawSetString("invokes", L.NewFunction(func(L *lua.LState) int {
		start := 1
		if L.Get(1) == t {
			start = 2
		}
		oc.invokes, oc.returns, oc.set = L.CheckFunction(start), nil, true
		L.Push(s.obj)
		return 1
	}))
	return t
}

func spyValues(L *lua.LState, from int) []lua.LValue {
	var out []lua.LValue
	for i := from; i <= L.GetTop(); i++ {
		out = append(out, L.Get(i))
	}
	return out
}

func spyArgs(L *lua.LState, from int) []lua.LValue { return spyValues(L, from) }

// argsMatch compares expected arguments (values, matchers) with a call's.
func argsMatch(expected, got []lua.LValue) bool {
	if len(expected) != len(got) {
		// Trailing nils do not count: f(1) and f(1, nil) are the same
		// call to Lua code.
		e, g := trimNils(expected), trimNils(got)
		if len(e) != len(g) {
			return false
		}
		expected, got = e, g
	}
	for i := range expected {
		if len(deepDiff(expected[i], got[i], 1)) > 0 {
			return false
		}
	}
	return true
}

func trimNils(v []lua.LValue) []lua.LValue {
	for len(v) > 0 && v[len(v)-1] == lua.LNil {
		v = v[:len(v)-1]
	}
	return v
}

// calledWith is the index of the first call with these arguments, or -1.
func (s *spyObj) calledWith(args []lua.LValue) int {
	for i, c := range s.calls {
		if argsMatch(args, c.args) {
			return i
		}
	}
	return -1
}

func (s *spyObj) returnedWith(rets []lua.LValue) int {
	for i, c := range s.calls {
		if argsMatch(rets, c.rets) {
			return i
		}
	}
	return -1
}

// describeCalls lists a spy's calls for a failure message.
func (s *spyObj) describeCalls(rets bool) string {
	if len(s.calls) == 0 {
		return "it was never called"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "its %d call(s):", len(s.calls))
	for i, c := range s.calls {
		if i == 10 {
			fmt.Fprintf(&b, "\n  ... %d more", len(s.calls)-10)
			break
		}
		vals := c.args
		if rets {
			vals = c.rets
		}
		fmt.Fprintf(&b, "\n  (%s)", showArgs(vals))
	}
	return b.String()
}

func showArgs(vals []lua.LValue) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = brief(v)
	}
	return strings.Join(parts, ", ")
}

// installSpies sets spy, stub, mock and match in the test's environment.
func (f *fileRun) installSpies(L *lua.LState, env *lua.LTable) {
	spy := L.CreateTable(0, 4)
	// spy.new(fn): a spy on a function, not put anywhere.
	spy.RawSetString("new", L.NewFunction(func(L *lua.LState) int {
		cb := L.CheckAny(1)
		if !callable(cb) {
			L.ArgError(1, fmt.Sprintf("spy.new: cannot spy on a %s: give a function", cb.Type()))
		}
		L.Push(f.newSpy(L, nil, lua.LNil, cb, false).obj)
		return 1
	}))
	// spy.on(tbl, "name"): replaces tbl.name with a spy that calls it.
	spy.RawSetString("on", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		key := L.CheckAny(2)
		cur := L.GetTable(t, key)
		if !callable(cur) {
			L.ArgError(2, fmt.Sprintf("spy.on: %s is a %s, not a function (stub(tbl, %s) makes one)", brief(key), cur.Type(), brief(key)))
		}
		s := f.newSpy(L, t, key, cur, false)
		L.Push(s.obj)
		return 1
	}))
	spy.RawSetString("is_spy", L.NewFunction(func(L *lua.LState) int {
		s := f.spies.lookup(L.Get(1))
		L.Push(lua.LBool(s != nil && !s.stub))
		return 1
	}))
	spyMeta := L.CreateTable(0, 1)
	spyMeta.RawSetString("__call", L.NewFunction(func(L *lua.LState) int {
		// spy(fn) is spy.new(fn).
		cb := L.CheckAny(2)
		if !callable(cb) {
			L.ArgError(1, fmt.Sprintf("spy: cannot spy on a %s: give a function", cb.Type()))
		}
		L.Push(f.newSpy(L, nil, lua.LNil, cb, false).obj)
		return 1
	}))
	spy.Metatable = spyMeta
	env.RawSetString("spy", spy)

	// stub(tbl, "name", ...): replaces tbl.name with a function that
	// returns ... (nothing by default) and records its calls.
	newStub := func(L *lua.LState, base int) int {
		t := L.CheckTable(base)
		key := L.CheckAny(base + 1)
		cur := L.GetTable(t, key)
		if cur != lua.LNil && !callable(cur) {
			L.ArgError(base+1, fmt.Sprintf("stub: %s is a %s: a stub replaces a function or nothing", brief(key), cur.Type()))
		}
		s := f.newSpy(L, t, key, cur, true)
		s.byDefault = onCall{returns: spyValues(L, base+2), set: true}
		L.Push(s.obj)
		return 1
	}
	stub := L.CreateTable(0, 2)
	stub.RawSetString("new", L.NewFunction(func(L *lua.LState) int { return newStub(L, 1) }))
	stub.RawSetString("is_stub", L.NewFunction(func(L *lua.LState) int {
		s := f.spies.lookup(L.Get(1))
		L.Push(lua.LBool(s != nil && s.stub))
		return 1
	}))
	stubMeta := L.CreateTable(0, 1)
	stubMeta.RawSetString("__call", L.NewFunction(func(L *lua.LState) int { return newStub(L, 2) }))
	stub.Metatable = stubMeta
	env.RawSetString("stub", stub)

	// mock(tbl, dostub): every function in tbl (and its tables) becomes a
	// spy, or a stub with dostub; mock.revert(tbl) puts them back.
	var mockT func(L *lua.LState, t *lua.LTable, dostub bool, seen map[*lua.LTable]bool)
	mockT = func(L *lua.LState, t *lua.LTable, dostub bool, seen map[*lua.LTable]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		var keys []lua.LValue
		t.ForEach(func(k, _ lua.LValue) { keys = append(keys, k) })
		for _, k := range keys {
			switch v := t.RawGet(k).(type) {
			case *lua.LFunction:
				if f.spies.byFn[v] == nil {
					f.newSpy(L, t, k, v, dostub)
				}
			case *lua.LTable:
				mockT(L, v, dostub, seen)
			}
		}
	}
	mock := L.CreateTable(0, 1)
	mock.RawSetString("revert", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		seen := map[*lua.LTable]bool{}
		var walk func(t *lua.LTable)
		walk = func(t *lua.LTable) {
			if seen[t] {
				return
			}
			seen[t] = true
			var vals []lua.LValue
			t.ForEach(func(_, v lua.LValue) { vals = append(vals, v) })
			for _, v := range vals {
				if s := f.spies.lookup(v); s != nil && s.target == t {
					s.revert()
				} else if sub, ok := v.(*lua.LTable); ok {
					walk(sub)
				}
			}
		}
		walk(t)
		L.Push(t)
		return 1
	}))
	mockMeta := L.CreateTable(0, 1)
	mockMeta.RawSetString("__call", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(2)
		mockT(L, t, lua.LVAsBool(L.Get(3)), map[*lua.LTable]bool{})
		L.Push(t)
		return 1
	}))
	mock.Metatable = mockMeta
	env.RawSetString("mock", mock)
	match := newMatch(L)
	env.RawSetString("match", match)
	spy.RawSetString("_", match.RawGetString("_"))
}

func callable(v lua.LValue) bool {
	switch x := v.(type) {
	case *lua.LFunction:
		return true
	case *lua.LTable:
		if x.Metatable != nil {
			if mt, ok := x.Metatable.(*lua.LTable); ok && mt.RawGetString("__call") != lua.LNil {
				return true
			}
		}
	}
	return false
}
