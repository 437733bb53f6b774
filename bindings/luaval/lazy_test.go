package luaval

import (
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// TestLazy: a lazy key is absent from the raw table until read, decoded
// once on first read (seen by onDecode), and the metatable goes once
// nothing is pending; Materialize and Encode decode it too; a value
// assigned before the first read wins.
func TestLazy(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	decoded := 0
	onDecode := func(string, lua.LValue) { decoded++ }
	tbl := L.NewTable()
	if !SetLazy(L, tbl, "nodes", []byte(`{"n1": {"hostname": "a"}}`), Limits{}, onDecode) || !IsLazy(tbl) {
		t.Fatal("SetLazy refused a plain table")
	}
	if tbl.RawGetString("nodes") != lua.LNil || decoded != 0 {
		t.Fatal("decoded before any read")
	}
	L.SetGlobal("t", tbl)
	if err := L.DoString(`x = t.nodes.n1.hostname; y = t.nodes.n1.hostname`); err != nil {
		t.Fatal(err)
	}
	if L.GetGlobal("x").String() != "a" || decoded != 1 || IsLazy(tbl) || tbl.Metatable != lua.LNil {
		t.Fatalf("after reads: x=%v decoded=%d lazy=%v", L.GetGlobal("x"), decoded, IsLazy(tbl))
	}

	enc := L.NewTable()
	SetLazy(L, enc, "nodes", []byte(`{"n1": 1}`), Limits{}, nil)
	out, err := Encode(enc, EncodeOptions{})
	if err != nil || string(out) != `{"nodes":{"n1":1}}` {
		t.Fatalf("encode: %s %v", out, err)
	}

	set := L.NewTable()
	SetLazy(L, set, "nodes", []byte(`{"n1": 1}`), Limits{}, nil)
	set.RawSetString("nodes", lua.LString("mine"))
	if err := Materialize(set); err != nil || set.RawGetString("nodes").String() != "mine" {
		t.Fatalf("an assigned value was overwritten: %v %v", set.RawGetString("nodes"), err)
	}

	withMeta := L.NewTable()
	withMeta.Metatable = L.NewTable()
	if SetLazy(L, withMeta, "nodes", []byte(`{}`), Limits{}, nil) {
		t.Fatal("SetLazy took a table that has a metatable")
	}
}
