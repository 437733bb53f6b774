package queue

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Filter selects records for List.
type Filter struct {
	State   State  // "" for every state
	Type    string // "" for every plugin type
	Cluster string // "" for every clusterId
	// Tenant keeps only the tasks of one tenant ("" for every tenant); a
	// task without tenantId is DefaultTenant's (the daemon's --tenant).
	// It is checked on the records, not in the index: a page may read
	// past other tenants' tasks to fill up.
	Tenant, DefaultTenant string
	// Limit is the page size: 0 means DefaultPageSize; at most MaxPageSize.
	Limit int
	// After is the Next cursor of the previous page; "" starts from the
	// newest task.
	After string
}

// Page sizes of List.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Page is one page of List.
type Page struct {
	Records []Record
	// Next is the cursor of the following page, or "" when this page
	// reached the oldest matching task. Its format is opaque.
	Next string
}

// ErrBadCursor is wrapped by List for an After it did not issue.
var ErrBadCursor = errors.New("bad cursor")

// A cursor holds, per index part, the sequence below which the next page
// starts (0: a part the page did not read).
const cursorVersion = "i3."

func encodeCursor(below [indexParts]uint64) string {
	parts := make([]string, indexParts)
	for i, b := range below {
		parts[i] = strconv.FormatUint(b, 10)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + strings.Join(parts, ".")))
}

func decodeCursor(c string) ([indexParts]uint64, error) {
	var below [indexParts]uint64
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if s, ok := strings.CutPrefix(string(b), cursorVersion); ok {
			parts := strings.Split(s, ".")
			ok = len(parts) == indexParts
			for i := 0; ok && i < len(parts); i++ {
				below[i], err = strconv.ParseUint(parts[i], 10, 64)
				ok = err == nil
			}
			if ok {
				return below, nil
			}
		}
	}
	return below, fmt.Errorf("%w %q: pass the \"next\" value of the previous page unchanged", ErrBadCursor, c)
}

// staleAfter is how old an index entry without a matching record must be
// before a reader removes it: younger ones may belong to a write under way.
const staleAfter = time.Minute

// shardIter reads one index part backwards, newest entry first, in
// windows that double while matches are rare.
type shardIter struct {
	part        int
	filter      string
	first, end  uint64 // the range still to read: [first, end]
	window      uint64
	buf         []indexEntry // read, not yet consumed; newest first
	initialNext uint64       // the cursor bound when nothing is consumed
}

// peek returns the shard's next entry, reading a window when needed;
// nil when the shard has no more.
func (q *Queue) peek(ctx context.Context, it *shardIter) (*indexEntry, error) {
	for len(it.buf) == 0 {
		if it.end < it.first {
			return nil, nil
		}
		start := it.first
		if it.end-it.first+1 > it.window {
			start = it.end - it.window + 1
		}
		entries, err := q.readIndex(ctx, it.part, it.filter, start, it.end, 0, nil)
		if err != nil {
			return nil, err
		}
		slices.Reverse(entries)
		it.buf = entries
		it.end = start - 1
		it.window = min(it.window*2, 1<<20)
	}
	return &it.buf[0], nil
}

// List returns one page of the records that match f, newest first by the
// time an unfinished task was queued or a finished one finished (a task
// moves to the front when it finishes). It reads the index (index.go), not
// every record: the cost grows with the page size and, for rare matches,
// with the distance to them in the index.
// Results stored in the object store are not loaded: use Get for one
// task's result.
func (q *Queue) List(ctx context.Context, f Filter) (Page, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	var below [indexParts]uint64
	if f.After != "" {
		var err error
		if below, err = decodeCursor(f.After); err != nil {
			return Page{}, err
		}
	}
	// Queued and running tasks are in the active parts only, finished
	// ones in the others.
	var iters []*shardIter
	for p, st := range q.ix.streams {
		if f.State != "" && partActive(p) == f.State.Terminal() {
			continue
		}
		info, err := st.Info(ctx)
		if err != nil {
			return Page{}, fmt.Errorf("reading the task index %s: %w", partName(p), err)
		}
		it := &shardIter{part: p, filter: indexFilter(partShard(p), f), first: max(info.State.FirstSeq, 1), end: info.State.LastSeq, window: uint64(limit)}
		if info.State.Msgs == 0 {
			it.end = 0
		}
		if below[p] != 0 {
			it.end = min(it.end, below[p]-1)
		}
		it.initialNext = it.end + 1
		iters = append(iters, it)
	}
	var page Page
	var consumed [indexParts]uint64
	for len(page.Records) < limit {
		// The next candidates, merged by time across the shards.
		var cands []indexEntry
		for len(cands) < limit-len(page.Records) {
			best := -1
			var bestE *indexEntry
			for i, it := range iters {
				e, err := q.peek(ctx, it)
				if err != nil {
					return Page{}, err
				}
				if e != nil && (bestE == nil || e.time.After(bestE.time)) {
					best, bestE = i, e
				}
			}
			if best < 0 {
				break
			}
			cands = append(cands, *bestE)
			iters[best].buf = iters[best].buf[1:]
		}
		if len(cands) == 0 {
			return page, nil
		}
		recs, err := q.resolve(ctx, cands, f.State)
		if err != nil {
			return Page{}, err
		}
		for i, r := range recs {
			consumed[cands[i].part] = cands[i].seq
			if r == nil || f.Tenant != "" && r.TenantOr(f.DefaultTenant) != f.Tenant {
				continue
			}
			page.Records = append(page.Records, *r)
			if len(page.Records) == limit {
				var next [indexParts]uint64
				for _, it := range iters {
					next[it.part] = it.initialNext
					if consumed[it.part] != 0 {
						next[it.part] = consumed[it.part]
					}
				}
				page.Next = encodeCursor(next)
				return page, nil
			}
		}
	}
	return page, nil
}

// resolve reads the records of index entries, one batch per shard; an
// entry whose record does not point back at it is stale and comes back
// nil (and is removed when the record moved past it, or once it is old
// enough), as does a record not in state (unless state is "").
func (q *Queue) resolve(ctx context.Context, entries []indexEntry, state State) ([]*Record, error) {
	out := make([]*Record, len(entries))
	var byShard [StateShards][]string
	for _, e := range entries {
		s := partShard(e.part)
		byShard[s] = append(byShard[s], e.id)
	}
	var recs [StateShards]map[string]Record
	var errs [StateShards]error
	var wg sync.WaitGroup
	for s, ids := range byShard {
		if len(ids) > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs[s], errs[s] = q.getRecords(ctx, s, ids)
			}()
		}
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	for i, e := range entries {
		rec, found := recs[partShard(e.part)][e.id]
		switch {
		case found && recordPart(rec) == e.part && rec.IndexSeq == e.seq:
			if state == "" || rec.State == state {
				out[i] = &rec
			}
		case staleEntry(e, rec, found):
			q.dropIndex(e.part, e.seq)
		}
	}
	return out, nil
}

// staleEntry reports whether an entry that does not match its record
// (rec, if found) can go: the record moved past it, or it is too old to
// belong to a write under way.
func staleEntry(e indexEntry, rec Record, found bool) bool {
	return found && recordPart(rec) == e.part && rec.IndexSeq > e.seq || time.Since(e.time) > staleAfter
}
