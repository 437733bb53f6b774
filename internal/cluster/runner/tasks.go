package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// Queue is what the runner needs of the task queue; *queue.Queue has it.
type Queue interface {
	Submit(ctx context.Context, task []byte) (queue.Record, bool, error)
	Wait(ctx context.Context, id string) (queue.Record, error)
	Served(route queue.Route) (bool, []queue.Route)
}

var _ Queue = (*queue.Queue)(nil)

// queueTasks runs a job's tasks through the queue: any daemon serving the
// plugin type runs them. Submitting a task id the queue knows queues
// nothing: a resumed or taken-over job gets the outcome of a run it lost
// track of by its id, or waits for it.
type queueTasks struct {
	q       Queue
	timeout time.Duration
	// warn writes a warning into the job's log.
	warn func(msg string, attrs ...any)

	mu     sync.Mutex
	warned map[string]bool // plugin types said to be unserved
}

// Run implements apply.Runner.
func (t *queueTasks) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	rec, err := t.submit(ctx, id, task)
	if err != nil {
		return nil, err
	}
	if served, _ := t.q.Served(queue.Route{Family: rec.Family, Type: rec.Type}); !served && !rec.State.Terminal() {
		t.mu.Lock()
		first := !t.warned[rec.Type]
		if t.warned == nil {
			t.warned = map[string]bool{}
		}
		t.warned[rec.Type] = true
		t.mu.Unlock()
		if first && t.warn != nil {
			t.warn(fmt.Sprintf("no loomd serves %s plugin type %s now: its tasks wait in the queue until one does (load the plugin on a daemon sharing the queue)", rec.Family, rec.Type),
				"task", id, "type", rec.Type)
		}
	}
	if rec.State.Terminal() {
		return result(id, rec)
	}
	wctx := ctx
	if t.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	submitted := time.Now()
	for {
		// A bounded wait, looked at again: a change the record watch
		// missed (a reconnect) cannot leave the job waiting for good.
		pctx, cancel := context.WithTimeout(wctx, 30*time.Second)
		rec, err = t.q.Wait(pctx, id)
		cancel()
		switch {
		case err == nil:
			return result(id, rec)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, queue.ErrNotFound) && time.Since(submitted) < 30*time.Second:
			// On a NATS cluster a record just written may not be on the
			// replica that answers the read yet.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		case wctx.Err() != nil:
			return nil, fmt.Errorf("task %s is still %s after --task-timeout %v; it keeps going in the queue ('loomd task get %s')", id, rec.State, t.timeout, id)
		case errors.Is(err, context.DeadlineExceeded):
			continue
		default:
			return nil, fmt.Errorf("waiting for task %s: %w", id, err)
		}
	}
}

// submit queues the task, trying again for a while when the queue is in
// trouble (a broker failover): the same id never queues it twice.
func (t *queueTasks) submit(ctx context.Context, id string, task []byte) (queue.Record, error) {
	delay := 200 * time.Millisecond
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rec, _, err := t.q.Submit(ctx, task)
		if err == nil {
			return rec, nil
		}
		if errors.Is(err, runtime.ErrInvalidTask) || ctx.Err() != nil || time.Now().After(deadline) {
			return queue.Record{}, fmt.Errorf("submitting task %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			return queue.Record{}, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// result is the plugin's result of a finished task; a task that ended
// without one (cancelled, lost) fails with the record's reason.
func result(id string, rec queue.Record) (*runtime.Result, error) {
	var res runtime.Result
	if len(rec.Result) > 0 {
		if err := json.Unmarshal(rec.Result, &res); err != nil {
			return nil, fmt.Errorf("task %s: decoding its result: %w", id, err)
		}
	}
	if len(rec.Result) == 0 || (res.Status == 0 && rec.State != queue.Succeeded) {
		res.Status = 1
		res.Message = fmt.Sprintf("task %s %s: %s", id, rec.State, rec.Error)
	}
	return &res, nil
}
