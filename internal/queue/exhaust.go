package queue

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrStoreFull means the queue's store cannot take writes: the disk under
// the data directory is full, or the store reached its size limit
// (--store-max). Submits fail with it at once (HTTP 507) until space comes
// back; the daemon recovers by itself.
var ErrStoreFull = errors.New("the queue's store is full")

// DefaultStoreReserve is the free disk space under the data directory
// below which the embedded store counts as full: submits are refused
// before a write can fail, so the writes that finish running tasks still
// find room.
const DefaultStoreReserve = 32 << 20

// storeState is what the queue knows about its store's capacity.
type storeState struct {
	mu     sync.Mutex
	reason string    // why the store is full; "" when it takes writes
	since  time.Time // when it became full
	// broken means the embedded server failed a write (its file store
	// then refuses every later write until it is reloaded), or shut
	// JetStream down for lack of space: the server must be restarted.
	broken bool
	// fromDisk means the reason is the free-space check, cleared by it.
	fromDisk bool
}

// Exhausted reports whether the store is full, why, and since when.
func (q *Queue) Exhausted() (reason string, since time.Time, full bool) {
	q.store.mu.Lock()
	defer q.store.mu.Unlock()
	return q.store.reason, q.store.since, q.store.reason != ""
}

// storeBroken reports whether the embedded store waits for a restart.
func (q *Queue) storeBroken() bool {
	q.store.mu.Lock()
	defer q.store.mu.Unlock()
	return q.store.broken
}

// storeFullErr is the error submits get while the store is full.
func (q *Queue) storeFullErr() error {
	reason, since, full := q.Exhausted()
	if !full {
		return nil
	}
	return fmt.Errorf("%w since %s: %s; free space under the data directory (or raise --store-max), loomd recovers by itself",
		ErrStoreFull, since.UTC().Format(time.RFC3339), reason)
}

func (q *Queue) setFull(reason string, broken, fromDisk bool) {
	q.store.mu.Lock()
	defer q.store.mu.Unlock()
	if q.store.reason == "" {
		q.store.since = time.Now()
		q.log.Error("the queue's store is full: refusing new tasks until space comes back", "reason", reason)
	}
	if q.store.reason == "" || !fromDisk || q.store.fromDisk {
		q.store.reason, q.store.fromDisk = reason, fromDisk
	}
	q.store.broken = q.store.broken || broken
}

func (q *Queue) clearFull() {
	q.store.mu.Lock()
	defer q.store.mu.Unlock()
	if q.store.reason != "" {
		q.log.Info("the queue's store takes writes again", "was_full_for", time.Since(q.store.since).Round(time.Millisecond).String())
	}
	q.store.reason, q.store.broken, q.store.fromDisk = "", false, false
}

// isStorageErr reports whether err says the store is out of space or at
// its limit, as opposed to a conflict or a lost connection.
func isStorageErr(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10002, // account resource limits exceeded
			10023, // insufficient resources
			10028, // insufficient memory resources
			10047, // insufficient storage resources
			10077: // stream store failed
			return true
		}
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"no space left", "insufficient resources", "insufficient storage", "resources exceeded", "maximum bytes exceeded", "resource limits exceeded"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// noteWriteErr records a failed write of the queue's own: a storage error
// marks the store full (and, for the embedded server, broken).
func (q *Queue) noteWriteErr(err error) {
	if isStorageErr(err) {
		q.setFull(err.Error(), q.server() != nil && strings.Contains(err.Error(), "no space left"), false)
	}
}

// onServerError sees the embedded server's error logs: a failed store
// write leaves its file store refusing writes until it is reloaded.
func (q *Queue) onServerError(msg string) {
	switch {
	case strings.Contains(msg, "no space left on device"),
		strings.Contains(msg, "Critical write error"),
		strings.Contains(msg, "out of") && strings.Contains(msg, "resources"):
		q.setFull("the embedded store failed a write: "+msg, true, false)
	}
}

// freeBytes is the space available to loomd on the filesystem of dir.
func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// watchStore runs until the queue closes. Every interval it checks the
// free space under the data directory (embedded server) and, while the
// store is full, whether it takes writes again: it restarts a broken
// embedded server once there is room, and probes with a small write.
func (q *Queue) watchStore(interval time.Duration) {
	defer q.watchWG.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-q.abortCtx.Done():
			return
		case <-t.C:
		}
		q.checkStore()
	}
}

func (q *Queue) checkStore() {
	roomy := true
	if q.server() != nil {
		free, err := freeBytes(q.cfg.DataDir)
		if err == nil && free < uint64(q.cfg.StoreReserve) {
			roomy = false
			q.setFull(fmt.Sprintf("%s free on the filesystem of %s, under the %s reserve", mib(free), q.cfg.DataDir, mib(uint64(q.cfg.StoreReserve))), false, true)
		}
	}
	q.store.mu.Lock()
	full, broken, fromDisk := q.store.reason != "", q.store.broken, q.store.fromDisk
	q.store.mu.Unlock()
	if !full || !roomy {
		return
	}
	if broken {
		if err := q.restartServer(); err != nil {
			q.log.Error("restarting the embedded nats server failed; retrying", "err", err)
			return
		}
	}
	if fromDisk && !broken {
		q.clearFull()
		return
	}
	if err := q.probe(); err != nil {
		q.log.Debug("the store still refuses writes", "err", err)
		return
	}
	q.clearFull()
}

// probe writes and deletes a small value: proof that the store takes
// writes again.
func (q *Queue) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	key := "probe." + strings.Map(func(r rune) rune {
		if r == '.' || r == ' ' || r == '*' || r == '>' {
			return '_'
		}
		return r
	}, q.cfg.Owner)
	if _, err := q.kvs[0].Put(ctx, key, []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return err
	}
	return q.kvs[0].Purge(ctx, key)
}

// restartServer replaces a broken embedded server by a fresh one on the
// same store, as a process restart would, without stopping the daemon:
// the client reconnects through srvRef, running hooks carry on, and their
// outcomes, held in memory, are written once the new server answers.
func (q *Queue) restartServer() error {
	old := q.server()
	if old == nil {
		return nil
	}
	q.log.Warn("restarting the embedded nats server: its store failed a write and refuses writes until it is reloaded")
	cfg := q.cfg
	if cfg.ListenAddr != "" {
		// Keep the port the other daemons know, even one picked at start.
		if addr, ok := old.Addr().(*net.TCPAddr); ok {
			cfg.ListenAddr = net.JoinHostPort(addr.IP.String(), fmt.Sprint(addr.Port))
		}
	}
	q.srvRef.shutdown()
	srv, unlisten, err := startServer(cfg, q.auth, q.onServerError)
	if err != nil {
		return err
	}
	q.srvRef.set(srv, unlisten)
	// Wait for the client to be back, so the probe that follows means
	// something.
	deadline := time.Now().Add(5 * time.Second)
	for q.connErr() != nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// The served-types bucket lives in memory: create it again (the
	// file-backed stream, buckets and consumers come back from disk).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := q.servedBucket(ctx); err != nil {
		q.log.Warn("recreating the served-types bucket after the restart failed", "err", err)
	}
	// The watches of the old server end with it; they would resume only
	// after their heartbeats time out (seconds): start them again now,
	// and let every waiter look at its record once, in case it changed
	// between the restart and the new watch.
	q.rewatch(ctx)
	q.store.mu.Lock()
	q.store.broken = false
	q.store.mu.Unlock()
	q.log.Info("the embedded nats server restarted", "connected", q.connErr() == nil)
	return nil
}

// serverRef is the in-process connection provider of the embedded server.
// It always hands out a connection to the current server, so the client
// reconnects by itself after restartServer.
type serverRef struct {
	mu  sync.Mutex
	srv *server.Server
	// unlisten removes the server's sockets from the daemon's registry.
	unlisten func()
}

// set makes s the current server; unlisten removes its sockets from the
// registry when it is replaced or shut down.
func (r *serverRef) set(s *server.Server, unlisten func()) {
	r.mu.Lock()
	old := r.unlisten
	r.srv, r.unlisten = s, unlisten
	r.mu.Unlock()
	if old != nil {
		old()
	}
}

// shutdown stops the current server and unregisters its sockets.
func (r *serverRef) shutdown() {
	r.mu.Lock()
	srv, unlisten := r.srv, r.unlisten
	r.unlisten = nil
	r.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
	if unlisten != nil {
		unlisten()
	}
}

func (r *serverRef) get() *server.Server {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.srv
}

// InProcessConn implements nats.InProcessConnProvider.
func (r *serverRef) InProcessConn() (net.Conn, error) {
	s := r.get()
	if s == nil {
		return nil, errors.New("the embedded nats server is not running")
	}
	return s.InProcessConn()
}

// server is the embedded server, or nil with an external NATS.
func (q *Queue) server() *server.Server {
	if q.srvRef == nil {
		return nil
	}
	return q.srvRef.get()
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// rewatch replaces the record and cancel watches, then wakes every
// waiter with its record as it is now.
func (q *Queue) rewatch(ctx context.Context) {
	q.watchMu.Lock()
	old := q.watch
	q.watch = nil
	q.watchMu.Unlock()
	for _, w := range old {
		_ = w.Stop()
	}
	if err := q.startWatch(); err != nil {
		q.log.Warn("watching task records again after the restart failed; waits fall back on their timeouts", "err", err)
	}
	if q.ix.cancelKV != nil {
		if err := q.watchCancels(); err != nil {
			q.log.Warn("watching cancel requests again after the restart failed", "err", err)
		}
	}
	q.mu.Lock()
	ids := make([]string, 0, len(q.waiters))
	for id := range q.waiters {
		ids = append(ids, id)
	}
	q.mu.Unlock()
	for _, id := range ids {
		e, err := q.recordEntry(ctx, id)
		if err == nil {
			q.wake(e)
		}
	}
}
