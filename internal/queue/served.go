package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/jsensure"
	"github.com/loomrt/loom/internal/jsretry"
)

// ServedBucket is the KV bucket of the plugin types the daemons serve:
// one key per (type, daemon), <family>.<type>.<owner>, refreshed every
// third of Config.ServedTTL while the daemon serves the type. It is kept
// in memory: after a restart of the server the daemons announce
// themselves again within a heartbeat.
const ServedBucket = "LOOM_SERVED"

// servedEntry is one daemon's announcement that it serves a route.
type servedEntry struct {
	Family string    `json:"family"`
	Type   string    `json:"type"`
	Owner  string    `json:"owner"`
	At     time.Time `json:"at"`
	// Caps are what the daemon can do that older daemons cannot
	// (Config.Capabilities): an announcement without them, an older
	// loomd's, can do none of it. Version is the daemon's loomd version.
	Caps    []string `json:"caps,omitempty"`
	Version string   `json:"version,omitempty"`
}

// served tracks which routes any daemon serves, from the announcements
// in ServedBucket, and announces this daemon's own.
type served struct {
	kv   jetstream.KeyValue
	ttl  time.Duration
	kick chan struct{}

	mu        sync.Mutex
	seen      map[string]seenEntry // key -> latest announcement
	announced map[string]bool      // keys this daemon wrote
	// short are the keys of announcements that lack one of caps, this
	// daemon's own capabilities (older daemons'): Lacking looks only at
	// them. lacking is sent to when one appears, or comes back after a
	// silence of over a TTL.
	caps    []string
	short   map[string]bool
	lacking chan struct{}

	stop context.CancelFunc
	wg   sync.WaitGroup

	failing bool // the last announcement failed (announce loop only)

	// This daemon's own announcements coming back through the watch are
	// the proof that its view of the bucket is current (guarded by mu).
	owner     string
	lastSelf  time.Time // local time the last one was seen
	viewSince time.Time // when they were seen again after a gap
}

type seenEntry struct {
	route   Route
	owner   string
	caps    []string
	version string
	at      time.Time // local time it was seen (or the server's, for the first snapshot)
}

// servedConfig is the served bucket's configuration. It lives in memory,
// so a restarted embedded server needs it created again.
func (q *Queue) servedConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      ServedBucket,
		Description: "plugin types loomd daemons serve, key <family>.<type>.<owner>, refreshed by each daemon's heartbeat",
		History:     1,
		TTL:         2 * q.cfg.ServedTTL, // removes what a dead daemon left behind
		Storage:     jetstream.MemoryStorage,
		Replicas:    q.cfg.Replicas,
	}
}

// servedBucket creates or opens the served bucket.
func (q *Queue) servedBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kcfg := q.servedConfig()
	var kv jetstream.KeyValue
	create := func(ctx context.Context) (err error) {
		kv, err = jsensure.KeyValue(ctx, q.js, kcfg)
		return err
	}
	// What the cluster cannot do now is waited out; what is left (no
	// memory storage on the server: max_memory_store 0, or a bucket
	// another daemon made on file) falls back to file storage.
	if err := q.cfg.Retry.Do(ctx, q.what("kv bucket", ServedBucket), create); err != nil {
		if jsretry.Transient(err) {
			return nil, fmt.Errorf("creating kv bucket %s: %w", ServedBucket, err)
		}
		kcfg.Storage = jetstream.FileStorage
		if ferr := q.cfg.Retry.Do(ctx, q.what("kv bucket", ServedBucket), create); ferr != nil {
			return nil, fmt.Errorf("creating kv bucket %s: in memory: %w; on file: %w", ServedBucket, err, ferr)
		}
	}
	return kv, nil
}

// startServed opens the bucket, follows it, and starts announcing the
// routes given to SetTypes. It returns once the current announcements are
// read, so Served answers from the start.
func (q *Queue) startServed(ctx context.Context) error {
	kv, err := q.servedBucket(ctx)
	if err != nil {
		return err
	}
	s := &served{kv: kv, ttl: q.cfg.ServedTTL, kick: make(chan struct{}, 1), seen: map[string]seenEntry{}, announced: map[string]bool{}, owner: q.cfg.Owner,
		caps: q.cfg.Capabilities, short: map[string]bool{}, lacking: q.lacking}
	w, err := kv.WatchAll(context.Background())
	if err != nil {
		return fmt.Errorf("watching kv bucket %s: %w", ServedBucket, err)
	}
	synced := make(chan struct{})
	lctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		defer func() { _ = w.Stop() }()
		initial := true
		for {
			select {
			case <-lctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if initial {
						initial = false
						close(synced)
					}
					continue
				}
				s.observe(e, initial)
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		s.announceLoop(lctx, q)
	}()
	q.served = s
	select {
	case <-synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("reading kv bucket %s: %w", ServedBucket, ctx.Err())
	}
}

// observe records one change of the bucket.
func (s *served) observe(e jetstream.KeyValueEntry, initial bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(s.seen, e.Key())
		delete(s.short, e.Key())
		return
	}
	var a servedEntry
	if json.Unmarshal(e.Value(), &a) != nil || a.Family == "" || a.Type == "" {
		return
	}
	at := time.Now()
	if initial {
		at = e.Created() // written before we looked: may already be stale
	} else if a.Owner == s.owner {
		if !s.lastSelf.IsZero() && at.Sub(s.lastSelf) > s.ttl*2/3 {
			s.viewSince = at // a round of ours went missing: an outage, or a stalled watch
		}
		s.lastSelf = at
	}
	prev, had := s.seen[e.Key()]
	s.seen[e.Key()] = seenEntry{route: Route{Family: a.Family, Type: a.Type}, owner: a.Owner, caps: a.Caps, version: a.Version, at: at}
	if hasAll(a.Caps, s.caps) {
		delete(s.short, e.Key())
		return
	}
	if !s.short[e.Key()] || !had || at.Sub(prev.at) > s.ttl {
		select {
		case s.lacking <- struct{}{}:
		default:
		}
	}
	s.short[e.Key()] = true
}

// hasAll reports whether caps holds every one of want.
func hasAll(caps, want []string) bool {
	for _, w := range want {
		if !slices.Contains(caps, w) {
			return false
		}
	}
	return true
}

// announceLoop writes this daemon's routes every third of the TTL, and at
// once when SetTypes changed them.
func (s *served) announceLoop(ctx context.Context, q *Queue) {
	t := time.NewTicker(s.ttl / 3)
	defer t.Stop()
	for {
		s.announce(ctx, q)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

func (s *served) announce(ctx context.Context, q *Queue) {
	routes := q.Types()
	want := map[string]Route{}
	for _, r := range routes {
		want[servedKey(r, q.cfg.Owner)] = r
	}
	s.mu.Lock()
	var gone []string
	for k := range s.announced {
		if _, ok := want[k]; !ok {
			gone = append(gone, k)
		}
	}
	s.mu.Unlock()
	var failed error
	for k, r := range want {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.kv.Put(wctx, k, mustJSON(servedEntry{Family: r.Family, Type: r.Type, Owner: q.cfg.Owner, At: time.Now().UTC(),
			Caps: q.cfg.Capabilities, Version: q.cfg.Version}))
		cancel()
		if err != nil {
			failed = err // the next round tries again; no use waiting on each type now
			q.noteTrouble()
			break
		}
		s.mu.Lock()
		s.announced[k] = true
		s.mu.Unlock()
	}
	for _, k := range gone {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.kv.Delete(wctx, k)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			s.mu.Lock()
			delete(s.announced, k)
			s.mu.Unlock()
		}
	}
	switch { // one line when announcing starts failing, one when it recovers
	case failed != nil && ctx.Err() == nil && !s.failing:
		s.failing = true
		q.log.Warn("announcing the served plugin types failed; retrying every few seconds (meanwhile submits may answer served:false for them)", "err", failed)
	case failed == nil && s.failing:
		s.failing = false
		q.log.Info("announcing the served plugin types works again")
	}
}

// close stops announcing and withdraws this daemon's announcements, so
// submits stop counting on it at once.
func (s *served) close() {
	if s == nil {
		return
	}
	s.stop()
	s.wg.Wait()
	s.mu.Lock()
	keys := make([]string, 0, len(s.announced))
	for k := range s.announced {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	// One short deadline for all: a daemon whose connection is gone must not
	// wait per type to stop; its announcements then lapse after the TTL.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, k := range keys {
		if s.kv.Delete(ctx, k) != nil && ctx.Err() != nil {
			return
		}
	}
}

// ownerLive reports whether the daemon named owner announced any served
// type within the TTL: it is alive and connected. It also answers true
// while this daemon cannot tell: its own announcements are not coming
// back through the watch, or came back after a gap less than a TTL ago.
// After a broker outage every daemon's announcements lapse, and the
// others' resume a round or two after ours: silence then proves nothing,
// and taking their tasks over would run hooks twice.
func (s *served) ownerLive(owner string) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.seen {
		if e.owner == owner && now.Sub(e.at) <= s.ttl {
			return true
		}
	}
	return s.stale(now)
}

// stale reports whether this daemon's view of the announcements cannot
// be trusted now: its own are not coming back through the watch, or came
// back after a gap less than a TTL ago (s.mu held).
func (s *served) stale(now time.Time) bool {
	return len(s.announced) > 0 && !s.lastSelf.IsZero() && (now.Sub(s.lastSelf) > s.ttl*2/3 || now.Sub(s.viewSince) < s.ttl)
}

// Lacking names the daemons that announced themselves within
// Config.ServedTTL without capability (older loomd versions announce
// none), sorted, each as "<owner>" or "<owner> (loomd <version>)"; sure
// is false while this daemon's own view of the announcements is stale
// (after a broker outage, for a TTL: a daemon that joined meanwhile may
// not be seen yet). It reads the view the watch keeps, without a call to
// the server: cheap enough for every round of a cluster job's state. A
// daemon that serves no plugin type announces nothing and is not seen.
func (q *Queue) Lacking(capability string) (owners []string, sure bool) {
	s := q.served
	if s == nil {
		return nil, true
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := s.short // the others have every capability of this daemon's
	if !slices.Contains(s.caps, capability) {
		keys = nil
		for k := range s.seen {
			if !slices.Contains(s.seen[k].caps, capability) {
				if keys == nil {
					keys = map[string]bool{}
				}
				keys[k] = true
			}
		}
	}
	for k := range keys {
		e, ok := s.seen[k]
		if !ok || now.Sub(e.at) > s.ttl || slices.Contains(e.caps, capability) {
			continue
		}
		name := e.owner
		if e.version != "" {
			name += " (loomd " + e.version + ")"
		}
		if !slices.Contains(owners, name) {
			owners = append(owners, name)
		}
	}
	slices.Sort(owners)
	return owners, !s.stale(now)
}

// LackingSeen receives when a daemon announcing itself without one of
// Config.Capabilities appears, or announces itself again after a silence
// of over Config.ServedTTL: whoever relies on a capability looks at
// Lacking again at once (one value is buffered; nil before Open).
func (q *Queue) LackingSeen() <-chan struct{} { return q.lacking }

// Served reports whether this daemon or any other one serves route, by
// their announcements of the last Config.ServedTTL, and lists every route
// served (sorted), for a message naming them. A route this daemon serves
// itself is answered at once, without the list (nil): every accepted
// submit asks, and no caller names others then.
func (q *Queue) Served(route Route) (bool, []Route) {
	q.w.mu.Lock()
	_, here := q.w.routes[route]
	here = here || q.w.expected[route]
	q.w.mu.Unlock()
	if here {
		return true, nil
	}
	all := map[Route]bool{}
	for _, r := range q.Types() {
		all[r] = true
	}
	if s := q.served; s != nil {
		now := time.Now()
		s.mu.Lock()
		for k, e := range s.seen {
			switch age := now.Sub(e.at); {
			case age <= s.ttl:
				all[e.route] = true
			case age > 2*s.ttl: // the server has expired it too
				delete(s.seen, k)
			}
		}
		s.mu.Unlock()
	}
	out := make([]Route, 0, len(all))
	for r := range all {
		out = append(out, r)
	}
	slices.SortFunc(out, cmpRoute)
	return all[route], out
}

// announceTypes makes the announcer write the current routes now.
func (q *Queue) announceTypes() {
	if q.served == nil {
		return
	}
	select {
	case q.served.kick <- struct{}{}:
	default:
	}
}

// servedKey is <family>.<type>.<owner>, each part escaped to the
// characters a KV key token may hold.
func servedKey(r Route, owner string) string {
	return keyToken(r.Family) + "." + keyToken(r.Type) + "." + keyToken(owner)
}

func keyToken(s string) string {
	var b strings.Builder
	escapeName(&b, s)
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}
