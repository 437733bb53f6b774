package http

import (
	"strings"
	"testing"
)

// A credential shorter than redact.MinLen is not cut out of messages: a
// one-character bearer would turn every "x" of an error into [REDACTED].
func TestScrubSkipsShortSecrets(t *testing.T) {
	r := &request{secrets: []string{"x", "tok-12345"}}
	got := r.scrub("box tok-12345 max")
	if got != "box [REDACTED] max" || strings.Contains(got, "tok-12345") {
		t.Errorf("scrub = %q", got)
	}
}
