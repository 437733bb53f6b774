package luaval

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// Decode parses JSON into Lua values: objects and arrays become tables,
// null becomes nil.
func Decode(L *lua.LState, data []byte, lim Limits) (lua.LValue, error) {
	lim = lim.withDefaults()
	if len(data) > lim.MaxBytes {
		return lua.LNil, fmt.Errorf("decoding JSON: %d bytes: %w (limit %d)", len(data), ErrTooLarge, lim.MaxBytes)
	}
	d := decoder{L: L, data: data, lim: lim}
	d.skipSpace()
	v, err := d.value(0)
	if err != nil {
		return lua.LNil, err
	}
	d.skipSpace()
	if d.pos != len(d.data) {
		return lua.LNil, d.errorf("unexpected %q after top-level value", d.data[d.pos])
	}
	return v, nil
}

type decoder struct {
	L     *lua.LState
	data  []byte
	pos   int
	nodes int
	lim   Limits
	buf   []byte // scratch for strings with escapes
	// Members of the containers being parsed, stacked across nesting
	// levels, so each table is created once at its exact size: growing
	// tables costs 3x more (lua-runtime.md §1.9), and scanning ahead to
	// count members made nested input quadratic.
	keys []string
	vals []lua.LValue
}

func (d *decoder) errorf(format string, args ...any) error {
	line, col := 1, 1
	for i := 0; i < d.pos && i < len(d.data); i++ {
		if d.data[i] == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return fmt.Errorf("decoding JSON at line %d, column %d: %s", line, col, fmt.Sprintf(format, args...))
}

func (d *decoder) skipSpace() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *decoder) value(depth int) (lua.LValue, error) {
	if d.pos >= len(d.data) {
		return lua.LNil, d.errorf("unexpected end of input")
	}
	d.nodes++
	if d.nodes > d.lim.MaxNodes {
		return lua.LNil, fmt.Errorf("decoding JSON: more than %d values: %w", d.lim.MaxNodes, ErrTooLarge)
	}
	if d.nodes&stopEvery == 0 && d.lim.Stop != nil {
		if err := stopped(d.lim.Stop); err != nil {
			return lua.LNil, fmt.Errorf("decoding JSON: %w", err)
		}
	}
	switch c := d.data[d.pos]; {
	case c == '{':
		if depth >= d.lim.MaxDepth {
			return lua.LNil, fmt.Errorf("decoding JSON: deeper than %d levels: %w", d.lim.MaxDepth, ErrTooDeep)
		}
		return d.object(depth + 1)
	case c == '[':
		if depth >= d.lim.MaxDepth {
			return lua.LNil, fmt.Errorf("decoding JSON: deeper than %d levels: %w", d.lim.MaxDepth, ErrTooDeep)
		}
		return d.array(depth + 1)
	case c == '"':
		s, err := d.str()
		if err != nil {
			return lua.LNil, err
		}
		return lua.LString(s), nil
	case c == 't':
		return d.literal("true", lua.LTrue)
	case c == 'f':
		return d.literal("false", lua.LFalse)
	case c == 'n':
		return d.literal("null", lua.LNil)
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return lua.LNil, d.errorf("unexpected %q", c)
	}
}

func (d *decoder) literal(word string, v lua.LValue) (lua.LValue, error) {
	if len(d.data)-d.pos < len(word) || string(d.data[d.pos:d.pos+len(word)]) != word {
		return lua.LNil, d.errorf("invalid literal, expected %s", word)
	}
	d.pos += len(word)
	return v, nil
}

func (d *decoder) object(depth int) (lua.LValue, error) {
	d.pos++ // {
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return d.L.CreateTable(0, 0), nil
	}
	base := len(d.keys)
	defer func() { d.keys, d.vals = d.keys[:base], d.vals[:base] }()
	for {
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return lua.LNil, d.errorf("expected a string key")
		}
		k, err := d.key()
		if err != nil {
			return lua.LNil, err
		}
		d.skipSpace()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return lua.LNil, d.errorf("expected ':' after object key %q", k)
		}
		d.pos++
		d.skipSpace()
		v, err := d.value(depth)
		if err != nil {
			return lua.LNil, err
		}
		if v != lua.LNil {
			d.keys = append(d.keys, k)
			d.vals = append(d.vals, v)
		}
		d.skipSpace()
		if d.pos >= len(d.data) {
			return lua.LNil, d.errorf("unexpected end of input in object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
			t := d.L.CreateTable(0, len(d.keys)-base)
			for i := base; i < len(d.keys); i++ {
				t.RawSetString(d.keys[i], d.vals[i])
			}
			return t, nil
		default:
			return lua.LNil, d.errorf("expected ',' or '}' in object, found %q", d.data[d.pos])
		}
	}
}

func (d *decoder) array(depth int) (lua.LValue, error) {
	d.pos++ // [
	d.skipSpace()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		t := d.L.CreateTable(0, 0)
		MarkArray(d.L, t)
		return t, nil
	}
	base := len(d.vals)
	defer func() { d.keys, d.vals = d.keys[:base], d.vals[:base] }()
	for {
		d.skipSpace()
		v, err := d.value(depth)
		if err != nil {
			return lua.LNil, err
		}
		// Keys stay aligned with vals; arrays leave them empty.
		d.keys = append(d.keys, "")
		d.vals = append(d.vals, v)
		d.skipSpace()
		if d.pos >= len(d.data) {
			return lua.LNil, d.errorf("unexpected end of input in array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			t := d.L.CreateTable(len(d.vals)-base, 0)
			for i := base; i < len(d.vals); i++ {
				// null elements leave holes, as they must in Lua.
				if d.vals[i] != lua.LNil {
					t.RawSetInt(i-base+1, d.vals[i])
				}
			}
			return t, nil
		default:
			return lua.LNil, d.errorf("expected ',' or ']' in array, found %q", d.data[d.pos])
		}
	}
}

func (d *decoder) number() (lua.LValue, error) {
	start := d.pos
	if d.data[d.pos] == '-' {
		d.pos++
	}
	isInt := true
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c >= '0' && c <= '9' {
			d.pos++
			continue
		}
		if c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			isInt = false
			d.pos++
			continue
		}
		break
	}
	s := d.data[start:d.pos]
	if !jsonNumber(s) {
		d.pos = start
		return lua.LNil, d.errorf("invalid number %q", d.data[start:min(len(d.data), start+24)])
	}
	if isInt && len(s) < 16 && len(s) > 0 && s[len(s)-1] != '-' {
		// Fast path: small integers without strconv.
		neg := s[0] == '-'
		if neg {
			s = s[1:]
		}
		if len(s) > 0 {
			n := int64(0)
			for _, c := range s {
				n = n*10 + int64(c-'0')
			}
			if neg {
				n = -n
			}
			return lua.LNumber(n), nil
		}
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.pos]), 64)
	if err != nil {
		d.pos = start
		return lua.LNil, d.errorf("invalid number %q", d.data[start:min(len(d.data), start+24)])
	}
	return lua.LNumber(f), nil
}

// commonKeys interns the object keys of Coopr tasks, so decoding a task
// does not allocate a string per key. It is read-only.
var commonKeys = func() map[string]string {
	m := make(map[string]string)
	for _, k := range []string{
		"taskId", "jobId", "clusterId", "taskName", "nodeId", "config", "cluster", "service", "name", "action",
		"type", "fields", "hostname", "ipaddresses", "access_v4", "bind_v4", "ipaddress", "nodenum", "sshuser",
		"hardwaretype", "imagetype", "flavor", "image", "automators", "services", "provider", "providertype",
		"provisioner", "label", "description", "icon", "version", "nodes", "providerid", "ssh-auth", "user",
		"password", "identityfile", "ssh_host_keys", "rsa", "ed25519", "ecdsa", "script", "args", "ports",
	} {
		m[k] = k
	}
	return m
}()

// key parses an object key, interning common ones.
func (d *decoder) key() (string, error) {
	if end := d.pos + 1; end < len(d.data) {
		for i := end; i < len(d.data) && i-end < 32; i++ {
			c := d.data[i]
			if c == '"' {
				if k, ok := commonKeys[string(d.data[end:i])]; ok {
					d.pos = i + 1
					return k, nil
				}
				break
			}
			if c == '\\' || c < 0x20 {
				break
			}
		}
	}
	return d.str()
}

// str parses a JSON string at d.pos (on the opening quote).
func (d *decoder) str() (string, error) {
	d.pos++
	start := d.pos
	// Fast path: no escapes.
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		if c == '"' {
			s := string(d.data[start:d.pos])
			d.pos++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", d.errorf("control character in string")
		}
		d.pos++
	}
	d.buf = append(d.buf[:0], d.data[start:d.pos]...)
	for d.pos < len(d.data) {
		c := d.data[d.pos]
		switch {
		case c == '"':
			d.pos++
			return string(d.buf), nil
		case c < 0x20:
			return "", d.errorf("control character in string")
		case c != '\\':
			d.buf = append(d.buf, c)
			d.pos++
			continue
		}
		d.pos++
		if d.pos >= len(d.data) {
			break
		}
		e := d.data[d.pos]
		d.pos++
		switch e {
		case '"', '\\', '/':
			d.buf = append(d.buf, e)
		case 'b':
			d.buf = append(d.buf, '\b')
		case 'f':
			d.buf = append(d.buf, '\f')
		case 'n':
			d.buf = append(d.buf, '\n')
		case 'r':
			d.buf = append(d.buf, '\r')
		case 't':
			d.buf = append(d.buf, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair, or U+FFFD; an escape after a lone surrogate is
				// read on its own (as encoding/json does), not swallowed.
				pair := false
				if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
					save := d.pos
					d.pos += 2
					r2, ok2 := d.hex4()
					if !ok2 {
						return "", d.errorf("invalid \\u escape")
					}
					if dr := utf16.DecodeRune(r, r2); dr != utf8.RuneError {
						r, pair = dr, true
					} else {
						d.pos = save
					}
				}
				if !pair {
					r = utf8.RuneError
				}
			}
			d.buf = utf8.AppendRune(d.buf, r)
		default:
			return "", d.errorf("invalid escape \\%c", e)
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *decoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.pos += 4
	return r, true
}

// jsonNumber reports whether s is a number as JSON spells it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? ("01", "1." and ".5" are
// not, though strconv would take them).
func jsonNumber(s []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}
