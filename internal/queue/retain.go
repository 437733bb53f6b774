package queue

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// DefaultRetain is how long finished tasks are kept when Config.Retain
// is zero.
const DefaultRetain = 7 * 24 * time.Hour

// sweepBatch bounds the tasks one sweep deletes, so a first sweep over a
// large backlog does not hold the store for long; the next sweep goes on.
const sweepBatch = 5000

// startSweeper deletes finished tasks older than Config.Retain every
// Config.SweepInterval. Every daemon sweeps; deleting is idempotent.
func (q *Queue) startSweeper() {
	if q.cfg.Retain < 0 {
		q.ix.sweepStop = func() {}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	q.ix.sweepStop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		t := time.NewTicker(q.cfg.SweepInterval)
		defer t.Stop()
		for {
			n, err := q.Sweep(ctx, time.Now().Add(-q.cfg.Retain))
			switch {
			case err != nil && ctx.Err() == nil:
				q.log.Warn("deleting expired tasks failed; retrying at the next sweep", "err", err, "deleted", n)
			case n > 0:
				q.log.Info("deleted expired tasks", "count", n, "retain", q.cfg.Retain.String())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Sweep deletes the finished tasks (succeeded, failed, cancelled) that
// finished before cutoff, and returns how many it deleted. It reads the
// index from its oldest entry and stops at the first one newer than
// cutoff, so it costs what it deletes.
func (q *Queue) Sweep(ctx context.Context, cutoff time.Time) (int, error) {
	deleted := 0
	for shard := range StateShards {
		for _, st := range []State{Succeeded, Failed, Cancelled} {
			n, err := q.sweepShard(ctx, shard, st, cutoff, sweepBatch-deleted)
			deleted += n
			if err != nil {
				return deleted, err
			}
		}
	}
	return deleted, nil
}

// sweepShard deletes up to limit tasks in state st of one index shard
// that finished before cutoff.
func (q *Queue) sweepShard(ctx context.Context, shard int, st State, cutoff time.Time, limit int) (int, error) {
	deleted := 0
	part := indexPart(shard, false)
	stream := q.ix.streams[part]
	filter := indexPrefix + strconv.Itoa(shard) + "." + string(st) + ".>"
	var from uint64 = 1
	for deleted < limit {
		info, err := stream.Info(ctx)
		if err != nil {
			return deleted, err
		}
		from = max(from, info.State.FirstSeq)
		batch := min(256, limit-deleted)
		entries, err := q.readIndex(ctx, part, filter, from, info.State.LastSeq, batch, func(e indexEntry) bool { return e.time.After(cutoff) })
		if err != nil {
			return deleted, err
		}
		for _, e := range entries {
			rec, err := q.get(ctx, e.id)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return deleted, err
			}
			switch found := err == nil; {
			case found && recordPart(rec) == part && rec.IndexSeq == e.seq:
				if err := q.remove(ctx, rec); err != nil {
					return deleted, err
				}
				deleted++
			case staleEntry(e, rec, found):
				if err := stream.DeleteMsg(ctx, e.seq); err != nil && !msgGone(err) {
					return deleted, err
				}
			}
			from = e.seq + 1
		}
		if len(entries) < batch {
			break
		}
	}
	return deleted, nil
}
