package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomrt/loom/internal/jsretry"
	"github.com/loomrt/loom/runtime"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Runner runs one task. It returns the Coopr result JSON and its status; a
// non-zero status is the plugin's own, final failure. An error means the
// task could not be run (an infrastructure failure, such as a lost VM):
// the queue retries it on any daemon, up to Config.MaxAttempts.
type Runner interface {
	Run(ctx context.Context, task []byte) (result []byte, status int, err error)
}

// ErrWorkerCrashed is wrapped by a Runner error when the task's run killed
// the worker process running it (out of memory, a fatal runtime error, a
// signal). The queue counts such deaths per task in Record.Crashes and
// fails the task with error kind "crash" after Config.MaxCrashes of them,
// instead of retrying a poison task forever.
var ErrWorkerCrashed = errors.New("worker crashed")

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, task []byte) ([]byte, int, error)

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, task []byte) ([]byte, int, error) { return f(ctx, task) }

// workers tracks the routes this process serves and which of them may
// have work, so idle slots pull only from consumers with messages. A
// route has one consumer per shard of the task stream; the round robin
// goes over (route, shard) pairs.
type workers struct {
	mu      sync.Mutex
	setMu   sync.Mutex              // serialises SetTypes
	routes  map[Route][]*routeState // by shard
	ready   []*routeState           // round robin of routes that may have messages
	wake    chan struct{}
	stopped bool

	// The consumers of shards 1.. are created in the background after
	// SetTypes returned (fillShards): a daemon with many plugin types
	// answers sooner, and their tasks wait in their streams meanwhile.
	fillCtx  context.Context
	fillStop context.CancelFunc
	fillWG   sync.WaitGroup
	fillHold chan struct{}  // HoldShardFill's: the fill waits until it is closed
	expected map[Route]bool // ExpectTypes': served, says Served, until SetTypes settles them

	looking [StateShards]atomic.Bool // a shard's look (lookShard) runs: one at a time per shard
}

type routeState struct {
	route Route
	shard int // of the task stream
	cons  jetstream.Consumer
	sub   *nats.Subscription // wakes us when a task is published
	ready bool
	hot   int    // publishes seen since the last fetch: messages that may not be stored yet
	gen   uint64 // bumped on every wake-up, so a stale "empty" does not hide new work
	gone  bool

	recreating bool      // a slot is creating the consumer again
	warned     time.Time // last "recreating consumer failed" line
}

func (w *workers) init() {
	w.routes = map[Route][]*routeState{}
	w.wake = make(chan struct{}, 1)
	w.fillCtx, w.fillStop = context.WithCancel(context.Background())
}

// published marks a route ready because a task was just published on it.
func (w *workers) published(rs *routeState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs.hot++
	w.markReadyLocked(rs)
}

func (w *workers) markReadyLocked(rs *routeState) {
	if rs.gone {
		return
	}
	rs.gen++
	if !rs.ready {
		rs.ready = true
		w.ready = append(w.ready, rs)
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *workers) markAllReady() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, parts := range w.routes {
		for _, rs := range parts {
			w.markReadyLocked(rs)
		}
	}
}

// next pops the next route that may have work. hot counts the publishes
// that woke it, so the fetch should wait a moment for that many messages
// to be stored.
func (w *workers) next() (rs *routeState, gen uint64, hot int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.ready) > 0 {
		rs := w.ready[0]
		w.ready = w.ready[1:]
		rs.ready = false
		hot := rs.hot
		rs.hot = 0
		if !rs.gone {
			return rs, rs.gen, hot
		}
	}
	return nil, 0, 0
}

// fetched puts a route back at the end of the round robin when it may
// hold more (more), or something woke it since the fetch began.
func (w *workers) fetched(rs *routeState, gen uint64, more bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rs.gone || rs.ready {
		return
	}
	if more || rs.gen != gen {
		rs.ready = true
		w.ready = append(w.ready, rs)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *workers) stop() {
	w.fillStop()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, parts := range w.routes {
		for _, rs := range parts {
			if rs.sub != nil {
				_ = rs.sub.Unsubscribe()
			}
		}
	}
}

// SetTypes sets the plugin types this process serves: it creates (or
// updates) the durable consumer of every new type and stops pulling from
// types that went away. The consumers themselves stay, since other daemons
// may share them, and tasks for a type nobody serves wait in the stream.
// Types whose consumer cannot be set up are reported in the error and left
// out; call SetTypes again to retry them.
//
// SetTypes returns once each new type's consumer in the first shard of the
// task stream exists (what the NATS cluster cannot do right now is waited
// out until ctx ends, see Config.Retry); those of the other shards are created in the
// background right after (retried until they exist or the queue closes).
// Their tasks wait in their streams until then, and submitting needs no
// consumer, so nothing is lost: a task of shards 1.. of a type added just
// now starts a second or two later, at a daemon's start.
func (q *Queue) SetTypes(ctx context.Context, routes []Route) error {
	q.w.setMu.Lock()
	defer q.w.setMu.Unlock()
	want := map[Route]bool{}
	var errs []error
	for _, r := range routes {
		if err := r.validate(); err != nil {
			errs = append(errs, fmt.Errorf("cannot serve %s: %w", r, err))
			continue
		}
		want[r] = true
	}
	q.w.mu.Lock()
	var add []Route
	for r := range want {
		if _, ok := q.w.routes[r]; !ok {
			add = append(add, r)
		}
	}
	for r, parts := range q.w.routes {
		if !want[r] {
			for _, rs := range parts {
				rs.gone = true
				if rs.sub != nil {
					_ = rs.sub.Unsubscribe()
				}
			}
			delete(q.w.routes, r)
			q.w.ready = slices.DeleteFunc(q.w.ready, func(x *routeState) bool { return x.route == r })
			q.log.Info("stopped serving plugin type", "family", r.Family, "type", r.Type)
		}
	}
	q.w.mu.Unlock()
	slices.SortFunc(add, func(a, b Route) int { return cmpRoute(a, b) })
	// Consumers are created a few routes at a time: each creation is a
	// round trip and a write, and a daemon with many plugin types would
	// otherwise start slowly.
	added := make([][]*routeState, len(add))
	addErrs := make([]error, len(add))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, r := range add {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			added[i], addErrs[i] = q.addRoute(ctx, r, []int{0}, q.cfg.Retry)
		}()
	}
	wg.Wait()
	served := 0
	for i, r := range add {
		if addErrs[i] != nil {
			errs = append(errs, addErrs[i])
			continue
		}
		served++
		q.w.mu.Lock()
		q.w.routes[r] = added[i]
		for _, rs := range added[i] {
			q.w.markReadyLocked(rs)
		}
		q.w.mu.Unlock()
		q.log.Info("serving plugin type", "family", r.Family, "type", r.Type, "consumer", r.consumerName())
	}
	q.w.mu.Lock()
	q.w.expected = nil
	q.w.mu.Unlock()
	q.announceTypes()
	if served > 0 && StateShards > 1 {
		q.startFill()
	}
	return errors.Join(errs...)
}

// ExpectTypes makes Served report routes as served by this daemon until
// the next SetTypes settles them (those it could not serve are then
// not). loomd serve starts its API before the first shard's consumers
// are created (50 creations with 50 plugin types, a tenth of a start's
// CPU, which no submit needs: tasks wait in their streams), and a submit
// in between must not be told that nobody serves its type.
func (q *Queue) ExpectTypes(routes []Route) {
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	q.w.expected = make(map[Route]bool, len(routes))
	for _, r := range routes {
		q.w.expected[r] = true
	}
}

// startFill starts fillShards in the background unless the queue stopped.
func (q *Queue) startFill() {
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	if q.w.stopped {
		return
	}
	q.w.fillWG.Add(1)
	go func() {
		defer q.w.fillWG.Done()
		q.fillShards(q.w.fillCtx)
	}()
}

// HoldShardFill keeps the consumers of shards 1.. of the types given to
// SetTypes from being created (in the background) until release is
// called. loomd serve holds them until its API listens: at a start with
// 50 plugin types they were 150 creations, a sixth of the start's CPU,
// while nothing needs them yet (their tasks wait in their streams).
func (q *Queue) HoldShardFill() (release func()) {
	hold := make(chan struct{})
	q.w.mu.Lock()
	q.w.fillHold = hold
	q.w.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(hold) }) }
}

// fillShards creates the consumers of the shards the served routes do not
// have yet (SetTypes creates the first shard's only), retrying with a
// backoff until all exist or ctx ends (the queue closes).
func (q *Queue) fillShards(ctx context.Context) {
	q.w.mu.Lock()
	hold := q.w.fillHold
	q.w.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return
		}
	}
	start := time.Now()
	for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
		n, err := q.fillOnce(ctx)
		if err == nil {
			if n > 0 {
				q.log.Info("consumers of the other task stream shards ready", "consumers", n, "took", time.Since(start).Round(time.Millisecond))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		q.log.Warn("creating consumers of the task stream shards failed; their tasks wait in their streams, retrying", "retry_in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// fillOnce creates the missing shard consumers of every served route once
// and returns how many it added.
func (q *Queue) fillOnce(ctx context.Context) (int, error) {
	q.w.setMu.Lock() // SetTypes does not change the routes meanwhile
	defer q.w.setMu.Unlock()
	type job struct {
		r       Route
		missing []int
	}
	var jobs []job
	q.w.mu.Lock()
	for r, parts := range q.w.routes {
		have := make([]bool, StateShards)
		for _, rs := range parts {
			have[rs.shard] = true
		}
		var missing []int
		for shard, ok := range have {
			if !ok {
				missing = append(missing, shard)
			}
		}
		if len(missing) > 0 {
			jobs = append(jobs, job{r, missing})
		}
	}
	q.w.mu.Unlock()
	slices.SortFunc(jobs, func(a, b job) int { return cmpRoute(a.r, b.r) })
	added := make([][]*routeState, len(jobs))
	errs := make([]error, len(jobs))
	// One route (its shards in parallel) at a time: the server handles
	// JetStream API requests in turn, and a deeper queue of creations
	// would hold up the health check's and the API's own requests.
	sem := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			added[i], errs[i] = q.addRoute(ctx, j.r, j.missing, nil) // fillShards retries
		}()
	}
	wg.Wait()
	n := 0
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	for i, j := range jobs {
		if errs[i] != nil {
			continue
		}
		if _, ok := q.w.routes[j.r]; !ok || q.w.stopped {
			for _, rs := range added[i] {
				_ = rs.sub.Unsubscribe()
			}
			continue
		}
		q.w.routes[j.r] = append(q.w.routes[j.r], added[i]...)
		for _, rs := range added[i] {
			q.w.markReadyLocked(rs)
		}
		n += len(added[i])
	}
	return n, errors.Join(errs...)
}

func cmpRoute(a, b Route) int {
	if a.Family != b.Family {
		if a.Family < b.Family {
			return -1
		}
		return 1
	}
	switch {
	case a.Type < b.Type:
		return -1
	case a.Type > b.Type:
		return 1
	}
	return 0
}

// Types returns the routes this process serves, sorted.
func (q *Queue) Types() []Route {
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	out := make([]Route, 0, len(q.w.routes))
	for r := range q.w.routes {
		out = append(out, r)
	}
	slices.SortFunc(out, cmpRoute)
	return out
}

// consumerConfig is the durable consumer of a route in a shard of the
// task stream: the same name in every shard's stream.
func (q *Queue) consumerConfig(r Route, shard int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.consumerName(),
		Description:   "loomd workers for " + r.String(),
		FilterSubject: r.subjectIn(shard),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       q.cfg.AckWait,
		// Deliveries are not counted: a delivery whose claim could not be
		// written (a full store, a broker failover) must not use up the
		// task's tries. The record's attempt count, written at each claim,
		// is what gives up (MaxAttempts, MaxCrashes).
		MaxDeliver: -1,
		// A single server keeps the consumer's state (what it delivered,
		// what was acked) in memory: on a file store with fsync on every
		// write, each ack otherwise rewrote a state file with O_SYNC and a
		// rename, up to ten times a second per consumer: 14% of the
		// daemon's CPU at 280 tasks/s over 200 consumers. Nothing durable
		// lives there: an ack removes the message from the work-queue
		// stream (an fsynced write), and the record counts attempts. A
		// restarted server's consumer starts again from the stream's first
		// message, so a task delivered but not acked before the restart is
		// delivered again at once (not after AckWait), and its claim sees
		// the record. Replicated consumers keep their file state: there the
		// raft log makes it durable without an fsync per write.
		MemoryStorage: q.cfg.Replicas <= 1,
	}
}

// createConsumer creates (or updates) a route's consumer in a shard. A
// consumer from an earlier loomd kept its state in a file, and a
// consumer's storage cannot change: it is deleted and created again.
// Nothing is lost: its tasks stay in the stream and are delivered again,
// and a task running meanwhile is fenced by its record (the claim waits
// for its owner, then drops the duplicate).
//
// retry, when not nil, waits out what the NATS cluster cannot do right now
// (a server offline: the consumer of a replicated stream is not placed in
// time) until ctx ends.
func (q *Queue) createConsumer(ctx context.Context, r Route, shard int, retry *jsretry.Waiter) (cons jetstream.Consumer, err error) {
	js, stream, cfg := q.shards[shard].js, taskStreamName(shard), q.consumerConfig(r, shard)
	what := jsretry.What("consumer "+cfg.Durable+" on stream", stream, q.cfg.Replicas)
	create := func(ctx context.Context) (err error) {
		cons, err = js.CreateOrUpdateConsumer(ctx, stream, cfg)
		return err
	}
	err = retry.Do(ctx, what, create)
	if err == nil || !strings.Contains(err.Error(), "storage type can not be updated") {
		return cons, err
	}
	if derr := retry.Do(ctx, what, func(ctx context.Context) error {
		if err := js.DeleteConsumer(ctx, stream, cfg.Durable); !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return err
		}
		return nil
	}); derr != nil {
		return nil, fmt.Errorf("%w; deleting it to create it with this loomd's storage failed: %v", err, derr)
	}
	q.log.Info("created a plugin type's consumer again with in-memory state (an earlier loomd kept it in a file)", "type", r.String(), "stream", stream)
	err = retry.Do(ctx, what, create)
	return cons, err
}

// addRoute sets up a route's consumer in the given shards of the task
// stream (the shards' streams in parallel).
func (q *Queue) addRoute(ctx context.Context, r Route, shards []int, retry *jsretry.Waiter) ([]*routeState, error) {
	parts := make([]*routeState, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, shard := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cons, err := q.createConsumer(ctx, r, shard, retry)
			if err != nil {
				hint := " (another loomd with a different --ack-wait or --max-attempts may own it)"
				if jsretry.Transient(err) {
					hint = ""
				}
				errs[i] = fmt.Errorf("creating consumer %s on stream %s for plugin type %s: %w%s", r.consumerName(), taskStreamName(shard), r, err, hint)
				return
			}
			rs := &routeState{route: r, shard: shard, cons: cons}
			if rs.sub, err = q.nc.Subscribe(r.subjectIn(shard), func(*nats.Msg) { q.w.published(rs) }); err != nil {
				errs[i] = fmt.Errorf("subscribing to %s: %w", r.subjectIn(shard), err)
				return
			}
			parts[i] = rs
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, rs := range parts {
			if rs != nil {
				_ = rs.sub.Unsubscribe()
			}
		}
		return nil, err
	}
	return parts, nil
}

// Serve runs tasks with runner, at most concurrency at a time, pulling a
// task only when a slot is free. It serves the types given to SetTypes
// (which may change while it runs). When ctx ends, Serve stops pulling,
// waits for the tasks in flight to finish, and returns nil; AbortRunning
// cancels them.
func (q *Queue) Serve(ctx context.Context, runner Runner, concurrency int) error {
	if concurrency < 1 {
		return fmt.Errorf("concurrency %d: must be at least 1", concurrency)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if q.serving {
		q.mu.Unlock()
		return errors.New("the queue is already serving: call Serve once per queue")
	}
	q.serving = true
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.serving = false
		q.mu.Unlock()
	}()

	adv, err := q.nc.Subscribe(maxDeliveriesAdvisory, func(m *nats.Msg) { go q.handleMaxDeliveries(m.Data) })
	if err != nil {
		return fmt.Errorf("subscribing to max-delivery advisories: %w", err)
	}
	defer func() { _ = adv.Unsubscribe() }()

	rctx, stopReconcile := context.WithCancel(ctx)
	defer stopReconcile()
	go q.reconcileLoop(rctx, q.cfg.ReconcileInterval)

	slots := make(chan struct{}, concurrency)
	// A task's outcome is recorded and acked after its slot is freed, by
	// at most this many finishers; when they fall behind, slots wait.
	finishers := make(chan struct{}, 4*concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	ticker := time.NewTicker(q.cfg.PollInterval)
	defer ticker.Stop()
	q.w.markAllReady()
	var lastErr atomic.Int64
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		rs, gen, hot := q.w.next()
		for rs == nil {
			select {
			case <-ctx.Done():
				<-slots
				return nil
			case <-q.w.wake:
			case <-ticker.C:
				q.poll(ctx, &wg)
			}
			rs, gen, hot = q.w.next()
		}
		// The slot is ours: fetch and run in their own goroutine, so slow
		// fetches and tasks never hold up others.
		wg.Add(1)
		go func() {
			defer wg.Done()
			owned := 1 // slots this goroutine holds and has not handed to a task
			defer func() {
				for range owned {
					<-slots
				}
			}()
			if q.storeBroken() {
				// The embedded store refuses every write until it is
				// restarted: leave the tasks queued until then. (At a
				// mere size limit claims go on: finishing tasks frees
				// room, and a claim that cannot be written costs the
				// task nothing.)
				q.w.fetched(rs, gen, false)
				select {
				case <-ctx.Done():
				case <-time.After(q.cfg.StoreCheckInterval):
				}
				return
			}
			// One fetch asks for as many tasks as there are free slots
			// (and, when publishes woke the route, as were published), so
			// a busy route costs one pull per batch rather than per task.
			want := concurrency
			if hot > 0 {
				want = hot
			}
		grab:
			for owned < want {
				select {
				case slots <- struct{}{}:
					owned++
				default:
					break grab
				}
			}
			q.w.mu.Lock()
			cons := rs.cons
			q.w.mu.Unlock()
			got := 0
			var pending uint64 // the consumer's undelivered messages after the last one fetched
			err := fetch(cons, owned, hot > 0, func(msg jetstream.Msg) {
				got++
				pending = 1 // unknown: look again
				if meta, err := msg.Metadata(); err == nil {
					pending = meta.NumPending
				}
				owned-- // the task's goroutine frees this slot
				wg.Add(1)
				go func() {
					defer wg.Done()
					q.runTask(runner, rs.route, msg, slots, finishers)
				}()
			})
			// Look again at once only when the route may hold more: the
			// consumer said so, or publishes that woke this fetch did not
			// come in it (not stored yet). A fetch that took the last
			// message needs no empty fetch after it (that was every other
			// fetch): a new publish wakes the route, and the poll ticker
			// finds redeliveries (lookAgain), as for any idle route.
			q.w.fetched(rs, gen, got > 0 && (pending > 0 || got < hot))
			if q.onFetch != nil {
				q.onFetch(got)
			}
			if err != nil && got == 0 {
				if now := time.Now().UnixNano(); now-lastErr.Load() > int64(10*time.Second) {
					lastErr.Store(now)
					q.log.Warn("pulling a task failed; retrying", "type", rs.route.String(), "err", err)
				}
				if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrNoResponders) {
					q.recreate(ctx, rs)
				}
				select { // back off while holding the slot
				case <-ctx.Done():
				case <-time.After(min(q.cfg.PollInterval, 250*time.Millisecond)):
				}
			}
		}()
	}
}

// poll looks, in the background, for the tasks no publish announces: a
// redelivery (another daemon's claim that expired, a retry whose delay
// passed, a delivery nakked by a daemon that stopped) wakes nobody. It
// runs on the poll ticker when a slot is free and no route is ready. The
// shards are looked at apart, so that a stream that does not answer (its
// leader lost) holds up only its own look; a tick while a shard's look
// still runs skips that shard.
func (q *Queue) poll(ctx context.Context, wg *sync.WaitGroup) {
	q.w.mu.Lock()
	idle := len(q.w.routes) == 0
	q.w.mu.Unlock()
	if idle {
		return
	}
	for shard := range q.tasks {
		if !q.w.looking[shard].CompareAndSwap(false, true) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer q.w.looking[shard].Store(false)
			q.lookShard(ctx, shard)
			if q.onPoll != nil {
				q.onPoll(shard)
			}
		}()
	}
}

// lookAgain looks at every shard (lookShard), one after the other.
func (q *Queue) lookAgain(ctx context.Context) {
	for shard := range q.tasks {
		q.lookShard(ctx, shard)
	}
}

// lookShard marks ready the served routes whose subjects hold messages in
// a shard's task stream: one stream info, not a fetch per route (200
// empty fetches a second with 50 plugin types in 4 shards took 1.1 % of a
// core in an idle daemon). A task stream is a work queue: a message stays
// in it until it is acked or terminated, so a task that can be delivered
// again (its claim expired, its retry delay passed) is on its route's
// subject, and the fetch that follows takes it. A route whose subject
// holds messages that others are running is fetched in vain, as every
// route was before. When the stream does not answer, each of the shard's
// routes is fetched: a fetch says more, and recreates a consumer that is
// gone.
func (q *Queue) lookShard(ctx context.Context, shard int) {
	info, err := q.tasks[shard].Info(ctx, jetstream.WithSubjectFilter(taskStreamFilter(shard)))
	if ctx.Err() != nil {
		return
	}
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	if err != nil {
		q.log.Debug("reading which plugin types have tasks failed; fetching from each", "stream", taskStreamName(shard), "err", err)
		for _, parts := range q.w.routes {
			for _, rs := range parts {
				if rs.shard == shard {
					q.w.markReadyLocked(rs)
				}
			}
		}
		return
	}
	for subj, n := range info.State.Subjects {
		s, r, ok := routeOfSubject(subj)
		if n == 0 || !ok || s != shard {
			continue
		}
		for _, rs := range q.w.routes[r] {
			if rs.shard == shard {
				q.w.markReadyLocked(rs)
			}
		}
	}
}

// runTask runs one fetched task in the run slot it was fetched for, and
// trades the slot for a finisher slot once the runner returned: the
// outcome is recorded and acked while the next task starts.
func (q *Queue) runTask(runner Runner, route Route, msg jetstream.Msg, slots, finishers chan struct{}) {
	held := true
	defer func() {
		if held {
			<-slots
		}
	}()
	finish := func() (done func()) {
		finishers <- struct{}{}
		held = false
		<-slots
		return func() { <-finishers }
	}
	q.handle(runner, route, msg, finish)
}

// hotWait is how long a fetch woken by a publish waits for the messages
// to be stored (an fsync each) before calling the route empty.
const hotWait = 50 * time.Millisecond

// fetch asks the consumer for up to n tasks that are available now (or,
// when hot, within hotWait) and hands each to run as it arrives. The
// caller holds a free slot for each, so a message delivered at any time
// during the wait has somewhere to run. An error with no message means
// the pull failed.
func fetch(c jetstream.Consumer, n int, hot bool, run func(jetstream.Msg)) error {
	var b jetstream.MessageBatch
	var err error
	if hot {
		b, err = c.Fetch(n, jetstream.FetchMaxWait(hotWait))
	} else {
		b, err = c.FetchNoWait(n)
	}
	if err != nil {
		return err
	}
	for m := range b.Messages() {
		run(m)
	}
	return b.Error()
}

// recreate creates a route's consumer in its shard again, after pulls
// found it gone (deleted by hand, or lost with a cluster's quorum). One
// slot at a time does it; a failure is logged at most every 10 s.
func (q *Queue) recreate(ctx context.Context, rs *routeState) {
	q.w.mu.Lock()
	if rs.recreating {
		q.w.mu.Unlock()
		return
	}
	rs.recreating = true
	q.w.mu.Unlock()
	cons, err := q.createConsumer(ctx, rs.route, rs.shard, nil)
	q.w.mu.Lock()
	defer q.w.mu.Unlock()
	rs.recreating = false
	if err != nil {
		if time.Since(rs.warned) > 10*time.Second {
			rs.warned = time.Now()
			q.log.Warn("recreating consumer failed; pulls retry it", "type", rs.route.String(), "stream", taskStreamName(rs.shard), "err", err)
		}
		return
	}
	rs.cons = cons
}

// handle runs one delivered task: claim, run with heartbeats, record the
// outcome, ack. Whatever happens, it leaves the message either acked
// (finished for good), nakked (another attempt) or untouched (another
// worker owns it now).
//
// finish is called once the runner returned: it frees the run slot (the
// next task may start) while the outcome is written and acked.
func (q *Queue) handle(runner Runner, route Route, msg jetstream.Msg, finish func() (done func())) {
	ctx := context.Background()
	meta, err := msg.Metadata()
	if err != nil {
		q.log.Error("dropping a task message without metadata", "type", route.String(), "err", err)
		_ = msg.TermWithReason("no metadata")
		return
	}
	task, perr := runtime.ParseTask(msg.Data())
	id := taskIDOf(msg.Headers())
	if id == "" && perr == nil {
		id = task.TaskID
	}
	log := q.log.With("task", id, "type", route.Type, "family", route.Family)
	if validID(id) != nil {
		log.Error("dropping a task message without a usable task id", "seq", meta.Sequence.Stream)
		_ = msg.TermWithReason("no usable task id")
		return
	}
	fl, dup := q.fly(id, msg)
	if dup {
		// This daemon is still running the task, or still writing its
		// outcome: heartbeats stopped for a while (a full store, a broker
		// failover) and the message came back. The running attempt owns
		// it; it acks this newer delivery when it is done.
		log.Info("task redelivered while this daemon still holds it; the running attempt keeps it")
		return
	}
	defer q.land(id)
	rec, ok := q.claim(ctx, log, id, route, fl.msg(), meta, task, perr)
	if !ok {
		return
	}
	log = log.With("attempt", rec.Attempts)
	log.Debug("task started")

	taskCtx, cancel := context.WithCancel(q.abortCtx)
	q.track(id, cancel) // a cancel request cancels taskCtx
	hbDone := make(chan struct{})
	var hbWG sync.WaitGroup
	hbWG.Add(1)
	go func() { // heartbeats keep the delivery ours until the outcome is written
		defer hbWG.Done()
		t := time.NewTicker(q.cfg.AckWait / 3)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-hbDone:
				return
			case <-t.C:
				if q.noHeartbeat {
					continue
				}
				err := fl.msg().InProgress()
				if err != nil {
					q.noteTrouble()
				}
				if err != nil && !failing {
					failing = true
					log.Warn("heartbeat failed; the task may be redelivered to another worker", "err", err)
				} else if err == nil {
					failing = false
				}
			}
		}
	}()
	// Heartbeats go on while the outcome is written, however long that
	// takes: the delivery stays ours and the hook does not run again.
	defer hbWG.Wait()
	defer close(hbDone)
	rctx := WithRunningRecord(taskCtx, rec)
	if perr == nil {
		rctx = WithParsedTask(rctx, msg.Data(), task)
	}
	result, status, runErr := safeRun(rctx, runner, msg.Data())
	aborted := q.abortCtx.Err() != nil
	cancelReq := q.untrack(id)
	if cancelReq {
		defer q.clearCancel(id)
	}
	cancel()
	defer finish()()

	now := time.Now().UTC()
	next := rec
	switch {
	case cancelReq && (runErr != nil || status != 0):
		// Cancelled on request: the hook's failure is the cancellation's
		// doing (a hook that finished successfully first keeps its result).
		next = cancelledRecord(rec, fmt.Sprintf("cancelled on request while running (attempt %d on %s)", rec.Attempts, q.cfg.Owner))
		keepInput(&next, msg.Data())
		if q.commit(ctx, log, rec, next) {
			q.ack(log, fl.msg())
		}
	case runErr != nil && aborted:
		next.State = Queued
		next.Attempts--
		next.Error = fmt.Sprintf("attempt %d was interrupted: %s shut down; it will run again", rec.Attempts, q.cfg.Owner)
		if q.commit(ctx, log, rec, next) {
			_ = fl.msg().Nak()
		}
	case runErr != nil && errors.Is(runErr, ErrWorkerCrashed) && rec.Crashes+1 >= q.cfg.MaxCrashes:
		next.Crashes++
		st := 1
		next.State = Failed
		next.Finished = &now
		next.Status = &st
		next.Error = fmt.Sprintf("crash: the task killed its worker %d times; the last time: %v", next.Crashes, runErr)
		next.Result = mustJSON(map[string]any{"taskId": id, "status": st, "message": next.Error,
			"error": map[string]any{"kind": "crash", "message": runErr.Error(), "crashes": next.Crashes}})
		keepInput(&next, msg.Data())
		if q.commit(ctx, log, rec, next) {
			log.Error("task failed for good: it kept killing its worker", "crashes", next.Crashes, "err", runErr)
			_ = fl.msg().TermWithReason("worker crashes")
		}
	case runErr != nil && rec.Attempts >= q.cfg.MaxAttempts:
		next.State = Failed
		next.Finished = &now
		next.Error = fmt.Sprintf("gave up after %d attempts; the last one failed: %v", rec.Attempts, runErr)
		keepInput(&next, msg.Data())
		if q.commit(ctx, log, rec, next) {
			log.Warn("task failed for good", "err", runErr)
			_ = fl.msg().TermWithReason("max attempts")
		}
	case runErr != nil:
		next.State = Queued
		next.Error = fmt.Sprintf("attempt %d failed: %v; retrying", rec.Attempts, runErr)
		if errors.Is(runErr, ErrWorkerCrashed) {
			next.Crashes++
		}
		if q.commit(ctx, log, rec, next) {
			log.Warn("task attempt failed; retrying", "err", runErr, "delay", q.cfg.backoff(rec.Attempts))
			_ = fl.msg().NakWithDelay(q.cfg.backoff(rec.Attempts))
		}
	default:
		next.State = Succeeded
		next.Error = ""
		if status != 0 {
			next.State = Failed
			next.Error = pluginError(status, result)
		}
		next.Status = &status
		next.Finished = &now
		next.Result = json.RawMessage(result)
		if !json.Valid(result) {
			next.Result = mustJSON(string(result))
		}
		if len(next.Result) > q.maxValue {
			name := fmt.Sprintf("%s/result.%d", id, rec.Attempts)
			if _, err := q.obj.PutBytes(ctx, name, next.Result); err != nil {
				log.Error("storing a large result failed; keeping its status only", "bytes", len(next.Result), "err", err)
				next.Result = mustJSON(map[string]any{"status": status, "message": fmt.Sprintf("result of %d bytes could not be stored: %v", len(result), err)})
			} else {
				next.Result, next.ResultRef, next.ResultSize = nil, name, int64(len(next.Result))
			}
		}
		keepInput(&next, msg.Data())
		if q.commit(ctx, log, rec, next) { // commit logs the outcome line
			q.ack(log, fl.msg())
		}
	}
}

// safeRun calls the runner, turning a panic into an infrastructure error.
func safeRun(ctx context.Context, r Runner, task []byte) (res []byte, status int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("runner panicked: %v", p)
		}
	}()
	return r.Run(ctx, task)
}

// pluginError summarises a plugin-reported failure from the result's
// message field.
func pluginError(status int, result []byte) string {
	var r struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(result, &r)
	if r.Message != "" {
		return fmt.Sprintf("plugin reported status %d: %s", status, r.Message)
	}
	return fmt.Sprintf("plugin reported status %d", status)
}

// claim moves the task's record to running for this attempt. It returns
// false when there is nothing to run: a duplicate, a finished task, or an
// attempt limit reached (the message is then acked or terminated).
func (q *Queue) claim(ctx context.Context, log *slog.Logger, id string, route Route, msg jetstream.Msg, meta *jetstream.MsgMetadata, task *runtime.Task, perr error) (Record, bool) {
	seq, part := meta.Sequence.Stream, max(taskShardOf(meta.Stream), 0)
	// The first try starts from the record this process created at
	// submit, if it did: a record read and decode less per task. The
	// write below is a compare-and-set on its revision, so a record that
	// changed since fails it, and the next try reads the record.
	guess, guessed := q.submitted(id)
	for range 16 {
		cur, err := guess, error(nil)
		if !guessed {
			cur, err = q.get(ctx, id)
		}
		guessed = false
		switch {
		case errors.Is(err, ErrNotFound):
			cur = Record{TaskID: id, State: Queued, Family: route.Family, Type: route.Type, Created: meta.Timestamp.UTC()}
			if perr == nil {
				cur.Hook, cur.TaskName, cur.TenantID, cur.ClusterID = task.Hook(), task.TaskName, task.TenantID, task.ClusterID
			}
		case err != nil:
			log.Warn("cannot read the task record; retrying later", "err", err)
			_ = msg.NakWithDelay(q.cfg.backoff(1))
			return Record{}, false
		}
		switch {
		case cur.State.Terminal():
			log.Debug("task already finished; dropping the duplicate delivery", "state", cur.State)
			q.ack(log, msg)
			return Record{}, false
		case cur.State == Running && (cur.Seq != seq || cur.Part != part) && cur.Seq != 0 && q.msgExists(ctx, cur.Part, cur.Seq):
			// Another copy of the task (submitted again after the dedupe
			// window) is running; that copy's message carries the retries.
			log.Debug("task is running from another message; dropping this copy", "seq", seq, "running_seq", cur.Seq)
			q.ack(log, msg)
			return Record{}, false
		case cur.State == Running && cur.Owner != q.cfg.Owner && (q.ownerLive(cur.Owner) || q.recentTrouble()):
			// Its daemon is alive (it announced its plugin types within
			// the TTL), or the broker was in trouble lately, so silence
			// proves nothing: the owner may still hold the task and be
			// writing its outcome after an outage stopped its heartbeats.
			// Taking over would run the hook twice; look again later.
			log.Info("task redelivered while its daemon may live; leaving it to that daemon for now", "owner", cur.Owner)
			_ = msg.NakWithDelay(q.cfg.AckWait)
			return Record{}, false
		case cur.State == Running:
			cur.Error = fmt.Sprintf("attempt %d on %s did not finish: its daemon stopped or lost its connection", cur.Attempts, cur.Owner)
			log.Warn("taking over a task whose worker went silent", "owner", q.cfg.Owner, "previous_owner", cur.Owner, "previous_attempt", cur.Attempts)
		}
		next := cur
		now := time.Now().UTC()
		switch {
		case perr != nil:
			next.State, next.Finished = Failed, &now
			next.Error = fmt.Sprintf("the task cannot run: %v", perr)
		case cur.Attempts >= q.cfg.MaxAttempts:
			next.State, next.Finished = Failed, &now
			next.Error = fmt.Sprintf("gave up after %d attempts: %s", cur.Attempts, cur.Error)
		default:
			next.State = Running
			next.Attempts++
			next.Owner = q.cfg.Owner
			next.Started, next.Finished = &now, nil
			next.Seq, next.Part = seq, part
		}
		keepInput(&next, msg.Data())
		rev, err := q.write(ctx, cur, next)
		if isConflict(err) {
			continue // someone else moved it; look again
		}
		if err != nil {
			q.noteWriteErr(err)
			q.noteTrouble()
			log.Warn("cannot update the task record; retrying later (deliveries are not counted)", "err", err)
			_ = msg.NakWithDelay(q.cfg.backoff(1))
			return Record{}, false
		}
		next.Revision = rev
		q.notify(Transition{From: cur.State, Record: next})
		if next.State == Failed {
			log.Warn("task failed without running", "reason", next.Error)
			_ = msg.TermWithReason(next.Error)
			return Record{}, false
		}
		return next, true
	}
	log.Warn("task record keeps changing under us; leaving the task for later")
	_ = msg.NakWithDelay(q.cfg.backoff(1))
	return Record{}, false
}

func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// commit records an attempt's outcome. It returns false when the record
// moved on (another worker took the task over after our heartbeats
// stopped): the outcome is dropped and the message left alone, since a
// late ack would remove a delivery that now belongs to someone else.
func (q *Queue) commit(ctx context.Context, log *slog.Logger, cur, next Record) bool {
	for i := 0; ; i++ {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		rev, err := q.write(wctx, cur, next)
		cancel()
		if err == nil {
			next.Revision = rev
			q.notify(Transition{From: cur.State, Record: next})
			return true
		}
		if isConflict(err) {
			// An earlier try may have been stored although its answer
			// was lost (a timeout during a broker failover): then the
			// record holds this very outcome, and the attempt is not lost.
			if got, gerr := q.get(ctx, next.TaskID); gerr == nil && sameWrite(got, next) {
				log.Info("the task's outcome was recorded by an earlier try whose answer was lost")
				q.notify(Transition{From: cur.State, Record: got})
				return true
			}
			log.Warn("lost the claim on the task: another attempt took it over; dropping this attempt's outcome", "state", next.State)
			q.notify(Transition{From: cur.State, Record: cur, Lost: true})
			return false
		}
		q.noteTrouble()
		if errors.Is(err, nats.ErrMaxPayload) && next.Result != nil {
			// Retrying cannot help a record too large for a message:
			// keep the outcome, drop the result with a note why.
			log.Error("the task's outcome does not fit the store's message size; recording it without its result", "bytes", len(next.Result), "err", err)
			status := 1
			if next.Status != nil {
				status = *next.Status
			}
			next.Result = mustJSON(map[string]any{"status": status, "message": fmt.Sprintf("the result (%d bytes) did not fit a record: %v", len(next.Result), err)})
			continue
		}
		q.noteWriteErr(err)
		if q.abortCtx.Err() != nil && i >= 1 {
			log.Error("cannot record the task's outcome before the forced shutdown; it will run again", "err", err)
			q.notify(Transition{From: cur.State, Record: cur, Lost: true})
			return false
		}
		// The outcome stays in memory and is retried until it is written
		// (a full store, a broker failover, a restarting server), while
		// heartbeats keep the delivery ours: a hook that ran is never run
		// again for a failed bookkeeping write.
		if i == 5 {
			log.Error("cannot record the task's outcome yet; keeping it in memory and retrying", "err", err)
		}
		time.Sleep(min(time.Duration(100*(i+1))*time.Millisecond, 2*time.Second))
	}
}

// sameWrite reports whether stored is the record write next: same state,
// attempt, owner, message, times and error. Times carry nanoseconds, so
// another attempt's write never matches.
func sameWrite(stored, next Record) bool {
	eq := func(a, b *time.Time) bool { return a == nil && b == nil || a != nil && b != nil && a.Equal(*b) }
	return stored.State == next.State && stored.Attempts == next.Attempts && stored.Owner == next.Owner &&
		stored.Seq == next.Seq && stored.Part == next.Part && stored.Crashes == next.Crashes &&
		stored.Error == capText(next.Error, maxRecordError) && eq(stored.Started, next.Started) && eq(stored.Finished, next.Finished)
}

// flight is a task this daemon holds: running, or writing its outcome.
// A redelivery of its message while it flies replaces the message the
// flight acks, so the newest delivery is the one settled.
type flight struct {
	mu  sync.Mutex
	cur jetstream.Msg
}

func (f *flight) msg() jetstream.Msg {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

// fly registers the task as held by this daemon. dup is true when it
// already was: the new delivery is handed to the existing flight.
func (q *Queue) fly(id string, msg jetstream.Msg) (fl *flight, dup bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flights == nil {
		q.flights = map[string]*flight{}
	}
	if f, ok := q.flights[id]; ok {
		f.mu.Lock()
		f.cur = msg
		f.mu.Unlock()
		return f, true
	}
	f := &flight{cur: msg}
	q.flights[id] = f
	return f, false
}

func (q *Queue) land(id string) {
	q.mu.Lock()
	delete(q.flights, id)
	q.mu.Unlock()
}

func (q *Queue) ack(log *slog.Logger, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("ack failed; the task will be redelivered and dropped as finished", "err", err)
	}
}

// msgExists reports whether message seq is still in a shard's task
// stream.
func (q *Queue) msgExists(ctx context.Context, shard int, seq uint64) bool {
	_, err := q.taskStream(shard).GetMsg(ctx, seq)
	return err == nil
}

// taskShardOf is the shard of a task stream by name (0 for LOOM_TASKS),
// or -1 for a stream that is not one.
func taskShardOf(stream string) int {
	for i := range StateShards {
		if stream == taskStreamName(i) {
			return i
		}
	}
	return -1
}

// maxDeliveriesAdvisory matches the advisories of every stream's
// consumers; those of the task streams are handled.
const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.*.*"

// handleMaxDeliveries finishes a task whose deliveries ran out before any
// worker could give up on it (each died mid-task): MaxDeliver leaves such
// a message in a work-queue stream, so it is marked failed and deleted.
func (q *Queue) handleMaxDeliveries(data []byte) {
	var adv struct {
		Stream     string `json:"stream"`
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(data, &adv); err != nil || adv.StreamSeq == 0 {
		return
	}
	shard := taskShardOf(adv.Stream)
	if shard < 0 {
		return // not a task stream's consumer
	}
	stream := q.taskStream(shard)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := stream.GetMsg(ctx, adv.StreamSeq)
	if err != nil {
		return // already gone
	}
	id := taskIDOf(m.Header)
	log := q.log.With("task", id, "seq", adv.StreamSeq)
	for range 8 {
		cur, err := q.get(ctx, id)
		if err != nil || cur.State.Terminal() {
			break
		}
		next := cur
		now := time.Now().UTC()
		next.State, next.Finished = Failed, &now
		next.Error = fmt.Sprintf("gave up after %d deliveries without a finished attempt (last: %s)", adv.Deliveries, cur.Error)
		keepInput(&next, m.Data)
		_, err = q.write(ctx, cur, next)
		if isConflict(err) {
			continue
		}
		if err == nil {
			q.notify(Transition{From: cur.State, Record: next})
			log.Warn("task failed for good: deliveries exhausted")
		}
		break
	}
	if err := stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("removing an exhausted task from the stream failed", "err", err)
	}
}
