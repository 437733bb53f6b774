// Package lpattern is Lua 5.1's pattern matcher (lstrlib.c), ported to Go
// with a step budget, a deadline and a nesting limit, for the sandbox's
// string.find, match, gmatch and gsub.
//
// gopher-lua's own matcher compiles a pattern to a backtracking VM that
// recurses once per subject byte for every repetition (".*" over 1 MB nests
// a million Go calls) and cannot be stopped: a pathological pattern ran for
// seconds past the hook's deadline inside one Go call. This port keeps
// PUC Lua's structure, where "*" and "-" expand in a loop and recursion
// is bounded by the pattern, and charges every step to a budget, so
// superlinear backtracking fails fast with an *Error of kind Budget and a
// closed done channel stops any match within 65536 steps.
//
// Copyright (C) 1994-2012 Lua.org, PUC-Rio (MIT License, see LICENSE in
// this folder); the Go port is Loom's.
package lpattern

import "fmt"

// ErrorKind tells a refused match from a malformed pattern.
type ErrorKind int

const (
	// Syntax is a malformed pattern or a bad capture reference: the
	// plugin's bug, reported like Lua reports it.
	Syntax ErrorKind = iota
	// Budget is a match that took more steps than its budget, or a
	// pattern nested deeper than MaxDepth: a sandbox limit.
	Budget
	// Deadline is a match stopped because done was closed.
	Deadline
)

// Error is a failed match.
type Error struct {
	Kind    ErrorKind
	Message string
}

func (e *Error) Error() string { return e.Message }

// MaxCaptures is Lua's LUA_MAXCAPTURES.
const MaxCaptures = 32

// MaxDepth bounds the matcher's recursion (Lua 5.2's MAXCCALLS): it grows
// with the pattern's quantifiers and captures, never with the subject.
const MaxDepth = 200

const (
	capUnfinished = -1
	capPosition   = -2
	esc           = '%'
	// checkEvery is how many steps pass between looks at done.
	checkEvery = 1 << 16
)

// Specials are the bytes that make a pattern more than a plain string.
const Specials = "^$*+?.([%-"

// Matcher matches one pattern against one subject. It is not safe for
// concurrent use; a Lua call makes its own.
type Matcher struct {
	src, pat string
	start    int // the pattern's first byte after a stripped '^'
	anchored bool
	level    int
	capture  [MaxCaptures]struct{ init, len int }
	steps    int
	n        int
	depth    int
	done     <-chan struct{}
}

// New prepares pat for subject src with a budget of steps and an optional
// done channel (the hook's context). With anchor, a leading '^' anchors
// the match at its start position (find, match, gsub); gmatch passes
// false, as in Lua 5.1, where '^' is then an ordinary byte.
func New(src, pat string, anchor bool, steps int, done <-chan struct{}) *Matcher {
	m := &Matcher{src: src, pat: pat, steps: steps, done: done}
	if anchor && len(pat) > 0 && pat[0] == '^' {
		m.start, m.anchored = 1, true
	}
	return m
}

// Anchored reports whether the pattern started with '^' (and anchor was
// asked for): the caller tries one start position only.
func (m *Matcher) Anchored() bool { return m.anchored }

// Reset gives the matcher a fresh budget and done channel: an iterator
// (gmatch) reuses one matcher across calls, each its own Go call.
func (m *Matcher) Reset(steps int, done <-chan struct{}) { m.steps, m.n, m.done = steps, 0, done }

// Steps is the budget left.
func (m *Matcher) Steps() int { return m.steps }

// MatchAt matches the pattern at subject offset s and returns the end
// offset of the match, or -1.
func (m *Matcher) MatchAt(s int) (end int, err error) {
	defer func() {
		if v := recover(); v != nil {
			e, ok := v.(*Error)
			if !ok {
				panic(v)
			}
			end, err = -1, e
		}
	}()
	m.level, m.depth = 0, 0
	return m.match(s, m.start), nil
}

// Capture is one captured value: a substring, or a position (1-based).
type Capture struct {
	Str   string
	Pos   int
	IsPos bool
}

// NumCaptures is how many values the last match yields: its captures,
// or the whole match when the pattern has none and whole is set.
func (m *Matcher) NumCaptures(whole bool) int {
	if m.level == 0 && whole {
		return 1
	}
	return m.level
}

// Capture returns capture i (0-based) of the last match of [s, e); i 0 of
// a pattern without captures is the whole match.
func (m *Matcher) Capture(i, s, e int) (Capture, error) {
	if i >= m.level {
		if i == 0 {
			return Capture{Str: m.src[s:e]}, nil
		}
		return Capture{}, &Error{Syntax, "invalid capture index"}
	}
	c := m.capture[i]
	switch c.len {
	case capUnfinished:
		return Capture{}, &Error{Syntax, "unfinished capture"}
	case capPosition:
		return Capture{Pos: c.init + 1, IsPos: true}, nil
	}
	return Capture{Str: m.src[c.init : c.init+c.len]}, nil
}

func (m *Matcher) fail(kind ErrorKind, format string, args ...any) {
	panic(&Error{kind, fmt.Sprintf(format, args...)})
}

// spend charges n steps; small enough to inline on the hot path.
func (m *Matcher) spend(n int) {
	m.steps -= n
	m.n += n
	if m.steps < 0 || m.n >= checkEvery {
		m.check()
	}
}

// check fails an exhausted budget and looks at done.
func (m *Matcher) check() {
	if m.steps < 0 {
		m.fail(Budget, "pattern too complex for this input (more than the step budget); simplify it, anchor it, or split the input")
	}
	m.n = 0
	if m.done != nil {
		select {
		case <-m.done:
			m.fail(Deadline, "pattern matching stopped at the hook's deadline")
		default:
		}
	}
}

// pc is the pattern byte at p, 0 past the end (C's terminating NUL).
func (m *Matcher) pc(p int) byte {
	if p < len(m.pat) {
		return m.pat[p]
	}
	return 0
}

// sc is the subject byte at s, 0 at the end.
func (m *Matcher) sc(s int) byte {
	if s < len(m.src) {
		return m.src[s]
	}
	return 0
}

func (m *Matcher) classEnd(p int) int {
	c := m.pc(p)
	p++
	switch c {
	case esc:
		if p >= len(m.pat) {
			m.fail(Syntax, "malformed pattern (ends with '%%')")
		}
		return p + 1
	case '[':
		if m.pc(p) == '^' {
			p++
		}
		for { // look for a ']'
			if p >= len(m.pat) {
				m.fail(Syntax, "malformed pattern (missing ']')")
			}
			c := m.pat[p]
			p++
			if c == esc && p < len(m.pat) {
				p++ // skip escapes (e.g. '%]')
			}
			if m.pc(p) == ']' {
				break
			}
		}
		return p + 1
	}
	return p
}

func isalpha(c byte) bool  { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isdigit(c byte) bool  { return c >= '0' && c <= '9' }
func islower(c byte) bool  { return c >= 'a' && c <= 'z' }
func isupper(c byte) bool  { return c >= 'A' && c <= 'Z' }
func isspace(c byte) bool  { return c == ' ' || (c >= '\t' && c <= '\r') }
func iscntrl(c byte) bool  { return c < 32 || c == 127 }
func isalnum(c byte) bool  { return isalpha(c) || isdigit(c) }
func ispunct(c byte) bool  { return c > 32 && c < 127 && !isalnum(c) }
func isxdigit(c byte) bool { return isdigit(c) || (c|0x20 >= 'a' && c|0x20 <= 'f') }

// matchClass is Lua's match_class in the C locale.
func matchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 {
	case 'a':
		res = isalpha(c)
	case 'c':
		res = iscntrl(c)
	case 'd':
		res = isdigit(c)
	case 'l':
		res = islower(c)
	case 'p':
		res = ispunct(c)
	case 's':
		res = isspace(c)
	case 'u':
		res = isupper(c)
	case 'w':
		res = isalnum(c)
	case 'x':
		res = isxdigit(c)
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if islower(cl) {
		return res
	}
	return !res
}

// matchBracketClass matches c against the set [p, ec], ec at its ']'.
func (m *Matcher) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if m.pc(p+1) == '^' {
		sig = false
		p++ // skip the '^'
	}
	for p++; p < ec; p++ {
		switch {
		case m.pat[p] == esc:
			p++
			if matchClass(c, m.pc(p)) {
				return sig
			}
		case m.pc(p+1) == '-' && p+2 < ec:
			p += 2
			if m.pat[p-2] <= c && c <= m.pat[p] {
				return sig
			}
		case m.pat[p] == c:
			return sig
		}
	}
	return !sig
}

func (m *Matcher) singleMatch(s, p, ep int) bool {
	if s >= len(m.src) {
		return false
	}
	c := m.src[s]
	switch m.pat[p] {
	case '.':
		return true
	case esc:
		return matchClass(c, m.pc(p+1))
	case '[':
		return m.matchBracketClass(c, p, ep-1)
	}
	return m.pat[p] == c
}

func (m *Matcher) matchBalance(s, p int) int {
	if p+1 >= len(m.pat) {
		m.fail(Syntax, "malformed pattern (missing arguments to '%%b')")
	}
	if s >= len(m.src) || m.src[s] != m.pat[p] {
		return -1
	}
	b, e := m.pat[p], m.pat[p+1]
	start, cont := s, 1
	for s++; s < len(m.src); s++ {
		if c := m.src[s]; c == e {
			if cont--; cont == 0 {
				m.spend(s - start) // a %b scan is as many steps as bytes it reads
				return s + 1
			}
		} else if c == b {
			cont++
		}
	}
	m.spend(s - start)
	return -1
}

func (m *Matcher) maxExpand(s, p, ep int) int {
	i := 0 // counts the maximum expansion of the item
	for m.singleMatch(s+i, p, ep) {
		i++
	}
	m.spend(i)
	// try to match the rest with the most repetitions first
	for ; i >= 0; i-- {
		if res := m.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (m *Matcher) minExpand(s, p, ep int) int {
	for {
		if res := m.match(s, ep+1); res >= 0 {
			return res
		}
		if !m.singleMatch(s, p, ep) {
			return -1
		}
		s++ // try with one more repetition
	}
}

func (m *Matcher) startCapture(s, p, what int) int {
	if m.level >= MaxCaptures {
		m.fail(Syntax, "too many captures (the limit is %d)", MaxCaptures)
	}
	m.capture[m.level].init = s
	m.capture[m.level].len = what
	m.level++
	res := m.match(s, p)
	if res < 0 {
		m.level-- // undo the capture
	}
	return res
}

func (m *Matcher) endCapture(s, p int) int {
	l := -1
	for i := m.level - 1; i >= 0; i-- {
		if m.capture[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		m.fail(Syntax, "invalid pattern capture")
	}
	m.capture[l].len = s - m.capture[l].init
	res := m.match(s, p)
	if res < 0 {
		m.capture[l].len = capUnfinished // undo the capture
	}
	return res
}

func (m *Matcher) matchCapture(s int, l byte) int {
	i := int(l) - '1'
	if i < 0 || i >= m.level || m.capture[i].len == capUnfinished {
		m.fail(Syntax, "invalid capture index %%%c", l)
	}
	c := m.capture[i]
	if c.len < 0 { // a position capture matches no text
		return -1
	}
	m.spend(c.len) // a back-reference compares len bytes
	if len(m.src)-s >= c.len && m.src[c.init:c.init+c.len] == m.src[s:s+c.len] {
		return s + c.len
	}
	return -1
}

// match is lstrlib.c's match: the end of a match of pattern[p:] at
// subject offset s, or -1. Tail positions loop instead of recursing.
func (m *Matcher) match(s, p int) int {
	m.depth++
	if m.depth > MaxDepth {
		m.fail(Budget, "pattern too complex (nested more than %d levels); simplify it", MaxDepth)
	}
	// No defer on this hot path: a panic unwinds to MatchAt, which resets
	// the depth.
	res := m.doMatch(s, p)
	m.depth--
	return res
}

func (m *Matcher) doMatch(s, p int) int {
	for {
		m.spend(1)
		if p >= len(m.pat) { // end of pattern
			return s
		}
		switch m.pat[p] {
		case '(': // start capture
			if m.pc(p+1) == ')' { // position capture
				return m.startCapture(s, p+2, capPosition)
			}
			return m.startCapture(s, p+1, capUnfinished)
		case ')': // end capture
			return m.endCapture(s, p+1)
		case '$':
			if p+1 == len(m.pat) { // '$' as the last byte anchors at the end
				if s == len(m.src) {
					return s
				}
				return -1
			}
		case esc:
			switch c := m.pc(p + 1); {
			case c == 'b': // balanced string
				if s = m.matchBalance(s, p+2); s < 0 {
					return -1
				}
				p += 4
				continue
			case c == 'f': // frontier
				p += 2
				if m.pc(p) != '[' {
					m.fail(Syntax, "missing '[' after '%%f' in pattern")
				}
				ep := m.classEnd(p)
				var prev byte
				if s > 0 {
					prev = m.src[s-1]
				}
				if m.matchBracketClass(prev, p, ep-1) || !m.matchBracketClass(m.sc(s), p, ep-1) {
					return -1
				}
				p = ep
				continue
			case isdigit(c): // back-reference %1-%9
				if s = m.matchCapture(s, c); s < 0 {
					return -1
				}
				p += 2
				continue
			}
		}
		// a single item, maybe with a quantifier
		ep := m.classEnd(p)
		ok := m.singleMatch(s, p, ep)
		switch m.pc(ep) {
		case '?':
			if ok {
				if res := m.match(s+1, ep+1); res >= 0 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return m.maxExpand(s, p, ep)
		case '+':
			if !ok {
				return -1
			}
			return m.maxExpand(s+1, p, ep)
		case '-':
			return m.minExpand(s, p, ep)
		}
		if !ok {
			return -1
		}
		s++
		p = ep
	}
}
