package redact

// The redactor before issue 20 item 4 (plain, percent-, JSON- and
// quote-escaped forms, one strings.Contains per form), kept as the
// baseline of BenchmarkRedact.

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// legacySet is the secrets of one task. The zero value is not usable; a nil *legacySet
// redacts nothing. It is safe for concurrent use.
type legacySet struct {
	mu          sync.RWMutex
	legacyForms []legacyForm // longest first, so a secret containing another goes whole
	seen        map[string]bool
}

// legacyForm is one spelling of a secret. Field secrets (the values of sensitive
// definition fields) are also removed from result data; other secrets (an
// ssh-auth password, a credential a binding registers) are data the next
// tasks may legitimately need, so results keep them.
type legacyForm struct {
	s     string
	field bool
}

// New returns an empty set.
func newLegacy() *legacySet { return &legacySet{seen: map[string]bool{}} }

// Add registers a secret that must not appear in messages, output, logs or
// errors.
func (s *legacySet) Add(v string) { s.add(v, false) }

// AddField registers the value of a sensitive definition field: like Add,
// and it is also removed from result data.
func (s *legacySet) AddField(v string) { s.add(v, true) }

// AddNumber registers a numeric sensitive value (a PIN, an account number)
// in the spellings a number takes in text.
func (s *legacySet) AddNumber(f float64, field bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	s.add(strconv.FormatFloat(f, 'f', -1, 64), field)
	s.add(strconv.FormatFloat(f, 'g', 14, 64), field) // Lua's tostring
}

func (s *legacySet) add(v string, field bool) {
	if s == nil || len(v) < MinLen {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := v
	if field {
		key = "\x00" + v
	}
	if s.seen[key] {
		return
	}
	s.seen[key] = true
	for _, f := range legacySpellings(v) {
		s.legacyForms = append(s.legacyForms, legacyForm{s: f, field: field})
	}
	sort.SliceStable(s.legacyForms, func(i, j int) bool { return len(s.legacyForms[i].s) > len(s.legacyForms[j].s) })
}

// legacySpellings returns v and each distinct encoded form of it.
func legacySpellings(v string) []string {
	out := []string{v}
	addForm := func(f string) {
		if len(f) < MinLen {
			return
		}
		for _, x := range out {
			if x == f {
				return
			}
		}
		out = append(out, f)
	}
	addForm(url.QueryEscape(v))
	addForm(url.PathEscape(v))
	if b, err := json.Marshal(v); err == nil {
		addForm(string(b[1 : len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		addForm(string(b[1 : len(b)-1]))
	}
	q := strconv.Quote(v)
	addForm(q[1 : len(q)-1])
	q = strconv.QuoteToASCII(v)
	addForm(q[1 : len(q)-1])
	addForm(legacyLuaQuote(v))
	return out
}

// legacyLuaQuote is the inside of Lua 5.1's string.format("%q", v).
func legacyLuaQuote(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString("\\\n")
		case '\r':
			b.WriteString("\\r")
		case 0:
			b.WriteString("\\000")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// Empty reports whether no secret is registered.
func (s *legacySet) Empty() bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.legacyForms) == 0
}

// String removes every secret from str.
func (s *legacySet) String(str string) string { return s.replace(str, false) }

// Data removes field secrets from str: for result data, where other
// credentials may be what the next task needs.
func (s *legacySet) Data(str string) string { return s.replace(str, true) }

func (s *legacySet) replace(str string, fieldsOnly bool) string {
	if s == nil || len(str) < MinLen {
		return str
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.legacyForms {
		if fieldsOnly && !f.field {
			continue
		}
		if strings.Contains(str, f.s) {
			str = strings.ReplaceAll(str, f.s, Marker)
		}
	}
	if strings.Contains(str, legacyCutMark) {
		str = s.dangling(str, fieldsOnly)
	}
	return str
}

// legacyCutMark is what loom's bindings append where they cut text short.
const legacyCutMark = "..."

// dangling removes the start of a secret left just before a cut mark: a
// binding that cut an error message or a command in the middle of a secret
// before handing it over. Called with the read lock held.
func (s *legacySet) dangling(str string, fieldsOnly bool) string {
	var b strings.Builder
	rest := str
	// A text full of "..." must not cost forms × marks × length: real
	// cuts are few, so only the first maxCuts marks are looked at.
	const maxCuts = 16
	for checked := 0; ; checked++ {
		i := strings.Index(rest, legacyCutMark)
		if i < 0 || checked == maxCuts {
			b.WriteString(rest)
			return b.String()
		}
		head := rest[:i]
		for _, f := range s.legacyForms {
			if fieldsOnly && !f.field {
				continue
			}
			if n := legacyPrefixAtEnd(head, f.s); n > 0 {
				head = head[:len(head)-n] + Marker
				break
			}
		}
		b.WriteString(head)
		b.WriteString(legacyCutMark)
		rest = rest[i+len(legacyCutMark):]
	}
}

// legacyPrefixAtEnd is the length of the longest proper prefix of secret, at
// least MinLen long, that head ends with; 0 if none.
func legacyPrefixAtEnd(head, secret string) int {
	for n := min(len(secret)-1, len(head)); n >= MinLen; n-- {
		if strings.HasSuffix(head, secret[:n]) {
			return n
		}
	}
	return 0
}

// Value returns v with secrets removed from every string in it: map keys
// and values, array elements, nested to any depth. A number whose text is
// a secret becomes the marker. Maps and slices are copied, never changed
// in place. With fieldsOnly, only field secrets are removed (result data).
func (s *legacySet) Value(v any, fieldsOnly bool) any {
	if s.Empty() {
		return v
	}
	return s.value(v, fieldsOnly)
}

func (s *legacySet) value(v any, fieldsOnly bool) any {
	switch x := v.(type) {
	case string:
		return s.replace(x, fieldsOnly)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[s.replace(k, fieldsOnly)] = s.value(e, fieldsOnly)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = s.value(e, fieldsOnly)
		}
		return out
	case float64:
		if s.isNumber(strconv.FormatFloat(x, 'f', -1, 64), fieldsOnly) {
			return Marker
		}
	case json.Number:
		if s.isNumber(string(x), fieldsOnly) {
			return Marker
		}
	}
	return v
}

func (s *legacySet) isNumber(text string, fieldsOnly bool) bool {
	if len(text) < MinLen {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.legacyForms {
		if f.s == text && (f.field || !fieldsOnly) {
			return true
		}
	}
	return false
}
