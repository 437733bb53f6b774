package lpattern

import (
	"errors"
	"testing"
	"time"
)

// FuzzPattern (issue 20 item 6): whatever the pattern and subject, a
// match either ends within its step budget or fails with a Budget (or
// Syntax) error; it never panics, never recurses past MaxDepth, and what
// it returns lies inside the subject. A generous deadline (5 s for a
// budget of 200,000 steps, a few milliseconds of work) catches a matcher
// that stops charging its budget.
func FuzzPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"hello world from lua", "(%w+) (%w+)"},
		{"key = value", "^(%w+)%s*=%s*(%w+)$"},
		{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab", "a*a*a*a*a*a*a*a*a*c"},
		{"((((((((((x))))))))))", "%b()"},
		{"THE (quick) fox", "%f[%a]%a+"},
		{"abcabc", "(a)(b)(c)%1%2%3"},
		{"x", "((((((((((((((((((((((((((((((((((x))))))))))))))))))))))))))))))))))"},
		{"[]]", "[]]"},
		{"a-b", "[%a-]+"},
		{"x", "%"},
		{"x", "[a"},
		{"x", "(()"},
		{"abc", "%g"},
		{"aaa", ".-b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, src, pat string) {
		if len(src) > 1<<12 || len(pat) > 1<<8 {
			return
		}
		done := make(chan struct{})
		timer := time.AfterFunc(5*time.Second, func() { close(done) })
		defer timer.Stop()
		const budget = 200_000
		m := New(src, pat, true, budget, done)
		for s := 0; s <= len(src); s++ {
			end, err := m.MatchAt(s)
			if m.depth > MaxDepth+1 {
				t.Fatalf("recursion depth %d past MaxDepth %d", m.depth, MaxDepth)
			}
			if err != nil {
				var e *Error
				if !errors.As(err, &e) {
					t.Fatalf("an error that is not *Error: %v", err)
				}
				if e.Kind == Deadline {
					t.Fatalf("a budget of %d steps ran past 5 s: the matcher stopped charging it (src %q, pat %q)", budget, src, pat)
				}
				return
			}
			if m.Steps() < 0 {
				t.Fatalf("ended %d steps over its budget", -m.Steps())
			}
			if end >= 0 {
				if end < s || end > len(src) {
					t.Fatalf("match [%d, %d) outside the subject of %d bytes", s, end, len(src))
				}
				for i := 0; i < m.NumCaptures(true); i++ {
					c, err := m.Capture(i, s, end)
					if err == nil && !c.IsPos && len(c.Str) > len(src) {
						t.Fatalf("capture %d of %d bytes from a subject of %d", i, len(c.Str), len(src))
					}
					if err == nil && c.IsPos && (c.Pos < 1 || c.Pos > len(src)+1) {
						t.Fatalf("position capture %d out of range", c.Pos)
					}
				}
				return
			}
			if m.Anchored() {
				return
			}
		}
	})
}
