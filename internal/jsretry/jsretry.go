// Package jsretry retries JetStream requests that fail while a NATS
// cluster cannot answer them yet: a server of the cluster is offline, a
// leader is being elected, the cluster has no quorum. It classifies
// errors into transient (wait and try again) and permanent (a bad
// configuration, a stream that exists with a configuration that cannot be
// changed, permission denied: fail at once), and holds the one retry loop
// with jittered backoff that loomd's start (the streams, key-value buckets
// and object stores it creates or opens) and the queue's leader reads use.
package jsretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes (nats-server's errors.json) that a cluster
// recovers from by itself.
const (
	codeClusterNoPeers    = 10005 // "no suitable peers for placement, ..."
	codeClusterNotAssign  = 10007 // "JetStream cluster not assigned to this server"
	codeClusterNotAvail   = 10008 // "JetStream system temporarily unavailable"
	codeClusterNotLeader  = 10009 // "JetStream cluster can not handle request"
	codeInsufficient      = 10023 // "insufficient resources"
	codeStreamOffline     = 10118 // "stream is offline"
	codeStreamOfflineWhy  = 10194 // "stream is offline: ..."
	codeNotEnabled        = 10076 // "jetstream not enabled": also nats.go's word for no responders
	codeNotEnabledAccount = 10039 // "jetstream not enabled for account" (503, but configuration)
)

// Transient reports whether err is a failure a NATS cluster recovers from
// by itself: no server answered (no responders, a request that timed out),
// the connection is reconnecting, the cluster has no meta or stream leader
// right now (503), or a replicated stream cannot be placed because a peer
// is offline. "jetstream not enabled" counts too: nats.go says so of a
// key-value or object store request no server answered, which is also
// what a cluster whose JetStream is not up yet does. So does a server
// not reachable yet when connecting (no servers available, a dial that
// fails: refused, unreachable, a name not resolving yet). Anything else (a JetStream API error about the request
// itself, an authorization error, a closed connection) is permanent.
//
// Of errors joined together (errors.Join), one transient one makes them
// transient. A timeout is transient: an attempt's own deadline, not the caller's,
// which ends the retries anyway.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		// Several requests' errors (errors.Join): one transient is enough.
		return slices.ContainsFunc(j.Unwrap(), Transient)
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		a := je.APIError()
		switch a.ErrorCode {
		case codeNotEnabledAccount:
			return false
		case codeNotEnabled, codeClusterNotAssign, codeClusterNotAvail, codeClusterNotLeader, codeInsufficient, codeStreamOffline, codeStreamOfflineWhy:
			return true
		case codeClusterNoPeers:
			// Placement fails for good when the cluster has fewer servers
			// than replicas or no server matches the placement tags; it
			// waits when the servers are there but one is offline.
			return strings.Contains(a.Description, "peer offline")
		}
		return a.Code == 503
	}
	var dial *net.OpError
	if errors.As(err, &dial) && dial.Op == "dial" {
		return true
	}
	return errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, nats.ErrNoServers) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// Waiter retries the requests of one phase (loomd's start) and tells the
// operator what it waits for: one warning for the requests failing at
// that moment (once they failed for a second), again every WarnEvery
// while some still fail, and a line when all went through. A nil *Waiter
// tries once.
type Waiter struct {
	// Logger gets the warnings; nil logs nothing.
	Logger *slog.Logger
	// Hint says what to do about a transient failure that lasts, in the
	// terms of the program's options (which servers to bring back, which
	// flag lowers the replicas, which one bounds the wait).
	Hint string
	// WarnEvery is the time between two warnings (default 15 s).
	WarnEvery time.Duration
	// Attempt bounds one attempt when the context allows longer
	// (default 10 s): an attempt that waits for a server that does not
	// answer gives up and is tried again, and the waiting is reported.
	Attempt time.Duration
	// Min and Max bound the backoff between attempts (default 100 ms and
	// 5 s); each wait is drawn between half and all of the current step.
	Min, Max time.Duration

	mu      sync.Mutex
	failing map[string]error // what -> its last transient error
	warned  time.Time        // when the last warning was logged
	since   time.Time        // when the first of failing began failing
}

// Do calls f until it returns nil or a permanent error, or ctx ends. what
// names what f creates or opens, for the operator: "stream LOOM_TASKS (3
// replicas)". A permanent error is returned as f returned it; when ctx
// ends, f's last error, saying how long it was retried and w's Hint.
func (w *Waiter) Do(ctx context.Context, what string, f func(context.Context) error) error {
	if w == nil {
		return f(ctx)
	}
	start := time.Now()
	step := orDefault(w.Min, 100*time.Millisecond)
	failed := false
	for n := 1; ; n++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d := orDefault(w.Attempt, 10*time.Second); d > 0 {
			actx, cancel = context.WithTimeout(ctx, d)
		}
		err := f(actx)
		cancel()
		switch {
		case err == nil:
			if failed {
				w.done(what, n, time.Since(start))
			}
			return nil
		case !Transient(err):
			if failed {
				w.done(what, 0, 0)
			}
			return err
		case ctx.Err() != nil:
			if failed {
				w.done(what, 0, 0)
			}
			return w.gaveUp(ctx, err, n, time.Since(start))
		}
		failed = true
		w.fail(what, err)
		t := time.NewTimer(step/2 + rand.N(step/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			w.done(what, 0, 0)
			return w.gaveUp(ctx, err, n, time.Since(start))
		case <-t.C:
		}
		step = min(2*step, orDefault(w.Max, 5*time.Second))
	}
}

// What names a stream or bucket for the operator: "stream LOOM_TASKS (3
// replicas)".
func What(kind, name string, replicas int) string {
	if replicas == 1 {
		return fmt.Sprintf("%s %s (1 replica)", kind, name)
	}
	return fmt.Sprintf("%s %s (%d replicas)", kind, name, replicas)
}

// Hint is what to do when streams of replicas replicas cannot be created:
// flag names the option that sets the replicas.
func Hint(replicas int, flag string) string {
	if replicas <= 1 {
		return "check that the NATS servers are up and reachable"
	}
	return fmt.Sprintf("with %s %d, each stream needs %d JetStream servers of the cluster up: bring the offline ones back, or use fewer %s", flag, replicas, replicas, flag)
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// gaveUp is the error of a transient failure that outlasted ctx. The
// hint is left to the caller (Explain), once for all that failed.
func (w *Waiter) gaveUp(ctx context.Context, err error, tries int, took time.Duration) error {
	return fmt.Errorf("%w (still failing after %d tries over %s, until %v)", err, tries, took.Round(100*time.Millisecond), context.Cause(ctx))
}

// Explain adds what to do to err when a transient failure is in it (err
// may join several): w's Hint, and whether the servers run JetStream
// when none answered.
func (w *Waiter) Explain(err error) error {
	if w == nil || !Transient(err) {
		return err
	}
	hint := w.Hint
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
		hint = "no NATS server answered the JetStream API: check that the servers run with JetStream enabled (and, with --nats-domain, in that domain); " + hint
	}
	if hint == "" {
		return err
	}
	return fmt.Errorf("%w\nwhat to do: %s", err, hint)
}

// fail records a transient failure of what, and warns when it is time.
func (w *Waiter) fail(what string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failing == nil {
		w.failing = map[string]error{}
	}
	if len(w.failing) == 0 {
		w.since = time.Now()
	}
	w.failing[what] = err
	// The first warning waits a second, for the requests made at the same
	// time to fail too (it names them all) or for a short election to end
	// (nothing to say).
	if w.Logger == nil || time.Since(w.since) < time.Second || time.Since(w.warned) < orDefault(w.WarnEvery, 15*time.Second) {
		return
	}
	w.warned = time.Now()
	names := make([]string, 0, len(w.failing))
	for n := range w.failing {
		names = append(names, n)
	}
	slices.Sort(names)
	more := ""
	if len(names) > 4 {
		more = fmt.Sprintf(" and %d more", len(names)-4)
		names = names[:4]
	}
	msg := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		// The cluster said nothing: no meta leader, or a placement that
		// waits for an offline peer.
		msg = fmt.Sprintf("no answer within %v (%v)", orDefault(w.Attempt, 10*time.Second), err)
	}
	w.Logger.Warn(fmt.Sprintf("waiting for the NATS cluster to create or open %s%s; trying again: %s", strings.Join(names, ", "), more, w.Hint),
		"err", msg, "waiting", time.Since(w.since).Round(time.Second).String())
}

// done records that what no longer fails (it went through after tries
// attempts, taking took; tries 0: it gave up), and says so once nothing
// fails after a warning.
func (w *Waiter) done(what string, tries int, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.failing[what]; !ok {
		return
	}
	delete(w.failing, what)
	if len(w.failing) == 0 && !w.warned.IsZero() && tries > 0 && w.Logger != nil {
		w.Logger.Info("the NATS cluster created or opened what it was waited for", "last", what, "tries", tries, "waited", took.Round(100*time.Millisecond).String())
	}
}
