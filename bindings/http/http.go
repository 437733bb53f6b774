// Package http is the Lua module "loom.http": an HTTP client for provider
// plugins that talk to cloud APIs.
//
// From Lua:
//
//	local http = require("loom.http")
//	local resp = http.get("https://api.example.com/v2/droplets", {
//	  bearer = self.fields.api_token,
//	  query = {per_page = 200},
//	  retries = 3,
//	  check = true,
//	})
//	for _, d in ipairs(resp:json().droplets) do ... end
//
// Every call is bounded by the running hook's deadline. Connections are
// pooled in transports that the Binding keeps for its whole life and shares
// between VMs and tasks: one transport for plain requests, and one per
// distinct TLS configuration or unix socket. Credentials handed to a call
// (bearer tokens, basic-auth passwords, URL passwords, Authorization
// headers) are registered with the host as secrets and never logged or put
// into error messages. When the plugin definition declares an HTTP
// allow-list, requests (and redirects) to other hosts are refused.
//
// The package is named http like the module; it imports the standard
// library's net/http as nethttp.
package http

import (
	"errors"
	"log/slog"
	nethttp "net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/bindings/luaval"
)

// Defaults applied by New to zero Options fields.
const (
	DefaultUserAgent     = "loom"
	DefaultMaxBody       = 4 << 20
	DefaultMaxBodyLimit  = 64 << 20
	DefaultMaxRedirects  = 10
	DefaultMaxRetries    = 10
	DefaultTimeout       = 60 * time.Second
	DefaultRetryDelay    = 500 * time.Millisecond
	DefaultRetryMaxDelay = 30 * time.Second
	DefaultMaxTransports = 32
)

// Options configure a Binding. Zero fields take the defaults above.
type Options struct {
	// UserAgent is sent unless a call sets its own User-Agent header.
	UserAgent string
	// DefaultMaxBody is the response body cap in bytes when a call sets
	// no max_body.
	DefaultMaxBody int64
	// MaxBodyLimit is the largest max_body a call may ask for.
	MaxBodyLimit int64
	// MaxRedirects caps how many redirects a call follows, whatever its
	// follow_redirects option says.
	MaxRedirects int
	// MaxRetries caps a call's retries option.
	MaxRetries int
	// DefaultTimeout bounds each attempt when the hook has no deadline
	// (the REPL, load time) and the call sets no timeout.
	DefaultTimeout time.Duration
	// RetryDelay is the first back-off delay when a call sets no
	// retry_delay; it doubles on each retry.
	RetryDelay time.Duration
	// RetryMaxDelay is the longest single wait between attempts when a
	// call sets no retry_max_delay. A Retry-After longer than this ends
	// the retries.
	RetryMaxDelay time.Duration
	// MaxTransports bounds the cache of per-TLS-config and per-socket
	// transports; the least recently used one is dropped beyond it.
	MaxTransports int
	// Listeners is the registry of the process's own listening sockets
	// (loomd's API, the Coopr provisioner API, NATS, ...): no plugin
	// reaches any of them, whatever its allow-list says. It is consulted
	// at every dial, with the address actually dialled. Nil denies
	// nothing.
	Listeners *listeners.Registry
	// Transport replaces the default transport. A *net/http.Transport is
	// used for plain requests and cloned for calls with tls or
	// unix_socket options. Any other RoundTripper (a test fake) serves
	// every request, and calls with tls or unix_socket options fail.
	Transport nethttp.RoundTripper
	// Intercept, when set, sees every request first (after the
	// allow-list): one it answers (ok true) never reaches the transport.
	// loomd repl's fakes answer for the hosts they claim this way, while
	// every other request keeps the real transport (TLS options, proxies,
	// the listener registry's deny rule).
	Intercept func(req *nethttp.Request) (resp *nethttp.Response, err error, ok bool)
	// Proxy selects the proxy for the default transport. Nil means
	// net/http.ProxyFromEnvironment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY).
	// It is ignored when Transport is set.
	Proxy func(*nethttp.Request) (*url.URL, error)
	// Clock times the waits between retries and reads Retry-After dates
	// against; nil means the wall clock. loomd test gives a virtual one.
	Clock bindings.Clock
}

// Binding is the loom.http module. It is safe for concurrent use by many
// VMs. Build it with New and release it with Close.
type Binding struct {
	opts       Options
	base       nethttp.RoundTripper // plain requests
	baseHTTP   *nethttp.Transport   // template for TLS and socket variants; nil with a fake transport
	transports transportCache

	requests atomic.Int64
	retries  atomic.Int64
	failures atomic.Int64
}

// New returns a Binding with its shared transport. It opens no connection.
func New(opts Options) *Binding {
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	if opts.DefaultMaxBody <= 0 {
		opts.DefaultMaxBody = DefaultMaxBody
	}
	if opts.MaxBodyLimit <= 0 {
		opts.MaxBodyLimit = DefaultMaxBodyLimit
	}
	if opts.MaxBodyLimit < opts.DefaultMaxBody {
		opts.MaxBodyLimit = opts.DefaultMaxBody
	}
	if opts.MaxRedirects <= 0 {
		opts.MaxRedirects = DefaultMaxRedirects
	}
	if opts.MaxRetries <= 0 {
		opts.MaxRetries = DefaultMaxRetries
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = DefaultTimeout
	}
	opts.Clock = bindings.ClockOrReal(opts.Clock)
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = DefaultRetryDelay
	}
	if opts.RetryMaxDelay <= 0 {
		opts.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if opts.MaxTransports <= 0 {
		opts.MaxTransports = DefaultMaxTransports
	}
	b := &Binding{opts: opts}
	switch t := opts.Transport.(type) {
	case nil:
		b.baseHTTP = newBaseTransport(opts.Proxy, opts.Listeners)
		b.base = b.baseHTTP
	case *nethttp.Transport:
		b.baseHTTP = t
		b.base = t
	default:
		b.base = t
	}
	b.transports.max = opts.MaxTransports
	return b
}

// Interface guards.
var (
	_ bindings.Binding       = (*Binding)(nil)
	_ bindings.Closer        = (*Binding)(nil)
	_ bindings.StatsReporter = (*Binding)(nil)
)

// Close closes the idle connections of every transport the binding made.
// Requests in flight finish normally. The binding stays usable.
func (b *Binding) Close() error {
	if c, ok := b.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	b.transports.closeIdle()
	return nil
}

// Stats reports counters since New: attempts sent ("requests"), retries,
// calls that raised an error ("errors"), and cached TLS/socket transports.
func (b *Binding) Stats() map[string]float64 {
	return map[string]float64{
		"requests":   float64(b.requests.Load()),
		"retries":    float64(b.retries.Load()),
		"errors":     float64(b.failures.Load()),
		"transports": float64(b.transports.len()),
	}
}

// responseMeta is the registry key of the metatable of response tables.
const responseMeta = "loom.http.response"

// Open builds the module table for one VM.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	mod := L.NewTable()
	L.SetFuncs(mod, map[string]lua.LGFunction{
		"request": func(L *lua.LState) int { return b.luaRequest(L, h) },
		"get":     b.shortcut(h, nethttp.MethodGet),
		"head":    b.shortcut(h, nethttp.MethodHead),
		"post":    b.shortcut(h, nethttp.MethodPost),
		"put":     b.shortcut(h, nethttp.MethodPut),
		"patch":   b.shortcut(h, nethttp.MethodPatch),
		"delete":  b.shortcut(h, nethttp.MethodDelete),
	})
	mt := L.NewTypeMetatable(responseMeta)
	methods := L.NewTable()
	L.SetFuncs(methods, map[string]lua.LGFunction{"json": responseJSON})
	mt.RawSetString("__index", methods)
	mt.RawSetString("__metatable", lua.LString("locked"))
	return mod
}

// luaRequest is http.request(method, url, opts).
func (b *Binding) luaRequest(L *lua.LState, h bindings.Host) int {
	method, ok := L.Get(1).(lua.LString)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "http.request: method must be a string, got %s", L.Get(1).Type()))
	}
	return b.call(L, h, "http.request", string(method), 2)
}

// shortcut returns http.<verb>(url, opts).
func (b *Binding) shortcut(h bindings.Host, method string) lua.LGFunction {
	fn := "http." + lowerASCII(method)
	return func(L *lua.LState) int { return b.call(L, h, fn, method, 1) }
}

// call parses (url, opts) at stack index idx, performs the request and
// pushes the response table.
func (b *Binding) call(L *lua.LState, h bindings.Host, fn, method string, idx int) int {
	rawURL, ok := L.Get(idx).(lua.LString)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "%s: url must be a string, got %s", fn, L.Get(idx).Type()))
	}
	var optsTable *lua.LTable
	switch v := L.Get(idx + 1).(type) {
	case *lua.LTable:
		optsTable = v
	case *lua.LNilType:
	default:
		bindings.Raise(L, bindings.Errorf("config", "%s: opts must be a table, got %s", fn, v.Type()))
	}
	req, err := b.parseCall(L, fn, method, string(rawURL), optsTable)
	for _, s := range req.secrets {
		h.AddSecret(s)
	}
	if err != nil {
		b.failures.Add(1)
		bindings.Raise(L, err)
	}
	res, err := b.do(h, req)
	if err != nil {
		b.failures.Add(1)
		var be *bindings.Error
		if errors.As(err, &be) {
			be.Message = req.scrub(be.Message)
		}
		h.Logger().Debug("http request failed", slog.String("method", req.method),
			slog.String("url", req.displayURL), slog.String("error", req.scrub(err.Error())))
		bindings.Raise(L, err)
	}
	L.Push(b.responseTable(L, res))
	return 1
}

// responseTable converts a response to {status, ok, headers, body, url}
// with the response metatable (resp:json()).
func (b *Binding) responseTable(L *lua.LState, res *response) *lua.LTable {
	t := L.CreateTable(0, 5)
	t.RawSetString("status", lua.LNumber(res.status))
	t.RawSetString("ok", lua.LBool(res.status >= 200 && res.status < 300))
	hdr := L.CreateTable(0, len(res.header))
	for k, vs := range res.header {
		hdr.RawSetString(lowerASCII(k), lua.LString(joinValues(vs)))
	}
	t.RawSetString("headers", hdr)
	t.RawSetString("body", lua.LString(res.body))
	t.RawSetString("url", lua.LString(res.url))
	L.SetMetatable(t, L.GetTypeMetatable(responseMeta))
	return t
}

func joinValues(vs []string) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	n := 2 * (len(vs) - 1)
	for _, v := range vs {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	for i, v := range vs {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, v...)
	}
	return string(buf)
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// responseJSON is resp:json(): the body decoded with luaval's default
// limits, or nil for an empty body.
func responseJSON(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "resp:json: call it as a method, resp:json()"))
	}
	body, _ := t.RawGetString("body").(lua.LString)
	if len(strings.TrimSpace(string(body))) == 0 {
		L.Push(lua.LNil)
		return 1
	}
	v, err := luaval.Decode(L, []byte(body), luaval.Limits{})
	if err != nil {
		e := bindings.Errorf("http", "decoding JSON response from %s: %v", t.RawGetString("url").String(), err)
		e.Fields = map[string]any{"status": int(lua.LVAsNumber(t.RawGetString("status")))}
		bindings.Raise(L, e)
	}
	L.Push(v)
	return 1
}
