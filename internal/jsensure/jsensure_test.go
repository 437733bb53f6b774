package jsensure

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// apiLog records the JetStream API requests a server receives.
type apiLog struct {
	mu   sync.Mutex
	subj []string
}

func (l *apiLog) count(prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.subj {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func (l *apiLog) reset() {
	l.mu.Lock()
	l.subj = nil
	l.mu.Unlock()
}

// start runs a JetStream server on dir and returns a JetStream context
// and the log of the API requests it receives. A second call on the
// same dir is a restart of the server: what it recovered from its store.
func start(t *testing.T, dir string) (jetstream.JetStream, *apiLog) {
	t.Helper()
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	log := &apiLog{}
	spy, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spy.Close)
	if _, err := spy.Subscribe("$JS.API.>", func(m *nats.Msg) {
		log.mu.Lock()
		log.subj = append(log.subj, m.Subject)
		log.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js, log
}

// settle waits until the spy saw what was sent before it.
func settle(t *testing.T, js jetstream.JetStream, log *apiLog) {
	t.Helper()
	// A marker published after the requests reaches the spy after them
	// (one publishing connection, delivered in order); a fixed sleep was
	// too short under load.
	marker := "$JS.API.LOOMTEST.SETTLE." + nats.NewInbox()[len("_INBOX."):]
	if err := js.Conn().Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); log.count(marker) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the spy never saw the settle marker")
		}
	}
}

// TestUnchangedIsNotUpdated: a stream, a bucket and an object store made
// again with the same configuration, also by a restarted server, are
// neither updated nor created twice; one whose configuration changed is
// updated to it.
func TestUnchangedIsNotUpdated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	scfg := jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy, Description: "one"}
	kcfg := jetstream.KeyValueConfig{Bucket: "K", History: 4, Storage: jetstream.FileStorage, Description: "one"}
	ocfg := jetstream.ObjectStoreConfig{Bucket: "O", Storage: jetstream.FileStorage, Description: "one"}
	ensureAll := func(js jetstream.JetStream) {
		t.Helper()
		if _, err := Stream(ctx, js, scfg); err != nil {
			t.Fatalf("Stream: %v", err)
		}
		if _, err := KeyValue(ctx, js, kcfg); err != nil {
			t.Fatalf("KeyValue: %v", err)
		}
		if _, err := ObjectStore(ctx, js, ocfg); err != nil {
			t.Fatalf("ObjectStore: %v", err)
		}
	}
	js, log := start(t, dir)
	ensureAll(js)
	settle(t, js, log)
	if n := log.count("$JS.API.STREAM.CREATE."); n != 3 {
		t.Errorf("new store: %d creates, want 3", n)
	}
	if n := log.count("$JS.API.STREAM.UPDATE."); n != 0 {
		t.Errorf("new store: %d updates, want 0", n)
	}

	log.reset()
	ensureAll(js)
	settle(t, js, log)
	if n := log.count("$JS.API.STREAM.UPDATE."); n != 0 {
		t.Errorf("same configuration: %d updates, want 0", n)
	}

	// The server restarted on the same store: the configurations it
	// recovered compare equal too.
	js, log = start(t, dir)
	ensureAll(js)
	settle(t, js, log)
	if n := log.count("$JS.API.STREAM.UPDATE."); n != 0 {
		t.Errorf("after a restart: %d updates, want 0", n)
	}

	// A changed configuration is applied.
	scfg.Description, kcfg.Description, ocfg.Description = "two", "two", "two"
	kcfg.History = 8
	log.reset()
	ensureAll(js)
	settle(t, js, log)
	if n := log.count("$JS.API.STREAM.UPDATE."); n != 3 {
		t.Errorf("changed configuration: %d updates, want 3", n)
	}
	for name, want := range map[string]int64{"S": -1, "KV_K": 8, "OBJ_O": -1} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		if cfg.Description != "two" {
			t.Errorf("%s: description %q after the update, want %q", name, cfg.Description, "two")
		}
		if name == "KV_K" && cfg.MaxMsgsPerSubject != want {
			t.Errorf("%s: history %d after the update, want %d", name, cfg.MaxMsgsPerSubject, want)
		}
	}
}

// TestAdjustedKeyValueKeepsTheAdjustment: a bucket whose stream was
// adjusted (direct gets off) is left alone when made again with the same
// settings, also by a restarted server; a changed setting is applied.
func TestAdjustedKeyValueKeepsTheAdjustment(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	kcfg := jetstream.KeyValueConfig{Bucket: "A", History: 1, Storage: jetstream.FileStorage, Description: "one"}
	js, log := start(t, dir)
	if err := AdjustedKeyValue(ctx, js, kcfg); err != nil {
		t.Fatal(err)
	}
	direct := func() bool {
		t.Helper()
		s, err := js.Stream(ctx, "KV_A")
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.AllowDirect
	}
	s, err := js.Stream(ctx, "KV_A")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, restart := range []bool{false, true} {
		if restart {
			js, log = start(t, dir)
		}
		settle(t, js, log) // the adjustment's own update, seen before the reset
		log.reset()
		if err := AdjustedKeyValue(ctx, js, kcfg); err != nil {
			t.Fatal(err)
		}
		settle(t, js, log)
		if n := log.count("$JS.API.STREAM.UPDATE."); n != 0 || direct() {
			t.Errorf("made again (restart %v): %d updates, direct gets %v; want 0, false", restart, n, direct())
		}
		if _, err := js.KeyValue(ctx, "A"); err != nil {
			t.Errorf("binding the bucket: %v", err)
		}
	}
	kcfg.Description = "two"
	if err := AdjustedKeyValue(ctx, js, kcfg); err != nil {
		t.Fatal(err)
	}
	if s, err = js.Stream(ctx, "KV_A"); err != nil || s.CachedInfo().Config.Description != "two" {
		t.Errorf("changed description not applied: %v", err)
	}
}
