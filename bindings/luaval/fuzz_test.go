package luaval

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// FuzzDecode (issue 20 item 6): the JSON decoder that turns a task (and
// loom.json.decode's input) into Lua accepts exactly what encoding/json
// accepts, within its depth limit, and reads the same values.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"taskId":"t1","config":{"a":[1,2.5,-3e2,true,false,null,"x\u00e9\n"],"b":{}}}`,
		`"\ud83d\ude00 \ud800 \\ \/"`, `[]`, `[[[[[[[[]]]]]]]]`, `1e999`, `-0`, `"\xff\xfe"`, `{"a":1,"a":2}`,
		`{"":{"":"\0"}}`, ` [1 , 2 ] `, `01`, `1.`, `.5`, `"\u12"`, `{"a" 1}`, `[1,]`, `nul`, `{"a":[}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		L := lua.NewState()
		defer L.Close()
		v, err := Decode(L, data, Limits{MaxDepth: 32, MaxNodes: 1 << 16})
		var ref any
		refErr := json.Unmarshal(data, &ref)
		if err != nil {
			if refErr == nil && !errors.Is(err, ErrTooDeep) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Decode refused what encoding/json accepts (%v): %q", err, data)
			}
			return
		}
		if refErr != nil {
			t.Fatalf("Decode accepted what encoding/json refuses (%v): %q", refErr, data)
		}
		got, err := ToGo(L, v, Limits{MaxDepth: 40, MaxNodes: 1 << 17})
		if err != nil {
			t.Fatalf("ToGo of a decoded value: %v", err)
		}
		// Lua strings keep the bytes as sent; encoding/json turns bytes
		// that are not UTF-8 into U+FFFD, as every JSON Loom writes does.
		// Two keys that differ only in such bytes are two keys in Lua
		// and one in encoding/json, whose value is then the last one's:
		// no comparison of values means anything there.
		if keysCollide(got) {
			return
		}
		if b, err := json.Marshal(got); err == nil {
			got = nil
			json.Unmarshal(b, &got)
		}
		if !reflect.DeepEqual(norm(got), norm(ref)) {
			t.Fatalf("Decode read %#v, encoding/json %#v, from %q", got, ref, data)
		}
	})
}

// keysCollide reports whether an object in v has two keys that
// encoding/json reads as one (they differ only in bytes that are not
// UTF-8, each read as U+FFFD).
func keysCollide(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		seen := map[string]bool{}
		for k, e := range x {
			var canon string
			b, _ := json.Marshal(k)
			_ = json.Unmarshal(b, &canon)
			if seen[canon] || keysCollide(e) {
				return true
			}
			seen[canon] = true
		}
	case []any:
		return slices.ContainsFunc(x, keysCollide)
	}
	return false
}

// norm makes a decoded value comparable across the two decoders: Lua has
// no null (a null member is absent, a null element nil) and one number
// type, and an empty table is an object or an array alike.
func norm(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			return "{} or []"
		}
		out := map[string]any{}
		for k, e := range x {
			if e != nil {
				out[k] = norm(e)
			}
		}
		if len(out) == 0 {
			return "{} or []"
		}
		return out
	case []any:
		for len(x) > 0 && x[len(x)-1] == nil {
			x = x[:len(x)-1] // trailing nils: the table's length ends before them
		}
		if len(x) == 0 {
			return "{} or []"
		}
		if slices.Contains(x, nil) {
			// A hole: the table is no sequence, ToGo gives an object.
			out := map[string]any{}
			for i, e := range x {
				if e != nil {
					out[strconv.Itoa(i+1)] = norm(e)
				}
			}
			return out
		}
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = norm(e)
		}
		return out
	case float64:
		return x
	case int64:
		return float64(x)
	case int:
		return float64(x)
	case json.Number:
		f, _ := x.Float64()
		return f
	}
	return v
}
