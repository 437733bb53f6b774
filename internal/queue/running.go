package queue

import "context"

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
