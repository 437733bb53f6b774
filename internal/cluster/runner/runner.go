package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/jsretry"
)

// Log is the job log a runner writes: a sink it can flush (so a
// follower that sees a job end has read its last lines).
type Log interface {
	joblog.Sink
	Flush(ctx context.Context) error
}

// Config configures a Runner.
type Config struct {
	// Store is the cluster state (the queue's LOOM_CLUSTERS bucket); JS
	// holds the job bucket beside it, with Replicas replicas.
	Store    *state.KVStore
	JS       jetstream.JetStream
	Replicas int
	// Retry waits out what a NATS cluster cannot do right now while New
	// creates the job bucket, until New's context ends (nil: tried once).
	Retry *jsretry.Waiter
	// Queue runs the jobs' tasks; Local, when set, those of the plugin
	// types this daemon serves, on its own workers (see Local).
	Queue Queue
	Local Local
	// Log is the job log; Secrets the per-cluster values it redacts.
	Log     Log
	Secrets *joblog.Secrets
	// Owner names this daemon (the queue's owner name); Host and PID say
	// where it runs.
	Owner string
	Host  string
	PID   int
	// Live reports whether another daemon is alive (it announced itself
	// lately); Trouble whether this daemon's broker calls failed lately,
	// when no silence proves anything. Both come from the queue.
	Live    func(owner string) bool
	Trouble func() bool
	// Lacking names the live daemons sharing the store that cannot read
	// the cluster state's journal (older loomd versions: their
	// announcements lack state.JournalCapability) and says whether this
	// daemon can tell now; it must answer from memory (it is asked at
	// every round of a job). While it names one, or cannot tell, the
	// jobs' rounds go to their keys (state.KVStore.SetJournalGate).
	// LackingSeen receives when such a daemon appears: the journals of
	// this daemon's jobs are folded into their records at once. Both come
	// from the queue; nil: every daemon reads the journal.
	Lacking     func() (daemons []string, sure bool)
	LackingSeen <-chan struct{}
	// LeaseTTL is a job lease's length (default 15 s); it is renewed
	// every third of it. A daemon that cannot renew for two thirds of it
	// stops its jobs before anyone may take them over.
	LeaseTTL time.Duration
	// Plugins and Resources are what jobs are planned with: the plugin
	// types a spec is checked against, the automator types' resource
	// files (nil: not checked, unknown).
	Plugins   func() *spec.Plugins
	Resources func() (*apply.Resources, error)
	// Logger gets the runner's lines; the executor's go there too.
	Logger *slog.Logger
	// Registerer, when set, gets the runner's metrics.
	Registerer prometheus.Registerer
}

// Runner runs cluster jobs in a daemon and takes over those of daemons
// that died.
type Runner struct {
	cfg     Config
	recs    *records
	log     *slog.Logger
	who     string
	metrics *metrics

	mu       sync.Mutex
	gated    bool              // rounds go to their keys (checkJournal's last look)
	owned    map[string]*owned // jobs this daemon runs, by cluster
	known    map[string]known  // every cluster's record, from the watch
	stopping bool
	wg       sync.WaitGroup // owned jobs' goroutines
	stopScan context.CancelFunc
	scanDone chan struct{}
}

type known struct {
	rec Record
	rev uint64
}

// New opens the job bucket. Start begins watching it.
func New(ctx context.Context, cfg Config) (*Runner, error) {
	if cfg.Store == nil || cfg.JS == nil || cfg.Queue == nil || cfg.Log == nil {
		return nil, errors.New("runner: Store, JS, Queue and Log are required")
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Live == nil {
		cfg.Live = func(string) bool { return false }
	}
	if cfg.Trouble == nil {
		cfg.Trouble = func() bool { return false }
	}
	if cfg.Secrets == nil {
		cfg.Secrets = &joblog.Secrets{}
	}
	recs, err := openRecords(ctx, cfg.JS, cfg.Replicas, cfg.Retry)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, recs: recs, log: cfg.Logger.With("component", "clusterjobs"), who: "loomd " + cfg.Owner,
		owned: map[string]*owned{}, known: map[string]known{}}
	r.metrics = newMetrics(cfg.Registerer, func() bool { _, on := r.journal(); return on })
	if cfg.Lacking != nil {
		cfg.Store.SetJournalGate(cfg.Lacking)
	}
	return r, nil
}

// SetLocal sets Config.Local (before Start: the runtime's task runner is
// made after the runner it reports cluster tasks to).
func (r *Runner) SetLocal(l Local) { r.cfg.Local = l }

// Start follows the job bucket and, every third of the lease, takes over
// the jobs whose daemon died; the first look is done before it returns,
// so a daemon restarted alone resumes its jobs at once.
func (r *Runner) Start(ctx context.Context) error {
	w, err := r.recs.kv.WatchAll(context.Background())
	if err != nil {
		return fmt.Errorf("watching kv bucket %s: %w", Bucket, err)
	}
	synced := make(chan struct{})
	sctx, stop := context.WithCancel(context.Background())
	r.stopScan = stop
	r.scanDone = make(chan struct{})
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		loops.Wait()
		close(r.scanDone)
	}()
	go func() {
		defer loops.Done()
		t := time.NewTicker(r.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-r.cfg.LackingSeen:
				r.checkJournal(true)
			case <-t.C:
				r.checkJournal(false)
			}
		}
	}()
	go func() {
		defer loops.Done()
		defer func() { _ = w.Stop() }()
		t := time.NewTicker(r.cfg.LeaseTTL / 3)
		defer t.Stop()
		initial := true
		for {
			select {
			case <-sctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if initial {
						initial = false
						r.scan()
						close(synced)
					}
					continue
				}
				r.observe(e)
			case <-t.C:
				if !initial {
					r.scan()
				}
			}
		}
	}()
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reading kv bucket %s: %w", Bucket, ctx.Err())
	}
}

// journal says whether the jobs' rounds go to the state journal now
// (Config.Lacking names nobody and is sure), and who cannot read it.
func (r *Runner) journal() (lacking []string, on bool) {
	if r.cfg.Lacking == nil {
		return nil, true
	}
	lacking, sure := r.cfg.Lacking()
	return lacking, sure && len(lacking) == 0
}

// checkJournal looks whether every live daemon reads the state journal
// (on an announcement of one that does not, seen, and every third of the
// lease) and says so when it changed. When one does not, it folds the
// journal of every job this daemon runs into its records: if that daemon
// takes a job over (this daemon dies), it reads complete records. Until
// it is gone the jobs' rounds go to their keys (the store's gate).
func (r *Runner) checkJournal(seen bool) {
	lacking, on := r.journal()
	r.mu.Lock()
	was := r.gated
	r.gated = !on
	jobs := make([]*owned, 0, len(r.owned))
	for _, o := range r.owned {
		jobs = append(jobs, o)
	}
	r.mu.Unlock()
	switch {
	case on && was:
		r.log.Info("every live loomd sharing the queue reads the cluster state's journal again: cluster jobs write their rounds to it")
		return
	case on || (was && !seen):
		return
	}
	who := strings.Join(lacking, ", ")
	if len(lacking) == 0 {
		who = "unknown"
		r.log.Info("this loomd cannot tell whether every live loomd sharing the queue reads the cluster state's journal (its own announcements came back late): cluster jobs write their state key by key meanwhile",
			"jobs_here", len(jobs))
	} else {
		r.log.Info("a loomd that cannot read the cluster state's journal announces itself (an older version): cluster jobs write their state key by key while it is live",
			"daemons", who, "jobs_here", len(jobs))
	}
	for _, o := range jobs {
		if !o.holds() {
			continue // the job's writes are fenced: not ours for sure
		}
		folded, err := r.cfg.Store.FoldJournal(o.cluster)
		switch {
		case err != nil:
			// The job's next round folds it (the gate is closed).
			o.warn("folding the job's state journal into its records failed; its next round does it", "daemons", who, "err", err)
		case folded:
			o.warn("a loomd that cannot read the state journal is live: the journal was folded into the records, and the job writes its state key by key while it is",
				"daemons", who)
		}
	}
}

// observe records one change of the bucket, and hands a cancel request to
// the job it names if this daemon runs it.
func (r *Runner) observe(e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		r.mu.Lock()
		delete(r.known, e.Key())
		r.mu.Unlock()
		return
	}
	rec, err := decode(e)
	if err != nil {
		r.log.Warn("ignoring an unreadable cluster job record", "err", err)
		return
	}
	r.mu.Lock()
	r.known[e.Key()] = known{rec: rec, rev: e.Revision()}
	o := r.owned[e.Key()]
	r.mu.Unlock()
	if rec.State == StateRunning && rec.Request.Spec != "" && !r.cfg.Secrets.Has(rec.Cluster, rec.ID) {
		// Plugin lines of the job's tasks may be written here (this
		// daemon runs some of its tasks): redact the spec's secrets too.
		r.cfg.Secrets.Set(rec.Cluster, rec.ID, Secrets(rec.Request, nil))
	}
	if o != nil && rec.Cancel != "" && rec.Owner == r.cfg.Owner {
		o.stop(fmt.Errorf("%w by %s", errCancel, rec.Cancel))
	}
}

// IsJob reports whether job is a step of a running cluster job (its tasks'
// log lines belong to the job log).
func (r *Runner) IsJob(cluster, job string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.known[cluster]
	if !ok {
		return false
	}
	for _, s := range k.rec.Steps {
		if s.Job == job {
			return true
		}
	}
	return false
}

// scan takes over every job whose daemon died.
func (r *Runner) scan() {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return
	}
	var cands []known
	for c, k := range r.known {
		if k.rec.State == StateRunning && r.owned[c] == nil {
			cands = append(cands, k)
		}
	}
	r.mu.Unlock()
	sort.Slice(cands, func(i, j int) bool { return cands[i].rec.Cluster < cands[j].rec.Cluster })
	for _, k := range cands {
		if why, dead := r.takeable(k.rec); why != "" {
			r.takeover(k, why, dead)
		}
	}
}

// takeable says why this daemon may take the job over ("" if it may
// not), and whether its owner died without handing it over.
func (r *Runner) takeable(rec Record) (why string, died bool) {
	switch {
	case rec.Owner == "":
		return "its daemon handed it over when it shut down", false
	case rec.Owner == r.cfg.Owner:
		return fmt.Sprintf("it is recorded as this daemon's (%s) but does not run here", rec.Owner), true
	case rec.Host != "" && rec.Host == r.cfg.Host && rec.PID > 0 && rec.PID != r.cfg.PID && !processAlive(rec.PID):
		return fmt.Sprintf("loomd %s (pid %d) is gone from this host", rec.Owner, rec.PID), true
	case time.Now().After(rec.Lease) && !r.cfg.Live(rec.Owner) && !r.cfg.Trouble():
		return fmt.Sprintf("loomd %s stopped renewing its lease (last at %s) and announcing itself", rec.Owner,
			rec.Renewed.UTC().Format(time.RFC3339)), true
	}
	return "", false
}

// takeover claims a job (a compare-and-set on the revision seen: of
// several daemons, one wins) and resumes it.
func (r *Runner) takeover(k known, why string, died bool) {
	now := time.Now()
	prev := k.rec
	next := prev.clone()
	next.Owner, next.Host, next.PID = r.cfg.Owner, r.cfg.Host, r.cfg.PID
	next.Lease, next.Renewed = now.Add(r.cfg.LeaseTTL), now
	next.Owners++
	var evs []state.Event
	if died {
		evs = append(evs, state.Event{Time: prev.Renewed, Kind: state.EventInterrupted, By: "loomd " + prev.Owner,
			Message: fmt.Sprintf("the daemon stopped without finishing the job (its last lease renewal was at %s)", prev.Renewed.UTC().Format(time.RFC3339))})
	}
	from := "loomd " + prev.Owner
	if prev.Owner == "" {
		from = "the daemon that shut down"
	}
	evs = append(evs, state.Event{Time: now, Kind: state.EventTakeover, By: r.who, Message: fmt.Sprintf("from %s: %s", from, why)})
	for _, ev := range evs {
		next.addEvent(ev)
	}
	rev, err := r.recs.put(context.Background(), next, k.rev)
	if err != nil {
		if !errors.Is(err, errConflict) {
			r.log.Warn("taking over a cluster job failed; trying again later", "cluster", prev.Cluster, "job", prev.ID, "err", err)
		}
		return
	}
	r.log.Warn("taking over a cluster job", "cluster", prev.Cluster, "job", prev.ID, "previous_owner", prev.Owner, "why", why)
	r.metrics.takeovers.Inc()
	if _, err := r.cfg.Store.Lock(prev.Cluster, r.holder(), r.cfg.LeaseTTL, lockOwner(prev.Owner)); err != nil {
		r.log.Warn("the cluster's state lock is held by someone else; running the job anyway (the job record is what counts)",
			"cluster", prev.Cluster, "err", err)
	}
	r.cfg.Log.Write(prev.Cluster, joblog.Entry{Time: now, Kind: joblog.KindJob, Job: prev.ID, Level: "WARN",
		Msg: fmt.Sprintf("job %s taken over by %s %s", prev.ID, r.who, evs[len(evs)-1].Message), Source: r.cfg.Owner,
		Attrs: []joblog.Attr{{K: "event", V: "takeover"}, {K: "owner", V: r.cfg.Owner}}})
	r.start(next, rev, evs)
}

// start runs a job this daemon now owns.
func (r *Runner) start(rec Record, rev uint64, first []state.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping || r.owned[rec.Cluster] != nil {
		return
	}
	o := newOwned(r, rec, rev, first)
	r.owned[rec.Cluster] = o
	r.metrics.running.Inc()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		o.run()
		r.mu.Lock()
		if r.owned[rec.Cluster] == o {
			delete(r.owned, rec.Cluster)
		}
		r.mu.Unlock()
		r.metrics.running.Dec()
	}()
}

// holder is this daemon as the cluster state's lock holder.
func (r *Runner) holder() state.Holder {
	return state.Holder{Owner: lockOwner(r.cfg.Owner), Host: r.cfg.Host, PID: r.cfg.PID}
}

// lockOwner is the owner name of a daemon in a cluster's state lock.
func lockOwner(owner string) string { return "loomd " + owner }

// Accepted is Submit's answer.
type Accepted struct {
	// Record is the job (nil when there is nothing to do).
	Record *Record
	// Attached is true when the same change was already running: the
	// caller follows that job.
	Attached bool
	// Cluster is the cluster's state when there is nothing to do.
	Cluster *state.Cluster
	// Change is what was planned (empty when there is nothing to do).
	Change *apply.Change
}

// BusyError is returned when the cluster runs another job.
type BusyError struct {
	Record *Record      // the job running, if a daemon runs it
	Holder state.Holder // else who holds the cluster's lock
}

func (e *BusyError) Error() string {
	if e.Record != nil {
		return fmt.Sprintf("cluster %s is running job %s (%s, submitted %s by %s, on loomd %s): wait for it ('loomd cluster watch %s'), or cancel it ('loomd cluster cancel %s')",
			e.Record.Cluster, e.Record.ID, e.Record.Request.Verb, e.Record.Submitted.UTC().Format(time.RFC3339), orUnknown(e.Record.Request.Requester),
			orUnknown(e.Record.Owner), e.Record.Cluster, e.Record.Cluster)
	}
	return fmt.Sprintf("cluster %s is locked by %s (%s pid %d, lease until %s): another loomd apply or import is at work; wait for it",
		"this cluster", e.Holder.Owner, e.Holder.Host, e.Holder.PID, e.Holder.Expires.UTC().Format(time.RFC3339))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// BadRequestError is a request the runner refuses as written: a bad spec,
// a change apply cannot make.
type BadRequestError struct{ Err error }

func (e *BadRequestError) Error() string { return e.Err.Error() }
func (e *BadRequestError) Unwrap() error { return e.Err }

// ErrStopping is returned by Submit while the daemon shuts down.
var ErrStopping = errors.New("this loomd is shutting down: submit the job to another daemon sharing the queue, or again once it is back")

// Env is what this daemon plans jobs with.
func (r *Runner) Env() (Env, error) {
	var env Env
	if r.cfg.Plugins != nil {
		env.Plugins = r.cfg.Plugins()
	}
	if r.cfg.Resources != nil {
		res, err := r.cfg.Resources()
		if err != nil {
			return env, err
		}
		env.Resources = res
	}
	return env, nil
}

// PlanJob plans a request against the cluster's state without running
// anything: what Submit would record.
func (r *Runner) PlanJob(ctx context.Context, cluster string, req Request) (*apply.Change, *state.Cluster, error) {
	if !validName(cluster) {
		return nil, nil, &BadRequestError{fmt.Errorf("cluster name %q: %w", cluster, state.ErrBadName)}
	}
	if err := req.Check(); err != nil {
		return nil, nil, &BadRequestError{err}
	}
	cl, err := r.cfg.Store.Get(cluster)
	if errors.Is(err, state.ErrNotFound) {
		cl, err = nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	env, err := r.Env()
	if err != nil {
		return nil, nil, err
	}
	if req.Refresh && cl != nil {
		sp, err := spec.ParseWith(req.SpecFile, []byte(req.Spec), spec.Options{Plugins: env.Plugins})
		if req.Spec == "" {
			sp, err = spec.Parse(cl.SpecFile, []byte(cl.Spec))
		}
		if err != nil {
			return nil, nil, &BadRequestError{err}
		}
		tasks := &queueTasks{q: r.cfg.Queue, timeout: time.Duration(req.TaskTimeoutMs) * time.Millisecond}
		if req.Drift, err = apply.Refresh(ctx, cl, sp, tasks, apply.RefreshOptions{Parallelism: req.Parallelism, Logger: r.log}); err != nil {
			return nil, nil, err
		}
	}
	ch, err := Plan(cl, req, env)
	var stale *StaleError
	if errors.As(err, &stale) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, &BadRequestError{err}
	}
	if ch.Cluster != "" && ch.Cluster != cluster {
		return nil, nil, &BadRequestError{fmt.Errorf("the spec is cluster %q's, not %q's", ch.Cluster, cluster)}
	}
	return ch, cl, nil
}

// Submit takes a job: it plans the change, records it as a job of the
// cluster's state (every step, before anything runs) and in the job
// bucket, and starts it. The same change already running is attached to;
// another one is a *BusyError; a request whose Expect no longer holds is
// a *StaleError.
func (r *Runner) Submit(ctx context.Context, cluster string, req Request) (Accepted, error) {
	if !validName(cluster) {
		return Accepted{}, &BadRequestError{fmt.Errorf("cluster name %q: %w", cluster, state.ErrBadName)}
	}
	if err := req.Check(); err != nil {
		return Accepted{}, &BadRequestError{err}
	}
	if req.Spec != "" {
		sp, err := spec.Parse(req.SpecFile, []byte(req.Spec))
		if err != nil {
			return Accepted{}, &BadRequestError{err}
		}
		if sp.Name != cluster {
			return Accepted{}, &BadRequestError{fmt.Errorf("the spec is cluster %q's, not %q's", sp.Name, cluster)}
		}
	}
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	if stopping {
		return Accepted{}, ErrStopping
	}
	cur, rev, err := r.recs.get(ctx, cluster)
	switch {
	case errors.Is(err, ErrNoJob):
		rev = 0
	case err != nil:
		return Accepted{}, err
	case cur.State == StateRunning && cur.Request.same(req):
		return Accepted{Record: &cur, Attached: true}, nil
	case cur.State == StateRunning:
		return Accepted{}, &BusyError{Record: &cur}
	}
	if _, err := r.cfg.Store.Lock(cluster, r.holder(), r.cfg.LeaseTTL, ""); err != nil {
		var le *state.LockedError
		if errors.As(err, &le) {
			return Accepted{}, &BusyError{Holder: le.Holder}
		}
		return Accepted{}, err
	}
	locked := true
	defer func() {
		if locked {
			_ = r.cfg.Store.Unlock(cluster, lockOwner(r.cfg.Owner))
		}
	}()
	ch, cl, err := r.PlanJob(ctx, cluster, req)
	if err != nil {
		return Accepted{}, err
	}
	if ch.Empty() && ch.Resume == nil {
		return Accepted{Cluster: cl, Change: ch}, nil
	}
	if req.Parallelism == 0 {
		req.Parallelism = 16
	}
	now := time.Now()
	isNew := cl == nil
	cl, job := apply.Begin(cl, ch, now)
	if isNew {
		cl.Tenant = req.Tenant // its tasks run as this tenant from now on
	}
	if err := r.cfg.Store.Put(cl); err != nil {
		return Accepted{}, fmt.Errorf("cluster %s: recording job %s: %w", cluster, job.ID, err)
	}
	rec := Record{ID: job.ID, Cluster: cluster, Request: req, Steps: StepsOf(job), State: StateRunning, Owner: r.cfg.Owner, Host: r.cfg.Host,
		PID: r.cfg.PID, Lease: now.Add(r.cfg.LeaseTTL), Renewed: now, Owners: 1, Submitted: now}
	rec.addEvent(state.Event{Time: now, Kind: state.EventStarted, By: r.who, Message: fmt.Sprintf("%s for %s", req.Verb, orUnknown(req.Requester))})
	nrev, err := r.recs.put(ctx, rec, rev)
	if errors.Is(err, errConflict) {
		if cur, _, gerr := r.recs.get(ctx, cluster); gerr == nil && cur.State == StateRunning {
			return Accepted{}, &BusyError{Record: &cur}
		}
		return Accepted{}, fmt.Errorf("cluster %s: another job was submitted at the same moment; try again", cluster)
	}
	if err != nil {
		return Accepted{}, err
	}
	locked = false // the job keeps it
	r.log.Info("cluster job submitted", "cluster", cluster, "job", job.ID, "verb", req.Verb, "steps", len(job.Steps), "tasks", job.TaskCount, "requester", req.Requester)
	r.start(rec, nrev, nil)
	return Accepted{Record: &rec, Change: ch}, nil
}

// Job returns a cluster's current or last job record.
func (r *Runner) Job(ctx context.Context, cluster string) (Record, error) {
	if !validName(cluster) {
		return Record{}, fmt.Errorf("cluster name %q: %w", cluster, state.ErrBadName)
	}
	rec, _, err := r.recs.get(ctx, cluster)
	return rec, err
}

// Liveness says whether a running job is being run: its owner's lease is
// current, or a daemon will take it over.
type Liveness struct {
	// Running is true when a daemon holds the job's lease now.
	Running bool `json:"running"`
	// Note says what is going on when it is not ("loomd X stopped
	// renewing its lease at T; another daemon sharing the queue takes
	// the job over").
	Note string `json:"note,omitempty"`
}

// Liveness of a record.
func (r *Runner) Liveness(rec Record) Liveness {
	if rec.Done() {
		return Liveness{}
	}
	switch {
	case rec.Owner == "":
		return Liveness{Note: "released by its daemon at shutdown: the next loomd sharing the queue to look resumes it"}
	case time.Now().Before(rec.Lease):
		return Liveness{Running: true}
	default:
		return Liveness{Note: fmt.Sprintf("loomd %s stopped renewing its lease at %s: a loomd sharing the queue takes the job over once it is silent (start one if none runs)",
			rec.Owner, rec.Renewed.UTC().Format(time.RFC3339))}
	}
}

// Cancel asks the job's owner to stop it (the running tasks' outcomes are
// kept; the next apply resumes the job). A job nobody runs is marked
// cancelled at once.
func (r *Runner) Cancel(ctx context.Context, cluster, who string) (Record, error) {
	for range 5 {
		rec, rev, err := r.recs.get(ctx, cluster)
		if err != nil {
			return Record{}, err
		}
		if rec.Done() {
			return rec, fmt.Errorf("job %s of cluster %s is not running: it ended %s", rec.ID, cluster, rec.State)
		}
		next := rec.clone()
		next.Cancel = who
		if !r.Liveness(rec).Running && rec.Owner != r.cfg.Owner {
			next.State, next.Ended = StateCancelled, time.Now()
			next.Message = fmt.Sprintf("cancelled by %s while no daemon ran it", who)
		}
		if _, err := r.recs.put(ctx, next, rev); errors.Is(err, errConflict) {
			continue
		} else if err != nil {
			return Record{}, err
		}
		if next.Done() {
			_ = r.cfg.Store.Unlock(cluster, lockOwner(rec.Owner))
		}
		r.mu.Lock()
		o := r.owned[cluster]
		r.mu.Unlock()
		if o != nil {
			o.stop(fmt.Errorf("%w by %s", errCancel, who))
		}
		return next, nil
	}
	return Record{}, fmt.Errorf("cluster %s: its job record keeps changing; try again", cluster)
}

// Forget removes a cluster's job record (the cluster was forgotten).
func (r *Runner) Forget(ctx context.Context, cluster string) error {
	rec, _, err := r.recs.get(ctx, cluster)
	if errors.Is(err, ErrNoJob) {
		return nil
	}
	if err != nil {
		return err
	}
	if !rec.Done() {
		return &BusyError{Record: &rec}
	}
	return r.recs.delete(ctx, cluster)
}

// Stop hands this daemon's jobs over: each is interrupted (its running
// tasks keep their outcomes), recorded as such, and released so another
// daemon resumes it at once. It returns when they are, or ctx ends.
func (r *Runner) Stop(ctx context.Context) {
	r.mu.Lock()
	r.stopping = true
	jobs := make([]*owned, 0, len(r.owned))
	for _, o := range r.owned {
		jobs = append(jobs, o)
	}
	r.mu.Unlock()
	if r.stopScan != nil {
		r.stopScan()
		<-r.scanDone
	}
	for _, o := range jobs {
		o.stop(fmt.Errorf("%w: loomd %s is shutting down", errShutdown, r.cfg.Owner))
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Warn("cluster jobs did not stop in time; their leases run out and another daemon takes them over")
	}
}

// Secrets are the values a job's log must never show: the secret-looking
// provider fields of the request's spec, and of the spec the cluster was
// last applied with.
func Secrets(req Request, cl *state.Cluster) *redact.Set {
	set := redact.New()
	addSecrets(set, req.Spec)
	if cl != nil {
		addSecrets(set, cl.Spec)
	}
	return set
}

// addSecrets adds the values of the spec's provider fields whose names
// look secret.
func addSecrets(set *redact.Set, specText string) {
	if specText == "" {
		return
	}
	sp, err := spec.Parse("", []byte(specText))
	if err != nil {
		return
	}
	var walk func(k string, v any)
	walk = func(k string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for kk, vv := range x {
				walk(kk, vv)
			}
		case string:
			lk := strings.ToLower(k)
			if strings.Contains(lk, "password") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") ||
				lk == "key" || strings.HasSuffix(lk, "_key") || strings.HasSuffix(lk, "-key") || strings.Contains(lk, "credential") {
				set.Add(x)
			}
		}
	}
	for k, v := range sp.Provider.Fields {
		walk(k, v)
	}
}

// validName is state's rule for cluster names.
func validName(name string) bool {
	if name == "" || len(name) > 32 || name[0] == '-' || name[len(name)-1] == '-' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// processAlive says whether a process of this host exists.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Owner is the default owner name of this process ("<host>-<pid>", as the
// queue's).
func Owner() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}
