package http

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	nethttp "net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/listeners"
)

// checkOwn refuses a dial whose peer is one of the process's own
// listeners (loomd's API, the Coopr provisioner API, the NATS ports, ...)
// on any address of this machine. address is what the dialer is about to
// connect to: an IP and port after DNS, or a unix socket's path. A plugin
// has no business calling the daemon that runs it: it could read and
// delete other tenants' tasks.
func checkOwn(own *listeners.Registry, network, address string) error {
	l, ok := own.Match(network, address)
	if !ok {
		return nil
	}
	return deniedErr(address, l)
}

func deniedErr(address string, l listeners.Listener) error {
	e := bindings.Errorf("permission", "%s is %s: plugins may not call the daemon that runs them", address, l)
	e.Fields = map[string]any{"address": address, "listener": l.Name}
	return e
}

// ownControl is a dialer Control that applies checkOwn to every address
// dialled, so a name that resolves to loomd's own listener, a redirect
// to it, or a second address tried after the first failed are all
// checked on the address actually connected to.
func ownControl(own *listeners.Registry) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error { return checkOwn(own, network, address) }
}

// ownProxy wraps a proxy function: a request that would go through a
// proxy is refused when its target is one of the process's own listeners
// (a proxy on this machine would otherwise connect to it for the plugin).
// The target's name is resolved here for the check; the proxy resolves it
// again, so a name that changes its answer in between is a gap the
// operator closes with NO_PROXY or without a local proxy.
func ownProxy(own *listeners.Registry, proxy func(*nethttp.Request) (*url.URL, error)) func(*nethttp.Request) (*url.URL, error) {
	return func(req *nethttp.Request) (*url.URL, error) {
		u, err := proxy(req)
		if err != nil || u == nil {
			return u, err
		}
		host, port := req.URL.Hostname(), req.URL.Port()
		if port == "" {
			port = "80"
			if req.URL.Scheme == "https" {
				port = "443"
			}
		}
		addrs := []string{host}
		if net.ParseIP(strings.Trim(host, "[]")) == nil {
			if ips, err := net.DefaultResolver.LookupHost(req.Context(), host); err == nil {
				addrs = append(addrs, ips...)
			}
		}
		for _, a := range addrs {
			if err := checkOwn(own, "tcp", net.JoinHostPort(a, port)); err != nil {
				return nil, err
			}
		}
		return u, nil
	}
}

// newBaseTransport is the shared transport for plain requests. Timeouts
// that are not per-phase come from the request context (the hook deadline
// and opts.timeout).
func newBaseTransport(proxy func(*nethttp.Request) (*url.URL, error), own *listeners.Registry) *nethttp.Transport {
	if proxy == nil {
		proxy = nethttp.ProxyFromEnvironment
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if own != nil {
		// Consulted at dial time: a listener opened after the binding
		// was built is refused too.
		d.Control = ownControl(own)
		proxy = ownProxy(own, proxy)
	}
	return &nethttp.Transport{
		Proxy:                 proxy,
		DialContext:           guardDescriptors(d.DialContext),
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   32, // many tasks call the same cloud API
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}
}

// guardDescriptors refuses a new connection, with kind "limit", when the
// process is short of file descriptors, rather than letting it fail with
// "too many open files" later, in another tenant's task (issue 20 item 7).
func guardDescriptors(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := bindings.CheckDescriptors(""); err != nil {
			return nil, err
		}
		return dial(ctx, network, addr)
	}
}

// transportCache holds the transports made for calls with tls or
// unix_socket options, keyed by a digest of those options, so that such
// calls reuse their connections across calls, VMs and tasks.
type transportCache struct {
	mu  sync.Mutex
	max int
	m   map[string]*cachedTransport
	seq uint64
}

type cachedTransport struct {
	t    *nethttp.Transport
	used uint64 // seq of last use, for LRU eviction
}

func (c *transportCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

func (c *transportCache) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ct := range c.m {
		ct.t.CloseIdleConnections()
	}
}

// get returns the transport for key, building it with mk on a miss.
func (c *transportCache) get(key string, mk func() (*nethttp.Transport, error)) (*nethttp.Transport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	if ct, ok := c.m[key]; ok {
		ct.used = c.seq
		return ct.t, nil
	}
	t, err := mk()
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = make(map[string]*cachedTransport)
	}
	for len(c.m) >= c.max {
		var oldKey string
		var oldest *cachedTransport
		for k, ct := range c.m {
			if oldest == nil || ct.used < oldest.used {
				oldKey, oldest = k, ct
			}
		}
		oldest.t.CloseIdleConnections()
		delete(c.m, oldKey)
	}
	c.m[key] = &cachedTransport{t: t, used: c.seq}
	return t, nil
}

// transportKey digests the options that make a distinct transport. The
// key material itself is not kept in the key.
func transportKey(o tlsOptions, socket string) string {
	h := sha256.New()
	for _, s := range []string{o.ca, o.clientCert, o.clientKey, o.serverName, socket} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if o.insecureSkipVerify {
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// transportFor returns the round tripper for r: the shared one, or a
// cached variant for its TLS options or unix socket.
func (b *Binding) transportFor(r *request) (nethttp.RoundTripper, error) {
	if r.tls.isZero() && r.unixSocket == "" {
		return b.base, nil
	}
	if b.baseHTTP == nil {
		return nil, r.configError("opts.tls and opts.unix_socket are not available with the custom transport this runtime was built with")
	}
	return b.transports.get(transportKey(r.tls, r.unixSocket), func() (*nethttp.Transport, error) {
		t := b.baseHTTP.Clone()
		if !r.tls.isZero() {
			cfg, err := r.tlsConfig(t.TLSClientConfig)
			if err != nil {
				return nil, err
			}
			t.TLSClientConfig = cfg
		}
		if r.unixSocket != "" {
			path := r.unixSocket
			d := &net.Dialer{Timeout: 30 * time.Second}
			if b.opts.Listeners != nil {
				d.Control = ownControl(b.opts.Listeners)
			}
			t.Proxy = nil
			t.DialContext = guardDescriptors(func(ctx context.Context, _, _ string) (net.Conn, error) {
				if err := checkOwn(b.opts.Listeners, "unix", path); err != nil {
					return nil, err
				}
				return d.DialContext(ctx, "unix", path)
			})
			t.DialTLSContext = nil
		}
		return t, nil
	})
}

// tlsConfig builds the client TLS configuration for opts.tls. A ca
// replaces the system roots: only that CA is trusted.
func (r *request) tlsConfig(base *tls.Config) (*tls.Config, error) {
	var cfg *tls.Config
	if base != nil {
		cfg = base.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if r.tls.ca != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(r.tls.ca)) {
			return nil, r.configError("opts.tls.ca holds no PEM certificate")
		}
		cfg.RootCAs = pool
	}
	if r.tls.clientCert != "" {
		cert, err := tls.X509KeyPair([]byte(r.tls.clientCert), []byte(r.tls.clientKey))
		if err != nil {
			return nil, r.configError("loading opts.tls.client_cert and client_key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if r.tls.serverName != "" {
		cfg.ServerName = r.tls.serverName
	}
	cfg.InsecureSkipVerify = r.tls.insecureSkipVerify
	return cfg, nil
}
