package joblog

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/jsretry"
	"github.com/loomrt/loom/internal/logstream"
)

// StreamName is the JetStream stream of the daemons' job logs: subject
// loom.clusterlog.<cluster>, one message per batch of entries.
const StreamName = "LOOM_CLUSTER_LOG"

const subjectPrefix = "loom.clusterlog."

// Subject is the subject of a cluster's job log.
func Subject(cluster string) string { return subjectPrefix + cluster }

// DefaultMaxBytes bounds the job log stream unless StreamOptions say
// otherwise.
const DefaultMaxBytes = 256 << 20

// StreamOptions tune a Stream; zero values pick the defaults.
type StreamOptions struct {
	// Replicas of the stream (1, or 3 on a NATS cluster).
	Replicas int
	// MaxBytes bounds the whole stream (default DefaultMaxBytes); the
	// oldest batches go first.
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
	// Paused, when set, stops storing entries while it says so (the store
	// is nearly full); see logstream.Options.
	Paused func() (string, bool)
	// Logger gets the stream's own warnings (entries dropped).
	Logger *slog.Logger
	// Retry waits out what a NATS cluster cannot do right now while the
	// stream is created (a server offline, an election), until the
	// context of Open ends; nil: tried once.
	Retry *jsretry.Waiter
}

// Stream keeps job logs in JetStream, keyed by cluster (a
// logstream.Stream: Write, Read, Last, Wait, Flush, Purge, Close).
type Stream = logstream.Stream

// OpenStream creates (or updates) the stream and starts publishing.
func OpenStream(ctx context.Context, js jetstream.JetStream, o StreamOptions) (*Stream, error) {
	lo := logstream.Options{Name: StreamName, Prefix: subjectPrefix, What: "job log",
		Description: "loomd cluster job logs: executor and plugin lines, task state changes; subject loom.clusterlog.<cluster>",
		Replicas:    o.Replicas, MaxBytes: o.MaxBytes, MaxAge: o.MaxAge, MaxPerKey: o.MaxPerCluster, Source: o.Source,
		FlushEvery: o.FlushEvery, Paused: o.Paused, Logger: o.Logger, Retry: o.Retry}
	if o.Secrets != nil {
		lo.Secrets = o.Secrets
	}
	return logstream.Open(ctx, js, lo)
}
