package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/jsretry"
)

// Reads on a NATS cluster. nats.go creates key-value buckets and object
// stores with AllowDirect, and a handle bound to such a stream reads with
// direct gets, which ANY replica answers: one that has not applied the
// last write yet answers with the record from before it, even when this
// process made that write. A record read right after a write (the CAS
// loops of claims, outcomes and cancels; a waiter woken again; a
// client's GET after another daemon finished the task) must see it, so
// on replicated buckets the queue reads records from the stream's leader
// (the JetStream API's STREAM.MSG.GET, which only the leader answers).
// On one server the direct get stays: it is answered inline in the
// server's read loop, and a single replica is never behind itself.
//
// The buckets keep AllowDirect: lists read up to 1024 records in one
// multi_last direct-get batch, and the index streams are read with
// direct gets too. A list may miss a change made milliseconds before on
// another replica; the record read of a task (GET /tasks/<id>, waits)
// does not. Watches (record changes, served types, cancel requests) are
// consumers on the leader and need nothing.

// recordEntry reads the current entry of task id's record: from the
// bucket stream's leader when the bucket is replicated, with a direct
// get otherwise. A deleted record is jetstream.ErrKeyNotFound, as with
// kv.Get.
func (q *Queue) recordEntry(ctx context.Context, id string) (jetstream.KeyValueEntry, error) {
	kv := q.kvFor(id)
	if !q.ix.leaderReads {
		return kv.Get(ctx, keyPrefix+id)
	}
	return q.leaderGet(ctx, shardOf(id), kv.Bucket(), keyPrefix+id)
}

// leaderWait retries a leader read while the stream has no leader: no
// warnings (a read is retried until its caller's context ends, as a write
// is), no bound of its own on one attempt.
var leaderWait = &jsretry.Waiter{Attempt: -1, Min: 50 * time.Millisecond, Max: time.Second}

// leaderGet reads the last value of key in bucket (a state shard's) with
// a STREAM.MSG.GET request, which the stream's leader answers.
func (q *Queue) leaderGet(ctx context.Context, shard int, bucket, key string) (jetstream.KeyValueEntry, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	body, err := json.Marshal(struct {
		LastBySubject string `json:"last_by_subj"`
	}{"$KV." + bucket + "." + key})
	if err != nil {
		return nil, err
	}
	stream := "KV_" + bucket
	var resp struct {
		Message *struct {
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	// Without a leader (an election, a cluster without quorum) the server
	// answers 503 at once: the read waits for a leader as a write does,
	// until ctx ends, instead of failing while a replica could have
	// answered a direct get.
	var decodeErr error
	err = leaderWait.Do(ctx, "", func(ctx context.Context) error {
		m, err := q.shards[shard].nc.RequestWithContext(ctx, q.ix.apiPrefix+".STREAM.MSG.GET."+stream, body)
		if err != nil {
			return err
		}
		resp.Message, resp.Error = nil, nil
		if decodeErr = json.Unmarshal(m.Data, &resp); decodeErr != nil {
			return nil
		}
		if resp.Error != nil && jsretry.Transient(resp.Error) {
			return resp.Error
		}
		return nil
	})
	if decodeErr != nil {
		return nil, fmt.Errorf("reading %s from the leader of stream %s: decoding the answer: %w", key, stream, decodeErr)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s from the leader of stream %s: %w", key, stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return nil, jetstream.ErrKeyNotFound
		}
		return nil, fmt.Errorf("reading %s from the leader of stream %s: %w", key, stream, resp.Error)
	}
	if resp.Message == nil {
		return nil, fmt.Errorf("reading %s from the leader of stream %s: %w", key, stream, jetstream.ErrInvalidJetStreamResponse)
	}
	e := &leaderEntry{bucket: bucket, key: key, value: resp.Message.Data, rev: resp.Message.Sequence, created: resp.Message.Time, op: jetstream.KeyValuePut}
	if len(resp.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(resp.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("reading %s from the leader of stream %s: decoding the headers: %w", key, stream, err)
		}
		switch h.Get("KV-Operation") {
		case "DEL":
			e.op = jetstream.KeyValueDelete
		case "PURGE":
			e.op = jetstream.KeyValuePurge
		}
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			e.op = jetstream.KeyValuePurge
		case "Remove":
			e.op = jetstream.KeyValueDelete
		}
	}
	if e.op != jetstream.KeyValuePut {
		return nil, jetstream.ErrKeyNotFound // as kv.Get
	}
	return e, nil
}

// leaderEntry is a jetstream.KeyValueEntry read by leaderGet.
type leaderEntry struct {
	bucket, key string
	value       []byte
	rev         uint64
	created     time.Time
	op          jetstream.KeyValueOp
}

func (e *leaderEntry) Bucket() string                  { return e.bucket }
func (e *leaderEntry) Key() string                     { return e.key }
func (e *leaderEntry) Value() []byte                   { return e.value }
func (e *leaderEntry) Revision() uint64                { return e.rev }
func (e *leaderEntry) Created() time.Time              { return e.created }
func (e *leaderEntry) Delta() uint64                   { return 0 }
func (e *leaderEntry) Operation() jetstream.KeyValueOp { return e.op }

// leaderObjectStore binds the object store bucket again with direct gets
// off on its stream when it is replicated, so that a result's metadata is
// read from the leader (see above): a record names its result object once
// the object is written, and a replica behind would answer "not found".
// obj is returned as it is on one server.
func (q *Queue) leaderObjectStore(ctx context.Context, obj jetstream.ObjectStore, bucket string) (jetstream.ObjectStore, error) {
	leader := obj
	err := q.cfg.Retry.Do(ctx, q.what("object store", bucket), func(ctx context.Context) error {
		stream, err := q.js.Stream(ctx, "OBJ_"+bucket)
		if err != nil {
			return err
		}
		cfg := stream.CachedInfo().Config
		if cfg.Replicas <= 1 {
			return nil
		}
		if cfg.AllowDirect {
			cfg.AllowDirect = false
			if _, err := q.js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("turning direct gets off: %w", err)
			}
		}
		leader, err = q.js.ObjectStore(ctx, bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", bucket, err)
	}
	return leader, nil
}
