package queue

import "github.com/nats-io/nats.go/jetstream"

// JetStream is the queue's JetStream context, for other stores that keep
// their data beside the queue's (the cluster state buckets). It stays valid
// across a restart of the embedded server: the connection reconnects.
func (q *Queue) JetStream() jetstream.JetStream { return q.js }

// Replicas is the replication factor the queue's own streams use; stores
// beside it use the same.
func (q *Queue) Replicas() int { return q.cfg.Replicas }
