package redact

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

func TestSpellingsAndValues(t *testing.T) {
	s := New()
	s.AddField(`p@ss/w+rd"x`)
	s.Add("ssh-pass-123")
	s.AddNumber(48151623, true)
	for _, in := range []string{
		`p@ss/w+rd"x`, `p%40ss%2Fw%2Brd%22x`, `p@ss%2Fw+rd%22x`, `p@ss/w+rd\"x`, "pin 48151623", "ssh-pass-123",
		"cut p@ss/w...", `"cut p@ss/w..."`,
	} {
		if out := s.String(in); strings.Contains(out, "p@ss") || strings.Contains(out, "%40ss") || strings.Contains(out, "48151623") || strings.Contains(out, "ssh-pass") {
			t.Errorf("String(%q) = %q", in, out)
		}
	}
	// Result data keeps non-field credentials: the next task needs them.
	if got := s.Data("ssh-pass-123"); got != "ssh-pass-123" {
		t.Errorf("Data kept no ssh password: %q", got)
	}
	v := s.Value(map[string]any{`p@ss/w+rd"x`: []any{"a p@ss/w+rd\"x", 48151623.0, map[string]any{"n": json.Number("48151623")}}}, true)
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "p@ss") || strings.Contains(string(b), "48151623") || !strings.Contains(string(b), Marker) {
		t.Errorf("Value = %s", b)
	}
	// Short values and "..." alone are left alone.
	s.Add("abc")
	if got := s.String("abc... and more..."); got != "abc... and more..." {
		t.Errorf("short secret redacted: %q", got)
	}
	var nilSet *Set
	if nilSet.String("x") != "x" || !nilSet.Empty() {
		t.Error("a nil set must redact nothing")
	}
}

// encodedSecrets are secrets with characters every encoding changes.
var encodedSecrets = []string{
	"S3cr3t Token#Value/1234", // the issue's: a space, a #, a slash
	"Sk-9f/a+b\"c&d<e>f\ng-TAIL",
	"hunter22",
	"ÄÖÜ-passwört-ßecret", // not ASCII
	"abcd",                // the shortest redacted secret
}

// encodings are the standard spellings of a secret (issue 20 item 4),
// each with a name; blob forms are checked in TestBase64Blob.
func encodings(s string) map[string]string {
	b := []byte(s)
	forms := map[string]string{
		"upper":         strings.ToUpper(s),
		"lower":         strings.ToLower(s),
		"mixed case":    mixedCase(s),
		"base64":        base64.StdEncoding.EncodeToString(b),
		"base64 raw":    base64.RawStdEncoding.EncodeToString(b),
		"base64url":     base64.URLEncoding.EncodeToString(b),
		"base64url raw": base64.RawURLEncoding.EncodeToString(b),
		"hex":           hex.EncodeToString(b),
		"HEX":           strings.ToUpper(hex.EncodeToString(b)),
		"query":         url.QueryEscape(s),
		"path":          url.PathEscape(s),
		"query, upper":  strings.ToUpper(url.QueryEscape(s)),
		"path, lower":   strings.ToLower(url.PathEscape(s)),
	}
	// A secret pasted into a URL that is parsed and printed again: each
	// part escaped as its component is (path, query, fragment).
	for name, raw := range map[string]string{
		"url path":     "https://api.example.com/v2/" + s,
		"url query":    "https://api.example.com/v2?token=" + s,
		"url userinfo": "https://u:" + url.PathEscape(s) + "@api.example.com/",
	} {
		if u, err := url.Parse(raw); err == nil {
			forms[name] = u.String()
		}
	}
	forms["url path-only"] = (&url.URL{Scheme: "https", Host: "h", Path: "/x/" + s}).String()
	forms["url values"] = url.Values{"t": {s}}.Encode()
	return forms
}

func mixedCase(s string) string {
	b := []byte(s)
	for i := range b {
		if i%2 == 0 && b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 'a' - 'A'
		} else if b[i] >= 'A' && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}

// survives reports whether text still holds secret s: plainly (in any
// case) or once percent-decoded.
func survives(text, s string) bool {
	if strings.Contains(strings.ToLower(text), strings.ToLower(s)) {
		return true
	}
	if d, err := url.PathUnescape(text); err == nil && strings.Contains(strings.ToLower(d), strings.ToLower(s)) {
		return true
	}
	if d, err := url.QueryUnescape(text); err == nil && strings.Contains(strings.ToLower(d), strings.ToLower(s)) {
		return true
	}
	return false
}

func TestEncodings(t *testing.T) {
	for _, secret := range encodedSecrets {
		s := New()
		s.Add(secret)
		for name, form := range encodings(secret) {
			text := "before " + form + " after"
			out := s.String(text)
			if strings.Contains(out, form) || survives(out, secret) || !strings.Contains(out, Marker) {
				t.Errorf("%q, %s: String(%q) = %q", secret, name, text, out)
			}
		}
	}
}

// TestBase64Blob: a secret inside a longer base64 blob (an HTTP Basic
// header's "user:password", a JSON document encoded whole) is removed at
// each of the three alignments it may take, padded or not, in both
// alphabets: every character that depends on the secret's bytes alone
// is gone.
func TestBase64Blob(t *testing.T) {
	for _, secret := range []string{"S3cr3t Token#Value/1234", "hunter22", "12345", "\xff\xfe\xfd\xfc\xfb\xfa"} {
		s := New()
		s.Add(secret)
		for pre := 0; pre < 6; pre++ {
			for post := 0; post < 4; post++ {
				prefix, suffix := strings.Repeat("u", pre)+":", strings.Repeat("!", post)
				data := []byte(prefix + secret + suffix)
				for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
					blob := enc.EncodeToString(data)
					out := s.String("Authorization: Basic " + blob)
					core := blob[(8*len(prefix)+5)/6 : 8*(len(prefix)+len(secret))/6]
					if strings.Contains(out, core) {
						t.Errorf("%q at offset %d: %q keeps %q", secret, len(prefix), out, core)
					}
				}
			}
		}
	}
}

// TestNoFalsePositives: text that merely looks like the forms is kept.
func TestNoFalsePositives(t *testing.T) {
	s := New()
	s.Add("S3cr3t Token#Value/1234")
	s.Add("hunter22")
	for _, text := range []string{
		"the quick brown fox jumps over the lazy dog",
		"SHVudGVyMjI=", // base64 of Hunter22
		"aHVudGVy",     // base64 of hunter
		"68756e7465723231",
		"S3cr3t Token#Value/123",
		"https://api.example.com/v2/S3cr3t%20Token",
	} {
		if out := s.String(text); out != text {
			t.Errorf("String(%q) = %q", text, out)
		}
	}
}
