package joblog

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
)

// memSink keeps entries.
type memSink struct {
	mu sync.Mutex
	es map[string][]Entry
}

func (m *memSink) Write(cluster string, e Entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.es == nil {
		m.es = map[string][]Entry{}
	}
	m.es[cluster] = append(m.es[cluster], e)
}

// TestCopy: through the daemon's tee, the lines of a tracked cluster task
// reach its cluster's log (with the attributes given through With), other
// lines and the queue's lines about the task do not; every line still
// reaches the daemon's handler.
func TestCopy(t *testing.T) {
	var daemon bytes.Buffer
	sink := &memSink{}
	tee := logstream.NewTee()
	logger := slog.New(tee.Handler(slog.NewTextHandler(&daemon, nil)))
	logger.Info("before tracking")
	done := tee.Track("c-001-0004-1", Copy(sink, "d1", "c", "c-001"))
	plugin := logger.With("task", "c-001-0004-1", "plugin", "shell")
	plugin.Info("installing", "package", "nginx")
	logger.With("component", "queue").Info("task finished", "task", "c-001-0004-1")
	logger.Info("unrelated", "task", "other")
	logger.WithGroup("g").Info("grouped", "task", "c-001-0004-1") // a grouped "task" is not the task attribute
	done()
	plugin.Info("after the task ended")
	got := sink.es["c"]
	if len(got) != 1 || got[0].Msg != "installing" || got[0].Job != "c-001" || got[0].Source != "d1" ||
		got[0].Attr("package") != "nginx" || got[0].Attr("plugin") != "shell" || got[0].Attr("task") != "c-001-0004-1" {
		t.Fatalf("copied: %+v", got)
	}
	for _, want := range []string{"before tracking", "installing", "task finished", "unrelated", "after the task ended"} {
		if !strings.Contains(daemon.String(), want) {
			t.Errorf("the daemon's log lacks %q", want)
		}
	}
}

// TestFile: --local's log: entries round-trip, the file rotates past its
// bound (two files at most), secrets are redacted, Follow sees new lines.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	sec := &Secrets{}
	set := redact.New()
	set.Add("s3cret-value")
	sec.Set("c", "", set)
	f := &File{Dir: dir, MaxBytes: 4 << 10, Source: "cli", Secrets: sec}
	for i := range 100 {
		f.Write("c", Entry{Kind: KindLog, Level: "INFO", Msg: "line s3cret-value " + strings.Repeat("x", 50), Attrs: []Attr{{K: "i", V: string(rune('a' + i%26))}}})
	}
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
	var n int
	var all strings.Builder
	if err := f.Read("c", func(e Entry) { n++; all.WriteString(e.Msg) }); err != nil {
		t.Fatal(err)
	}
	st1, err1 := os.Stat(f.Path("c") + ".1")
	st0, err0 := os.Stat(f.Path("c"))
	if err0 != nil || err1 != nil || st0.Size() > 4<<10 || st1.Size() > 4<<10 || n == 0 || n >= 100 {
		t.Fatalf("rotation: %d entries read; %v %v", n, err0, err1)
	}
	if strings.Contains(all.String(), "s3cret") {
		t.Error("a secret reached the file")
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Entry, 200)
	go func() { _ = f.Follow(ctx, "c", func(e Entry) { got <- e }) }()
	for range n {
		<-got
	}
	f.Write("c", Entry{Kind: KindLog, Msg: "a new line"})
	select {
	case e := <-got:
		if e.Msg != "a new line" {
			t.Errorf("followed %q", e.Msg)
		}
	case <-time.After(10 * time.Second):
		t.Error("Follow did not see the new line")
	}
	cancel()
	f.Close()
}

// TestStream: the daemons' log in JetStream: writes are batched per
// cluster, read back in order after a cursor, Wait wakes on a new batch,
// Flush makes what was written readable, Purge forgets a cluster.
func TestStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s, err := OpenStream(ctx, q.JetStream(), StreamOptions{Source: "d1", FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 50 {
		s.Write("c", Entry{Kind: KindLog, Msg: "c line", Attrs: []Attr{{K: "i", V: string(rune('0' + i%10))}}})
		s.Write("d", Entry{Kind: KindTask, Task: &TaskEvent{Index: i, Status: "done"}})
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	bs, err := s.Read(ctx, "c", 0, 100)
	if err != nil || len(bs) != 1 || len(bs[0].Entries) != 50 || bs[0].Entries[0].Source != "d1" {
		t.Fatalf("read: %d batches, %v", len(bs), err)
	}
	last, err := s.Last(ctx, "c")
	if err != nil || last != bs[0].Seq {
		t.Fatalf("last %d, %v", last, err)
	}
	waited := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		defer wcancel()
		waited <- s.Wait(wctx, "c", last)
	}()
	time.Sleep(100 * time.Millisecond)
	s.Write("c", Entry{Kind: KindJob, Msg: "step 2 started"})
	start := time.Now()
	_ = s.Flush(ctx)
	if err := <-waited; err != nil || time.Since(start) > 5*time.Second {
		t.Fatalf("wait: %v after %v", err, time.Since(start))
	}
	bs, err = s.Read(ctx, "c", last, 100)
	if err != nil || len(bs) != 1 || bs[0].Entries[0].Msg != "step 2 started" {
		t.Fatalf("read after: %+v %v", bs, err)
	}
	if err := s.Purge(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if bs, _ := s.Read(ctx, "c", 0, 100); len(bs) != 0 {
		t.Errorf("purged cluster still has %d batches", len(bs))
	}
	if bs, _ := s.Read(ctx, "d", 0, 100); len(bs) != 1 || len(bs[0].Entries) != 50 {
		t.Errorf("the other cluster's log was touched")
	}
}
