package repl

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// Limits of the pretty-printer. They keep one careless `=_G` or a
// megabyte string from flooding the terminal.
const (
	maxDepth      = 8   // nested tables deeper than this print as {...}
	maxEntries    = 200 // entries shown per table
	maxString     = 400 // bytes of a string shown before truncating
	inlineWidth   = 72  // a table of scalars this short prints on one line
	indentPerStep = "  "
)

// Format pretty-prints a Lua value the way the REPL shows results: tables
// indented with their keys sorted (the array part first), cycles marked,
// long strings truncated with a note. It reads tables raw and never calls
// metamethods, so printing cannot run plugin code.
func Format(v lua.LValue) string {
	p := &printer{onPath: map[*lua.LTable]string{}}
	p.value(v, 0, "")
	return p.b.String()
}

type printer struct {
	b      strings.Builder
	onPath map[*lua.LTable]string // tables being printed -> their path
}

func (p *printer) value(v lua.LValue, depth int, path string) {
	switch x := v.(type) {
	case *lua.LTable:
		p.table(x, depth, path)
	case lua.LString:
		p.b.WriteString(quoteTruncated(string(x)))
	default:
		p.b.WriteString(scalar(v))
	}
}

// scalar formats a non-table, non-string value.
func scalar(v lua.LValue) string {
	switch x := v.(type) {
	case lua.LNumber:
		return formatNumber(float64(x))
	case lua.LBool:
		return strconv.FormatBool(bool(x))
	case *lua.LNilType:
		return "nil"
	case *lua.LFunction:
		if x.IsG || x.Proto == nil {
			return "function: builtin"
		}
		return fmt.Sprintf("function: %s:%d", x.Proto.SourceName, x.Proto.LineDefined)
	case lua.LString:
		return quoteTruncated(string(x))
	default:
		return fmt.Sprintf("%s: %p", v.Type(), v)
	}
}

// formatNumber prints a number as Lua does ("%.14g").
func formatNumber(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return fmt.Sprintf("%.14g", f)
}

// quoteTruncated quotes s as a Lua string literal, keeping at most
// maxString bytes and saying how much was cut.
func quoteTruncated(s string) string {
	if len(s) <= maxString {
		return quote(s)
	}
	cut := maxString
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (truncated: %d of %d bytes shown)", quote(s[:cut]), cut, len(s))
}

// quote writes s as a Lua 5.1 string literal.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == utf8.RuneError && size == 1, r < 0x20, r == 0x7f:
			fmt.Fprintf(&b, `\%03d`, s[i])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// entry is one key/value of a table being printed.
type entry struct {
	key, val lua.LValue
}

func (p *printer) table(t *lua.LTable, depth int, path string) {
	if at, ok := p.onPath[t]; ok {
		if at == "" {
			at = "the top"
		}
		fmt.Fprintf(&p.b, "<cycle: back to %s>", at)
		return
	}
	arr, rest := sortedEntries(t)
	if len(arr)+len(rest) == 0 {
		p.b.WriteString("{}")
		return
	}
	if depth >= maxDepth {
		p.b.WriteString("{...} (nested too deep to show)")
		return
	}
	if line, ok := inline(arr, rest); ok {
		p.b.WriteString(line)
		return
	}
	p.onPath[t] = path
	defer delete(p.onPath, t)
	ind := strings.Repeat(indentPerStep, depth+1)
	p.b.WriteString("{\n")
	shown := 0
	total := len(arr) + len(rest)
	for i, v := range arr {
		if shown == maxEntries {
			break
		}
		p.b.WriteString(ind)
		p.value(v, depth+1, fmt.Sprintf("%s[%d]", path, i+1))
		p.b.WriteString(",\n")
		shown++
	}
	for _, e := range rest {
		if shown == maxEntries {
			break
		}
		p.b.WriteString(ind)
		k, sub := keyText(e.key, path)
		p.b.WriteString(k)
		p.b.WriteString(" = ")
		p.value(e.val, depth+1, sub)
		p.b.WriteString(",\n")
		shown++
	}
	if shown < total {
		fmt.Fprintf(&p.b, "%s-- ... %d more entries not shown\n", ind, total-shown)
	}
	p.b.WriteString(strings.Repeat(indentPerStep, depth))
	p.b.WriteString("}")
}

// inline renders a short table of scalars on one line.
func inline(arr []lua.LValue, rest []entry) (string, bool) {
	parts := make([]string, 0, len(arr)+len(rest))
	n := 0
	for _, v := range arr {
		if _, ok := v.(*lua.LTable); ok {
			return "", false
		}
		s := scalar(v)
		n += len(s) + 2
		parts = append(parts, s)
	}
	for _, e := range rest {
		if _, ok := e.val.(*lua.LTable); ok {
			return "", false
		}
		k, _ := keyText(e.key, "")
		s := k + " = " + scalar(e.val)
		n += len(s) + 2
		parts = append(parts, s)
	}
	if n > inlineWidth {
		return "", false
	}
	return "{ " + strings.Join(parts, ", ") + " }", true
}

// keyText renders a key as in a table constructor, and the path of its
// value (for cycle notes).
func keyText(k lua.LValue, path string) (string, string) {
	if s, ok := k.(lua.LString); ok {
		if isIdent(string(s)) {
			return string(s), path + "." + string(s)
		}
		q := quote(string(s))
		return "[" + q + "]", path + "[" + q + "]"
	}
	ks := "[" + scalar(k) + "]"
	return ks, path + ks
}

// sortedEntries splits a table into its array part (1..n without holes)
// and the other entries, sorted: numbers, then strings, then booleans,
// then anything else by type and address.
func sortedEntries(t *lua.LTable) ([]lua.LValue, []entry) {
	var rest []entry
	t.ForEach(func(k, v lua.LValue) { rest = append(rest, entry{k, v}) })
	n := 0
	for {
		v := t.RawGetInt(n + 1)
		if v == lua.LNil {
			break
		}
		n++
	}
	arr := make([]lua.LValue, 0, n)
	for i := 1; i <= n; i++ {
		arr = append(arr, t.RawGetInt(i))
	}
	kept := rest[:0]
	for _, e := range rest {
		if num, ok := e.key.(lua.LNumber); ok && float64(num) == math.Trunc(float64(num)) && num >= 1 && int(num) <= n {
			continue
		}
		kept = append(kept, e)
	}
	rest = kept
	rank := func(v lua.LValue) int {
		switch v.(type) {
		case lua.LNumber:
			return 0
		case lua.LString:
			return 1
		case lua.LBool:
			return 2
		}
		return 3
	}
	sort.SliceStable(rest, func(i, j int) bool {
		a, b := rest[i].key, rest[j].key
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		switch x := a.(type) {
		case lua.LNumber:
			return x < b.(lua.LNumber)
		case lua.LString:
			return x < b.(lua.LString)
		case lua.LBool:
			return !bool(x) && bool(b.(lua.LBool))
		}
		return fmt.Sprintf("%s %p", a.Type(), a) < fmt.Sprintf("%s %p", b.Type(), b)
	})
	return arr, rest
}

// luaKeywords returns Lua 5.1's reserved words, which are never names.
func luaKeywords() []string {
	return []string{"and", "break", "do", "else", "elseif", "end", "false", "for", "function",
		"if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"}
}

// isIdent reports whether s can be written as a bare Lua name.
func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	for _, k := range luaKeywords() {
		if s == k {
			return false
		}
	}
	return true
}
