package plugtest

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// show renders a Lua value as Lua source, keys sorted, for failure
// messages and diffs: short values on one line, tables one key a line.
func show(v lua.LValue) string {
	var b strings.Builder
	writeValue(&b, v, 0, map[*lua.LTable]bool{})
	return b.String()
}

const maxShowDepth = 12

func writeValue(b *strings.Builder, v lua.LValue, indent int, seen map[*lua.LTable]bool) {
	switch x := v.(type) {
	case lua.LString:
		b.WriteString(strconv.Quote(string(x)))
	case lua.LNumber:
		b.WriteString(showNumber(float64(x)))
	case *lua.LTable:
		if seen[x] {
			b.WriteString("<cycle>")
			return
		}
		if indent >= maxShowDepth {
			b.WriteString("{...}")
			return
		}
		seen[x] = true
		defer delete(seen, x)
		keys := sortedKeys(x)
		if len(keys) == 0 {
			b.WriteString("{}")
			return
		}
		if one := oneLine(x, keys); one != "" {
			b.WriteString(one)
			return
		}
		b.WriteString("{\n")
		for _, k := range keys {
			b.WriteString(strings.Repeat("  ", indent+1))
			b.WriteString(showKey(k))
			b.WriteString(" = ")
			writeValue(b, x.RawGet(k), indent+1, seen)
			b.WriteString(",\n")
		}
		b.WriteString(strings.Repeat("  ", indent))
		b.WriteString("}")
	default:
		if m := asMatcher(v); m != nil {
			b.WriteString("match." + m.desc)
			return
		}
		b.WriteString(v.String())
	}
}

// oneLine renders a table of at most 4 scalars on one line, or "".
func oneLine(t *lua.LTable, keys []lua.LValue) string {
	if len(keys) > 4 {
		return ""
	}
	parts := make([]string, 0, len(keys))
	seq := true
	for i, k := range keys {
		if n, ok := k.(lua.LNumber); !ok || float64(n) != float64(i+1) {
			seq = false
		}
	}
	for _, k := range keys {
		val := t.RawGet(k)
		if _, isT := val.(*lua.LTable); isT {
			return ""
		}
		s := show(val)
		if !seq {
			s = showKey(k) + " = " + s
		}
		parts = append(parts, s)
	}
	out := "{ " + strings.Join(parts, ", ") + " }"
	if len(out) > 72 {
		return ""
	}
	return out
}

func showNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func showKey(k lua.LValue) string {
	if s, ok := k.(lua.LString); ok {
		if isIdent(string(s)) {
			return string(s)
		}
		return "[" + strconv.Quote(string(s)) + "]"
	}
	return "[" + show(k) + "]"
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || i > 0 && r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// sortedKeys orders a table's keys: numbers first, ascending, then
// strings, then anything else by its string form.
func sortedKeys(t *lua.LTable) []lua.LValue {
	var keys []lua.LValue
	t.ForEach(func(k, _ lua.LValue) { keys = append(keys, k) })
	rank := func(v lua.LValue) int {
		switch v.(type) {
		case lua.LNumber:
			return 0
		case lua.LString:
			return 1
		}
		return 2
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, rj := rank(keys[i]), rank(keys[j])
		if ri != rj {
			return ri < rj
		}
		if ri == 0 {
			return keys[i].(lua.LNumber) < keys[j].(lua.LNumber)
		}
		return keys[i].String() < keys[j].String()
	})
	return keys
}

// pathKey appends a key to a dotted path, as Lua would index it.
func pathKey(path string, k lua.LValue) string {
	if s, ok := k.(lua.LString); ok && isIdent(string(s)) {
		if path == "" {
			return string(s)
		}
		return path + "." + string(s)
	}
	return path + "[" + show(k) + "]"
}

// deepDiff lists where expected and actual differ, as "path: expected X,
// got Y" lines, at most limit of them. No lines means they are the same.
func deepDiff(expected, actual lua.LValue, limit int) []string {
	var out []string
	var walk func(path string, e, a lua.LValue, depth int)
	walk = func(path string, e, a lua.LValue, depth int) {
		if len(out) >= limit {
			return
		}
		if m := asMatcher(e); m != nil {
			if !m.check(a) {
				out = append(out, fmt.Sprintf("%s: expected match.%s, got %s", orTop(path), m.desc, brief(a)))
			}
			return
		}
		et, eok := e.(*lua.LTable)
		at, aok := a.(*lua.LTable)
		if eok && aok {
			if et == at || depth > 32 {
				return
			}
			for _, k := range sortedKeys(et) {
				walk(pathKey(path, k), et.RawGet(k), at.RawGet(k), depth+1)
			}
			for _, k := range sortedKeys(at) {
				if et.RawGet(k) == lua.LNil && len(out) < limit {
					out = append(out, fmt.Sprintf("%s: unexpected, got %s", orTop(pathKey(path, k)), brief(at.RawGet(k))))
				}
			}
			return
		}
		if !rawEqual(e, a) {
			switch {
			case a == lua.LNil:
				out = append(out, fmt.Sprintf("%s: missing, expected %s", orTop(path), brief(e)))
			default:
				out = append(out, fmt.Sprintf("%s: expected %s, got %s", orTop(path), brief(e), brief(a)))
			}
		}
	}
	walk("", expected, actual, 0)
	return out
}

func orTop(path string) string {
	if path == "" {
		return "(value)"
	}
	return path
}

// brief is show on one line, cut at 120 characters.
func brief(v lua.LValue) string {
	s := show(v)
	if strings.Contains(s, "\n") {
		s = strings.Join(strings.Fields(s), " ")
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	if _, isStr := v.(lua.LString); !isStr {
		if _, isT := v.(*lua.LTable); !isT && v != lua.LNil {
			if _, isNum := v.(lua.LNumber); !isNum {
				return s
			}
			return s + " (number)"
		}
	}
	return s
}

// rawEqual is Lua's primitive equality (no __eq): numbers and strings by
// value, everything else by identity.
func rawEqual(a, b lua.LValue) bool {
	switch x := a.(type) {
	case lua.LNumber:
		y, ok := b.(lua.LNumber)
		return ok && x == y
	case lua.LString:
		y, ok := b.(lua.LString)
		return ok && x == y
	case lua.LBool:
		y, ok := b.(lua.LBool)
		return ok && x == y
	}
	return a == b
}
