package redact

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
)

// FuzzRedact (issue 20 items 4 and 6): a registered secret never survives
// redaction in any of its standard forms, whatever text surrounds it.
func FuzzRedact(f *testing.F) {
	for _, s := range []struct {
		secret, before, after string
		enc                   uint8
	}{
		{"S3cr3t Token#Value/1234", "GET https://api.example.com/v2/", " failed", 7},
		{"hunter22", "Authorization: Basic ", "", 4},
		{"dop_v1_4f9a8b7c6d5e4f3a", "token=", "&x=1", 0},
		{"p@ss/w+rd\"x", `{"password":"`, `"}`, 9},
		{"ÄÖÜ-passwört", "user: ", "\n", 1},
		{"REDA", "[REDACTED] ", "", 0},
		{"abcd", "aaaabcdddd", "%61%62%63%64", 2},
	} {
		f.Add(s.secret, s.before, s.after, s.enc)
	}
	f.Fuzz(func(t *testing.T, secret, before, after string, enc uint8) {
		if len(secret) < MinLen || len(secret) > 256 || strings.ContainsRune(secret, 0) {
			return
		}
		form, check := encode(secret, before, after, enc)
		s := New()
		s.Add(secret)
		out := s.String(before + form + after)
		// The marker itself is never a leak: cut it out before looking.
		rest := strings.ReplaceAll(out, Marker, "\x00")
		for _, c := range check {
			// ASCII case only: strings.ToLower would also turn bytes that
			// are not UTF-8 into U+FFFD and match what is not there.
			if len(c) >= MinLen && strings.Contains(lower(rest), lower(c)) {
				t.Fatalf("%q (form %d) survives in %q (from %q)", c, enc%10, out, before+form+after)
			}
		}
	})
}

// encode writes secret in form enc%10 and returns what must not survive.
func encode(secret, before, after string, enc uint8) (form string, check []string) {
	b := []byte(secret)
	switch enc % 10 {
	case 0:
		return secret, []string{secret}
	case 1:
		return strings.ToUpper(secret), []string{secret}
	case 2:
		return url.QueryEscape(secret), []string{url.QueryEscape(secret)}
	case 3:
		return url.PathEscape(secret), []string{url.PathEscape(secret)}
	case 4, 5, 6:
		// Inside a base64 text: the characters that depend on the secret
		// alone, at its alignment there (secrets of 5 bytes and more).
		e := []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding, base64.URLEncoding}[enc%10-4]
		pre := []byte(before)
		if len(pre) > 8 {
			pre = pre[:8]
		}
		blob := e.EncodeToString(append(append(pre, b...), after...))
		k := len(pre)
		core := blob[(8*k+5)/6 : 8*(k+len(b))/6]
		if len(b) < 5 {
			return blob, nil
		}
		return blob, []string{core}
	case 7:
		if u, err := url.Parse("https://h/x/" + secret); err == nil {
			p := strings.TrimPrefix(u.String(), "https://h/x/")
			if d, err := url.PathUnescape(p); err != nil || d != secret {
				return p, nil // the URL did not keep the secret whole
			}
			return p, []string{p}
		}
		return secret, []string{secret}
	case 8:
		return hex.EncodeToString(b), []string{hex.EncodeToString(b)}
	default:
		e := base64.StdEncoding.EncodeToString(b)
		return e, []string{strings.TrimRight(e, "=")}
	}
}
