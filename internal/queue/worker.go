package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
// have work, so idle slots pull only from consumers with messages.
type workers struct {
	mu      sync.Mutex
	setMu   sync.Mutex // serialises SetTypes
	routes  map[Route]*routeState
	ready   []*routeState // round robin of routes that may have messages
	wake    chan struct{}
	stopped bool
}

type routeState struct {
	route Route
	cons  jetstream.Consumer
	sub   *nats.Subscription // wakes us when a task is published
	ready bool
	hot   bool   // woken by a publish: the message may not be stored yet
	gen   uint64 // bumped on every wake-up, so a stale "empty" does not hide new work
	gone  bool
}

func (w *workers) init() {
	w.routes = map[Route]*routeState{}
	w.wake = make(chan struct{}, 1)
}

// published marks a route ready because a task was just published on it.
func (w *workers) published(rs *routeState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs.hot = true
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
	for _, rs := range w.routes {
		w.markReadyLocked(rs)
	}
}

// next pops the next route that may have work. hot says a publish woke
// it, so the fetch should wait a moment for the message to be stored.
func (w *workers) next() (rs *routeState, gen uint64, hot bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.ready) > 0 {
		rs := w.ready[0]
		w.ready = w.ready[1:]
		rs.ready = false
		hot := rs.hot
		rs.hot = false
		if !rs.gone {
			return rs, rs.gen, hot
		}
	}
	return nil, 0, false
}

// fetched puts a route back at the end of the round robin, unless it was
// found empty and nothing woke it since.
func (w *workers) fetched(rs *routeState, gen uint64, got bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if rs.gone || rs.ready {
		return
	}
	if got || rs.gen != gen {
		rs.ready = true
		w.ready = append(w.ready, rs)
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *workers) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	for _, rs := range w.routes {
		if rs.sub != nil {
			_ = rs.sub.Unsubscribe()
		}
	}
}

// SetTypes sets the plugin types this process serves: it creates (or
// updates) the durable consumer of every new type and stops pulling from
// types that went away. The consumers themselves stay, since other daemons
// may share them, and tasks for a type nobody serves wait in the stream.
// Types whose consumer cannot be set up are reported in the error and left
// out; call SetTypes again to retry them.
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
	for r, rs := range q.w.routes {
		if !want[r] {
			rs.gone = true
			if rs.sub != nil {
				_ = rs.sub.Unsubscribe()
			}
			delete(q.w.routes, r)
			q.w.ready = slices.DeleteFunc(q.w.ready, func(x *routeState) bool { return x == rs })
			q.log.Info("stopped serving plugin type", "family", r.Family, "type", r.Type)
		}
	}
	q.w.mu.Unlock()
	slices.SortFunc(add, func(a, b Route) int { return cmpRoute(a, b) })
	for _, r := range add {
		rs, err := q.addRoute(ctx, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		q.w.mu.Lock()
		q.w.routes[r] = rs
		q.w.markReadyLocked(rs)
		q.w.mu.Unlock()
		q.log.Info("serving plugin type", "family", r.Family, "type", r.Type, "consumer", r.consumerName())
	}
	q.announceTypes()
	return errors.Join(errs...)
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

func (q *Queue) consumerConfig(r Route) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       r.consumerName(),
		Description:   "loomd workers for " + r.String(),
		FilterSubject: r.Subject(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       q.cfg.AckWait,
		// Deliveries are not counted: a delivery whose claim could not be
		// written (a full store, a broker failover) must not use up the
		// task's tries. The record's attempt count, written at each claim,
		// is what gives up (MaxAttempts, MaxCrashes).
		MaxDeliver: -1,
	}
}

func (q *Queue) addRoute(ctx context.Context, r Route) (*routeState, error) {
	cons, err := q.js.CreateOrUpdateConsumer(ctx, StreamName, q.consumerConfig(r))
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s for plugin type %s: %w (another loomd with a different --ack-wait or --max-attempts may own it)", r.consumerName(), r, err)
	}
	rs := &routeState{route: r, cons: cons}
	rs.sub, err = q.nc.Subscribe(r.Subject(), func(*nats.Msg) { q.w.published(rs) })
	if err != nil {
		return nil, fmt.Errorf("subscribing to %s: %w", r.Subject(), err)
	}
	return rs, nil
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
				q.w.markAllReady()
			}
			rs, gen, hot = q.w.next()
		}
		// The slot is ours: fetch (at most one message) and run it in its
		// own goroutine, so slow fetches and tasks never hold up others.
		wg.Add(1)
		go func() {
			defer wg.Done()
			held := true
			defer func() {
				if held {
					<-slots
				}
			}()
			// finish trades the run slot for a finisher slot.
			finish := func() (done func()) {
				finishers <- struct{}{}
				held = false
				<-slots
				return func() { <-finishers }
			}
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
			q.w.mu.Lock()
			cons := rs.cons
			q.w.mu.Unlock()
			msg, err := fetchOne(cons, hot)
			q.w.fetched(rs, gen, msg != nil)
			if err != nil {
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
				return
			}
			if msg != nil {
				q.handle(runner, rs.route, msg, finish)
			}
		}()
	}
}

// hotWait is how long a fetch woken by a publish waits for the message to
// be stored (an fsync) before calling the route empty.
const hotWait = 50 * time.Millisecond

// fetchOne asks the consumer for one task that is available now (or,
// when hot, within hotWait). The caller holds a free slot for it, so a
// message delivered at any time during the wait has somewhere to run.
func fetchOne(c jetstream.Consumer, hot bool) (jetstream.Msg, error) {
	var b jetstream.MessageBatch
	var err error
	if hot {
		b, err = c.Fetch(1, jetstream.FetchMaxWait(hotWait))
	} else {
		b, err = c.FetchNoWait(1)
	}
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range b.Messages() {
		msg = m
	}
	if err := b.Error(); err != nil && msg == nil {
		return nil, err
	}
	return msg, nil
}

func (q *Queue) recreate(ctx context.Context, rs *routeState) {
	cons, err := q.js.CreateOrUpdateConsumer(ctx, StreamName, q.consumerConfig(rs.route))
	if err != nil {
		q.log.Warn("recreating consumer failed", "type", rs.route.String(), "err", err)
		return
	}
	q.w.mu.Lock()
	rs.cons = cons
	q.w.mu.Unlock()
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
	result, status, runErr := safeRun(taskCtx, runner, msg.Data())
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
		if q.commit(ctx, log, rec, next) {
			log.Error("task failed for good: it kept killing its worker", "crashes", next.Crashes, "err", runErr)
			_ = fl.msg().TermWithReason("worker crashes")
		}
	case runErr != nil && rec.Attempts >= q.cfg.MaxAttempts:
		next.State = Failed
		next.Finished = &now
		next.Error = fmt.Sprintf("gave up after %d attempts; the last one failed: %v", rec.Attempts, runErr)
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
				next.Result, next.ResultRef = nil, name
			}
		}
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
	seq := meta.Sequence.Stream
	for range 16 {
		cur, err := q.get(ctx, id)
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
		case cur.State == Running && cur.Seq != seq && cur.Seq != 0 && q.msgExists(ctx, cur.Seq):
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
			log.Warn("taking over a task whose worker went silent", "previous_owner", cur.Owner, "previous_attempt", cur.Attempts)
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
			next.Seq = seq
		}
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

func (q *Queue) msgExists(ctx context.Context, seq uint64) bool {
	_, err := q.stream.GetMsg(ctx, seq)
	return err == nil
}

const maxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamName + ".*"

// handleMaxDeliveries finishes a task whose deliveries ran out before any
// worker could give up on it (each died mid-task): MaxDeliver leaves such
// a message in a work-queue stream, so it is marked failed and deleted.
func (q *Queue) handleMaxDeliveries(data []byte) {
	var adv struct {
		StreamSeq  uint64 `json:"stream_seq"`
		Deliveries uint64 `json:"deliveries"`
	}
	if err := json.Unmarshal(data, &adv); err != nil || adv.StreamSeq == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := q.stream.GetMsg(ctx, adv.StreamSeq)
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
	if err := q.stream.DeleteMsg(ctx, adv.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		log.Warn("removing an exhausted task from the stream failed", "err", err)
	}
}
