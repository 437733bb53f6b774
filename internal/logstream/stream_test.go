package logstream

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loomrt/loom/internal/queue"
)

// TestRead: batches are read back with one batched direct get per call
// (NATS 2.11+), in order, bounded by max, from a cursor, with the headers
// they were written with; the one-by-one fallback reads the same.
func TestRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s, err := Open(ctx, q.JetStream(), Options{Name: "TEST_LOG", Prefix: "test.log.", Source: "d1", FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 30 {
		s.WriteWith("k", nats.Header{"Loom-Tenant": []string{"acme"}}, Entry{Kind: KindLog, Msg: "m", Attrs: []Attr{{K: "i", V: string(rune('a' + i%26))}}})
		s.Write("other", Entry{Kind: KindLog, Msg: "o"})
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, batched := range []bool{true, false} {
		s.noBatch.Store(!batched)
		all, err := s.Read(ctx, "k", 0, 1000)
		if err != nil || len(all) != 30 {
			t.Fatalf("batched %v: %d batches, %v", batched, len(all), err)
		}
		if batched && s.noBatch.Load() {
			t.Fatal("the server did not answer a batched direct get")
		}
		for i, b := range all {
			if len(b.Entries) != 1 || b.Entries[0].Attrs[0].V != string(rune('a'+i%26)) || b.Header.Get("Loom-Tenant") != "acme" ||
				b.Time.IsZero() || (i > 0 && b.Seq <= all[i-1].Seq) {
				t.Fatalf("batched %v: batch %d: %+v", batched, i, b)
			}
		}
		some, err := s.Read(ctx, "k", all[9].Seq, 7)
		if err != nil || len(some) != 7 || some[0].Seq != all[10].Seq {
			t.Fatalf("batched %v: from a cursor: %d batches, %v", batched, len(some), err)
		}
		if none, err := s.Read(ctx, "nothing", 0, 10); err != nil || len(none) != 0 {
			t.Fatalf("batched %v: an empty key: %d, %v", batched, len(none), err)
		}
	}
}
