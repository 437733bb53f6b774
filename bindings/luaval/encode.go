package luaval

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

const arrayMeta = "loom.json.array"

// MarkArray tags t so that it encodes as a JSON array even when empty.
// Decode marks the empty arrays it creates, so [] round-trips.
func MarkArray(L *lua.LState, t *lua.LTable) {
	L.SetMetatable(t, L.NewTypeMetatable(arrayMeta))
}

// IsMarkedArray reports whether t carries the array marker.
func IsMarkedArray(L *lua.LState, t *lua.LTable) bool {
	mt, ok := t.Metatable.(*lua.LTable)
	return ok && L != nil && mt == L.GetTypeMetatable(arrayMeta)
}

// EncodeOptions tune Encode.
type EncodeOptions struct {
	Limits
	// Omit, when set, drops table values (at any depth) for which it
	// returns true. The runtime uses it to drop auto-vivified tables that
	// stayed empty, so a result's status can never become {}.
	Omit func(t *lua.LTable) bool
	// Indent pretty-prints with this indent per level when non-empty.
	Indent string
	// L lets the encoder recognise the array marker. May be nil.
	L *lua.LState
}

// Encode converts a Lua value to JSON. Functions, userdata, threads, NaN
// and infinities, and tables with keys that are neither strings nor
// numbers are errors that name the path where they occur.
func Encode(v lua.LValue, opts EncodeOptions) ([]byte, error) {
	opts.Limits = opts.Limits.withDefaults()
	e := encoder{opts: opts, seen: make(map[*lua.LTable]bool)}
	if err := e.value(v, 0, ""); err != nil {
		return nil, err
	}
	return e.buf, nil
}

type encoder struct {
	opts  EncodeOptions
	buf   []byte
	nodes int
	seen  map[*lua.LTable]bool
}

func (e *encoder) fail(path string, err error) error {
	if path == "" {
		path = "(top)"
	}
	return &PathError{Path: path, Err: err}
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (e *encoder) newline(depth int) {
	if e.opts.Indent == "" {
		return
	}
	e.buf = append(e.buf, '\n')
	for i := 0; i < depth; i++ {
		e.buf = append(e.buf, e.opts.Indent...)
	}
}

func (e *encoder) value(v lua.LValue, depth int, path string) error {
	e.nodes++
	if e.nodes > e.opts.MaxNodes {
		return e.fail(path, fmt.Errorf("more than %d values: %w", e.opts.MaxNodes, ErrTooLarge))
	}
	if e.nodes&stopEvery == 0 && e.opts.Stop != nil {
		if err := stopped(e.opts.Stop); err != nil {
			return e.fail(path, err)
		}
	}
	if len(e.buf) > e.opts.MaxBytes {
		return e.fail(path, fmt.Errorf("more than %d bytes: %w", e.opts.MaxBytes, ErrTooLarge))
	}
	switch x := v.(type) {
	case *lua.LNilType:
		e.buf = append(e.buf, "null"...)
	case lua.LBool:
		e.buf = strconv.AppendBool(e.buf, bool(x))
	case lua.LNumber:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return e.fail(path, fmt.Errorf("cannot encode %v as JSON", f))
		}
		e.buf = AppendNumber(e.buf, f)
	case lua.LString:
		e.buf = AppendString(e.buf, string(x))
	case *lua.LTable:
		if depth >= e.opts.MaxDepth {
			return e.fail(path, fmt.Errorf("deeper than %d levels: %w", e.opts.MaxDepth, ErrTooDeep))
		}
		if e.seen[x] {
			return e.fail(path, ErrCycle)
		}
		e.seen[x] = true
		defer delete(e.seen, x)
		return e.table(x, depth+1, path)
	default:
		return e.fail(path, fmt.Errorf("cannot encode a %s as JSON", v.Type()))
	}
	return nil
}

// AppendNumber appends f as JSON: integers without a fraction.
func AppendNumber(buf []byte, f float64) []byte {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(buf, int64(f), 10)
	}
	return strconv.AppendFloat(buf, f, 'g', -1, 64)
}

func (e *encoder) table(t *lua.LTable, depth int, path string) error {
	if err := Materialize(t); err != nil {
		return e.fail(path, err)
	}
	n := t.Len()
	// A sequence: every key is 1..n.
	isArray := false
	if n > 0 {
		count := 0
		t.ForEach(func(k, _ lua.LValue) { count++ })
		isArray = count == n
	} else {
		isArray = e.opts.L != nil && IsMarkedArray(e.opts.L, t)
		if !isArray && isEmptyAfterOmit(t, e.opts.Omit) {
			e.buf = append(e.buf, "{}"...)
			return nil
		}
	}
	if isArray {
		e.buf = append(e.buf, '[')
		for i := 1; i <= n; i++ {
			if i > 1 {
				e.buf = append(e.buf, ',')
			}
			e.newline(depth)
			item := t.RawGetInt(i)
			if it, ok := item.(*lua.LTable); ok && e.opts.Omit != nil && e.opts.Omit(it) && isEmptyAfterOmit(it, e.opts.Omit) {
				item = lua.LNil
			}
			if err := e.value(item, depth, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		if n > 0 {
			e.newline(depth - 1)
		}
		e.buf = append(e.buf, ']')
		return nil
	}
	type kv struct {
		k string
		v lua.LValue
	}
	members := make([]kv, 0, 8)
	var keyErr error
	t.ForEach(func(k, v lua.LValue) {
		var ks string
		switch kk := k.(type) {
		case lua.LString:
			ks = string(kk)
		case lua.LNumber:
			ks = string(AppendNumber(nil, float64(kk)))
		default:
			if keyErr == nil {
				keyErr = e.fail(path, fmt.Errorf("cannot encode a table with a %s key as JSON", k.Type()))
			}
			return
		}
		if vt, ok := v.(*lua.LTable); ok && e.opts.Omit != nil && e.opts.Omit(vt) && isEmptyAfterOmit(vt, e.opts.Omit) {
			return
		}
		members = append(members, kv{ks, v})
	})
	if keyErr != nil {
		return keyErr
	}
	sort.Slice(members, func(i, j int) bool { return members[i].k < members[j].k })
	e.buf = append(e.buf, '{')
	for i, m := range members {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.newline(depth)
		e.buf = AppendString(e.buf, m.k)
		e.buf = append(e.buf, ':')
		if e.opts.Indent != "" {
			e.buf = append(e.buf, ' ')
		}
		if err := e.value(m.v, depth, joinPath(path, m.k)); err != nil {
			return err
		}
	}
	if len(members) > 0 {
		e.newline(depth - 1)
	}
	e.buf = append(e.buf, '}')
	return nil
}

// isEmptyAfterOmit reports whether t holds nothing once omitted children
// are dropped: an auto-vivified table holding only empty auto-vivified
// tables is itself empty. A cycle of omittable tables counts as empty.
func isEmptyAfterOmit(t *lua.LTable, omit func(*lua.LTable) bool) bool {
	return emptyAfterOmit(t, omit, 0)
}

func emptyAfterOmit(t *lua.LTable, omit func(*lua.LTable) bool, depth int) bool {
	if depth > 64 {
		return false
	}
	empty := true
	t.ForEach(func(_, v lua.LValue) {
		if !empty {
			return
		}
		vt, ok := v.(*lua.LTable)
		if !ok || omit == nil || !omit(vt) || !emptyAfterOmit(vt, omit, depth+1) {
			empty = false
		}
	})
	return empty
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Invalid UTF-8 bytes become
// U+FFFD, as encoding/json does.
func AppendString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			buf = append(buf, s[start:i]...)
			switch c {
			case '"', '\\':
				buf = append(buf, '\\', c)
			case '\n':
				buf = append(buf, '\\', 'n')
			case '\r':
				buf = append(buf, '\\', 'r')
			case '\t':
				buf = append(buf, '\\', 't')
			default:
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			buf = append(buf, s[start:i]...)
			buf = append(buf, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			buf = append(buf, s[start:i]...)
			buf = append(buf, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	buf = append(buf, s[start:]...)
	return append(buf, '"')
}
