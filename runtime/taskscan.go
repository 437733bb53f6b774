package runtime

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"unicode/utf8"
)

// scanTask is ParseTask's fast path: one allocation-free pass over the
// task JSON that validates its syntax and picks out the handful of keys
// dispatch needs. Every task pays for parsing twice (here, then into Lua
// tables), so this pass must be cheap; encoding/json took a quarter of
// the per-task time. On any problem it reports !ok and ParseTask falls
// back to encoding/json, whose errors say where the problem is.
func scanTask(data []byte) (w taskWire, ok, tooDeep bool) {
	s := scanner{data: data}
	defer func() { tooDeep = s.tooDeep }()
	s.space()
	if !s.objectEach(func(key []byte) bool {
		switch string(key) {
		case "taskId":
			return s.stringInto(&w.TaskID)
		case "jobId":
			return s.stringInto(&w.JobID)
		case "clusterId":
			return s.stringInto(&w.ClusterID)
		case "taskName":
			return s.stringInto(&w.TaskName)
		case "nodeId":
			return s.stringInto(&w.NodeID)
		case "tenantId":
			return s.stringInto(&w.TenantID)
		case "config":
			if s.peek() != '{' {
				return false
			}
			w.Config = &routeInfo{}
			return s.scanConfig(w.Config)
		default:
			return s.skip()
		}
	}) {
		return w, false, false
	}
	s.space()
	return w, s.pos == len(s.data), false
}

func (s *scanner) scanConfig(r *routeInfo) bool {
	return s.objectEach(func(key []byte) bool {
		switch string(key) {
		case "provider":
			if s.peek() != '{' {
				return s.skipNull()
			}
			r.Provider = &struct {
				ProviderType string `json:"providertype"`
			}{}
			return s.objectEach(func(k []byte) bool {
				if string(k) == "providertype" {
					return s.stringInto(&r.Provider.ProviderType)
				}
				return s.skip()
			})
		case "service":
			if s.peek() != '{' {
				return s.skipNull()
			}
			r.Service = &struct {
				Action *struct {
					Type string `json:"type"`
				} `json:"action"`
			}{}
			return s.objectEach(func(k []byte) bool {
				if string(k) != "action" {
					return s.skip()
				}
				if s.peek() != '{' {
					return s.skipNull()
				}
				r.Service.Action = &struct {
					Type string `json:"type"`
				}{}
				return s.objectEach(func(k []byte) bool {
					if string(k) == "type" {
						return s.stringInto(&r.Service.Action.Type)
					}
					return s.skip()
				})
			})
		case "nodes":
			if r.nodes[0] != 0 {
				r.nodes = [2]int{-1, -1} // twice: decode it all as usual
				return s.skip()
			}
			if s.peek() != '{' {
				return s.skip()
			}
			start := s.pos
			if n := seenNodes.known(s.data[start:], s.depth); n > 0 {
				s.pos += n
			} else {
				if !s.skip() {
					return false
				}
				seenNodes.add(s.data[start:s.pos], s.depth)
			}
			r.nodes = [2]int{start, s.pos}
			return true
		case "automators":
			if s.peek() != '[' {
				return s.skipNull()
			}
			r.Automators = []string{}
			return s.arrayEach(func() bool {
				var a string
				if !s.stringInto(&a) {
					return false
				}
				r.Automators = append(r.Automators, a)
				return true
			})
		default:
			return s.skip()
		}
	})
}

// MaxTaskDepth is how deeply a task's JSON may nest. Lua sees the task
// through a converter with the same bound, so deeper input could never be
// used; refusing it early also keeps the recursive scanner's stack small.
const MaxTaskDepth = 64

type scanner struct {
	data    []byte
	pos     int
	depth   int
	tooDeep bool // set when nesting passed MaxTaskDepth
}

// enter counts one level of nesting; it fails past MaxTaskDepth.
func (s *scanner) enter() bool {
	s.depth++
	if s.depth > MaxTaskDepth {
		s.tooDeep = true
		return false
	}
	return true
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.space()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *scanner) skipNull() bool {
	if s.peek() == 'n' {
		return s.literal("null")
	}
	return false
}

func (s *scanner) literal(word string) bool {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return false
	}
	s.pos += len(word)
	return true
}

// objectEach calls fn with each key, positioned at the value; fn must
// consume the value.
func (s *scanner) objectEach(fn func(key []byte) bool) bool {
	if s.peek() != '{' || !s.enter() {
		return false
	}
	defer func() { s.depth-- }()
	s.pos++
	if s.peek() == '}' {
		s.pos++
		return true
	}
	for {
		if s.peek() != '"' {
			return false
		}
		start := s.pos
		if !s.skipString() {
			return false
		}
		key := s.data[start+1 : s.pos-1]
		if s.peek() != ':' {
			return false
		}
		s.pos++
		s.space()
		if !fn(key) {
			return false
		}
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
			return false
		}
	}
}

func (s *scanner) arrayEach(fn func() bool) bool {
	if s.peek() != '[' || !s.enter() {
		return false
	}
	defer func() { s.depth-- }()
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return true
	}
	for {
		s.space()
		if !fn() {
			return false
		}
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return true
		default:
			return false
		}
	}
}

// stringInto reads a JSON string (or null, leaving dst empty).
func (s *scanner) stringInto(dst *string) bool {
	switch s.peek() {
	case 'n':
		return s.literal("null")
	case '"':
	default:
		return false
	}
	start := s.pos
	escaped, ok := s.skipStringEsc()
	if !ok {
		return false
	}
	if raw := s.data[start+1 : s.pos-1]; !escaped && utf8.Valid(raw) {
		*dst = string(raw)
		return true
	}
	// Escapes, or bytes that are not UTF-8 (which encoding/json, and so
	// every other reader of the task, turns into U+FFFD).
	return json.Unmarshal(s.data[start:s.pos], dst) == nil
}

func (s *scanner) skipString() bool {
	_, ok := s.skipStringEsc()
	return ok
}

// plainByte marks the bytes a JSON string holds as they are: all but the
// closing quote, the backslash and control characters. Skipping runs of
// them with one table lookup a byte made the scan of a 100-node cluster's
// task (config.nodes: tens of kilobytes of short strings) about a third
// cheaper than a three-way test of every byte.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func (s *scanner) skipStringEsc() (escaped, ok bool) {
	s.pos++ // opening quote
	for s.pos < len(s.data) {
		p, d := s.pos, s.data
		for p < len(d) && plainByte[d[p]] {
			p++
		}
		s.pos = p
		if p == len(d) {
			break
		}
		c := d[p]
		switch {
		case c == '"':
			s.pos++
			return escaped, true
		case c == '\\':
			// Only JSON's escapes: a scanner that let "\0" through would
			// accept a task every later decoder refuses.
			escaped = true
			if s.pos+1 >= len(s.data) {
				return false, false
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.data) || !isHex4(s.data[s.pos+2:s.pos+6]) {
					return false, false
				}
				s.pos += 6
			default:
				return false, false
			}
		case c < 0x20:
			return false, false
		default:
			s.pos++
		}
	}
	return false, false
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// skip validates and skips any value.
func (s *scanner) skip() bool {
	switch c := s.peek(); {
	case c == '{':
		return s.objectEach(func([]byte) bool { return s.skip() })
	case c == '[':
		return s.arrayEach(s.skip)
	case c == '"':
		return s.skipString()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.pos
		for s.pos < len(s.data) {
			c := s.data[s.pos]
			if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
				s.pos++
				continue
			}
			break
		}
		return json.Valid(s.data[start:s.pos])
	}
	return false
}

// seenNodes holds the last config.nodes values the scan accepted. Every
// task of a cluster job carries the cluster's nodes, the same bytes from
// one task to the next until a node changes (tens of kilobytes at 100
// nodes, a third of a megabyte at 1,000), and scanning them was most of
// the scan: a value byte for byte equal to one accepted before, at the
// same depth, is accepted again with one comparison. Values of nodesMin
// to nodesMax bytes are kept, nodesSlots of them, so an idle worker
// process holds at most 2 MiB (a few hundred kilobytes for clusters of
// a few hundred nodes).
var seenNodes = &nodesCache{}

const (
	nodesSlots = 4
	nodesMin   = 1 << 10
	nodesMax   = 512 << 10
)

type nodesCache struct {
	next  atomic.Uint32
	slots [nodesSlots]atomic.Pointer[seenValue]
	hits  atomic.Uint64 // values accepted by comparison (tests)
}

// seenValue is a JSON value the scan accepted, at that nesting depth.
type seenValue struct {
	data  []byte
	depth int
}

// known returns the length of the accepted value data begins with, 0 if
// none.
func (c *nodesCache) known(data []byte, depth int) int {
	for i := range c.slots {
		if v := c.slots[i].Load(); v != nil && v.depth == depth && bytes.HasPrefix(data, v.data) {
			c.hits.Add(1)
			return len(v.data)
		}
	}
	return 0
}

// add keeps a copy of an accepted value in place of the oldest.
func (c *nodesCache) add(data []byte, depth int) {
	if len(data) < nodesMin || len(data) > nodesMax {
		return
	}
	v := &seenValue{data: bytes.Clone(data), depth: depth}
	c.slots[c.next.Add(1)%nodesSlots].Store(v)
}
