package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/jsensure"
)

// The record index.
//
// Listing tasks must not read every record, so every record has one entry
// in an index stream, on the subject
//
//	loom.idx.<shard>.<class>.<family>.<type>.<cluster>
//
// whose payload is the task id (shard: the task's state bucket). The class
// is "active" for queued and running tasks and the state itself for
// finished ones. Active entries live in LOOM_ACTIVE_<shard>, finished ones
// in LOOM_INDEX_<shard>, so a list of queued or running tasks reads only
// active entries however many finished tasks are kept. A start or a retry
// does not change the class, so it is no index write: the worker's path
// gets one more fsynced write per task, not three (docs/benchmarks.md); a
// list by state=queued or running checks the state on the record.
//
// Each change of class publishes the task's new entry before the record is
// written (the record keeps the entry's sequence in IndexSeq) and deletes
// the previous entry afterwards. Each index stream is thus ordered by the
// time of its tasks' last change of class, and a filter on state, type and
// cluster is a subject filter the server applies. A page is read backwards
// from the newest entries with a few direct-get batches per stream, merged
// by time (list.go), and each entry is checked against its record (read
// anyway for the page): an entry that is not the record's IndexSeq is
// stale (a writer died between its steps) and is removed. Subjects hold no
// task id, so the server's per-subject state stays small (classes x types
// x clusters). The index is sharded like the records so that its fsynced
// writes run in parallel.
const (
	IndexStream       = "LOOM_INDEX"  // finished tasks; shards LOOM_INDEX_0 .. LOOM_INDEX_<StateShards-1>
	ActiveIndexStream = "LOOM_ACTIVE" // queued and running tasks; shards as LOOM_INDEX
	indexPrefix       = "loom.idx."
	// TaskIDHeader carries the task id on task messages. The message id
	// is the task id too, except for a task submitted again after it was
	// deleted inside the dedupe window (see Submit).
	TaskIDHeader = "Loom-Task-Id"
)

// indexState is the Queue's bookkeeping for the index, deletes and
// cancellations.
type indexState struct {
	streams   [indexParts]jetstream.Stream  // see indexPart
	kvStreams [StateShards]jetstream.Stream // the state buckets' streams
	cancelKV  jetstream.KeyValue            // LOOM_CANCEL
	apiPrefix string                        // $JS.API or $JS.<domain>.API
	mu        sync.Mutex                    // guards the maps below
	lastIndex map[string]indexPos           // task id -> its entry, as last written here
	queued    map[string]Record             // task id -> its queued record, as created here
	running   map[string]*runningTask       // tasks this process runs
	cancels   map[string]bool               // cancel requests seen in LOOM_CANCEL
	bg        sync.WaitGroup                // background deletes
	sweepStop func()                        // stops the retention sweeper
	// leaderReads: the state buckets are replicated, records are read
	// from their streams' leaders (leader.go).
	leaderReads bool
}

type indexPos struct{ rev, seq uint64 }

// maxLastIndex bounds indexState.lastIndex.
const maxLastIndex = 10000

// indexToken makes s one subject token: letters, digits, '-' and '_' stay
// as they are; anything else (and the empty string) is "~" and hex, so
// the token is unambiguous and never a wildcard.
func indexToken(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
	}
	if plain {
		return s
	}
	return "~" + fmt.Sprintf("%x", s)
}

// indexClass is the index token of a state: "active" for queued and
// running, the state for finished ones.
func indexClass(s State) string {
	if s.Terminal() {
		return string(s)
	}
	return "active"
}

func indexSubject(r Record) string {
	return indexPrefix + strconv.Itoa(shardOf(r.TaskID)) + "." + indexClass(r.State) + "." + indexToken(r.Family) + "." + indexToken(r.Type) + "." + indexToken(r.ClusterID)
}

// The index has two parts per shard, finished and active; a part is
// shard*2, plus 1 for the active one.
const indexParts = 2 * StateShards

func indexPart(shard int, active bool) int {
	if active {
		return shard*2 + 1
	}
	return shard * 2
}

func partShard(p int) int     { return p / 2 }
func partActive(p int) bool   { return p%2 == 1 }
func recordPart(r Record) int { return indexPart(shardOf(r.TaskID), !r.State.Terminal()) }

// partName is the stream of an index part.
func partName(p int) string {
	if partActive(p) {
		return ActiveIndexStream + "_" + strconv.Itoa(partShard(p))
	}
	return IndexStream + "_" + strconv.Itoa(partShard(p))
}

// indexFilter is the subject filter of a list filter in one shard.
func indexFilter(shard int, f Filter) string {
	tok := func(s string) string {
		if s == "" {
			return "*"
		}
		return indexToken(s)
	}
	class := "*"
	if f.State != "" {
		class = indexClass(f.State)
	}
	return indexPrefix + strconv.Itoa(shard) + "." + class + ".*." + tok(f.Type) + "." + tok(f.Cluster)
}

// provisionIndex creates the index stream and the cancel bucket, and
// finds the state buckets' streams.
func (q *Queue) provisionIndex(ctx context.Context) error {
	x := &q.ix
	x.lastIndex = map[string]indexPos{}
	x.queued = map[string]Record{}
	x.running = map[string]*runningTask{}
	x.cancels = map[string]bool{}
	x.apiPrefix = "$JS.API"
	if q.cfg.Domain != "" && q.srvRef == nil {
		x.apiPrefix = "$JS." + q.cfg.Domain + ".API"
	}
	var err error
	var created atomic.Bool
	// The finished parts first: a store from before the split has the
	// active subjects in them, and the update hands them over. The shards'
	// streams of each part at once, so that their writes overlap.
	for _, active := range []bool{false, true} {
		var errs [StateShards]error
		var wg sync.WaitGroup
		for shard := range StateShards {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := indexPart(shard, active)
				name := partName(p)
				_ = q.cfg.Retry.Do(ctx, q.what("stream", name), func(ctx context.Context) error {
					_, err := q.js.Stream(ctx, name)
					if errors.Is(err, jetstream.ErrStreamNotFound) {
						created.Store(true)
					}
					return err
				})
				prefix := indexPrefix + strconv.Itoa(shard) + "."
				subjects := []string{prefix + "active.>"}
				what := "queued and running tasks"
				if !active {
					subjects = []string{prefix + string(Succeeded) + ".>", prefix + string(Failed) + ".>", prefix + string(Cancelled) + ".>"}
					what = "finished tasks"
				}
				err := q.cfg.Retry.Do(ctx, q.what("stream", name), func(ctx context.Context) (err error) {
					x.streams[p], err = jsensure.Stream(ctx, q.js, jetstream.StreamConfig{
						Name:        name,
						Description: fmt.Sprintf("loomd task index of %s, shard %d of %d: one entry per task, subject loom.idx.%d.<class>.<family>.<type>.<cluster>, payload the task id", what, shard, StateShards, shard),
						Subjects:    subjects,
						Retention:   jetstream.LimitsPolicy,
						Storage:     jetstream.FileStorage,
						Replicas:    q.cfg.Replicas,
						AllowDirect: true,
					})
					return err
				})
				if err != nil {
					errs[shard] = fmt.Errorf("creating stream %s: %w", name, err)
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs[:]...); err != nil {
			return err
		}
	}
	for i, kv := range q.kvs {
		err := q.cfg.Retry.Do(ctx, q.what("stream", "KV_"+kv.Bucket()), func(ctx context.Context) (err error) {
			x.kvStreams[i], err = q.js.Stream(ctx, "KV_"+kv.Bucket())
			return err
		})
		if err != nil {
			return fmt.Errorf("opening the stream of kv bucket %s: %w", kv.Bucket(), err)
		}
		if x.kvStreams[i].CachedInfo().Config.Replicas > 1 {
			x.leaderReads = true
		}
	}
	err = q.cfg.Retry.Do(ctx, q.what("kv bucket", CancelBucket), func(ctx context.Context) (err error) {
		x.cancelKV, err = jsensure.KeyValue(ctx, q.js, jetstream.KeyValueConfig{
			Bucket:      CancelBucket,
			Description: "loomd cancel requests for running tasks, key cancel.<id>; the daemon running the task acts on it",
			History:     1,
			TTL:         24 * time.Hour,
			Storage:     jetstream.FileStorage,
			Replicas:    q.cfg.Replicas,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating kv bucket %s: %w", CancelBucket, err)
	}
	if err := q.watchCancels(); err != nil {
		return err
	}
	// A store whose record buckets hold nothing (a new one) has nothing
	// to index: no watch of every bucket in the background of its start.
	records := false
	for _, st := range x.kvStreams {
		records = records || st.CachedInfo().State.Msgs > 0
	}
	if created.Load() && records {
		q.ix.bg.Add(1)
		go func() {
			defer q.ix.bg.Done()
			q.backfillIndex(q.abortCtx)
		}()
	}
	q.startSweeper()
	return nil
}

// backfillIndex gives an index entry to every record that has none: the
// records of a store written before the index existed. It runs once, in
// the background, when this process created the index; it reads every
// record once.
func (q *Queue) backfillIndex(ctx context.Context) {
	n := 0
	for _, kv := range q.kvs {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			q.log.Warn("indexing existing task records failed; they are missing from lists and retention", "bucket", kv.Bucket(), "err", err)
			return
		}
		n += q.backfillShard(ctx, w)
		_ = w.Stop()
		if ctx.Err() != nil {
			return
		}
	}
	if n > 0 {
		q.log.Info("indexed existing task records", "count", n)
	}
}

func (q *Queue) backfillShard(ctx context.Context, w jetstream.KeyWatcher) (n int) {
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return n
		case e, ok = <-w.Updates():
		}
		if !ok || e == nil {
			return n
		}
		rec, err := decodeRecord(e)
		if err != nil || (rec.IndexSeq != 0 && q.indexed(ctx, rec)) {
			continue
		}
		// A record may point at an entry of an index that was lost and
		// re-created (its sequence is gone, or now another task's): it
		// gets a new entry like a record that never had one.
		cur := rec
		cur.IndexSeq = 0
		// A conflict means someone wrote the record since: that write
		// indexed it.
		if _, err := q.write(ctx, cur, rec); err == nil {
			n++
		} else if !isConflict(err) && ctx.Err() == nil {
			q.log.Warn("indexing an existing task record failed", "task", rec.TaskID, "err", err)
		}
	}
}

// indexed reports whether rec's index entry is in the current index: the
// entry at its sequence names the task.
func (q *Queue) indexed(ctx context.Context, rec Record) bool {
	m, err := q.ix.streams[recordPart(rec)].GetMsg(ctx, rec.IndexSeq)
	return err == nil && string(m.Data) == rec.TaskID
}

// write stores next if the record is still at cur's revision (or, for a
// record that does not exist yet, creates it). A new record or a state
// change gets a new index entry first; the previous one is removed once
// the record points at the new one.
func (q *Queue) write(ctx context.Context, cur, next Record) (uint64, error) {
	return q.writeIndexed(ctx, cur, next, 0)
}

// writeIndexed is write with next's new index entry, when the change
// needs one, already published at sequence entry (0: not published yet).
func (q *Queue) writeIndexed(ctx context.Context, cur, next Record, entry uint64) (uint64, error) {
	// A record must fit a NATS message whatever a plugin reports: the
	// error is a summary (the whole message stays in the result).
	next.Error = capText(next.Error, maxRecordError)
	kv, key := q.kvFor(next.TaskID), keyPrefix+next.TaskID
	old, oldPart, newPart := cur.IndexSeq, recordPart(cur), recordPart(next)
	if cur.Revision != 0 {
		q.ix.mu.Lock()
		if p, ok := q.ix.lastIndex[next.TaskID]; ok && p.rev == cur.Revision {
			old = p.seq // cur came from our own earlier write
		}
		q.ix.mu.Unlock()
	}
	next.IndexSeq = old
	reindex := cur.Revision == 0 || indexClass(cur.State) != indexClass(next.State) || old == 0
	if reindex {
		if entry == 0 {
			var err error
			if entry, err = q.publishIndex(ctx, next); err != nil {
				return 0, err
			}
		}
		next.IndexSeq = entry
	} else if entry != 0 {
		q.dropIndex(newPart, entry) // published for nothing
	}
	var rev uint64
	var err error
	value := mustJSON(next)
	q.written.put(next, value) // for wake, when the watch delivers it
	if cur.Revision == 0 {
		rev, err = kv.Create(ctx, key, value)
	} else {
		rev, err = kv.Update(ctx, key, value, cur.Revision)
	}
	if err != nil {
		q.written.drop(next.TaskID, value)
		if reindex {
			q.dropIndex(newPart, next.IndexSeq)
		}
		return 0, err
	}
	// The caller's copy of next does not have the new entry's sequence.
	// A claim that had to create the record writes the outcome from that
	// copy later, so a running record's entry is remembered here. A miss
	// (the map was cleared) only leaves a stale entry for readers to drop.
	q.ix.mu.Lock()
	_, had := q.ix.lastIndex[next.TaskID]
	delete(q.ix.lastIndex, next.TaskID)
	delete(q.ix.queued, next.TaskID)
	if cur.Revision == 0 && next.State == Queued {
		// A submit's record: the claim that follows, usually here, starts
		// from it instead of reading it back (see submitted).
		if len(q.ix.queued) >= maxLastIndex {
			clear(q.ix.queued)
		}
		kept := next
		kept.Revision = rev
		q.ix.queued[next.TaskID] = kept
	}
	if !next.State.Terminal() && (had || reindex && next.State == Running) {
		if len(q.ix.lastIndex) >= maxLastIndex {
			clear(q.ix.lastIndex)
		}
		q.ix.lastIndex[next.TaskID] = indexPos{rev: rev, seq: next.IndexSeq}
	}
	q.ix.mu.Unlock()
	if reindex && old != 0 && (old != next.IndexSeq || oldPart != newPart) {
		q.dropIndex(oldPart, old)
	}
	return rev, nil
}

// submitted returns (and forgets) task id's record as this process
// created it at submit, if that was its last write here. It may be stale
// (another daemon, or a cancel elsewhere, wrote since): it is only a
// guess for a compare-and-set, which then fails with a conflict and the
// caller reads the record.
func (q *Queue) submitted(id string) (Record, bool) {
	q.ix.mu.Lock()
	defer q.ix.mu.Unlock()
	rec, ok := q.ix.queued[id]
	if ok {
		delete(q.ix.queued, id)
	}
	return rec, ok
}

// publishIndex publishes rec's index entry and returns its sequence.
func (q *Queue) publishIndex(ctx context.Context, rec Record) (uint64, error) {
	ack, err := q.shards[shardOf(rec.TaskID)].js.Publish(ctx, indexSubject(rec), []byte(rec.TaskID))
	if err != nil {
		return 0, fmt.Errorf("indexing task %s: %w", rec.TaskID, err)
	}
	return ack.Sequence, nil
}

// dropIndex removes an index entry in the background: the write that
// replaced it does not wait for it, and an entry left behind (the process
// died) is stale, which readers detect and remove.
func (q *Queue) dropIndex(part int, seq uint64) {
	if seq == 0 {
		return
	}
	q.ix.bg.Add(1)
	go func() {
		defer q.ix.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.ix.streams[part].DeleteMsg(ctx, seq); err != nil && !msgGone(err) && !errors.Is(err, nats.ErrConnectionClosed) {
			q.log.Debug("removing an old index entry failed; readers skip it", "seq", seq, "err", err)
		}
	}()
}

// msgGone reports whether a message delete failed because the message
// is already gone. nats.go flattens the server's error into text here, so
// its code (10057, "no message found") is matched in the text.
func msgGone(err error) bool {
	return errors.Is(err, jetstream.ErrMsgNotFound) || strings.Contains(err.Error(), "err_code=10057")
}

// taskIDOf is the task id of a task message: the Loom-Task-Id header,
// or the message id of messages queued before the header existed.
func taskIDOf(h nats.Header) string {
	if id := h.Get(TaskIDHeader); id != "" {
		return id
	}
	return h.Get(jetstream.MsgIDHeader)
}

// indexEntry is one entry of the index stream.
type indexEntry struct {
	part int
	seq  uint64
	id   string
	subj string
	time time.Time
}

// maxDirectBatch bounds one direct-get batch.
const maxDirectBatch = 1024

// readIndex returns the entries of an index part matching filter with
// sequences in [from, to], oldest first, at most max of them (0: no
// bound), using direct-get batches. It stops early at the first entry
// that stop rejects, if stop is set.
func (q *Queue) readIndex(ctx context.Context, part int, filter string, from, to uint64, max int, stop func(indexEntry) bool) ([]indexEntry, error) {
	var out []indexEntry
	for from <= to {
		// A single get first: it finds the next match without the count
		// of pending matches a batch request makes the server compute
		// (which costs a walk of the rest of the stream), so a window
		// without matches costs one cheap request.
		first, err := q.nextEntry(ctx, part, filter, from)
		if err != nil {
			return nil, err
		}
		if first == nil || first.seq > to {
			break
		}
		from = first.seq
		n := maxDirectBatch
		if span := to - from + 1; span < uint64(n) {
			n = int(span)
		}
		if max > 0 && max-len(out) < n {
			n = max - len(out)
		}
		got, last, more, err := q.directBatch(ctx, part, filter, from, to, n)
		if err != nil {
			return nil, err
		}
		for _, e := range got {
			if stop != nil && stop(e) {
				return out, nil
			}
			out = append(out, e)
		}
		if !more || last >= to || (max > 0 && len(out) >= max) {
			break
		}
		from = last + 1
	}
	return out, nil
}

// directBatch asks an index part for up to n entries matching filter
// from sequence from on, and keeps those up to to. more is false when
// the stream has no further match.
func (q *Queue) directBatch(ctx context.Context, part int, filter string, from, to uint64, n int) (out []indexEntry, last uint64, more bool, err error) {
	req := map[string]any{"seq": from, "next_by_subj": filter, "batch": n}
	more, err = q.directGet(ctx, partShard(part), partName(part), req, n, func(m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		last = seq
		if seq > to {
			return // past the window
		}
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		out = append(out, indexEntry{part: part, seq: seq, id: string(m.Data), subj: m.Header.Get(jetstream.SubjectHeader), time: ts})
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("reading the task index: %w", err)
	}
	return out, last, more, nil
}

// nextEntry is the first entry matching filter from sequence from on, or
// nil.
func (q *Queue) nextEntry(ctx context.Context, part int, filter string, from uint64) (*indexEntry, error) {
	var e *indexEntry
	_, err := q.directGet(ctx, partShard(part), partName(part), map[string]any{"seq": from, "next_by_subj": filter}, 1, func(m *nats.Msg) {
		seq, _ := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		ts, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		e = &indexEntry{part: part, seq: seq, id: string(m.Data), subj: m.Header.Get(jetstream.SubjectHeader), time: ts}
	})
	if err != nil {
		return nil, fmt.Errorf("reading the task index: %w", err)
	}
	return e, nil
}

// directGet sends a batch direct-get request to a stream of a state shard
// (on the shard's connection) and hands every message of the answer to
// each. more says whether the server reported further matches after the
// batch.
func (q *Queue) directGet(ctx context.Context, shard int, stream string, req map[string]any, n int, each func(*nats.Msg)) (more bool, err error) {
	nc := q.shards[shard].nc
	_, batch := req["batch"]
	_, multi := req["multi_last"]
	batch = batch || multi
	body, _ := json.Marshal(req)
	inbox := nc.NewRespInbox()
	ch := make(chan *nats.Msg, n+1)
	sub, err := nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(q.ix.apiPrefix+".DIRECT.GET."+stream, inbox, body); err != nil {
		return false, err
	}
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-timer.C:
			return false, fmt.Errorf("no answer from jetstream (stream %s) within 10s; try again", stream)
		case m := <-ch:
			switch status := m.Header.Get("Status"); status {
			case "":
				each(m)
				if !batch {
					return false, nil
				}
			case "204": // end of batch
				np, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return np > 0, nil
			case "404": // nothing (more) matches
				return false, nil
			default:
				return false, fmt.Errorf("jetstream (stream %s) answered %s %s", stream, status, m.Header.Get("Description"))
			}
		}
	}
}

// getRecords reads the records of ids (at most 1024, all in one shard)
// with one batch request; ids without a record are absent from the map.
func (q *Queue) getRecords(ctx context.Context, shard int, ids []string) (map[string]Record, error) {
	bucket := q.kvs[shard].Bucket()
	prefix := "$KV." + bucket + "." + keyPrefix
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = prefix + id
	}
	out := make(map[string]Record, len(ids))
	var bad error
	_, err := q.directGet(ctx, shard, "KV_"+bucket, map[string]any{"multi_last": subjects, "batch": len(ids)}, len(ids), func(m *nats.Msg) {
		if m.Header.Get("KV-Operation") != "" { // deleted or purged
			return
		}
		var rec Record
		if err := json.Unmarshal(m.Data, &rec); err != nil {
			bad = fmt.Errorf("decoding the record at %s: %w", m.Header.Get(jetstream.SubjectHeader), err)
			return
		}
		rec.Revision, _ = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		out[strings.TrimPrefix(m.Header.Get(jetstream.SubjectHeader), prefix)] = rec
	})
	if err != nil {
		return nil, fmt.Errorf("reading task records from %s: %w", bucket, err)
	}
	if bad != nil {
		q.log.Warn("skipping an unreadable task record", "err", bad)
	}
	return out, nil
}
