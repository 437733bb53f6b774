package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func ids(recs []Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.TaskID
	}
	return out
}

// listAll follows the cursors of f to the end.
func listAll(t *testing.T, q *Queue, f Filter) []string {
	t.Helper()
	var out []string
	for range 100 {
		p, err := q.List(context.Background(), f)
		if err != nil {
			t.Fatalf("List(%+v): %v", f, err)
		}
		out = append(out, ids(p.Records)...)
		if p.Next == "" {
			return out
		}
		f.After = p.Next
	}
	t.Fatalf("List(%+v) did not end after 100 pages", f)
	return nil
}

func clusterTask(id, typ, cluster string) []byte {
	return []byte(`{"taskId":"` + id + `","clusterId":"` + cluster + `","taskName":"INSTALL","config":{"service":{"action":{"type":"` + typ + `"}}}}`)
}

// Paging walks every matching task once, newest state change first, and
// filters by state, type and cluster.
func TestListPagesAndFilters(t *testing.T) {
	q := open(t, testConfig(t))
	// Nobody serves "idle": its tasks stay queued. "shell" tasks run.
	var all []string
	for i := range 7 {
		id := fmt.Sprintf("p-%d", i)
		cluster := "c1"
		if i%2 == 1 {
			cluster = "c.2 odd" // not a subject token: escaped in the index
		}
		submit(t, q, clusterTask(id, "idle", cluster))
		all = append(all, id)
	}
	serve(t, q, newCounter(nil), 2, shell)
	for i := range 3 {
		id := fmt.Sprintf("s-%d", i)
		submit(t, q, clusterTask(id, "shell", "c1"))
		wait(t, q, id)
	}

	got := listAll(t, q, Filter{Type: "idle", Limit: 3})
	want := slices.Clone(all)
	slices.Reverse(want)
	if !slices.Equal(got, want) {
		t.Errorf("idle tasks paged by 3 = %v, want %v", got, want)
	}
	if got := listAll(t, q, Filter{State: Succeeded, Limit: 2}); len(got) != 3 {
		t.Errorf("succeeded = %v, want the 3 shell tasks", got)
	}
	if got := listAll(t, q, Filter{Cluster: "c.2 odd"}); !slices.Equal(got, []string{"p-5", "p-3", "p-1"}) {
		t.Errorf("cluster c.2 odd = %v, want p-5 p-3 p-1", got)
	}
	if got := listAll(t, q, Filter{Cluster: "c1", State: Queued, Type: "idle", Limit: 1}); !slices.Equal(got, []string{"p-6", "p-4", "p-2", "p-0"}) {
		t.Errorf("queued idle c1 = %v", got)
	}
	if got := listAll(t, q, Filter{State: Running}); len(got) != 0 {
		t.Errorf("running = %v, want none", got)
	}
	if got := listAll(t, q, Filter{}); len(got) != 10 {
		t.Errorf("all = %v, want 10 tasks, each once", got)
	}
	// A full page at the very end gives a cursor whose page is empty.
	p, err := q.List(context.Background(), Filter{State: Succeeded, Limit: 3})
	if err != nil || len(p.Records) != 3 || p.Next == "" {
		t.Fatalf("List(succeeded, 3) = %v, %v", p, err)
	}
	if p2, err := q.List(context.Background(), Filter{State: Succeeded, After: p.Next}); err != nil || len(p2.Records) != 0 || p2.Next != "" {
		t.Errorf("page after the last = %v, %v; want empty and no cursor", p2, err)
	}
	if _, err := q.List(context.Background(), Filter{After: "bogus"}); !errors.Is(err, ErrBadCursor) {
		t.Errorf("List(after=bogus) = %v, want ErrBadCursor", err)
	}
}

// An entry left behind by a writer that died between its steps is
// skipped, so a task shows up once, in its real state.
func TestListSkipsStaleEntries(t *testing.T) {
	q := open(t, testConfig(t))
	rec := submit(t, q, task("st-1", "idle"))
	// A writer published a "succeeded" entry and died before the record.
	stale := rec
	stale.State = Succeeded
	if _, err := q.js.Publish(context.Background(), indexSubject(stale), []byte("st-1")); err != nil {
		t.Fatal(err)
	}
	if got := listAll(t, q, Filter{}); !slices.Equal(got, []string{"st-1"}) {
		t.Errorf("List = %v, want st-1 once", got)
	}
	if got := listAll(t, q, Filter{State: Succeeded}); len(got) != 0 {
		t.Errorf("List(succeeded) = %v, want none", got)
	}
	if got := listAll(t, q, Filter{State: Queued}); !slices.Equal(got, []string{"st-1"}) {
		t.Errorf("List(queued) = %v, want st-1", got)
	}
}

func TestCancelQueuedNeverRuns(t *testing.T) {
	q := open(t, testConfig(t))
	submit(t, q, task("cq-1", "shell"))
	rec, err := q.Cancel(context.Background(), "cq-1")
	if err != nil || rec.State != Cancelled {
		t.Fatalf("Cancel = %+v, %v; want cancelled", rec, err)
	}
	var res struct {
		Error struct{ Kind string } `json:"error"`
	}
	if err := json.Unmarshal(rec.Result, &res); err != nil || res.Error.Kind != "cancelled" {
		t.Errorf("result = %s; want error kind cancelled", rec.Result)
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("depth after cancel = %d, want 0: the message is removed", n)
	}
	c := newCounter(nil)
	serve(t, q, c, 1, shell)
	submit(t, q, task("cq-2", "shell"))
	wait(t, q, "cq-2")
	if c.count("cq-1") != 0 {
		t.Errorf("the cancelled task ran")
	}
	if _, err := q.Cancel(context.Background(), "cq-2"); !errors.Is(err, ErrFinished) {
		t.Errorf("Cancel(succeeded) = %v, want ErrFinished", err)
	}
	if _, err := q.Cancel(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Cancel(unknown) = %v, want ErrNotFound", err)
	}
	if got := listAll(t, q, Filter{State: Cancelled}); !slices.Equal(got, []string{"cq-1"}) {
		t.Errorf("List(cancelled) = %v", got)
	}
}

// A running task is cancelled by a request made through another daemon:
// the daemon running it cancels the hook's context.
func TestCancelRunningOnOtherDaemon(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Owner = "runner"
	a := open(t, cfg)
	bcfg := testConfig(t)
	bcfg.DataDir, bcfg.URLs, bcfg.Owner = "", []string{a.ClientURL()}, "api"
	bcfg.NkeyFile = filepath.Join(cfg.DataDir, "nats.nk") // a's generated key
	b := open(t, bcfg)

	started := make(chan struct{})
	c := newCounter(func(ctx context.Context, id string, _ int) ([]byte, int, error) {
		close(started)
		<-ctx.Done() // a hook honours its context
		return nil, 0, ctx.Err()
	})
	serve(t, a, c, 1, shell)
	submit(t, b, task("cr-1", "shell"))
	<-started
	if got := listAll(t, b, Filter{State: Running}); !slices.Equal(got, []string{"cr-1"}) {
		t.Errorf("List(running) = %v, want cr-1", got)
	}
	if got := listAll(t, b, Filter{State: Queued}); len(got) != 0 {
		t.Errorf("List(queued) = %v, want none", got)
	}
	rec, err := b.Cancel(context.Background(), "cr-1")
	if err != nil || rec.State != Running {
		t.Fatalf("Cancel(running) = %+v, %v; want the running record", rec, err)
	}
	done := wait(t, b, "cr-1")
	if done.State != Cancelled || c.count("cr-1") != 1 {
		t.Fatalf("cr-1 = %s after %d runs (error %q); want cancelled after 1", done.State, c.count("cr-1"), done.Error)
	}
	waitDepth(t, a, 0) // the message is acked
	// The request is cleared once handled.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := a.ix.cancelKV.Get(context.Background(), cancelPrefix+"cr-1"); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancel request was not removed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A cancel request filed while no daemon holds the task (its daemon died)
// cancels it as soon as the next daemon starts it.
func TestCancelRequestWaitsForNextAttempt(t *testing.T) {
	q := open(t, testConfig(t))
	submit(t, q, task("cw-1", "shell"))
	// Make the record look like an attempt whose daemon died.
	cur, err := q.get(context.Background(), "cw-1")
	if err != nil {
		t.Fatal(err)
	}
	next := cur
	next.State, next.Owner, next.Attempts = Running, "dead", 1
	if _, err := q.write(context.Background(), cur, next); err != nil {
		t.Fatal(err)
	}
	if rec, err := q.Cancel(context.Background(), "cw-1"); err != nil || rec.State != Running {
		t.Fatalf("Cancel = %+v, %v", rec, err)
	}
	c := newCounter(func(ctx context.Context, id string, _ int) ([]byte, int, error) {
		<-ctx.Done()
		return nil, 0, ctx.Err()
	})
	serve(t, q, c, 1, shell)
	if got := wait(t, q, "cw-1"); got.State != Cancelled {
		t.Fatalf("cw-1 = %s (%s), want cancelled", got.State, got.Error)
	}
}

func TestDeleteThenSubmitAgain(t *testing.T) {
	q := open(t, testConfig(t))
	c := newCounter(nil)
	serve(t, q, c, 1, shell)
	submit(t, q, task("d-1", "shell"))
	submit(t, q, task("d-q", "idle"))
	wait(t, q, "d-1")
	ctx := context.Background()
	if _, err := q.Delete(ctx, "d-q"); !errors.Is(err, ErrNotFinished) {
		t.Errorf("Delete(queued) = %v, want ErrNotFinished", err)
	}
	if _, err := q.Delete(ctx, "d-1"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := q.Get(ctx, "d-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete = %v, want ErrNotFound", err)
	}
	if _, err := q.Delete(ctx, "d-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
	if got := listAll(t, q, Filter{}); !slices.Equal(got, []string{"d-q"}) {
		t.Errorf("List after delete = %v, want d-q only", got)
	}
	// Inside the dedupe window: the id runs again.
	rec, isNew, err := q.Submit(ctx, task("d-1", "shell"))
	if err != nil || !isNew {
		t.Fatalf("Submit after delete = %+v, %v, %v; want a new task", rec, isNew, err)
	}
	if got := wait(t, q, "d-1"); got.State != Succeeded || c.count("d-1") != 2 {
		t.Fatalf("d-1 = %s after %d runs; want succeeded, run twice in all", got.State, c.count("d-1"))
	}
}

func TestDeleteRemovesLargeResult(t *testing.T) {
	q := open(t, testConfig(t))
	big := fmt.Sprintf(`{"status":0,"result":{"blob":%q}}`, string(make([]byte, 2<<20)))
	serve(t, q, newCounter(func(context.Context, string, int) ([]byte, int, error) { return []byte(big), 0, nil }), 1, shell)
	submit(t, q, task("big-1", "shell"))
	rec := wait(t, q, "big-1")
	if rec.ResultRef == "" {
		t.Fatal("the result did not go to the object store")
	}
	if _, err := q.Delete(context.Background(), "big-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.obj.GetInfo(context.Background(), rec.ResultRef); err == nil {
		t.Error("the result object is still there")
	}
}

func TestRetentionSweepsFinished(t *testing.T) {
	cfg := testConfig(t)
	cfg.Retain = -1 // no background sweeper: the test sweeps itself
	q := open(t, cfg)
	serve(t, q, newCounter(nil), 2, shell)
	for i := range 4 {
		submit(t, q, task(fmt.Sprintf("ret-%d", i), "shell"))
		wait(t, q, fmt.Sprintf("ret-%d", i))
	}
	cutoff := time.Now()
	time.Sleep(10 * time.Millisecond)
	submit(t, q, task("ret-new", "shell"))
	wait(t, q, "ret-new")
	submit(t, q, task("ret-queued", "idle"))
	n, err := q.Sweep(context.Background(), cutoff)
	if err != nil || n != 4 {
		t.Fatalf("Sweep = %d, %v; want the 4 tasks finished before the cutoff", n, err)
	}
	if got := listAll(t, q, Filter{}); !slices.Equal(got, []string{"ret-queued", "ret-new"}) {
		t.Errorf("after the sweep = %v", got)
	}
	if n, err := q.Sweep(context.Background(), time.Now()); err != nil || n != 1 {
		t.Errorf("second Sweep = %d, %v; want ret-new only (queued tasks stay)", n, err)
	}
}

// The background sweeper runs with a short retention.
func TestRetainExpiresInBackground(t *testing.T) {
	cfg := testConfig(t)
	cfg.Retain = 50 * time.Millisecond
	cfg.SweepInterval = 20 * time.Millisecond
	q := open(t, cfg)
	serve(t, q, newCounter(nil), 1, shell)
	submit(t, q, task("bg-1", "shell"))
	wait(t, q, "bg-1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := q.Get(context.Background(), "bg-1"); errors.Is(err, ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("bg-1 was not deleted by the sweeper")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Records written before the index existed get entries when a daemon
// creates the index.
func TestIndexBackfill(t *testing.T) {
	cfg := testConfig(t)
	q := open(t, cfg)
	ctx := context.Background()
	for _, id := range []string{"old-1", "old-2"} {
		rec := Record{TaskID: id, State: Succeeded, Family: "automator", Type: "shell", Created: time.Now().UTC()}
		if id == "old-2" {
			// An entry of the index about to be lost: its sequence will
			// be gone, or another task's, in the re-created index.
			rec.IndexSeq = 1
		}
		if _, err := q.kvFor(id).Create(ctx, keyPrefix+id, mustJSON(rec)); err != nil {
			t.Fatal(err)
		}
	}
	for p := range indexParts {
		if err := q.js.DeleteStream(ctx, partName(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q2 := open(t, cfg)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := listAll(t, q2, Filter{State: Succeeded})
		slices.Sort(got)
		if slices.Equal(got, []string{"old-1", "old-2"}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the backfill List = %v, want old-1 and old-2", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A task whose record the worker creates (its submit died between the
// publish and the record) ends with one index entry: the entry the claim
// wrote is replaced, not left behind.
func TestClaimCreatedRecordIndexedOnce(t *testing.T) {
	q := open(t, testConfig(t))
	serve(t, q, newCounter(nil), 1, shell)
	if _, err := q.publishTask(context.Background(), shell, shardOf("cc-1"), "cc-1", task("cc-1", "shell")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := q.Get(context.Background(), "cc-1")
		if err == nil && rec.State == Succeeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cc-1 = %+v, %v; want succeeded", rec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	q.ix.bg.Wait() // the superseded entry's delete
	var entries []indexEntry
	for p := range indexParts {
		es, err := q.readIndex(context.Background(), p, indexPrefix+">", 1, 1<<30, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, es...)
	}
	if len(entries) != 1 || entries[0].id != "cc-1" || partActive(entries[0].part) {
		t.Errorf("index entries = %+v, want one finished entry for cc-1", entries)
	}
}
