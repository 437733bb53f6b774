package joblog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamName is the JetStream stream of the daemons' job logs: subject
// loom.clusterlog.<cluster>, one message per batch of entries.
const StreamName = "LOOM_CLUSTER_LOG"

const subjectPrefix = "loom.clusterlog."

// Subject is the subject of a cluster's job log.
func Subject(cluster string) string { return subjectPrefix + cluster }

// StreamOptions tune a Stream; zero values pick the defaults.
type StreamOptions struct {
	// Replicas of the stream (1, or 3 on a NATS cluster).
	Replicas int
	// MaxBytes bounds the whole stream (default 256 MiB); the oldest
	// batches go first.
	MaxBytes int64
	// MaxAge drops batches older than this (default 30 days).
	MaxAge time.Duration
	// MaxPerCluster bounds the batches kept per cluster (default 20,000,
	// at most 256 KiB each).
	MaxPerCluster int64
	// Source names this daemon in the entries it writes.
	Source string
	// Secrets are redacted from every entry before it is stored.
	Secrets *Secrets
	// FlushEvery is how long entries wait to be batched (default 50 ms):
	// a 900-task job writes tens of messages, not thousands of fsynced
	// ones.
	FlushEvery time.Duration
	// Logger gets the stream's own warnings (entries dropped).
	Logger *slog.Logger
}

// Stream keeps job logs in JetStream. Write batches entries in memory
// and publishes them in the background; a batch that cannot be published
// is kept and tried again, up to maxPending bytes in all, past which the
// oldest entries are dropped (and one entry says how many).
type Stream struct {
	js jetstream.JetStream
	st jetstream.Stream
	o  StreamOptions

	mu       sync.Mutex
	cond     *sync.Cond
	pending  map[string][]Entry
	bytes    int
	dropped  map[string]int
	started  uint64 // flush cycles started
	finished uint64 // flush cycles finished
	closed   bool
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	failing  bool
}

// maxPending bounds what waits in memory for the store.
const maxPending = 4 << 20

// maxBatch bounds one message (an external NATS accepts 1 MiB by default).
const maxBatch = 256 << 10

// OpenStream creates (or updates) the stream and starts publishing.
func OpenStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (*Stream, error) {
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 30 * 24 * time.Hour
	}
	if o.MaxPerCluster <= 0 {
		o.MaxPerCluster = 20000
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              StreamName,
		Description:       "loomd cluster job logs: executor and plugin lines, task state changes; subject loom.clusterlog.<cluster>",
		Subjects:          []string{subjectPrefix + "*"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          o.Replicas,
		MaxBytes:          o.MaxBytes,
		MaxAge:            o.MaxAge,
		MaxMsgsPerSubject: o.MaxPerCluster,
		MaxMsgSize:        maxBatch + 64<<10,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       true,
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", StreamName, err)
	}
	s := &Stream{js: js, st: st, o: o, pending: map[string][]Entry{}, dropped: map[string]int{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

// Write implements Sink.
func (s *Stream) Write(cluster string, e Entry) {
	if e.Source == "" {
		e.Source = s.o.Source
	}
	e = clean(e, s.o.Secrets.get(cluster))
	n := size(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	for s.bytes+n > maxPending && s.bytes > 0 {
		s.dropOldestLocked()
	}
	s.pending[cluster] = append(s.pending[cluster], e)
	s.bytes += n
	if s.bytes >= maxBatch {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// dropOldestLocked drops the oldest pending entry of the cluster with the
// most pending.
func (s *Stream) dropOldestLocked() {
	var worst string
	for c, es := range s.pending {
		if worst == "" || len(es) > len(s.pending[worst]) {
			worst = c
		}
	}
	es := s.pending[worst]
	if len(es) == 0 {
		s.bytes = 0
		return
	}
	s.bytes -= size(es[0])
	s.pending[worst] = es[1:]
	s.dropped[worst]++
}

// Flush waits until what was written before it is stored (or ctx ends).
func (s *Stream) Flush(ctx context.Context) error {
	s.mu.Lock()
	target := s.started + 1
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.finished < target && !s.closed {
		if ctx.Err() != nil {
			return fmt.Errorf("flushing the job log: %w", ctx.Err())
		}
		s.cond.Wait()
	}
	return nil
}

// Close publishes what is pending (for up to 2 s) and stops.
func (s *Stream) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.Flush(ctx)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	close(s.stop)
	<-s.done
}

func (s *Stream) loop() {
	defer close(s.done)
	t := time.NewTicker(s.o.FlushEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-t.C:
		}
		s.flushOnce()
	}
}

// flushOnce publishes every pending entry, one message per cluster and
// up to maxBatch bytes.
func (s *Stream) flushOnce() {
	s.mu.Lock()
	s.started++
	pending, dropped := s.pending, s.dropped
	s.pending, s.dropped, s.bytes = map[string][]Entry{}, map[string]int{}, 0
	s.mu.Unlock()
	var failed error
	for cluster, es := range pending {
		if n := dropped[cluster]; n > 0 {
			es = append([]Entry{{Time: time.Now(), Kind: KindLog, Level: "WARN", Source: s.o.Source,
				Msg: fmt.Sprintf("%d job log entries were dropped: the log store could not keep up (or was unreachable)", n)}}, es...)
		}
		for len(es) > 0 {
			n, batch := 0, 0
			for batch < len(es) && (batch == 0 || n+size(es[batch]) <= maxBatch) {
				n += size(es[batch])
				batch++
			}
			data, err := json.Marshal(message{Entries: es[:batch]})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = s.js.Publish(ctx, Subject(cluster), data)
				cancel()
			}
			if err != nil {
				failed = err
				s.requeue(cluster, es)
				break
			}
			es = es[batch:]
		}
	}
	s.mu.Lock()
	s.finished++
	switch {
	case failed != nil && !s.failing:
		s.failing = true
		s.o.Logger.Warn("writing cluster job logs failed; keeping them in memory and retrying", "err", failed)
	case failed == nil && s.failing:
		s.failing = false
		s.o.Logger.Info("writing cluster job logs works again")
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// requeue puts entries that could not be published back in front.
func (s *Stream) requeue(cluster string, es []Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range es {
		n += size(e)
	}
	s.pending[cluster] = append(append([]Entry(nil), es...), s.pending[cluster]...)
	s.bytes += n
	for s.bytes > maxPending {
		s.dropOldestLocked()
	}
}

// message is the body of one stream message.
type message struct {
	Entries []Entry `json:"entries"`
}

// Batch is one stored message: its stream sequence (the cursor to read
// after) and its entries.
type Batch struct {
	Seq     uint64  `json:"seq"`
	Entries []Entry `json:"entries"`
}

// Read returns up to max batches of the cluster's log stored after
// sequence after (0: from the start), oldest first.
func (s *Stream) Read(ctx context.Context, cluster string, after uint64, max int) ([]Batch, error) {
	var out []Batch
	subj := Subject(cluster)
	for len(out) < max {
		m, err := s.st.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading the job log of cluster %s: %w", cluster, err)
		}
		var msg message
		if err := json.Unmarshal(m.Data, &msg); err != nil {
			return out, fmt.Errorf("reading the job log of cluster %s: message %d: %w", cluster, m.Sequence, err)
		}
		out = append(out, Batch{Seq: m.Sequence, Entries: msg.Entries})
		after = m.Sequence
	}
	return out, nil
}

// Last is the sequence of the cluster's newest stored batch (0: none).
func (s *Stream) Last(ctx context.Context, cluster string) (uint64, error) {
	m, err := s.st.GetLastMsgForSubject(ctx, Subject(cluster))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the job log of cluster %s: %w", cluster, err)
	}
	return m.Sequence, nil
}

// Wait returns once the cluster's log has a batch after sequence after,
// or when ctx ends (without error: the caller reads what there is).
func (s *Stream) Wait(ctx context.Context, cluster string, after uint64) error {
	ch := make(chan *nats.Msg, 1)
	sub, err := s.js.Conn().ChanSubscribe(Subject(cluster), ch)
	if err != nil {
		return fmt.Errorf("following the job log of cluster %s: %w", cluster, err)
	}
	defer sub.Unsubscribe()
	switch _, err := s.st.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(Subject(cluster))); {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading the job log of cluster %s: %w", cluster, err)
	}
	select {
	case <-ch:
		// A publish is seen here before the stream acknowledges it;
		// give it the moment it takes to be stored.
		time.Sleep(5 * time.Millisecond)
	case <-ctx.Done():
	}
	return nil
}

// Purge removes a cluster's log (the cluster was forgotten).
func (s *Stream) Purge(ctx context.Context, cluster string) error {
	if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(Subject(cluster))); err != nil {
		return fmt.Errorf("removing the job log of cluster %s: %w", cluster, err)
	}
	return nil
}
