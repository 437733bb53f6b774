package plugtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// router is the loom.http transport of a test runtime: a request for a
// host some fake claims goes to that fake's 127.0.0.1 listener, a request
// to a fake's own address goes straight to it, and anything else fails:
// tests never reach the network.
type router struct {
	mu    sync.Mutex
	hosts map[string]*fake // claimed host name -> fake
	addrs map[string]*fake // "127.0.0.1:port" -> fake
	base  *http.Transport
}

func newRouter() *router {
	return &router{hosts: map[string]*fake{}, addrs: map[string]*fake{},
		base: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 8, ResponseHeaderTimeout: 0}}
}

func (r *router) add(f *fake) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range f.hosts {
		if o := r.hosts[h]; o != nil {
			return fmt.Errorf("host %q is already served by another HTTP fake (created at %s); close it first (fake:close())", h, o.where)
		}
	}
	for _, h := range f.hosts {
		r.hosts[h] = f
	}
	r.addrs[f.addr] = f
	return nil
}

func (r *router) remove(f *fake) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range f.hosts {
		if r.hosts[h] == f {
			delete(r.hosts, h)
		}
	}
	delete(r.addrs, f.addr)
}

// permitted lists the hosts of fakes created with permit = true, added
// to the plugin's allow-list (runtime.Options.PermitHTTP).
func (r *router) permitted() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.addrs {
		if f.permit {
			return []string{"127.0.0.1"}
		}
	}
	return nil
}

// serves says whether a fake answers req.
func (r *router) serves(req *http.Request) bool {
	host := strings.TrimSuffix(strings.ToLower(req.URL.Hostname()), ".")
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hosts[host] != nil || r.addrs[req.URL.Host] != nil
}

// RoundTrip implements http.RoundTripper.
func (r *router) RoundTrip(req *http.Request) (*http.Response, error) {
	host := strings.TrimSuffix(strings.ToLower(req.URL.Hostname()), ".")
	r.mu.Lock()
	f := r.hosts[host]
	if f == nil {
		f = r.addrs[req.URL.Host]
	}
	var known []string
	for h := range r.hosts {
		known = append(known, h)
	}
	r.mu.Unlock()
	if f == nil {
		sort.Strings(known)
		hint := "no fake is open"
		if len(known) > 0 {
			hint = "fakes serve " + strings.Join(known, ", ")
		}
		return nil, noFakeError(fmt.Sprintf("loomd test: no HTTP fake serves %s (%s %s; %s): tests never reach the network; add one with loom.test.http{host = %q}",
			req.URL.Host, req.Method, req.URL.Path, hint, host))
	}
	out := req.Clone(req.Context())
	out.URL.Scheme = "http"
	out.URL.Host = f.addr
	out.Host = req.URL.Host
	out.Header.Set("X-Loom-Test-Scheme", req.URL.Scheme)
	return r.base.RoundTrip(out)
}

func (r *router) close() { r.base.CloseIdleConnections() }

// noFakeError is a request for a host no fake serves: retrying cannot
// help, so loom.http does not.
type noFakeError string

func (e noFakeError) Error() string   { return string(e) }
func (e noFakeError) Permanent() bool { return true }

// response is a canned HTTP response, converted from Lua once.
type response struct {
	status  int
	headers map[string]string
	body    []byte
	delay   time.Duration
	drop    bool // close the connection without answering
}

// route answers requests whose method and path match.
type route struct {
	method  string // "" or "*" matches any
	pattern string
	segs    []string
	// One of: canned responses (the last repeats) or a Lua handler.
	canned  []*response
	served  int
	handler *lua.LFunction
}

// queued is a response given to the next matching requests, before the
// routes: the 429s and 5xx a test asks for on demand.
type queued struct {
	method, pattern string
	segs            []string
	resp            *response
	left            int
}

// recorded is one request the fake received.
type recorded struct {
	Method  string
	Path    string
	Host    string
	Query   url.Values
	Headers http.Header
	Body    []byte
	Route   string
	Params  map[string]string
	Status  int
}

// fake is one HTTP fake: routes served on a 127.0.0.1 listener.
type fake struct {
	hosts  []string
	addr   string
	url    string
	where  string // file:line that created it
	permit bool
	strict bool
	srv    *http.Server
	ln     net.Listener
	pump   *pump

	mu        sync.Mutex
	routes    []*route
	queue     []*queued
	log       []*recorded
	unmatched []string
	closed    bool
}

// handlerCall asks the test's goroutine to run a Lua handler: an HTTP
// fake's route handler, or (run set) any other fake's.
type handlerCall struct {
	f     *fake
	rt    *route
	req   *recorded
	reply chan *response
	// run, when set, runs the handler and replies itself; it returns the
	// error object when the handler raised.
	run func(L *lua.LState) lua.LValue
}

// pump carries handler calls to the goroutine that owns the Lua state.
// It is open only while loom.test.run (or chain) waits for a hook: that
// is when the Lua state is free to run handlers.
type pump struct {
	mu    sync.Mutex
	calls chan *handlerCall // nil when closed
}

func (p *pump) open() chan *handlerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = make(chan *handlerCall)
	return p.calls
}

func (p *pump) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
}

func (p *pump) send(ctx context.Context, c *handlerCall) bool {
	p.mu.Lock()
	ch := p.calls
	p.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case ch <- c:
		return true
	case <-ctx.Done():
		return false
	}
}

func startFake(hosts []string, where string, permit, strict bool, p *pump) (*fake, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1: %w", err)
	}
	f := &fake{hosts: hosts, addr: ln.Addr().String(), where: where, permit: permit, strict: strict, ln: ln, pump: p}
	f.url = "http://" + f.addr
	f.srv = &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go f.srv.Serve(ln)
	return f, nil
}

func (f *fake) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if f.srv.Shutdown(ctx) != nil {
		f.srv.Close()
	}
}

func splitPath(p string) []string {
	return strings.Split(strings.Trim(p, "/"), "/")
}

// matchPath matches a path against a pattern's segments: "{name}" takes
// one segment, a final "*" takes the rest.
func matchPath(segs []string, path string) (map[string]string, bool) {
	got := splitPath(path)
	params := map[string]string{}
	for i, s := range segs {
		if s == "*" && i == len(segs)-1 {
			params["*"] = strings.Join(got[i:], "/")
			return params, true
		}
		if i >= len(got) {
			return nil, false
		}
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			if got[i] == "" {
				return nil, false
			}
			params[s[1:len(s)-1]] = got[i]
			continue
		}
		if s != got[i] {
			return nil, false
		}
	}
	return params, len(got) == len(segs)
}

func methodMatches(want, got string) bool {
	return want == "" || want == "*" || strings.EqualFold(want, got)
}

// ServeHTTP records the request and answers from the queue, a route, or
// a 404 that names the routes (and fails the test when strict).
func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rec := &recorded{Method: r.Method, Path: r.URL.Path, Host: r.Host, Query: r.URL.Query(), Headers: r.Header.Clone(), Body: body}
	rec.Headers.Del("X-Loom-Test-Scheme")
	f.mu.Lock()
	f.log = append(f.log, rec)
	var resp *response
	var call *route
	for i, q := range f.queue {
		if methodMatches(q.method, r.Method) && (q.segs == nil || matched(q.segs, r.URL.Path)) {
			resp = q.resp
			rec.Route = "(fail_next)"
			if q.left--; q.left <= 0 {
				f.queue = append(f.queue[:i], f.queue[i+1:]...)
			}
			break
		}
	}
	if resp == nil {
		for i := len(f.routes) - 1; i >= 0; i-- { // later routes win
			rt := f.routes[i]
			if !methodMatches(rt.method, r.Method) {
				continue
			}
			params, ok := matchPath(rt.segs, r.URL.Path)
			if !ok {
				continue
			}
			rec.Route, rec.Params = rt.pattern, params
			if rt.handler != nil {
				call = rt
			} else {
				resp = rt.canned[min(rt.served, len(rt.canned)-1)]
				rt.served++
			}
			break
		}
	}
	if resp == nil && call == nil {
		var names []string
		for _, rt := range f.routes {
			names = append(names, strings.TrimSpace(rt.method+" "+rt.pattern))
		}
		msg := fmt.Sprintf("no route for %s %s on the HTTP fake for %s (routes: %s)", r.Method, r.URL.Path, strings.Join(f.hosts, ", "), orNone(names))
		f.unmatched = append(f.unmatched, msg)
		resp = &response{status: 404, headers: map[string]string{"Content-Type": "application/json"}}
		resp.body, _ = json.Marshal(map[string]string{"id": "not_found", "message": "loomd test: " + msg})
	}
	f.mu.Unlock()
	if call != nil {
		c := &handlerCall{f: f, rt: call, req: rec, reply: make(chan *response, 1)}
		if !f.pump.send(r.Context(), c) {
			resp = &response{status: 500, body: []byte("loomd test: a Lua handler of the HTTP fake runs only while loom.test.run or loom.test.chain waits for a hook\n")}
		} else {
			select {
			case resp = <-c.reply:
			case <-r.Context().Done():
				return
			}
		}
	}
	f.mu.Lock()
	rec.Status = resp.status
	f.mu.Unlock()
	f.write(w, r, resp)
}

func matched(segs []string, path string) bool {
	_, ok := matchPath(segs, path)
	return ok
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func (f *fake) write(w http.ResponseWriter, r *http.Request, resp *response) {
	if resp.delay > 0 {
		t := time.NewTimer(resp.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if resp.drop {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	for k, v := range resp.headers {
		w.Header().Set(k, v)
	}
	status := resp.status
	if status == 0 {
		status = 200
	}
	w.WriteHeader(status)
	w.Write(resp.body)
}

// requests returns the recorded requests matching method and pattern
// ("" matches all).
func (f *fake) requests(method, pattern string) []*recorded {
	var segs []string
	if pattern != "" {
		segs = splitPath(pattern)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*recorded
	for _, r := range f.log {
		if methodMatches(method, r.Method) && (segs == nil || matched(segs, r.Path)) {
			out = append(out, r)
		}
	}
	return out
}

// takeUnmatched returns and clears the requests no route answered.
func (f *fake) takeUnmatched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.unmatched
	f.unmatched = nil
	return u
}

// summary lists what the fake received, for failure messages.
func (f *fake) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.log) == 0 {
		return "the fake received no request"
	}
	var b bytes.Buffer
	b.WriteString("the fake received:")
	for _, r := range f.log {
		fmt.Fprintf(&b, "\n  %s %s -> %d", r.Method, r.Path, r.Status)
	}
	return b.String()
}
