package queue

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Each inconsistency a store failure or a crash can leave, injected by
// hand, and what the reconciler does with it.
func TestReconcilerRepairsWhatNoMessageBacks(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReconcileGrace = time.Nanosecond // judge every record at once
	cfg.ReconcileInterval = time.Hour    // only the explicit calls below
	q := open(t, cfg)
	ctx := context.Background()
	// Nobody serves "shell" here: submitted tasks stay queued with their
	// messages in the stream.
	lostQueued := submit(t, q, task("lost-queued", "shell"))
	keptQueued := submit(t, q, task("kept-queued", "shell"))
	lostRunning := submit(t, q, task("lost-running", "shell"))
	keptRunning := submit(t, q, task("kept-running", "shell"))
	oursRunning := submit(t, q, task("ours-running", "shell"))
	if lostQueued.Seq == 0 {
		t.Fatal("a submitted record carries no message sequence")
	}
	// Running records, as a claim writes them: a dead daemon's, and one
	// this process holds.
	markRunning := func(rec Record, owner string) Record {
		t.Helper()
		cur, err := q.get(ctx, rec.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		next := cur
		now := time.Now().UTC()
		next.State, next.Owner, next.Attempts, next.Started = Running, owner, 1, &now
		rev, err := q.write(ctx, cur, next)
		if err != nil {
			t.Fatal(err)
		}
		next.Revision = rev
		return next
	}
	markRunning(lostRunning, "ghost-daemon")
	markRunning(keptRunning, "ghost-daemon")
	markRunning(oursRunning, q.cfg.Owner)
	q.fly("ours-running", nil)
	defer q.land("ours-running")
	// The inconsistencies: messages gone from the stream.
	for _, rec := range []Record{lostQueued, lostRunning, oursRunning} {
		if err := q.taskStream(rec.Part).DeleteMsg(ctx, rec.Seq); err != nil {
			t.Fatalf("deleting the message of %s: %v", rec.TaskID, err)
		}
	}

	repairs, err := q.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Repair{}
	for _, r := range repairs {
		got[r.TaskID] = r
	}
	if len(got) != 2 {
		t.Errorf("repairs = %+v, want lost-queued and lost-running", repairs)
	}
	for id, want := range map[string]string{
		"lost-queued":  "never ran",
		"lost-running": "attempt 1 on ghost-daemon never recorded an outcome",
	} {
		rec, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != Failed || !strings.Contains(rec.Error, want) || !strings.Contains(string(rec.Result), `"kind":"lost"`) {
			t.Errorf("%s = %s %q %s, want failed with %q and kind lost", id, rec.State, rec.Error, rec.Result, want)
		}
	}
	// Records their messages still back, and one this process still
	// holds, are left as they are.
	for id, want := range map[string]State{"kept-queued": Queued, "kept-running": Running, "ours-running": Running} {
		rec, err := q.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != want {
			t.Errorf("%s = %s, want %s left alone", id, rec.State, want)
		}
	}
	_ = keptQueued
	// A second pass finds nothing more.
	if again, err := q.Reconcile(ctx); err != nil || len(again) != 0 {
		t.Errorf("second pass = %+v, %v", again, err)
	}
}

// A young record is never judged: its writes may still be in flight.
func TestReconcilerWaitsOutTheGrace(t *testing.T) {
	cfg := testConfig(t)
	cfg.ReconcileGrace = time.Hour
	q := open(t, cfg)
	rec := submit(t, q, task("young", "shell"))
	if err := q.taskStream(rec.Part).DeleteMsg(context.Background(), rec.Seq); err != nil {
		t.Fatal(err)
	}
	if repairs, err := q.Reconcile(context.Background()); err != nil || len(repairs) != 0 {
		t.Errorf("repairs = %+v, %v; want none within the grace", repairs, err)
	}
}
