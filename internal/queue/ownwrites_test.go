package queue

import (
	"bytes"
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestOwnWrites: a record being written here is handed back once, for
// exactly the value written; another value leaves it kept; a failed
// write's record is dropped unless replaced; the bounds hold.
func TestOwnWrites(t *testing.T) {
	var o ownWrites
	v1 := mustJSON(Record{TaskID: "a", State: Queued})
	o.put(Record{TaskID: "a", State: Queued}, v1)
	if _, ok := o.take("a", []byte(`{"taskId":"a","state":"running"}`)); ok {
		t.Fatal("take of another value returned the record")
	}
	if rec, ok := o.take("a", bytes.Clone(v1)); !ok || rec.State != Queued {
		t.Fatalf("take(a, its value) = %+v, %v", rec, ok)
	}
	if _, ok := o.take("a", v1); ok {
		t.Fatal("a record was handed back twice")
	}
	// A failed write is dropped, unless a newer one replaced it.
	v2, v3 := mustJSON(Record{TaskID: "b", State: Running}), mustJSON(Record{TaskID: "b", State: Succeeded})
	o.put(Record{TaskID: "b", State: Running}, v2)
	o.drop("b", v2)
	if len(o.recs) != 0 || o.bytes != 0 {
		t.Fatalf("kept %d records (%d bytes) after the failed write", len(o.recs), o.bytes)
	}
	o.put(Record{TaskID: "b", State: Running}, v2)
	o.put(Record{TaskID: "b", State: Succeeded}, v3)
	o.drop("b", v2)
	if rec, ok := o.take("b", v3); !ok || rec.State != Succeeded {
		t.Fatalf("the newer write was dropped with the older one: %+v, %v", rec, ok)
	}
	// Bounds: by count and by bytes.
	for i := range maxOwnWrites + 1 {
		id := "n" + strconv.Itoa(i)
		o.put(Record{TaskID: id}, []byte(id))
	}
	if len(o.recs) > maxOwnWrites {
		t.Fatalf("kept %d records, bound %d", len(o.recs), maxOwnWrites)
	}
	o.put(Record{TaskID: "big"}, make([]byte, maxOwnWriteBytes/2+1))
	o.put(Record{TaskID: "big2"}, make([]byte, maxOwnWriteBytes/2+1))
	if o.bytes > maxOwnWriteBytes {
		t.Fatalf("kept %d bytes, bound %d", o.bytes, maxOwnWriteBytes)
	}
	o.put(Record{TaskID: "huge"}, make([]byte, maxOwnWriteBytes+1))
	if _, ok := o.recs["huge"]; ok {
		t.Fatal("kept a record larger than the byte bound")
	}
	sum := 0
	for _, w := range o.recs {
		sum += len(w.value)
	}
	if sum != o.bytes {
		t.Fatalf("bytes = %d, the kept values hold %d", o.bytes, sum)
	}
}

// TestWaitSeesStoredRecord: the records a waiter and OnChange get for this
// process's own writes (handed over without decoding) are those the store
// holds: the same JSON as the record read back, revision and index entry
// included, for a result that is not in compact form.
func TestWaitSeesStoredRecord(t *testing.T) {
	q := open(t, testConfig(t))
	var mu sync.Mutex
	var states []State
	stop := q.OnChange(func(c Change) {
		if c.TaskID == "own-1" {
			mu.Lock()
			states = append(states, c.State)
			mu.Unlock()
		}
	})
	defer stop()
	submit(t, q, task("own-1", "shell"))
	type waited struct {
		rec Record
		err error
	}
	got := make(chan waited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		rec, err := q.Wait(ctx, "own-1")
		got <- waited{rec, err}
	}()
	for registered := false; !registered; time.Sleep(time.Millisecond) { // the waiter is there before the task runs
		q.mu.Lock()
		registered = len(q.waiters["own-1"]) > 0
		q.mu.Unlock()
	}
	serve(t, q, RunnerFunc(func(context.Context, []byte) ([]byte, int, error) {
		return []byte("{ \"status\": 0,\n  \"note\": \"<ok> & done\" }\n"), 0, nil
	}), 1, shell)
	w := <-got
	if w.err != nil {
		t.Fatalf("Wait: %v (state %s)", w.err, w.rec.State)
	}
	rec := w.rec
	stored, err := q.Get(context.Background(), "own-1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != Succeeded || rec.Revision != stored.Revision || rec.IndexSeq != stored.IndexSeq || rec.IndexSeq == 0 {
		t.Fatalf("waited record %s rev %d index %d, stored %s rev %d index %d", rec.State, rec.Revision, rec.IndexSeq, stored.State, stored.Revision, stored.IndexSeq)
	}
	if a, b := mustJSON(rec), mustJSON(stored); !bytes.Equal(a, b) {
		t.Fatalf("waited record encodes as\n%s\nthe stored one as\n%s", a, b)
	}
	end := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		s := append([]State(nil), states...)
		mu.Unlock()
		if len(s) == 3 {
			if s[0] != Queued || s[1] != Running || s[2] != Succeeded {
				t.Fatalf("changes %v, want queued, running, succeeded", s)
			}
			break
		}
		if time.Now().After(end) {
			t.Fatalf("changes %v after 10 s, want queued, running, succeeded", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
