package redact

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// redactor is what both the current Set and the legacy one offer.
type redactor interface{ String(string) string }

// benchSecrets are a task's secrets in two sizes: a provider task (an API
// token, a password, a PIN) and one that also logs in with a 4096-bit RSA
// key, whose every PEM line is a secret of its own.
func benchSecrets(withKey bool) []string {
	secrets := []string{"dop_v1_4f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a", "S3cr3t Token#Value/1234", "48151623"}
	if withKey {
		raw := make([]byte, 2350)
		rand.Read(raw)
		b64 := base64.StdEncoding.EncodeToString(raw)
		for i := 0; i+64 <= len(b64); i += 64 {
			secrets = append(secrets, b64[i:i+64])
		}
	}
	return secrets
}

// benchText is n bytes of log-like text; leaks puts each secret in it
// once, in a different encoding each time.
func benchText(n int, secrets []string, leaks bool) string {
	line := "2026-11-25T17:37:41Z INFO ssh exec conn=root@10.0.0.5:22 cmd=\"apt-get install -y nginx\" took=1.2s exit=0\n"
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(line)
	}
	s := b.String()[:n]
	if leaks {
		for i, sec := range secrets[:3] {
			forms := []string{sec, strings.ToUpper(sec), base64.StdEncoding.EncodeToString([]byte(sec))}
			at := (i + 1) * len(s) / 4
			s = s[:at] + forms[i%3] + s[at:]
		}
	}
	return s
}

// BenchmarkRedact compares the redactor with the one before issue 20
// item 4 (legacy_test.go) on the same texts and secrets, in one run.
func BenchmarkRedact(b *testing.B) {
	for _, key := range []bool{false, true} {
		secrets := benchSecrets(key)
		sets := map[string]redactor{}
		cur, old := New(), newLegacy()
		for _, s := range secrets {
			cur.Add(s)
			old.Add(s)
		}
		sets["legacy"], sets["current"] = old, cur
		for _, tc := range []struct {
			name  string
			n     int
			leaks bool
		}{{"line", 200, false}, {"64KiB", 64 << 10, false}, {"64KiB-leaks", 64 << 10, true}, {"1MiB", 1 << 20, false}} {
			text := benchText(tc.n, secrets, tc.leaks)
			for _, impl := range []string{"legacy", "current"} {
				name := fmt.Sprintf("secrets=%d/%s/%s", len(secrets), tc.name, impl)
				b.Run(name, func(b *testing.B) {
					r := sets[impl]
					b.SetBytes(int64(len(text)))
					b.ReportAllocs()
					for b.Loop() {
						r.String(text)
					}
				})
			}
		}
	}
}
