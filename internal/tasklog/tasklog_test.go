package tasklog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
)

type env struct {
	q      *queue.Queue
	tee    *logstream.Tee
	log    *Log
	logger *slog.Logger
	daemon *bytes.Buffer
}

func newEnv(t *testing.T, o Options) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	tee := logstream.NewTee()
	if o.Source == "" {
		o.Source = "d1"
	}
	l, err := Open(ctx, q.JetStream(), tee, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	var daemon bytes.Buffer
	return &env{q: q, tee: tee, log: l, daemon: &daemon, logger: slog.New(tee.Handler(slog.NewTextHandler(&daemon, nil)))}
}

func (e *env) read(t *testing.T, id string, f Filter) Page {
	t.Helper()
	p, err := e.log.Read(context.Background(), id, 0, 100000, f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) msgs(t *testing.T) uint64 {
	t.Helper()
	st, err := e.q.JetStream().Stream(context.Background(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestLog: the lines about a running task (plugin, runtime, worker) are
// stored with its attempt, its daemon and its tenant, redacted with its
// declared secrets, in order, readable from the cursor on; other lines
// and lines after it ended are not; an attempt that ended with an error
// says so; a task that logs nothing stores nothing.
func TestLog(t *testing.T) {
	e := newEnv(t, Options{})
	ctx := context.Background()
	before := e.msgs(t)
	quiet := e.log.Start(Task{ID: "quiet-1", Origin: OriginQueue, Attempt: 1})
	e.logger.Info("unrelated line", "task", "someone-else")
	quiet(0, nil)
	if n := e.msgs(t); n != before {
		t.Fatalf("a task that logged nothing stored %d messages", n-before)
	}

	asked := 0
	end := e.log.Start(Task{ID: "t.1", Tenant: "acme", Origin: OriginQueue, Attempt: 2, Secrets: func() *redact.Set {
		asked++
		s := redact.New()
		s.AddField("s3cret-api-token")
		return s
	}})
	plugin := e.logger.With("component", "worker", "task", "t.1", "plugin", "shell")
	plugin.Info("installing nginx", "version", "1.25")
	e.logger.With("component", "worker").Error("worker died running a task", "task", "t.1", "cause", "token s3cret-api-token refused")
	e.logger.Info("someone else's line", "task", "t.2")
	end(0, errors.New("worker died (pid 7): signal: killed"))
	plugin.Info("after the end")

	p := e.read(t, "t.1", Filter{Origin: OriginQueue})
	var msgs []string
	for _, l := range p.Lines {
		msgs = append(msgs, l.Msg)
		if l.Attempt != 2 || l.Source != "d1" || l.Attr("task") != "" || l.Seq == 0 {
			t.Errorf("line %+v: want attempt 2 from d1, no task attribute", l)
		}
	}
	want := []string{"installing nginx", "worker died running a task", "the attempt ended without a result: worker died (pid 7): signal: killed"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("lines %q, want %q", msgs, want)
	}
	if p.Lines[0].Attr("version") != "1.25" || p.Lines[0].Attr("component") != "worker" {
		t.Errorf("attributes %+v", p.Lines[0].Attrs)
	}
	if c := p.Lines[1].Attr("cause"); strings.Contains(c, "s3cret") || !strings.Contains(c, redact.Marker) {
		t.Errorf("cause %q: the declared secret is not redacted", c)
	}
	if asked != 1 || p.Tenant != "acme" || p.Origin != OriginQueue {
		t.Errorf("secrets asked %d times; tenant %q origin %q", asked, p.Tenant, p.Origin)
	}
	if !strings.Contains(e.daemon.String(), "installing nginx") {
		t.Error("the daemon's own log lost the line")
	}
	// From a cursor on: nothing new; Wait wakes on a later attempt.
	if p2, err := e.log.Read(ctx, "t.1", p.Next, 100, Filter{}); err != nil || len(p2.Lines) != 0 || p2.Next != p.Next {
		t.Fatalf("read after the cursor: %+v %v", p2, err)
	}
	woke := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		woke <- e.log.Wait(wctx, "t.1", p.Next)
	}()
	time.Sleep(50 * time.Millisecond)
	end = e.log.Start(Task{ID: "t.1", Tenant: "acme", Origin: OriginQueue, Attempt: 3})
	e.logger.Warn("retrying", "task", "t.1")
	end(1, nil)
	if err := <-woke; err != nil {
		t.Fatal(err)
	}
	p2, err := e.log.Read(ctx, "t.1", p.Next, 100, Filter{})
	if err != nil || len(p2.Lines) != 2 || p2.Lines[0].Msg != "retrying" || p2.Lines[0].Attempt != 3 || p2.Lines[0].Level != "WARN" ||
		p2.Lines[1].Kind != KindEnd || p2.Lines[1].Msg != "the attempt ended: status 1" || p2.Lines[1].Level != "WARN" {
		t.Fatalf("attempt 3: %+v %v", p2.Lines, err)
	}
	// Another origin, and an older incarnation, are filtered out.
	if p := e.read(t, "t.1", Filter{Origin: OriginCoopr}); len(p.Lines) != 0 {
		t.Errorf("origin filter let %d lines through", len(p.Lines))
	}
	if p := e.read(t, "t.1", Filter{Since: time.Now().Add(time.Minute)}); len(p.Lines) != 0 {
		t.Errorf("since filter let %d lines through", len(p.Lines))
	}
	if _, err := e.log.Owner(ctx, "t.1", OriginCoopr); !errors.Is(err, ErrNoLog) {
		t.Errorf("owner of a coopr log that does not exist: %v", err)
	}
	if ten, err := e.log.Owner(ctx, "t.1", ""); err != nil || ten != "acme" {
		t.Errorf("owner: %q %v", ten, err)
	}
	if err := e.log.Purge(ctx, "t.1"); err != nil {
		t.Fatal(err)
	}
	if p := e.read(t, "t.1", Filter{}); len(p.Lines) != 0 {
		t.Errorf("purged log still has %d lines", len(p.Lines))
	}
}

// TestKey: task ids that differ never share a key, and a key is one
// subject token.
func TestKey(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a.b", "a_2eb", "a_b", "a-b", "A=b", "a b", "a*b", "x>y", "01HZX3", "4-001-001.x"} {
		k := Key(id)
		if strings.ContainsAny(k, ". *>") || k == "" {
			t.Errorf("Key(%q) = %q: not one subject token", id, k)
		}
		if other, dup := seen[k]; dup {
			t.Errorf("%q and %q share key %q", id, other, k)
		}
		seen[k] = id
	}
}

// TestBounds: an attempt that logs past its bound stores its first three
// quarters of lines, a note, then at its end a note with what was left
// out and its last quarter: first and last lines are there, the count
// adds up. Random line counts and sizes; the seed is printed.
func TestBounds(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("LOOM_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (LOOM_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	e := newEnv(t, Options{MaxLines: 40, MaxTaskBytes: 16 << 10})
	for round := range 12 {
		id := fmt.Sprintf("b-%d", round)
		n := rng.IntN(120)
		end := e.log.Start(Task{ID: id, Origin: OriginQueue, Attempt: 1})
		var total int
		for i := range n {
			msg := fmt.Sprintf("line %d %s", i, strings.Repeat("x", rng.IntN(900)))
			total += logstream.Size(logstream.Entry{Kind: logstream.KindLog, Level: "INFO", Msg: msg, Source: "d1"})
			e.logger.Info(msg, "task", id)
		}
		end(0, nil)
		p := e.read(t, id, Filter{})
		var plain []int
		notes := 0
		cut := 0
		for i, l := range p.Lines {
			if l.Kind == KindEnd {
				if i != len(p.Lines)-1 || l.Msg != "the attempt ended: status 0" {
					t.Fatalf("round %d: end entry %d of %d: %q", round, i, len(p.Lines), l.Msg)
				}
				continue
			}
			if l.Level == "WARN" {
				notes++
				if strings.Contains(l.Msg, "were not stored here") {
					cut, _ = strconv.Atoi(strings.Fields(l.Msg)[0])
				}
				continue
			}
			i, err := strconv.Atoi(strings.Fields(l.Msg)[1])
			if err != nil {
				t.Fatalf("round %d: line %q", round, l.Msg)
			}
			plain = append(plain, i)
		}
		if len(plain)+cut != n {
			t.Fatalf("round %d: %d lines logged, %d stored + %d cut", round, n, len(plain), cut)
		}
		if len(plain) > 40 {
			t.Fatalf("round %d: %d lines stored past the bound of 40", round, len(plain))
		}
		for i := 1; i < len(plain); i++ {
			if plain[i] <= plain[i-1] {
				t.Fatalf("round %d: lines out of order: %v", round, plain)
			}
		}
		if n > 0 && (plain[0] != 0 || plain[len(plain)-1] != n-1) {
			t.Fatalf("round %d: first and last lines lost: %v of %d", round, plain, n)
		}
		if cut > 0 && notes != 2 || cut == 0 && notes > 1 {
			t.Fatalf("round %d: %d notes with %d cut", round, notes, cut)
		}
		if notes == 0 && len(plain) != n {
			t.Fatalf("round %d: lines dropped without a note", round)
		}
	}
}

// TestPaused: while the store is (nearly) full no line is stored; once
// it takes writes again, the task's log says how many were dropped.
func TestPaused(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	e := newEnv(t, Options{FlushEvery: 20 * time.Millisecond, Paused: func() (string, bool) { return "disk nearly full", full.Load() }})
	before := e.msgs(t)
	end := e.log.Start(Task{ID: "p-1", Origin: OriginQueue})
	for i := range 5 {
		e.logger.Info("line", "task", "p-1", "i", i)
	}
	end(0, nil)
	if n := e.msgs(t); n != before {
		t.Fatalf("%d messages stored while the store was full", n-before)
	}
	full.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p := e.read(t, "p-1", Filter{})
		if len(p.Lines) == 1 && strings.HasPrefix(p.Lines[0].Msg, "6 task log lines were dropped here: the store was (nearly) full") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no note after the store came back: %+v", p.Lines)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
