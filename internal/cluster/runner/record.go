package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/jsretry"
)

// Bucket is the KV bucket of the daemons' cluster jobs: key <cluster>,
// the record of its current or last job.
const Bucket = "LOOM_CLUSTER_JOBS"

// Record is a cluster job as the daemons keep it: what was asked, its
// steps (a mirror of the cluster state's job, which holds them), which
// daemon runs it under what lease, and how it went. ID is the state
// job's.
type Record struct {
	ID      string  `json:"id"`
	Cluster string  `json:"cluster"`
	Request Request `json:"request"`
	Steps   []Step  `json:"steps"`
	// State is running (a daemon runs it, or will resume it), complete,
	// failed or cancelled.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Owner is the daemon running it (its queue owner name), Host and PID
	// where it runs. Owner is empty once released (a daemon that shut
	// down hands its jobs to the others at once).
	Owner string `json:"owner,omitempty"`
	Host  string `json:"host,omitempty"`
	PID   int    `json:"pid,omitempty"`
	// Lease is when the owner's claim ends unless renewed (every third of
	// the lease's length). Renewed is the owner's last renewal.
	Lease   time.Time `json:"lease"`
	Renewed time.Time `json:"renewed"`
	// Owners counts the daemons that ran it (1 + takeovers).
	Owners    int       `json:"owners"`
	Submitted time.Time `json:"submitted"`
	Ended     time.Time `json:"ended,omitzero"`
	// Cancel, when set, asks the owner to stop the job: who asked.
	Cancel string `json:"cancel,omitempty"`
	// Events are the job's own events (takeovers, interruptions), the
	// last 50.
	Events []state.Event `json:"events,omitempty"`
}

// Record states.
const (
	StateRunning   = "running"
	StateComplete  = "complete"
	StateFailed    = "failed"
	StateCancelled = "cancelled"
)

// Done reports whether the job ended for good.
func (r *Record) Done() bool { return r.State != StateRunning }

// Current is the step running (or next to run), or -1 when none is left.
func (r *Record) Current() int {
	for i, s := range r.Steps {
		if s.Status != StepComplete && s.Status != StepFailed {
			return i
		}
	}
	return -1
}

// Jobs lists the state job ids of the record (one: its own).
func (r *Record) Jobs() []string { return []string{r.ID} }

func (r *Record) addEvent(ev state.Event) {
	r.Events = append(r.Events, ev)
	if n := len(r.Events); n > 50 {
		r.Events = append(r.Events[:1:1], r.Events[n-49:]...)
	}
}

func (r *Record) clone() Record {
	data, _ := json.Marshal(r)
	var out Record
	_ = json.Unmarshal(data, &out)
	return out
}

// records is the bucket.
type records struct {
	kv      jetstream.KeyValue
	timeout time.Duration
	// cutOff, in tests, makes this daemon's writes fail as if it had
	// lost its connection to the store.
	cutOff atomic.Bool
}

func openRecords(ctx context.Context, js jetstream.JetStream, replicas int, retry *jsretry.Waiter) (*records, error) {
	kv, err := state.OpenBucket(ctx, js, Bucket, "loomd cluster jobs: key <cluster>, its current or last job (request, steps, owner, lease)", replicas, retry)
	if err != nil {
		return nil, err
	}
	return &records{kv: kv, timeout: 10 * time.Second}, nil
}

// ErrNoJob is returned for a cluster no daemon ran a job of.
var ErrNoJob = errors.New("no job of this cluster was run by a loomd")

func (s *records) get(ctx context.Context, cluster string) (Record, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	e, err := s.kv.Get(ctx, cluster)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, 0, fmt.Errorf("cluster %s: %w", cluster, ErrNoJob)
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("cluster %s: reading its job from bucket %s: %w", cluster, Bucket, err)
	}
	r, err := decode(e)
	return r, e.Revision(), err
}

func decode(e jetstream.KeyValueEntry) (Record, error) {
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return Record{}, fmt.Errorf("decoding the job of cluster %s (bucket %s): %w", e.Key(), Bucket, err)
	}
	return r, nil
}

// put writes r at revision rev (0: the key must not exist) and returns the
// new revision; a conflict wraps errConflict.
func (s *records) put(ctx context.Context, r Record, rev uint64) (uint64, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return 0, err
	}
	if s.cutOff.Load() {
		return 0, fmt.Errorf("cluster %s: writing its job to bucket %s: %w", r.Cluster, Bucket, nats.ErrConnectionClosed)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var n uint64
	if rev == 0 {
		n, err = s.kv.Create(ctx, r.Cluster, data)
	} else {
		n, err = s.kv.Update(ctx, r.Cluster, data, rev)
	}
	if isConflict(err) {
		return 0, fmt.Errorf("cluster %s: %w", r.Cluster, errConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("cluster %s: writing its job to bucket %s: %w", r.Cluster, Bucket, err)
	}
	return n, nil
}

func (s *records) delete(ctx context.Context, cluster string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.kv.Purge(ctx, cluster); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cluster %s: removing its job record: %w", cluster, err)
	}
	return nil
}

var errConflict = errors.New("the job record changed meanwhile")

func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}
