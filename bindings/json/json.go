// Package json is the loom.json binding: JSON encoding and decoding with
// the same bounded converter the runtime uses for tasks and results.
package json

import (
	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
)

// Binding is the loom.json module. It holds no state.
type Binding struct{}

// New returns the json binding.
func New() *Binding { return &Binding{} }

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	return bindings.ModuleSpec{
		Name: "json",
		Doc:  "JSON encoding and decoding. null decodes to nil; empty tables encode as {} unless marked with json.array.",
		Types: []bindings.TypeSpec{{
			Name:  "json.EncodeOptions",
			Doc:   "json.encode's options. Other keys are ignored at run time; the stubs flag them as typos.",
			Exact: true,
			Fields: []bindings.FieldSpec{
				{Name: "indent", Type: "string", Optional: true, Doc: "indent each level with this string (none: compact output)"},
			},
		}},
		Funcs: []bindings.FuncSpec{
			{Name: "encode", Params: []string{"value any", "opts? json.EncodeOptions"}, Returns: []string{"string"},
				Doc: "Encodes a value. Object keys are sorted. Raises on functions, cycles, NaN, or nesting deeper than 64."},
			{Name: "decode", Params: []string{"text string"}, Returns: []string{"any"},
				Doc: "Decodes JSON text. Raises with the line and column of a syntax error. Objects become tables, arrays sequences, null nil."},
			{Name: "array", Params: []string{"t? table"}, Returns: []string{"table"},
				Doc: "Marks t (or a new table) so it encodes as a JSON array even when empty."},
		},
	}
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	t := L.CreateTable(0, 3)
	t.RawSetString("encode", L.NewFunction(encode))
	t.RawSetString("decode", L.NewFunction(decode))
	t.RawSetString("array", L.NewFunction(array))
	return t
}

func encode(L *lua.LState) int {
	v := L.CheckAny(1)
	opts := luaval.EncodeOptions{L: L, Limits: luaval.Limits{Stop: hookDone(L)}}
	if o, ok := L.Get(2).(*lua.LTable); ok {
		if s, ok := o.RawGetString("indent").(lua.LString); ok {
			opts.Indent = string(s)
		}
	}
	out, err := luaval.Encode(v, opts)
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "json.encode: %v", err))
	}
	L.Push(lua.LString(out))
	return 1
}

func decode(L *lua.LState) int {
	s := L.CheckString(1)
	v, err := luaval.Decode(L, []byte(s), luaval.Limits{Stop: hookDone(L)})
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "json.decode: %v", err))
	}
	L.Push(v)
	return 1
}

func array(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		t = L.NewTable()
	}
	luaval.MarkArray(L, t)
	L.Push(t)
	return 1
}

// hookDone is the hook's context's Done, so a big document cannot outlive
// the hook's deadline; nil outside a hook.
func hookDone(L *lua.LState) <-chan struct{} {
	if ctx := L.Context(); ctx != nil {
		return ctx.Done()
	}
	return nil
}
