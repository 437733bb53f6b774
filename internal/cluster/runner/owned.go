package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Why an owned job's run stops before its end.
var (
	errShutdown = errors.New("interrupted")
	errCancel   = errors.New("cancelled")
	errLost     = errors.New("lease lost")
	errLapse    = errors.New("lease lapsed")
)

// owned is a job this daemon runs: its record (as last written, with the
// revision that fences every write), its lease, and the run's contexts.
type owned struct {
	r       *Runner
	cluster string
	log     *slog.Logger

	mu      sync.Mutex
	rec     Record
	rev     uint64
	renewed time.Time // when the lease was last written (monotonic)
	lost    bool
	exec    context.CancelCauseFunc // the current run's
	job     string                  // the state job running now

	// life ends the job here for good (shutdown, lost lease, cancel).
	life     context.Context
	stopLife context.CancelCauseFunc
	first    []state.Event // events the first step that runs records
}

func newOwned(r *Runner, rec Record, rev uint64, first []state.Event) *owned {
	life, stop := context.WithCancelCause(context.Background())
	return &owned{r: r, cluster: rec.Cluster, log: r.log.With("cluster", rec.Cluster, "job", rec.ID), rec: rec, rev: rev,
		renewed: time.Now(), life: life, stopLife: stop, first: first}
}

// stop ends the job's run here (its state is kept for whoever resumes).
func (o *owned) stop(cause error) {
	o.stopLife(cause)
}

// holds reports whether the lease is still this daemon's for sure: not
// lost, and renewed within two thirds of its length, a third before
// anyone may take it over.
func (o *owned) holds() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.lost && time.Since(o.renewed) < o.r.cfg.LeaseTTL*2/3
}

// update rewrites the record through f at the revision last written (the
// fence), renewing the lease. A record changed by someone else that still
// names this daemon (a cancel request) is read again and f applied to it;
// one that names another daemon means the job was taken over: errLost.
func (o *owned) update(f func(*Record)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost {
		return errLost
	}
	for try := 0; try < 20; try++ {
		next := o.rec.clone()
		f(&next)
		now := time.Now()
		if next.Owner == o.r.cfg.Owner {
			next.Lease, next.Renewed = now.Add(o.r.cfg.LeaseTTL), now
		}
		rev, err := o.r.recs.put(context.Background(), next, o.rev)
		if err == nil {
			o.rec, o.rev, o.renewed = next, rev, now
			return nil
		}
		if !errors.Is(err, errConflict) {
			return err
		}
		cur, crev, gerr := o.r.recs.get(context.Background(), o.cluster)
		if gerr != nil {
			return gerr
		}
		if crev <= o.rev {
			// A stale read (a NATS cluster's replica behind its leader):
			// the write that beat ours is not there yet.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if cur.Owner != o.r.cfg.Owner || cur.Done() {
			o.lost = true
			o.log.Error("lost the cluster job: another daemon took it over; stopping it here without writing anything more",
				"owner", cur.Owner, "state", cur.State)
			o.r.metrics.lost.Inc()
			if o.exec != nil {
				o.exec(fmt.Errorf("%w: loomd %s took the job over", errLost, cur.Owner))
			}
			o.stopLife(fmt.Errorf("%w: loomd %s took the job over", errLost, cur.Owner))
			return errLost
		}
		o.rec, o.rev = cur, crev
		if cur.Cancel != "" {
			o.stopLife(fmt.Errorf("%w by %s", errCancel, cur.Cancel))
		}
	}
	return fmt.Errorf("cluster %s: its job record keeps changing", o.cluster)
}

// renewLoop renews the lease (and the cluster state's lock) every third
// of its length until the job ends here. A daemon that cannot renew for
// two thirds of it stops the run: another daemon may take the job over a
// third later.
func (o *owned) renewLoop(done <-chan struct{}) {
	ttl := o.r.cfg.LeaseTTL
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		err := o.update(func(*Record) {})
		if errors.Is(err, errLost) {
			return
		}
		if err == nil {
			if _, lerr := o.r.cfg.Store.Lock(o.cluster, o.r.holder(), ttl, ""); lerr != nil {
				o.log.Warn("renewing the cluster's state lock failed (the job lease is what counts)", "err", lerr)
			}
			if failing {
				o.log.Info("renewing the cluster job's lease works again")
				failing = false
			}
			continue
		}
		if !failing {
			o.log.Warn("renewing the cluster job's lease failed; retrying", "err", err)
			failing = true
		}
		if !o.holds() {
			o.mu.Lock()
			if o.exec != nil {
				o.exec(fmt.Errorf("%w: cannot renew the job's lease (%v)", errLapse, err))
			}
			o.mu.Unlock()
		}
	}
}

// fenced are the state writes of a job: refused once the lease is not
// this daemon's for sure.
type fenced struct {
	state.Journal
	o *owned
}

func (f fenced) Put(c *state.Cluster) error {
	if !f.o.holds() {
		return fmt.Errorf("not writing the state of cluster %s: this daemon no longer holds the job's lease", c.Name)
	}
	return f.Journal.Put(c)
}

func (f fenced) Append(c *state.Cluster, ch []state.Change) error {
	if !f.o.holds() {
		return fmt.Errorf("not writing the state of cluster %s: this daemon no longer holds the job's lease", c.Name)
	}
	return f.Journal.Append(c, ch)
}

// run runs the job's steps to their end, or until the job ends here.
func (o *owned) run() {
	// The lease (and the state lock) is renewed until the job ends here:
	// renewing stops before the job lets go of the cluster, or a renewal
	// right after the unlock would take the lock again, and hold it for a
	// whole lease after the job ended.
	done, renewing := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(renewing)
		o.renewLoop(done)
	}()
	stopRenewing := sync.OnceFunc(func() {
		close(done)
		<-renewing
	})
	defer stopRenewing()
	o.mu.Lock()
	req, id := o.rec.Request, o.rec.ID
	o.mu.Unlock()
	cl, _ := o.r.cfg.Store.Get(o.cluster)
	o.r.cfg.Secrets.Set(o.cluster, id, Secrets(req, cl))
	var steps []Step // the state job's, mirrored into the record at each step
	o.mu.Lock()
	o.job = o.rec.ID
	o.mu.Unlock()
	tasks := &queueTasks{q: o.r.cfg.Queue, local: o.r.cfg.Local, timeout: time.Duration(req.TaskTimeoutMs) * time.Millisecond,
		warn: func(msg string, attrs ...any) { o.warn(msg, attrs...) },
		ran:  func(outcome string) { o.r.metrics.local.WithLabelValues(outcome).Inc() }}
	mirror := func(k int, s []Step) {
		steps = s
		snap := append([]Step(nil), s...)
		if err := o.update(func(r *Record) { r.Steps = snap }); err != nil && !errors.Is(err, errLost) {
			o.log.Warn("recording a step in the job record failed; it is recorded at the job's end", "err", err)
		}
	}
	eng := &Engine{Store: fenced{Journal: o.r.cfg.Store, o: o}, Tasks: tasks, Log: o.r.cfg.Log, Logger: o.r.cfg.Logger,
		Who: o.r.who, Source: o.r.cfg.Owner, Requester: req.Requester, Parallelism: req.Parallelism,
		Started: func(k int, s []Step, _ *state.Job, _ *plan.Plan) { mirror(k, s) },
		Ended:   func(k int, s []Step, _ *state.Cluster, _ *state.Job, _ *plan.Plan) { mirror(k, s) }}
	delay := time.Second
	for {
		ctx, cancel := context.WithCancelCause(o.life)
		o.mu.Lock()
		o.exec = cancel
		steps = o.rec.clone().Steps
		id := o.rec.ID
		o.mu.Unlock()
		first := o.first
		o.first = nil
		out, err := eng.Run(ctx, o.cluster, id, first)
		if out.Job != nil {
			steps = StepsOf(out.Job)
		}
		cause := context.Cause(ctx)
		cancel(nil)
		switch {
		case errors.Is(cause, errLost) || errors.Is(context.Cause(o.life), errLost):
			return // another daemon runs it: write nothing
		case errors.Is(cause, errShutdown):
			stopRenewing()
			o.release(steps, cause)
			return
		case errors.Is(cause, errCancel):
			stopRenewing()
			o.finish(StateCancelled, steps, fmt.Sprintf("%v: run the apply again to resume it", cause))
			return
		case errors.Is(cause, errLapse):
			o.log.Warn("stopped the cluster job: its lease could not be renewed; resuming it here once it can, unless another daemon took it over", "err", cause)
			if !o.regain() {
				return
			}
			o.first = []state.Event{{Time: time.Now(), Kind: state.EventResumed, By: o.r.who, Message: "after this daemon lost contact with the store for a while"}}
			continue
		case err != nil:
			// The store failed under the job (its state could not be
			// read or saved): try again while the lease holds.
			o.log.Warn("the cluster job stopped on a store error; resuming it", "err", err, "retry_in", delay)
			o.saveSteps(steps)
			select {
			case <-o.life.Done():
				continue // the cases above settle it
			case <-time.After(delay):
			}
			delay = min(2*delay, 30*time.Second)
			o.first = []state.Event{{Time: time.Now(), Kind: state.EventResumed, By: o.r.who, Message: "after a store error: " + err.Error()}}
			continue
		}
		st := StateComplete
		if out.State != Complete {
			st = StateFailed
		}
		stopRenewing()
		o.finish(st, steps, out.Message)
		return
	}
}

// regain waits until the lease can be renewed again: true to resume, false
// when the job is lost or this daemon stops.
func (o *owned) regain() bool {
	for {
		select {
		case <-o.life.Done():
			return false
		case <-time.After(o.r.cfg.LeaseTTL / 6):
		}
		if err := o.update(func(*Record) {}); err == nil {
			return true
		} else if errors.Is(err, errLost) {
			return false
		}
	}
}

// saveSteps records the steps' progress (best effort).
func (o *owned) saveSteps(steps []Step) {
	if err := o.update(func(r *Record) { r.Steps = steps }); err != nil && !errors.Is(err, errLost) {
		o.log.Warn("recording the job's steps failed", "err", err)
	}
}

// finish lets go of the cluster and records the job's end, in that
// order: whoever sees the job ended (a follower, a daemon taking the next
// job) finds the cluster's state lock free, not held by a job that is
// over. Meanwhile the record still says running, so a submit is told to
// wait for it.
func (o *owned) finish(st string, steps []Step, msg string) {
	o.logEntry("ended", fmt.Sprintf("job %s %s", o.rec.ID, st), joblog.Attr{K: "state", V: st}, joblog.Attr{K: "message", V: msg})
	o.flush()
	if err := o.r.cfg.Store.Unlock(o.cluster, lockOwner(o.r.cfg.Owner)); err != nil {
		o.log.Warn("releasing the cluster's state lock failed; it expires with its lease", "err", err)
	}
	for i := range 20 {
		err := o.update(func(r *Record) {
			r.Steps, r.State, r.Message, r.Ended = steps, st, msg, time.Now()
		})
		if err == nil || errors.Is(err, errLost) {
			break
		}
		o.log.Warn("recording the cluster job's end failed; retrying", "err", err, "try", i+1)
		select {
		case <-o.life.Done():
			if errors.Is(context.Cause(o.life), errLost) {
				return
			}
		case <-time.After(time.Second):
		}
	}
	o.r.metrics.ended.WithLabelValues(st).Inc()
	level := slog.LevelInfo
	if st != StateComplete {
		level = slog.LevelWarn
	}
	o.log.Log(context.Background(), level, "cluster job "+st, "message", msg)
}

// release hands the job to the other daemons (this one shuts down): the
// cluster's lock first, then the record, as finish does.
func (o *owned) release(steps []Step, cause error) {
	o.logEntry("interrupted", fmt.Sprintf("job %s interrupted: %v; a loomd sharing the queue resumes it", o.rec.ID, cause))
	o.flush()
	_ = o.r.cfg.Store.Unlock(o.cluster, lockOwner(o.r.cfg.Owner))
	err := o.update(func(r *Record) {
		r.Steps = steps
		r.addEvent(state.Event{Time: time.Now(), Kind: state.EventInterrupted, By: o.r.who, Message: cause.Error()})
		r.Owner, r.Host, r.PID = "", "", 0
		r.Lease = time.Now()
	})
	if err != nil && !errors.Is(err, errLost) {
		o.log.Warn("handing the cluster job over failed; its lease runs out and another daemon takes it over", "err", err)
	}
	o.r.metrics.ended.WithLabelValues("interrupted").Inc()
	o.log.Info("cluster job handed over: another daemon sharing the queue resumes it", "cause", cause)
}

// warn writes a warning into the job log (and the daemon's).
func (o *owned) warn(msg string, attrs ...any) {
	o.mu.Lock()
	job := o.job
	o.mu.Unlock()
	l := slog.New(joblog.Handler(o.r.cfg.Log, o.cluster, job, o.r.cfg.Owner, o.r.cfg.Logger.Handler()))
	l.Warn(msg, append([]any{"cluster", o.cluster, "job", job}, attrs...)...)
}

func (o *owned) logEntry(event, msg string, attrs ...joblog.Attr) {
	o.mu.Lock()
	job := o.job
	o.mu.Unlock()
	o.r.cfg.Log.Write(o.cluster, joblog.Entry{Time: time.Now(), Kind: joblog.KindJob, Job: job, Level: "INFO", Msg: msg, Source: o.r.cfg.Owner,
		Attrs: append([]joblog.Attr{{K: "event", V: event}, {K: "record", V: o.rec.ID}}, attrs...)})
}

func (o *owned) flush() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.r.cfg.Log.Flush(ctx)
}
