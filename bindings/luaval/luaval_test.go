package luaval

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

func TestRoundTrip(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	in := `{"a":1,"b":[1,2.5,"x",true,{"c":"d"}],"e":{},"f":[],"g":"\u00e9\n\"q\"","h":-3e-7,"big":12345678901}`
	v, err := Decode(L, []byte(in), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Encode(v, EncodeOptions{L: L})
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	json.Unmarshal([]byte(in), &want)
	json.Unmarshal(out, &got)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("round trip:\n in  %s\n out %s", in, out)
	}
	if !strings.Contains(string(out), `"f":[]`) || !strings.Contains(string(out), `"e":{}`) {
		t.Fatalf("empty array/object not preserved: %s", out)
	}
}

func TestDecodeErrors(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	for in, want := range map[string]string{
		`{"a":}`:              "line 1, column 6",
		"{\n\"a\": tru}":      "line 2",
		`[1,2`:                "end of input",
		`{"a":1} x`:           "after top-level value",
		`"ctl` + "\x01" + `"`: "control character",
		strings.Repeat("[", 100) + strings.Repeat("]", 100): "deeper than",
	} {
		_, err := Decode(L, []byte(in), Limits{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
	if _, err := Decode(L, []byte(`[1,2,3,4]`), Limits{MaxNodes: 3}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("node cap: %v", err)
	}
}

func TestEncodeErrors(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	if err := L.DoString(`cyc = {} cyc.me = cyc
		fn = {f = function() end}
		badkey = {[true] = 1}
		nan = {x = 0/0}`); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]error{"cyc": ErrCycle} {
		if _, err := Encode(L.GetGlobal(name), EncodeOptions{}); !errors.Is(err, want) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name, want := range map[string]string{"fn": "at f: cannot encode a function", "badkey": "boolean key", "nan": "cannot encode NaN"} {
		if _, err := Encode(L.GetGlobal(name), EncodeOptions{}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", name, err, want)
		}
	}
}

func TestOmitAndGo(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	marked := L.NewTable()
	omit := func(t *lua.LTable) bool { return t == marked || t.Metatable == marked }
	root := L.NewTable()
	child := L.NewTable()
	child.Metatable = marked
	root.RawSetString("empty", child)
	root.RawSetString("n", lua.LNumber(2))
	out, _ := Encode(root, EncodeOptions{Omit: omit})
	if string(out) != `{"n":2}` {
		t.Fatalf("omit: %s", out)
	}
	g, err := ToGo(L, FromGo(L, map[string]any{"a": []any{"x", 1.0}, "b": map[string]any{"c": true}}), Limits{})
	if err != nil || !reflect.DeepEqual(g, map[string]any{"a": []any{"x", 1.0}, "b": map[string]any{"c": true}}) {
		t.Fatalf("FromGo/ToGo: %v %v", g, err)
	}
}

// TestStopsAtDeadline: a conversion of many values watches Limits.Stop
// (the hook's context) and fails once it is closed.
func TestStopsAtDeadline(t *testing.T) {
	L := lua.NewState()
	defer L.Close()
	stop := make(chan struct{})
	close(stop)
	doc := []byte("[" + strings.Repeat("1,", 10000) + "1]")
	if _, err := Decode(L, doc, Limits{Stop: stop}); !errors.Is(err, ErrStopped) {
		t.Fatalf("decode: got %v, want ErrStopped", err)
	}
	v, err := Decode(L, doc, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Encode(v, EncodeOptions{L: L, Limits: Limits{Stop: stop}}); !errors.Is(err, ErrStopped) {
		t.Fatalf("encode: got %v, want ErrStopped", err)
	}
	if _, err := Decode(L, []byte("[1,2]"), Limits{Stop: stop}); err != nil {
		t.Fatalf("a small document converts before the first look: %v", err)
	}
}
