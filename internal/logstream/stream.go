package logstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/jsensure"
	"github.com/loomrt/loom/internal/jsretry"
)

// Redactor gives the secrets a key's entries must never show (nil: none).
type Redactor interface {
	For(key string) *redact.Set
}

// Options configure a Stream; zero values pick the defaults.
type Options struct {
	// Name is the JetStream stream's name (required).
	Name string
	// Prefix is the subjects' prefix, ending in a dot: a key's entries
	// travel on Prefix+key (required).
	Prefix string
	// Description is the stream's description.
	Description string
	// What names the log in messages ("job log", "task log").
	What string
	// Replicas of the stream (1, or 3 on a NATS cluster).
	Replicas int
	// MaxBytes bounds the whole stream (default 256 MiB); the oldest
	// batches go first.
	MaxBytes int64
	// MaxAge drops batches older than this (default 30 days).
	MaxAge time.Duration
	// MaxPerKey bounds the batches kept per key (default 20,000, at most
	// 256 KiB each); the oldest go first.
	MaxPerKey int64
	// Source names this daemon in the entries it writes.
	Source string
	// Secrets are redacted from every entry before it is stored.
	Secrets Redactor
	// FlushEvery is how long entries wait to be batched (default 50 ms).
	FlushEvery time.Duration
	// Paused, when set, is asked before each publish: while it says so
	// (the store is full or nearly), entries are dropped and counted, and
	// each key's log says how many once writes resume. Logs never take
	// the last room a store has for what must be written.
	Paused func() (why string, paused bool)
	// Logger gets the stream's own warnings (entries dropped).
	Logger *slog.Logger
	// Retry waits out what a NATS cluster cannot do right now while the
	// stream is created (a server offline, an election), until the
	// context of Open ends; nil: tried once.
	Retry *jsretry.Waiter
}

// Stream keeps logs in JetStream, one subject per key. Write batches
// entries in memory and publishes them in the background; a batch that
// cannot be published is kept and tried again, up to maxPending bytes in
// all, past which the oldest entries are dropped (and one entry says how
// many).
type Stream struct {
	js jetstream.JetStream
	st jetstream.Stream
	o  Options
	// api is the JetStream API prefix, for batched direct gets.
	api     string
	noBatch atomic.Bool // the server answers direct gets one message at a time

	mu       sync.Mutex
	cond     *sync.Cond
	pending  map[string]*pendingKey
	bytes    int
	dropped  map[string]int
	lost     int    // entries dropped beyond maxDroppedKeys keys
	paused   bool   // the last publish found Paused true
	why      string // and why
	armed    bool   // a flush is due
	started  uint64 // flush cycles started
	finished uint64 // flush cycles finished
	closed   bool
	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	failing  bool
}

type pendingKey struct {
	hdr nats.Header
	es  []Entry
}

// maxPending bounds what waits in memory for the store.
const maxPending = 4 << 20

// maxBatch bounds one message (an external NATS accepts 1 MiB by default).
const maxBatch = 256 << 10

// maxDroppedKeys bounds the keys whose drops are remembered for a note.
const maxDroppedKeys = 4096

// Open creates (or updates) the stream and starts publishing.
func Open(ctx context.Context, js jetstream.JetStream, o Options) (*Stream, error) {
	if o.Name == "" || !strings.HasSuffix(o.Prefix, ".") {
		return nil, errors.New("logstream: a stream needs a name and a subject prefix ending in '.'")
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 20
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 30 * 24 * time.Hour
	}
	if o.MaxPerKey <= 0 {
		o.MaxPerKey = 20000
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = 50 * time.Millisecond
	}
	if o.What == "" {
		o.What = "log"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var st jetstream.Stream
	err := o.Retry.Do(ctx, jsretry.What("stream", o.Name, o.Replicas), func(ctx context.Context) (err error) {
		st, err = jsensure.Stream(ctx, js, jetstream.StreamConfig{
			Name:              o.Name,
			Description:       o.Description,
			Subjects:          []string{o.Prefix + ">"},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          o.Replicas,
			MaxBytes:          o.MaxBytes,
			MaxAge:            o.MaxAge,
			MaxMsgsPerSubject: o.MaxPerKey,
			MaxMsgSize:        maxBatch + 64<<10,
			Discard:           jetstream.DiscardOld,
			AllowDirect:       true,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating stream %s: %w", o.Name, err)
	}
	s := &Stream{js: js, st: st, o: o, api: apiPrefix(js), pending: map[string]*pendingKey{}, dropped: map[string]int{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.loop()
	return s, nil
}

// apiPrefix is the JetStream API prefix js sends requests to.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// Subject is the subject of a key's entries.
func (s *Stream) Subject(key string) string { return s.o.Prefix + key }

// MaxBytes is the stream's bound on what it keeps.
func (s *Stream) MaxBytes() int64 { return s.o.MaxBytes }

// Write stores an entry under key (in the background).
func (s *Stream) Write(key string, e Entry) { s.WriteWith(key, nil, e) }

// WriteWith is Write with headers for the message the entry is published
// in (the newest write's headers win for a batch): what a reader needs to
// know about the key (a task's tenant) without reading its entries.
func (s *Stream) WriteWith(key string, hdr nats.Header, e Entry) {
	if e.Source == "" {
		e.Source = s.o.Source
	}
	var set *redact.Set
	if s.o.Secrets != nil {
		set = s.o.Secrets.For(key)
	}
	s.Put(key, hdr, Clean(e, set))
}

// Put is WriteWith for an entry Clean made already (with the secrets the
// caller knows): it is stored as it is.
func (s *Stream) Put(key string, hdr nats.Header, e Entry) {
	if e.Source == "" {
		e.Source = s.o.Source
	}
	n := Size(e)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.paused {
		s.dropLocked(key, 1)
		s.armLocked()
		return
	}
	for s.bytes+n > maxPending && s.bytes > 0 {
		s.dropOldestLocked()
	}
	p := s.pending[key]
	if p == nil {
		p = &pendingKey{}
		s.pending[key] = p
	}
	if hdr != nil {
		p.hdr = hdr
	}
	p.es = append(p.es, e)
	s.bytes += n
	if s.bytes >= maxBatch {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	s.armLocked()
}

// armLocked makes sure a flush comes within FlushEvery: an idle stream
// does not wake up at all.
func (s *Stream) armLocked() {
	if s.armed {
		return
	}
	s.armed = true
	time.AfterFunc(s.o.FlushEvery, func() {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	})
}

func (s *Stream) dropLocked(key string, n int) {
	if _, ok := s.dropped[key]; ok || len(s.dropped) < maxDroppedKeys {
		s.dropped[key] += n
	} else {
		s.lost += n
	}
}

// dropOldestLocked drops the oldest pending entry of the key with the
// most pending.
func (s *Stream) dropOldestLocked() {
	var worst string
	for k, p := range s.pending {
		if worst == "" || len(p.es) > len(s.pending[worst].es) {
			worst = k
		}
	}
	p := s.pending[worst]
	if p == nil || len(p.es) == 0 {
		s.bytes = 0
		return
	}
	s.bytes -= Size(p.es[0])
	p.es = p.es[1:]
	s.dropLocked(worst, 1)
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
			return fmt.Errorf("flushing the %s: %w", s.o.What, ctx.Err())
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
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		}
		s.flushOnce()
	}
}

// flushOnce publishes every pending entry, one message per key and up to
// maxBatch bytes, and the notes of entries dropped.
func (s *Stream) flushOnce() {
	var why string
	paused := false
	if s.o.Paused != nil {
		why, paused = s.o.Paused()
	}
	s.mu.Lock()
	s.started++
	s.armed = false
	wasPaused := s.paused
	s.paused, s.why = paused, why
	pending := s.pending
	s.pending, s.bytes = map[string]*pendingKey{}, 0
	if paused {
		for k, p := range pending {
			s.dropLocked(k, len(p.es))
		}
		if len(s.dropped) > 0 || s.lost > 0 {
			s.armLocked() // look again: the notes wait for the store
		}
		s.finished++
		s.cond.Broadcast()
		s.mu.Unlock()
		if !wasPaused {
			s.o.Logger.Warn("not storing "+s.o.What+" lines while the store is (nearly) full; they are counted and dropped", "why", why)
		}
		return
	}
	dropped, lost := s.dropped, s.lost
	s.dropped, s.lost = map[string]int{}, 0
	s.mu.Unlock()
	if wasPaused {
		s.o.Logger.Info("storing "+s.o.What+" lines again", "keys_with_dropped_lines", len(dropped), "dropped_for_other_keys", lost)
	}
	if lost > 0 {
		s.o.Logger.Warn(fmt.Sprintf("%d %s lines were dropped without a note in their log", lost, s.o.What))
	}
	for k, n := range dropped {
		if pending[k] == nil {
			pending[k] = &pendingKey{}
		}
		reason := "the log store could not keep up (or was unreachable)"
		if wasPaused {
			reason = "the store was (nearly) full"
		}
		note := Entry{Time: time.Now(), Kind: KindLog, Level: "WARN", Source: s.o.Source,
			Msg: fmt.Sprintf("%d %s lines were dropped here: %s", n, s.o.What, reason)}
		pending[k].es = append([]Entry{note}, pending[k].es...)
	}
	var failed error
	for key, p := range pending {
		es := p.es
		for len(es) > 0 {
			n, batch := 0, 0
			for batch < len(es) && (batch == 0 || n+Size(es[batch]) <= maxBatch) {
				n += Size(es[batch])
				batch++
			}
			data, err := json.Marshal(message{Entries: es[:batch]})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err = s.js.PublishMsg(ctx, &nats.Msg{Subject: s.Subject(key), Header: p.hdr, Data: data})
				cancel()
			}
			if err != nil {
				failed = err
				s.requeue(key, p.hdr, es)
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
		s.o.Logger.Warn("writing "+s.o.What+"s failed; keeping them in memory and retrying", "err", failed)
	case failed == nil && s.failing:
		s.failing = false
		s.o.Logger.Info("writing " + s.o.What + "s works again")
	}
	if failed != nil {
		s.armLocked()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

// requeue puts entries that could not be published back in front.
func (s *Stream) requeue(key string, hdr nats.Header, es []Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range es {
		n += Size(e)
	}
	p := s.pending[key]
	if p == nil {
		p = &pendingKey{hdr: hdr}
		s.pending[key] = p
	}
	p.es = append(append([]Entry(nil), es...), p.es...)
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
// after), when it was stored, its headers and its entries.
type Batch struct {
	Seq     uint64      `json:"seq"`
	Time    time.Time   `json:"-"`
	Header  nats.Header `json:"-"`
	Entries []Entry     `json:"entries"`
}

// Read returns up to max batches of the key's log stored after sequence
// after (0: from the start), oldest first.
func (s *Stream) Read(ctx context.Context, key string, after uint64, max int) ([]Batch, error) {
	if max <= 0 {
		return nil, nil
	}
	if !s.noBatch.Load() {
		out, ok, err := s.readBatched(ctx, key, after, max)
		if ok || err != nil {
			return out, err
		}
		s.noBatch.Store(true)
	}
	var out []Batch
	subj := s.Subject(key)
	for len(out) < max {
		m, err := s.st.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
		}
		b, err := s.decode(key, m.Sequence, m.Time, m.Header, m.Data)
		if err != nil {
			return out, err
		}
		out = append(out, b)
		after = m.Sequence
	}
	return out, nil
}

func (s *Stream) decode(key string, seq uint64, at time.Time, hdr nats.Header, data []byte) (Batch, error) {
	var msg message
	if err := json.Unmarshal(data, &msg); err != nil {
		return Batch{}, fmt.Errorf("reading the %s of %s: message %d: %w", s.o.What, key, seq, err)
	}
	return Batch{Seq: seq, Time: at, Header: hdr, Entries: msg.Entries}, nil
}

// readBatched reads with one batched direct get (NATS 2.11 and later): a
// request, then the messages and an end-of-batch status on one inbox. ok
// is false when the server answered like an older one (one message, no
// batch headers): the caller reads message by message.
func (s *Stream) readBatched(ctx context.Context, key string, after uint64, max int) (out []Batch, ok bool, err error) {
	nc := s.js.Conn()
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(map[string]any{"seq": after + 1, "next_by_subj": s.Subject(key), "batch": max, "max_bytes": 8 << 20})
	if err := nc.PublishRequest(s.api+"DIRECT.GET."+s.o.Name, inbox, req); err != nil {
		return nil, false, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
	}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, true, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
		}
		if len(m.Data) == 0 {
			switch m.Header.Get("Status") {
			case "204", "404": // end of batch; nothing (more) to read
				return out, true, nil
			case "":
			default:
				desc := m.Header.Get("Description")
				return out, true, fmt.Errorf("reading the %s of %s: %s %s", s.o.What, key, m.Header.Get("Status"), desc)
			}
		}
		if m.Header.Get(jetstream.SequenceHeader) == "" {
			return out, true, fmt.Errorf("reading the %s of %s: a direct get answered without its headers", s.o.What, key)
		}
		if len(out) == 0 && m.Header.Get("Nats-Num-Pending") == "" {
			return nil, false, nil
		}
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		b, err := s.decode(key, seq, at, m.Header, m.Data)
		if err != nil {
			return out, true, err
		}
		out = append(out, b)
	}
}

// Last is the sequence of the key's newest stored batch (0: none).
func (s *Stream) Last(ctx context.Context, key string) (uint64, error) {
	m, err := s.st.GetLastMsgForSubject(ctx, s.Subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
	}
	return m.Sequence, nil
}

// LastBatch is the key's newest stored batch; ok is false when it has
// none.
func (s *Stream) LastBatch(ctx context.Context, key string) (b Batch, ok bool, err error) {
	m, err := s.st.GetLastMsgForSubject(ctx, s.Subject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Batch{}, false, nil
	}
	if err != nil {
		return Batch{}, false, fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
	}
	b, err = s.decode(key, m.Sequence, m.Time, m.Header, m.Data)
	return b, err == nil, err
}

// Wait returns once the key's log has a batch after sequence after, or
// when ctx ends (without error: the caller reads what there is).
func (s *Stream) Wait(ctx context.Context, key string, after uint64) error {
	ch := make(chan *nats.Msg, 1)
	sub, err := s.js.Conn().ChanSubscribe(s.Subject(key), ch)
	if err != nil {
		return fmt.Errorf("following the %s of %s: %w", s.o.What, key, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	switch _, err := s.st.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(s.Subject(key))); {
	case err == nil:
		return nil
	case !errors.Is(err, jetstream.ErrMsgNotFound):
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("reading the %s of %s: %w", s.o.What, key, err)
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

// Notify calls f whenever a batch of key's log is published (by any
// daemon), until the returned stop is called. f runs on the connection's
// goroutine: it must not block.
func (s *Stream) Notify(key string, f func()) (stop func(), err error) {
	sub, err := s.js.Conn().Subscribe(s.Subject(key), func(*nats.Msg) { f() })
	if err != nil {
		return nil, fmt.Errorf("following the %s of %s: %w", s.o.What, key, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Purge removes a key's log.
func (s *Stream) Purge(ctx context.Context, key string) error {
	if err := s.st.Purge(ctx, jetstream.WithPurgeSubject(s.Subject(key))); err != nil {
		return fmt.Errorf("removing the %s of %s: %w", s.o.What, key, err)
	}
	return nil
}

// StoreShare is the part of a store's capacity one log stream may
// reserve: the logs never crowd out the task records they describe.
const StoreShare = 8

// minFit is the least a log stream is given, however small the store.
const minFit = 64 << 10

// Fit bounds the size of log stream name by the store's capacity (what it
// can still promise, queue.Capacity; 0: unknown or unlimited): at most a
// StoreShare-th of it, counting what the stream reserved already when it
// exists. It returns the size to use and, when it is less than want, a
// sentence saying why.
func Fit(ctx context.Context, js jetstream.JetStream, name string, want, capacity int64) (int64, string) {
	if capacity <= 0 {
		return want, ""
	}
	if st, err := js.Stream(ctx, name); err == nil {
		capacity += max(st.CachedInfo().Config.MaxBytes, 0)
	}
	limit := max(capacity/StoreShare, minFit)
	if want <= limit {
		return want, ""
	}
	return limit, fmt.Sprintf("%s keeps at most %s: an eighth of what the store can hold (%s), not the %s asked for",
		name, size(limit), size(capacity), size(want))
}

func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", n>>10)
	}
}
