package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	clusterrunner "github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/jsretry"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
)

// serveOptions are the flags of loomd serve.
type serveOptions struct {
	g               *globalOptions
	data            string
	listen          string
	token           string
	tokensFile      string
	apiReadTimeout  time.Duration
	apiMaxConns     int
	apiMaxBody      string
	apiMaxInflight  string
	memoryLimit     string
	specMax         string
	concurrency     int
	natsURLs        []string
	natsListen      string
	natsToken       string
	natsCreds       string
	natsUser        string
	natsPassword    string
	natsNkey        string
	natsCA          string
	natsCert        string
	natsKey         string
	natsDomain      string
	shutdownTimeout time.Duration
	ackWait         time.Duration
	maxAttempts     int
	retain          time.Duration
	watch           bool
	reloadDebounce  time.Duration
	timeout         time.Duration
	fsync           string
	storeMax        string
	storeReserve    string
	replicas        int
	startTimeout    time.Duration
	// retry waits out what the NATS cluster cannot do at start.
	retry        *jsretry.Waiter
	isolation    string
	pluginMemory string
	limitMode    string
	pprof        bool
	clusterLease time.Duration
	clusterTasks string
	taskLogs     taskLogOptions
	ui           bool
	uiReadOnly   bool
	coopr        cooprOptions
}

// cooprOptions are the --coopr-* flags: serving a Coopr server's tasks.
type cooprOptions struct {
	server    string
	id        string
	tenants   []string
	listen    string
	allow     []string
	advertise string
	capacity  int
	heartbeat time.Duration
	poll      time.Duration
	tls       coopr.TLS
	allowed   []netip.Prefix // --coopr-allow, parsed
}

func (a *App) newServeCmd(g *globalOptions) *cobra.Command {
	o := &serveOptions{g: g}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: serve tasks from the durable queue through the plugins (the default command)",
		Long: `Run the loomd daemon. It keeps a durable task queue (NATS JetStream, embedded
in the process with its store under --data, or an external NATS with --nats),
runs queued tasks through the plugins with --concurrency tasks in flight,
answers the HTTP API on --listen (docs/api.md), and reloads plugins when
their folders change.

Hooks run in worker processes (--isolation worker, the default): one pool
per plugin type, one hook at a time per process, each under a memory
budget (--plugin-memory, or limits.memory in a plugin's definition). A
hook over its budget fails its own task with error kind "memory"; a
worker that dies fails only its task, and is replaced.

Every flag can also be set with a LOOM_* environment variable (--nats-listen
is LOOM_NATS_LISTEN) or in the --config file. SIGTERM or SIGINT stops taking
tasks and lets the running ones finish for up to --shutdown-timeout, then
exits 0. A second signal, or the end of --shutdown-timeout with tasks still
running, interrupts them and exits 1; the interrupted tasks run again later.`,
		Example: `  loomd --plugins examples/plugins
  loomd serve --data /var/lib/loomd --listen 0.0.0.0:7070 --token "$TOKEN"
  loomd serve --nats-listen 127.0.0.1:4222            # let other daemons join
  loomd serve --nats nats://127.0.0.1:4222 --data ./b  # join it`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runServe(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.data, "data", "loom-data", "data directory: the embedded NATS JetStream store (fsync on every write)")
	f.StringVar(&o.listen, "listen", api.DefaultAddr, "HTTP API address; anything but loopback requires --token or --tokens-file")
	f.StringVar(&o.token, "token", "", "admin bearer token the HTTP API requires (this or --tokens-file is required off loopback)")
	f.StringVar(&o.tokensFile, "tokens-file", "", "JSON file of the API's tokens, each for one tenant or all (admin), optionally read-only; read again when it changes (docs/api.md, Authentication)")
	f.DurationVar(&o.apiReadTimeout, "api-read-timeout", 30*time.Second, "time a client has to send a request's headers and body; slower clients are cut off")
	f.IntVar(&o.apiMaxConns, "api-max-conns", 512, "HTTP API connections served at once; more wait in the backlog")
	f.StringVar(&o.clusterTasks, "cluster-tasks", "queue", "where the tasks of the cluster jobs this daemon runs go: \"queue\" (each a durable queued task: in the task list, run by any daemon serving its plugin type) or \"local\" (run on this daemon's own workers when it serves the type, recorded in the cluster's state only: a 100-node create 2-3x faster with --fsync always; see docs/clusters.md)")
	f.DurationVar(&o.clusterLease, "cluster-lease", 15*time.Second, "lease of a cluster job (loomd apply, destroy) this daemon runs, renewed every third of it; when the daemon dies, another daemon sharing the queue takes the job over once the lease ran out and the daemon stopped announcing itself (at once when it was on the same host and its process is gone)")
	f.StringVar(&o.apiMaxBody, "api-max-body", "4MiB", "largest request body the HTTP API reads (a task, a call); larger ones get 413")
	f.StringVar(&o.apiMaxInflight, "api-max-inflight-bytes", "64MiB", "request bodies the HTTP API holds at once, all requests together; past it a request gets 503 with Retry-After (bounds the daemon's memory under many submitters); at least --api-max-body")
	f.StringVar(&o.specMax, "spec-max-size", "8MiB", "largest cluster spec the daemon accepts (in a cluster's state); a larger one gets 413 before it is stored")
	f.StringVar(&o.memoryLimit, "memory-limit", "384MiB", "soft limit of the daemon's own Go memory: the garbage collector works harder near it, so bursts (many large tasks at once) do not grow its RSS; never stops it (0: off; GOMEMLIMIT in the environment takes precedence)")
	f.BoolVar(&o.pprof, "pprof", false, "serve the Go profiler under /debug/pprof/ on the API listener (behind --token; shows the daemon's internals: turn it on only to debug)")
	f.BoolVar(&o.ui, "ui", true, "serve the web console under /ui on the API's address, behind the same token (docs/ui.md)")
	f.BoolVar(&o.uiReadOnly, "ui-readonly", false, "web console without actions: it shows everything and refuses cancel, delete, reload and cluster jobs")
	f.IntVar(&o.concurrency, "concurrency", 8, "tasks in flight at once")
	f.StringSliceVar(&o.natsURLs, "nats", nil, "external NATS URL(s), comma-separated, instead of the embedded server")
	f.StringVar(&o.natsListen, "nats-listen", "", "expose the embedded NATS server on this address (e.g. 127.0.0.1:4222) so other daemons can join with --nats")
	f.StringVar(&o.natsToken, "nats-token", "", "NATS token sent to --nats; with the embedded server, the token it requires instead of the nkey (prefer LOOM_NATS_TOKEN: flags show in ps)")
	f.StringVar(&o.natsNkey, "nats-nkey", "", "NATS user nkey seed file: signs in to --nats; with the embedded server, the key it requires (default <data>/nats.nk, generated with mode 0600)")
	f.StringVar(&o.natsUser, "nats-user", "", "NATS user name for --nats (with --nats-password)")
	f.StringVar(&o.natsPassword, "nats-password", "", "NATS password for --nats-user (prefer LOOM_NATS_PASSWORD: flags show in ps)")
	f.StringVar(&o.natsCreds, "nats-creds", "", "NATS credentials file (JWT and nkey) for --nats")
	f.StringVar(&o.natsCA, "nats-ca", "", "PEM file of CAs that sign the --nats servers' certificates (TLS)")
	f.StringVar(&o.natsCert, "nats-cert", "", "TLS client certificate (PEM) for --nats servers that verify clients, with --nats-key")
	f.StringVar(&o.natsKey, "nats-key", "", "private key (PEM) of --nats-cert")
	f.IntVar(&o.replicas, "replicas", 1, "replicas of the stream and buckets on an external NATS cluster (1, 3 or 5)")
	f.DurationVar(&o.startTimeout, "start-timeout", 2*time.Minute, "how long the start waits for a NATS server to connect to (--nats not reachable yet) and for the NATS cluster to create or open the streams and buckets while it cannot (a server offline, a leader election), before loomd exits saying what is missing; 0 waits until a signal")
	f.StringVar(&o.natsDomain, "nats-domain", "", "JetStream domain (embedded server's own, or the one to reach through a leafnode)")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight tasks may run after SIGTERM/SIGINT before they are interrupted")
	f.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "a running task silent this long (its daemon died) is redelivered; heartbeats every third of it")
	f.IntVar(&o.maxAttempts, "max-attempts", 5, "attempts after infrastructure failures (runner errors, dead daemons) before a task fails")
	f.DurationVar(&o.retain, "retain", queue.DefaultRetain, "delete finished tasks (succeeded, failed, cancelled) this long after they finished; 0 keeps them forever")
	o.taskLogs.addFlags(f)
	f.BoolVar(&o.watch, "watch", true, "reload plugins when files under --plugins change")
	f.DurationVar(&o.reloadDebounce, "reload-debounce", 200*time.Millisecond, "quiet time after the last plugin file change before reloading")
	f.StringVar(&o.storeMax, "store-max", "", "size limit of the embedded store (e.g. 10GiB); past it submits get 507 until records expire or are deleted (default: 75% of the free space at start)")
	f.StringVar(&o.storeReserve, "store-reserve", "32MiB", "free disk space under --data below which the embedded store counts as full: submits get 507 before a write can fail")
	f.StringVar(&o.fsync, "fsync", "always", "embedded store fsync policy: \"always\" (every write; survives power loss) or an interval such as 1s (faster; a crash of the machine may lose that much)")
	f.DurationVar(&o.timeout, "timeout", 0, "deadline for each hook, overriding the plugin definitions' timeouts (default: theirs, or 10m)")
	// Isolation of hooks (docs/operations.md, "Worker processes").
	f.StringVar(&o.isolation, "isolation", isolationWorker, "where hooks run: \"worker\" (child processes under a memory budget; a crash fails only its task) or \"none\" (in the daemon's process, no memory budget)")
	f.StringVar(&o.pluginMemory, "plugin-memory", "256MiB", "memory budget of one hook run, unless its plugin definition sets limits.memory (--isolation worker)")
	f.StringVar(&o.limitMode, "worker-limit", "auto", "OS memory limit of worker processes: auto (cgroup v2 when loomd may write its cgroup, else rlimit), cgroup, or rlimit")
	// A Coopr server as a second source of tasks (docs/coopr.md).
	f.StringVar(&o.coopr.server, "coopr-server", "", "also take tasks from this Coopr server's internal API (provisioner.server.uri, e.g. http://coopr:55055): register, heartbeat, take/finish per worker slot")
	f.StringVar(&o.coopr.id, "coopr-provisioner-id", "", "provisioner id at the Coopr server (default loom-<short hostname>, stable across restarts)")
	f.StringSliceVar(&o.coopr.tenants, "coopr-tenants", nil, "tenants to serve before the server assigns any, as ID[:WORKERS] (default 1 worker), comma-separated; the server's PUT /v2/tenants/{id} adjusts them")
	f.StringVar(&o.coopr.listen, "coopr-listen", "127.0.0.1:55056", "address of the provisioner API the Coopr server calls (tenants); provisioner.bind.ip:bind.port. The server must reach it: listen off loopback on a trusted network only (the API has no authentication, as in Coopr)")
	f.StringSliceVar(&o.coopr.allow, "coopr-allow", nil, "addresses or CIDR prefixes that may call the provisioner API, comma-separated (default: loopback and the --coopr-server host's addresses; 0.0.0.0/0,::/0 lets anyone)")
	f.StringVar(&o.coopr.advertise, "coopr-advertise", "", "host sent to the Coopr server for calling the provisioner API (provisioner.register.ip; default: the --coopr-listen host, or this host's address toward the server)")
	f.IntVar(&o.coopr.capacity, "coopr-capacity", 10, "worker slots this provisioner offers the Coopr server (capacityTotal); each runs one task at a time")
	f.DurationVar(&o.coopr.heartbeat, "coopr-heartbeat", 10*time.Second, "heartbeat interval to the Coopr server (it drops a provisioner silent for 120 s)")
	f.DurationVar(&o.coopr.poll, "coopr-poll", time.Second, "wait after an empty take before asking the Coopr server again; errors back off from it up to 10 s")
	f.StringVar(&o.coopr.tls.CAFile, "coopr-ca", "", "PEM file of CAs that sign an https:// --coopr-server's certificate (default: the system's roots)")
	f.StringVar(&o.coopr.tls.CertFile, "coopr-cert", "", "TLS client certificate (PEM) for a Coopr server that verifies clients (trust.cert.path; the file may hold the key too); reloaded when it changes")
	f.StringVar(&o.coopr.tls.KeyFile, "coopr-key", "", "unencrypted private key (PEM) of --coopr-cert, when not in the same file")
	return cmd
}

// runtimeRunner runs queued tasks through the runtime.
type runtimeRunner struct{ rt *runtime.Runtime }

func (r runtimeRunner) Run(ctx context.Context, task []byte) ([]byte, int, error) {
	res, err := r.rt.Run(ctx, task)
	if err != nil {
		return nil, 0, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding the result: %w", err)
	}
	return b, res.Status, nil
}

// routesOf lists the queue routes of the loaded plugin types.
func routesOf(types []runtime.TypeInfo) []queue.Route {
	out := make([]queue.Route, 0, len(types))
	for _, t := range types {
		out = append(out, queue.Route{Family: string(t.Family), Type: t.Name})
	}
	return out
}

func (a *App) runServe(ctx context.Context, o *serveOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	start := time.Now()
	// The start allocates its heap from nothing (plugins, streams,
	// consumers): collecting at every doubling from 4 MiB took about a
	// tenth of its CPU. The heap may grow further before the first
	// collection until shortly after the daemon serves; GOGC, when set,
	// is left alone.
	restoreGC := func() {}
	if a.Getenv("GOGC") == "" {
		prev := debug.SetGCPercent(startGCPercent)
		var once sync.Once
		restoreGC = func() { once.Do(func() { debug.SetGCPercent(prev) }) }
	}
	defer restoreGC()
	baseLogger, err := a.newLogger(o.g.log)
	if err != nil {
		return err
	}
	// Plugin lines of cluster jobs' tasks also go to the jobs' logs.
	tee := logstream.NewTee()
	logger := slog.New(tee.Handler(baseLogger.Handler()))
	if o.concurrency < 1 {
		return usageErr(fmt.Errorf("--concurrency %d: must be at least 1", o.concurrency))
	}
	if o.shutdownTimeout < 0 {
		return usageErr(fmt.Errorf("--shutdown-timeout %v: must not be negative", o.shutdownTimeout))
	}
	if o.clusterTasks != "queue" && o.clusterTasks != "local" {
		return usageErr(fmt.Errorf("--cluster-tasks %q: use queue or local", o.clusterTasks))
	}
	if o.clusterLease < time.Second {
		return usageErr(fmt.Errorf("--cluster-lease %v: must be at least 1s", o.clusterLease))
	}
	if o.startTimeout < 0 {
		return usageErr(fmt.Errorf("--start-timeout %v: must not be negative", o.startTimeout))
	}
	allSigs, stopSignals := a.signals(2)
	defer stopSignals()
	// The start waits for a NATS cluster that cannot create the streams
	// and buckets right now (a server offline, an election) at most
	// --start-timeout; a signal meanwhile ends the wait, and is seen
	// again by the serve loop below.
	startCtx, endStart := context.WithCancelCause(ctx)
	if o.startTimeout > 0 {
		var endTimer context.CancelFunc
		startCtx, endTimer = context.WithTimeoutCause(startCtx, o.startTimeout, fmt.Errorf("--start-timeout %v ran out", o.startTimeout))
		defer endTimer()
	}
	defer endStart(nil)
	sigs := make(chan os.Signal, 2)
	relayDone := make(chan struct{})
	defer close(relayDone)
	go func() {
		for {
			select {
			case s := <-allSigs:
				// Queued first: a wait the end of the start interrupts
				// finds it there.
				select {
				case sigs <- s:
				default:
				}
				endStart(fmt.Errorf("%v during the start", s))
			case <-relayDone:
				return
			}
		}
	}()
	o.retry = &jsretry.Waiter{Logger: logger.With("component", "queue"),
		Hint: jsretry.Hint(o.replicas, "--replicas") + fmt.Sprintf(" (loomd's start waits up to --start-timeout, %v)", o.startTimeout)}

	if err := api.CheckAddr(o.listen, o.token != "" || o.tokensFile != ""); err != nil {
		return usageErr(err)
	}
	apiTokens, err := tokens.Load(o.tokensFile, o.token)
	if err != nil {
		return usageErr(err)
	}
	if o.token != "" && len(o.token) < tokens.MinLength {
		logger.Warn("--token is short enough to guess over the network: use at least 16 random characters (openssl rand -hex 32)", "length", len(o.token))
	}
	stopTokens, err := apiTokens.Watch(logger.With("component", "api"))
	if err != nil {
		return err
	}
	defer stopTokens()
	cooprTenants, err := o.coopr.parse()
	if err != nil {
		return usageErr(err)
	}
	var syncInterval time.Duration
	if o.fsync != "always" {
		d, err := time.ParseDuration(o.fsync)
		if err != nil || d <= 0 {
			return usageErr(fmt.Errorf("--fsync %q: want \"always\" or a positive duration such as 1s", o.fsync))
		}
		syncInterval = d
	}
	var storeMax, storeReserve int64
	if o.storeMax != "" {
		n, err := runtime.ParseSize(o.storeMax)
		if err != nil {
			return usageErr(fmt.Errorf("--store-max: %w", err))
		}
		storeMax = n
	}
	if n, err := runtime.ParseSize(o.storeReserve); err != nil {
		return usageErr(fmt.Errorf("--store-reserve: %w", err))
	} else {
		storeReserve = n
	}
	apiMaxBody, err := runtime.ParseSize(o.apiMaxBody)
	if err != nil || apiMaxBody < 1 {
		return usageErr(fmt.Errorf("--api-max-body %q: want a size such as 4MiB", o.apiMaxBody))
	}
	apiMaxInflight, err := runtime.ParseSize(o.apiMaxInflight)
	if err != nil || apiMaxInflight < apiMaxBody {
		return usageErr(fmt.Errorf("--api-max-inflight-bytes %q: want a size such as 64MiB, at least --api-max-body (%s)", o.apiMaxInflight, o.apiMaxBody))
	}
	specMax, err := runtime.ParseSize(o.specMax)
	if err != nil || specMax < 1 {
		return usageErr(fmt.Errorf("--spec-max-size %q: want a size such as 8MiB", o.specMax))
	}
	var memoryLimit int64
	if o.memoryLimit != "0" && o.memoryLimit != "" {
		if memoryLimit, err = runtime.ParseSize(o.memoryLimit); err != nil {
			return usageErr(fmt.Errorf("--memory-limit %q: want a size such as 384MiB, or 0 for none", o.memoryLimit))
		}
	}
	if memoryLimit > 0 && a.Getenv("GOMEMLIMIT") == "" {
		// Bounded input (--api-max-inflight-bytes) bounds what is live;
		// this bounds the garbage around it, which Go would otherwise let
		// grow to the size of the live heap again before collecting.
		prev := debug.SetMemoryLimit(memoryLimit)
		defer debug.SetMemoryLimit(prev)
	}
	var pluginMemory int64
	switch o.isolation {
	case isolationWorker:
		n, err := runtime.ParseSize(o.pluginMemory)
		if err != nil {
			return usageErr(fmt.Errorf("--plugin-memory: %w", err))
		}
		if n < runtime.MinMemoryLimit {
			return usageErr(fmt.Errorf("--plugin-memory %s: below the minimum of %s", o.pluginMemory, runtime.FormatSize(runtime.MinMemoryLimit)))
		}
		pluginMemory = n
		switch o.limitMode {
		case "auto", "cgroup", "rlimit":
		default:
			return usageErr(fmt.Errorf("--worker-limit %q: want auto, cgroup or rlimit", o.limitMode))
		}
	case isolationNone:
	default:
		return usageErr(fmt.Errorf("--isolation %q: want worker or none", o.isolation))
	}
	if o.retain < 0 {
		return usageErr(fmt.Errorf("--retain %v: want a duration such as 168h, or 0 to keep finished tasks forever", o.retain))
	}
	retain := o.retain
	if retain == 0 {
		retain = -1 // the queue's "forever"
	}
	metrics := api.NewMetrics()
	qcfg := queue.Config{
		Retain:       retain,
		DataDir:      o.data,
		URLs:         o.natsURLs,
		Token:        o.natsToken,
		User:         o.natsUser,
		Password:     o.natsPassword,
		NkeyFile:     o.natsNkey,
		CredsFile:    o.natsCreds,
		TLSCA:        o.natsCA,
		TLSCert:      o.natsCert,
		TLSKey:       o.natsKey,
		ListenAddr:   o.natsListen,
		Domain:       o.natsDomain,
		AckWait:      o.ackWait,
		MaxAttempts:  o.maxAttempts,
		SyncInterval: syncInterval,
		MaxStore:     storeMax,
		StoreReserve: storeReserve,
		Replicas:     o.replicas,
		Retry:        o.retry,
		Logger:       logger.With("component", "queue"),
		OnTransition: metrics.Observe,
		Listeners:    o.g.listeners,
		// Announced with the served types: a daemon sharing the queue
		// uses the cluster state's journal only while every live daemon
		// announces that it reads it (older ones announce nothing).
		Capabilities: []string{state.JournalCapability},
		Version:      a.Version,
	}
	if len(o.natsURLs) > 0 {
		qcfg.DataDir = ""
	}

	if o.g.ssh.hostKeys == "" {
		// The daemon's host-key trust lives with its other state, outside
		// the work dir that plugins write.
		o.g.ssh.hostKeys = filepath.Join(o.data, "known_hosts")
	}
	// Results name who ran them, as a Coopr worker's did: the provisioner
	// (this daemon, or its id at a Coopr server) and the worker (host and
	// pid, the queue's owner name).
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	short, _, _ := strings.Cut(host, ".")
	o.g.provisionerID = o.coopr.id
	if o.g.provisionerID == "" {
		o.g.provisionerID = "loom-" + short
	}
	o.g.workerID = fmt.Sprintf("%s-%d", host, os.Getpid())
	// The plugins load while the queue opens (its server starts and its
	// streams are created): neither needs the other, and each took about
	// a third of the start with 50 plugin folders on a new store.
	//
	// With worker isolation, the first worker starts as soon as the
	// plugins are loaded, while the rest is set up; the queue serves
	// tasks only once it answered.
	type loaded struct {
		rt  *runtime.Runtime
		sup *worker.Supervisor
		err error
	}
	rtDone := make(chan loaded, 1)
	warmed := make(chan error, 1)
	go func() {
		rt, err := a.newRuntime(ctx, o.g, runtimeConfig{timeout: o.timeout, logger: logger.With("component", "runtime")})
		if err != nil || o.isolation != isolationWorker {
			rtDone <- loaded{rt, nil, err}
			return
		}
		sup, err := a.newSupervisor(o, logger.With("component", "worker"))
		if err != nil {
			rt.Close()
			rtDone <- loaded{nil, nil, err}
			return
		}
		sup.SetPlugins(typeSpecs(rt.Types(), pluginMemory), rt.Sources())
		if types := rt.Types(); len(types) > 0 {
			go func() { warmed <- sup.Warm(ctx, types[0].Name) }()
		} else {
			warmed <- nil
		}
		rtDone <- loaded{rt, sup, nil}
	}()
	q, qerr := queue.Open(startCtx, qcfg)
	l := <-rtDone
	if l.err != nil {
		if qerr == nil {
			q.Close()
		}
		return l.err
	}
	rt, sup := l.rt, l.sup
	rtClosed := false
	defer func() {
		if !rtClosed {
			rt.Close()
		}
	}()
	if sup != nil {
		defer sup.Close()
	}
	if qerr != nil {
		return usageErr(o.retry.Explain(qerr))
	}
	defer q.Close()

	// The consumers of the plugin types are created once the API
	// listens, while the cluster jobs and task logs open: no submit needs
	// them (tasks wait in their streams), and until they exist the queue
	// says this daemon serves its types (ExpectTypes), so that the API
	// never says a type it serves has nobody serving it. The queue serves
	// tasks only after they are created.
	// Those of the task stream's other shards wait until the API
	// listens too: nothing needs them before, and they are most of the
	// consumers. (On an early return, closing the queue ends the wait.)
	releaseFill := q.HoldShardFill()
	routes := routesOf(rt.Types())
	q.ExpectTypes(routes)
	typesSet := make(chan error, 1)
	typesStarted, typesWaited := false, false
	// Under reloadMu, with the types loaded then: a reload the API or
	// console asked for meanwhile must not be undone by this one.
	var reloadMu sync.Mutex
	setTypes := func() {
		typesStarted = true
		go func() {
			reloadMu.Lock()
			defer reloadMu.Unlock()
			typesSet <- q.SetTypes(startCtx, routesOf(rt.Types()))
		}()
	}
	waitTypes := func() error {
		if !typesStarted || typesWaited {
			return nil
		}
		typesWaited = true
		return <-typesSet
	}
	defer func() { _ = waitTypes() }() // before q.Close, on an early return

	var runner queue.Runner = runtimeRunner{rt}
	var plugins api.Plugins = rt
	if sup != nil {
		runner = workerRunner{rt: rt, sup: sup}
		plugins = workerPlugins{Runtime: rt, sup: sup}
	}

	// The task logs and the cluster jobs (their streams and buckets: on a
	// new store, a fifth of the ones to create) open once the API
	// listens: no task submit or read needs them. Requests that do wait
	// for them (api.Late), and the queue serves no task before.
	late := api.NewLate("the cluster jobs' and task logs' streams and buckets")

	// The console's reload runs what the hot reload runs; the Coopr link
	// it tells exists only once started, below.
	var cpMu sync.Mutex
	var cp *coopr.Provisioner
	coopLink := func() *coopr.Provisioner {
		cpMu.Lock()
		defer cpMu.Unlock()
		return cp
	}
	var ui webConsole
	reloadAll := func(ctx context.Context) (runtime.ReloadReport, error) {
		reloadMu.Lock()
		defer reloadMu.Unlock()
		rep, err := a.reload(ctx, rt, q, logger)
		if sup != nil {
			sup.SetPlugins(typeSpecs(rt.Types(), pluginMemory), rt.Sources())
		}
		if p := coopLink(); p != nil {
			p.SetTypes(cooprTypes(rt.Types()))
		}
		if ui != nil {
			ui.Reloaded(rep, err)
		}
		return rep, err
	}
	acfg := api.Config{Addr: o.listen, Tokens: apiTokens, DefaultTenant: o.g.tenant, Queue: q, Plugins: plugins, Metrics: metrics,
		ReadTimeout: o.apiReadTimeout, MaxConns: o.apiMaxConns, MaxBody: apiMaxBody, MaxInflight: apiMaxInflight, SpecMax: specMax, Pprof: o.pprof, Listeners: o.g.listeners, Logger: logger.With("component", "api"),
		Late: late}
	var cooprStatus func() coopr.Status
	if o.coopr.server != "" {
		cooprStatus = func() coopr.Status {
			p := coopLink()
			if p == nil {
				return coopr.Status{Server: o.coopr.server, RegError: "starting"}
			}
			return p.Status()
		}
	}
	if o.ui {
		deps := uiDeps{token: o.token, tokens: apiTokens, readOnly: o.uiReadOnly, queue: q, plugins: plugins, metrics: metrics, coopr: cooprStatus,
			tenant: o.g.tenant, late: late, reload: reloadAll, logger: logger.With("component", "console")}
		if sup != nil {
			deps.workers = sup.Workers
		}
		if ui, err = startUI(deps); err != nil {
			return usageErr(err)
		}
		defer ui.Close()
		acfg.UI = ui.Handler()
	}
	srv, err := api.New(acfg)
	if err != nil {
		return usageErr(err)
	}
	if err := srv.Start(); err != nil {
		return usageErr(err)
	}
	setTypes()
	releaseFill()

	// What the API and console wait for (api.Late), while the consumers
	// are created; the task logs' stream and the cluster jobs' streams
	// and buckets at once: each is a few JetStream requests in turn.
	type openedLogs struct {
		tl  taskLogs
		err error
	}
	logsDone := make(chan openedLogs, 1)
	go func() {
		tl, err := a.startTaskLogs(startCtx, o, q, tee, baseLogger)
		logsDone <- openedLogs{tl, err}
	}()
	cj, err := a.startClusterJobs(startCtx, o, q, baseLogger, metrics, rt)
	tl := <-logsDone
	if err == nil && tl.err != nil {
		cj.close()
		err = tl.err
	} else if err != nil {
		tl.tl.Close()
	}
	if err != nil {
		err = o.retry.Explain(err)
		late.Set(api.LateParts{}, err)
		select {
		case sig := <-sigs:
			// Stopped while it waited for the NATS cluster: nothing ran.
			logger.Info("loomd stopped during the start: the cluster jobs and task logs were not open yet", "signal", fmt.Sprint(sig))
			stopAPI(srv)
			return nil
		default:
		}
		logger.Error("cannot open the cluster jobs and task logs; loomd exits", "err", err)
		stopAPI(srv)
		return err
	}
	defer cj.close()
	taskLogs := tl.tl
	defer taskLogs.Close()
	late.Set(api.LateParts{ClusterStore: cj.store, ClusterJobs: cj.jobs, ClusterLog: cj.log, TaskLogs: taskLogs.log()}, nil)
	// A signal meanwhile ends SetTypes' wait too: the serve loop sees it.
	if err := waitTypes(); err != nil && len(sigs) == 0 {
		logger.Error("some plugin types cannot be served", "err", err)
	}
	// The first worker (started once the plugins were loaded) must have
	// answered before tasks are served: a worker that cannot start is a
	// start that failed, not a failure of every task later.
	if sup != nil {
		if err := <-warmed; err != nil {
			stopAPI(srv)
			return fmt.Errorf("%w (hooks run in worker processes; --isolation none runs them in the daemon instead)", err)
		}
	}
	tasks := taskRunner{next: runner, logs: taskLogs, tee: tee, jobs: cj.jobs, jobLog: cj.log, source: q.Owner(), secrets: rt.TaskSecrets}
	runner = tasks.from(tasklog.OriginQueue)
	if o.clusterTasks == "local" {
		cj.jobs.SetLocal(localTasks{rt: rt, run: tasks.from(tasklog.OriginCluster), slots: make(chan struct{}, o.concurrency)})
	}

	if o.coopr.server != "" {
		p, err := a.startCoopr(ctx, o, cooprTenants, rt, tasks.from(tasklog.OriginCoopr), metrics.Registry(), logger)
		if err != nil {
			return err
		}
		cpMu.Lock()
		cp = p
		cpMu.Unlock()
	}

	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- q.Serve(serveCtx, runner, o.concurrency) }()
	// Jobs of daemons that died (this one's previous run included) are
	// taken over from here on.
	if err := cj.jobs.Start(ctx); err != nil {
		logger.Error("cluster jobs: cannot follow the job records; jobs of dead daemons are not taken over by this one", "err", err)
	}

	var stopWatch func()
	if o.watch {
		stopWatch, err = watchPlugins(o.g.pluginsDir, o.reloadDebounce, logger, func() {
			_, _ = reloadAll(ctx)
		})
		if err != nil {
			logger.Warn("hot reload is off: cannot watch the plugins directory", "dir", o.g.pluginsDir, "err", err)
		}
	}
	attrs := []any{"api", "http://" + srv.Addr(), "queue", q.Mode(), "types", len(rt.Types()), "concurrency", o.concurrency,
		"isolation", o.isolation, "retain", retainString(o.retain),
		"startup", time.Since(start).Round(time.Microsecond)}
	if sup != nil {
		attrs = append(attrs, "plugin_memory", runtime.FormatSize(pluginMemory), "worker_limit", sup.LimitMode())
	}
	if ml := debug.SetMemoryLimit(-1); ml < math.MaxInt64 {
		attrs = append(attrs, "memory_limit", runtime.FormatSize(ml))
	}
	if q.Mode() == "embedded" {
		attrs = append(attrs, "data", o.data)
	}
	if u := q.ClientURL(); u != "" {
		attrs = append(attrs, "nats", u)
	}
	// GOGC goes back a second after the daemon serves, not at once: the
	// collection the lower target starts at once would compete with the
	// first requests.
	gcBack := time.AfterFunc(time.Second, restoreGC)
	defer gcBack.Stop()
	logger.Info("loomd serving", attrs...)
	if hint := q.JoinHint(); hint != "" {
		logger.Info("the embedded nats server listens; other daemons join it with: "+hint, "nats", q.ClientURL())
	}

	var sig os.Signal
	select {
	case sig = <-sigs:
	case err := <-served:
		if err != nil {
			logger.Error("the worker loop stopped", "err", err)
		}
		return fmt.Errorf("serving the queue: %w", err)
	case <-ctx.Done():
	}

	// Shutdown: hand the cluster jobs over, stop pulling, let in-flight
	// tasks finish, then close.
	logger.Info("shutting down: no new tasks; waiting for tasks in flight", "signal", fmt.Sprint(sig), "timeout", o.shutdownTimeout)
	if stopWatch != nil {
		stopWatch()
	}
	jctx, jcancel := context.WithTimeout(context.Background(), min(o.shutdownTimeout, 10*time.Second)+time.Second)
	cj.jobs.Stop(jctx)
	jcancel()
	stopServing()
	forced := false
	// Coopr slots stop taking at once and finish their tasks (and deliver
	// their results) within the same grace as the queue's.
	cooprForced := make(chan bool, 1)
	if cp != nil {
		go func() { cooprForced <- cp.Stop(o.shutdownTimeout) }()
	} else {
		cooprForced <- false
	}
	timer := time.NewTimer(o.shutdownTimeout)
	defer timer.Stop()
	select {
	case <-served:
	case <-timer.C:
		// Tasks were still running: this exit is forced, whether or not
		// they stop quickly once interrupted.
		logger.Warn("shutdown timeout reached: interrupting tasks in flight; they will run again")
		q.AbortRunning()
		forced = true
		waitOrSignal(served, sigs, 10*time.Second)
	case <-sigs:
		logger.Warn("second signal: forcing the exit; interrupted tasks will run again")
		q.AbortRunning()
		forced = true
		waitOrSignal(served, nil, 2*time.Second)
	}
	if <-cooprForced {
		logger.Warn("coopr: tasks from the Coopr server were interrupted by the shutdown; the server runs them again")
		forced = true
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if ui != nil {
		ui.Close() // ends the console's event streams, which never go idle
	}
	_ = srv.Shutdown(sctx)
	if sup != nil {
		sup.Close()
	}
	rt.Close()
	rtClosed = true
	taskLogs.Close()
	cj.close()
	if err := q.Close(); err != nil {
		logger.Error("closing the queue", "err", err)
	}
	if forced {
		logger.Warn("loomd stopped (forced): tasks in flight were interrupted", "exit", ExitFailure)
		return silentExit(ExitFailure)
	}
	logger.Info("loomd stopped")
	return nil
}

// stopAPI closes the API on a return during the start.
func stopAPI(srv *api.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
}

// startGCPercent is the garbage collector's GOGC while the daemon starts.
const startGCPercent = 400

// localTasks runs the tasks of the cluster jobs this daemon runs on its
// own workers, through the same runner as its queue consumers (isolation,
// plugin versions, per-task logs, the job log's copy of plugin lines):
// --cluster-tasks local. At most --concurrency of them run at once (each
// in a worker process of its own), whatever the jobs' --parallelism: the
// daemon's bound, beside its queue consumers'.
type localTasks struct {
	rt    *runtime.Runtime
	run   queue.Runner
	slots chan struct{}
}

func (l localTasks) Serves(family, typ string) bool {
	for _, t := range l.rt.Types() {
		if string(t.Family) == family && t.Name == typ {
			return true
		}
	}
	return false
}

func (l localTasks) Run(ctx context.Context, task []byte) ([]byte, int, error) {
	select {
	case l.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, context.Cause(ctx)
	}
	defer func() { <-l.slots }()
	return l.run.Run(ctx, task)
}

// clusterJobs are the daemon's cluster job parts: the state store, the
// job log and the runner.
type clusterJobs struct {
	store *state.KVStore
	log   *joblog.Stream
	jobs  *clusterrunner.Runner
	once  sync.Once
}

func (c *clusterJobs) close() {
	c.once.Do(func() { c.log.Close() })
}

// startClusterJobs opens the cluster state, the job log and the runner on
// the queue's JetStream.
func (a *App) startClusterJobs(ctx context.Context, o *serveOptions, q *queue.Queue, base *slog.Logger, metrics *api.Metrics, rt *runtime.Runtime) (*clusterJobs, error) {
	// The state bucket opens while the job log's stream is made.
	type openedStore struct {
		store *state.KVStore
		err   error
	}
	storeDone := make(chan openedStore, 1)
	go func() {
		store, err := state.OpenKV(ctx, q.JetStream(), q.Replicas(), o.retry)
		storeDone <- openedStore{store, err}
	}()
	secrets := &joblog.Secrets{}
	// The job log takes at most an eighth of what the store can hold.
	jmax, note := logstream.Fit(ctx, q.JetStream(), joblog.StreamName, joblog.DefaultMaxBytes, storeCapacity(ctx, q, base))
	if note != "" {
		base.Info("cluster job logs: " + note)
	}
	jl, err := joblog.OpenStream(ctx, q.JetStream(), joblog.StreamOptions{Replicas: q.Replicas(), Retry: o.retry, Source: q.Owner(), Secrets: secrets,
		MaxBytes: jmax, Paused: q.Tight, Logger: base.With("component", "clusterjobs")})
	opened := <-storeDone
	if err != nil {
		return nil, err
	}
	if opened.err != nil {
		jl.Close()
		return nil, opened.err
	}
	store := opened.store
	host, _ := os.Hostname()
	jobs, err := clusterrunner.New(ctx, clusterrunner.Config{Store: store, JS: q.JetStream(), Replicas: q.Replicas(), Retry: o.retry, Queue: q, Log: jl,
		Secrets: secrets, Owner: q.Owner(), Host: host, PID: os.Getpid(), Live: q.OwnerLive, Trouble: q.RecentTrouble,
		Lacking: func() ([]string, bool) { return q.Lacking(state.JournalCapability) }, LackingSeen: q.LackingSeen(),
		LeaseTTL: o.clusterLease, Logger: base, Registerer: metrics.Registry(),
		// Jobs are planned with this daemon's plugins and the resource
		// files of its work dir.
		Plugins:   func() *spec.Plugins { return pluginsOf(rt.Types(), "the plugins of this loomd") },
		Resources: func() (*apply.Resources, error) { return readResources(o.g.workDir, o.g.tenant, rt.Types()) }})
	if err != nil {
		jl.Close()
		return nil, err
	}
	return &clusterJobs{store: store, log: jl, jobs: jobs}, nil
}

// waitOrSignal waits for done, a signal, or d; it reports whether it gave
// up before done.
func waitOrSignal(done <-chan error, sigs <-chan os.Signal, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-sigs:
		return true
	case <-t.C:
		return true
	}
}

// reload rescans the plugins and makes the queue consumers follow the
// types.
func (a *App) reload(ctx context.Context, rt *runtime.Runtime, q *queue.Queue, logger *slog.Logger) (runtime.ReloadReport, error) {
	start := time.Now()
	rep, err := rt.Reload(ctx)
	if err != nil {
		logger.Error("plugin reload failed; the loaded plugins keep serving", "err", err)
		return rep, err
	}
	// New types' consumers wait for a NATS cluster that cannot create
	// them right now, for a minute at most: the next reload tries again.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := q.SetTypes(sctx, routesOf(rt.Types())); err != nil {
		logger.Error("some plugin types cannot be served", "err", err)
	}
	if rep.Changed() || len(rep.Kept) > 0 {
		logger.Info("plugins reloaded", "added", rep.Added, "updated", rep.Updated, "removed", rep.Removed,
			"kept_old_version", rep.Kept, "errors", len(rep.Errors), "took", time.Since(start).Round(time.Microsecond))
	}
	return rep, nil
}

// watchPlugins calls reload, debounced, whenever something under dir
// changes. fsnotify is not recursive, so every folder is watched, and new
// folders are added as they appear.
func watchPlugins(dir string, debounce time.Duration, logger *slog.Logger, reload func()) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("starting the file watcher: %w", err)
	}
	addTree := func(root string) {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if err := w.Add(p); err != nil {
				logger.Warn("cannot watch a plugin folder; changes in it need a restart", "dir", p, "err", err)
			}
			return nil
		})
	}
	if err := w.Add(dir); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watching %s: %w", dir, err)
	}
	addTree(dir)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-done:
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) {
					if st, err := os.Stat(ev.Name); err == nil && st.IsDir() {
						addTree(ev.Name)
					}
				}
				if timer == nil {
					timer = time.NewTimer(debounce)
				} else {
					timer.Reset(debounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				logger.Warn("plugin file watcher error; reloading to be safe", "err", err)
				reload()
			case <-fire:
				fire = nil
				reload()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			_ = w.Close()
			wg.Wait()
		})
	}, nil
}

// retainString shows --retain in the startup line.
func retainString(d time.Duration) string {
	if d == 0 {
		return "forever"
	}
	return d.String()
}

// parse checks the --coopr-* flags before anything starts and returns
// the tenants of --coopr-tenants (id -> workers).
func (c *cooprOptions) parse() (map[string]int, error) {
	if c.server == "" {
		if len(c.tenants) > 0 {
			return nil, fmt.Errorf("--coopr-tenants needs --coopr-server")
		}
		if c.tls != (coopr.TLS{}) {
			return nil, fmt.Errorf("--coopr-ca, --coopr-cert and --coopr-key need --coopr-server https://...")
		}
		if len(c.allow) > 0 {
			return nil, fmt.Errorf("--coopr-allow needs --coopr-server")
		}
		return nil, nil
	}
	if !strings.HasPrefix(c.server, "http://") && !strings.HasPrefix(c.server, "https://") {
		return nil, fmt.Errorf("--coopr-server %q: want http://host:port (the Coopr server's internal port, 55055 by default)", c.server)
	}
	if c.tls != (coopr.TLS{}) {
		if !strings.HasPrefix(c.server, "https://") {
			return nil, fmt.Errorf("--coopr-ca, --coopr-cert and --coopr-key apply to an https:// --coopr-server, not %s", c.server)
		}
		if err := c.tls.Check(); err != nil {
			return nil, err
		}
	}
	allowed, err := coopr.ParseAllow(c.allow)
	if err != nil {
		return nil, err
	}
	c.allowed = allowed
	if c.capacity < 1 || c.heartbeat <= 0 || c.poll <= 0 {
		return nil, fmt.Errorf("--coopr-capacity must be at least 1, --coopr-heartbeat and --coopr-poll positive")
	}
	tenants := map[string]int{}
	for _, t := range c.tenants {
		id, n, hasN := strings.Cut(strings.TrimSpace(t), ":")
		workers := 1
		if hasN {
			v, err := strconv.Atoi(n)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("--coopr-tenants %q: want ID[:WORKERS] with WORKERS a number, 0 or more", t)
			}
			workers = v
		}
		if !runtime.ValidTenant(id) {
			return nil, fmt.Errorf("--coopr-tenants %q: a tenant id is 1 to 64 letters, digits, '.', '_' or '-'", t)
		}
		tenants[id] = workers
	}
	return tenants, nil
}

// startCoopr starts serving a Coopr server's tasks through the daemon's
// runner: the provisioner API, registration, heartbeats and the tenants
// of --coopr-tenants.
func (a *App) startCoopr(ctx context.Context, o *serveOptions, tenants map[string]int, rt *runtime.Runtime, runner queue.Runner,
	reg prometheus.Registerer, logger *slog.Logger) (*coopr.Provisioner, error) {
	types := cooprTypes(rt.Types())
	metrics := coopr.NewMetrics()
	reg.MustRegister(metrics.Collectors()...)
	cp, err := coopr.New(coopr.Config{
		ServerURL: o.coopr.server, ID: o.coopr.id, Listen: o.coopr.listen, Allow: o.coopr.allowed, AdvertiseHost: o.coopr.advertise,
		Capacity: o.coopr.capacity, Tenants: tenants, Types: types, Runner: runner,
		WorkDir: o.g.workDir, StateDir: o.data, Heartbeat: o.coopr.heartbeat, Poll: o.coopr.poll, TLS: o.coopr.tls,
		Metrics:   metrics,
		Listeners: o.g.listeners,
		Logger:    logger.With("component", "coopr"),
	})
	if err != nil {
		return nil, usageErr(err)
	}
	if err := cp.Start(ctx); err != nil {
		return nil, usageErr(err)
	}
	logger.Info("coopr: serving a Coopr server's tasks", "server", o.coopr.server, "provisioner", cp.ID(), "api", "http://"+cp.APIAddr(),
		"capacity", o.coopr.capacity, "tenants", len(tenants))
	return cp, nil
}

// cooprTypes lists the loaded plugin types for registering with a Coopr
// server.
func cooprTypes(infos []runtime.TypeInfo) []coopr.PluginType {
	types := make([]coopr.PluginType, 0, len(infos))
	for _, t := range infos {
		types = append(types, coopr.PluginType{Name: t.Name, Family: t.Family, Raw: t.Raw})
	}
	return types
}
