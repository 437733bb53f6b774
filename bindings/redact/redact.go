// Package redact holds the secrets of one task and removes them from
// everything that leaves the task: messages, output, logs, error tables,
// results. A secret is removed in the standard forms a plugin, a library
// or a log line may have written it in:
//
//   - as it is, in any letter case (ASCII; a non-ASCII secret also as Go's
//     strings.ToUpper and ToLower spell it);
//   - percent-encoded, wholly or in part, in either case of hex digit: the
//     text is also searched percent-decoded, so a secret pasted into a URL
//     that was parsed and printed again (`S3cr3t Token#Value/1234` became
//     `S3cr3t%20Token#Value/1234`), url.PathEscape, url.QueryEscape (a
//     space as "+") and url.Values.Encode forms are all found;
//   - JSON-escaped (with and without HTML escaping), quoted by Go's %q
//     (also ASCII-only) and by Lua's %q;
//   - hex, in either case;
//   - base64, standard and URL alphabets, padded or not, on its own or
//     inside a longer base64 text (an HTTP Basic header's "user:password",
//     a whole JSON document encoded) at each of the three alignments the
//     secret's bytes may take there: the characters that depend on its
//     bytes alone are found, and the two characters beside them that
//     depend partly on it are removed with them, padding included. A
//     secret of 4 bytes is found only as its own whole encoding (its
//     shifted forms are 4 or 5 characters, too short to be told from
//     other text).
//
// What it does not catch: a secret a plugin transforms some other way
// (reversed, hashed, encrypted, split over two lines, base32, base64
// cut by line breaks), or two encodings stacked (hex of base64). A plugin
// is trusted with the secrets of the tasks it runs.
//
// Redaction must run before any truncation: cutting first would leave a
// secret's first characters behind.
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Marker replaces a secret.
const Marker = "[REDACTED]"

// MinLen is the shortest value redacted. Redacting "a" or "on" everywhere
// would destroy every message and protect nothing.
const MinLen = 4

// minDerived is the shortest base64 form searched for: shorter ones would
// match ordinary text.
const minDerived = 6

// Set is the secrets of one task. The zero value is not usable; a nil *Set
// redacts nothing. It is safe for concurrent use.
type Set struct {
	mu    sync.RWMutex
	forms []form
	seen  map[string]bool
	// index finds candidate forms by their first four bytes, lower-cased;
	// pairs is a bitmap of their first two in every letter case, so a scan
	// tests one bit per byte of text whatever the number of forms.
	index map[uint32][]int32
	pairs [1 << 16 / 64]uint64
}

// form is one spelling of a secret, lower-cased (ASCII). Field secrets
// (the values of sensitive definition fields) are also removed from
// result data; other secrets (an ssh-auth password, a credential a binding
// registers) are data the next tasks may legitimately need, so results
// keep them.
type form struct {
	s     string
	field bool
	// plain is the secret itself (numbers compare against it).
	plain bool
	// b64 marks a base64 form; lead and trail are how many characters
	// next to a match partly depend on the secret and go with it.
	b64         bool
	lead, trail uint8
}

// New returns an empty set.
func New() *Set { return &Set{seen: map[string]bool{}, index: map[uint32][]int32{}} }

// Add registers a secret that must not appear in messages, output, logs or
// errors.
func (s *Set) Add(v string) { s.add(v, false) }

// AddField registers the value of a sensitive definition field: like Add,
// and it is also removed from result data.
func (s *Set) AddField(v string) { s.add(v, true) }

// AddNumber registers a numeric sensitive value (a PIN, an account number)
// in the spellings a number takes in text.
func (s *Set) AddNumber(f float64, field bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return
	}
	s.add(strconv.FormatFloat(f, 'f', -1, 64), field)
	s.add(strconv.FormatFloat(f, 'g', 14, 64), field) // Lua's tostring
}

func (s *Set) add(v string, field bool) {
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
	have := map[string]bool{}
	for _, f := range s.forms {
		if f.field == field {
			have[f.s] = true
		}
	}
	for _, f := range spellings(v) {
		f.field = field
		if len(f.s) < MinLen || have[f.s] {
			continue
		}
		have[f.s] = true
		s.forms = append(s.forms, f)
		k := anchor(f.s)
		s.index[k] = append(s.index[k], int32(len(s.forms)-1))
		for _, a := range cases(f.s[0]) {
			for _, b := range cases(f.s[1]) {
				p := uint32(a) | uint32(b)<<8
				s.pairs[p/64] |= 1 << (p % 64)
			}
		}
	}
}

// spellings returns the forms of v, lower-cased.
func spellings(v string) []form {
	var out []form
	text := func(f string) { out = append(out, form{s: lower(f)}) }
	out = append(out, form{s: lower(v), plain: true})
	if !isASCII(v) {
		text(strings.ToUpper(v))
		text(strings.ToLower(v))
	}
	if strings.Contains(v, " ") {
		text(strings.ReplaceAll(v, " ", "+")) // query escaping, then decoded
	}
	// Percent-encoded forms are also found in the decoded text; these
	// stay for a cut that falls inside one (dangling), and for text whose
	// decoding goes astray (a "%2" just before a secret starting "0").
	text(url.QueryEscape(v))
	text(url.PathEscape(v))
	text((&url.URL{Fragment: v}).EscapedFragment())
	// v pasted into a URL that was parsed and printed again: each part
	// escaped as the component it landed in.
	for _, prefix := range []string{"http://h/", "http://h/?", "http://h/#"} {
		if u, err := url.Parse(prefix + v); err == nil {
			if p, ok := strings.CutPrefix(u.String(), prefix); ok {
				text(p)
			}
		}
	}
	if b, err := json.Marshal(v); err == nil {
		text(string(b[1 : len(b)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) == nil {
		b := bytes.TrimSpace(buf.Bytes())
		text(string(b[1 : len(b)-1]))
	}
	q := strconv.Quote(v)
	text(q[1 : len(q)-1])
	q = strconv.QuoteToASCII(v)
	text(q[1 : len(q)-1])
	text(luaQuote(v))
	text(hex.EncodeToString([]byte(v)))
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		out = append(out, base64Forms(enc, v)...)
	}
	return out
}

// base64Forms are v's base64 forms in enc: its whole encoding, and the
// characters that depend on v alone when it sits at byte offset 0, 1 or
// 2 (mod 3) of a longer text.
func base64Forms(enc *base64.Encoding, v string) []form {
	n := len(v)
	whole := enc.EncodeToString([]byte(v))
	out := []form{{s: lower(whole), b64: true}}
	if len(whole) < minDerived {
		out = nil
	}
	for k := 0; k < 3; k++ {
		pad := make([]byte, k, k+n)
		e := enc.EncodeToString(append(pad, v...))
		// Characters 6i..6i+6 bits: those within v's bits [8k, 8k+8n).
		first, last := (8*k+5)/6, 8*(k+n)/6
		if last-first < minDerived || (k == 0 && last == len(whole)) {
			continue
		}
		f := form{s: lower(e[first:last]), b64: true}
		if 8*k%6 != 0 {
			f.lead = 1
		}
		if 8*(k+n)%6 != 0 {
			f.trail = 1
		}
		out = append(out, f)
	}
	return out
}

// luaQuote is the inside of Lua 5.1's string.format("%q", v).
func luaQuote(v string) string {
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

// fold lower-cases ASCII letters.
var fold = func() (t [256]byte) {
	for i := range t {
		t[i] = byte(i)
		if i >= 'A' && i <= 'Z' {
			t[i] = byte(i) + 'a' - 'A'
		}
	}
	return t
}()

func lower(s string) string {
	for i := 0; i < len(s); i++ {
		if fold[s[i]] != s[i] {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = fold[b[j]]
			}
			return string(b)
		}
	}
	return s
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// cases is c (lower-cased) and, for a letter, its upper case.
func cases(c byte) []byte {
	if c >= 'a' && c <= 'z' {
		return []byte{c, c - 'a' + 'A'}
	}
	return []byte{c}
}

// anchor is a form's first four bytes as a little-endian word.
func anchor(s string) uint32 {
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// Empty reports whether no secret is registered.
func (s *Set) Empty() bool {
	if s == nil {
		return true
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.forms) == 0
}

// String removes every secret from str.
func (s *Set) String(str string) string { return s.replace(str, false) }

// Data removes field secrets from str: for result data, where other
// credentials may be what the next task needs.
func (s *Set) Data(str string) string { return s.replace(str, true) }

// span is a part of the text to replace.
type span struct{ start, end int }

func (s *Set) replace(str string, fieldsOnly bool) string {
	if s == nil || len(str) < MinLen {
		return str
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.forms) == 0 {
		return str
	}
	var spans []span
	s.scan(str, nil, fieldsOnly, &spans)
	if strings.IndexByte(str, '%') >= 0 {
		if dec, pos := percentDecode(str); pos != nil {
			s.scan(dec, pos, fieldsOnly, &spans)
		}
	}
	if len(spans) > 0 {
		str = cut(str, spans)
	}
	if strings.Contains(str, cutMark) {
		str = s.dangling(str, fieldsOnly)
	}
	return str
}

// scan finds the forms in text (case-insensitively) and adds their spans;
// pos, when set, maps text's byte offsets to the original's (text is the
// percent-decoded original). Called with the read lock held.
func (s *Set) scan(text string, pos []int, fieldsOnly bool, spans *[]span) {
	if len(text) < MinLen {
		return
	}
	pairs := &s.pairs
	last := len(text) - MinLen
	for i := 0; i <= last; i++ {
		p := uint32(text[i]) | uint32(text[i+1])<<8
		if pairs[p>>6]&(1<<(p&63)) == 0 {
			continue
		}
		k := uint32(fold[text[i]]) | uint32(fold[text[i+1]])<<8 | uint32(fold[text[i+2]])<<16 | uint32(fold[text[i+3]])<<24
		for _, fi := range s.index[k] {
			f := &s.forms[fi]
			if fieldsOnly && !f.field || i+len(f.s) > len(text) || !foldEqual(text[i+4:i+len(f.s)], f.s[4:]) {
				continue
			}
			start, end := i, i+len(f.s)
			if f.b64 {
				start, end = widen(text, start, end, f)
			}
			if pos != nil {
				start, end = pos[start], pos[end]
			}
			*spans = append(*spans, span{start, end})
		}
	}
}

// foldEqual compares text, lower-cased, with the lower-cased form f.
func foldEqual(text, f string) bool {
	for i := 0; i < len(f); i++ {
		if fold[text[i]] != f[i] {
			return false
		}
	}
	return true
}

// widen takes in the characters beside a base64 match that depend partly
// on the secret, and the padding after it.
func widen(text string, start, end int, f *form) (int, int) {
	if f.lead > 0 && start > 0 && isBase64(text[start-1]) {
		start--
	}
	if f.trail > 0 && end < len(text) && isBase64(text[end]) {
		end++
	}
	for n := 0; n < 2 && end < len(text) && text[end] == '='; n++ {
		end++
	}
	return start, end
}

func isBase64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

// percentDecode decodes every %XX of s; pos maps each byte of the result
// (and its end) to its offset in s. nil pos: nothing to decode.
func percentDecode(s string) (string, []int) {
	var b []byte
	var pos []int
	for i := 0; i < len(s); {
		if s[i] == '%' && i+2 < len(s) && unhex(s[i+1]) >= 0 && unhex(s[i+2]) >= 0 {
			if b == nil {
				b = make([]byte, 0, len(s))
				pos = make([]int, 0, len(s)+1)
				for j := 0; j < i; j++ {
					b = append(b, s[j])
					pos = append(pos, j)
				}
			}
			b = append(b, byte(unhex(s[i+1])<<4|unhex(s[i+2])))
			pos = append(pos, i)
			i += 3
			continue
		}
		if b != nil {
			b = append(b, s[i])
			pos = append(pos, i)
		}
		i++
	}
	if b == nil {
		return "", nil
	}
	return string(b), append(pos, len(s))
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// cut replaces the union of spans in str with one marker each.
func cut(str string, spans []span) string {
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	var b strings.Builder
	b.Grow(len(str))
	at := 0
	for i := 0; i < len(spans); {
		start, end := spans[i].start, spans[i].end
		for i++; i < len(spans) && spans[i].start < end; i++ {
			end = max(end, spans[i].end)
		}
		b.WriteString(str[at:start])
		b.WriteString(Marker)
		at = end
	}
	b.WriteString(str[at:])
	return b.String()
}

// cutMark is what loom's bindings append where they cut text short.
const cutMark = "..."

// dangling removes the start of a secret left just before a cut mark: a
// binding that cut an error message or a command in the middle of a secret
// before handing it over. Called with the read lock held.
func (s *Set) dangling(str string, fieldsOnly bool) string {
	var b strings.Builder
	rest := str
	// A text full of "..." must not cost forms × marks × length: real
	// cuts are few, so only the first maxCuts marks are looked at.
	const maxCuts = 16
	for checked := 0; ; checked++ {
		i := strings.Index(rest, cutMark)
		if i < 0 || checked == maxCuts {
			b.WriteString(rest)
			return b.String()
		}
		head := rest[:i]
		for _, f := range s.forms {
			if fieldsOnly && !f.field {
				continue
			}
			if n := prefixAtEnd(head, f.s); n > 0 {
				head = head[:len(head)-n] + Marker
				break
			}
		}
		b.WriteString(head)
		b.WriteString(cutMark)
		rest = rest[i+len(cutMark):]
	}
}

// prefixAtEnd is the length of the longest proper prefix of the form f, at
// least MinLen long, that head ends with (in any case); 0 if none.
func prefixAtEnd(head, f string) int {
	for n := min(len(f)-1, len(head)); n >= MinLen; n-- {
		if foldEqual(head[len(head)-n:], f[:n]) {
			return n
		}
	}
	return 0
}

// Value returns v with secrets removed from every string in it: map keys
// and values, array elements, nested to any depth. A number whose text is
// a secret becomes the marker. Maps and slices are copied, never changed
// in place. With fieldsOnly, only field secrets are removed (result data).
func (s *Set) Value(v any, fieldsOnly bool) any {
	if s.Empty() {
		return v
	}
	return s.value(v, fieldsOnly)
}

func (s *Set) value(v any, fieldsOnly bool) any {
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

func (s *Set) isNumber(text string, fieldsOnly bool) bool {
	if len(text) < MinLen {
		return false
	}
	text = lower(text)
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, f := range s.forms {
		if f.plain && f.s == text && (f.field || !fieldsOnly) {
			return true
		}
	}
	return false
}
