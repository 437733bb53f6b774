package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Change is one task record change, as the store's watch saw it: on any
// daemon sharing the queue, not only this one. Deletes are the exception:
// a record is purged, which the watch does not see, so Deleted changes come
// only from this daemon's Delete and retention sweeps.
type Change struct {
	TaskID   string
	TenantID string
	Cluster  string
	Type     string
	State    State
	Deleted  bool
}

// changeSubs are the callbacks OnChange registered.
type changeSubs struct {
	mu   sync.Mutex
	next int
	subs map[int]func(Change)
}

// OnChange calls f for every task record change from now on (submits,
// claims, outcomes, deletes), in the order the store's watch delivers
// them, until stop is called. f runs on the watch's goroutine: it must
// not block (the console hands each change to its event hub, which only
// marks its streams dirty).
func (q *Queue) OnChange(f func(Change)) (stop func()) {
	c := &q.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs == nil {
		c.subs = map[int]func(Change){}
	}
	id := c.next
	c.next++
	c.subs[id] = f
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.subs, id)
	}
}

// hasChangeSubs reports whether anyone follows record changes.
func (q *Queue) hasChangeSubs() bool {
	c := &q.changes
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs) > 0
}

// emit hands a change to the OnChange callbacks.
func (q *Queue) emit(ch Change) {
	c := &q.changes
	c.mu.Lock()
	subs := make([]func(Change), 0, len(c.subs))
	for _, f := range c.subs {
		subs = append(subs, f)
	}
	c.mu.Unlock()
	for _, f := range subs {
		f(ch)
	}
}

// ErrNoInput is returned by Input when the task is not kept: a task that
// succeeded (its message is removed once its outcome is recorded), or one
// whose task was larger than MaxKeptInput.
var ErrNoInput = errors.New("the task's input is no longer kept")

// Input returns the task as it was submitted: read from its queue
// message while the task is queued or running, from its record once it
// failed or was cancelled (Record.Input). It is the raw task: redact it
// before showing it to anyone.
func (q *Queue) Input(ctx context.Context, id string) ([]byte, error) {
	rec, err := q.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(rec.Input) > 0 {
		return rec.Input, nil
	}
	if rec.State.Terminal() || rec.Seq == 0 {
		return nil, fmt.Errorf("%w (task %s is %s)", ErrNoInput, id, rec.State)
	}
	msg, err := q.taskStream(rec.Part).GetMsg(ctx, rec.Seq)
	if err != nil {
		if msgGone(err) {
			return nil, fmt.Errorf("%w (task %s's message is gone)", ErrNoInput, id)
		}
		return nil, fmt.Errorf("reading the message of task %s: %w", id, err)
	}
	if got := msg.Header.Get(TaskIDHeader); got != "" && got != id {
		return nil, fmt.Errorf("%w (message %d now holds task %s)", ErrNoInput, rec.Seq, got)
	}
	return msg.Data, nil
}
