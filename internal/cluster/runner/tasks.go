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

// Local runs tasks on this daemon's own workers: the runtime and worker
// pool (isolation, plugin versions, per-task logs) its queue consumers
// use. Config.Local, when set, runs a job's tasks of the plugin types
// this daemon serves there instead of through the queue (loomd serve
// --cluster-tasks local).
type Local interface {
	// Serves reports whether this daemon runs tasks of the plugin type.
	Serves(family, typ string) bool
	// Run runs one task (Coopr task JSON) and returns its result JSON and
	// status; an error means it gave no outcome (an error wrapping
	// queue.ErrWorkerCrashed: its worker died under it).
	Run(ctx context.Context, task []byte) ([]byte, int, error)
}

// localCrashes is how many times a task run locally may kill its worker
// before it fails (the queue's --max-attempts for infrastructure
// failures does the same for queued tasks).
const localCrashes = 3

// queueTasks runs a job's tasks through the queue: any daemon serving the
// plugin type runs them. Submitting a task id the queue knows queues
// nothing: a resumed or taken-over job gets the outcome of a run it lost
// track of by its id, or waits for it.
type queueTasks struct {
	q Queue
	// local, when set, runs the tasks of the types it serves in this
	// daemon (the job's state is their only record).
	local   Local
	timeout time.Duration
	// ran counts the tasks run locally, by outcome.
	ran func(outcome string)
	// warn writes a warning into the job's log.
	warn func(msg string, attrs ...any)

	mu     sync.Mutex
	warned map[string]bool // plugin types said to be unserved
}

// Run implements apply.Runner.
func (t *queueTasks) Run(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	if t.local != nil {
		if p, err := runtime.ParseTask(task); err == nil {
			if family, typ, err := p.Route(); err == nil && t.local.Serves(string(family), typ) {
				return t.runLocal(queue.WithParsedTask(ctx, task, p), id, task)
			}
		}
	}
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

// runLocal runs the task on this daemon's workers. Nothing but the job's
// state records it: the executor wrote the run as running before it
// started and writes its end with the round after it. A run whose end was
// never written (this daemon died, or lost the job) is run again, by the
// same id, wherever the job resumes: at least once, as a queued task whose
// daemon died is delivered again.
//
// The hook runs under the job's context, except that a graceful shutdown
// lets it finish (within loomd serve's --shutdown-timeout) so that the job
// is handed over with its outcome; a cancel, a lost lease or the fence
// interrupt it.
func (t *queueTasks) runLocal(ctx context.Context, id string, task []byte) (*runtime.Result, error) {
	hctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		if cause := context.Cause(ctx); !errors.Is(cause, errShutdown) {
			cancel(cause)
		}
	})
	defer stop()
	if t.timeout > 0 {
		var c context.CancelFunc
		hctx, c = context.WithTimeoutCause(hctx, t.timeout, fmt.Errorf("task %s ran longer than --task-timeout %v", id, t.timeout))
		defer c()
	}
	for crashes := 0; ; {
		out, status, err := t.local.Run(hctx, task)
		if err != nil && errors.Is(err, queue.ErrWorkerCrashed) && hctx.Err() == nil {
			if crashes++; crashes < localCrashes {
				if t.warn != nil {
					t.warn(fmt.Sprintf("task %s killed its worker; running it again (%d of %d)", id, crashes+1, localCrashes), "task", id, "err", err.Error())
				}
				continue
			}
			t.count("failed")
			return &runtime.Result{TaskID: id, Status: 1, Message: fmt.Sprintf("task %s killed its worker %d times; the last time: %v", id, crashes, err)}, nil
		}
		if err != nil {
			if hctx.Err() != nil {
				// Interrupted: the executor keeps the run "running" and
				// runs it again when the job resumes.
				t.count("interrupted")
				return nil, fmt.Errorf("task %s interrupted: %w: %w", id, context.Cause(hctx), context.Canceled)
			}
			t.count("error")
			return nil, fmt.Errorf("running task %s on this loomd: %w", id, err)
		}
		var res runtime.Result
		if err := json.Unmarshal(out, &res); err != nil {
			t.count("error")
			return nil, fmt.Errorf("task %s: decoding its result: %w", id, err)
		}
		if res.Status == 0 && status != 0 {
			res.Status = status
		}
		if res.Status == 0 {
			t.count("succeeded")
		} else {
			t.count("failed")
		}
		return &res, nil
	}
}

func (t *queueTasks) count(outcome string) {
	if t.ran != nil {
		t.ran(outcome)
	}
}
