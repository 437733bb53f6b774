package lpattern

import (
	"errors"
	"strings"
	"testing"
)

func kindOf(err error) ErrorKind {
	var e *Error
	if !errors.As(err, &e) {
		return -1
	}
	return e.Kind
}

func TestMatchAndCaptures(t *testing.T) {
	src := "key = value"
	m := New(src, "^(%w+)%s*=%s*()(%w+)$", true, 1000, nil)
	e, err := m.MatchAt(0)
	if err != nil || e != len(src) || !m.Anchored() || m.NumCaptures(true) != 3 {
		t.Fatalf("end %d, err %v, captures %d", e, err, m.NumCaptures(true))
	}
	k, _ := m.Capture(0, 0, e)
	pos, _ := m.Capture(1, 0, e)
	v, _ := m.Capture(2, 0, e)
	if k.Str != "key" || !pos.IsPos || pos.Pos != 7 || v.Str != "value" {
		t.Fatalf("captures %+v %+v %+v", k, pos, v)
	}
}

func TestStepBudget(t *testing.T) {
	_, err := New(strings.Repeat("a", 300), strings.Repeat("a-", 3)+"b", true, 1_000_000, nil).MatchAt(0)
	if kindOf(err) != Budget || !strings.Contains(err.Error(), "too complex") {
		t.Fatalf("want a budget error, got %v", err)
	}
	done := make(chan struct{})
	close(done)
	_, err = New(strings.Repeat("a", 300), strings.Repeat("a-", 3)+"b", true, 1<<40, done).MatchAt(0)
	if kindOf(err) != Deadline {
		t.Fatalf("want a deadline error, got %v", err)
	}
}

// A repetition over a long subject loops instead of recursing per byte
// (gopher-lua's matcher nested a Go call per byte of ".*").
func TestRepetitionDoesNotNest(t *testing.T) {
	src := strings.Repeat("a", 1<<20)
	for _, pat := range []string{"^(.*)$", "^(.-)$", "a+$", "^a*a*a*$"} {
		e, err := New(src, pat, true, 100<<20, nil).MatchAt(0)
		if err != nil || e != len(src) {
			t.Errorf("%s: end %d, err %v", pat, e, err)
		}
	}
}

func TestNestingLimit(t *testing.T) {
	_, err := New(strings.Repeat("a", MaxDepth+10), strings.Repeat("a?", MaxDepth+10), true, 1<<30, nil).MatchAt(0)
	if kindOf(err) != Budget || !strings.Contains(err.Error(), "nested") {
		t.Fatalf("want a nesting error, got %v", err)
	}
}

func TestSyntaxErrors(t *testing.T) {
	for pat, want := range map[string]string{
		"%":     "ends with '%'",
		"[a":    "missing ']'",
		"%f":    "missing '['",
		"%b(":   "missing arguments",
		")":     "invalid pattern capture",
		"(a)%2": "invalid capture index",
		"%1":    "invalid capture index",
	} {
		_, err := New("a", pat, true, 1000, nil).MatchAt(0)
		if pat == "" {
			pat = strings.Repeat("(", MaxCaptures+1) + "a" + strings.Repeat(")", MaxCaptures+1)
			_, err = New("a", pat, true, 1000, nil).MatchAt(0)
		}
		if kindOf(err) != Syntax || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want a syntax error with %q", pat, err, want)
		}
	}
}

// BenchmarkSteps is the cost of a step: a lazy run that backtracks over
// every start position (n²/2 steps), without and with a done channel to
// watch (the deadline check every 65,536 steps), in the same run.
func BenchmarkSteps(b *testing.B) {
	src := strings.Repeat("a", 2000)
	done := make(chan struct{})
	for _, bc := range []struct {
		name string
		done <-chan struct{}
	}{{"no-deadline", nil}, {"deadline", done}} {
		b.Run(bc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m := New(src, ".-b", true, 1<<40, bc.done)
				for s := 0; s <= len(src); s++ {
					if _, err := m.MatchAt(s); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(2000*2001/2), "ns/step")
		})
	}
}
