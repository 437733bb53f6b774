package spec

import (
	"strings"
	"testing"
)

// The length limits are checked apart from the patterns: each limit holds
// at its edge.
func TestNameLengthLimits(t *testing.T) {
	a := func(n int) string { return strings.Repeat("a", n) }
	for _, c := range []struct {
		what string
		ok   func(string) bool
		max  int
	}{
		{"service name", validServiceName, 255},
		{"label", validLabelName, 32},
		{"dns suffix label", validDNSSuffix, 63},
	} {
		if !c.ok(a(1)) || !c.ok(a(c.max)) {
			t.Errorf("%s: 1 or %d characters refused", c.what, c.max)
		}
		if c.ok(a(c.max+1)) || c.ok("") {
			t.Errorf("%s: %d characters or none accepted", c.what, c.max+1)
		}
	}
	for _, bad := range []string{"-web", "web-", "Web", "a_b"} {
		if validLabelName(bad) {
			t.Errorf("label %q accepted", bad)
		}
	}
	if validServiceName("a b") || validDNSSuffix("a-.b") {
		t.Error("a bad character or a label ending in '-' was accepted")
	}
}
