package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The reconciler. A task's truth is split between its record (state,
// attempts, owner) and its message in the task stream (what a worker is
// handed). Every path keeps them in step, but a store failure or a crash
// between two writes can leave a record that no message backs any more: a
// queued task whose message is gone would wait forever, a running task
// whose daemon died and whose message is gone would never finish. The
// reconciler looks for such records and settles them. Records whose
// message is still there need nothing: the message is delivered, or
// redelivered once its worker's heartbeats stop, and the claim sorts out
// the rest.

// Repair is what the reconciler did to one record.
type Repair struct {
	TaskID string
	From   State
	Reason string
}

// Reconcile checks every queued and running record against the task
// stream once and repairs those no message backs. It returns what it
// repaired. Several daemons may run it at once: every repair is a
// compare-and-set on the record.
func (q *Queue) Reconcile(ctx context.Context) ([]Repair, error) {
	var out []Repair
	for _, st := range []State{Queued, Running} {
		// Pages from the index: only the active tasks are read.
		for after := ""; ; {
			page, err := q.List(ctx, Filter{State: st, Limit: MaxPageSize, After: after})
			if err != nil {
				return out, fmt.Errorf("listing %s tasks: %w", st, err)
			}
			for _, rec := range page.Records {
				r, err := q.reconcileOne(ctx, rec)
				if err != nil {
					return out, err
				}
				if r != nil {
					out = append(out, *r)
				}
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
	}
	return out, nil
}

// reconcileOne settles one record, or leaves it. It returns nil when the
// record needed nothing.
func (q *Queue) reconcileOne(ctx context.Context, rec Record) (*Repair, error) {
	since := rec.Created
	if rec.Started != nil && rec.Started.After(since) {
		since = *rec.Started
	}
	// Writes in flight (a submit between its publish and its record, a
	// claim, an outcome being retried) settle well within the grace.
	if time.Since(since) < q.cfg.ReconcileGrace || rec.State.Terminal() {
		return nil, nil
	}
	if rec.State == Running && rec.Owner == q.cfg.Owner && q.holds(rec.TaskID) {
		return nil, nil // ours, still running or writing its outcome
	}
	if rec.Seq == 0 {
		// Recorded before its message's sequence was known: nothing to
		// check it against.
		return nil, nil
	}
	switch _, err := q.taskStream(rec.Part).GetMsg(ctx, rec.Seq); {
	case err == nil:
		return nil, nil // the message is there: it will be (re)delivered
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, fmt.Errorf("checking the message of task %s: %w", rec.TaskID, err)
	}
	if rec.State == Running && rec.Owner != q.cfg.Owner && (q.ownerLive(rec.Owner) || q.recentTrouble()) {
		// Its daemon lives and still holds it: the outcome is being
		// written.
		return nil, nil
	}
	now := time.Now().UTC()
	next := rec
	next.State, next.Finished = Failed, &now
	switch rec.State {
	case Queued:
		next.Error = "lost: the task's message is gone from the queue (a store failure), so it never ran; submit it again"
	default:
		next.Error = fmt.Sprintf("lost: attempt %d on %s never recorded an outcome and the task's message is gone from the queue; the hook may have run: check the node, then submit it again",
			rec.Attempts, rec.Owner)
	}
	st := 1
	next.Status = &st
	next.Result = mustJSON(map[string]any{"taskId": rec.TaskID, "status": st, "message": next.Error,
		"error": map[string]any{"kind": "lost", "message": next.Error}})
	rev, err := q.write(ctx, rec, next)
	if isConflict(err) {
		return nil, nil // it moved on meanwhile: nothing to repair
	}
	if err != nil {
		q.noteWriteErr(err)
		return nil, fmt.Errorf("repairing task %s: %w", rec.TaskID, err)
	}
	next.Revision = rev
	q.notify(Transition{From: rec.State, Record: next})
	q.log.Warn("reconciler: task failed for good", "task", rec.TaskID, "type", rec.Type, "was", rec.State, "reason", next.Error)
	return &Repair{TaskID: rec.TaskID, From: rec.State, Reason: next.Error}, nil
}

// holds reports whether this process runs the task or writes its outcome.
func (q *Queue) holds(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.flights[id]
	return ok
}

// ownerLive reports whether a daemon of that name announced its served
// types recently (see served.go).
func (q *Queue) ownerLive(owner string) bool {
	if q.served == nil {
		return false
	}
	return q.served.ownerLive(owner)
}

// OwnerLive reports whether the daemon named owner is alive: it announced
// its served plugin types within Config.ServedTTL, or this daemon cannot
// tell yet (its own view of the announcements is stale or fresh from a
// gap). Work owned by a daemon is taken over only when this is false.
func (q *Queue) OwnerLive(owner string) bool { return q.ownerLive(owner) }

// RecentTrouble reports whether a broker call of this daemon failed
// lately: silence of other daemons then proves nothing, and nothing of
// theirs is taken over.
func (q *Queue) RecentTrouble() bool { return q.recentTrouble() }

// noteTrouble records that a broker call failed just now (a heartbeat, a
// record write, an announcement).
func (q *Queue) noteTrouble() { q.trouble.Store(time.Now().UnixNano()) }

// recentTrouble reports whether a broker call failed within the served
// TTL plus a heartbeat interval: long enough for a daemon that lived
// through the same outage to announce itself again and finish writing
// its outcomes. Until then, no running task is taken over.
func (q *Queue) recentTrouble() bool {
	last := q.trouble.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < q.cfg.ServedTTL+q.cfg.AckWait/3
}

// reconcileLoop runs Reconcile every interval until ctx ends.
func (q *Queue) reconcileLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, _, full := q.Exhausted(); full {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		if _, err := q.Reconcile(rctx); err != nil && ctx.Err() == nil {
			q.log.Warn("reconciling task records failed; trying again later", "err", err)
		}
		cancel()
	}
}
