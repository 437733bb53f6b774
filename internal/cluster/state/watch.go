package state

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Watch calls f with a cluster's name whenever one of its keys changes
// (the cluster, a node, a job, a task, the lock), on any daemon or
// loomd apply writing the bucket, until ctx ends. It returns once the
// watch is set up; f runs on the watch's goroutine and must not block.
func (s *KVStore) Watch(ctx context.Context, f func(cluster string)) error {
	w, err := s.kv.WatchAll(ctx, jetstream.UpdatesOnly(), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("watching bucket %s: %w", Bucket, err)
	}
	go func() {
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				name, _, _ := strings.Cut(e.Key(), ".")
				f(name)
			}
		}
	}()
	return nil
}
