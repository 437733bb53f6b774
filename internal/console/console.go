// Package console is loomd's web console, served by `loomd serve` under
// /ui on the API's address: the overview, tasks, clusters, plugins and the
// Coopr link, for people.
//
// Pages are rendered on the server with html/template (every value
// escaped by context) from templates and assets embedded in the binary:
// no build step, no CDN, no network at run time. One small script
// (web/static/app.js, no inline script anywhere: the Content-Security-
// Policy forbids it) adds what a page needs on top: times in the viewer's
// zone, copy buttons, and live updates, for which the page opens one
// server-sent event stream and, when told that what it shows changed,
// fetches itself again and swaps the regions marked data-live. Without
// the script every page still works; it just does not update by itself.
//
// Access uses the API's token: a login page sets an HttpOnly,
// SameSite=Strict session cookie (signed, so any daemon with the same
// token accepts it). Every action is a POST from a confirmation page that
// carries the session's CSRF token; read-only mode shows no actions and
// refuses them. docs/ui.md documents the console.
package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/internal/worker"
)

//go:embed web/templates/*.html
var templateFS embed.FS

//go:embed web/static
var staticFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui"

// Config configures the console.
type Config struct {
	// Tokens are the API's tokens (internal/tokens): a person signs in
	// with one, and sees and does what it allows (its tenant, read-only).
	// Nil or open (no token at all: a loopback daemon) makes the console
	// open too: no sign-in, but actions still need the CSRF token of the
	// session cookie the first page sets.
	Tokens *tokens.Set
	// Token is the admin token (--token), when there is one: the session
	// cookies' key derives from it, so daemons sharing it share sessions.
	// Without it the key is random per process.
	Token string
	// DefaultTenant is the daemon's --tenant: tasks without a tenantId run
	// for it.
	DefaultTenant string
	// ReadOnly hides every action and refuses them (--ui-readonly).
	ReadOnly bool
	// Queue and Plugins are the API's.
	Queue   api.Queue
	Plugins api.Plugins
	// Changes follows task record changes (*queue.Queue has it); nil:
	// task pages do not update by themselves.
	Changes interface {
		OnChange(func(queue.Change)) (stop func())
	}
	// Clusters is the cluster state store the API serves; nil opens it
	// from the queue on first use.
	Clusters *state.KVStore
	// Jobs runs cluster jobs in the daemon (apply, destroy); nil hides
	// the cluster actions.
	Jobs ClusterJobs
	// TaskLogs keeps every task's own log (*tasklog.Log has it): a task's
	// page shows its lines and follows them live. Nil (loomd serve
	// --task-log-max 0): a cluster task's page reads its plugin's lines
	// from JobLog, other tasks show none.
	TaskLogs TaskLogs
	// Late, when set, gives Clusters, Jobs, JobLog and TaskLogs (the
	// fields are then filled from it) once the daemon opened them, after
	// its API listens: a page waits for them, and answers 503 with
	// Retry-After when they are not open within api.LateWait.
	Late *api.Late
	// JobLog is the cluster jobs' log (*joblog.Stream has it). Nil: none.
	JobLog interface {
		Read(ctx context.Context, cluster string, after uint64, max int) ([]joblog.Batch, error)
		Last(ctx context.Context, cluster string) (uint64, error)
	}
	// Metrics gathers the task metrics /metrics serves (api.Metrics'
	// TaskGatherer): the overview reads the same counters and histograms.
	Metrics prometheus.Gatherer
	// Workers lists the worker processes (nil with --isolation none).
	Workers func() []worker.Info
	// Coopr reports the Coopr link (nil without --coopr-server).
	Coopr func() coopr.Status
	// Reload rescans the plugins now (the hot reload's own function) and
	// returns what changed; nil hides the action.
	Reload func(ctx context.Context) (ReloadResult, error)
	// Server is the URL the CLI equivalents shown for actions name
	// (--server); default http://<the request's host>.
	Server string
	// MaxStreams caps the event streams open at once (each holds a
	// connection of the API's --api-max-conns); default 64.
	MaxStreams int
	// Heartbeat is the interval of an idle event stream's comment line,
	// which keeps proxies from closing it; default 15 s.
	Heartbeat time.Duration
	// Logger receives the console's errors; nil discards them.
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time

	// minInterval is the least time between two events of one stream
	// (tests; default minInterval).
	minInterval time.Duration
}

// TaskLogs keeps the tasks' own logs (*tasklog.Log has it).
type TaskLogs interface {
	Read(ctx context.Context, id string, after uint64, limit int, f tasklog.Filter) (tasklog.Page, error)
	Notify(id string, f func()) (stop func(), err error)
	Purge(ctx context.Context, id string) error
}

// ClusterJobs runs cluster jobs (*runner.Runner has it).
type ClusterJobs interface {
	PlanJob(ctx context.Context, cluster string, req runner.Request) (*apply.Change, *state.Cluster, error)
	Submit(ctx context.Context, cluster string, req runner.Request) (runner.Accepted, error)
	Job(ctx context.Context, cluster string) (runner.Record, error)
	Cancel(ctx context.Context, cluster, who string) (runner.Record, error)
}

// ReloadResult is what a reload changed.
type ReloadResult struct {
	Added, Updated, Removed, Kept []string
	Errors                        int
}

// Console serves the web console.
type Console struct {
	cfg     Config
	log     *slog.Logger
	pages   map[string]*template.Template
	static  http.Handler
	keys    sessionKeys
	hub     *hub
	rates   *rateSampler
	mux     *http.ServeMux
	assetV  string
	stopped chan struct{}
	stop    sync.Once

	clusterMu    sync.Mutex    // guards clusterWatch
	clusterSem   chan struct{} // held while opening; guards clusterStore
	clusterStore *state.KVStore
	lateOnce     sync.Once // cfg.Late's parts into cfg
	clusterWatch bool

	reloadMu   sync.Mutex
	lastReload *reloadRecord
}

// reloadRecord is the last reload asked for from the console.
type reloadRecord struct {
	At     time.Time
	Result ReloadResult
	Err    string
}

// New builds the console. Call Close when the daemon stops.
func New(cfg Config) (*Console, error) {
	if cfg.Queue == nil {
		return nil, errors.New("console: no queue")
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "web/static")
	if err != nil {
		return nil, fmt.Errorf("console: static assets: %w", err)
	}
	c := &Console{cfg: cfg, log: cfg.Logger, pages: pages, keys: newSessionKeys(cfg.Token, cfg.Tokens), stopped: make(chan struct{}), clusterSem: make(chan struct{}, 1),
		assetV: assetVersion()}
	c.static = http.StripPrefix(Prefix+"/static/", http.FileServer(http.FS(sub)))
	if cfg.minInterval <= 0 {
		cfg.minInterval = minInterval
	}
	c.hub = newHub(cfg.MaxStreams, cfg.minInterval)
	if cfg.Changes != nil {
		stop := cfg.Changes.OnChange(c.taskChanged)
		go func() { <-c.stopped; stop() }()
	}
	if cfg.Metrics != nil {
		c.rates = newRateSampler(cfg.Metrics, cfg.Now)
		go c.rates.run(c.stopped, 10*time.Second, func() bool { return c.hub.follows(topicOverview) },
			func() { c.hub.publish(topicOverview) })
	}
	c.mux = c.routes()
	return c, nil
}

// Close stops the console's watches; open event streams end.
func (c *Console) Close() {
	c.stop.Do(func() {
		close(c.stopped)
		c.hub.close()
	})
}

// Handler serves everything under Prefix. The API mounts it before its
// own bearer check: the console checks its session cookie itself.
func (c *Console) Handler() http.Handler { return c.mux }

// PluginsChanged tells open plugin pages that a reload happened (the hot
// reload calls it).
func (c *Console) PluginsChanged() {
	c.hub.publish(topicPlugins, topicOverview)
}

func (c *Console) routes() *http.ServeMux {
	mux := http.NewServeMux()
	page := func(h http.HandlerFunc) http.Handler { return c.secure(c.authed(h)) }
	action := func(h http.HandlerFunc) http.Handler { return c.secure(c.authed(c.acting(h))) }
	mux.Handle(Prefix, http.RedirectHandler(Prefix+"/", http.StatusMovedPermanently))
	mux.Handle("GET "+Prefix+"/static/", c.secure(http.HandlerFunc(c.serveStatic)))
	mux.Handle("GET "+Prefix+"/login", c.secure(http.HandlerFunc(c.loginPage)))
	mux.Handle("POST "+Prefix+"/login", c.secure(http.HandlerFunc(c.login)))
	mux.Handle("POST "+Prefix+"/logout", c.secure(c.authed(http.HandlerFunc(c.logout))))
	mux.Handle("GET "+Prefix+"/{$}", page(c.overview))
	mux.Handle("GET "+Prefix+"/tasks", page(c.tasks))
	mux.Handle("GET "+Prefix+"/tasks/{id}", page(c.task))
	mux.Handle("GET "+Prefix+"/tasks/{id}/log.txt", page(c.taskLogText))
	mux.Handle("GET "+Prefix+"/tasks/{id}/{action}", page(c.taskConfirm))
	mux.Handle("POST "+Prefix+"/tasks/{id}/{action}", action(c.taskAction))
	mux.Handle("GET "+Prefix+"/clusters", page(c.clusters))
	mux.Handle("GET "+Prefix+"/clusters/{name}", page(c.cluster))
	mux.Handle("GET "+Prefix+"/clusters/{name}/jobs/{job}", page(c.clusterJob))
	mux.Handle("GET "+Prefix+"/clusters/{name}/{action}", page(c.clusterConfirm))
	mux.Handle("POST "+Prefix+"/clusters/{name}/{action}", action(c.clusterAction))
	mux.Handle("GET "+Prefix+"/apply", page(c.applyForm))
	mux.Handle("POST "+Prefix+"/apply/plan", action(c.applyPlan))
	mux.Handle("POST "+Prefix+"/apply", action(c.apply))
	mux.Handle("GET "+Prefix+"/plugins", page(c.plugins))
	mux.Handle("GET "+Prefix+"/plugins/reload", page(c.reloadConfirm))
	mux.Handle("POST "+Prefix+"/plugins/reload", action(c.reload))
	mux.Handle("GET "+Prefix+"/coopr", page(c.cooprPage))
	mux.Handle("GET "+Prefix+"/events", c.secure(c.authed(http.HandlerFunc(c.events))))
	mux.Handle(Prefix+"/", c.secure(c.authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		c.notFound(w, r, "There is no page at "+r.URL.Path+".")
	}))))
	return mux
}

// contentSecurityPolicy allows the console's own script, styles and event
// stream, and nothing else: no inline script or style, no frames, no
// other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the security headers on every answer.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	// Asset URLs carry the build's version (?v=), so they may be cached
	// for good; a new binary changes the URL.
	if r.URL.Query().Get("v") == c.assetV {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		w.Header().Set("Cache-Control", "no-cache")
	}
	c.static.ServeHTTP(w, r)
}

// serverURL is the --server the CLI equivalents name.
func (c *Console) serverURL(r *http.Request) string {
	if c.cfg.Server != "" {
		return c.cfg.Server
	}
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// cliServer is the --server flag of a CLI equivalent, "" for the default.
func (c *Console) cliServer(r *http.Request) string {
	u := c.serverURL(r)
	if u == "http://127.0.0.1:7070" || u == "http://localhost:7070" {
		return ""
	}
	return " --server " + shellQuote(u)
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=@,+%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// query builds a console URL with query parameters, dropping empty ones.
func query(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}
