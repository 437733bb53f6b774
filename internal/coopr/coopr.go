// Package coopr is the provisioner side of Coopr's task protocol
// (../shared/reference/coopr-provisioner.md §2): loomd registers with a
// Coopr server, registers its plugin types, heartbeats its per-tenant
// worker usage, answers the server's tenant calls on its own small API,
// and runs one take/finish loop per worker slot, through the same runner
// as loomd's own queue.
//
// What it fixes from the Ruby provisioner (§9): the provisioner id is
// stable across restarts; a 404 heartbeat re-registers; the finish is
// retried (with backoff, across server restarts, and after a loomd restart
// from a pending file) and a task is never run twice by this side; a slot
// that stops is replaced; no fixed sleep after each task; errors say what
// to do; resource versions are activated without stopping a tenant's
// workers.
package coopr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/runtime"
)

// Runner runs one task JSON and returns the result JSON and its status,
// as loomd's queue runner does (queue.Runner).
type Runner interface {
	Run(ctx context.Context, task []byte) ([]byte, int, error)
}

// PluginType is one plugin type to register with the server.
type PluginType struct {
	Name   string
	Family runtime.Family
	// Raw is the type's object from its definition, sent as the body.
	Raw []byte
}

// Config configures a Provisioner.
type Config struct {
	// ServerURL is the Coopr server's internal (tasks) API,
	// provisioner.server.uri (http://host:55055).
	ServerURL string
	// ID is the provisioner id. Empty means loom-<hostname>, stable
	// across restarts (Coopr's changed with every pid).
	ID string
	// Listen is the address of the provisioner API the server calls
	// (tenants); provisioner.bind.ip:bind.port. Empty means
	// 127.0.0.1:55056.
	Listen string
	// Allow lists the addresses that may call the provisioner API (it has
	// no authentication, as in Coopr). Nil means loopback and the
	// addresses of ServerURL's host (looked up again, at most every 30 s,
	// when an unknown address calls).
	Allow []netip.Prefix
	// AdvertiseHost is the host sent at registration, where the server
	// reaches the API; empty means the local address of a connection to
	// the server (as Coopr's provisioner.register.ip fallback did).
	AdvertiseHost string
	// Capacity is capacityTotal: the most worker slots the server may
	// assign to this provisioner. Default 10.
	Capacity int
	// Tenants are started before the server assigns any (tenant ->
	// workers), for servers that assign none at registration.
	Tenants map[string]int
	// Types are registered with the server at start (Coopr's --register).
	Types []PluginType
	// Runner runs the tasks.
	Runner Runner
	// WorkDir is loomd's work-dir root, where resources are activated
	// (<work>/<tenant>/<family>types/<type>/<resource type>/<name>).
	WorkDir string
	// StateDir keeps finishes not yet accepted by the server, so a loomd
	// restart still delivers them. Empty keeps them in memory only.
	StateDir string
	// Heartbeat is the heartbeat interval. Default 10 s; the server drops
	// a provisioner silent for 120 s.
	Heartbeat time.Duration
	// Poll is the wait after an empty take (204). Default 1 s.
	Poll time.Duration
	// MaxBackoff caps the wait between retries after errors. Default 10 s.
	MaxBackoff time.Duration
	// TLS sets the CAs and client certificate toward an https:// server.
	TLS TLS
	// Client is the HTTP client for the server. Default: 30 s timeout,
	// with TLS. Tests set it.
	Client *http.Client
	// Logger receives the provisioner's logs.
	Logger *slog.Logger
	// Metrics, when set, counts takes, finishes, heartbeats and syncs.
	Metrics *Metrics
	// Sleep waits d or until ctx ends and reports whether d passed; the
	// registration loop's waits go through it. Nil: a timer. Tests
	// record the waits with it.
	Sleep func(ctx context.Context, d time.Duration) bool
	// Listeners, when set, registers the provisioner API's socket as one
	// of the daemon's own (plugins never reach it).
	Listeners *listeners.Registry
}

// Provisioner is a running Coopr provisioner.
type Provisioner struct {
	cfg     Config
	log     *slog.Logger
	client  *http.Client
	host    string   // for worker ids
	callers *callers // who may call the provisioner API

	mu         sync.Mutex
	tenants    map[string]*tenant
	registered bool
	regErr     string
	seq        int // worker slot numbers
	// sentTypes is what the server accepted of each plugin type (family
	// dir/name -> the body sent): a type is sent again only when it
	// changed or was refused.
	sentTypes map[string]string

	stopTaking context.CancelFunc // ends every slot's next take
	takeCtx    context.Context
	runCtx     context.Context // cancelled only on a forced stop
	abort      context.CancelFunc
	slots      sync.WaitGroup
	bg         sync.WaitGroup
	bgStop     context.CancelFunc
	api        *http.Server
	apiAddr    string
	pending    sync.WaitGroup // finishes in flight
}

// tenant is one tenant's slots and resources.
type tenant struct {
	id        string
	workers   int
	resources json.RawMessage
	slots     []*slot
	syncMu    sync.Mutex
	syncErr   string
}

// slot is one worker: a take/finish loop.
type slot struct {
	workerID string
	stop     context.CancelFunc
	done     chan struct{}
}

// New checks the configuration and returns a provisioner; Start runs it.
func New(cfg Config) (*Provisioner, error) {
	if cfg.ServerURL == "" {
		return nil, errors.New("coopr: the server URL is empty (--coopr-server http://host:55055)")
	}
	cfg.ServerURL = strings.TrimRight(cfg.ServerURL, "/")
	if !strings.HasPrefix(cfg.ServerURL, "http://") && !strings.HasPrefix(cfg.ServerURL, "https://") {
		return nil, fmt.Errorf("coopr: --coopr-server %q: want http://host:port (the server's internal port, 55055 by default)", cfg.ServerURL)
	}
	if cfg.Runner == nil {
		return nil, errors.New("coopr: no runner")
	}
	host, _ := os.Hostname()
	host = strings.ToLower(host)
	if cfg.ID == "" {
		short, _, _ := strings.Cut(host, ".")
		cfg.ID = "loom-" + short
	}
	if !validID(cfg.ID) {
		return nil, fmt.Errorf("coopr: provisioner id %q: use letters, digits, '.', '_' and '-' (it goes into URL paths)", cfg.ID)
	}
	total := 0
	for t, n := range cfg.Tenants {
		if !runtime.ValidTenant(t) || n < 0 {
			return nil, fmt.Errorf("coopr: tenant %q with %d workers: a tenant id is 1 to 64 letters, digits, '.', '_' or '-', workers 0 or more", t, n)
		}
		total += n
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:55056"
	}
	if cfg.Capacity <= 0 {
		cfg.Capacity = 10
	}
	if total > cfg.Capacity {
		return nil, fmt.Errorf("coopr: --coopr-tenants ask for %d workers in all, more than --coopr-capacity %d", total, cfg.Capacity)
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if !cfg.TLS.empty() && !strings.HasPrefix(cfg.ServerURL, "https://") {
		return nil, fmt.Errorf("coopr: --coopr-ca, --coopr-cert and --coopr-key apply to an https:// server; --coopr-server is %s", cfg.ServerURL)
	}
	client := cfg.Client
	if client == nil {
		var err error
		if client, err = newClient(cfg.TLS, log); err != nil {
			return nil, err
		}
	}
	return &Provisioner{cfg: cfg, log: log.With("coopr_server", cfg.ServerURL, "provisioner", cfg.ID), client: client,
		host: host, tenants: map[string]*tenant{}}, nil
}

func validID(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ID is the provisioner id.
func (p *Provisioner) ID() string { return p.cfg.ID }

// APIAddr is the address the provisioner API listens on.
func (p *Provisioner) APIAddr() string { return p.apiAddr }

// Start listens for the server's calls, registers (in the background,
// retrying), registers the plugin types, delivers finishes a previous run
// left pending, starts the configured tenants and heartbeats. It returns
// once the API listens; ctx bounds nothing after that (Stop does).
func (p *Provisioner) Start(ctx context.Context) error {
	ln, err := p.cfg.Listeners.Listen("Coopr provisioner API (--coopr-listen)", "tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("coopr: the provisioner API cannot listen on %s: %w (--coopr-listen)", p.cfg.Listen, err)
	}
	p.apiAddr = ln.Addr().String()
	// The server's name is looked up when an address other than
	// loopback first calls, not here: a slow resolver must not hold the
	// start.
	p.callers = newCallers(p.cfg.Allow, p.cfg.ServerURL)
	p.api = &http.Server{Handler: p.guard(p.handler()), ReadHeaderTimeout: 10 * time.Second}
	go p.api.Serve(ln) //nolint:errcheck // Shutdown ends it

	p.takeCtx, p.stopTaking = context.WithCancel(context.Background())
	p.runCtx, p.abort = context.WithCancel(context.Background())
	bgCtx, bgStop := context.WithCancel(context.Background())
	p.bgStop = bgStop

	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		p.registerLoop(bgCtx)
	}()
	for t, n := range p.cfg.Tenants {
		p.setTenant(t, n, nil)
	}
	p.redeliverPending()
	return nil
}

// Stop stops taking tasks, lets the running ones finish and their
// results reach the server for up to grace, then unregisters. It reports
// whether tasks had to be interrupted.
func (p *Provisioner) Stop(grace time.Duration) (forced bool) {
	if p.stopTaking == nil {
		return false
	}
	// Under mu, so no resize starts a slot after this.
	p.mu.Lock()
	p.stopTaking()
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.slots.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		forced = true
		p.abort()
		<-done
	}
	// Nothing runs any more: results still being redelivered (a server
	// down) are kept on disk for the next start instead of holding the
	// shutdown.
	p.abort()
	p.bgStop()
	p.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.do(ctx, http.MethodDelete, "/v2/provisioners/"+p.cfg.ID, nil, nil, nil); err != nil {
		p.log.Warn("coopr: unregistering failed; the server drops this provisioner after its heartbeat timeout", "err", err)
	}
	_ = p.api.Shutdown(ctx)
	return forced
}

// registerLoop registers, then registers the plugin types, then
// heartbeats; a 404 heartbeat (the server forgot us) registers again.
// Failed registrations and repeated 404s back off, jittered, from Poll
// to MaxBackoff (a server that keeps answering 404 once got 541 requests
// in 6 s); a heartbeat the server takes resets the backoff.
func (p *Provisioner) registerLoop(ctx context.Context) {
	backoff := p.cfg.Poll
	wait := func(why string, err error) bool {
		d := jitter(backoff)
		p.log.Warn(why, "err", err, "retry_in", d.Round(time.Millisecond))
		backoff = min(backoff*2, max(p.cfg.MaxBackoff, p.cfg.Poll))
		return p.sleep(ctx, d)
	}
	for {
		if err := p.register(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			p.cfg.Metrics.registration(false)
			p.setRegistered(false, err.Error())
			if !wait("coopr: registering with the server failed; retrying", err) {
				return
			}
			continue
		}
		p.cfg.Metrics.registration(true)
		p.setRegistered(true, "")
		host, port := p.advertised()
		p.log.Info("coopr: registered with the server", "capacity", p.cfg.Capacity, "api", net.JoinHostPort(host, strconv.Itoa(port)))
		p.registerTypes(ctx)
		for {
			p.heartbeat(ctx)
			if ctx.Err() != nil {
				return
			}
			if !p.isRegistered() {
				break // 404: register again, after the backoff
			}
			backoff = p.cfg.Poll // the server knows us
			if !p.sleep(ctx, jitter(p.cfg.Heartbeat)) {
				return
			}
		}
		if !wait("coopr: the server does not know this provisioner (heartbeat 404); registering again", errors.New("heartbeat: HTTP 404")) {
			return
		}
	}
}

// jitter spreads a wait over [d/2, 3d/2), so provisioners that lost their
// server together do not come back in step.
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d/2 + rand.N(d)
}

func (p *Provisioner) sleep(ctx context.Context, d time.Duration) bool {
	if p.cfg.Sleep != nil {
		return p.cfg.Sleep(ctx, d)
	}
	return sleep(ctx, d)
}

func (p *Provisioner) setRegistered(ok bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.registered, p.regErr = ok, why
	p.cfg.Metrics.setRegistered(ok)
}

func (p *Provisioner) isRegistered() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registered
}

func (p *Provisioner) advertised() (string, int) {
	host, port, _ := net.SplitHostPort(p.apiAddr)
	if p.cfg.AdvertiseHost != "" {
		host = p.cfg.AdvertiseHost
	} else if host == "" || host == "0.0.0.0" || host == "::" {
		host = p.localAddrTowardServer()
	}
	n, _ := strconv.Atoi(port)
	return host, n
}

// localAddrTowardServer is this host's address on the route to the
// server (Coopr's fallback for provisioner.register.ip).
func (p *Provisioner) localAddrTowardServer() string {
	u := strings.TrimPrefix(strings.TrimPrefix(p.cfg.ServerURL, "http://"), "https://")
	hostport, _, _ := strings.Cut(u, "/")
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		hostport += ":80"
	}
	c, err := net.Dial("udp", hostport)
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	h, _, _ := net.SplitHostPort(c.LocalAddr().String())
	return h
}

func (p *Provisioner) register(ctx context.Context) error {
	host, port := p.advertised()
	body := map[string]any{"id": p.cfg.ID, "capacityTotal": p.cfg.Capacity, "host": host, "port": port}
	return p.do(ctx, http.MethodPut, "/v2/provisioners/"+p.cfg.ID, body, adminHeaders(""), nil)
}

func adminHeaders(tenant string) http.Header {
	h := http.Header{"Coopr-UserID": {"admin"}}
	if tenant != "" {
		h.Set("Coopr-TenantID", tenant)
	}
	return h
}

// registerTypes PUTs each plugin type's object (Coopr's --register), with
// its name filled in when the definition left it out. A type the server
// already took, unchanged, is not sent again (a registration after a 404
// heartbeat once re-sent every type each time).
func (p *Provisioner) registerTypes(ctx context.Context) {
	p.mu.Lock()
	types := p.cfg.Types
	p.mu.Unlock()
	for _, t := range types {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(t.Raw, &obj); err != nil {
			p.log.Error("coopr: plugin type not registered: its object is not JSON", "type", t.Name, "err", err)
			continue
		}
		if _, ok := obj["name"]; !ok {
			obj["name"], _ = json.Marshal(t.Name)
		}
		body, _ := json.Marshal(obj)
		path := "/v2/plugins/" + t.Family.Dir() + "/" + t.Name
		p.mu.Lock()
		sent := p.sentTypes[path] == string(body)
		p.mu.Unlock()
		if sent {
			continue
		}
		if err := p.do(ctx, http.MethodPut, path, json.RawMessage(body), adminHeaders("superadmin"), nil); err != nil {
			p.log.Error("coopr: the server refused a plugin type; tasks for it will not be planned (loomd plugins check shows what a Coopr server refuses)",
				"type", t.Name, "err", err)
			continue
		}
		p.mu.Lock()
		if p.sentTypes == nil {
			p.sentTypes = map[string]string{}
		}
		p.sentTypes[path] = string(body)
		p.mu.Unlock()
	}
}

// SetTypes replaces the plugin types (after a plugin reload) and
// registers them with the server when loomd is registered; otherwise the
// next registration does.
func (p *Provisioner) SetTypes(types []PluginType) {
	p.mu.Lock()
	p.cfg.Types = types
	registered := p.registered
	p.mu.Unlock()
	if registered {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.registerTypes(ctx)
	}
}

func (p *Provisioner) usage() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := map[string]int{}
	for id, t := range p.tenants {
		u[id] = len(t.slots)
	}
	return u
}

func (p *Provisioner) heartbeat(ctx context.Context) {
	err := p.do(ctx, http.MethodPost, "/v2/provisioners/"+p.cfg.ID+"/heartbeat", map[string]any{"usage": p.usage()}, adminHeaders(""), nil)
	var se *statusError
	switch {
	case err == nil:
		p.cfg.Metrics.heartbeat("ok")
	case errors.As(err, &se) && se.code == http.StatusNotFound:
		p.cfg.Metrics.heartbeat("unknown")
		p.setRegistered(false, "heartbeat: 404 (the server timed this provisioner out or lost its state)")
	case ctx.Err() == nil:
		p.cfg.Metrics.heartbeat("failed")
		p.log.Warn("coopr: heartbeat failed; the server drops a provisioner silent for 120 s", "err", err)
	}
}

// statusError is an answer outside 2xx.
type statusError struct {
	method, path string
	code         int
	body         string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s %s: HTTP %d: %s", e.method, e.path, e.code, e.body)
}

// do sends one request; out, when non-nil, receives a 200 JSON body. It
// returns the answer's status in a *statusError when it is not 2xx.
func (p *Provisioner) do(ctx context.Context, method, path string, body any, h http.Header, out *[]byte) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.cfg.ServerURL+path, rd)
	if err != nil {
		return err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.client.Do(req)
	if err != nil {
		if hint := tlsHint(err); hint != "" {
			return fmt.Errorf("%w (%s)", err, hint)
		}
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return &statusError{method: method, path: path, code: resp.StatusCode, body: shorten(string(bytes.TrimSpace(b)))}
	}
	if out != nil {
		if resp.StatusCode == http.StatusNoContent {
			*out = nil
		} else {
			*out = b
		}
	}
	return nil
}

func shorten(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// CapacityError refuses a tenant's worker count that would take the
// provisioner past its capacity.
type CapacityError struct {
	Tenant   string
	Workers  int // asked for this tenant
	Others   int // the other tenants' workers
	Capacity int
}

func (e *CapacityError) Error() string {
	if e.Workers > e.Capacity {
		return fmt.Sprintf("tenant %s: %d workers is more than this provisioner's capacity of %d (--coopr-capacity): each worker runs a task loop, so loomd refuses counts it did not offer",
			e.Tenant, e.Workers, e.Capacity)
	}
	return fmt.Sprintf("tenant %s: %d workers, with the other tenants' %d, is more than this provisioner's capacity of %d (--coopr-capacity); lower another tenant first, or raise --coopr-capacity",
		e.Tenant, e.Workers, e.Others, e.Capacity)
}

// setTenantWithin is setTenant for a worker count that must fit, with
// the other tenants', in the capacity; it returns a *CapacityError
// otherwise and changes nothing.
func (p *Provisioner) setTenantWithin(id string, workers int, resources json.RawMessage) error {
	p.mu.Lock()
	if others := p.totalWorkersLocked(id); workers > p.cfg.Capacity || others+workers > p.cfg.Capacity {
		p.mu.Unlock()
		return &CapacityError{Tenant: id, Workers: workers, Others: others, Capacity: p.cfg.Capacity}
	}
	p.setTenantLocked(id, workers, resources)
	return nil
}

// setTenant adds or updates a tenant: its worker count and resources.
// New or changed resources are synced in the background before the
// tenant's new slots take tasks; running slots keep running (a version is
// switched atomically; tasks in flight keep the files they opened).
func (p *Provisioner) setTenant(id string, workers int, resources json.RawMessage) {
	p.mu.Lock()
	p.setTenantLocked(id, workers, resources)
}

// setTenantLocked is setTenant with p.mu held; it releases it.
func (p *Provisioner) setTenantLocked(id string, workers int, resources json.RawMessage) {
	t, ok := p.tenants[id]
	if !ok {
		t = &tenant{id: id}
		p.tenants[id] = t
	}
	t.workers = workers
	changed := len(resources) > 0 && !bytes.Equal(resources, t.resources)
	if changed {
		t.resources = resources
	}
	p.mu.Unlock()
	if !changed {
		p.resize(t)
		return
	}
	// Sync first, then start any new slots: a new tenant's first task
	// finds its resources in place. Slots already running keep running.
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		p.syncResources(t, resources)
		p.resize(t)
	}()
}

// resize starts or stops slots until the tenant has its worker count.
// Stopped slots finish their task first.
func (p *Provisioner) resize(t *tenant) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A tenant deleted while its resources synced starts nothing.
	if p.takeCtx.Err() != nil || p.tenants[t.id] != t {
		return
	}
	defer func() { p.cfg.Metrics.setWorkers(t.id, len(t.slots)) }()
	for len(t.slots) < t.workers {
		p.seq++
		s := &slot{workerID: fmt.Sprintf("%s.%d.%d", p.host, os.Getpid(), p.seq), done: make(chan struct{})}
		ctx, cancel := context.WithCancel(p.takeCtx)
		s.stop = cancel
		t.slots = append(t.slots, s)
		p.slots.Add(1)
		go func() {
			defer p.slots.Done()
			defer close(s.done)
			p.work(ctx, t.id, s)
		}()
	}
	for len(t.slots) > t.workers {
		// The newest slots go first, as in Coopr.
		s := t.slots[len(t.slots)-1]
		t.slots = t.slots[:len(t.slots)-1]
		s.stop()
	}
}

// deleteTenant stops a tenant's slots and forgets it; false if unknown.
func (p *Provisioner) deleteTenant(id string) bool {
	p.mu.Lock()
	t, ok := p.tenants[id]
	if ok {
		delete(p.tenants, id)
		for _, s := range t.slots {
			s.stop()
		}
		t.slots, t.workers = nil, 0
		p.cfg.Metrics.forgetTenant(id)
	}
	p.mu.Unlock()
	return ok
}

// work is one slot's take/finish loop.
func (p *Provisioner) work(ctx context.Context, tenantID string, s *slot) {
	log := p.log.With("tenant", tenantID, "worker", s.workerID)
	backoff := p.cfg.Poll
	for ctx.Err() == nil {
		var task []byte
		body := map[string]any{"provisionerId": p.cfg.ID, "workerId": s.workerID, "tenantId": tenantID}
		// The take is not cancelled when the slot is told to stop (its
		// tenant deleted or shrunk): the server may have handed a task
		// out already, and a cancelled request would lose it until the
		// server's task timeout. Only a forced stop cancels it; the
		// client's timeout bounds it.
		err := p.do(p.runCtxOrBackground(), http.MethodPost, "/v2/tasks/take", body, nil, &task)
		var se *statusError
		switch {
		case err == nil && len(task) > 0:
			// Taken: run it even if the slot was told to stop meanwhile.
		case ctx.Err() != nil:
			return
		case err == nil:
			p.cfg.Metrics.take(tenantID, takeEmpty)
			backoff = p.cfg.Poll
			sleep(ctx, p.cfg.Poll)
			continue
		case errors.As(err, &se) && se.code == http.StatusForbidden:
			p.cfg.Metrics.take(tenantID, takeRefused)
			log.Warn("coopr: the server does not know this provisioner yet (take: 403); waiting for the registration", "retry_in", backoff)
			p.setRegistered(false, "take: 403")
			sleep(ctx, backoff)
			backoff = min(backoff*2, p.cfg.MaxBackoff)
			continue
		case err != nil:
			p.cfg.Metrics.take(tenantID, takeError)
			log.Warn("coopr: taking a task failed; retrying", "err", err, "retry_in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, p.cfg.MaxBackoff)
			continue
		}
		p.cfg.Metrics.take(tenantID, takeTask)
		backoff = p.cfg.Poll
		p.runAndFinish(tenantID, s.workerID, task, log)
	}
}

// runAndFinish runs a taken task and delivers its result. The task runs
// under runCtx, which only a forced stop cancels: a slot told to stop
// still finishes its task.
func (p *Provisioner) runAndFinish(tenantID, workerID string, task []byte, log *slog.Logger) {
	taskID := taskIDOf(task)
	log = log.With("task", taskID)
	start := time.Now()
	p.cfg.Metrics.taskStarted(tenantID)
	result := p.run(tenantID, task, log)
	result["taskId"] = taskID
	result["tenantId"] = tenantID
	result["provisionerId"] = p.cfg.ID
	result["workerId"] = workerID
	status, _ := result["status"].(int)
	p.cfg.Metrics.taskEnded(tenantID, status)
	log.Info("coopr: task ran", "status", status, "took", time.Since(start).Round(time.Millisecond))
	p.finish(taskID, result, log)
}

func taskIDOf(task []byte) string {
	var t struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(task, &t)
	return t.TaskID
}

// run runs a task and returns Coopr's result as a map; a task that could
// not run becomes a failed result saying why (the server then retries it
// or fails the job, as with any failure).
func (p *Provisioner) run(tenantID string, task []byte, log *slog.Logger) map[string]any {
	fail := func(format string, args ...any) map[string]any {
		msg := fmt.Sprintf(format, args...)
		log.Warn("coopr: task failed before or outside its plugin", "why", msg)
		return map[string]any{"status": 1, "message": msg, "stderr": msg}
	}
	data, err := withTenant(task, tenantID)
	if err != nil {
		return fail("task from the Coopr server is not a JSON object: %v", err)
	}
	out, status, err := p.cfg.Runner.Run(p.runCtx, data)
	switch {
	case err != nil && p.runCtx.Err() != nil:
		return fail("loomd stopped before the task finished (forced shutdown): it was interrupted; the server may run it again: %v", err)
	case err != nil:
		return fail("loomd could not run the task: %v", err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil || m == nil {
		return fail("the task's result is not a JSON object: %v", err)
	}
	// Coopr's server needs an integer status; the runner reported it.
	m["status"] = status
	return m
}

// withTenant sets the task's tenantId (the tenant the slot serves), which
// picks its work dirs, VMs and resources in loomd.
func withTenant(task []byte, tenantID string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(task, &m); err != nil {
		return nil, err
	}
	m["tenantId"], _ = json.Marshal(tenantID)
	return json.Marshal(m)
}

// finish delivers a result, retrying errors and 5xx with backoff (the
// server may be restarting) until the server answers. A 4xx is final: 417
// means another owner holds the task now (it timed the task out) or this
// finish already went through; either way the task is not run again here.
// The result is kept in StateDir until then, so a loomd restart delivers it.
func (p *Provisioner) finish(taskID string, result map[string]any, log *slog.Logger) {
	p.pending.Add(1)
	defer p.pending.Done()
	tenantID, _ := result["tenantId"].(string)
	outcome := finishDelivered
	p.cfg.Metrics.finishStarted()
	defer func() { p.cfg.Metrics.finishEnded(tenantID, outcome) }()
	file := p.savePending(taskID, result, log)
	defer func() {
		if file != "" {
			_ = os.Remove(file)
		}
	}()
	backoff := p.cfg.Poll
	deadline := time.Now().Add(30 * time.Minute) // the server's task timeout: 417 after it anyway
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.runCtxOrBackground(), p.client.Timeout+time.Second)
		err := p.do(ctx, http.MethodPost, "/v2/tasks/finish", result, nil, nil)
		cancel()
		var se *statusError
		switch {
		case err == nil:
			if attempt > 1 {
				log.Info("coopr: finish delivered", "attempts", attempt)
			}
			return
		case errors.As(err, &se) && se.code == http.StatusForbidden:
			// The server forgot this provisioner: register again, then retry.
			p.setRegistered(false, "finish: 403")
			rerr := p.register(context.Background())
			p.cfg.Metrics.registration(rerr == nil)
		case errors.As(err, &se) && se.code >= 400 && se.code < 500:
			if se.code == http.StatusExpectationFailed && attempt > 1 {
				outcome = finishDuplicate
				log.Info("coopr: the server no longer holds the task for this worker (417 after a retried finish: the earlier attempt went through, or the server timed the task out)")
			} else {
				outcome = finishRefused
				log.Error("coopr: the server refused the result", "err", err)
			}
			return
		case time.Now().After(deadline):
			outcome = finishAbandoned
			log.Error("coopr: giving up delivering the result after the server's task timeout; the server has failed the task by now", "err", err)
			return
		case p.runCtx.Err() != nil && file != "":
			log.Warn("coopr: stopping with a result not delivered; it is kept and sent at the next start", "file", file, "err", err)
			file = "" // keep it
			outcome = finishKept
			return
		case p.runCtx.Err() != nil:
			outcome = finishLost
			log.Error("coopr: stopping with a result not delivered (no state dir to keep it); the server times the task out and runs it again", "err", err)
			return
		}
		p.cfg.Metrics.finishRetry(tenantID)
		log.Warn("coopr: delivering the result failed; retrying", "err", err, "attempt", attempt, "retry_in", backoff)
		sleep(p.runCtx, backoff)
		backoff = min(backoff*2, p.cfg.MaxBackoff)
	}
}

func (p *Provisioner) runCtxOrBackground() context.Context {
	if p.runCtx.Err() != nil {
		return context.Background()
	}
	return p.runCtx
}

func (p *Provisioner) pendingDir() string {
	if p.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(p.cfg.StateDir, "coopr-pending")
}

// savePending writes the result to StateDir before the first attempt.
func (p *Provisioner) savePending(taskID string, result map[string]any, log *slog.Logger) string {
	dir := p.pendingDir()
	if dir == "" {
		return ""
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("coopr: cannot keep the result on disk until it is delivered", "err", err)
		return ""
	}
	b, _ := json.Marshal(result)
	f := filepath.Join(dir, safeName(taskID)+".json")
	tmp := f + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil || os.Rename(tmp, f) != nil {
		log.Warn("coopr: cannot keep the result on disk until it is delivered", "err", err)
		return ""
	}
	return f
}

func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// redeliverPending sends the results a previous run could not deliver.
func (p *Provisioner) redeliverPending() {
	dir := p.pendingDir()
	if dir == "" {
		return
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".json") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		var m map[string]any
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		_ = os.Remove(filepath.Join(dir, n))
		if err != nil {
			p.log.Warn("coopr: dropping an unreadable pending result", "file", n, "err", err)
			continue
		}
		taskID, _ := m["taskId"].(string)
		if f, ok := m["status"].(float64); ok {
			m["status"] = int(f)
		}
		p.log.Info("coopr: delivering a result left from before the restart", "task", taskID)
		p.bg.Add(1)
		go func() {
			defer p.bg.Done()
			p.finish(taskID, m, p.log.With("task", taskID))
		}()
	}
}
