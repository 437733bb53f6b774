// Package api is loomd's HTTP API: submit tasks, read their state and
// results (with long polling), list plugins, health and Prometheus
// metrics. It works over two small interfaces, Queue and Plugins, so it is
// tested without a daemon. docs/api.md documents every endpoint.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/runtime"
)

// Queue is what the API needs from the task queue; *queue.Queue has it.
type Queue interface {
	Submit(ctx context.Context, task []byte) (queue.Record, bool, error)
	Get(ctx context.Context, id string) (queue.Record, error)
	Wait(ctx context.Context, id string) (queue.Record, error)
	// WaitSubmitted is Wait for a task just submitted, whose record may
	// not be written yet.
	WaitSubmitted(ctx context.Context, sub queue.Record) (queue.Record, error)
	List(ctx context.Context, f queue.Filter) (queue.Page, error)
	Delete(ctx context.Context, id string) (queue.Record, error)
	Cancel(ctx context.Context, id string) (queue.Record, error)
	Depth(ctx context.Context) (map[queue.Route]int, error)
	Health(ctx context.Context) error
	// Served reports whether any daemon serves a plugin type, and lists
	// the types served.
	Served(route queue.Route) (bool, []queue.Route)
}

// Plugins is what the API needs from the runtime; *runtime.Runtime has it.
type Plugins interface {
	Types() []runtime.TypeInfo
	LoadErrors() []*runtime.LoadError
	Stats() runtime.Stats
}

var _ Queue = (*queue.Queue)(nil)

// Config configures the API server.
type Config struct {
	// Addr is the listen address; default 127.0.0.1:7070. Any address but
	// a loopback one requires a token.
	Addr string
	// Token, when set, is an admin bearer token (--token); Tokens, when
	// set, replaces it with the daemon's whole set of tokens (--token and
	// --tokens-file). With neither, the API asks for no token.
	Token  string
	Tokens *tokens.Set
	// DefaultTenant is the tenant of tasks without tenantId (loomd's
	// --tenant): a tenant token of that tenant reaches them.
	DefaultTenant string
	// Queue and Plugins serve the data. Plugins may be nil.
	Queue   Queue
	Plugins Plugins
	// Metrics is the registry /metrics serves; nil creates one.
	Metrics *Metrics
	// MaxWait caps the ?wait= of a long poll; default 5 minutes.
	MaxWait time.Duration
	// MaxBody caps a request body (a task, a call, a lock request); default
	// 4 MiB. Cluster state has its own cap (maxClusterState).
	MaxBody int64
	// MaxInflight caps the bytes of request bodies the API holds at once,
	// across every request; default 64 MiB. A body that would pass it is
	// not read: the request gets 503 with Retry-After. What the daemon
	// allocates to decode and queue a body is proportional to its size
	// (docs/operations.md, "Memory"), so this bounds the daemon's memory
	// under any number of concurrent submitters.
	MaxInflight int64
	// SpecMax caps a cluster spec the daemon accepts (in a cluster's
	// state, in a job); default spec.DefaultMaxSize (--spec-max-size).
	SpecMax int64
	// Logger receives request errors; nil discards them.
	Logger *slog.Logger
	// ReadTimeout bounds reading one request's headers and body; a client
	// that trickles its body is cut off. Default 30 s. Long polls are not
	// affected: the deadline is lifted once the body is read.
	ReadTimeout time.Duration
	// MaxConns caps the connections served at once; more wait in the
	// kernel's backlog. Default 512.
	MaxConns int
	// IdleTimeout closes keep-alive connections idle this long. Default 2 min.
	IdleTimeout time.Duration
	// ClusterStore is the cluster state store; nil opens it from the
	// queue's JetStream context on first use.
	ClusterStore *state.KVStore
	// ClusterJobs runs cluster jobs in this daemon, and ClusterLog keeps
	// their logs; without them the job endpoints answer 503.
	ClusterJobs *runner.Runner
	ClusterLog  *joblog.Stream
	// TaskLogs keeps every task's log lines (GET /v1/tasks/{id}/logs);
	// nil answers 503 there (loomd serve --task-log-max 0).
	TaskLogs *tasklog.Log
	// Late, when set, gives ClusterStore, ClusterJobs, ClusterLog and
	// TaskLogs (the fields above are then ignored) once the daemon opened
	// them, after the API listens; requests that need them wait.
	Late *Late
	// Pprof serves the Go profiler under /debug/pprof/ (behind Token like
	// every route). Off by default: profiles show the daemon's internals
	// and a CPU profile costs CPU while it runs.
	Pprof bool
	// Listeners, when set, registers the API's socket as one of the
	// daemon's own (plugins never reach it).
	Listeners *listeners.Registry
	// UI, when set, serves the web console under /ui (internal/console),
	// which checks its own session cookie instead of the bearer token.
	UI http.Handler
}

// DefaultAddr is where the API listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7070"

// NotReadHeader is set on a 503 whose request had no effect: its body was
// refused unread by the in-flight budget, or it was a read whose answer
// did not fit the budget, so sending it again is always safe (a client
// cannot know that of a 503 from the queue).
const NotReadHeader = "Loom-Not-Read"

// Default request size limits.
const (
	DefaultMaxBody     = 4 << 20
	DefaultMaxInflight = 64 << 20
	// maxHeaderBytes caps a request's headers (Go's default is 1 MiB: 512
	// connections could hold 512 MiB of headers).
	maxHeaderBytes = 64 << 10
)

// Server is the HTTP API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	handler http.Handler

	mu  sync.Mutex
	srv *http.Server
	ln  net.Listener

	clusters clusterBucket // /v1/clusters (clusters.go)
	late     *Late         // cfg.Late, or the Cluster* and TaskLogs fields
	inflight bodyBudget    // bytes of request bodies held now
	tokens   *tokens.Set   // who may call it (scope.go)
}

// New checks the configuration and builds the server. It refuses an
// address other machines can reach unless a token is configured.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.Queue == nil {
		return nil, errors.New("api: no queue to serve")
	}
	if cfg.Tokens == nil {
		cfg.Tokens = tokens.New(cfg.Token)
	}
	if err := CheckAddr(cfg.Addr, !cfg.Tokens.Open()); err != nil {
		return nil, err
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 5 * time.Minute
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.MaxInflight < cfg.MaxBody {
		return nil, fmt.Errorf("api: the in-flight budget of %d bytes (--api-max-inflight-bytes) is smaller than one request body of %d bytes (--api-max-body): no maximal request could ever be read",
			cfg.MaxInflight, cfg.MaxBody)
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 512
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 2 * time.Minute
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Metrics.watchSources(cfg.Queue, cfg.Plugins)
	s := &Server{cfg: cfg, log: cfg.Logger, inflight: bodyBudget{max: cfg.MaxInflight}, tokens: cfg.Tokens, late: cfg.Late}
	if s.late == nil {
		s.late = ReadyLate(LateParts{ClusterStore: cfg.ClusterStore, ClusterJobs: cfg.ClusterJobs, ClusterLog: cfg.ClusterLog, TaskLogs: cfg.TaskLogs})
	}
	s.handler = s.routes()
	return s, nil
}

// CheckAddr applies the auth rule to a listen address: loopback needs no
// token, anything else does (hasTokens: --token or --tokens-file is set).
// Callers use it to fail before doing work.
func CheckAddr(addr string, hasTokens bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("api listen address %q: %w (want host:port, e.g. 127.0.0.1:7070)", addr, err)
	}
	if !queue.IsLoopback(host) && !hasTokens {
		return fmt.Errorf("api listen address %q is reachable from other machines: set a bearer token (--token or LOOM_TOKEN) or a --tokens-file, or listen on 127.0.0.1", addr)
	}
	return nil
}

// Handler is the API's handler, auth included.
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on the configured address and serves in the background.
func (s *Server) Start() error {
	ln, err := s.cfg.Listeners.Listen("API (--listen)", "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listening on %s: %w (is another loomd running? choose another --listen)", s.cfg.Addr, err)
	}
	// A connection cap and read deadlines: slow or idle clients cannot hold
	// the API (200 slow-body connections once stayed open for good).
	ln = netutil.LimitListener(ln, s.cfg.MaxConns)
	srv := &http.Server{
		Handler:           s.readDeadline(s.handler),
		ReadHeaderTimeout: min(10*time.Second, s.cfg.ReadTimeout),
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	s.srv, s.ln = srv, ln
	s.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("api server stopped", "err", err)
		}
	}()
	return nil
}

// readDeadline gives each request ReadTimeout to deliver its body. It is
// lifted at once for requests without a body, and by the handlers once they
// have read theirs, so long polls may take as long as ?wait= allows.
func (s *Server) readDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.ContentLength == 0 || r.Body == http.NoBody {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			_ = rc.SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// bodyRead lifts the read deadline once a handler has its body.
func bodyRead(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// Addr is the address the server listens on (useful with port 0), or ""
// before Start.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Shutdown stops accepting connections and waits for open requests (long
// polls included) until ctx ends, then closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Shutdown(ctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("api: shutting down: %w", err)
	}
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/tasks", s.route("tasks", map[string]http.HandlerFunc{"POST": s.submit, "GET": s.list}))
	mux.Handle("/v1/tasks/{id}", s.route("task", map[string]http.HandlerFunc{"GET": s.get, "DELETE": s.delete}))
	mux.Handle("/v1/tasks/{id}/cancel", s.route("cancel", map[string]http.HandlerFunc{"POST": s.cancel}))
	mux.Handle("/v1/tasks/{id}/logs", s.route("task_logs", map[string]http.HandlerFunc{"GET": s.taskLogs}))
	mux.Handle("/v1/calls", s.route("calls", map[string]http.HandlerFunc{"POST": s.submitCall}))
	mux.Handle("/v1/plugins", s.route("plugins", map[string]http.HandlerFunc{"GET": s.plugins}))
	s.clusterRoutes(mux)
	s.clusterJobRoutes(mux)
	mux.Handle("/healthz", s.route("healthz", map[string]http.HandlerFunc{"GET": s.health}))
	metrics := promhttp.HandlerFor(s.cfg.Metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})
	mux.Handle("/metrics", s.route("metrics", map[string]http.HandlerFunc{"GET": adminOnly("/metrics", metrics.ServeHTTP)}))
	mux.Handle("/debug/pprof/", s.route("pprof", map[string]http.HandlerFunc{"*": adminOnly("/debug/pprof/", s.pprof())}))
	if s.cfg.UI != nil {
		ui := s.route("ui", map[string]http.HandlerFunc{"*": s.cfg.UI.ServeHTTP})
		mux.Handle("/ui", ui)
		mux.Handle("/ui/", ui)
	}
	mux.Handle("/", s.route("other", map[string]http.HandlerFunc{"*": func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such endpoint %s %s; see docs/api.md", r.Method, r.URL.Path))
	}}))
	return s.auth(mux)
}

// route dispatches by method (405 with a JSON error otherwise) and counts
// requests.
func (s *Server) route(name string, methods map[string]http.HandlerFunc) http.Handler {
	allowed := make([]string, 0, len(methods))
	for m := range methods {
		allowed = append(allowed, m)
	}
	if _, ok := methods["GET"]; ok {
		methods["HEAD"] = methods["GET"]
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		defer func() { s.cfg.Metrics.requests.WithLabelValues(name, strconv.Itoa(rec.code)).Inc() }()
		// The body a handler reads counts against the in-flight budget
		// until it returns, and so does the large answer to a read.
		hold := &bodyHold{b: &s.inflight}
		defer hold.release()
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			// Only reads: refusing the answer to a change would hide
			// that it was made.
			rec.hold = hold
		}
		r = r.WithContext(context.WithValue(r.Context(), bodyHoldKey{}, hold))
		h, ok := methods[r.Method]
		if !ok {
			h, ok = methods["*"]
		}
		if !ok {
			rec.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(rec, http.StatusMethodNotAllowed, fmt.Sprintf("%s does not accept %s (use %s)", r.URL.Path, r.Method, strings.Join(allowed, " or ")))
			return
		}
		h(rec, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code int
	hold *bodyHold // a read's share of the in-flight budget
	// prepaid is what the request took from the budget for its answer
	// before building it (a large result, reserved before it was loaded).
	prepaid int64
	// seeOther, when set, is where a change's answer that the budget has
	// no room for can be read instead (POST /v1/tasks?wait=: the task is
	// queued, so its answer is not refused as unread).
	seeOther string
}

// errAnswerBudget is a large result the in-flight budget has no room for.
var errAnswerBudget = errors.New("the API's in-flight budget (--api-max-inflight-bytes) has no room for it now")

// reserveResult returns r's context under which loading a large result
// first takes twice its size from the in-flight budget (the loaded bytes
// and the answer built from them), so that concurrent reads of large
// results never hold more than the budget; a result that does not fit is
// not loaded (errAnswerBudget).
func reserveResult(w http.ResponseWriter, r *http.Request) context.Context {
	rec, ok := w.(*statusRecorder)
	if !ok || rec.hold == nil {
		return r.Context()
	}
	return queue.WithResultReserve(r.Context(), func(size int64) error {
		want := min(2*size+4096, rec.hold.b.max)
		if !rec.hold.acquire(want) {
			return errAnswerBudget
		}
		rec.prepaid += want
		return nil
	})
}

// writeAnswerBudget answers a read refused by the in-flight budget.
func writeAnswerBudget(w http.ResponseWriter, what string) {
	var max int64
	if rec, ok := w.(*statusRecorder); ok && rec.hold != nil {
		max = rec.hold.b.max
		if rec.seeOther != "" {
			// The request had its effect: its answer is sent to GET
			// there (HTTP clients follow a 303 with a GET).
			w.Header().Set("Location", rec.seeOther)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusSeeOther, fmt.Sprintf("the API holds %s of request bodies and answers being sent, its in-flight budget (--api-max-inflight-bytes): %s was not sent here; GET %s for it",
				runtime.FormatSize(max), what, rec.seeOther))
			return
		}
	}
	w.Header().Set("Retry-After", "1")
	w.Header().Set(NotReadHeader, "1")
	writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the API holds %s of request bodies and answers being sent, its in-flight budget (--api-max-inflight-bytes): %s was not sent; ask again after the Retry-After delay",
		runtime.FormatSize(max), what))
}

func (r *statusRecorder) WriteHeader(code int) {
	r.code = code
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Task is a task record as the API shows it.
type Task struct {
	TaskID string `json:"taskId"`
	// TenantID is the task's tenantId (absent: the daemon's --tenant).
	TenantID string `json:"tenantId,omitempty"`
	// ClusterID is the task's clusterId.
	ClusterID string      `json:"clusterId,omitempty"`
	State     queue.State `json:"state"`
	Attempts  int         `json:"attempts"`
	// Crashes counts the attempts that killed their worker process.
	Crashes  int             `json:"crashes,omitempty"`
	Family   string          `json:"family,omitempty"`
	Type     string          `json:"type"`
	Hook     string          `json:"hook"`
	TaskName string          `json:"taskName,omitempty"`
	Owner    string          `json:"owner,omitempty"`
	Created  time.Time       `json:"created"`
	Started  *time.Time      `json:"started,omitempty"`
	Finished *time.Time      `json:"finished,omitempty"`
	Status   *int            `json:"status,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// TaskOf converts a queue record.
func TaskOf(r queue.Record) Task {
	return Task{
		TaskID: r.TaskID, TenantID: r.TenantID, ClusterID: r.ClusterID, State: r.State, Attempts: r.Attempts, Crashes: r.Crashes, Family: r.Family, Type: r.Type, Hook: r.Hook,
		TaskName: r.TaskName, Owner: r.Owner, Created: r.Created, Started: r.Started, Finished: r.Finished,
		Status: r.Status, Result: r.Result, Error: r.Error,
	}
}

// SubmitResponse is the answer to POST /v1/tasks.
type SubmitResponse struct {
	TaskID string      `json:"taskId"`
	State  queue.State `json:"state"`
	// Duplicate is true when the id was already known: nothing was queued.
	Duplicate bool `json:"duplicate,omitempty"`
	// Served is false when no daemon serves the task's plugin type now: the
	// task waits in the queue until one does. Warning then says so.
	Served  bool   `json:"served"`
	Warning string `json:"warning,omitempty"`
}

// SubmitWaitResponse is the answer to POST /v1/tasks?wait= (and
// /v1/calls?wait=): the task as GET /v1/tasks/{id}?wait= answers after
// the same wait, with the submit's duplicate, served and warning.
type SubmitWaitResponse struct {
	Task
	// Duplicate is true when the id was already known: nothing was queued.
	Duplicate bool `json:"duplicate,omitempty"`
	// Served and Warning are the submit's: whether a daemon served the
	// task's plugin type when it was queued.
	Served  bool   `json:"served"`
	Warning string `json:"warning,omitempty"`
}

// submitWait is a submit's ?wait= (on/off, and how long).
type submitWait struct {
	on bool
	d  time.Duration
}

// parseWait reads a request's ?wait=; on a bad one it has answered 400
// and ok is false.
func parseWait(w http.ResponseWriter, r *http.Request) (sw submitWait, ok bool) {
	ws := r.URL.Query().Get("wait")
	if ws == "" {
		return submitWait{}, true
	}
	d, err := time.ParseDuration(ws)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("wait=%q is not a duration: use e.g. wait=30s", ws))
		return submitWait{}, false
	}
	return submitWait{on: true, d: d}, true
}

func (s *Server) submit(w http.ResponseWriter, r *http.Request) {
	// A bad ?wait= is refused before anything is read or queued.
	sw, ok := parseWait(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r, "task")
	if !ok {
		return
	}
	if body, ok = s.scopeTask(w, r, body); !ok {
		return
	}
	s.enqueue(w, r, body, sw)
}

// readBody reads a request body within MaxBody; on failure it has
// answered and ok is false.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, what string) (body []byte, ok bool) {
	return readBodyLimit(w, r, what, s.cfg.MaxBody)
}

// readBodyLimit is readBody with its own size cap. The body counts
// against the API's in-flight budget until the handler returns: a body
// that would pass the budget is not read, and the request gets 503 with
// Retry-After.
func readBodyLimit(w http.ResponseWriter, r *http.Request, what string, limit int64) (body []byte, ok bool) {
	if r.ContentLength > limit {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s is larger than %d bytes", what, limit))
		return nil, false
	}
	want := r.ContentLength
	if want < 0 {
		want = limit // chunked: reserve the most it may be, give back the rest once read
	}
	hold, _ := r.Context().Value(bodyHoldKey{}).(*bodyHold)
	if hold != nil {
		if want > hold.b.max {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s of %d bytes is larger than the API's whole in-flight budget of %d bytes (--api-max-inflight-bytes)", what, want, hold.b.max))
			return nil, false
		}
		if !hold.acquire(want) {
			// Read the body to the end without keeping it (32 KiB at a
			// time, within the read deadline), so the client reads this
			// answer instead of a connection reset.
			_, _ = io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, limit))
			w.Header().Set("Retry-After", "1")
			w.Header().Set(NotReadHeader, "1")
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("the API holds %s of request bodies, its in-flight budget (--api-max-inflight-bytes): send %s again after the Retry-After delay",
				runtime.FormatSize(hold.b.max), what))
			return nil, false
		}
	}
	body, err := readAllSized(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if hold != nil {
		hold.shrink(int64(len(body)))
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s is larger than %d bytes", what, mbe.Limit))
			return nil, false
		}
		// The read deadline stays: the server must not wait for the
		// rest of a body that did not come in time.
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return nil, false
	}
	bodyRead(w)
	return body, true
}

// readAllSized reads r to the end in one allocation when its size is
// known (io.ReadAll doubles its buffer: about twice the body in garbage).
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(r)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size+1)) // +1: EOF without growing
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// bodyBudget counts the bytes of request bodies the API holds.
type bodyBudget struct {
	mu   sync.Mutex
	used int64
	max  int64
}

// bodyHold is one request's share of the budget, released when its
// handler returns.
type bodyHold struct {
	b *bodyBudget
	n int64
}

type bodyHoldKey struct{}

// acquire takes n more bytes of the budget, or reports false when they
// are not free.
func (h *bodyHold) acquire(n int64) bool {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if h.b.used+n > h.b.max {
		return false
	}
	h.b.used += n
	h.n += n
	return true
}

// shrink gives back what the hold took beyond n bytes (a chunked body
// reserved its cap and turned out smaller).
func (h *bodyHold) shrink(n int64) {
	h.b.mu.Lock()
	defer h.b.mu.Unlock()
	if extra := h.n - n; extra > 0 {
		h.b.used -= extra
		h.n = n
	}
}

func (h *bodyHold) release() { h.shrink(0) }

// enqueue submits a task to the queue and answers with SubmitResponse,
// or with wait on, with SubmitWaitResponse once the task finished or the
// wait ran out.
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request, body []byte, wait submitWait) {
	// The answer is the task's state: a known id's large result is not
	// loaded (answerWaited loads it, within the budget, for ?wait=).
	rec, isNew, err := s.cfg.Queue.Submit(queue.WithStateOnly(r.Context()), body)
	if err != nil {
		if errors.Is(err, runtime.ErrInvalidTask) {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if errors.Is(err, queue.ErrStoreFull) {
			// 507: the request was fine, the store has no room. Fast,
			// and retryable with the same taskId once space is back.
			writeError(w, http.StatusInsufficientStorage, err.Error())
			return
		}
		s.log.Error("submitting a task failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	code := http.StatusAccepted
	if !isNew {
		code = http.StatusOK
		// Task ids are one namespace for every tenant: another tenant's
		// task under this id is neither shown (its state, as GET hides
		// it) nor taken for this submitter's, which was not queued.
		if !tokenOf(r).SeesTenant(rec.TenantID, s.cfg.DefaultTenant) {
			writeError(w, http.StatusConflict, fmt.Sprintf("task id %q is taken by a task this token cannot see (another tenant's): nothing was queued; submit the task under another taskId", rec.TaskID))
			return
		}
	}
	w.Header().Set("Location", "/v1/tasks/"+rec.TaskID)
	resp := SubmitResponse{TaskID: rec.TaskID, State: rec.State, Duplicate: !isNew, Served: true}
	if !rec.State.Terminal() {
		route := queue.Route{Family: rec.Family, Type: rec.Type}
		var all []queue.Route
		resp.Served, all = s.cfg.Queue.Served(route)
		if !resp.Served {
			resp.Warning = unservedWarning(route, all)
		}
	}
	if !wait.on {
		writeJSON(w, code, resp)
		return
	}
	s.answerWaited(w, r, rec, code, resp, wait.d)
}

// answerWaited is the long poll of POST /v1/tasks?wait=: the same wait as
// GET /v1/tasks/{id}?wait=, on the task the request just submitted
// (sub), with the request's body out of the in-flight budget.
func (s *Server) answerWaited(w http.ResponseWriter, r *http.Request, sub queue.Record, code int, resp SubmitResponse, d time.Duration) {
	// Another tenant's task (a duplicate id) is not waited for, as GET.
	if !s.tenantOK(w, r, sub) {
		return
	}
	// The body is queued: it leaves the budget before the wait, and the
	// answer counts as a read's (a large result is reserved before it is
	// loaded); one that does not fit is sent to GET at Location.
	hold, _ := r.Context().Value(bodyHoldKey{}).(*bodyHold)
	if sr, ok := w.(*statusRecorder); ok && hold != nil {
		hold.release()
		sr.hold, sr.seeOther = hold, "/v1/tasks/"+url.PathEscape(sub.TaskID)
	}
	// WaitSubmitted: the record of a task accepted during a leader
	// election is written when a worker claims it; this request queued
	// it, so it is waited for instead of answered 404.
	rec, err := s.longPoll(w, r, d, func(ctx context.Context) (queue.Record, error) {
		return s.cfg.Queue.WaitSubmitted(ctx, sub)
	})
	if errors.Is(err, errAnswerBudget) {
		writeAnswerBudget(w, "the result of task "+sub.TaskID)
		return
	}
	if err != nil {
		s.queueError(w, err, sub.TaskID)
		return
	}
	if !s.tenantOK(w, r, rec) {
		return
	}
	writeJSON(w, code, SubmitWaitResponse{Task: TaskOf(rec), Duplicate: resp.Duplicate, Served: resp.Served, Warning: resp.Warning})
}

// longPoll waits up to d (at most MaxWait) for a task to finish. When the
// wait runs out first, it returns the task's current record.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, d time.Duration, wait func(context.Context) (queue.Record, error)) (queue.Record, error) {
	ctx, cancel := context.WithTimeout(reserveResult(w, r), min(d, s.cfg.MaxWait))
	defer cancel()
	rec, err := wait(ctx)
	if err != nil && rec.TaskID != "" && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		err = nil // answer with the current, unfinished state
	}
	return rec, err
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var rec queue.Record
	var err error
	sw, ok := parseWait(w, r)
	if !ok {
		return
	}
	if sw.on && sw.d > 0 { // wait=0s is a plain read (a wait under a context already over fails its read)
		if !s.taskOK(w, r, id) {
			return // another tenant's task: no waiting for it
		}
		rec, err = s.longPoll(w, r, sw.d, func(ctx context.Context) (queue.Record, error) {
			return s.cfg.Queue.Wait(ctx, id)
		})
	} else {
		rec, err = s.cfg.Queue.Get(reserveResult(w, r), id)
	}
	if errors.Is(err, errAnswerBudget) {
		writeAnswerBudget(w, "the result of task "+id)
		return
	}
	if err != nil {
		s.queueError(w, err, id)
		return
	}
	if !s.tenantOK(w, r, rec) {
		return
	}
	writeJSON(w, http.StatusOK, TaskOf(rec))
}

// ListResponse is the answer to GET /v1/tasks.
type ListResponse struct {
	Tasks []Task `json:"tasks"`
	// Next is the cursor of the next page (pass it as ?after=), absent
	// after the last page. Its format is opaque.
	Next string `json:"next,omitempty"`
}

// listParams are the query parameters GET /v1/tasks takes.
var listParams = []string{"state", "type", "cluster", "limit", "after"}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var unknown []string
	for k := range q {
		if !slices.Contains(listParams, k) {
			unknown = append(unknown, strconv.Quote(k))
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unknown query parameter %s: GET /v1/tasks takes %s (page with the \"next\" cursor as after=)",
			strings.Join(unknown, ", "), strings.Join(listParams, ", ")))
		return
	}
	f := queue.Filter{Type: q.Get("type"), Cluster: q.Get("cluster"), After: q.Get("after"), Limit: queue.DefaultPageSize,
		Tenant: tokenOf(r).Tenant, DefaultTenant: s.cfg.DefaultTenant}
	if st := q.Get("state"); st != "" {
		state, err := queue.ParseState(st)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		f.State = state
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > queue.MaxPageSize {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit=%q: want a page size from 1 to %d (default %d); follow \"next\" for more", l, queue.MaxPageSize, queue.DefaultPageSize))
			return
		}
		f.Limit = n
	}
	page, err := s.cfg.Queue.List(r.Context(), f)
	if err != nil {
		if errors.Is(err, queue.ErrBadCursor) {
			writeError(w, http.StatusBadRequest, "after="+err.Error())
			return
		}
		s.queueError(w, err, "")
		return
	}
	out := ListResponse{Tasks: make([]Task, len(page.Records)), Next: page.Next}
	for i, rec := range page.Records {
		out.Tasks[i] = TaskOf(rec)
		out.Tasks[i].Result = nil // lists stay small: GET the task for its result
	}
	writeJSON(w, http.StatusOK, out)
}

// DeleteResponse is the answer to DELETE /v1/tasks/{id}.
type DeleteResponse struct {
	TaskID  string      `json:"taskId"`
	State   queue.State `json:"state"` // the state it was deleted in
	Deleted bool        `json:"deleted"`
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.taskOK(w, r, id) {
		return
	}
	rec, err := s.cfg.Queue.Delete(r.Context(), id)
	if errors.Is(err, queue.ErrNotFinished) {
		writeError(w, http.StatusConflict, fmt.Sprintf("task %q is %s: only finished tasks can be deleted; cancel it first (POST /v1/tasks/%s/cancel, or loomd task cancel %s), then delete it", id, rec.State, id, id))
		return
	}
	if err != nil {
		s.queueError(w, err, id)
		return
	}
	// The task logs may still be opening at a start: waited for within
	// the request (LateWait at most); if they are not open, the lines
	// stay until the log's own age limit.
	if p, err := s.late.Wait(r.Context()); err != nil {
		s.log.Warn("the task's log lines were not deleted: the task logs are not open; they expire with --retain", "task", id, "err", err)
	} else if tl := p.TaskLogs; tl != nil {
		// Its log goes with it (retention sweeps leave that to the log's
		// own age limit): a task submitted again under the id starts
		// with an empty log.
		if err := tl.Purge(r.Context(), id); err != nil {
			s.log.Warn("deleting a task's log lines failed; they expire with --retain", "task", id, "err", err)
		}
	}
	writeJSON(w, http.StatusOK, DeleteResponse{TaskID: rec.TaskID, State: rec.State, Deleted: true})
}

// CancelResponse is the answer to POST /v1/tasks/{id}/cancel: the task,
// cancelled (200), or still running with its cancellation requested (202).
type CancelResponse struct {
	Task
	// CancelRequested is true while the daemon running the task stops it.
	CancelRequested bool `json:"cancelRequested,omitempty"`
}

func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.taskOK(w, r, id) {
		return
	}
	rec, err := s.cfg.Queue.Cancel(r.Context(), id)
	if errors.Is(err, queue.ErrFinished) {
		writeError(w, http.StatusConflict, fmt.Sprintf("task %q already finished (%s): there is nothing to cancel; delete it with DELETE /v1/tasks/%s", id, rec.State, id))
		return
	}
	if err != nil {
		s.queueError(w, err, id)
		return
	}
	out := CancelResponse{Task: TaskOf(rec)}
	code := http.StatusOK
	if !rec.State.Terminal() {
		out.CancelRequested, code = true, http.StatusAccepted
	}
	writeJSON(w, code, out)
}

// PluginsResponse is the answer to GET /v1/plugins.
type PluginsResponse struct {
	Types      []runtime.TypeInfo   `json:"types"`
	LoadErrors []*runtime.LoadError `json:"loadErrors"`
}

func (s *Server) plugins(w http.ResponseWriter, _ *http.Request) {
	out := PluginsResponse{Types: []runtime.TypeInfo{}, LoadErrors: []*runtime.LoadError{}}
	if s.cfg.Plugins != nil {
		if t := s.cfg.Plugins.Types(); t != nil {
			out.Types = t
		}
		if e := s.cfg.Plugins.LoadErrors(); e != nil {
			out.LoadErrors = e
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// HealthResponse is the answer to GET /healthz.
type HealthResponse struct {
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Queue.Health(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, HealthResponse{Status: "unavailable", Error: "queue: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, HealthResponse{Status: "ok"})
}

func (s *Server) queueError(w http.ResponseWriter, err error, id string) {
	switch {
	case errors.Is(err, queue.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("task %q not found: check the id, or submit it with POST /v1/tasks", id))
	case errors.Is(err, context.Canceled):
		writeError(w, 499, "request cancelled")
	default:
		s.log.Error("queue request failed", "task", id, "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// Error is the body of every error response.
type Error struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}

// minHeldResponse is the smallest answer that counts against the
// in-flight budget: small ones cost the daemon less than the counting.
const minHeldResponse = 64 << 10

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// A value the API built itself: a bug, said as it is.
		code = http.StatusInternalServerError
		data, _ = json.Marshal(Error{Error: "loomd could not encode its answer (a bug; please report it): " + err.Error()})
	}
	data = append(data, '\n')
	// An answer is held whole until the client has read it: a slow reader
	// of a large result must not hold it outside the budget. One larger
	// than the whole budget takes all of it.
	if rec, ok := w.(*statusRecorder); ok && rec.hold != nil && int64(len(data))-rec.prepaid >= minHeldResponse && rec.prepaid < rec.hold.b.max {
		if !rec.hold.acquire(min(int64(len(data))-rec.prepaid, rec.hold.b.max-rec.prepaid)) {
			writeAnswerBudget(w, "this answer of "+runtime.FormatSize(int64(len(data))))
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// unservedWarning tells a submitter that no daemon serves the task's
// type, and which types are served.
func unservedWarning(r queue.Route, served []queue.Route) string {
	const show = 20
	names := make([]string, 0, min(len(served), show+1))
	for i, s := range served {
		if i == show {
			names = append(names, fmt.Sprintf("and %d more (GET /v1/plugins on each daemon)", len(served)-show))
			break
		}
		names = append(names, s.String())
	}
	list := "none"
	if len(names) > 0 {
		list = strings.Join(names, ", ")
	}
	return fmt.Sprintf("no loomd serves plugin type %s: the task waits in the queue until a daemon loads that plugin (check the type name and the daemons' --plugins); types served now: %s", r, list)
}
