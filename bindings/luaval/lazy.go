package luaval

import (
	"fmt"

	lua "github.com/yuin/gopher-lua"
)

// Lazy keys: a table key whose JSON value is decoded into Lua only when
// something reads it. A Coopr task's config.nodes holds every node of the
// cluster and is decoded for every task, though few hooks read it: on a
// 100-node cluster that decode was most of a no-op task's cost.
//
// The table gets a metatable whose __index decodes the key on first read;
// once every lazy key is decoded the metatable is removed, so the table
// is a plain one again. Materialize decodes them at once, for the readers
// that walk a table rather than index it (pairs, next, rawget,
// getmetatable, setmetatable in Loom's sandbox; Encode and ToGo here), so
// the laziness is invisible to plugins.

// lazyKey is the metatable field holding the pending keys.
const lazyKey = "__loom_lazy"

type lazy struct {
	L        *lua.LState
	t        *lua.LTable
	raw      map[string][]byte
	lim      Limits
	onDecode func(key string, v lua.LValue)
}

// SetLazy makes key of t decode from raw (a JSON value, already known to
// be valid) on first read. onDecode, when set, sees each decoded value
// (to register secrets in it). It returns false, and does nothing, when t
// already has a metatable or key is set: the caller then decodes it.
func SetLazy(L *lua.LState, t *lua.LTable, key string, raw []byte, lim Limits, onDecode func(key string, v lua.LValue)) bool {
	if t.RawGetString(key) != lua.LNil {
		return false
	}
	if mt, ok := t.Metatable.(*lua.LTable); ok {
		ud, ok := mt.RawGetString(lazyKey).(*lua.LUserData)
		if !ok {
			return false
		}
		ud.Value.(*lazy).raw[key] = raw
		return true
	}
	if t.Metatable != lua.LNil {
		return false
	}
	lz := &lazy{L: L, t: t, raw: map[string][]byte{key: raw}, lim: lim, onDecode: onDecode}
	mt := L.CreateTable(0, 2)
	ud := L.NewUserData()
	ud.Value = lz
	mt.RawSetString(lazyKey, ud)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		k, ok := L.Get(2).(lua.LString)
		if !ok {
			L.Push(lua.LNil)
			return 1
		}
		v, err := lz.decode(string(k))
		if err != nil {
			L.RaiseError("%v", err)
		}
		L.Push(v)
		return 1
	}))
	t.Metatable = mt
	return true
}

// decode decodes key if it is still pending, stores it in the table
// (unless the table got a value for it meanwhile) and returns the value.
func (lz *lazy) decode(key string) (lua.LValue, error) {
	raw, ok := lz.raw[key]
	if !ok {
		return lua.LNil, nil
	}
	delete(lz.raw, key)
	if len(lz.raw) == 0 {
		lz.t.Metatable = lua.LNil
	}
	if cur := lz.t.RawGetString(key); cur != lua.LNil {
		return cur, nil // assigned before it was ever read
	}
	v, err := Decode(lz.L, raw, lz.lim)
	if err != nil {
		return lua.LNil, fmt.Errorf("decoding %s: %w", key, err)
	}
	if lz.onDecode != nil {
		lz.onDecode(key, v)
	}
	lz.t.RawSetString(key, v)
	return v, nil
}

// Materialize decodes every lazy key of t; a plain table is left alone.
func Materialize(t *lua.LTable) error {
	mt, ok := t.Metatable.(*lua.LTable)
	if !ok {
		return nil
	}
	ud, ok := mt.RawGetString(lazyKey).(*lua.LUserData)
	if !ok {
		return nil
	}
	lz := ud.Value.(*lazy)
	for k := range lz.raw {
		if _, err := lz.decode(k); err != nil {
			return err
		}
	}
	return nil
}

// IsLazy says whether t still has keys not decoded.
func IsLazy(t *lua.LTable) bool {
	mt, ok := t.Metatable.(*lua.LTable)
	if !ok {
		return false
	}
	_, ok = mt.RawGetString(lazyKey).(*lua.LUserData)
	return ok
}
