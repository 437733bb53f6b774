package ssh

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// fields reads an options table from Lua. It records the first error and
// which keys were read, so done() can reject unknown keys (a typo such as
// "timout" must not be silently ignored).
type fields struct {
	t     *lua.LTable
	where string
	err   error
	read  map[string]bool
}

func newFields(t *lua.LTable, where string) *fields {
	return &fields{t: t, where: where, read: map[string]bool{}}
}

func (f *fields) fail(key, format string, args ...any) {
	if f.err == nil {
		f.err = bindings.Errorf("config", "%s: option %q: %s", f.where, key, fmt.Sprintf(format, args...))
	}
}

// value returns the raw value (LNil when absent or when t is nil).
func (f *fields) value(key string) lua.LValue {
	f.read[key] = true
	if f.t == nil {
		return lua.LNil
	}
	return f.t.RawGetString(key)
}

func (f *fields) str(key string) string {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return ""
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return v.String()
	default:
		f.fail(key, "want a string, got %s", v.Type())
		return ""
	}
}

func (f *fields) boolean(key string, def bool) bool {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return def
	case lua.LBool:
		return bool(v)
	default:
		f.fail(key, "want a boolean, got %s", v.Type())
		return def
	}
}

func (f *fields) integer(key string, def int) int {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return def
	case lua.LNumber:
		if float64(v) != math.Trunc(float64(v)) {
			f.fail(key, "want an integer, got %v", v)
		}
		return int(v)
	case lua.LString:
		n, err := strconv.Atoi(string(v))
		if err != nil {
			f.fail(key, "want an integer, got %q", string(v))
		}
		return n
	default:
		f.fail(key, "want an integer, got %s", v.Type())
		return def
	}
}

// duration accepts a number of seconds or a Go duration string ("1m30s").
func (f *fields) duration(key string, def time.Duration) time.Duration {
	v := f.value(key)
	if v == lua.LNil {
		return def
	}
	d, err := parseDuration(v)
	if err != nil {
		f.fail(key, "%v", err)
		return def
	}
	return d
}

func parseDuration(v lua.LValue) (time.Duration, error) {
	switch x := v.(type) {
	case lua.LNumber:
		if x < 0 {
			return 0, fmt.Errorf("negative duration %v", x)
		}
		return time.Duration(float64(x) * float64(time.Second)), nil
	case lua.LString:
		s := strings.TrimSpace(string(x))
		if n, err := strconv.ParseFloat(s, 64); err == nil {
			return parseDuration(lua.LNumber(n))
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("want seconds or a duration like \"30s\", got %q", s)
		}
		if d < 0 {
			return 0, fmt.Errorf("negative duration %q", s)
		}
		return d, nil
	default:
		return 0, fmt.Errorf("want seconds or a duration string, got %s", v.Type())
	}
}

// size accepts a number of bytes or a string such as "4MiB", "64MB", "1k".
func (f *fields) size(key string, def int64) int64 {
	v := f.value(key)
	if v == lua.LNil {
		return def
	}
	n, err := parseSize(v)
	if err != nil {
		f.fail(key, "%v", err)
		return def
	}
	return n
}

func parseSize(v lua.LValue) (int64, error) {
	switch x := v.(type) {
	case lua.LNumber:
		if x < 0 {
			return 0, fmt.Errorf("negative size %v", x)
		}
		return int64(x), nil
	case lua.LString:
		s := strings.TrimSpace(string(x))
		i := len(s)
		for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
			i--
		}
		num, unit := strings.TrimSpace(s[:i]), strings.ToLower(strings.TrimSpace(s[i:]))
		n, err := strconv.ParseFloat(num, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("want bytes or a size like \"4MiB\", got %q", s)
		}
		mult := map[string]float64{"": 1, "b": 1,
			"k": 1 << 10, "kb": 1e3, "kib": 1 << 10,
			"m": 1 << 20, "mb": 1e6, "mib": 1 << 20,
			"g": 1 << 30, "gb": 1e9, "gib": 1 << 30}[unit]
		if mult == 0 {
			return 0, fmt.Errorf("unknown size unit in %q", s)
		}
		return int64(n * mult), nil
	default:
		return 0, fmt.Errorf("want bytes or a size string, got %s", v.Type())
	}
}

func (f *fields) table(key string) *lua.LTable {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return nil
	case *lua.LTable:
		return v
	default:
		f.fail(key, "want a table, got %s", v.Type())
		return nil
	}
}

func (f *fields) function(key string) *lua.LFunction {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return nil
	case *lua.LFunction:
		return v
	default:
		f.fail(key, "want a function, got %s", v.Type())
		return nil
	}
}

// stringList reads a list of strings; a single string is a one-item list.
func (f *fields) stringList(key string) []string {
	switch v := f.value(key).(type) {
	case *lua.LNilType:
		return nil
	case lua.LString:
		return []string{string(v)}
	case *lua.LTable:
		var out []string
		n := v.Len()
		for i := 1; i <= n; i++ {
			s, ok := v.RawGetInt(i).(lua.LString)
			if !ok {
				f.fail(key, "item %d: want a string", i)
				return nil
			}
			out = append(out, string(s))
		}
		return out
	default:
		f.fail(key, "want a string or a list of strings, got %s", v.Type())
		return nil
	}
}

// stringMap reads a table of string keys to string (or number/bool) values.
func (f *fields) stringMap(key string) map[string]string {
	t := f.table(key)
	if t == nil {
		return nil
	}
	out := map[string]string{}
	t.ForEach(func(k, v lua.LValue) {
		ks, ok := k.(lua.LString)
		if !ok {
			f.fail(key, "keys must be strings, got %s", k.Type())
			return
		}
		switch v.(type) {
		case lua.LString, lua.LNumber, lua.LBool:
			out[string(ks)] = v.String()
		default:
			f.fail(key, "value of %q: want a string, got %s", string(ks), v.Type())
		}
	})
	return out
}

// done returns the first error, or a config error naming unknown keys.
func (f *fields) done() error {
	if f.err != nil || f.t == nil {
		return f.err
	}
	var unknown []string
	f.t.ForEach(func(k, _ lua.LValue) {
		ks, ok := k.(lua.LString)
		if !ok || !f.read[string(ks)] {
			unknown = append(unknown, k.String())
		}
	})
	if len(unknown) > 0 {
		sort.Strings(unknown)
		known := make([]string, 0, len(f.read))
		for k := range f.read {
			known = append(known, k)
		}
		sort.Strings(known)
		for i, u := range unknown {
			unknown[i] = u + bindings.DidYouMean(u, known)
		}
		return bindings.Errorf("config", "%s: unknown option(s) %s (known: %s)", f.where,
			strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return nil
}

// optTable returns argument n as a table, nil when absent or nil, and
// raises a config error for any other type.
func optTable(L *lua.LState, n int, where string) *lua.LTable {
	switch v := L.Get(n).(type) {
	case *lua.LNilType:
		return nil
	case *lua.LTable:
		return v
	default:
		bindings.Raise(L, bindings.Errorf("config", "%s: argument %d: want a table, got %s", where, n, v.Type()))
		return nil
	}
}

// checkString returns argument n as a string or raises a config error.
func checkString(L *lua.LState, n int, where, what string) string {
	v, ok := L.Get(n).(lua.LString)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "%s: argument %d (%s): want a string, got %s", where, n, what, L.Get(n).Type()))
	}
	return string(v)
}
