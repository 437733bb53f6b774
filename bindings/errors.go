package bindings

import (
	"errors"
	"fmt"
	"sort"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/luaval"
)

// Error is a structured error raised into Lua as a table, so a plugin can
// branch on err.kind and the host can report err.message without running
// any Lua (__tostring is a Go function).
//
// Kinds in use: "config" (bad arguments), "permission" (sandbox or
// allow-list refusal), "connect", "auth", "host_key", "timeout",
// "transport_lost", "command" (a checked command exited non-zero),
// "http" (a checked HTTP status), "io" (local file errors).
type Error struct {
	Kind    string
	Message string
	// Fields are extra keys copied into the Lua table, e.g. command,
	// stdout, stderr, exit_code for a command error, converted with
	// luaval.FromGo.
	Fields map[string]any
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// Errorf builds an *Error of the given kind.
func Errorf(kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// errorMeta is the registry key of the metatable shared by error tables.
const errorMeta = "loom.error"

// ErrorTable converts e to the Lua table that Raise raises: {kind=...,
// message=..., <fields>} whose tostring() is the message.
func ErrorTable(L *lua.LState, e *Error) *lua.LTable {
	t := L.CreateTable(0, 2+len(e.Fields))
	t.RawSetString("kind", lua.LString(e.Kind))
	t.RawSetString("message", lua.LString(e.Message))
	keys := make([]string, 0, len(e.Fields))
	for k := range e.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.RawSetString(k, luaval.FromGo(L, e.Fields[k]))
	}
	mt := L.NewTypeMetatable(errorMeta)
	if mt.RawGetString("__tostring") == lua.LNil {
		mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
			t := L.CheckTable(1)
			L.Push(t.RawGetString("message"))
			return 1
		}))
		mt.RawSetString("__metatable", lua.LString("locked"))
	}
	L.SetMetatable(t, mt)
	return t
}

// Raise raises err into Lua. An *Error becomes a structured error table;
// any other error becomes an "error" kind table carrying its message.
// Raise does not return.
func Raise(L *lua.LState, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Kind: "error", Message: err.Error()}
	}
	L.Error(ErrorTable(L, e), 1)
}

func joinErrors(errs []error) error { return errors.Join(errs...) }
