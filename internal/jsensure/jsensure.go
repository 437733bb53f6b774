// Package jsensure creates JetStream streams and buckets, or brings an
// existing one to a configuration, without rewriting one whose
// configuration did not change.
//
// jetstream's CreateOrUpdate* functions send an update first: the server
// then rewrites the stream's metadata file (synced to disk) and publishes
// an "updated" advisory even when nothing changed, and on a new store the
// update fails and a create follows. A daemon's start did that for every
// one of its twenty-odd streams. These functions send a create first,
// which the server answers at once, without writing, when the stream
// exists with the same configuration; only a stream whose configuration
// differs is updated. The end state is the one CreateOrUpdate* leaves.
package jsensure

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream creates the stream cfg names, or updates it to cfg when it exists
// with another configuration.
func Stream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateStream(ctx, cfg)
	}
	return s, err
}

// KeyValue creates the bucket, or updates it to cfg when it exists with
// another configuration.
func KeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
}

// ObjectStore creates the object store, or updates it to cfg when it
// exists with another configuration.
func ObjectStore(ctx context.Context, js jetstream.JetStream, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	obj, err := js.CreateObjectStore(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.UpdateObjectStore(ctx, cfg)
	}
	return obj, err
}

// AdjustedKeyValue makes the bucket of cfg exist, for a bucket whose
// stream its users adjust after it is made, with settings a
// KeyValueConfig cannot carry (direct gets off, atomic batches on).
// KeyValue would take the adjusted stream for another configuration and
// update it back, and until the adjustment is made again every daemon
// using the bucket would read and write it without the settings it relies
// on. So an existing bucket is updated to cfg only when a setting cfg
// gives differs (description, history, TTL, storage, replicas, size
// limits); the caller adjusts the stream afterwards, and binds the bucket.
func AdjustedKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	for try := 0; ; try++ {
		s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) && try == 0 {
				continue // another daemon made it meanwhile: compare
			}
			return err
		}
		if err != nil {
			return err
		}
		if !sameKeyValue(s.CachedInfo().Config, cfg) {
			_, err = js.UpdateKeyValue(ctx, cfg)
		}
		return err
	}
}

// sameKeyValue reports whether the bucket stream sc has the settings that
// cfg gives, as jetstream's KeyValue functions write them.
func sameKeyValue(sc jetstream.StreamConfig, cfg jetstream.KeyValueConfig) bool {
	history := int64(max(cfg.History, 1))
	replicas := max(cfg.Replicas, 1)
	maxBytes, maxValue := cfg.MaxBytes, cfg.MaxValueSize
	if maxBytes == 0 {
		maxBytes = -1
	}
	if maxValue == 0 {
		maxValue = -1
	}
	return sc.Description == cfg.Description && sc.MaxMsgsPerSubject == history && sc.MaxAge == cfg.TTL &&
		sc.Storage == cfg.Storage && sc.Replicas == replicas && sc.MaxBytes == maxBytes && int64(sc.MaxMsgSize) == int64(maxValue)
}
