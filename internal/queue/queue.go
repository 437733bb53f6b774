// Package queue is loomd's durable task queue on NATS JetStream.
//
// Tasks travel on work-queue streams, one per shard of the task ids
// (LOOM_TASKS under the subject loom.task.<family>.<type> for shard 0,
// LOOM_TASKS_<n> under loom.tasks.<n>.<family>.<type> for the others),
// with the task id as message id so the server drops a second publish of
// the same task. Every plugin type has one durable pull consumer per
// shard, shared by every daemon that serves the type, so tasks for a type
// nobody serves simply wait. Task state lives in KV buckets sharded the
// same way (LOOM_STATE_<n>, key task.<id>); every change is a
// compare-and-set on the record's revision, which fences out a worker that
// lost its claim. Results too large for a KV value go to an object store
// (LOOM_OUTPUT). A shard's streams and buckets share a connection of
// their own. Each stream stores its writes one after the other, each with
// an fsync, so the shards are what lets writes go to disk in parallel
// (docs/benchmarks.md).
//
// The server is embedded in the process by default (file store, fsync on
// every write); Config.URLs switches to an external NATS on the same code
// path. See docs/operations.md and ../shared/reference/nats-jetstream.md.
package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/internal/jsensure"
	"github.com/loomrt/loom/internal/jsretry"
	"github.com/loomrt/loom/runtime"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the JetStream assets.
const (
	// StreamName is the task stream of shard 0, the only one before
	// the task stream was sharded; shard n > 0 is StreamName_<n>.
	StreamName    = "LOOM_TASKS"
	StateBucket   = "LOOM_STATE" // shards are LOOM_STATE_0 .. LOOM_STATE_<StateShards-1>
	OutputBucket  = "LOOM_OUTPUT"
	subjectPrefix = "loom.task."  // shard 0: loom.task.<family>.<type>
	shardPrefix   = "loom.tasks." // shard n > 0: loom.tasks.<n>.<family>.<type>
	keyPrefix     = "task."
)

// StateShards is how many shards the task ids are spread over (FNV-1a of
// the id): each has its task stream, its KV bucket of records and its
// index streams. Each stream stores its writes (each fsynced) one after
// the other; shards let concurrent tasks' writes fsync in parallel. The
// number is part of the stored layout: changing it would strand tasks.
const StateShards = 4

// taskStreamName is the task stream of a shard.
func taskStreamName(shard int) string {
	if shard == 0 {
		return StreamName
	}
	return StreamName + "_" + strconv.Itoa(shard)
}

// taskStreamFilter is the subject filter of every route's tasks in a
// shard of the task stream.
func taskStreamFilter(shard int) string {
	if shard == 0 {
		return subjectPrefix + ">"
	}
	return shardPrefix + strconv.Itoa(shard) + ".>"
}

// Queue is a connection to the task queue. Its methods are safe for
// concurrent use.
type Queue struct {
	cfg    Config
	log    *slog.Logger
	srvRef *serverRef   // the embedded server; nil with an external NATS
	store  storeState   // full or not, and why
	auth   embeddedAuth // the embedded server's credentials
	nc     *nats.Conn
	js     jetstream.JetStream
	tasks  [StateShards]jetstream.Stream   // the task streams, each on its shard's connection
	kvs    [StateShards]jetstream.KeyValue // each on its shard's connection
	// shards are one connection per shard, carrying that shard's task
	// messages, pulls and acks, record reads and writes, and index
	// entries. The server answers a record read (a direct get) inline in
	// the connection's read loop, and a read waits for the bucket's write
	// in progress, fsync included; on one shared connection every request
	// queued behind it.
	shards  [StateShards]shardConn
	obj     jetstream.ObjectStore
	watchMu sync.Mutex // guards watch: a server restart replaces them
	watch   []jetstream.KeyWatcher

	maxValue int // results above this size go to the object store

	mu      sync.Mutex
	waiters map[string][]chan Record
	written ownWrites          // records this process wrote, until the watch delivers them (wake)
	changes changeSubs         // OnChange callbacks (changes.go)
	flights map[string]*flight // tasks this daemon holds, by id
	trouble atomic.Int64       // unix nanos of the last failed broker call
	closed  bool
	serving bool

	w workers

	served  *served       // which plugin types the daemons serve (served.go)
	lacking chan struct{} // LackingSeen's

	noHeartbeat  bool            // tests: let a running task's delivery expire
	afterPublish func(id string) // tests: runs between a submit's publish and its record
	onFetch      func(got int)   // tests: runs after each fetch with the messages it took
	onPoll       func(shard int) // tests: runs after each look of the poll ticker at a shard (lookShard)

	unlock func() // releases the data directory

	abortCtx context.Context // cancelled to abort running tasks
	abort    context.CancelFunc
	watchWG  sync.WaitGroup

	ix indexState // index, deletes, cancels, retention (index.go)
}

// Open connects to the queue: it starts the embedded server (or connects
// to cfg.URLs), and creates or updates the stream and buckets.
func Open(ctx context.Context, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("queue configuration: %w", err)
	}
	q := &Queue{cfg: cfg, log: cfg.Logger, waiters: map[string][]chan Record{}, lacking: make(chan struct{}, 1)}
	q.abortCtx, q.abort = context.WithCancel(context.Background())
	q.w.init()
	ok := false
	defer func() {
		if !ok {
			q.shutdown()
		}
	}()

	opts := []nats.Option{
		nats.Name("loomd " + cfg.Owner),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			q.log.Warn("nats client error", "subject", subj, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				q.log.Warn("disconnected from nats; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { q.log.Info("reconnected to nats", "url", nc.ConnectedUrlRedacted()) }),
	}
	url := strings.Join(cfg.URLs, ",")
	if len(cfg.URLs) == 0 {
		unlock, err := lockDataDir(cfg.DataDir)
		if err != nil {
			return nil, err
		}
		q.unlock = unlock
		if q.auth, err = newEmbeddedAuth(cfg); err != nil {
			return nil, err
		}
		srv, unlisten, err := startServer(cfg, q.auth, q.onServerError)
		if err != nil {
			return nil, err
		}
		q.srvRef = &serverRef{srv: srv, unlisten: unlisten}
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(q.srvRef))
		opts = append(opts, q.auth.client...)
	} else {
		auth, err := clientAuth(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, auth...)
	}
	var nc *nats.Conn
	var err error
	if q.srvRef != nil {
		if nc, err = nats.Connect(url, append(opts, cfg.NATSOptions...)...); err != nil {
			return nil, fmt.Errorf("connecting to the embedded nats server: %w", err)
		}
	} else {
		// A server not reachable yet (started after loomd, restarting,
		// its name not resolving yet) is waited for like the streams
		// below, until ctx ends; a refused login or certificate fails
		// at once.
		connect := cfg.Retry
		if connect != nil {
			connect = &jsretry.Waiter{Logger: connect.Logger, WarnEvery: connect.WarnEvery, Min: connect.Min, Max: connect.Max,
				Hint: "start the NATS server, or check --nats and that this host reaches it"}
		}
		err = connect.Do(ctx, "a connection to the NATS server at "+redactURLs(cfg.URLs)+" (--nats)", func(context.Context) (err error) {
			nc, err = nats.Connect(url, append(opts, cfg.NATSOptions...)...)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("connecting to nats at %s: %w (is the server running and reachable? check --nats and the credentials: --nats-nkey, --nats-token, --nats-user, --nats-creds, TLS)", redactURLs(cfg.URLs), err)
		}
	}
	q.nc = nc
	if q.js, err = q.jetStream(nc); err != nil {
		return nil, err
	}
	// The shards' connections at once: each is a handshake (and on an
	// external server a TLS one, perhaps), one after the other a tenth
	// of the start.
	var shardErrs [StateShards]error
	var wg sync.WaitGroup
	for i := range q.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Quiet about disconnects: the main connection already says so.
			quiet := []nats.Option{
				nats.Name(fmt.Sprintf("loomd %s shard %d", cfg.Owner, i)),
				nats.DisconnectErrHandler(func(*nats.Conn, error) {}),
				nats.ReconnectHandler(func(*nats.Conn) {}),
			}
			sc, err := nats.Connect(url, slices.Concat(opts, quiet, cfg.NATSOptions)...)
			if err != nil {
				shardErrs[i] = fmt.Errorf("connecting to nats for state shard %d: %w", i, err)
				return
			}
			q.shards[i].nc = sc
			q.shards[i].js, shardErrs[i] = q.jetStream(sc)
		}()
	}
	wg.Wait()
	if err := errors.Join(shardErrs[:]...); err != nil {
		return nil, err
	}
	if err := q.provision(ctx); err != nil {
		return nil, err
	}
	q.maxValue = int(nc.MaxPayload()) - 16*1024
	if err := q.startWatch(); err != nil {
		return nil, err
	}
	q.watchWG.Add(1)
	go q.watchStore(cfg.StoreCheckInterval)
	if err := q.startServed(ctx); err != nil {
		return nil, err
	}
	ok = true
	q.log.Debug("queue open", "mode", cfg.Mode(), "owner", cfg.Owner)
	return q, nil
}

// shardConn is a connection of its own for one state shard's traffic.
type shardConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// connErr says which of the queue's connections is not connected, if
// any.
func (q *Queue) connErr() error {
	if s := q.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("nats connection is %s", s)
	}
	for i, sc := range q.shards {
		if s := sc.nc.Status(); s != nats.CONNECTED {
			return fmt.Errorf("nats connection of shard %d is %s", i, s)
		}
	}
	return nil
}

// jetStream is the JetStream context of a connection, in the configured
// domain.
func (q *Queue) jetStream(nc *nats.Conn) (jetstream.JetStream, error) {
	var js jetstream.JetStream
	var err error
	if q.cfg.Domain != "" && q.srvRef == nil {
		js, err = jetstream.NewWithDomain(nc, q.cfg.Domain)
	} else {
		js, err = jetstream.New(nc)
	}
	if err != nil {
		return nil, fmt.Errorf("opening jetstream: %w", err)
	}
	return js, nil
}

// startServer starts the embedded server and registers its listening
// sockets in cfg.Listeners; unlisten removes them.
func startServer(cfg Config, auth embeddedAuth, onError func(string)) (srv *server.Server, unlisten func(), err error) {
	dir := filepath.Join(cfg.DataDir, "jetstream")
	opts := &server.Options{
		ServerName:         cfg.ServerName,
		JetStream:          true,
		JetStreamDomain:    cfg.Domain,
		StoreDir:           dir,
		SyncAlways:         cfg.SyncInterval == 0,
		SyncInterval:       cfg.SyncInterval,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  cfg.MaxStore,
		DontListen:         true,
		NoSigs:             true,
		NoLog:              true,
		MaxPayload:         4 << 20,
		// Every client authenticates, the in-process one included: with a
		// listener, any local process could otherwise read task bodies
		// (secrets) and forge records.
		Nkeys:         auth.nkeys,
		Authorization: cfg.Token,
	}
	if cfg.ListenAddr != "" {
		host, port, _ := net.SplitHostPort(cfg.ListenAddr)
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, nil, fmt.Errorf("nats listen address %q: port %q is not a number", cfg.ListenAddr, port)
		}
		if p == 0 {
			p = -1 // the server's "pick a free port"
		}
		opts.DontListen = false
		opts.Host = host
		opts.Port = p
		if p > 0 {
			// In place before the socket exists (see listeners.Listen).
			early := cfg.Listeners.AddAddr(natsClientPort, "tcp", cfg.ListenAddr)
			defer early()
		}
	}
	srv, err = server.NewServer(opts)
	if err != nil {
		return nil, nil, fmt.Errorf("configuring the embedded nats server (store %s): %w", dir, err)
	}
	srv.SetLoggerV2(serverLogger{l: cfg.Logger.With("component", "nats"), onError: onError}, false, false, false)
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		if cfg.ListenAddr != "" {
			return nil, nil, fmt.Errorf("the embedded nats server did not start within 10s: is %s already in use, and is %s writable?", cfg.ListenAddr, dir)
		}
		return nil, nil, fmt.Errorf("the embedded nats server did not start within 10s: is %s writable and not used by another loomd?", dir)
	}
	return srv, registerServer(cfg.Listeners, srv), nil
}

// natsClientPort names the embedded server's client listener.
const natsClientPort = "NATS client port (--nats-listen)"

// registerServer records the sockets the embedded server listens on: the
// client port (--nats-listen), and the cluster, gateway, monitoring and
// profiling ports should a configuration ever open them. The returned
// func removes them.
func registerServer(reg *listeners.Registry, srv *server.Server) func() {
	var removes []func()
	if a := srv.Addr(); a != nil {
		removes = append(removes, reg.Add(natsClientPort, a))
	}
	for _, l := range []struct {
		name string
		addr *net.TCPAddr
	}{
		{"NATS cluster port", srv.ClusterAddr()},
		{"NATS gateway port", srv.GatewayAddr()},
		{"NATS monitoring port", srv.MonitorAddr()},
		{"NATS profiling port", srv.ProfilerAddr()},
	} {
		if l.addr != nil {
			removes = append(removes, reg.Add(l.name, l.addr))
		}
	}
	return func() {
		for _, r := range removes {
			r()
		}
	}
}

// what names a stream or bucket for the operator, in what Open waits
// for: "stream LOOM_TASKS (3 replicas)".
func (q *Queue) what(kind, name string) string {
	return jsretry.What(kind, name, q.cfg.Replicas)
}

// provision creates or updates the stream and the buckets. What the NATS
// cluster cannot do right now (a server offline, an election) is tried
// again until ctx ends (cfg.Retry).
func (q *Queue) provision(ctx context.Context) error {
	// The streams and buckets are independent: created at once, so that
	// their fsynced metadata writes overlap (a new store has about twenty:
	// one after the other they took a third of a second of the start).
	var errs [2*StateShards + 1]error
	var wg sync.WaitGroup
	for i := range q.tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name, subjects := StreamName, []string{subjectPrefix + ">"}
			if i > 0 {
				name, subjects = taskStreamName(i), []string{shardPrefix + strconv.Itoa(i) + ".>"}
			}
			err := q.cfg.Retry.Do(ctx, q.what("stream", name), func(ctx context.Context) (err error) {
				q.tasks[i], err = jsensure.Stream(ctx, q.shards[i].js, jetstream.StreamConfig{
					Name:        name,
					Description: fmt.Sprintf("loomd tasks, shard %d of %d; one durable consumer per plugin type", i, StateShards),
					Subjects:    subjects,
					Retention:   jetstream.WorkQueuePolicy,
					Storage:     jetstream.FileStorage,
					Duplicates:  q.cfg.Duplicates,
					Replicas:    q.cfg.Replicas,
				})
				return err
			})
			if err != nil {
				errs[i] = fmt.Errorf("creating stream %s: %w", name, err)
			}
		}()
	}
	for i := range q.kvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s_%d", StateBucket, i)
			err := q.cfg.Retry.Do(ctx, q.what("kv bucket", name), func(ctx context.Context) (err error) {
				q.kvs[i], err = jsensure.KeyValue(ctx, q.shards[i].js, jetstream.KeyValueConfig{
					Bucket:      name,
					Description: fmt.Sprintf("loomd task state records, key task.<id>, shard %d of %d", i, StateShards),
					History:     8,
					Storage:     jetstream.FileStorage,
					Replicas:    q.cfg.Replicas,
				})
				return err
			})
			if err != nil {
				errs[StateShards+i] = fmt.Errorf("creating kv bucket %s: %w", name, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := q.cfg.Retry.Do(ctx, q.what("object store", OutputBucket), func(ctx context.Context) (err error) {
			q.obj, err = jsensure.ObjectStore(ctx, q.js, jetstream.ObjectStoreConfig{
				Bucket:      OutputBucket,
				Description: "loomd task results too large for a kv value",
				Storage:     jetstream.FileStorage,
				Replicas:    q.cfg.Replicas,
			})
			return err
		})
		if err != nil {
			errs[2*StateShards] = fmt.Errorf("creating object store %s: %w", OutputBucket, err)
		} else if q.cfg.Replicas > 1 {
			q.obj, errs[2*StateShards] = q.leaderObjectStore(ctx, q.obj, OutputBucket)
		}
	}()
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return err
	}
	return q.provisionIndex(ctx)
}

// Owner is the name this process writes into the records of the tasks it
// runs.
func (q *Queue) Owner() string { return q.cfg.Owner }

// Mode is "embedded" or "external".
func (q *Queue) Mode() string { return q.cfg.Mode() }

// ClientURL is the URL other daemons and tools use to join the embedded
// server, or "" when it does not listen.
func (q *Queue) ClientURL() string {
	srv := q.server()
	if srv == nil || q.cfg.ListenAddr == "" {
		return ""
	}
	return srv.ClientURL()
}

// Submit validates a Coopr task and queues it. A task without taskId gets
// a new one. Submitting an id the queue already knows returns the existing
// record with isNew false and does not queue the task again. Errors for
// bad input wrap runtime.ErrInvalidTask.
func (q *Queue) Submit(ctx context.Context, task []byte) (rec Record, isNew bool, err error) {
	t, err := runtime.ParseTask(task)
	if err != nil {
		return Record{}, false, err
	}
	if t.TaskID == "" {
		if task, err = runtime.WithID(task, NewID()); err != nil {
			return Record{}, false, err
		}
		if t, err = runtime.ParseTask(task); err != nil {
			return Record{}, false, err
		}
	}
	if err := validID(t.TaskID); err != nil {
		return Record{}, false, fmt.Errorf("%w: %v", runtime.ErrInvalidTask, err)
	}
	fam, typ, err := t.Route()
	if err != nil {
		return Record{}, false, err
	}
	route := Route{Family: string(fam), Type: typ}
	if err := route.validate(); err != nil {
		return Record{}, false, fmt.Errorf("%w: %v", runtime.ErrInvalidTask, err)
	}
	// A full store fails the submit at once, before a write can fail
	// (and, with the embedded server, leave its file store refusing
	// writes until it is reloaded, or while it restarts).
	if err := q.storeFullErr(); err != nil {
		return Record{}, false, err
	}
	if cur, err := q.Get(ctx, t.TaskID); err == nil {
		return cur, false, nil
	} else if !errors.Is(err, ErrNotFound) {
		return Record{}, false, err
	}
	rec = Record{
		TaskID:    t.TaskID,
		TenantID:  t.TenantID,
		ClusterID: t.ClusterID,
		State:     Queued,
		Family:    route.Family,
		Type:      route.Type,
		Hook:      t.Hook(),
		TaskName:  t.TaskName,
		Created:   time.Now().UTC(),
		Part:      shardOf(t.TaskID), // before the index goroutine reads rec
	}
	// The record's index entry is published alongside the task: two
	// fsynced writes to different streams at once, not one after the
	// other. An entry left without a record (the publish failed, the
	// process died) is stale, and readers drop it.
	entry := make(chan uint64, 1)
	go func() {
		seq, err := q.publishIndex(ctx, rec)
		if err != nil {
			seq = 0 // the record's write publishes it again
		}
		entry <- seq
	}()
	// Publish first, then create the record: a worker that sees the message
	// before the record creates it itself, so no task is ever left with a
	// record and no message.
	ack, err := q.publishTask(ctx, route, rec.Part, t.TaskID, task)
	entrySeq := <-entry
	if err != nil {
		q.dropIndex(recordPart(rec), entrySeq)
		q.noteWriteErr(err)
		if full := q.storeFullErr(); full != nil {
			return Record{}, false, fmt.Errorf("queueing task %s: %w", t.TaskID, full)
		}
		return Record{}, false, fmt.Errorf("queueing task %s: %w (it may or may not be queued: submitting it again with the same taskId is safe)", t.TaskID, err)
	}
	rec.Seq = ack.Sequence // what the reconciler checks the record against
	if q.afterPublish != nil {
		q.afterPublish(t.TaskID)
	}
	rev, err := q.writeIndexed(ctx, Record{}, rec, entrySeq)
	if !ack.Duplicate && !(err != nil && isStorageErr(err)) {
		// Counted at the publish, the source of "queued": a worker may have
		// claimed the task and written its record before this Create.
		// (A task taken back for lack of room below is not counted.)
		rec.Revision = rev
		q.notify(Transition{From: "", Record: rec})
	}
	switch {
	case errors.Is(err, jetstream.ErrKeyExists):
		cur, gerr := q.Get(ctx, t.TaskID)
		if gerr != nil {
			// The task is in the stream and has its record (a worker
			// claimed it first): say so, or a client reads the error as
			// "not queued".
			return Record{}, false, fmt.Errorf("task %s is queued, but reading its record failed: %w (submitting it again with the same taskId is safe)", t.TaskID, gerr)
		}
		return cur, !ack.Duplicate, nil
	case err != nil && isStorageErr(err) && !ack.Duplicate:
		// No room for the record: take the message back, so the task is
		// not queued without a record that GET and the reconciler see,
		// and refuse the submit like any other at a full store. Should
		// the delete fail too, the task runs when a worker claims it
		// (the claim creates the record), and submitting it again is
		// still safe.
		q.noteWriteErr(err)
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		derr := q.taskStream(rec.Part).DeleteMsg(dctx, ack.Sequence)
		cancel()
		if derr != nil {
			q.log.Warn("taking back a task whose record could not be written failed; it runs when a worker claims it", "task", t.TaskID, "err", derr)
		}
		return Record{}, false, fmt.Errorf("recording task %s: %w", t.TaskID, q.storeFullErr())
	case err != nil:
		// The task is queued and will run; the worker that claims it
		// creates the record. The submit succeeded.
		q.noteWriteErr(err)
		q.log.Warn("recording a queued task failed; its record is created when it starts", "task", t.TaskID, "err", err)
		return rec, !ack.Duplicate, nil
	}
	rec.Revision = rev
	return rec, !ack.Duplicate, nil
}

// resultReserveKey carries a WithResultReserve function in a context.
type resultReserveKey struct{}

// WithResultReserve returns a context under which Get and Wait call
// reserve with the size of a result kept as an object before they load
// it; an error from reserve is returned (wrapped) instead of the record.
// The API uses it to count a large result against its in-flight budget
// before the result is in memory.
func WithResultReserve(ctx context.Context, reserve func(size int64) error) context.Context {
	return context.WithValue(ctx, resultReserveKey{}, reserve)
}

// stateOnlyKey marks a context under which results kept as objects are
// not loaded (WithStateOnly).
type stateOnlyKey struct{}

// WithStateOnly returns a context under which Get, and Submit's answer
// for a task already known, leave a result kept as an object unloaded
// (ResultRef and ResultSize set, Result nil): for callers that answer
// with the task's state alone, such as the API's submit, so that
// submitting a known id again does not read a large result into memory.
func WithStateOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, stateOnlyKey{}, true)
}

// Get returns the record of a task, with its result, or ErrNotFound.
func (q *Queue) Get(ctx context.Context, id string) (Record, error) {
	rec, err := q.get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if rec.ResultRef != "" && ctx.Value(stateOnlyKey{}) == nil {
		if reserve, _ := ctx.Value(resultReserveKey{}).(func(int64) error); reserve != nil {
			size := rec.ResultSize
			if size <= 0 {
				// A record from before ResultSize: ask the store.
				info, err := q.obj.GetInfo(ctx, rec.ResultRef)
				if err != nil {
					return Record{}, fmt.Errorf("reading the size of the result of task %s (object %s): %w", id, rec.ResultRef, err)
				}
				size = int64(info.Size)
			}
			if err := reserve(size); err != nil {
				return Record{}, fmt.Errorf("loading the result of task %s (%d bytes): %w", id, size, err)
			}
		}
		b, err := q.obj.GetBytes(ctx, rec.ResultRef)
		if err != nil {
			return Record{}, fmt.Errorf("loading the result of task %s from object %s: %w", id, rec.ResultRef, err)
		}
		rec.Result = b
	}
	return rec, nil
}

// get reads a record without resolving ResultRef.
func (q *Queue) get(ctx context.Context, id string) (Record, error) {
	if validID(id) != nil {
		return Record{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := q.recordEntry(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading the record of task %s: %w", id, err)
	}
	return decodeRecord(e)
}

// taskStream is the task stream of a shard (a record's Part).
func (q *Queue) taskStream(part int) jetstream.Stream {
	if part < 0 || part >= len(q.tasks) {
		part = 0 // not written by loomd; LOOM_TASKS is the best guess
	}
	return q.tasks[part]
}

// kvFor is the state bucket that holds task id's record (FNV-1a).
func (q *Queue) kvFor(id string) jetstream.KeyValue { return q.kvs[shardOf(id)] }

// shardOf is the index of the state bucket that holds task id's record.
func shardOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % StateShards)
}

func decodeRecord(e jetstream.KeyValueEntry) (Record, error) {
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, fmt.Errorf("decoding the record at %s (revision %d): %w", e.Key(), e.Revision(), err)
	}
	rec.Revision = e.Revision()
	return rec, nil
}

// Wait blocks until the task is in a terminal state and returns its
// record. When ctx ends first it returns the latest record and ctx's
// error, so a long poll can answer with the current state.
func (q *Queue) Wait(ctx context.Context, id string) (Record, error) {
	return q.wait(ctx, id, nil)
}

// WaitSubmitted is Wait for a task this process has just submitted: sub
// is the record Submit returned. A record that does not exist yet (one
// accepted during a leader election is written when a worker claims it)
// is waited for, with sub as its state meanwhile, instead of
// ErrNotFound.
func (q *Queue) WaitSubmitted(ctx context.Context, sub Record) (Record, error) {
	return q.wait(ctx, sub.TaskID, &sub)
}

// wait is Wait; sub, when set, stands for a record not written yet.
func (q *Queue) wait(ctx context.Context, id string, sub *Record) (Record, error) {
	ch := make(chan Record, 1)
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return Record{}, ErrClosed
	}
	q.waiters[id] = append(q.waiters[id], ch)
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		ws := q.waiters[id]
		ws = slices.DeleteFunc(ws, func(c chan Record) bool { return c == ch })
		if len(ws) == 0 {
			delete(q.waiters, id)
		} else {
			q.waiters[id] = ws
		}
		q.mu.Unlock()
	}()
	rec, err := q.get(ctx, id)
	if sub != nil && errors.Is(err, ErrNotFound) {
		// The watch hands over the record once it is written.
		rec, err = *sub, nil
		rec.Revision = 0
	}
	if sub != nil && err != nil && ctx.Err() != nil {
		return *sub, ctx.Err() // a wait of 0: the submitted state
	}
	if err != nil {
		return Record{}, err
	}
	for !rec.State.Terminal() {
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case r, ok := <-ch:
			if !ok {
				return rec, ErrClosed
			}
			if r.Revision > rec.Revision {
				rec = r
			}
		}
	}
	if rec.ResultRef != "" {
		return q.Get(ctx, id)
	}
	return rec, nil
}

// startWatch follows every record change, to wake waiters.
// The watches live as long as the queue, not as Open's context.
func (q *Queue) startWatch() error {
	for _, kv := range q.kvs {
		w, err := kv.Watch(context.Background(), keyPrefix+">", jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
		if err != nil {
			return fmt.Errorf("watching task records in %s: %w", kv.Bucket(), err)
		}
		q.watchMu.Lock()
		q.watch = append(q.watch, w)
		q.watchMu.Unlock()
		q.watchWG.Add(1)
		go func() {
			defer q.watchWG.Done()
			for e := range w.Updates() {
				if e != nil {
					q.wake(e)
				}
			}
		}()
	}
	return nil
}

// wake hands a record change to the waiters of its task and to the
// OnChange callbacks.
func (q *Queue) wake(e jetstream.KeyValueEntry) {
	id := strings.TrimPrefix(e.Key(), keyPrefix)
	rec, own := q.written.take(id, e.Value())
	subs := q.hasChangeSubs()
	q.mu.Lock()
	waiting := len(q.waiters[id]) > 0
	q.mu.Unlock()
	if !subs && !waiting {
		return
	}
	// Decoded once for both, unless this process wrote it.
	if own {
		rec.Revision = e.Revision()
	} else {
		var err error
		if rec, err = decodeRecord(e); err != nil {
			return
		}
	}
	if subs {
		q.emit(Change{TaskID: rec.TaskID, TenantID: rec.TenantID, Cluster: rec.ClusterID, Type: rec.Type, State: rec.State})
	}
	if !waiting {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ch := range q.waiters[id] {
		select { // keep only the newest record in the buffer
		case <-ch:
		default:
		}
		ch <- rec
	}
}

// ownWrites keeps the records this process is writing until the watch
// delivers them back to wake: a watched entry whose value is the very
// bytes written holds that record, so wake hands it on instead of
// decoding the entry again (three decodes per task). A record is kept
// before its write is sent, since the watch may deliver the entry before
// the write's answer arrives. What the watch never delivers (a write
// that failed without being dropped here, a restarted watch) is dropped
// when the bounds are reached. Other daemons' writes are decoded as
// before.
type ownWrites struct {
	mu    sync.Mutex
	recs  map[string]ownWrite // task id -> its last write from here
	bytes int                 // the kept values' sizes
}

type ownWrite struct {
	value []byte // as written
	rec   Record // what value encodes; its Revision is the watched entry's
}

// Bounds of ownWrites: the watch takes a record back within milliseconds,
// so these are only reached when it stops delivering.
const (
	maxOwnWrites     = 4096
	maxOwnWriteBytes = 8 << 20
)

// put keeps rec, about to be written as value.
func (o *ownWrites) put(rec Record, value []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.recs == nil {
		o.recs = map[string]ownWrite{}
	}
	o.dropLocked(rec.TaskID)
	if len(value) > maxOwnWriteBytes {
		return
	}
	if len(o.recs) >= maxOwnWrites || o.bytes+len(value) > maxOwnWriteBytes {
		clear(o.recs)
		o.bytes = 0
	}
	o.recs[rec.TaskID] = ownWrite{value: value, rec: rec}
	o.bytes += len(value)
}

// drop forgets task id's write of value (it failed), unless another
// write replaced it since.
func (o *ownWrites) drop(id string, value []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if w, ok := o.recs[id]; ok && &w.value[0] == &value[0] {
		o.dropLocked(id)
	}
}

func (o *ownWrites) dropLocked(id string) {
	if w, ok := o.recs[id]; ok {
		o.bytes -= len(w.value)
		delete(o.recs, id)
	}
}

// take returns (and forgets) the record this process wrote as task id's
// value, if the watch delivered exactly that value. Another value leaves
// the kept write alone: it may be one still on its way.
func (o *ownWrites) take(id string, value []byte) (Record, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	w, ok := o.recs[id]
	if !ok || !bytes.Equal(w.value, value) {
		return Record{}, false
	}
	o.dropLocked(id)
	return w.rec, true
}

// Depth counts the tasks in the task streams (queued or running) by
// route, including routes nobody serves.
func (q *Queue) Depth(ctx context.Context) (map[Route]int, error) {
	out := map[Route]int{}
	for i, st := range q.tasks {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(taskStreamFilter(i)))
		if err != nil {
			return nil, fmt.Errorf("reading the depth of stream %s: %w", taskStreamName(i), err)
		}
		for subj, n := range info.State.Subjects {
			if _, r, ok := routeOfSubject(subj); ok {
				out[r] += int(n)
			}
		}
	}
	return out, nil
}

// Health reports whether the queue can serve: connected, and JetStream
// answering.
func (q *Queue) Health(ctx context.Context) error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := q.storeFullErr(); err != nil {
		return err
	}
	if err := q.connErr(); err != nil {
		return err
	}
	if _, err := q.tasks[0].Info(ctx); err != nil {
		return fmt.Errorf("jetstream does not answer: %w", err)
	}
	return nil
}

// AbortRunning cancels the context of every task this process is running.
// Their messages are handed back to the queue for another attempt. Use it
// when a graceful shutdown ran out of time.
func (q *Queue) AbortRunning() { q.abort() }

// Close aborts running tasks, closes the connection and, in embedded mode,
// shuts the server down after flushing its store. Call it after Serve has
// returned, unless the shutdown is forced.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	for id, ws := range q.waiters {
		for _, ch := range ws {
			close(ch)
		}
		delete(q.waiters, id)
	}
	q.mu.Unlock()
	q.shutdown()
	return nil
}

func (q *Queue) shutdown() {
	q.served.close()
	q.abort()
	q.w.stop()
	q.w.fillWG.Wait() // cancelled by stop; before the connections close
	if q.ix.sweepStop != nil {
		q.ix.sweepStop()
	}
	q.ix.bg.Wait()
	q.watchMu.Lock()
	watches := q.watch
	q.watchMu.Unlock()
	for _, w := range watches {
		_ = w.Stop()
	}
	if q.nc != nil {
		_ = q.nc.FlushTimeout(2 * time.Second)
		q.nc.Close()
	}
	for _, sc := range q.shards {
		if sc.nc != nil {
			_ = sc.nc.FlushTimeout(2 * time.Second)
			sc.nc.Close()
		}
	}
	q.watchWG.Wait()
	if q.srvRef != nil {
		q.srvRef.shutdown()
	}
	if q.unlock != nil {
		q.unlock()
	}
}

// notify reports a state change this process wrote. Call it after every
// record write that moves a task (submit, claim, outcome, requeue, cancel,
// repair): it feeds the metrics (OnTransition) and writes the task's
// "task finished" / "task failed" line, so a write path that skips it
// leaves the counters short and the operator without a line.
func (q *Queue) notify(t Transition) {
	q.logOutcome(t)
	if q.cfg.OnTransition != nil {
		q.cfg.OnTransition(t)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("queue: encoding %T: %v", v, err)) // records always encode
	}
	return b
}

// serverLogger sends the embedded server's logs to slog.
type serverLogger struct {
	l       *slog.Logger
	onError func(string) // sees every error line (store write failures)
}

func (s serverLogger) Noticef(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Warnf(format string, v ...any)   { s.l.Warn(fmt.Sprintf(format, v...)) }
func (s serverLogger) Fatalf(format string, v ...any)  { s.l.Error(fmt.Sprintf(format, v...)) }
func (s serverLogger) Errorf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	s.l.Error(msg)
	if s.onError != nil {
		s.onError(msg)
	}
}
func (s serverLogger) Debugf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
func (s serverLogger) Tracef(format string, v ...any) {}
