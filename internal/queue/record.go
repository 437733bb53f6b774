package queue

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// State is where a task is in its lifecycle.
type State string

// The task states. Every change is a compare-and-set on the task's KV
// record: queued -> running -> succeeded | failed, running -> queued when
// an attempt hit an infrastructure failure and will be retried, and
// queued | running -> cancelled on request (see Queue.Cancel).
const (
	Queued    State = "queued"
	Running   State = "running"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// States lists every state, in lifecycle order.
func States() []State { return []State{Queued, Running, Succeeded, Failed, Cancelled} }

// Terminal reports whether a task in state s is finished for good.
func (s State) Terminal() bool { return s == Succeeded || s == Failed || s == Cancelled }

// ParseState checks a state name, for filters given by users.
func ParseState(s string) (State, error) {
	all := States()
	for _, st := range all {
		if string(st) == s {
			return st, nil
		}
	}
	names := make([]string, len(all))
	for i, st := range all {
		names[i] = string(st)
	}
	return "", fmt.Errorf("unknown task state %q (want one of %s)", s, strings.Join(names, ", "))
}

// Record is the state of one task, as kept in the KV bucket under
// "task.<id>". Revision is the KV revision the record was read at; it is
// what fences a stale writer out.
type Record struct {
	TaskID string `json:"taskId"`
	// TenantID is the task's tenantId; empty means the running daemon's
	// --tenant.
	TenantID string `json:"tenantId,omitempty"`
	// ClusterID is the task's clusterId, for filtering lists.
	ClusterID string `json:"clusterId,omitempty"`
	State     State  `json:"state"`
	Attempts  int    `json:"attempts"`
	// Crashes counts the attempts whose run killed the worker process
	// running it (see ErrWorkerCrashed).
	Crashes  int             `json:"crashes,omitempty"`
	Owner    string          `json:"owner,omitempty"`
	Family   string          `json:"family"`
	Type     string          `json:"type"`
	Hook     string          `json:"hook"`
	TaskName string          `json:"taskName"`
	Created  time.Time       `json:"created"`
	Started  *time.Time      `json:"started,omitempty"`
	Finished *time.Time      `json:"finished,omitempty"`
	Status   *int            `json:"status,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	// ResultRef names the object holding a result too large for the KV
	// value; Get loads it into Result.
	ResultRef string `json:"resultRef,omitempty"`
	// ResultSize is the size in bytes of the object ResultRef names (0 in
	// records written before it was kept).
	ResultSize int64  `json:"resultSize,omitempty"`
	Error      string `json:"error,omitempty"`
	// Seq is the stream sequence of the message the current attempt runs
	// from; it tells a redelivery from a duplicate copy of the task.
	Seq uint64 `json:"seq,omitempty"`
	// Part is the shard of the task stream that holds message Seq: 0 is
	// LOOM_TASKS (and every record from before the task stream was
	// sharded), n is LOOM_TASKS_<n>.
	Part int `json:"part,omitempty"`
	// IndexSeq is the sequence of the task's current entry in the index
	// stream (see index.go); an entry with another sequence is stale.
	IndexSeq uint64 `json:"indexSeq,omitempty"`
	// Input is the task as submitted, kept once the task failed or was
	// cancelled (its queue message is gone then) so that it can be shown,
	// redacted, and run again; at most MaxKeptInput bytes. Succeeded
	// tasks keep none: the store stays as small as before for them. It
	// holds the task's secrets: never serve it unredacted.
	Input json.RawMessage `json:"input,omitempty"`

	Revision uint64 `json:"-"`
}

// TenantOr is the record's tenant: its tenantId, else def (the daemon's
// --tenant, which a task without tenantId runs as).
func (r Record) TenantOr(def string) string {
	if r.TenantID != "" {
		return r.TenantID
	}
	return def
}

// Duration is how long the last attempt ran, or zero when it has not
// finished.
func (r Record) Duration() time.Duration {
	if r.Started == nil || r.Finished == nil {
		return 0
	}
	return r.Finished.Sub(*r.Started)
}

// Route names the queue subject of a plugin type: loom.task.<family>.<type>.
type Route struct {
	Family string
	Type   string
}

// Subject is the stream subject tasks for this route travel on in shard
// 0 of the task stream (LOOM_TASKS); see subjectIn for the others.
func (r Route) Subject() string { return r.subjectIn(0) }

// subjectIn is the subject of the route's tasks in a shard of the task
// stream.
func (r Route) subjectIn(shard int) string {
	if shard == 0 {
		return subjectPrefix + r.Family + "." + r.Type
	}
	return shardPrefix + strconv.Itoa(shard) + "." + r.Family + "." + r.Type
}

// routeOfSubject is the shard and route of a task subject.
func routeOfSubject(subj string) (shard int, r Route, ok bool) {
	rest, ok := strings.CutPrefix(subj, subjectPrefix)
	if !ok {
		var n string
		if rest, ok = strings.CutPrefix(subj, shardPrefix); !ok {
			return 0, Route{}, false
		}
		if n, rest, ok = strings.Cut(rest, "."); !ok {
			return 0, Route{}, false
		}
		var err error
		if shard, err = strconv.Atoi(n); err != nil || shard < 1 || shard >= StateShards {
			return 0, Route{}, false
		}
	}
	fam, typ, ok := strings.Cut(rest, ".")
	return shard, Route{Family: fam, Type: typ}, ok
}

// String is "family/type", for logs.
func (r Route) String() string { return r.Family + "/" + r.Type }

// consumerName is the durable consumer shared by every daemon that serves
// the route. Characters a consumer name cannot hold are hex-escaped.
func (r Route) consumerName() string {
	var b strings.Builder
	b.WriteString("loom_")
	for _, s := range []string{r.Family, r.Type} {
		escapeName(&b, s)
		b.WriteString("__")
	}
	return strings.TrimSuffix(b.String(), "__")
}

// escapeName writes s keeping letters, digits and '-', and hex-escaping
// every other byte as _xx: the result fits a consumer name or a KV key
// token.
func escapeName(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(b, "_%02x", c)
		}
	}
}

func (r Route) validate() error {
	if err := validToken("plugin family", r.Family); err != nil {
		return err
	}
	return validToken("plugin type", r.Type)
}

// validToken checks that s can be one token of a NATS subject.
func validToken(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if strings.ContainsAny(s, ".*>") || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s %q cannot name a queue subject: remove '.', '*', '>', spaces and control characters", what, s)
	}
	return nil
}

// validID checks a task id: it becomes a KV key and a URL path segment.
func validID(id string) error {
	if len(id) > 200 {
		return fmt.Errorf("taskId is %d characters long; the limit is 200", len(id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '=' || c == '.') {
			return fmt.Errorf("taskId %q holds %q; use only letters, digits, '-', '_', '=' and '.'", id, c)
		}
	}
	if id == "" || id[0] == '.' || id[len(id)-1] == '.' || strings.Contains(id, "..") {
		return fmt.Errorf("taskId %q must not be empty, start or end with '.', or hold \"..\"", id)
	}
	return nil
}

// NewID returns a new task id: a ULID (48-bit millisecond time and 80
// random bits in Crockford base32), so ids sort by creation time.
func NewID() string {
	const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	for i := 5; i >= 0; i-- {
		b[i] = byte(ms)
		ms >>= 8
	}
	_, _ = rand.Read(b[6:]) // crypto/rand.Read never fails
	// 128 bits -> 26 characters of 5 bits, the first one holding 3 bits.
	out := make([]byte, 26)
	var acc uint64
	bits := 0
	pos := 25
	for i := 15; i >= 0; i-- {
		acc |= uint64(b[i]) << bits
		bits += 8
		for bits >= 5 && pos >= 0 {
			out[pos] = alphabet[acc&31]
			acc >>= 5
			bits -= 5
			pos--
		}
	}
	if pos >= 0 {
		out[pos] = alphabet[acc&31]
	}
	return string(out)
}

// ErrNotFound is returned for a task id the queue has no record of.
var ErrNotFound = errors.New("task not found")

// ErrNotFinished is returned by Delete for a task that is still queued
// or running: cancel it first.
var ErrNotFinished = errors.New("task is not finished")

// ErrFinished is returned by Cancel for a task that already finished.
var ErrFinished = errors.New("task already finished")

// ErrClosed is returned by calls on a queue that was closed.
var ErrClosed = errors.New("queue is closed")

// MaxKeptInput caps the task kept in a failed or cancelled record.
const MaxKeptInput = 64 << 10

// keepInput keeps task in next when next is failed or cancelled.
func keepInput(next *Record, task []byte) {
	if (next.State == Failed || next.State == Cancelled) && len(task) > 0 && len(task) <= MaxKeptInput && json.Valid(task) {
		next.Input = json.RawMessage(task)
	}
}

// maxRecordError caps a record's error summary.
const maxRecordError = 8 << 10

// capText cuts s to at most max bytes on a rune boundary, saying how much
// was cut.
func capText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("... [%d bytes cut; the whole message is in the result]", len(s)-cut)
}
