package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomrt/loom/runtime"
	"github.com/nats-io/nats.go/jetstream"
)

// testConfig is a fast configuration on a fresh data dir.
func testConfig(t *testing.T) Config {
	t.Helper()
	return Config{
		DataDir:      t.TempDir(),
		AckWait:      time.Second,
		MaxAttempts:  3,
		RetryDelay:   20 * time.Millisecond,
		PollInterval: 50 * time.Millisecond,
		Logger:       testLogger(),
	}
}

func open(t *testing.T, cfg Config) *Queue {
	t.Helper()
	return openWithin(t, cfg, time.Minute)
}

// openWithin is open with its own deadline: on a NATS cluster, creating
// every stream and bucket with three replicas takes a meta-leader round
// per asset, which on a loaded 2-core machine can take longer than a
// single server's minute (20 s once ran out creating the state buckets
// of a single server while other suites ran).
func openWithin(t *testing.T, cfg Config, within time.Duration) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	q, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// serve runs q.Serve until the test ends, and returns a stop function
// that waits for Serve to return.
func serve(t *testing.T, q *Queue, r Runner, concurrency int, routes ...Route) (stop func()) {
	t.Helper()
	if err := q.SetTypes(context.Background(), routes); err != nil {
		t.Fatalf("SetTypes: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Serve(ctx, r, concurrency) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("Serve did not return within 20s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

var shell = Route{Family: "automator", Type: "shell"}

// task returns an INSTALL task for automator type typ.
func task(id, typ string, extra ...string) []byte {
	cfg := `{"service":{"action":{"type":"` + typ + `"}}` + strings.Join(extra, "") + `}`
	if id == "" {
		return []byte(`{"taskName":"INSTALL","config":` + cfg + `}`)
	}
	return []byte(`{"taskId":"` + id + `","taskName":"INSTALL","config":` + cfg + `}`)
}

func submit(t *testing.T, q *Queue, data []byte) Record {
	t.Helper()
	rec, _, err := q.Submit(context.Background(), data)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	return rec
}

func wait(t *testing.T, q *Queue, id string) Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rec, err := q.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v (state %s, error %q)", id, err, rec.State, rec.Error)
	}
	return rec
}

// counter is a Runner that counts runs per task id and answers with
// status 0 and a result naming the task.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
	fn   func(ctx context.Context, id string, n int) ([]byte, int, error)
}

func newCounter(fn func(ctx context.Context, id string, n int) ([]byte, int, error)) *counter {
	return &counter{runs: map[string]int{}, fn: fn}
}

func (c *counter) Run(ctx context.Context, data []byte) ([]byte, int, error) {
	t, err := runtime.ParseTask(data)
	if err != nil {
		return nil, 0, err
	}
	c.mu.Lock()
	c.runs[t.TaskID]++
	n := c.runs[t.TaskID]
	c.mu.Unlock()
	if c.fn != nil {
		return c.fn(ctx, t.TaskID, n)
	}
	return []byte(`{"status":0,"result":{"id":"` + t.TaskID + `"}}`), 0, nil
}

func (c *counter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.runs {
		n += v
	}
	return n
}

func depth(t *testing.T, q *Queue) int {
	t.Helper()
	d, err := q.Depth(context.Background())
	if err != nil {
		t.Fatalf("Depth: %v", err)
	}
	n := 0
	for _, v := range d {
		n += v
	}
	return n
}

func TestSubmitRunResult(t *testing.T) {
	q := open(t, testConfig(t))
	c := newCounter(nil)
	serve(t, q, c, 4, shell)

	rec := submit(t, q, task("", "shell"))
	if rec.TaskID == "" || rec.State == "" {
		t.Fatalf("submitted record = %+v, want an id and a state", rec)
	}
	if rec.Type != "shell" || rec.Family != "automator" || rec.Hook != "install" {
		t.Errorf("record route = %s/%s hook %s, want automator/shell install", rec.Family, rec.Type, rec.Hook)
	}
	got := wait(t, q, rec.TaskID)
	if got.State != Succeeded || got.Attempts != 1 || got.Status == nil || *got.Status != 0 {
		t.Fatalf("final record = %+v, want succeeded after 1 attempt with status 0", got)
	}
	var res struct {
		Result struct{ ID string } `json:"result"`
	}
	if err := json.Unmarshal(got.Result, &res); err != nil || res.Result.ID != rec.TaskID {
		t.Errorf("result = %s (%v), want the runner's result for %s", got.Result, err, rec.TaskID)
	}
	if got.Started == nil || got.Finished == nil || got.Owner != q.Owner() {
		t.Errorf("record lacks started/finished/owner: %+v", got)
	}
	waitDepth(t, q, 0) // the ack follows the record's final write
	g2, err := q.Get(context.Background(), rec.TaskID)
	if err != nil || g2.State != Succeeded {
		t.Errorf("Get = %+v, %v; want the succeeded record", g2, err)
	}
	list, err := q.List(context.Background(), Filter{State: Succeeded})
	if err != nil || len(list.Records) != 1 || list.Records[0].TaskID != rec.TaskID {
		t.Errorf("List(succeeded) = %v, %v; want the one task", list, err)
	}
	if list, _ := q.List(context.Background(), Filter{State: Queued}); len(list.Records) != 0 {
		t.Errorf("List(queued) = %v, want none", list)
	}
}

func TestSubmitRejectsMalformed(t *testing.T) {
	q := open(t, testConfig(t))
	for name, data := range map[string]string{
		"not json":      `{"taskName":`,
		"no taskName":   `{"config":{}}`,
		"no type":       `{"taskName":"INSTALL","config":{"service":{}}}`,
		"bad id":        `{"taskId":"a b","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`,
		"dotted type":   `{"taskName":"INSTALL","config":{"service":{"action":{"type":"a.b"}}}}`,
		"wildcard type": `{"taskName":"INSTALL","config":{"service":{"action":{"type":">"}}}}`,
	} {
		_, _, err := q.Submit(context.Background(), []byte(data))
		if !errors.Is(err, runtime.ErrInvalidTask) {
			t.Errorf("%s: Submit error = %v, want one wrapping ErrInvalidTask", name, err)
		}
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("depth after malformed submissions = %d, want 0", n)
	}
}

func TestDedupe(t *testing.T) {
	q := open(t, testConfig(t))
	ctx := context.Background()
	r1, new1, err := q.Submit(ctx, task("dup-1", "shell"))
	if err != nil || !new1 {
		t.Fatalf("first Submit = %v, %v; want a new task", new1, err)
	}
	r2, new2, err := q.Submit(ctx, task("dup-1", "shell"))
	if err != nil || new2 || r2.TaskID != r1.TaskID {
		t.Fatalf("second Submit = %+v, new=%v, %v; want the existing record", r2, new2, err)
	}
	if n := depth(t, q); n != 1 {
		t.Fatalf("depth after two submissions of one id = %d, want 1", n)
	}
	c := newCounter(nil)
	serve(t, q, c, 2, shell)
	wait(t, q, "dup-1")
	// Again after it finished: the record answers, nothing runs.
	r3, new3, err := q.Submit(ctx, task("dup-1", "shell"))
	if err != nil || new3 || r3.State != Succeeded {
		t.Fatalf("Submit after finish = %+v, new=%v, %v; want the succeeded record", r3, new3, err)
	}
	// A later task proves the worker is still pulling.
	submit(t, q, task("dup-2", "shell"))
	wait(t, q, "dup-2")
	if n := c.count("dup-1"); n != 1 {
		t.Errorf("dup-1 ran %d times, want 1", n)
	}
}

// A copy of a task published after the dedupe window is dropped by the
// worker, because the record says the task finished.
func TestDuplicateCopyAfterWindow(t *testing.T) {
	cfg := testConfig(t)
	cfg.Duplicates = 100 * time.Millisecond
	q := open(t, cfg)
	ctx := context.Background()
	c := newCounter(nil)
	serve(t, q, c, 2, shell)
	submit(t, q, task("copy-1", "shell"))
	first := wait(t, q, "copy-1")
	// The server forgets the id on a timer once the window has passed,
	// late on a loaded machine: until then a copy is dropped as a
	// duplicate (and changes nothing), so publish until one is stored.
	time.Sleep(300 * time.Millisecond)
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ack, err := q.js.Publish(ctx, shell.subjectIn(shardOf("copy-1")), task("copy-1", "shell"), jetstream.WithMsgID("copy-1"))
		if err != nil {
			t.Fatalf("publishing a copy: %v", err)
		}
		if !ack.Duplicate {
			break
		}
		if time.Now().After(end) {
			t.Fatal("a copy published 20 s after the 100 ms dedupe window is still a duplicate")
		}
	}
	submit(t, q, task("copy-2", "shell"))
	wait(t, q, "copy-2")
	waitDepth(t, q, 0)
	if n := c.count("copy-1"); n != 1 {
		t.Errorf("copy-1 ran %d times, want 1", n)
	}
	if got, _ := q.Get(ctx, "copy-1"); got.Revision != first.Revision {
		t.Errorf("the copy changed the finished record: revision %d -> %d", first.Revision, got.Revision)
	}
}

func waitDepth(t *testing.T, q *Queue, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := depth(t, q)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream depth = %d after 20s, want %d", n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPluginFailureIsFinal(t *testing.T) {
	q := open(t, testConfig(t))
	c := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		return []byte(`{"status":2,"message":"disk full"}`), 2, nil
	})
	serve(t, q, c, 2, shell)
	rec := submit(t, q, task("pf-1", "shell"))
	got := wait(t, q, rec.TaskID)
	if got.State != Failed || got.Attempts != 1 || got.Status == nil || *got.Status != 2 {
		t.Fatalf("record = %+v, want failed after 1 attempt with status 2", got)
	}
	if !strings.Contains(got.Error, "disk full") || !strings.Contains(string(got.Result), "disk full") {
		t.Errorf("record error %q / result %s should carry the plugin's message", got.Error, got.Result)
	}
	waitDepth(t, q, 0)
	if n := c.count("pf-1"); n != 1 {
		t.Errorf("ran %d times, want 1 (plugin failures are not retried)", n)
	}
}

func TestInfraFailureRetriedThenFailed(t *testing.T) {
	q := open(t, testConfig(t)) // MaxAttempts 3
	c := newCounter(func(_ context.Context, id string, n int) ([]byte, int, error) {
		if id == "flaky" && n > 1 {
			return []byte(`{"status":0}`), 0, nil
		}
		return nil, 0, fmt.Errorf("vm lost (run %d)", n)
	})
	serve(t, q, c, 2, shell)
	submit(t, q, task("poison", "shell"))
	submit(t, q, task("flaky", "shell"))

	got := wait(t, q, "poison")
	if got.State != Failed || got.Attempts != 3 || !strings.Contains(got.Error, "gave up after 3 attempts") || !strings.Contains(got.Error, "vm lost (run 3)") {
		t.Fatalf("poison record = %+v, want failed after 3 attempts with the last error", got)
	}
	if n := c.count("poison"); n != 3 {
		t.Errorf("poison ran %d times, want 3", n)
	}
	fl := wait(t, q, "flaky")
	if fl.State != Succeeded || fl.Attempts != 2 {
		t.Errorf("flaky record = %+v, want succeeded on attempt 2", fl)
	}
	waitDepth(t, q, 0)
}

func TestWorkerCrashesFailTaskWithKindCrash(t *testing.T) {
	q := open(t, testConfig(t)) // MaxAttempts 3, MaxCrashes 2 (default)
	c := newCounter(func(_ context.Context, id string, n int) ([]byte, int, error) {
		return nil, 0, fmt.Errorf("%w: worker for \"shell\" died: signal: segmentation fault (run %d)", ErrWorkerCrashed, n)
	})
	serve(t, q, c, 1, shell)
	submit(t, q, task("crasher", "shell"))

	got := wait(t, q, "crasher")
	if got.State != Failed || got.Crashes != 2 || !strings.HasPrefix(got.Error, "crash: ") || !strings.Contains(got.Error, "(run 2)") {
		t.Fatalf("record = %+v, want failed with 2 crashes and the last cause", got)
	}
	if n := c.count("crasher"); n != 2 {
		t.Errorf("the poison task ran %d times, want 2", n)
	}
	var res struct {
		Status int `json:"status"`
		Error  struct {
			Kind string `json:"kind"`
		} `json:"error"`
	}
	if err := json.Unmarshal(got.Result, &res); err != nil || res.Status != 1 || res.Error.Kind != "crash" {
		t.Errorf("result = %s (%v), want status 1 and error kind crash", got.Result, err)
	}
}

func TestUnknownTypeWaitsUntilServed(t *testing.T) {
	q := open(t, testConfig(t))
	c := newCounter(nil)
	serve(t, q, c, 2, shell)
	submit(t, q, task("later-1", "later"))
	// A task for a served type finishes while later-1 waits.
	submit(t, q, task("now-1", "shell"))
	wait(t, q, "now-1")
	if got, _ := q.Get(context.Background(), "later-1"); got.State != Queued || c.count("later-1") != 0 {
		t.Fatalf("later-1 = %s (ran %d times) before its type is served, want queued and not run", got.State, c.count("later-1"))
	}
	later := Route{Family: "automator", Type: "later"}
	if err := q.SetTypes(context.Background(), []Route{shell, later}); err != nil {
		t.Fatal(err)
	}
	if got := wait(t, q, "later-1"); got.State != Succeeded {
		t.Fatalf("later-1 = %+v, want succeeded once served", got)
	}
	// Removing the type stops pulling for it.
	if err := q.SetTypes(context.Background(), []Route{shell}); err != nil {
		t.Fatal(err)
	}
	if types := q.Types(); len(types) != 1 || types[0] != shell {
		t.Errorf("Types = %v, want only %v", types, shell)
	}
	submit(t, q, task("later-2", "later"))
	submit(t, q, task("now-2", "shell"))
	wait(t, q, "now-2")
	if c.count("later-2") != 0 {
		t.Errorf("later-2 ran after its type was removed")
	}
}

func TestConcurrencyBound(t *testing.T) {
	q := open(t, testConfig(t))
	var cur, peak atomic.Int32
	c := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		n := cur.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
		return []byte(`{"status":0}`), 0, nil
	})
	other := Route{Family: "provider", Type: "cloud"}
	var ids []string
	for i := range 30 {
		id := fmt.Sprintf("cc-%d", i)
		if i%2 == 0 {
			submit(t, q, task(id, "shell"))
		} else {
			submit(t, q, []byte(`{"taskId":"`+id+`","taskName":"CREATE","config":{"provider":{"providertype":"cloud"}}}`))
		}
		ids = append(ids, id)
	}
	serve(t, q, c, 3, shell, other)
	for _, id := range ids {
		if got := wait(t, q, id); got.State != Succeeded {
			t.Fatalf("%s = %s, want succeeded", id, got.State)
		}
	}
	if p := peak.Load(); p > 3 || p < 1 {
		t.Errorf("peak concurrency = %d, want between 1 and 3", p)
	}
	if n := c.total(); n != 30 {
		t.Errorf("ran %d tasks, want 30", n)
	}
}

func TestRestartKeepsState(t *testing.T) {
	cfg := testConfig(t)
	q := open(t, cfg)
	c := newCounter(nil)
	stop := serve(t, q, c, 2, shell)
	submit(t, q, task("r-done", "shell"))
	wait(t, q, "r-done")
	stop()
	submit(t, q, task("r-queued", "shell")) // nobody serves now
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	q2 := open(t, cfg)
	ctx := context.Background()
	if got, err := q2.Get(ctx, "r-done"); err != nil || got.State != Succeeded {
		t.Fatalf("after restart r-done = %+v, %v; want succeeded", got, err)
	}
	if got, err := q2.Get(ctx, "r-queued"); err != nil || got.State != Queued {
		t.Fatalf("after restart r-queued = %+v, %v; want queued", got, err)
	}
	if n := depth(t, q2); n != 1 {
		t.Fatalf("depth after restart = %d, want 1", n)
	}
	c2 := newCounter(nil)
	serve(t, q2, c2, 2, shell)
	if got := wait(t, q2, "r-queued"); got.State != Succeeded {
		t.Fatalf("r-queued = %s after restart, want succeeded", got.State)
	}
	if c2.count("r-done") != 0 {
		t.Errorf("r-done ran again after restart")
	}
}

// Two workers share one embedded server through its listener. The first
// stops heartbeating, so its task is redelivered to the second; when the
// first (the zombie) finally finishes, its outcome is fenced out.
func TestZombieIsFenced(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Owner = "zombie"
	cfg.AckWait = 300 * time.Millisecond
	a := open(t, cfg)
	a.noHeartbeat = true
	if a.ClientURL() == "" {
		t.Fatal("ClientURL is empty with a listen address")
	}
	bcfg := testConfig(t)
	bcfg.DataDir = ""
	bcfg.URLs = []string{a.ClientURL()}
	bcfg.NkeyFile = filepath.Join(cfg.DataDir, "nats.nk") // a's generated key
	bcfg.Owner = "healthy"
	bcfg.AckWait = cfg.AckWait
	b := open(t, bcfg)

	release := make(chan struct{})
	zombieRan := make(chan struct{})
	za := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		close(zombieRan)
		<-release
		return []byte(`{"status":0,"result":{"by":"zombie"}}`), 0, nil
	})
	stopA := serve(t, a, za, 1, shell)
	submit(t, a, task("z-1", "shell"))
	<-zombieRan
	// A zombie is cut off: no heartbeats, and no announcements either
	// (while its daemon announces, a redelivery is left to it).
	a.served.close()
	hb := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		return []byte(`{"status":0,"result":{"by":"healthy"}}`), 0, nil
	})
	serve(t, b, hb, 1, shell)
	got := wait(t, b, "z-1")
	if got.State != Succeeded || got.Owner != "healthy" || got.Attempts != 2 {
		t.Fatalf("record = %+v, want succeeded by the healthy worker on attempt 2", got)
	}
	close(release)
	stopA() // waits for the zombie's handler to finish
	final, err := b.Get(context.Background(), "z-1")
	if err != nil {
		t.Fatal(err)
	}
	if final.Revision != got.Revision || !strings.Contains(string(final.Result), "healthy") {
		t.Errorf("the zombie overwrote the outcome: %+v", final)
	}
	// The stream ends empty. A delivery naked while the zombie still
	// looked alive may come back once more; the claim then drops it as a
	// finished task's duplicate.
	end := time.Now().Add(10 * time.Second)
	for depth(t, b) != 0 && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := depth(t, b); n != 0 {
		t.Errorf("depth = %d, want 0", n)
	}
}

// A stale writer's compare-and-set fails even without the worker loop.
func TestCommitFencedByRevision(t *testing.T) {
	q := open(t, testConfig(t))
	ctx := context.Background()
	rec := submit(t, q, task("cas-1", "shell"))
	log := q.log
	claimed := rec
	claimed.State, claimed.Attempts, claimed.Owner = Running, 1, "a"
	rev, err := q.write(ctx, rec, claimed)
	if err != nil {
		t.Fatal(err)
	}
	claimed.Revision = rev
	newer := claimed
	newer.Attempts, newer.Owner = 2, "b"
	if _, err := q.write(ctx, claimed, newer); err != nil {
		t.Fatal(err)
	}
	late := claimed
	late.State = Succeeded
	if q.commit(ctx, log, claimed, late) {
		t.Fatal("commit with a stale revision succeeded")
	}
	if got, _ := q.Get(ctx, "cas-1"); got.State != Running || got.Owner != "b" {
		t.Errorf("record = %+v, want b's running claim", got)
	}
}

func TestWaitTimesOutWithCurrentRecord(t *testing.T) {
	q := open(t, testConfig(t))
	submit(t, q, task("w-1", "nobody"))
	// The deadline is to end the wait for a change, not Wait's first read
	// of the record: should that read alone outlast it (under -race on a
	// loaded machine), there is no record to return, and a longer one is
	// tried.
	var rec Record
	var err error
	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, 10 * time.Second} {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		rec, err = q.Wait(ctx, "w-1")
		cancel()
		if rec.State != "" || !errors.Is(err, context.DeadlineExceeded) {
			break
		}
		t.Logf("Wait's first read outlasted a %s deadline: trying a longer one", d)
	}
	if !errors.Is(err, context.DeadlineExceeded) || rec.State != Queued {
		t.Fatalf("Wait = %+v, %v; want the queued record and a deadline error", rec, err)
	}
	if _, err := q.Wait(context.Background(), "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Wait(missing) error = %v, want ErrNotFound", err)
	}
}

// TestWaitSubmittedBeforeItsRecord: a task whose record is not written
// yet (accepted during a leader election, recorded when a worker claims
// it) is waited for by WaitSubmitted: the submitted record while the wait
// lasts, not ErrNotFound, and the finished one once it is written and run.
func TestWaitSubmittedBeforeItsRecord(t *testing.T) {
	q := open(t, testConfig(t))
	sub := Record{TaskID: "ws-1", State: Queued, Family: "automator", Type: "shell"}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	rec, err := q.WaitSubmitted(ctx, sub)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || rec.TaskID != "ws-1" || rec.State != Queued {
		t.Fatalf("WaitSubmitted before the record = %+v, %v; want the submitted record and a deadline error", rec, err)
	}
	type waited struct {
		rec Record
		err error
	}
	got := make(chan waited, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		rec, err := q.WaitSubmitted(ctx, sub)
		got <- waited{rec, err}
	}()
	for registered := false; !registered; time.Sleep(time.Millisecond) { // waiting on a record that does not exist
		q.mu.Lock()
		registered = len(q.waiters["ws-1"]) > 0
		q.mu.Unlock()
	}
	serve(t, q, RunnerFunc(func(context.Context, []byte) ([]byte, int, error) {
		return []byte(`{"status":0}`), 0, nil
	}), 1, shell)
	submit(t, q, task("ws-1", "shell"))
	if w := <-got; w.err != nil || w.rec.State != Succeeded || w.rec.Revision == 0 {
		t.Fatalf("WaitSubmitted = %+v, %v; want the succeeded record", w.rec, w.err)
	}
}

func TestShutdownFinishesInFlight(t *testing.T) {
	q := open(t, testConfig(t))
	started := make(chan struct{}, 4)
	c := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		started <- struct{}{}
		time.Sleep(200 * time.Millisecond)
		return []byte(`{"status":0}`), 0, nil
	})
	stop := serve(t, q, c, 2, shell)
	submit(t, q, task("sd-1", "shell"))
	submit(t, q, task("sd-2", "shell"))
	<-started
	<-started
	stop() // returns once in-flight tasks finished
	for _, id := range []string{"sd-1", "sd-2"} {
		if got, _ := q.Get(context.Background(), id); got.State != Succeeded {
			t.Errorf("%s = %s after a graceful stop, want succeeded", id, got.State)
		}
	}
}

func TestAbortRunningRequeues(t *testing.T) {
	cfg := testConfig(t)
	q := open(t, cfg)
	started := make(chan struct{})
	c := newCounter(func(ctx context.Context, _ string, n int) ([]byte, int, error) {
		close(started)
		<-ctx.Done()
		return nil, 0, ctx.Err()
	})
	stop := serve(t, q, c, 1, shell)
	submit(t, q, task("ab-1", "shell"))
	<-started
	q.AbortRunning()
	stop()
	got, _ := q.Get(context.Background(), "ab-1")
	if got.State != Queued || got.Attempts != 0 || !strings.Contains(got.Error, "interrupted") {
		t.Fatalf("record = %+v, want queued with the attempt given back", got)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q2 := open(t, cfg)
	serve(t, q2, newCounter(nil), 1, shell)
	if got := wait(t, q2, "ab-1"); got.State != Succeeded || got.Attempts != 1 {
		t.Fatalf("after restart = %+v, want succeeded on attempt 1", got)
	}
}

// A message whose deliveries ran out is marked failed and removed when the
// advisory arrives.
func TestMaxDeliveriesAdvisory(t *testing.T) {
	q := open(t, testConfig(t))
	ctx := context.Background()
	submit(t, q, task("md-1", "nobody"))
	shard := shardOf("md-1")
	msg, err := q.taskStream(shard).GetLastMsgForSubject(ctx, Route{Family: "automator", Type: "nobody"}.subjectIn(shard))
	if err != nil {
		t.Fatal(err)
	}
	q.handleMaxDeliveries([]byte(fmt.Sprintf(`{"stream":%q,"stream_seq":%d,"deliveries":5}`, taskStreamName(shard), msg.Sequence)))
	got, _ := q.Get(ctx, "md-1")
	if got.State != Failed || !strings.Contains(got.Error, "5 deliveries") {
		t.Errorf("record = %+v, want failed after 5 deliveries", got)
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("depth = %d, want 0", n)
	}
}

func TestLargeResultGoesToObjectStore(t *testing.T) {
	q := open(t, testConfig(t))
	big := strings.Repeat("x", 5<<20)
	c := newCounter(func(context.Context, string, int) ([]byte, int, error) {
		return []byte(`{"status":0,"stdout":"` + big + `"}`), 0, nil
	})
	serve(t, q, c, 1, shell)
	submit(t, q, task("big-1", "shell"))
	got := wait(t, q, "big-1")
	if got.State != Succeeded || got.ResultRef == "" || len(got.Result) < len(big) {
		t.Fatalf("record state %s ref %q result %d bytes; want the whole result through the object store", got.State, got.ResultRef, len(got.Result))
	}
	// State only: a known id submitted again, and a read, leave it unloaded.
	ctx := WithStateOnly(context.Background())
	dup, isNew, err := q.Submit(ctx, task("big-1", "shell"))
	if err != nil || isNew || dup.State != Succeeded || dup.ResultRef == "" || dup.ResultSize < int64(len(big)) || dup.Result != nil {
		t.Errorf("Submit again, state only = %v new %v %s ref %q size %d, %d result bytes; want the known record without its result", err, isNew, dup.State, dup.ResultRef, dup.ResultSize, len(dup.Result))
	}
	if rec, err := q.Get(ctx, "big-1"); err != nil || rec.Result != nil || rec.ResultRef == "" {
		t.Errorf("Get, state only = %v, %d result bytes; want none", err, len(rec.Result))
	}
}

func TestConfigValidation(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no data dir":         {},
		"bad listener":        {DataDir: "x", ListenAddr: "4222"},
		"listen and external": {URLs: []string{"nats://x"}, ListenAddr: "127.0.0.1:4222"},
		"replicas embedded":   {DataDir: "x", Replicas: 3},
	} {
		if _, err := Open(context.Background(), cfg); err == nil {
			t.Errorf("%s: Open succeeded, want a configuration error", name)
		}
	}
}

func TestDataDirIsLocked(t *testing.T) {
	cfg := testConfig(t)
	open(t, cfg)
	if _, err := Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "in use by another loomd") {
		t.Fatalf("second Open on the same data dir: %v, want a refusal", err)
	}
}

// A consumer deleted behind the daemon's back (by an operator) is created
// again, and its tasks run.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	q := open(t, testConfig(t))
	serve(t, q, newCounter(nil), 2, shell)
	if err := q.js.DeleteConsumer(context.Background(), taskStreamName(shardOf("rc-1")), shell.consumerName()); err != nil {
		t.Fatal(err)
	}
	submit(t, q, task("rc-1", "shell"))
	if got := wait(t, q, "rc-1"); got.State != Succeeded {
		t.Fatalf("rc-1 = %s after the consumer was deleted, want succeeded", got.State)
	}
}

func TestNewIDSortsAndIsValid(t *testing.T) {
	a := NewID()
	time.Sleep(2 * time.Millisecond)
	b := NewID()
	if len(a) != 26 || validID(a) != nil || a >= b {
		t.Errorf("NewID = %q then %q: want 26-char valid ids in time order", a, b)
	}
}

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// SetTypes creates a new type's first-shard consumer and the other shards'
// in the background: tasks already waiting in every shard all run, and
// every shard ends with the type's consumer.
func TestSetTypesServesEveryShard(t *testing.T) {
	q := open(t, testConfig(t))
	serve(t, q, newCounter(nil), 4, shell)
	later := Route{Family: "automator", Type: "later"}
	var ids []string
	covered := make([]bool, StateShards)
	for i := 0; len(ids) < 4*StateShards || slices.Contains(covered, false); i++ {
		id := fmt.Sprintf("shard-%d", i)
		covered[shardOf(id)] = true
		ids = append(ids, id)
		submit(t, q, task(id, "later"))
	}
	if err := q.SetTypes(context.Background(), []Route{shell, later}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if got := wait(t, q, id); got.State != Succeeded {
			t.Fatalf("%s (shard %d) = %s, want succeeded", id, shardOf(id), got.State)
		}
	}
	for shard := range StateShards {
		if _, err := q.shards[shard].js.Consumer(context.Background(), taskStreamName(shard), later.consumerName()); err != nil {
			t.Errorf("shard %d: consumer of %s: %v", shard, later, err)
		}
	}
}

// On a single server, consumers keep their state in memory (no state file
// rewritten with O_SYNC per ack). A consumer an earlier loomd created with
// file state is created again in memory, and the task waiting in its
// stream runs; so does one queued before a restart.
// TestHoldShardFill: while the fill is held, SetTypes creates a type's
// consumer in the first shard only; once released, the other shards'
// follow, and their tasks run.
func TestHoldShardFill(t *testing.T) {
	q := open(t, testConfig(t))
	release := q.HoldShardFill()
	defer release()
	if err := q.SetTypes(context.Background(), []Route{shell}); err != nil {
		t.Fatal(err)
	}
	consumer := func(shard int) error {
		_, err := q.shards[shard].js.Consumer(context.Background(), taskStreamName(shard), shell.consumerName())
		return err
	}
	if err := consumer(0); err != nil {
		t.Fatalf("shard 0: consumer of %s: %v", shell, err)
	}
	for shard := 1; shard < StateShards; shard++ {
		if err := consumer(shard); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			t.Errorf("shard %d while held: consumer of %s: %v, want not found", shard, shell, err)
		}
	}
	var ids []string
	covered := make([]bool, StateShards)
	for i := 0; slices.Contains(covered, false); i++ {
		id := fmt.Sprintf("held-%d", i)
		covered[shardOf(id)] = true
		ids = append(ids, id)
		submit(t, q, task(id, "shell"))
	}
	release()
	serve(t, q, newCounter(nil), 2, shell)
	for _, id := range ids {
		if got := wait(t, q, id); got.State != Succeeded {
			t.Fatalf("%s (shard %d) = %s, want succeeded", id, shardOf(id), got.State)
		}
	}
	for shard := range StateShards {
		if err := consumer(shard); err != nil {
			t.Errorf("shard %d after the release: consumer of %s: %v", shard, shell, err)
		}
	}
}

// TestCloseWhileFillHeld: a queue closes while the fill is still held
// (loomd serve's start failing before its API listens), without waiting
// for a release that never comes.
func TestCloseWhileFillHeld(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	q.HoldShardFill()
	if err := q.SetTypes(ctx, []Route{shell}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- q.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return while the fill was held")
	}
}

func TestConsumersKeepStateInMemory(t *testing.T) {
	cfg := testConfig(t)
	q := open(t, cfg)
	ctx := context.Background()
	// An earlier loomd's consumer, with file state, and a task for it.
	old := q.consumerConfig(shell, 0)
	old.MemoryStorage = false
	if _, err := q.shards[0].js.CreateOrUpdateConsumer(ctx, taskStreamName(0), old); err != nil {
		t.Fatal(err)
	}
	id := "mem-0"
	for i := 1; shardOf(id) != 0; i++ {
		id = fmt.Sprintf("mem-%d", i)
	}
	submit(t, q, task(id, "shell"))
	serve(t, q, newCounter(nil), 2, shell)
	if got := wait(t, q, id); got.State != Succeeded {
		t.Fatalf("%s = %s, want succeeded", id, got.State)
	}
	memory := func(q *Queue) {
		t.Helper()
		ok := eventually(func() bool {
			for shard := range StateShards {
				c, err := q.shards[shard].js.Consumer(ctx, taskStreamName(shard), shell.consumerName())
				if err != nil || !c.CachedInfo().Config.MemoryStorage {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("the consumers of %s do not all keep their state in memory", shell)
		}
	}
	memory(q)
	// Restart with a task queued meanwhile.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, cfg)
	submit(t, q, task("mem-after", "shell"))
	serve(t, q, newCounter(nil), 2, shell)
	if got := wait(t, q, "mem-after"); got.State != Succeeded {
		t.Fatalf("mem-after = %s after a restart, want succeeded", got.State)
	}
	memory(q)
}

// TestExpectTypes: between ExpectTypes and SetTypes (loomd serve's API
// listens before the consumers exist) Served says this daemon serves the
// expected types; SetTypes settles them: a type it cannot serve (an
// invalid name) is then not served, one it serves still is.
func TestExpectTypes(t *testing.T) {
	q := open(t, testConfig(t))
	bad := Route{Family: "automator", Type: "bad type"}
	other := Route{Family: "automator", Type: "nobody"}
	q.ExpectTypes([]Route{shell, bad})
	for _, r := range []Route{shell, bad} {
		if ok, _ := q.Served(r); !ok {
			t.Errorf("%s expected: not served", r)
		}
	}
	if ok, _ := q.Served(other); ok {
		t.Errorf("%s not expected: served", other)
	}
	if err := q.SetTypes(context.Background(), []Route{shell, bad}); err == nil {
		t.Fatalf("SetTypes with %q: no error", bad.Type)
	}
	if ok, _ := q.Served(shell); !ok {
		t.Errorf("%s after SetTypes: not served", shell)
	}
	if ok, _ := q.Served(bad); ok {
		t.Errorf("%s after SetTypes refused it: still served", bad)
	}
}
