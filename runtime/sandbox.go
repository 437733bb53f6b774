package runtime

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
)

// Limits bound what one plugin VM may consume. Zero fields take defaults.
type Limits struct {
	// MaxStringSize caps strings built by the .. operator, string.rep,
	// string.format, string.gsub, table.concat and os.date (default
	// 16 MiB). Each checks before it allocates.
	MaxStringSize int
	// MaxUnpack caps the values one call may return: unpack and
	// string.byte (default 65536).
	MaxUnpack int
	// MaxCoroutines caps coroutines created per task (default 256); each
	// is a whole Lua state of 20-100 KiB.
	MaxCoroutines int
	// CallStackSize is the Lua call depth (default 512).
	CallStackSize int
	// RegistryMaxSize caps the Lua data stack in slots (default 1M, 16 MiB).
	RegistryMaxSize int
	// MaxTaskConns caps the connections one task holds for itself at
	// once (ssh.connect{reuse=false}; default 16), MaxTaskDescriptors
	// every descriptor it holds across calls, connections included
	// (default 32). Past them a binding fails with kind "limit".
	MaxTaskConns, MaxTaskDescriptors int
}

// DefaultLimits are the limits used when Options.Limits is zero.
var DefaultLimits = Limits{
	MaxStringSize:   16 << 20,
	MaxUnpack:       1 << 16,
	MaxCoroutines:   256,
	CallStackSize:   512,
	RegistryMaxSize: 1 << 20,

	MaxTaskConns:       bindings.DefaultTaskLimits.Conns,
	MaxTaskDescriptors: bindings.DefaultTaskLimits.Descriptors,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxStringSize > 0 {
		d.MaxStringSize = l.MaxStringSize
	}
	if l.MaxUnpack > 0 {
		d.MaxUnpack = l.MaxUnpack
	}
	if l.MaxCoroutines > 0 {
		d.MaxCoroutines = l.MaxCoroutines
	}
	if l.CallStackSize > 0 {
		d.CallStackSize = l.CallStackSize
	}
	if l.RegistryMaxSize > 0 {
		d.RegistryMaxSize = l.RegistryMaxSize
	}
	if l.MaxTaskConns > 0 {
		d.MaxTaskConns = l.MaxTaskConns
	}
	if l.MaxTaskDescriptors > 0 {
		d.MaxTaskDescriptors = l.MaxTaskDescriptors
	}
	return d
}

// maxArrayIndex caps the array part of every Lua table. gopher-lua fills
// the gap up to a new index with nils, so t[6e7]=1 would allocate 1 GiB;
// indexes past the cap go to the hash part instead (same semantics).
const maxArrayIndex = 1 << 20

var setArrayCap sync.Once

// removedGlobals are base functions a plugin must not reach: code loading
// (which runs with the real globals), environment swapping, process-wide GC,
// and gopher-lua's debugging helpers.
var removedGlobals = []string{
	"dofile", "loadfile", "load", "loadstring", "module", "require",
	"getfenv", "setfenv", "collectgarbage", "newproxy", "_printregs",
	"print", "_GOPHER_LUA_VERSION",
}

// newSandboxState builds a Lua state with only the allow-listed libraries,
// wrapped builtins and a locked string metatable. The caller adds require,
// log and print, which need the VM.
func newSandboxState(lim Limits, co *coroutines) *lua.LState {
	setArrayCap.Do(func() { lua.MaxArrayIndex = maxArrayIndex })
	L := lua.NewState(lua.Options{
		SkipOpenLibs:        true,
		CallStackSize:       lim.CallStackSize,
		RegistrySize:        1024,
		RegistryMaxSize:     lim.RegistryMaxSize,
		RegistryGrowStep:    1024,
		MinimizeStackMemory: true,
		MaxConcatSize:       lim.MaxStringSize,
		ConcatLimitError: func(L *lua.LState, size, limit int) {
			raiseLimit(L, "string concatenation (..): a result of %d bytes exceeds the %d-byte string limit", size, limit)
		},
	})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
		{lua.CoroutineLibName, lua.OpenCoroutine},
		{lua.OsLibName, lua.OpenOs},
		{lua.DebugLibName, lua.OpenDebug},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	for _, name := range removedGlobals {
		g.RawSetString(name, lua.LNil)
	}
	// os keeps only the clock; debug only traceback.
	osT := L.GetGlobal("os").(*lua.LTable)
	safeOs := L.CreateTable(0, 3)
	for _, f := range []string{"time", "clock"} {
		safeOs.RawSetString(f, osT.RawGetString(f))
	}
	safeOs.RawSetString("date", L.NewFunction(sbOsDate(osT.RawGetString("date").(*lua.LFunction), lim.MaxStringSize)))
	g.RawSetString("os", safeOs)
	dbg := L.GetGlobal("debug").(*lua.LTable)
	safeDbg := L.CreateTable(0, 1)
	safeDbg.RawSetString("traceback", dbg.RawGetString("traceback"))
	g.RawSetString("debug", safeDbg)
	// package is created by OpenBase's require support; nothing in it is
	// safe (loaders, path, loadlib).
	g.RawSetString("package", lua.LNil)

	g.RawSetString("setmetatable", L.NewFunction(sbSetMetatable))
	materializing(L, g)
	g.RawSetString("unpack", L.NewFunction(sbUnpack(lim.MaxUnpack)))

	str := L.GetGlobal("string").(*lua.LTable)
	str.RawSetString("rep", L.NewFunction(sbStringRep(lim.MaxStringSize)))
	str.RawSetString("byte", L.NewFunction(sbStringByte(lim.MaxUnpack)))
	str.RawSetString("format", L.NewFunction(sbStringFormat(str.RawGetString("format").(*lua.LFunction), lim.MaxStringSize)))
	str.RawSetString("dump", lua.LNil)
	// Patterns run on lpattern (sandbox_pattern.go), never on gopher-lua's
	// matcher; gfind is Lua 5.0's name for gmatch.
	str.RawSetString("find", L.NewFunction(sbFind(true)))
	str.RawSetString("match", L.NewFunction(sbFind(false)))
	str.RawSetString("gmatch", L.NewFunction(sbGmatch))
	str.RawSetString("gfind", str.RawGetString("gmatch"))
	str.RawSetString("gsub", L.NewFunction(sbGsub(lim.MaxStringSize)))
	tbl := L.GetGlobal("table").(*lua.LTable)
	tbl.RawSetString("concat", L.NewFunction(sbTableConcat(lim.MaxStringSize)))
	tbl.RawSetString("sort", L.NewFunction(sbTableSort))

	coLib := L.GetGlobal("coroutine").(*lua.LTable)
	for _, name := range []string{"create", "wrap"} {
		coLib.RawSetString(name, L.NewFunction(sbCoroutine(coLib.RawGetString(name).(*lua.LFunction), name, lim.MaxCoroutines, co)))
	}

	// Lock the string metatable: getmetatable("") answers "locked" instead
	// of handing out the string library, and setmetatable refuses strings.
	smt := L.CreateTable(0, 2)
	smt.RawSetString("__index", str)
	smt.RawSetString("__metatable", lua.LString("locked"))
	L.SetMetatable(lua.LString(""), smt)
	return L
}

// sbSetMetatable is Lua 5.1's setmetatable: tables only (gopher-lua also
// accepts strings, numbers and functions, replacing the VM-wide metatable
// of the type), and protected metatables stay protected.
func sbSetMetatable(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		L.ArgError(1, fmt.Sprintf("table expected, got %s (setmetatable accepts tables only in Loom's sandbox)", L.Get(1).Type()))
	}
	materialize(L, t)
	mt := L.Get(2)
	if mt != lua.LNil && mt.Type() != lua.LTTable {
		L.ArgError(2, "nil or table expected")
	}
	if cur, ok := t.Metatable.(*lua.LTable); ok && cur.RawGetString("__metatable") != lua.LNil {
		L.RaiseError("cannot change a protected metatable")
	}
	L.SetMetatable(t, mt)
	L.Push(t)
	return 1
}

// materializing wraps the base functions that look at a table without
// indexing it (pairs, next, rawget, getmetatable) so that they first
// decode its lazy keys (luaval.SetLazy: a task's config.nodes): plugins
// cannot tell a lazy table from a decoded one.
func materializing(L *lua.LState, g *lua.LTable) {
	next := g.RawGetString("next").(*lua.LFunction)
	for _, name := range []string{"next", "rawget", "getmetatable"} {
		orig := g.RawGetString(name).(*lua.LFunction).GFunction
		g.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			if t, ok := L.Get(1).(*lua.LTable); ok {
				materialize(L, t)
			}
			return orig(L)
		}))
	}
	// pairs returns the original next (as the base pairs does).
	g.RawSetString("pairs", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		materialize(L, t)
		L.Push(next)
		L.Push(t)
		L.Push(lua.LNil)
		return 3
	}))
}

func materialize(L *lua.LState, t *lua.LTable) {
	if err := luaval.Materialize(t); err != nil {
		L.RaiseError("%v", err)
	}
}

func sbUnpack(maxN int) lua.LGFunction {
	return func(L *lua.LState) int {
		t := L.CheckTable(1)
		i := L.OptInt(2, 1)
		j := L.OptInt(3, t.Len())
		n := j - i + 1
		if n <= 0 {
			return 0
		}
		if n > maxN {
			raiseLimit(L, "unpack: %d values is more than the limit of %d", n, maxN)
		}
		for k := i; k <= j; k++ {
			L.Push(t.RawGetInt(k))
		}
		return n
	}
}

// sbStringByte is Lua 5.1's string.byte, refusing more than maxN values
// before pushing any: string.byte(s, 1, -1) of a 16 MB string would push
// 16M values onto the Lua stack.
func sbStringByte(maxN int) lua.LGFunction {
	return func(L *lua.LState) int {
		s := L.CheckString(1)
		posi := posRelative(L.OptInt(2, 1), len(s))
		pose := posRelative(L.OptInt(3, posi), len(s))
		posi = max(posi, 1)
		pose = min(pose, len(s))
		if posi > pose {
			return 0
		}
		n := pose - posi + 1
		if n > maxN {
			raiseLimit(L, "string.byte: %d values is more than the limit of %d (take the string in slices, or use string.sub and string.find)", n, maxN)
		}
		for i := posi - 1; i < pose; i++ {
			L.Push(lua.LNumber(s[i]))
		}
		return n
	}
}

// posRelative is Lua 5.1's posrelat: a negative position counts from the
// end of a string of length n.
func posRelative(pos, n int) int {
	if pos < 0 {
		pos += n + 1
	}
	return max(pos, 0)
}

// dateConversionMax bounds the bytes one os.date conversion writes (the
// longest, %c, writes 18).
const dateConversionMax = 32

// sbOsDate refuses a format whose result could exceed the string cap
// before formatting it.
func sbOsDate(orig *lua.LFunction, maxSize int) lua.LGFunction {
	return func(L *lua.LState) int {
		if L.GetTop() >= 1 {
			f := L.CheckString(1)
			if bound := len(f) + dateConversionMax*strings.Count(f, "%"); bound > maxSize {
				raiseLimit(L, "os.date: a format of %d bytes with %d conversions may exceed the %d-byte string limit", len(f), strings.Count(f, "%"), maxSize)
			}
		}
		callOriginal(L, orig)
		return 1
	}
}

// sbTableSort sorts t[1..#t] in a Go slice, looking at the hook's
// deadline every 65536 comparisons: sorting a few million values without
// a comparator is one Go call the deadline could not otherwise stop.
// gopher-lua's own sort also ignored every element outside the table's
// array part.
func sbTableSort(L *lua.LState) int {
	t := L.CheckTable(1)
	var fn *lua.LFunction
	if L.GetTop() >= 2 && L.Get(2) != lua.LNil {
		fn = L.CheckFunction(2)
	}
	n := t.Len()
	vals := make([]lua.LValue, n)
	for i := range vals {
		vals[i] = t.RawGetInt(i + 1)
	}
	sort.Sort(&luaSorter{L: L, fn: fn, vals: vals, done: hookDone(L)})
	for i, v := range vals {
		t.RawSetInt(i+1, v)
	}
	return 0
}

// luaSorter orders Lua values with Lua's < or a comparator, looking at
// the hook's deadline every 65536 comparisons.
type luaSorter struct {
	L     *lua.LState
	fn    *lua.LFunction
	vals  []lua.LValue
	done  <-chan struct{}
	count int
}

func (s *luaSorter) Len() int      { return len(s.vals) }
func (s *luaSorter) Swap(i, j int) { s.vals[i], s.vals[j] = s.vals[j], s.vals[i] }

func (s *luaSorter) Less(i, j int) bool {
	if s.count++; s.count&0xffff == 0 && s.done != nil {
		select {
		case <-s.done:
			s.L.RaiseError("table.sort: stopped at the hook's deadline")
		default:
		}
	}
	a, b := s.vals[i], s.vals[j]
	if s.fn == nil {
		// Lua's < without a metamethod lookup for the common cases.
		if x, ok := a.(lua.LNumber); ok {
			if y, ok := b.(lua.LNumber); ok {
				return x < y
			}
		}
		if x, ok := a.(lua.LString); ok {
			if y, ok := b.(lua.LString); ok {
				return x < y
			}
		}
		return s.L.LessThan(a, b)
	}
	L := s.L
	L.Push(s.fn)
	L.Push(a)
	L.Push(b)
	L.Call(2, 1)
	less := lua.LVAsBool(L.Get(-1))
	L.Pop(1)
	return less
}

func sbStringRep(maxSize int) lua.LGFunction {
	return func(L *lua.LState) int {
		s := L.CheckString(1)
		n := L.CheckInt(2)
		if n <= 0 || s == "" {
			L.Push(lua.LString(""))
			return 1
		}
		if int64(len(s))*int64(n) > int64(maxSize) {
			raiseLimit(L, "string.rep: a result of %d bytes exceeds the %d-byte string limit", int64(len(s))*int64(n), maxSize)
		}
		L.Push(lua.LString(strings.Repeat(s, n)))
		return 1
	}
}

// sbStringFormat allows only Lua's conversions, with widths and precisions
// of at most two digits as in PUC Lua. gopher-lua hands the format to Go's
// fmt, where %T, %v or %p would leak Go internals.
func sbStringFormat(orig *lua.LFunction, maxSize int) lua.LGFunction {
	return func(L *lua.LState) int {
		f := L.CheckString(1)
		arg := 1       // the Lua argument the next conversion consumes
		size := len(f) // an upper bound of the result, checked before building it
		for i := 0; i < len(f); i++ {
			if f[i] != '%' {
				continue
			}
			i++
			if i < len(f) && f[i] == '%' {
				continue
			}
			for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
				i++
			}
			digits := 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				i++
				digits++
			}
			if i < len(f) && f[i] == '.' {
				i++
				pd := 0
				for i < len(f) && f[i] >= '0' && f[i] <= '9' {
					i++
					pd++
				}
				if pd > 2 {
					digits = 3
				}
			}
			if digits > 2 {
				L.RaiseError("string.format: invalid format (width or precision too long)")
			}
			if i >= len(f) || strings.IndexByte("diucxXoeEfgGqs", f[i]) < 0 {
				verb := "end of string"
				if i < len(f) {
					verb = "'%" + string(f[i]) + "'"
				}
				L.RaiseError("string.format: invalid conversion %s (use %%d %%i %%u %%c %%x %%X %%o %%e %%E %%f %%g %%G %%q %%s)", verb)
			}
			arg++
			size += formatArgSize(L, arg, f[i])
			if size > maxSize {
				raiseLimit(L, "string.format: result exceeds the %d-byte string limit", maxSize)
			}
		}
		callOriginal(L, orig)
		if s, ok := L.Get(-1).(lua.LString); ok && len(s) > maxSize {
			raiseLimit(L, "string.format: result exceeds the %d-byte string limit", maxSize)
		}
		return 1
	}
}

// formatArgSize checks argument n of string.format against its
// conversion as Lua 5.1 does (gopher-lua formats nil as "&{}" and tables as
// Go structs) and returns an upper bound of the bytes it adds.
func formatArgSize(L *lua.LState, n int, verb byte) int {
	v := L.Get(n)
	if n > L.GetTop() {
		L.ArgError(n, "no value")
	}
	switch verb {
	case 's', 'q':
		switch x := v.(type) {
		case lua.LString:
			if verb == 'q' {
				return 2*len(x) + 2 // every byte may be escaped
			}
			return len(x) + 99
		case lua.LNumber:
			return 64 + 99
		}
		L.ArgError(n, "string expected, got "+v.Type().String())
	default:
		switch x := v.(type) {
		case lua.LNumber:
		case lua.LString:
			if _, err := strconv.ParseFloat(strings.TrimSpace(string(x)), 64); err != nil {
				L.ArgError(n, "number expected, got string")
			}
		default:
			L.ArgError(n, "number expected, got "+v.Type().String())
		}
	}
	// %f of the largest double has 309 integer digits; widths and
	// precisions are at most two digits.
	return 309 + 2*99 + 8
}

// sbTableConcat builds the string in Go instead of on the Lua data stack,
// which overflows the registry near 3000 items (gopher-lua #323). Each
// piece is checked against the string cap before it is appended, and the
// hook's deadline every 65536 items (a table of millions of empty strings
// appends nothing for a long time).
func sbTableConcat(maxSize int) lua.LGFunction {
	return func(L *lua.LState) int {
		t := L.CheckTable(1)
		sep := L.OptString(2, "")
		i := L.OptInt(3, 1)
		j := L.OptInt(4, t.Len())
		done := hookDone(L)
		var b strings.Builder
		for k := i; k <= j; k++ {
			var piece string
			switch v := t.RawGetInt(k).(type) {
			case lua.LString:
				piece = string(v)
			case lua.LNumber:
				piece = v.String()
			default:
				L.RaiseError("invalid value (at index %d) in table for 'concat': %s", k, v.Type())
			}
			n := len(piece)
			if k < j {
				n += len(sep)
			}
			if b.Len()+n > maxSize {
				raiseLimit(L, "table.concat: result exceeds the %d-byte string limit", maxSize)
			}
			b.WriteString(piece)
			if k < j {
				b.WriteString(sep)
			}
			if (k-i)&0xffff == 0xffff && done != nil {
				select {
				case <-done:
					L.RaiseError("table.concat: stopped at the hook's deadline")
				default:
				}
			}
		}
		L.Push(lua.LString(b.String()))
		return 1
	}
}

// raiseLimit raises a sandbox limit as a structured error of kind
// "limit", so plugins and operators can tell it from a plugin's own error.
func raiseLimit(L *lua.LState, format string, args ...any) {
	bindings.Raise(L, bindings.Errorf("limit", format, args...))
}

// callOriginal calls the builtin a sandbox wrapper guards with the
// wrapper's arguments, leaving its one result on top of the stack.
func callOriginal(L *lua.LState, orig *lua.LFunction) {
	top := L.GetTop()
	L.Push(orig)
	for i := 1; i <= top; i++ {
		L.Push(L.Get(i))
	}
	L.Call(top, 1)
}

// sbCoroutine counts coroutines per task (each is a whole Lua state) and
// remembers them, so that the task's end releases them.
func sbCoroutine(orig *lua.LFunction, name string, maxN int, co *coroutines) lua.LGFunction {
	return func(L *lua.LState) int {
		co.n++
		if co.n > maxN {
			raiseLimit(L, "coroutine.%s: more than %d coroutines in one task", name, maxN)
		}
		callOriginal(L, orig)
		switch v := L.Get(-1).(type) {
		case *lua.LState:
			co.threads = append(co.threads, v)
		case *lua.LFunction: // wrap: the coroutine is the closure's upvalue
			if len(v.Upvalues) > 0 {
				if th, ok := v.Upvalues[0].Value().(*lua.LState); ok {
					co.threads = append(co.threads, th)
				}
			}
		}
		return 1
	}
}
