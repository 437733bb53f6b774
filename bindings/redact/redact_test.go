package redact

import (
	"encoding/json"
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
