package bindings

import (
	"fmt"
	"slices"
	"sync"
)

// Scoped is implemented by a Host that releases what a task holds when the
// task's hook ends (the runtime's VMs). A binding that hands Lua something
// outliving one call (a private connection, an open file) registers it with
// the task's Scope, so that nothing a task opens outlives it, whatever the
// plugin did or forgot. Hosts without tasks need not implement it.
type Scoped interface {
	// TaskScope is the running task's scope; nil outside a task.
	TaskScope() *Scope
}

// Resource is a kind of thing a task may hold across calls.
type Resource int

const (
	// Conn is a network connection a task holds for itself
	// (ssh.connect{reuse=false}). Each is also a descriptor.
	Conn Resource = iota
	// File is any other descriptor a task holds across calls.
	File
)

func (r Resource) String() string {
	if r == Conn {
		return "connections"
	}
	return "descriptors"
}

// TaskLimits cap what one task may hold at once. Zero fields take the
// defaults (DefaultTaskLimits).
type TaskLimits struct {
	// Conns caps the connections a task holds for itself.
	Conns int
	// Descriptors caps every descriptor it holds, connections included.
	Descriptors int
}

// DefaultTaskLimits: a provisioning task talks to a few hosts at a time.
var DefaultTaskLimits = TaskLimits{Conns: 16, Descriptors: 32}

func (l TaskLimits) withDefaults() TaskLimits {
	if l.Conns <= 0 {
		l.Conns = DefaultTaskLimits.Conns
	}
	if l.Descriptors <= 0 {
		l.Descriptors = DefaultTaskLimits.Descriptors
	}
	return l
}

// Scope is what one task holds through bindings beyond a single call. The
// runtime makes one per task and closes it when the task's hook ends:
// everything still held is released then, in the reverse order it was
// taken. It is safe for concurrent use.
type Scope struct {
	task   string
	limits TaskLimits

	mu     sync.Mutex
	held   map[int]*hold
	next   int
	counts [2]int
	closed bool
}

type hold struct {
	r       Resource
	what    string
	release func()
}

// NewScope returns the scope of task (its id, for messages).
func NewScope(task string, l TaskLimits) *Scope {
	return &Scope{task: task, limits: l.withDefaults(), held: map[int]*hold{}}
}

// Task is the id of the task the scope belongs to.
func (s *Scope) Task() string { return s.task }

// Hold registers r, described by what ("ssh root@10.0.0.5:22"), as held by
// the task until the returned function is called or the scope closes,
// whichever comes first; release runs exactly once, then. It fails with
// kind "limit" when the task already holds its cap, and with kind
// "config" once the scope is closed.
func (s *Scope) Hold(r Resource, what string, release func()) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, Errorf("config", "%s: the task %s has ended; open it again in a running task", what, s.task)
	}
	desc := s.counts[Conn] + s.counts[File]
	switch {
	case r == Conn && s.counts[Conn] >= s.limits.Conns:
		return nil, s.limitError(r, what, s.limits.Conns)
	case desc >= s.limits.Descriptors:
		return nil, s.limitError(File, what, s.limits.Descriptors)
	}
	id := s.next
	s.next++
	s.held[id] = &hold{r: r, what: what, release: release}
	s.counts[r]++
	return func() { s.drop(id) }, nil
}

func (s *Scope) limitError(r Resource, what string, n int) error {
	e := Errorf("limit", "%s: this task already holds %d %s, the limit per task; close what it no longer needs (conn:close()), or raise limits.%s in the plugin definition (loomd --task-%s for every plugin)", what, n, r, r, r)
	e.Fields = map[string]any{"limit": n}
	return e
}

// drop releases one hold, once.
func (s *Scope) drop(id int) {
	s.mu.Lock()
	h := s.held[id]
	if h != nil {
		delete(s.held, id)
		s.counts[h.r]--
	}
	s.mu.Unlock()
	if h != nil && h.release != nil {
		h.release()
	}
}

// Held counts what the task holds now: connections, and descriptors
// (connections included).
func (s *Scope) Held() (conns, descriptors int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[Conn], s.counts[Conn] + s.counts[File]
}

// Closed reports whether the task has ended.
func (s *Scope) Closed() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close ends the scope: what is still held is released, newest first,
// and later Holds fail. It returns what it released, for a log line.
// Closing twice is harmless.
func (s *Scope) Close() []string {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ids := make([]int, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	// Newest first: a tunnel before the connection it runs through.
	slices.Sort(ids)
	slices.Reverse(ids)
	var released []string
	for _, id := range ids {
		s.mu.Lock()
		h := s.held[id]
		s.mu.Unlock()
		if h != nil {
			released = append(released, h.what)
		}
		s.drop(id)
	}
	return released
}

// String describes the scope for logs.
func (s *Scope) String() string {
	c, d := s.Held()
	return fmt.Sprintf("task %s holding %d connections, %d descriptors", s.task, c, d)
}
