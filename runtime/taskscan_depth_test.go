package runtime

import (
	"errors"
	"strings"
	"testing"
)

// Hostile nesting must be refused as an invalid task, never recurse
// without bound (4 MiB of '[' once cost a gigabyte and could overflow the
// Go stack).
func TestParseTaskRefusesDeepNesting(t *testing.T) {
	cases := map[string]string{
		"brackets only":   strings.Repeat("[", 4<<20),
		"deep config":     `{"taskId":"x","taskName":"CREATE","config":{"a":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}}`,
		"deep extra key":  `{"taskId":"x","taskName":"CREATE","extra":` + strings.Repeat(`{"a":`, 100) + `1` + strings.Repeat(`}`, 100) + `}`,
		"unclosed object": `{"taskId":"x","taskName":"CREATE","config":` + strings.Repeat(`{"a":`, 1<<20),
	}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTask([]byte(body))
			if !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("ParseTask: got %v, want ErrInvalidTask", err)
			}
		})
	}
	// At the limit, a task still parses.
	ok := `{"taskId":"x","taskName":"CREATE","config":{"provider":{"providertype":"p"},"a":` +
		strings.Repeat(`[`, MaxTaskDepth-2) + strings.Repeat(`]`, MaxTaskDepth-2) + `}}`
	if _, err := ParseTask([]byte(ok)); err != nil {
		t.Fatalf("a task nested %d deep: %v", MaxTaskDepth, err)
	}
	deep := `{"taskId":"x","taskName":"CREATE","config":{"a":` + strings.Repeat(`[`, MaxTaskDepth) + strings.Repeat(`]`, MaxTaskDepth) + `}}`
	_, err := ParseTask([]byte(deep))
	if err == nil || !strings.Contains(err.Error(), "nested deeper than 64") {
		t.Fatalf("a task nested past the limit: got %v", err)
	}
}

// TestScanNodesRange: the scan finds config.nodes's value, so a hook can
// decode it lazily; twice or not an object, it is left to the eager path.
func TestScanNodesRange(t *testing.T) {
	for _, c := range []struct {
		task string
		want string
	}{
		{`{"taskName":"CREATE","config":{"provider":{"providertype":"p"},"nodes": {"n1":{"hostname":"a"}} ,"x":1}}`, `{"n1":{"hostname":"a"}}`},
		{`{"taskName":"CREATE","config":{"provider":{"providertype":"p"},"nodes":[1]}}`, ""},
		{`{"taskName":"CREATE","config":{"provider":{"providertype":"p"},"nodes":{},"nodes":{"a":1}}}`, ""},
	} {
		task, err := ParseTask([]byte(c.task))
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if n := task.route.nodes; n[0] > 0 {
			got = c.task[n[0]:n[1]]
		}
		if got != c.want {
			t.Errorf("%s: nodes %q, want %q", c.task, got, c.want)
		}
	}
}
