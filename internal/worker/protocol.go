// Package worker runs plugin hooks in child loomd processes, so that a
// hook that exhausts its memory budget, or crashes its process, fails
// only its own task and never the daemon.
//
// The parent (loomd serve) keeps a Supervisor: one pool of worker
// processes per plugin type, each process running one hook at a time
// under an OS memory limit. A worker process (the hidden `loomd worker`
// command) loads the plugins, then serves Frames on an inherited unix
// socket (file descriptor 3) with Child.Serve.
//
// # Wire protocol
//
// Frames travel in both directions on one stream socket. Each frame is a
// 4-byte big-endian length followed by that many bytes: a JSON object
// with a protocol version "v" (Version) and a "type" naming its kind,
// and, in a run frame, the task's JSON right after it (neither encoded
// nor scanned again on the way: a cluster job's task carries the whole
// cluster's nodes, tens of kilobytes that encoding/json took a third of
// the per-task time to check and copy, at each end). A
// peer ignores frames of a type it does not know, and fields it does not
// know, so kinds and fields can be added without breaking older peers; a
// change that old peers would misread takes a new Version.
//
//	parent -> child   load    {"v":2,"type":"load","plugins":[...runtime.PluginSource...]}
//	child  -> parent  hello   {"v":1,"type":"hello","pid":123,"types":{"shell":"3f2a..."}}
//	parent -> child   run     {"v":2,"type":"run","id":7,"memory":268435456}{...Coopr task...}
//	parent -> child   cancel  {"v":1,"type":"cancel","id":7,"reason":"shutdown"}
//	child  -> parent  log     {"v":1,"type":"log","id":7,"log":{"level":"INFO","msg":"...","attrs":{...}}}
//	child  -> parent  result  {"v":1,"type":"result","id":7,"status":0,"result":{...Coopr result...}}
//	child  -> parent  result  {"v":1,"type":"result","id":7,"error":{"kind":"not_found","message":"..."}}
//	either            ping    {"v":1,"type":"ping","id":9}  answered by  pong {"v":1,"type":"pong","id":9}
//	parent -> child   listeners {"v":1,"type":"listeners","seq":4,"listeners":[{"name":"API (--listen)","network":"tcp","addr":"127.0.0.1:7070"}]}
//
// The load frame, first on the connection when the supervisor has
// plugin sources (SetSources), carries the plugin versions the daemon
// validated: the worker loads those rather than the files on disk, which
// may be half-written or broken while a reload is under way.
//
// A listeners frame carries the daemon's own listening sockets (package
// bindings/listeners) whenever they change, and once to every new worker
// after its load frame: the worker's loom.http refuses them. seq orders
// the lists; an older one than the worker holds is ignored. The parent
// follows it with a ping and waits for the pong, so a listener the daemon
// opens is refused in every running worker before the open returns.
//
// A result frame with "retire": true tells the parent the worker exits
// after it (after a memory failure, its heap is not worth keeping).
package worker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/loomrt/loom/bindings/listeners"
)

// Version is the wire protocol version this package speaks.
const Version = 2

// MaxFrame bounds one frame, so a peer cannot make the other allocate
// without limit. A result larger than this fails its task.
const MaxFrame = 32 << 20

// Frame types.
const (
	TypeLoad   = "load"
	TypeHello  = "hello"
	TypeRun    = "run"
	TypeCancel = "cancel"
	TypeResult = "result"
	TypeLog    = "log"
	TypePing   = "ping"
	TypePong   = "pong"
	// TypeListeners carries the daemon's own listeners.
	TypeListeners = "listeners"
)

// Frame is one message between parent and worker. Which fields are set
// depends on Type (see the package documentation).
type Frame struct {
	V    int    `json:"v"`
	Type string `json:"type"`
	// ID names the run a run, cancel, result or log frame belongs to, or
	// the ping a pong answers.
	ID uint64 `json:"id,omitempty"`

	// Task is the Coopr task JSON of a run frame, sent after the frame's
	// JSON as it is: Send does not check it (it must be a task
	// runtime.ParseTask accepted), Recv hands it over unchecked (the
	// worker's runtime parses it, and answers a task it cannot with an
	// error result).
	Task json.RawMessage `json:"task,omitempty"`
	// Memory is the memory budget of a run, in bytes (0: the worker's
	// own). It may not exceed the budget the worker was started with.
	Memory int64 `json:"memory,omitempty"`
	// Reason says why a run is cancelled (shutdown, task cancelled, ...).
	Reason string `json:"reason,omitempty"`

	// Result is the Coopr result JSON of a finished run and Status its
	// status; Error is set instead when the task could not run at all.
	Result json.RawMessage `json:"result,omitempty"`
	Status int             `json:"status,omitempty"`
	Error  *RunError       `json:"error,omitempty"`
	// Retire: the worker exits after this result.
	Retire bool `json:"retire,omitempty"`

	// Log is a log record of a log frame.
	Log *LogRecord `json:"log,omitempty"`

	// Plugins are the plugin sources of a load frame (a JSON array of
	// runtime.PluginSource).
	Plugins json.RawMessage `json:"plugins,omitempty"`

	// Listeners and Seq are the daemon's own listening sockets and the
	// registry version they are from (a listeners frame).
	Listeners []listeners.Listener `json:"listeners,omitempty"`
	Seq       uint64               `json:"seq,omitempty"`

	// PID and Types (type name -> loaded version) describe a worker in
	// its hello frame.
	PID   int               `json:"pid,omitempty"`
	Types map[string]string `json:"types,omitempty"`
}

// LogRecord is a log line a worker sends to the parent's logger.
type LogRecord struct {
	Level string         `json:"level"`
	Msg   string         `json:"msg"`
	Attrs map[string]any `json:"attrs,omitempty"`
}

// Conn reads and writes frames on a stream. Writes are serialised, so
// any goroutine may send; reads belong to one goroutine.
type Conn struct {
	rw  io.ReadWriter
	r   *bufio.Reader // one read syscall per frame, mostly
	wmu sync.Mutex
	hdr [4]byte
}

// NewConn wraps a stream (a unix socket) in a frame codec.
func NewConn(rw io.ReadWriter) *Conn { return &Conn{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)} }

// ErrFrameTooLarge is returned for a frame over MaxFrame.
var ErrFrameTooLarge = errors.New("worker frame too large")

// Send writes one frame, stamping it with Version; a run frame's Task
// follows its JSON, as it is.
func (c *Conn) Send(f *Frame) error {
	f.V = Version
	task := f.Task
	g := *f
	g.Task = nil
	b, err := json.Marshal(&g)
	if err != nil {
		return fmt.Errorf("encoding a %s frame: %w", f.Type, err)
	}
	if len(task) > 0 && f.Type != TypeRun {
		return fmt.Errorf("encoding a %s frame: only a run frame carries a task", f.Type)
	}
	n := len(b) + len(task)
	if n > MaxFrame {
		return fmt.Errorf("%w: a %s frame of %d bytes (max %d)", ErrFrameTooLarge, f.Type, n, MaxFrame)
	}
	// One buffer, the task copied once: a cluster job's task is tens of
	// kilobytes (every node of the cluster).
	buf := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(buf, uint32(n))
	buf = append(append(buf, b...), task...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.rw.Write(buf)
	return err
}

// Recv reads the next frame. It returns io.EOF when the peer closed the
// stream between frames.
func (c *Conn) Recv() (*Frame, error) {
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: %d bytes announced (max %d)", ErrFrameTooLarge, n, MaxFrame)
	}
	// Grown as bytes arrive: a peer that announces MaxFrame and sends
	// nothing more costs nothing.
	var b []byte
	if n <= 64<<10 {
		b = make([]byte, n)
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, fmt.Errorf("reading a frame of %d bytes: %w", n, io.ErrUnexpectedEOF)
		}
	} else if b, _ = io.ReadAll(io.LimitReader(c.r, int64(n))); len(b) < int(n) {
		return nil, fmt.Errorf("reading a frame of %d bytes: %w", n, io.ErrUnexpectedEOF)
	}
	// The frame's JSON, then a run frame's task: only the JSON is
	// decoded.
	f := &Frame{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(f); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("no JSON in %d bytes: %w", len(b), io.ErrUnexpectedEOF) // not the end of the stream
		}
		return nil, fmt.Errorf("decoding a frame: %w", err)
	}
	if f.V != Version {
		return nil, fmt.Errorf("worker protocol version %d, want %d (parent and worker are different loomd builds?)", f.V, Version)
	}
	if rest := b[dec.InputOffset():]; len(bytes.TrimSpace(rest)) > 0 {
		if f.Type != TypeRun || len(f.Task) > 0 {
			return nil, fmt.Errorf("decoding a %s frame: %d bytes after its JSON", f.Type, len(rest))
		}
		f.Task = rest
	}
	return f, nil
}
