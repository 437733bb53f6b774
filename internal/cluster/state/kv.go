package state

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/loomrt/loom/internal/jsensure"
	"github.com/loomrt/loom/internal/jsretry"
)

// Bucket is the JetStream key-value bucket that holds cluster state, beside
// the task queue's buckets.
const Bucket = "LOOM_CLUSTERS"

// KVStore keeps clusters in a JetStream key-value bucket, one key per
// record, so no value grows with the cluster's size (NATS caps a message
// at 1 MiB by default) and a round of changes writes only what changed:
//
//	<name>.c                  the cluster (status, spec, counters, job ids)
//	<name>.n.<node id>        a node
//	<name>.j.<job id>         a job, without its tasks
//	<name>.t.<job id>.<index> a task of a job (plan index), once it ran
//	<name>.lock               who is applying the cluster, until when
//
// Cluster names, node ids and job ids are lower-case DNS labels, valid in
// keys. Writes within a round go out together and are all acknowledged
// before the round is done; nodes are written before tasks, so a crash in
// between leaves a finished task "running" (asked for again by its id,
// its result merged again) rather than "done" with its result lost. On a
// server that takes atomic batches (NATS 2.12 and later) a round of
// minBatch writes or more goes as one batch, stored whole or not at all
// with one fsync: with --fsync always, writing key by key costs an fsync
// per key (1-2 ms each on a loaded disk).
type KVStore struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
	// Timeout bounds each call (default 30 s).
	Timeout time.Duration
	// Now is the clock of lock leases (tests).
	Now func() time.Time
	// atomic means the bucket's stream takes atomic batches (NATS 2.12
	// and later): a round's writes go as one batch, stored with one
	// fsync instead of one per key.
	atomic bool

	mu sync.Mutex
	// rounds counts the journal's rounds each cluster has since its last
	// Put here.
	rounds map[string]int
	// wrote holds, per cluster, the journal's rounds this store wrote
	// since its last Put here and the keys their changes touch: a Put
	// need not decode those rounds again to know which records they
	// change. Guarded by the cluster's write lock (the map by mu).
	wrote map[string]*wroteRounds
	// compact overrides compactRounds (tests); keepRounds leaves the
	// rounds a Put folded into the records in place, as a crash right
	// before their removal would (tests).
	compact    int
	keepRounds bool
	// gate, when set, says which live daemons sharing the store cannot
	// read the journal and whether this daemon can tell (SetJournalGate).
	gate func() (lacking []string, sure bool)
	// locks serialize the writes of a cluster through this store: a
	// round of its job, and a fold of FoldJournal.
	locks map[string]*sync.Mutex
}

// wroteRounds is what a store knows of the journal's rounds it wrote.
type wroteRounds struct {
	rounds map[string]bool // their keys
	keys   map[string]bool // the keys their changes touch
}

// JournalCapability is what a loomd that reads the cluster state's
// journal announces (queue.Config.Capabilities). A daemon whose
// announcement lacks it, an older loomd, reads the records alone.
const JournalCapability = "cluster-journal"

// SetJournalGate makes Append ask lacking before each round: the round
// goes to the journal only while it names no daemon and is sure (it
// names the live daemons sharing the store that cannot read the journal,
// older loomd versions, and says whether this daemon can tell right
// now). Otherwise the round is written to its keys, as before the
// journal, after folding the rounds this store wrote into the records:
// such a daemon taking the job over reads complete records. lacking is
// called for every round: it must answer from memory. Call it before the
// store is used.
func (s *KVStore) SetJournalGate(lacking func() (daemons []string, sure bool)) { s.gate = lacking }

// journalOK reports whether a round may go to the journal now.
func (s *KVStore) journalOK() bool {
	if s.gate == nil {
		return true
	}
	lacking, sure := s.gate()
	return sure && len(lacking) == 0
}

// lock takes cluster name's write lock; it returns its release.
func (s *KVStore) lock(name string) func() {
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*sync.Mutex{}
	}
	m := s.locks[name]
	if m == nil {
		m = &sync.Mutex{}
		s.locks[name] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (s *KVStore) compactAfter() int {
	if s.compact > 0 {
		return s.compact
	}
	return compactRounds
}

// OpenKV creates (or opens) the cluster bucket on js. What a NATS cluster
// cannot do right now (a server offline, an election) retry waits out
// until ctx ends (nil: tried once).
func OpenKV(ctx context.Context, js jetstream.JetStream, replicas int, retry *jsretry.Waiter) (*KVStore, error) {
	kv, err := OpenBucket(ctx, js, Bucket, "loomd cluster state: clusters, nodes, jobs and their tasks (loomd apply)", replicas, retry)
	if err != nil {
		return nil, err
	}
	return &KVStore{kv: kv, js: js, atomic: atomicBatches(ctx, js, Bucket)}, nil
}

// OpenBucket creates (or finds) the key-value bucket of the cluster
// state or the cluster jobs, with one revision per key, and opens it for
// reads from its stream's leader: a record read right after its CAS
// write must not come from a replica that has not applied it yet. What a
// NATS cluster cannot do right now retry waits out until ctx ends (nil:
// tried once).
func OpenBucket(ctx context.Context, js jetstream.JetStream, bucket, description string, replicas int, retry *jsretry.Waiter) (jetstream.KeyValue, error) {
	if replicas < 1 {
		replicas = 1
	}
	var kv jetstream.KeyValue
	err := retry.Do(ctx, jsretry.What("kv bucket", bucket, replicas), func(ctx context.Context) error {
		// Not CreateOrUpdateKeyValue: it would undo the stream's
		// adjustments (direct gets off, atomic batches on) at every
		// start, under the daemons using it.
		err := jsensure.AdjustedKeyValue(ctx, js, jetstream.KeyValueConfig{
			Bucket:      bucket,
			Description: description,
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    replicas,
		})
		if err != nil {
			return fmt.Errorf("creating kv bucket %s: %w", bucket, err)
		}
		kv, err = LeaderReads(ctx, js, bucket)
		return err
	})
	return kv, err
}

// atomicBatches turns atomic batch publishing on for bucket's stream and
// reports whether the server took it: NATS servers before 2.12 do not
// know it, and the store then writes key by key.
func atomicBatches(ctx context.Context, js jetstream.JetStream, bucket string) bool {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return false
	}
	cfg := stream.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return true
	}
	cfg.AllowAtomicPublish = true
	info, err := js.UpdateStream(ctx, cfg)
	return err == nil && info.CachedInfo().Config.AllowAtomicPublish
}

// LeaderReads binds bucket so that its reads go to its stream's leader.
// A key-value bucket's stream allows direct gets, which any replica
// answers: on a NATS cluster, a read right after a write (this daemon's
// or another's) may get the value from before it. The cluster state and
// the job records are planned from and written back with a revision
// check: a stale read plans from a state that is gone. So the stream's
// direct gets are turned off and the bucket bound again (a handle decides
// how it reads when it is bound: another daemon's CreateOrUpdateKeyValue
// turning them on again changes no handle bound here).
func LeaderReads(ctx context.Context, js jetstream.JetStream, bucket string) (jetstream.KeyValue, error) {
	stream, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", bucket, err)
	}
	if cfg := stream.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("kv bucket %s: turning direct gets off: %w", bucket, err)
		}
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("kv bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// meta is what <name>.c holds: the cluster without its nodes and jobs.
type meta struct {
	Cluster
	JobIDs []string `json:"jobIds"`
}

func (s *KVStore) ctx() (context.Context, context.CancelFunc) {
	d := s.Timeout
	if d <= 0 {
		d = 30 * time.Second
	}
	return context.WithTimeout(context.Background(), d)
}

func checkName(name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("cluster name %q: %w", name, ErrBadName)
	}
	return nil
}

// read returns every key of the cluster with its value and revision
// (lock excluded).
func (s *KVStore) read(ctx context.Context, name string) (map[string][]byte, map[string]uint64, error) {
	w, err := s.kv.Watch(ctx, name+".>", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("cluster %s: reading its state from bucket %s: %w", name, Bucket, err)
	}
	defer w.Stop()
	out, revs := map[string][]byte{}, map[string]uint64{}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("cluster %s: reading its state from bucket %s: the watch ended early", name, Bucket)
			}
			if e == nil {
				return out, revs, nil
			}
			if e.Key() != name+".lock" {
				out[e.Key()] = e.Value()
				revs[e.Key()] = e.Revision()
			}
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("cluster %s: reading its state from bucket %s: %w", name, Bucket, ctx.Err())
		}
	}
}

// Get implements Store.
func (s *KVStore) Get(name string) (*Cluster, error) {
	return s.GetView(name, View{})
}

// View is what GetView decodes of a cluster. The zero View is the whole
// cluster (Get).
type View struct {
	// Job, when set, keeps that job alone: the other jobs' records are
	// not decoded (none when the cluster has no such job).
	Job string
	// Brief cuts the records of the tasks that finished well (done,
	// skipped) to their status, read without decoding the rest: what a
	// summary shows.
	Brief bool
}

// GetView reads a cluster as v shows it: decoding a 100-node cluster's
// thousand records was most of a whole read (about 6 ms of a 16 ms GET
// /state), and what a summary shows of them is mostly a status. A
// cluster read with a View other than the zero one is for showing, never
// for a Put: it lacks what the view leaves out.
func (s *KVStore) GetView(name string, v View) (*Cluster, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	vals, revs, err := s.read(ctx, name)
	if err != nil {
		return nil, err
	}
	return decodeView(name, vals, revs, v)
}

// decode builds the cluster from its keys: the records, then the rounds
// of the journal (<name>.r.*) in the order they were written, each change
// applied only over a record written before it.
func decode(name string, vals map[string][]byte, revs map[string]uint64) (*Cluster, error) {
	return decodeView(name, vals, revs, View{})
}

// finishedWell is the status of a task record that finished well (done,
// skipped) as this store writes it (encoding/json, Status the first
// field), read from its first bytes; "" for any other record.
func finishedWell(b []byte) string {
	for _, st := range [...]string{TaskDone, TaskSkipped} {
		p := `{"status":"` + st + `"`
		if len(b) > len(p) && string(b[:len(p)]) == p && (b[len(p)] == ',' || b[len(p)] == '}') {
			return st
		}
	}
	return ""
}

func decodeView(name string, vals map[string][]byte, revs map[string]uint64, view View) (*Cluster, error) {
	raw, ok := vals[name+".c"]
	if !ok {
		return nil, fmt.Errorf("cluster %s: %w (in bucket %s)", name, ErrNotFound, Bucket)
	}
	var m meta
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("cluster %s: decoding its state (key %s.c): %w", name, name, err)
	}
	c := m.Cluster
	c.Nodes = map[string]*Node{}
	jobs := map[string]*Job{}
	for key, v := range vals {
		kind, rest, _ := strings.Cut(strings.TrimPrefix(key, name+"."), ".")
		var err error
		switch kind {
		case "n":
			var n Node
			if err = json.Unmarshal(v, &n); err == nil {
				c.Nodes[n.ID] = &n
			}
		case "j":
			if view.Job != "" && rest != view.Job {
				continue
			}
			var j Job
			if err = json.Unmarshal(v, &j); err == nil {
				if prev := jobs[j.ID]; prev != nil {
					j.Tasks = prev.Tasks
				}
				jobs[j.ID] = &j
			}
		case "t":
			jid, idx, _ := strings.Cut(rest, ".")
			if view.Job != "" && jid != view.Job {
				continue
			}
			var t Task
			i, aerr := strconv.Atoi(idx)
			if st := finishedWell(v); view.Brief && st != "" {
				t.Status = st
			} else {
				aerr = errors.Join(aerr, json.Unmarshal(v, &t))
			}
			if err = aerr; err == nil {
				j := jobs[jid]
				if j == nil {
					j = &Job{ID: jid}
					jobs[jid] = j
				}
				if j.Tasks == nil {
					j.Tasks = map[int]*Task{}
				}
				j.Tasks[i] = &t
			}
		}
		if err != nil {
			return nil, fmt.Errorf("cluster %s: decoding key %s: %w", name, key, err)
		}
	}
	for _, id := range m.JobIDs {
		if j := jobs[id]; j != nil && j.Action != "" {
			if j.Tasks == nil {
				j.Tasks = map[int]*Task{}
			}
			c.Jobs = append(c.Jobs, j)
		}
	}
	if err := replay(&c, vals, revs); err != nil {
		return nil, err
	}
	if view.Brief {
		for _, j := range c.Jobs {
			for i, t := range j.Tasks {
				if t != nil && (t.Status == TaskDone || t.Status == TaskSkipped) {
					j.Tasks[i] = &Task{Status: t.Status} // a round's whole record, too
				}
			}
		}
	}
	return &c, nil
}

// roundKind is the kind of the keys of the journal's rounds.
const roundKind = "r"

// round is what a journal key holds: the changes of one Append.
type round struct {
	Changes []Change `json:"changes"`
}

// replay applies the journal's rounds to c in the order they were
// written. A change to a key whose record was written after the round (a
// Put since) is already in that record and is skipped.
func replay(c *Cluster, vals map[string][]byte, revs map[string]uint64) error {
	prefix := c.Name + "." + roundKind + "."
	var keys []string
	for k := range vals {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Slice(keys, func(i, j int) bool { return revs[keys[i]] < revs[keys[j]] })
	newer := func(key string, rev uint64) bool { r, ok := revs[key]; return !ok || r < rev }
	for _, k := range keys {
		var r round
		if err := json.Unmarshal(vals[k], &r); err != nil {
			return fmt.Errorf("cluster %s: decoding key %s: %w", c.Name, k, err)
		}
		rev := revs[k]
		for _, ch := range r.Changes {
			if ch.Node != nil && newer(c.Name+".n."+ch.Node.ID, rev) {
				if c.Nodes == nil {
					c.Nodes = map[string]*Node{}
				}
				c.Nodes[ch.Node.ID] = ch.Node
			}
			if ch.Status != "" && newer(c.Name+".c", rev) {
				c.Status = ch.Status
			}
			if ch.Job == "" {
				continue
			}
			for _, j := range c.Jobs {
				if j.ID != ch.Job {
					continue
				}
				if ch.Task != nil && ch.Rec != nil && newer(taskKey(c.Name, j.ID, *ch.Task), rev) {
					if j.Tasks == nil {
						j.Tasks = map[int]*Task{}
					}
					j.Tasks[*ch.Task] = ch.Rec
				}
				if ch.JobStatus != "" && newer(c.Name+".j."+j.ID, rev) {
					j.Status, j.Message = ch.JobStatus, ch.Message
				}
			}
		}
	}
	return nil
}

// encode is every key of the cluster with its value.
func encode(c *Cluster) (map[string][]byte, error) {
	out := map[string][]byte{}
	put := func(key string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("cluster %s: encoding %s: %w", c.Name, key, err)
		}
		out[key] = data
		return nil
	}
	m := meta{Cluster: *c}
	m.Nodes, m.Jobs = nil, nil
	for _, j := range c.Jobs {
		m.JobIDs = append(m.JobIDs, j.ID)
	}
	if err := put(c.Name+".c", m); err != nil {
		return nil, err
	}
	for id, n := range c.Nodes {
		if err := put(c.Name+".n."+id, n); err != nil {
			return nil, err
		}
	}
	for _, j := range c.Jobs {
		h := *j
		h.Tasks = nil
		if err := put(c.Name+".j."+j.ID, h); err != nil {
			return nil, err
		}
		for i, t := range j.Tasks {
			if untouched(t) {
				continue // absent means pending: a big job's start writes no task
			}
			if err := put(taskKey(c.Name, j.ID, i), t); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// untouched is a task that never ran: the store keeps no record of it.
func untouched(t *Task) bool {
	return t.Status == TaskPending && len(t.Runs) == 0 && t.Message == ""
}

func taskKey(name, job string, i int) string { return name + ".t." + job + "." + strconv.Itoa(i) }

// Put implements Store: it writes the keys whose value changed and
// deletes those the cluster no longer has (removed nodes).
func (s *KVStore) Put(c *Cluster) error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	defer s.lock(c.Name)()
	return s.put(c)
}

// put is Put with the cluster's write lock held.
func (s *KVStore) put(c *Cluster) error {
	want, err := encode(c)
	if err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	have, revs, err := s.read(ctx, c.Name)
	if err != nil {
		return err
	}
	// With rounds in the journal, what a reader sees of a key is the
	// record with the rounds applied: a key a round changed is written
	// even where its record equals want, so that once the rounds are gone
	// (or if they outlive this Put) every key reads as want.
	var rounds []string
	var lastRound uint64
	touched := map[string]bool{}
	s.mu.Lock()
	wrote := s.wrote[c.Name]
	s.mu.Unlock()
	for k, v := range have {
		if strings.HasPrefix(k, c.Name+"."+roundKind+".") {
			rounds = append(rounds, k)
			lastRound = max(lastRound, revs[k])
			if wrote != nil && wrote.rounds[k] {
				continue // its keys are in wrote.keys
			}
			if err := roundTouches(c.Name, k, v, touched); err != nil {
				return err
			}
		}
	}
	if len(rounds) > 0 && wrote != nil {
		for k := range wrote.keys {
			touched[k] = true
		}
	}
	var puts, dels []string
	for k, v := range want {
		old, ok := have[k]
		if !ok || touched[k] || hash(old) != hash(v) {
			puts = append(puts, k)
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, c.Name+"."+roundKind+".") {
			dels = append(dels, k)
		}
	}
	// The cluster record last: a reader that sees it sees the rest.
	sort.Slice(puts, func(i, j int) bool { return puts[j] == c.Name+".c" || (puts[i] != c.Name+".c" && puts[i] < puts[j]) })
	// Records first, then the journal's rounds go (everything they said
	// is in the records now), then removed keys: a removed key's delete
	// marker is invisible to read, so a round that wrote the key must be
	// gone before the key is, or replay would bring it back. A crash in
	// between leaves the key, as if the removal had not run yet.
	if s.atomic && len(puts) >= minBatch {
		err = s.writeBatch(ctx, puts, want)
	} else {
		err = s.write(ctx, c.Name, puts, want, nil)
	}
	kept := len(rounds) > 0 && s.keepRounds
	if err == nil && len(rounds) > 0 && !kept {
		err = s.dropRounds(ctx, c.Name, lastRound)
	}
	if err == nil && len(dels) > 0 && !kept {
		err = s.write(ctx, c.Name, nil, nil, dels)
	}
	if err != nil {
		return fmt.Errorf("cluster %s: saving its state: %w", c.Name, err)
	}
	s.mu.Lock()
	delete(s.rounds, c.Name)
	delete(s.wrote, c.Name)
	s.mu.Unlock()
	return nil
}

// roundHead is what roundTouches reads of a round: which keys its
// changes are for, not their values (a round of a hundred tasks is tens
// of kilobytes; decoding every round and the records, and encoding the
// result, to compare, took a 100-node create's last save 20-30 ms).
type roundHead struct {
	Changes []struct {
		Job  string     `json:"job"`
		Task *int       `json:"task"`
		Rec  jsonNotNil `json:"rec"`
		Node *struct {
			ID string `json:"id"`
		} `json:"node"`
		Status    string `json:"status"`
		JobStatus string `json:"jobStatus"`
	} `json:"changes"`
}

// jsonNotNil records that a field is present and not null, skipping its
// value.
type jsonNotNil bool

func (p *jsonNotNil) UnmarshalJSON(b []byte) error {
	*p = string(b) != "null"
	return nil
}

// roundTouches adds to touched the keys of cluster name whose value the
// journal's round (key, value v) may change on replay: the keys replay
// writes.
func roundTouches(name, key string, v []byte, touched map[string]bool) error {
	var r roundHead
	if err := json.Unmarshal(v, &r); err != nil {
		return fmt.Errorf("cluster %s: decoding key %s: %w", name, key, err)
	}
	for _, ch := range r.Changes {
		c := Change{Job: ch.Job, Task: ch.Task, Status: ch.Status, JobStatus: ch.JobStatus}
		if ch.Node != nil {
			c.Node = &Node{ID: ch.Node.ID}
		}
		if ch.Rec {
			c.Rec = &Task{}
		}
		touchedBy(name, []Change{c}, touched)
	}
	return nil
}

// touchedBy adds to touched the keys of cluster name that replaying
// changes writes.
func touchedBy(name string, changes []Change, touched map[string]bool) {
	for _, ch := range changes {
		if ch.Node != nil {
			touched[name+".n."+ch.Node.ID] = true
		}
		if ch.Status != "" {
			touched[name+".c"] = true
		}
		if ch.Job == "" {
			continue
		}
		if ch.Task != nil && ch.Rec != nil {
			touched[taskKey(name, ch.Job, *ch.Task)] = true
		}
		if ch.JobStatus != "" {
			touched[name+".j."+ch.Job] = true
		}
	}
}

// dropRounds removes the journal's rounds of cluster name up to revision
// last, in one purge of the bucket's stream (a KV delete per key would
// cost a synced write each).
func (s *KVStore) dropRounds(ctx context.Context, name string, last uint64) error {
	stream, err := s.js.Stream(ctx, "KV_"+Bucket)
	if err != nil {
		return fmt.Errorf("dropping the journal of cluster %s: %w", name, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject("$KV."+Bucket+"."+name+"."+roundKind+".>"), jetstream.WithPurgeSequence(last+1)); err != nil {
		return fmt.Errorf("dropping the journal of cluster %s: %w", name, err)
	}
	return nil
}

func hash(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// write publishes puts (values from vals) and delete markers for dels,
// up to window unacknowledged at once, and waits for every
// acknowledgement.
func (s *KVStore) write(ctx context.Context, name string, puts []string, vals map[string][]byte, dels []string) error {
	const window = 256 // the client stalls past 4,000 in flight
	var futs []jetstream.PubAckFuture
	var keys []string
	var errs error
	acked := 0
	wait := func(upto int) error {
		for ; acked < upto; acked++ {
			select {
			case <-futs[acked].Ok():
			case e := <-futs[acked].Err():
				errs = errors.Join(errs, fmt.Errorf("writing key %s: %w", keys[acked], e))
			case <-ctx.Done():
				return errors.Join(errs, fmt.Errorf("writing key %s of bucket %s: %w", keys[acked], Bucket, ctx.Err()))
			}
		}
		return nil
	}
	pub := func(key string, msg *nats.Msg) error {
		if len(futs)-acked >= window {
			if err := wait(len(futs) - window/2); err != nil {
				return err
			}
		}
		f, err := s.js.PublishMsgAsync(msg)
		if err != nil {
			return fmt.Errorf("writing key %s: %w", key, err)
		}
		futs = append(futs, f)
		keys = append(keys, key)
		return nil
	}
	var err error
	for _, k := range puts {
		if err = pub(k, &nats.Msg{Subject: "$KV." + Bucket + "." + k, Data: vals[k]}); err != nil {
			break
		}
	}
	for _, k := range dels {
		if err != nil {
			break
		}
		m := nats.NewMsg("$KV." + Bucket + "." + k)
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set("Nats-Rollup", "sub")
		err = pub(k, m)
	}
	// Wait for what went out even after an error, so nothing is left
	// in flight behind the caller's back.
	if werr := wait(len(futs)); werr != nil {
		return errors.Join(err, werr)
	}
	return errors.Join(err, errs)
}

// maxBatch is the most writes one atomic batch carries (the server's
// default limit is 1,000). minBatch is the fewest: a batch costs about
// as much as ten single writes (the server stages it in files of its
// own), so smaller rounds go key by key.
const (
	maxBatch = 500
	minBatch = 12
)

// writeBatch writes puts (values from vals) as atomic batches of up to
// maxBatch keys: each is stored whole or not at all, with one fsync on a
// server that syncs every write, and acknowledged once, for its last
// message. The batches go one after the other, so a crash leaves a prefix.
func (s *KVStore) writeBatch(ctx context.Context, puts []string, vals map[string][]byte) error {
	for len(puts) > 0 {
		n := min(len(puts), maxBatch)
		if err := s.batch(ctx, puts[:n], vals); err != nil {
			return err
		}
		puts = puts[n:]
	}
	return nil
}

// batch writes one atomic batch: every message but the last is published
// without waiting (a gap or a refused message makes the server refuse the
// commit), the last carries the commit and waits for its acknowledgement.
func (s *KVStore) batch(ctx context.Context, puts []string, vals map[string][]byte) error {
	if len(puts) == 1 {
		if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + Bucket + "." + puts[0], Data: vals[puts[0]]}); err != nil {
			return fmt.Errorf("writing key %s: %w", puts[0], err)
		}
		return nil
	}
	id := nuid.Next()
	nc := s.js.Conn()
	for i, k := range puts {
		m := nats.NewMsg("$KV." + Bucket + "." + k)
		m.Data = vals[k]
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if i < len(puts)-1 {
			if err := nc.PublishMsg(m); err != nil {
				return fmt.Errorf("writing key %s: %w", k, err)
			}
			continue
		}
		m.Header.Set("Nats-Batch-Commit", "1")
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("writing %d keys (%s to %s) as one batch: %w", len(puts), puts[0], k, err)
		}
	}
	return nil
}

// Append implements Journal: the round goes to the bucket as one message
// (a key <name>.r.<id> of the cluster's journal: one synced write, where
// writing each changed key costs the server a write per key, 10-70 ms for
// a round of a hundred tasks with --fsync always). Get replays the rounds
// over the records; a Put writes them into the records and drops them,
// and so does Append itself every compactRounds rounds. A round too large
// for one message, or one that removes a node, goes to its keys
// (AppendChanges), and so does every round while the journal gate
// (SetJournalGate) names a daemon that cannot read the journal: the first
// such round folds the journal this store wrote into the records.
func (s *KVStore) Append(c *Cluster, changes []Change) error {
	if err := checkName(c.Name); err != nil {
		return err
	}
	defer s.lock(c.Name)()
	if !s.journalOK() {
		s.mu.Lock()
		n := s.rounds[c.Name]
		s.mu.Unlock()
		if n > 0 {
			return s.put(c) // c holds this round too
		}
		return s.appendChanges(c.Name, changes)
	}
	journal := true
	for _, ch := range changes {
		if ch.DeleteNode != "" {
			journal = false
		}
	}
	var data []byte
	if journal {
		var err error
		if data, err = json.Marshal(round{Changes: changes}); err != nil {
			return fmt.Errorf("cluster %s: encoding a round of its journal: %w", c.Name, err)
		}
	}
	if !journal || len(data) > maxRound {
		return s.appendChanges(c.Name, changes)
	}
	s.mu.Lock()
	n := s.rounds[c.Name]
	s.mu.Unlock()
	if n >= s.compactAfter() {
		// The journal is long enough: fold it into the records (Put
		// writes c, this round included, and drops the rounds).
		return s.put(c)
	}
	ctx, cancel := s.ctx()
	defer cancel()
	key := c.Name + "." + roundKind + "." + nuid.Next()
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + Bucket + "." + key, Data: data}); err != nil {
		return fmt.Errorf("cluster %s: saving its state: writing key %s: %w", c.Name, key, err)
	}
	s.mu.Lock()
	if s.rounds == nil {
		s.rounds, s.wrote = map[string]int{}, map[string]*wroteRounds{}
	}
	s.rounds[c.Name]++
	w := s.wrote[c.Name]
	if w == nil {
		w = &wroteRounds{rounds: map[string]bool{}, keys: map[string]bool{}}
		s.wrote[c.Name] = w
	}
	s.mu.Unlock()
	w.rounds[key] = true
	touchedBy(c.Name, changes, w.keys)
	return nil
}

// foldRemoving applies changes that remove a node. Key by key, the
// journal's earlier rounds that wrote the node would be replayed over its
// removal (read does not see delete markers), so when the cluster has
// rounds its state is read, changed and written whole by Put, which drops
// the rounds before it removes keys.
func (s *KVStore) foldRemoving(name string, changes []Change) error {
	ctx, cancel := s.ctx()
	have, revs, err := s.read(ctx, name)
	cancel()
	if err != nil {
		return err
	}
	journal := false
	for k := range have {
		if strings.HasPrefix(k, name+"."+roundKind+".") {
			journal = true
			break
		}
	}
	if !journal {
		return s.appendKeys(name, changes)
	}
	c, err := decode(name, have, revs)
	if err != nil {
		return err
	}
	for _, ch := range changes {
		c.Apply(ch)
	}
	return s.put(c)
}

// FoldJournal writes the rounds of cluster name's journal into its
// records and drops them, as a Put of its state would; it reports whether
// there were any. The caller holds the cluster's job: loomd serve's
// runner folds the journals of its jobs when a daemon that cannot read
// them starts announcing itself (an older loomd joined the store), so
// that if it takes a job over it reads complete records; Append then
// writes the rounds to their keys while it is live.
func (s *KVStore) FoldJournal(name string) (bool, error) {
	if err := checkName(name); err != nil {
		return false, err
	}
	defer s.lock(name)()
	ctx, cancel := s.ctx()
	have, revs, err := s.read(ctx, name)
	cancel()
	if err != nil {
		return false, err
	}
	rounds := false
	for k := range have {
		if strings.HasPrefix(k, name+"."+roundKind+".") {
			rounds = true
			break
		}
	}
	if !rounds {
		return false, nil
	}
	c, err := decode(name, have, revs)
	if err != nil {
		return false, err
	}
	if err := s.put(c); err != nil {
		return false, err
	}
	return true, nil
}

// maxRound is the largest round written as one message (NATS refuses
// messages over 1 MiB by default); compactRounds is how many rounds the
// journal of a cluster may hold before Append folds them into its
// records.
const (
	maxRound      = 512 << 10
	compactRounds = 256
)

// AppendChanges writes changes to cluster name's keys; it is Append for a
// caller that does not hold the whole cluster (the API).
func (s *KVStore) AppendChanges(name string, changes []Change) error {
	if err := checkName(name); err != nil {
		return err
	}
	defer s.lock(name)()
	return s.appendChanges(name, changes)
}

// appendChanges is AppendChanges with the cluster's write lock held.
func (s *KVStore) appendChanges(name string, changes []Change) error {
	for _, ch := range changes {
		if ch.DeleteNode != "" {
			return s.foldRemoving(name, changes)
		}
	}
	return s.appendKeys(name, changes)
}

// appendKeys writes changes key by key (nodes, removed nodes, tasks, then
// job and cluster records).
func (s *KVStore) appendKeys(name string, changes []Change) error {
	ctx, cancel := s.ctx()
	defer cancel()
	vals := map[string][]byte{}
	var nodes, dels, tasks []string
	jobStatus := map[string]Change{}
	status := ""
	for _, ch := range changes {
		if ch.Node != nil {
			data, err := json.Marshal(ch.Node)
			if err != nil {
				return fmt.Errorf("cluster %s: encoding node %s: %w", name, ch.Node.ID, err)
			}
			k := name + ".n." + ch.Node.ID
			vals[k] = data
			nodes = append(nodes, k)
		}
		if ch.DeleteNode != "" {
			dels = append(dels, name+".n."+ch.DeleteNode)
		}
		if ch.Status != "" {
			status = ch.Status
		}
		if ch.Job == "" {
			continue
		}
		if ch.Task != nil && ch.Rec != nil {
			data, err := json.Marshal(ch.Rec)
			if err != nil {
				return fmt.Errorf("cluster %s: encoding task %d of job %s: %w", name, *ch.Task, ch.Job, err)
			}
			k := taskKey(name, ch.Job, *ch.Task)
			vals[k] = data
			tasks = append(tasks, k)
		}
		if ch.JobStatus != "" {
			jobStatus[ch.Job] = ch
		}
	}
	if s.atomic && len(nodes)+len(tasks) >= minBatch {
		// One batch: the round is stored whole or not at all, nodes
		// first still (a batch larger than the server takes goes as
		// several, in order). Deleted nodes go before it.
		if err := s.write(ctx, name, nil, nil, dels); err != nil {
			return fmt.Errorf("cluster %s: saving its state: %w", name, err)
		}
		if err := s.writeBatch(ctx, append(nodes, tasks...), vals); err != nil {
			return fmt.Errorf("cluster %s: saving its state: %w", name, err)
		}
	} else {
		if err := s.write(ctx, name, nodes, vals, dels); err != nil {
			return fmt.Errorf("cluster %s: saving its state: %w", name, err)
		}
		if err := s.write(ctx, name, tasks, vals, nil); err != nil {
			return fmt.Errorf("cluster %s: saving its state: %w", name, err)
		}
	}
	for id, ch := range jobStatus {
		err := s.update(ctx, name+".j."+id, func(v []byte) ([]byte, error) {
			var j Job
			if err := json.Unmarshal(v, &j); err != nil {
				return nil, err
			}
			if j.Status == ch.JobStatus && j.Message == ch.Message {
				return nil, nil
			}
			j.Status, j.Message = ch.JobStatus, ch.Message
			return json.Marshal(j)
		})
		if err != nil {
			return fmt.Errorf("cluster %s: saving job %s: %w", name, id, err)
		}
	}
	if status != "" {
		err := s.update(ctx, name+".c", func(v []byte) ([]byte, error) {
			var m meta
			if err := json.Unmarshal(v, &m); err != nil {
				return nil, err
			}
			m.Status = status
			return json.Marshal(m)
		})
		if err != nil {
			return fmt.Errorf("cluster %s: saving its status: %w", name, err)
		}
	}
	return nil
}

// update rewrites a key's value through f (nil: unchanged), checking its
// revision so a concurrent writer is noticed rather than overwritten.
func (s *KVStore) update(ctx context.Context, key string, f func([]byte) ([]byte, error)) error {
	e, err := s.kv.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("reading key %s: %w", key, err)
	}
	v, err := f(e.Value())
	if err != nil || v == nil || bytes.Equal(v, e.Value()) {
		return err
	}
	if _, err := s.kv.Update(ctx, key, v, e.Revision()); err != nil {
		return fmt.Errorf("writing key %s: %w", key, err)
	}
	return nil
}

// List implements Store.
func (s *KVStore) List() ([]string, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	w, err := s.kv.Watch(ctx, "*.c", jetstream.IgnoreDeletes(), jetstream.MetaOnly())
	if err != nil {
		return nil, fmt.Errorf("listing clusters in bucket %s: %w", Bucket, err)
	}
	defer w.Stop()
	var out []string
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				sort.Strings(out)
				return out, nil
			}
			out = append(out, strings.TrimSuffix(e.Key(), ".c"))
		case <-ctx.Done():
			return nil, fmt.Errorf("listing clusters in bucket %s: %w", Bucket, ctx.Err())
		}
	}
}

// Delete implements Store.
func (s *KVStore) Delete(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	defer s.lock(name)()
	ctx, cancel := s.ctx()
	defer cancel()
	have, _, err := s.read(ctx, name)
	if err != nil {
		return err
	}
	dels := make([]string, 0, len(have))
	for k := range have {
		dels = append(dels, k)
	}
	if err := s.write(ctx, name, nil, nil, dels); err != nil {
		return fmt.Errorf("cluster %s: removing its state: %w", name, err)
	}
	return nil
}

// Holder is who holds a cluster's apply lock.
type Holder struct {
	// Owner identifies the holder (unique per loomd apply run).
	Owner string `json:"owner"`
	// Host and PID say where it runs, for the operator and for a
	// process on the same host to see the holder died.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// Expires is when the lease ends unless renewed.
	Expires time.Time `json:"expires"`
}

// LockedError is returned when another holder has the lock.
type LockedError struct {
	Cluster string
	Holder  Holder
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("cluster %s is being applied by another loomd process (%s pid %d, lease until %s); wait for it to finish",
		e.Cluster, e.Holder.Host, e.Holder.PID, e.Holder.Expires.UTC().Format(time.RFC3339))
}

// Lock takes or renews the cluster's apply lock for h.Owner for ttl. It
// takes over a lease that expired, or one held by takeover (an owner the
// caller knows is dead). It returns the lease as stored, or a
// *LockedError naming the holder.
func (s *KVStore) Lock(name string, h Holder, ttl time.Duration, takeover string) (Holder, error) {
	if err := checkName(name); err != nil {
		return Holder{}, err
	}
	if h.Owner == "" {
		return Holder{}, errors.New("lock: no owner")
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	ctx, cancel := s.ctx()
	defer cancel()
	key := name + ".lock"
	h.Expires = now().Add(ttl)
	data, err := json.Marshal(h)
	if err != nil {
		return Holder{}, err
	}
	for range 3 {
		_, err := s.kv.Create(ctx, key, data)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return Holder{}, fmt.Errorf("cluster %s: taking its lock: %w", name, err)
		}
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return Holder{}, fmt.Errorf("cluster %s: reading its lock: %w", name, err)
		}
		var cur Holder
		if json.Unmarshal(e.Value(), &cur) != nil {
			cur = Holder{}
		}
		if cur.Owner != h.Owner && now().Before(cur.Expires) && (takeover == "" || takeover != cur.Owner) {
			return cur, &LockedError{Cluster: name, Holder: cur}
		}
		if _, err := s.kv.Update(ctx, key, data, e.Revision()); err == nil {
			return h, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) && !isRevMismatch(err) {
			return Holder{}, fmt.Errorf("cluster %s: taking its lock: %w", name, err)
		}
	}
	return Holder{}, fmt.Errorf("cluster %s: taking its lock: another process keeps taking it; try again", name)
}

func isRevMismatch(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Holder reads who holds the cluster's lock; ok is false when nobody
// does (its lease may have expired: compare Expires).
func (s *KVStore) Holder(name string) (h Holder, ok bool, err error) {
	if err := checkName(name); err != nil {
		return Holder{}, false, err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	e, err := s.kv.Get(ctx, name+".lock")
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("cluster %s: reading its lock: %w", name, err)
	}
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return Holder{}, false, fmt.Errorf("cluster %s: decoding its lock: %w", name, err)
	}
	return h, true, nil
}

// Unlock releases the lock if owner holds it.
func (s *KVStore) Unlock(name, owner string) error {
	if err := checkName(name); err != nil {
		return err
	}
	ctx, cancel := s.ctx()
	defer cancel()
	key := name + ".lock"
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cluster %s: reading its lock: %w", name, err)
	}
	var cur Holder
	if json.Unmarshal(e.Value(), &cur) == nil && cur.Owner != owner {
		return nil
	}
	if err := s.kv.Delete(ctx, key, jetstream.LastRevision(e.Revision())); err != nil && !isRevMismatch(err) {
		return fmt.Errorf("cluster %s: releasing its lock: %w", name, err)
	}
	return nil
}
