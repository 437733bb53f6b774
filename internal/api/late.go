package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/tasklog"
)

// LateParts are the API's parts a daemon may open only after the API
// listens: the cluster jobs (their state bucket, records and log) and
// the task logs. On a new store they are streams and buckets to create,
// which no task submit or read needs.
type LateParts struct {
	ClusterStore *state.KVStore
	ClusterJobs  *runner.Runner
	ClusterLog   *joblog.Stream
	TaskLogs     *tasklog.Log
}

// Late holds LateParts until they are open. A request that needs them
// waits (at most LateWait, and its own context), then gets 503 with
// Retry-After and what is still being opened, or what failed.
type Late struct {
	what string
	once sync.Once
	done chan struct{}
	p    LateParts
	err  error
	wait time.Duration // LateWait; shorter in tests
}

// LateWait bounds how long a request waits for the late parts.
const LateWait = 10 * time.Second

// NewLate is a Late to be Set once its parts are open; what names them
// for the operator ("the cluster jobs' and task logs' streams").
func NewLate(what string) *Late {
	return &Late{what: what, done: make(chan struct{}), wait: LateWait}
}

// ReadyLate is a Late holding p already.
func ReadyLate(p LateParts) *Late {
	l := NewLate("")
	l.Set(p, nil)
	return l
}

// Set gives the parts, or the error that kept them from opening (then
// every request that needs them gets 503 with it). Only the first call
// counts.
func (l *Late) Set(p LateParts, err error) {
	l.once.Do(func() {
		l.p, l.err = p, err
		close(l.done)
	})
}

// UnavailableError is a request's answer when what it needs is not open:
// the late parts while they open (Starting, Err nil) or after they failed
// to (Starting, Err set: the daemon exits), or a bucket the NATS cluster
// could not create or open within the request. The API answers it with
// 503 and Retry-After.
type UnavailableError struct {
	What     string
	Err      error
	Starting bool // the late parts of the daemon's start
}

func (e *UnavailableError) Error() string {
	switch {
	case e.Starting && e.Err == nil:
		return fmt.Sprintf("this loomd is still opening %s (it waits for the NATS cluster, up to --start-timeout; see its log): try again after the Retry-After delay", e.What)
	case e.Starting:
		return fmt.Sprintf("this loomd could not open %s: %v; the daemon exits and must be restarted once the NATS cluster can create them (see its log)", e.What, e.Err)
	}
	return fmt.Sprintf("the NATS cluster cannot create or open %s right now: %v; try again after the Retry-After delay", e.What, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Wait returns the parts once open, or an *UnavailableError when ctx ends or
// LateWait passes first, or when they failed to open.
func (l *Late) Wait(ctx context.Context) (LateParts, error) {
	select {
	case <-l.done:
	default:
		t := time.NewTimer(l.wait)
		defer t.Stop()
		select {
		case <-l.done:
		case <-ctx.Done():
			return LateParts{}, &UnavailableError{What: l.what, Starting: true}
		case <-t.C:
			return LateParts{}, &UnavailableError{What: l.what, Starting: true}
		}
	}
	if l.err != nil {
		return LateParts{}, &UnavailableError{What: l.what, Err: l.err, Starting: true}
	}
	return l.p, nil
}

// get is the parts once Set, for a request that already waited for
// them with its context (or that may wait for the start to end them):
// nil parts after a failure.
func (l *Late) get() LateParts {
	<-l.done
	return l.p
}

// writeUnavailable answers err with 503 and Retry-After when it is an
// *UnavailableError, and reports whether it did.
func writeUnavailable(w http.ResponseWriter, err error) bool {
	var un *UnavailableError
	if !errors.As(err, &un) {
		return false
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, un.Error())
	return true
}

// lateReady waits for the late parts for r; false when it answered 503.
func (s *Server) lateReady(w http.ResponseWriter, r *http.Request) bool {
	_, err := s.late.Wait(r.Context())
	if err != nil {
		s.log.Warn("a request needs what this loomd has not opened", "path", r.URL.Path, "err", err)
		writeUnavailable(w, err)
		return false
	}
	return true
}

func (s *Server) clusterJobs() *runner.Runner { return s.late.get().ClusterJobs }
func (s *Server) clusterLog() *joblog.Stream  { return s.late.get().ClusterLog }
func (s *Server) taskLogStore() *tasklog.Log  { return s.late.get().TaskLogs }
