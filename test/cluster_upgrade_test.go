package test

// Mixed versions of loomd sharing a queue (a rolling upgrade): a daemon
// writes a cluster job's rounds to the state journal only while every
// live daemon announces that it reads it. An older loomd announces its
// plugin types without "caps": the test plays one by writing such an
// announcement into LOOM_SERVED through the daemon's NATS.

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// storeView reads a daemon's cluster state bucket and announcements
// directly, as another daemon sharing its NATS would.
type storeView struct {
	t      *testing.T
	state  jetstream.KeyValue
	served jetstream.KeyValue
}

// connectNATS connects to the NATS at urls (comma-separated) for the
// test's life.
func connectNATS(t *testing.T, urls string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// openStoreView opens the buckets of d's store on nc once d made them
// (the cluster state's is made after the API answers).
func openStoreView(t *testing.T, d *daemon, nc *nats.Conn) *storeView {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	v := &storeView{t: t}
	d.waitFor("buckets LOOM_CLUSTERS and LOOM_SERVED", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if v.state == nil {
			v.state, _ = js.KeyValue(ctx, "LOOM_CLUSTERS")
		}
		if v.served == nil {
			v.served, _ = js.KeyValue(ctx, "LOOM_SERVED")
		}
		return v.state != nil && v.served != nil
	})
	return v
}

// roundWatch counts the journal rounds of cluster shop written while it
// runs. A watch does not outlive the NATS server (the daemon's, killed):
// start one after.
type roundWatch struct {
	w       jetstream.KeyWatcher
	mu      sync.Mutex
	written int
}

func (v *storeView) watchRounds() *roundWatch {
	v.t.Helper()
	w, err := v.state.Watch(context.Background(), "shop.r.>", jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		v.t.Fatal(err)
	}
	r := &roundWatch{w: w}
	v.t.Cleanup(func() { _ = w.Stop() })
	go func() {
		for e := range w.Updates() {
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				r.mu.Lock()
				r.written++
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func (r *roundWatch) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.written
}

// waitFolded waits until cluster shop's state holds no journal round.
func (v *storeView) waitFolded(d *daemon) {
	v.t.Helper()
	d.waitFor("the journal folded into the records", func() bool { n, _ := v.records(""); return n == 0 })
}

// records reads cluster shop's keys: the journal rounds it holds, and
// the finished tasks of job as its task records say (all a loomd older
// than the journal reads).
func (v *storeView) records(job string) (rounds int, done map[string]bool) {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := v.state.Watch(ctx, "shop.>", jetstream.IgnoreDeletes())
	if err != nil {
		v.t.Fatal(err)
	}
	defer w.Stop()
	done = map[string]bool{}
	for e := range w.Updates() {
		if e == nil {
			return rounds, done
		}
		switch k := e.Key(); {
		case strings.HasPrefix(k, "shop.r."):
			rounds++
		case strings.HasPrefix(k, "shop.t."+job+"."):
			var rec struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(e.Value(), &rec) == nil && rec.Status == "done" {
				done[strings.TrimPrefix(k, "shop.t."+job+".")] = true
			}
		}
	}
	v.t.Fatal("reading the state bucket: the watch ended early")
	return 0, nil
}

// announced is what each daemon announces with its plugin types: its
// capabilities and version.
type announced struct {
	Caps    []string `json:"caps"`
	Version string   `json:"version"`
}

// caps returns the announcements of LOOM_SERVED by daemon.
func (v *storeView) caps() map[string]announced {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := v.served.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		v.t.Fatal(err)
	}
	defer w.Stop()
	out := map[string]announced{}
	for e := range w.Updates() {
		if e == nil {
			return out
		}
		var a struct {
			announced
			Owner string `json:"owner"`
		}
		if json.Unmarshal(e.Value(), &a) == nil {
			out[a.Owner] = a.announced
		}
	}
	return out
}

// olderDaemon announces plugin type automator/shell the way a loomd older
// than the journal does (no caps), every second, until the returned stop
// (which withdraws it, as its graceful shutdown would).
func (v *storeView) olderDaemon() (stop func()) {
	v.t.Helper()
	key := "automator.shell.older-loomd"
	put := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := v.served.Put(ctx, key, []byte(`{"family":"automator","type":"shell","owner":"older-loomd","at":"`+time.Now().UTC().Format(time.RFC3339Nano)+`"}`))
		return err
	}
	if err := put(); err != nil {
		v.t.Fatal(err)
	}
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = put()
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			<-exited
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := v.served.Delete(ctx, key); err != nil {
				v.t.Errorf("withdrawing the older daemon's announcement: %v", err)
			}
		})
	}
	v.t.Cleanup(stop)
	return stop
}

// logCount is how many lines of the daemon's log have a message that
// contains msg.
func (d *daemon) logCount(msg string) int {
	n := 0
	for _, l := range d.logLines() {
		if s, _ := l["msg"].(string); strings.Contains(s, msg) {
			n++
		}
	}
	return n
}

// metric reports whether the daemon's /metrics has the line.
func (d *daemon) metric(line string) bool {
	code, body := d.call("GET", "/metrics", "")
	return code == 200 && slices.Contains(strings.Split(string(body), "\n"), line)
}

// seesOlder is the daemon log's line when a daemon without the
// cluster-journal capability announces itself.
const seesOlder = "a loomd that cannot read the cluster state's journal announces itself"

// TestClusterMixedVersions: a daemon announces the cluster-journal
// capability with its plugin types. A create runs with every daemon new:
// its rounds go to the journal. An older loomd announces itself mid-job:
// the daemon folds the journal into the records at once (no round left;
// the task records alone, all an older loomd reads, hold every task that
// had finished). The daemon is killed -9 and restarted (it takes the job
// over) while the older one is live: the job ends without writing a
// round, and no finished task ran again. The older daemon leaves: the
// next job's rounds go to the journal again.
func TestClusterMixedVersions(t *testing.T) {
	e := newClusterEnv(t, 3)
	e.writeSpec(2, "hello")
	e.hold("START db")
	args := []string{"--tenant", clTenant, "--ack-wait", "2s", "--known-hosts", e.known}
	d := startDaemon(t, e.dir, "serve1.log", nil, append(args, "--nats-listen", "127.0.0.1:0")...)
	// Its successor listens where it did, so that the test's connection
	// comes back.
	natsURL := d.natsURL()
	args = append(args, "--nats-listen", strings.TrimPrefix(natsURL, "nats://"))
	e.server = d.url()
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(e.dir, "data", "nats.nk"))
	if err != nil {
		t.Fatal(err)
	}
	v := openStoreView(t, d, connectNATS(t, natsURL, opt))
	var own announced
	d.waitFor("the daemon's announcement", func() bool {
		for _, a := range v.caps() {
			own = a
			return true
		}
		return false
	})
	if !slices.Contains(own.Caps, "cluster-journal") || own.Version == "" {
		t.Fatalf("the daemon announces %+v; want the cluster-journal capability and its version", own)
	}
	create := e.plan()

	first := v.watchRounds()
	apply := e.start("apply", e.spec, "--log-format", "json")
	e.waitEffect("START db", apply)
	rounds, _ := v.records("shop-001")
	if rounds == 0 || first.count() == 0 {
		t.Fatalf("with every daemon new, the create's rounds did not go to the journal (%d held, %d written)", rounds, first.count())
	}
	doneBefore := e.doneTasks(create, 0, "shop-001") // as the daemon reads it: rounds replayed
	if len(doneBefore) < 5 {
		t.Fatalf("only %d service tasks done before START db: %v", len(doneBefore), doneBefore)
	}
	var doneIdx []string // their task indexes
	st := e.readState()
	for i, x := range st.Jobs[0].Tasks {
		if x.Status == "done" {
			doneIdx = append(doneIdx, i)
		}
	}

	stopOlder := v.olderDaemon()
	var records map[string]bool
	d.waitFor("the journal folded once an older daemon appeared", func() bool {
		rounds, records = v.records("shop-001")
		return rounds == 0
	})
	d.waitFor("the daemon's log line about the older daemon", func() bool { return d.logCount(seesOlder) > 0 })
	if !d.metric("loom_cluster_state_journal 0") {
		t.Error("/metrics does not say loom_cluster_state_journal 0 while an older daemon is live")
	}
	for _, i := range doneIdx {
		if !records[i] {
			t.Errorf("task %s had finished before the older daemon appeared; its record does not say so", i)
		}
	}
	written := first.count()

	// The daemon dies; its successor takes the job over while the older
	// daemon is live, and finishes it key by key (START db is held until
	// the rounds are watched again).
	d.kill9()
	if n := first.count() - written; n > 0 {
		t.Errorf("%d rounds went to the journal after the fold", n)
	}
	d = startDaemon(t, e.dir, "serve2.log", nil, append(args, "--listen", strings.TrimPrefix(d.url(), "http://"))...)
	// The test's connection is back once it can watch again.
	var after *roundWatch
	d.waitFor("the test's NATS connection back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := v.state.Status(ctx)
		return err == nil
	})
	after = v.watchRounds()
	e.gate()
	if code := apply.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("apply across the daemon's death: exit %d\n%s\n%s", code, apply.stdout.String(), apply.stderr.String())
	}
	if !strings.Contains(apply.stdout.String(), "Cluster shop: active (job shop-001, apply: complete") {
		t.Errorf("apply:\n%s\n%s", apply.stdout.String(), apply.stderr.String())
	}
	if n := after.count(); n > 0 {
		t.Errorf("%d rounds went to the journal while an older daemon was live", n)
	}
	fx := e.effects()
	e.checkOrder(create, fx, func(k string) bool { return !doneBefore[k] })
	e.onceEach(fx, doneBefore)

	// The older daemon leaves: the journal is used again.
	stopOlder()
	e.writeSpec(2, "hi")
	e.loomd(0, "apply", e.spec)
	d.waitFor("a round of the reconfigure in the journal, the older daemon gone", func() bool { return after.count() > 0 })
	d.waitFor("the daemon saying the journal is used again", func() bool {
		return d.logCount("reads the cluster state's journal again") > 0 && d.metric("loom_cluster_state_journal 1")
	})
	if rounds, _ := v.records("shop-002"); rounds != 0 {
		t.Errorf("the reconfigure ended leaving %d rounds", rounds)
	}
}
