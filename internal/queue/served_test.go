package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// eventually polls cond for up to 10 s; it returns whether cond held.
func eventually(cond func() bool) bool {
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// Every daemon sees which plugin types any daemon serves: announced on
// SetTypes, withdrawn on SetTypes and Close, and forgotten after the TTL
// when a daemon stops renewing (it died).
func TestServedAcrossDaemons(t *testing.T) {
	web := Route{Family: "automator", Type: "web"}
	nope := Route{Family: "automator", Type: "nope"}
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Token = "served-test-token"
	cfg.ServedTTL = 600 * time.Millisecond
	a := open(t, cfg)
	b := open(t, Config{URLs: []string{a.ClientURL()}, Token: cfg.Token, ServedTTL: cfg.ServedTTL, Logger: testLogger()})
	ctx := context.Background()
	if err := a.SetTypes(ctx, []Route{shell}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetTypes(ctx, []Route{web}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := a.Served(shell); !ok {
		t.Errorf("a does not count its own type as served")
	}
	if !eventually(func() bool { ok, _ := b.Served(shell); return ok }) {
		t.Fatalf("b never saw a serve %s", shell)
	}
	if !eventually(func() bool { ok, _ := a.Served(web); return ok }) {
		t.Fatalf("a never saw b serve %s", web)
	}
	ok, all := b.Served(nope)
	if ok || !slices.Equal(all, []Route{shell, web}) {
		t.Errorf("Served(%s) = %v, %v; want false and [%s %s]", nope, ok, all, shell, web)
	}

	// b stops serving web: withdrawn at once, not after the TTL.
	if err := b.SetTypes(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { ok, _ := a.Served(web); return !ok }) {
		t.Errorf("a still counts %s as served after b dropped it", web)
	}

	// A daemon that dies leaves its announcement behind: it stops counting
	// after the TTL since its last renewal.
	if _, err := a.served.kv.Put(ctx, servedKey(web, "dead-daemon"), mustJSON(servedEntry{Family: web.Family, Type: web.Type, Owner: "dead-daemon", At: time.Now()})); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { ok, _ := b.Served(web); return ok }) {
		t.Fatalf("b never saw the dead daemon's announcement")
	}
	if !eventually(func() bool { ok, _ := b.Served(web); return !ok }) {
		t.Errorf("a dead daemon's announcement still counts after its TTL")
	}

	// Closing a daemon withdraws its types.
	if err := b.SetTypes(ctx, []Route{web}); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { ok, _ := a.Served(web); return ok }) {
		t.Fatalf("a never saw b serve %s again", web)
	}
	_ = b.Close()
	if !eventually(func() bool { ok, _ := a.Served(web); return !ok }) {
		t.Errorf("a still counts %s as served after b closed", web)
	}
}

func TestServedKeyEscapes(t *testing.T) {
	got := servedKey(Route{Family: "automator", Type: "my_type:v2"}, "host.example-42")
	if want := "automator.my_5ftype_3av2.host_2eexample-42"; got != want {
		t.Errorf("servedKey = %q, want %q", got, want)
	}
}

// A daemon calls another one dead (so that it may take its tasks over)
// only while its own announcements come back through its watch, and not
// until a TTL after they came back from a gap (a broker outage): the
// others' announcements resume a round or two after its own.
func TestOwnerLiveAfterAGap(t *testing.T) {
	cfg := testConfig(t)
	cfg.ServedTTL = 600 * time.Millisecond
	q := open(t, cfg)
	ctx := context.Background()
	if err := q.SetTypes(ctx, []Route{shell}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.served.kv.Put(ctx, servedKey(shell, "other"), mustJSON(servedEntry{Family: shell.Family, Type: shell.Type, Owner: "other", At: time.Now()})); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { return q.ownerLive("other") }) {
		t.Fatal("the other daemon's announcement was never seen")
	}
	if !eventually(func() bool { return !q.ownerLive("other") }) {
		t.Fatal("a daemon silent for longer than the TTL still counts as live")
	}
	// A gap: this daemon's own announcements stopped coming back.
	s := q.served
	s.mu.Lock()
	s.lastSelf = time.Now().Add(-cfg.ServedTTL)
	s.mu.Unlock()
	if !q.ownerLive("other") {
		t.Error("with its own announcements missing, the daemon called another one dead")
	}
	// They come back (the announce loop renews every third of the TTL):
	// still no verdict for a TTL.
	if !eventually(func() bool { s.mu.Lock(); defer s.mu.Unlock(); return time.Since(s.lastSelf) < cfg.ServedTTL/3 }) {
		t.Fatal("the daemon's own announcements never came back")
	}
	if !q.ownerLive("other") {
		t.Error("right after its own announcements came back, the daemon called another one dead")
	}
	if !eventually(func() bool { return !q.ownerLive("other") }) {
		t.Error("a TTL after the gap, a silent daemon still counts as live")
	}
}

// A claim starts from the record its daemon created at submit (no read
// back), guarded by a compare-and-set on that record's revision: a record
// another daemon changed since fails it, and the claim reads the record.
// Here daemon B marks two of A's queued tasks as out of attempts; A must
// then fail them without running them (a claim that trusted its stale copy
// would run them), and run the others from its copy.
func TestClaimFromStaleSubmitCopy(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Token = "claim-test-token"
	a := open(t, cfg)
	b := open(t, Config{URLs: []string{a.ClientURL()}, Token: cfg.Token, MaxAttempts: cfg.MaxAttempts, Logger: testLogger()})
	ctx := context.Background()
	ids := []string{"sc-0", "sc-1", "sc-2", "sc-3"}
	for _, id := range ids {
		submit(t, a, task(id, "shell"))
	}
	for _, id := range ids[:2] {
		cur, err := b.get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		next := cur
		next.Attempts, next.Error = a.cfg.MaxAttempts, "marked by daemon b"
		if _, err := b.write(ctx, cur, next); err != nil {
			t.Fatalf("daemon b's write of %s: %v", id, err)
		}
	}
	c := newCounter(nil)
	serve(t, a, c, 2, shell)
	for i, id := range ids {
		rec := wait(t, a, id)
		switch {
		case i < 2 && (rec.State != Failed || c.count(id) != 0):
			t.Errorf("%s changed by daemon b: %s, ran %d times; want failed (out of attempts) without running", id, rec.State, c.count(id))
		case i >= 2 && (rec.State != Succeeded || c.count(id) != 1):
			t.Errorf("%s: %s, ran %d times; want succeeded once", id, rec.State, c.count(id))
		}
	}
	a.ix.mu.Lock()
	n := len(a.ix.queued)
	a.ix.mu.Unlock()
	if n != 0 {
		t.Errorf("%d submit copies left after every task was claimed", n)
	}
}

// Daemons announce their capabilities with their served types. Lacking
// names the live ones without a capability: an announcement without
// "caps" (an older loomd's) has none; one with them, a new daemon's, is
// not named; a daemon stops being named when its announcement goes or
// lapses; LackingSeen fires when one appears, and again when it comes
// back after a silence; while this daemon's own view is stale, Lacking
// is not sure.
func TestLacking(t *testing.T) {
	const journal = "cluster-journal"
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Token = "lacking-test-token"
	cfg.ServedTTL = 600 * time.Millisecond
	cfg.Capabilities, cfg.Version, cfg.Owner = []string{journal}, "v9.9.9", "daemon-a"
	a := open(t, cfg)
	b := open(t, Config{URLs: []string{a.ClientURL()}, Token: cfg.Token, ServedTTL: cfg.ServedTTL, Logger: testLogger(), Owner: "daemon-b",
		Capabilities: []string{journal, "later"}, Version: "v10.0.0"})
	ctx := context.Background()
	if err := a.SetTypes(ctx, []Route{shell}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetTypes(ctx, []Route{shell}); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { return a.ownerLive(b.Owner()) && b.ownerLive(a.Owner()) }) {
		t.Fatal("the daemons never saw each other")
	}
	if got, sure := a.Lacking(journal); len(got) != 0 || !sure {
		t.Fatalf("two new daemons: Lacking = %v, %v", got, sure)
	}
	// b has a capability a lacks: b names a (with its version), a names nobody.
	if got, _ := b.Lacking("later"); !slices.Equal(got, []string{a.Owner() + " (loomd v9.9.9)"}) {
		t.Errorf("b.Lacking(later) = %v", got)
	}
	select { // drain what the start may have sent
	case <-a.LackingSeen():
	default:
	}
	// An older daemon announces itself the way it always did.
	old := func() {
		t.Helper()
		if _, err := a.served.kv.Put(ctx, servedKey(shell, "old-daemon"), []byte(`{"family":"automator","type":"shell","owner":"old-daemon","at":"`+time.Now().UTC().Format(time.RFC3339Nano)+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	old()
	select {
	case <-a.LackingSeen():
	case <-time.After(10 * time.Second):
		t.Fatal("LackingSeen did not fire for an older daemon's announcement")
	}
	if got, sure := a.Lacking(journal); !slices.Equal(got, []string{"old-daemon"}) || !sure {
		t.Fatalf("with an older daemon: Lacking = %v, %v", got, sure)
	}
	if !eventually(func() bool { got, _ := b.Lacking(journal); return slices.Equal(got, []string{"old-daemon"}) }) {
		t.Error("b never named the older daemon")
	}
	// Silent, it lapses after the TTL.
	if !eventually(func() bool { got, _ := a.Lacking(journal); return len(got) == 0 }) {
		t.Fatal("an older daemon silent for over the TTL is still named")
	}
	select { // a renewal seen late may have fired again
	case <-a.LackingSeen():
	default:
	}
	// Back after the silence: fires again.
	old()
	select {
	case <-a.LackingSeen():
	case <-time.After(10 * time.Second):
		t.Fatal("LackingSeen did not fire for an older daemon back after a silence")
	}
	// Withdrawn (its graceful stop): gone at once.
	if err := a.served.kv.Delete(ctx, servedKey(shell, "old-daemon")); err != nil {
		t.Fatal(err)
	}
	if !eventually(func() bool { got, _ := a.Lacking(journal); return len(got) == 0 }) {
		t.Fatal("a withdrawn announcement is still named")
	}
	// A stale view of the announcements: not sure.
	s := a.served
	s.mu.Lock()
	s.lastSelf = time.Now().Add(-cfg.ServedTTL)
	s.mu.Unlock()
	if _, sure := a.Lacking(journal); sure {
		t.Error("with its own announcements missing, Lacking was sure")
	}
}

// BenchmarkLacking: what the journal gate asks before every round of a
// cluster job: this daemon serves 50 plugin types and another daemon
// (new, with the capability) announces the same 50.
func BenchmarkLacking(b *testing.B) {
	const journal = "cluster-journal"
	cfg := Config{DataDir: b.TempDir(), Logger: testLogger(), Owner: "bench-a", Capabilities: []string{journal}}
	ctx := context.Background()
	q, err := Open(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = q.Close() })
	var routes []Route
	for i := range 50 {
		routes = append(routes, Route{Family: "automator", Type: fmt.Sprintf("type%d", i)})
	}
	if err := q.SetTypes(ctx, routes); err != nil {
		b.Fatal(err)
	}
	for _, r := range routes {
		if _, err := q.served.kv.Put(ctx, servedKey(r, "bench-b"), mustJSON(servedEntry{Family: r.Family, Type: r.Type, Owner: "bench-b", At: time.Now(), Caps: []string{journal}})); err != nil {
			b.Fatal(err)
		}
	}
	if !eventually(func() bool { q.served.mu.Lock(); defer q.served.mu.Unlock(); return len(q.served.seen) == 100 }) {
		b.Fatal("the announcements were never all seen")
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if l, sure := q.Lacking(journal); len(l) > 0 || !sure {
			b.Fatalf("Lacking = %v, %v", l, sure)
		}
	}
}
