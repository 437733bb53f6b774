package queue

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/internal/jsretry"
)

// Config says where the queue lives and how workers behave. The zero
// value of every field but DataDir (embedded mode) picks a default.
type Config struct {
	// DataDir holds the embedded server's file store, in DataDir/jetstream.
	// It is required unless URLs is set.
	DataDir string
	// URLs, when set, connect to an external NATS server or cluster instead
	// of starting the embedded one. Everything after the connection is the
	// same code path.
	URLs []string
	// Token authenticates to an external NATS. With the embedded server it
	// is the token the server requires from every client instead of the
	// nkey (NkeyFile).
	Token string
	// User and Password authenticate to an external NATS.
	User, Password string
	// NkeyFile is a user nkey seed file. With an external NATS, the client
	// signs the server's nonce with it. With the embedded server, it is the
	// key the server requires from every client, loomd's own in-process
	// client included; default DataDir/nats.nk, generated on first start
	// (mode 0600). Another daemon joins with a copy of it.
	NkeyFile string
	// CredsFile is a NATS credentials file (user JWT and nkey seed) for an
	// external NATS.
	CredsFile string
	// TLSCA is a PEM file of CAs to verify an external NATS server's
	// certificate with (default: the system pool, once the server asks for
	// TLS). TLSCert and TLSKey are a client certificate and key, for a
	// server that verifies clients.
	TLSCA, TLSCert, TLSKey string
	// ListenAddr exposes the embedded server's client port (host:port) so
	// other daemons and tools can connect. Empty means no listener: only the
	// in-process connection. Clients always need the credentials (NkeyFile
	// or Token), on loopback too.
	ListenAddr string
	// Listeners, when set, registers the embedded server's listening
	// sockets (the client port of ListenAddr, and any other the server
	// opens) as the daemon's own: plugins never reach them.
	Listeners *listeners.Registry
	// ServerName is the embedded server's stable name; default
	// "loomd-<hostname>".
	ServerName string
	// Domain is the JetStream domain: the embedded server's own domain, or
	// the domain to reach on an external server through a leafnode.
	Domain string
	// NATSOptions are extra client options (credentials, TLS, ...).
	NATSOptions []nats.Option

	// Owner names this worker in task records; default "<hostname>-<pid>".
	Owner string
	// ServedTTL is how long a daemon's announcement that it serves a plugin
	// type counts (see Served); each daemon renews its own every third of
	// it. A daemon that died stops counting after this long. Default 15s.
	ServedTTL time.Duration
	// Capabilities are announced with the served plugin types: what this
	// daemon can do that older daemons cannot (Lacking names the daemons
	// without one). Version is the loomd version announced with them.
	Capabilities []string
	Version      string
	// AckWait is how long a delivered task may go without a heartbeat
	// before it is redelivered to another worker; default 30s. Heartbeats
	// are sent every AckWait/3.
	AckWait time.Duration
	// MaxAttempts bounds how many times a task is started after
	// infrastructure failures (runner errors, daemons dying); default 5.
	MaxAttempts int
	// MaxCrashes bounds how many attempts of one task may kill the worker
	// running it (a Runner error wrapping ErrWorkerCrashed) before the task
	// fails for good with error kind "crash"; default 2. A poison task
	// thus cannot crash-loop the workers.
	MaxCrashes int
	// RetryDelay is the delay before the second attempt after a runner
	// error; it doubles for every later attempt, up to a minute. Default 1s.
	RetryDelay time.Duration
	// PollInterval is how often idle workers look for redelivered tasks
	// (another daemon's claim that expired after AckWait, a retry whose
	// delay passed): one stream info per task stream shard, then a fetch
	// from each served type whose subject holds messages. Such a task
	// starts within about PollInterval after it can be delivered again.
	// Default 1s. New tasks are noticed at once (their publish wakes the
	// type).
	PollInterval time.Duration
	// Duplicates is the stream's dedupe window for task ids; default 10m.
	// Outside it, the task records still dedupe submissions.
	Duplicates time.Duration
	// Replicas of the stream and buckets: 1 (default) or 3 on a cluster.
	Replicas int
	// Retry waits out what a NATS cluster cannot do right now while Open
	// creates or opens the streams and buckets (a server offline, a leader
	// being elected: see jsretry.Transient), until Open's context ends;
	// permanent errors fail at once. Default: a waiter that warns on
	// Logger.
	Retry *jsretry.Waiter
	// SyncInterval is how often the embedded server fsyncs its store. Zero
	// (the default) fsyncs every write: an acknowledged submission survives
	// a power loss. A positive interval trades that for throughput (NATS's
	// own default is 2m); a kill -9 of the process still loses nothing.
	SyncInterval time.Duration
	// MaxStore caps the embedded server's disk use in bytes; 0 lets the
	// server choose (75% of free space).
	MaxStore int64
	// StoreReserve is the free space under DataDir below which the
	// embedded store counts as full and submits are refused (default
	// DefaultStoreReserve).
	StoreReserve int64
	// ReconcileInterval is how often a serving queue checks its queued and
	// running records against the task stream (default 1 minute).
	ReconcileInterval time.Duration
	// ReconcileGrace is how old a record must be before the reconciler
	// judges it (default 2 x AckWait + 10s).
	ReconcileGrace time.Duration
	// StoreCheckInterval is how often the store's capacity is checked,
	// and a full store probed for recovery (default 500ms).
	StoreCheckInterval time.Duration

	// Retain is how long finished tasks (succeeded, failed, cancelled) are
	// kept after they finished; then they are deleted like Queue.Delete
	// does. Zero means DefaultRetain (7 days); a negative value keeps them
	// forever.
	Retain time.Duration
	// SweepInterval is how often expired tasks are looked for; default
	// a minute (or Retain/10, if shorter).
	SweepInterval time.Duration

	// Logger receives the queue's logs (and the embedded server's, at
	// debug level); default slog.Default() with nothing sent to stdout.
	Logger *slog.Logger
	// OnTransition, if set, is called after each state change this
	// process makes. It must not block.
	OnTransition func(Transition)
}

// Transition is one state change of a task, made by this process.
type Transition struct {
	From   State // "" for a new task
	Record Record
	// Lost marks the end of an attempt this process ran whose outcome was
	// not recorded (another daemon took the task over, or the write kept
	// failing): no state changed, but the attempt no longer runs here.
	// Record is the record as this process last wrote it.
	Lost bool
}

// Mode names how the queue reaches NATS: "embedded" or "external".
func (c Config) Mode() string {
	if len(c.URLs) > 0 {
		return "external"
	}
	return "embedded"
}

func (c Config) withDefaults() Config {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	if c.Owner == "" {
		c.Owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.ServerName == "" {
		c.ServerName = "loomd-" + strings.Map(func(r rune) rune {
			if r <= ' ' || r == '.' || r == '*' || r == '>' {
				return '-'
			}
			return r
		}, host)
	}
	if c.AckWait == 0 {
		c.AckWait = 30 * time.Second
	}
	if c.ServedTTL == 0 {
		c.ServedTTL = 15 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.MaxCrashes == 0 {
		c.MaxCrashes = 2
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.Duplicates == 0 {
		c.Duplicates = 10 * time.Minute
	}
	if c.Retain == 0 {
		c.Retain = DefaultRetain
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = time.Minute
		if c.Retain > 0 {
			c.SweepInterval = max(min(c.SweepInterval, c.Retain/10), 10*time.Millisecond)
		}
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.StoreReserve == 0 {
		c.StoreReserve = DefaultStoreReserve
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = time.Minute
	}
	if c.ReconcileGrace == 0 {
		c.ReconcileGrace = 2*c.AckWait + 10*time.Second
	}
	if c.StoreCheckInterval == 0 {
		c.StoreCheckInterval = 500 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Retry == nil {
		c.Retry = &jsretry.Waiter{Logger: c.Logger, Hint: jsretry.Hint(c.Replicas, "replicas")}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if len(c.URLs) == 0 && c.DataDir == "" {
		errs = append(errs, errors.New("no data directory: set one for the embedded NATS server's store, or give the URLs of an external NATS"))
	}
	if len(c.URLs) > 0 && c.ListenAddr != "" {
		errs = append(errs, errors.New("a NATS listen address only applies to the embedded server; drop it when connecting to an external NATS"))
	}
	if c.ListenAddr != "" {
		if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
			errs = append(errs, fmt.Errorf("NATS listen address %q: %w (want host:port, e.g. 127.0.0.1:4222)", c.ListenAddr, err))
		}
	}
	errs = append(errs, c.validateAuth()...)
	if c.AckWait < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("ack wait %v is too short: use at least 100ms (default 30s)", c.AckWait))
	}
	if c.ServedTTL < 300*time.Millisecond {
		errs = append(errs, fmt.Errorf("served ttl %v is too short: use at least 300ms (default 15s)", c.ServedTTL))
	}
	if c.MaxCrashes < 1 {
		errs = append(errs, fmt.Errorf("max crashes %d: must be at least 1", c.MaxCrashes))
	}
	if c.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("max attempts %d: must be at least 1", c.MaxAttempts))
	}
	if c.RetryDelay < 0 || c.PollInterval < 0 || c.Duplicates < 0 || c.SyncInterval < 0 {
		errs = append(errs, errors.New("retry delay, poll interval, dedupe window and sync interval must not be negative"))
	}
	if c.SweepInterval < 0 {
		errs = append(errs, errors.New("sweep interval must not be negative"))
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Errorf("replicas %d: use 1, 3 or 5", c.Replicas))
	}
	if len(c.URLs) == 0 && c.Replicas != 1 {
		errs = append(errs, fmt.Errorf("replicas %d needs an external NATS cluster; the embedded server is a single node", c.Replicas))
	}
	return errors.Join(errs...)
}

// IsLoopback reports whether host (a name or an IP, without port) only
// reaches this machine. An empty host means every interface: not loopback.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// backoff is the delay before attempt n+1 after attempt n failed.
func (c Config) backoff(n int) time.Duration {
	d := c.RetryDelay
	for i := 1; i < n && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}
