package queue

import (
	"context"

	"github.com/loomrt/loom/runtime"
)

type recordKey struct{}

// RunningRecord is the record of the attempt a Runner runs, as the queue
// claimed it (task id, tenant, cluster, attempt, owner), when ctx is the
// context the queue called Run with: what a runner needs to know about a
// task without decoding it again.
func RunningRecord(ctx context.Context) (Record, bool) {
	r, ok := ctx.Value(recordKey{}).(*Record)
	if !ok {
		return Record{}, false
	}
	return *r, true
}

// WithRunningRecord is the context Serve runs an attempt with: ctx
// carrying rec for RunningRecord (a runner's tests use it too).
func WithRunningRecord(ctx context.Context, rec Record) context.Context {
	return context.WithValue(ctx, recordKey{}, &rec)
}

type parsedKey struct{}

type parsed struct {
	data []byte
	task *runtime.Task
}

// WithParsedTask is ctx carrying task, parsed from data, for ParsedTask:
// the runners a task goes through (the queue or a cluster job, the task
// log, the worker pool) parse it once, not once each (a cluster job's
// task carries every node of the cluster).
func WithParsedTask(ctx context.Context, data []byte, task *runtime.Task) context.Context {
	return context.WithValue(ctx, parsedKey{}, parsed{data: data, task: task})
}

// ParsedTask is runtime.ParseTask(data), from ctx when WithParsedTask put
// the same bytes there (the same slice, not a copy).
func ParsedTask(ctx context.Context, data []byte) (*runtime.Task, error) {
	if p, ok := ctx.Value(parsedKey{}).(parsed); ok && len(p.data) == len(data) && len(data) > 0 && &p.data[0] == &data[0] {
		return p.task, nil
	}
	return runtime.ParseTask(data)
}
