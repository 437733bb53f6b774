package luaval

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// FromGo converts a Go value made of maps, slices, strings, numbers, bools
// and nil (as produced by encoding/json) to Lua. Other values are
// converted through their JSON encoding.
func FromGo(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case nil:
		return lua.LNil
	case lua.LValue:
		return x
	case string:
		return lua.LString(x)
	case []byte:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case float64:
		return lua.LNumber(x)
	case float32:
		return lua.LNumber(x)
	case int:
		return lua.LNumber(x)
	case int64:
		return lua.LNumber(x)
	case int32:
		return lua.LNumber(x)
	case uint64:
		return lua.LNumber(x)
	case uint32:
		return lua.LNumber(x)
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return lua.LString(x)
		}
		return lua.LNumber(f)
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, vv := range x {
			if lv := FromGo(L, vv); lv != lua.LNil {
				t.RawSetString(k, lv)
			}
		}
		return t
	case map[string]string:
		t := L.CreateTable(0, len(x))
		for k, vv := range x {
			t.RawSetString(k, lua.LString(vv))
		}
		return t
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, vv := range x {
			if lv := FromGo(L, vv); lv != lua.LNil {
				t.RawSetInt(i+1, lv)
			}
		}
		if len(x) == 0 {
			MarkArray(L, t)
		}
		return t
	case []string:
		t := L.CreateTable(len(x), 0)
		for _, vv := range x {
			t.Append(lua.LString(vv))
		}
		if len(x) == 0 {
			MarkArray(L, t)
		}
		return t
	}
	// Fall back to a JSON round trip for structs and typed maps/slices.
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer && rv.IsNil() {
		return lua.LNil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return lua.LString(fmt.Sprint(v))
	}
	lv, err := Decode(L, b, Limits{})
	if err != nil {
		return lua.LString(fmt.Sprint(v))
	}
	return lv
}

// ToGo converts a Lua value to map[string]any / []any / string / float64 /
// bool / nil, with the same rules and limits as Encode. Empty tables
// become empty maps unless marked as arrays.
func ToGo(L *lua.LState, v lua.LValue, lim Limits) (any, error) {
	c := goConv{L: L, lim: lim.withDefaults(), seen: make(map[*lua.LTable]bool)}
	return c.value(v, 0, "")
}

type goConv struct {
	L     *lua.LState
	lim   Limits
	nodes int
	seen  map[*lua.LTable]bool
}

func (c *goConv) value(v lua.LValue, depth int, path string) (any, error) {
	c.nodes++
	if c.nodes > c.lim.MaxNodes {
		return nil, &PathError{path, fmt.Errorf("more than %d values: %w", c.lim.MaxNodes, ErrTooLarge)}
	}
	switch x := v.(type) {
	case *lua.LNilType:
		return nil, nil
	case lua.LBool:
		return bool(x), nil
	case lua.LNumber:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &PathError{path, fmt.Errorf("cannot convert %v", f)}
		}
		return f, nil
	case lua.LString:
		return string(x), nil
	case *lua.LTable:
		if depth >= c.lim.MaxDepth {
			return nil, &PathError{path, fmt.Errorf("deeper than %d levels: %w", c.lim.MaxDepth, ErrTooDeep)}
		}
		if c.seen[x] {
			return nil, &PathError{path, ErrCycle}
		}
		if err := Materialize(x); err != nil {
			return nil, &PathError{path, err}
		}
		c.seen[x] = true
		defer delete(c.seen, x)
		n := x.Len()
		count := 0
		x.ForEach(func(_, _ lua.LValue) { count++ })
		if (n > 0 && count == n) || (count == 0 && c.L != nil && IsMarkedArray(c.L, x)) {
			out := make([]any, n)
			for i := 1; i <= n; i++ {
				gv, err := c.value(x.RawGetInt(i), depth+1, path+"["+strconv.Itoa(i)+"]")
				if err != nil {
					return nil, err
				}
				out[i-1] = gv
			}
			return out, nil
		}
		out := make(map[string]any, count)
		var ferr error
		x.ForEach(func(k, vv lua.LValue) {
			if ferr != nil {
				return
			}
			var ks string
			switch kk := k.(type) {
			case lua.LString:
				ks = string(kk)
			case lua.LNumber:
				ks = string(AppendNumber(nil, float64(kk)))
			default:
				ferr = &PathError{path, fmt.Errorf("cannot convert a table with a %s key", k.Type())}
				return
			}
			gv, err := c.value(vv, depth+1, joinPath(path, ks))
			if err != nil {
				ferr = err
				return
			}
			out[ks] = gv
		})
		return out, ferr
	default:
		return nil, &PathError{path, fmt.Errorf("cannot convert a %s", v.Type())}
	}
}

// SortedKeys returns a table's keys as strings in sorted order; the REPL
// printer and error formatting use it for stable output.
func SortedKeys(t *lua.LTable) []string {
	var keys []string
	t.ForEach(func(k, _ lua.LValue) { keys = append(keys, k.String()) })
	sort.Strings(keys)
	return keys
}
