package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// CancelBucket holds cancel requests for running tasks, key cancel.<id>.
// Every daemon watches it; the one running the task cancels the hook's
// context. A request outlives a daemon that dies mid-task: whoever runs
// the task next sees it at once. Keys are removed when the task ends,
// and expire after a day.
const CancelBucket = "LOOM_CANCEL"

const cancelPrefix = "cancel."

// runningTask is a task this process is running.
type runningTask struct {
	cancel    context.CancelFunc
	requested bool
}

// publishTask queues a task message. The message id is the task id, so
// the stream drops a second publish. When that drop hides a message that
// is gone (the task finished and was deleted inside the dedupe window),
// the task is queued again under a message id of its own; the
// Loom-Task-Id header still names it.
func (q *Queue) publishTask(ctx context.Context, route Route, shard int, id string, task []byte) (*jetstream.PubAck, error) {
	msg := &nats.Msg{Subject: route.subjectIn(shard), Data: task, Header: nats.Header{}}
	msg.Header.Set(TaskIDHeader, id)
	js := q.shards[shard].js
	ack, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
	if err != nil || !ack.Duplicate || q.msgExists(ctx, shard, ack.Sequence) {
		return ack, err
	}
	q.log.Debug("task id was deleted inside the dedupe window; queueing it under a new message id", "task", id)
	return js.PublishMsg(ctx, msg, jetstream.WithMsgID(id+"."+NewID()))
}

// Delete removes a finished task (succeeded, failed or cancelled): its
// record, its stored result and its index entry. The id may then be
// submitted again. A queued or running task is not deleted: the error
// wraps ErrNotFinished (cancel it first); an unknown id gives ErrNotFound.
func (q *Queue) Delete(ctx context.Context, id string) (Record, error) {
	rec, err := q.get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if !rec.State.Terminal() {
		return rec, fmt.Errorf("%w: task %s is %s", ErrNotFinished, id, rec.State)
	}
	if err := q.remove(ctx, rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// remove deletes a finished task's data. A finished record is never
// written again, so purging its key needs no compare-and-set.
func (q *Queue) remove(ctx context.Context, rec Record) error {
	id := rec.TaskID
	// Its message, in case the ack was lost: a leftover message would run
	// the deleted task again as a new one.
	if rec.Seq != 0 {
		if err := q.taskStream(rec.Part).DeleteMsg(ctx, rec.Seq); err != nil && !msgGone(err) {
			return fmt.Errorf("deleting task %s: removing its queue message %d: %w", id, rec.Seq, err)
		}
	}
	if rec.ResultRef != "" {
		if err := q.obj.Delete(ctx, rec.ResultRef); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("deleting task %s: removing its result object %s: %w", id, rec.ResultRef, err)
		}
	}
	i := shardOf(id)
	subj := "$KV." + q.kvs[i].Bucket() + "." + keyPrefix + id
	if err := q.ix.kvStreams[i].Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return fmt.Errorf("deleting task %s: purging its record: %w", id, err)
	}
	if rec.IndexSeq != 0 {
		if err := q.ix.streams[indexPart(i, false)].DeleteMsg(ctx, rec.IndexSeq); err != nil && !msgGone(err) {
			q.log.Debug("removing a deleted task's index entry failed; readers skip it", "task", id, "err", err)
		}
	}
	if q.hasChangeSubs() {
		q.emit(Change{TaskID: id, TenantID: rec.TenantID, Cluster: rec.ClusterID, Type: rec.Type, State: rec.State, Deleted: true})
	}
	return nil
}

// Cancel stops a task that has not finished. A queued task becomes
// cancelled at once and never runs; the record returned says so. For a
// running task Cancel files a request and returns the record as it is
// (running): the daemon running it cancels the hook's context and records
// the task cancelled when the hook returns (or its real outcome, if the
// hook finished successfully first). A finished task gives an error
// wrapping ErrFinished; an unknown id ErrNotFound.
func (q *Queue) Cancel(ctx context.Context, id string) (Record, error) {
	for range 16 {
		cur, err := q.get(ctx, id)
		if err != nil {
			return Record{}, err
		}
		switch {
		case cur.State.Terminal():
			return cur, fmt.Errorf("%w: task %s is %s", ErrFinished, id, cur.State)
		case cur.State == Running:
			req := mustJSON(map[string]any{"by": q.cfg.Owner, "at": time.Now().UTC()})
			if _, err := q.ix.cancelKV.Put(ctx, cancelPrefix+id, req); err != nil {
				return cur, fmt.Errorf("requesting the cancellation of task %s: %w", id, err)
			}
			q.log.Info("cancel requested for a running task", "task", id, "owner", cur.Owner)
			return cur, nil
		}
		next := cancelledRecord(cur, "cancelled before it ran")
		if cur.Seq != 0 {
			// Its message goes below: keep the task in the record.
			if m, err := q.taskStream(cur.Part).GetMsg(ctx, cur.Seq); err == nil && taskIDOf(m.Header) == id {
				keepInput(&next, m.Data)
			}
		}
		rev, err := q.write(ctx, cur, next)
		if isConflict(err) {
			continue // a worker just claimed it: look again
		}
		if err != nil {
			return cur, fmt.Errorf("cancelling task %s: %w", id, err)
		}
		next.Revision = rev
		q.notify(Transition{From: cur.State, Record: next})
		// The message would only be dropped by the worker that gets it,
		// and sits in the stream until then (forever, for a type no daemon
		// serves).
		if cur.Seq != 0 {
			if err := q.taskStream(cur.Part).DeleteMsg(ctx, cur.Seq); err != nil && !msgGone(err) {
				q.log.Debug("removing a cancelled task's message failed; a worker will drop it", "task", id, "err", err)
			}
		}
		return next, nil
	}
	return Record{}, fmt.Errorf("cancelling task %s: its record keeps changing; try again", id)
}

// cancelledRecord is cur, cancelled with a result of error kind
// "cancelled".
func cancelledRecord(cur Record, why string) Record {
	next := cur
	now := time.Now().UTC()
	st := 1
	next.State, next.Finished, next.Status = Cancelled, &now, &st
	next.Error = "cancelled: " + why
	next.Result = mustJSON(map[string]any{"taskId": cur.TaskID, "status": st, "message": next.Error,
		"error": map[string]any{"kind": "cancelled", "message": why}})
	next.ResultRef = ""
	return next
}

// watchCancels follows the cancel requests for as long as the queue
// lives, and cancels the tasks this process runs when asked.
func (q *Queue) watchCancels() error {
	w, err := q.ix.cancelKV.Watch(context.Background(), cancelPrefix+">")
	if err != nil {
		return fmt.Errorf("watching cancel requests in %s: %w", CancelBucket, err)
	}
	q.watchMu.Lock()
	q.watch = append(q.watch, w)
	q.watchMu.Unlock()
	q.watchWG.Add(1)
	go func() {
		defer q.watchWG.Done()
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			id := strings.TrimPrefix(e.Key(), cancelPrefix)
			q.ix.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				q.ix.cancels[id] = true
				if rt := q.ix.running[id]; rt != nil && !rt.requested {
					rt.requested = true
					rt.cancel()
					q.log.Info("cancelling a running task on request", "task", id)
				}
			} else {
				delete(q.ix.cancels, id)
			}
			q.ix.mu.Unlock()
		}
	}()
	return nil
}

// track registers a task this process starts running, so a cancel
// request reaches it; a request filed before it started cancels it now.
func (q *Queue) track(id string, cancel context.CancelFunc) {
	q.ix.mu.Lock()
	defer q.ix.mu.Unlock()
	rt := &runningTask{cancel: cancel}
	q.ix.running[id] = rt
	if q.ix.cancels[id] {
		rt.requested = true
		cancel()
	}
}

// untrack ends tracking and says whether a cancel was requested while the
// task ran.
func (q *Queue) untrack(id string) (requested bool) {
	q.ix.mu.Lock()
	defer q.ix.mu.Unlock()
	if rt := q.ix.running[id]; rt != nil {
		requested = rt.requested
		delete(q.ix.running, id)
	}
	return requested
}

// clearCancel removes a handled cancel request.
func (q *Queue) clearCancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := q.ix.cancelKV.Purge(ctx, cancelPrefix+id); err != nil {
		q.log.Debug("removing a handled cancel request failed; it expires in a day", "task", id, "err", err)
	}
}
