package coopr

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// ParseAllow reads --coopr-allow: comma-separated addresses and CIDR
// prefixes (10.0.0.5, 10.0.0.0/24, ::1). Empty entries are skipped.
func ParseAllow(items []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, it := range items {
		for _, s := range strings.Split(it, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if p, err := netip.ParsePrefix(s); err == nil {
				out = append(out, p.Masked())
				continue
			}
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--coopr-allow %q: want an IP address or a CIDR prefix (10.0.0.0/24)", s)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
		}
	}
	return out, nil
}

// callers decides who may call the provisioner API. The API has no
// authentication (Coopr's had none and the server sends none), so by
// default only loopback and the Coopr server's own addresses may call it;
// Config.Allow replaces that with an explicit list.
type callers struct {
	explicit []netip.Prefix
	host     string // the server's host, resolved for the default
	resolve  func(ctx context.Context, host string) ([]netip.Addr, error)

	mu       sync.Mutex
	server   map[netip.Addr]bool
	resolved time.Time
}

// reresolveAfter bounds how often an unknown caller makes the server's
// name be looked up again (its address may have changed).
const reresolveAfter = 30 * time.Second

func newCallers(allow []netip.Prefix, serverURL string) *callers {
	c := &callers{explicit: allow, server: map[netip.Addr]bool{},
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}}
	if u, err := url.Parse(serverURL); err == nil {
		c.host = u.Hostname()
	}
	return c
}

// allowed reports whether a caller at addr may use the API.
func (c *callers) allowed(addr netip.Addr) bool {
	addr = addr.Unmap()
	if c.explicit != nil {
		for _, p := range c.explicit {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	}
	if addr.IsLoopback() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.server[addr] {
		return true
	}
	if time.Since(c.resolved) < reresolveAfter {
		return false
	}
	c.refreshLocked()
	return c.server[addr]
}

func (c *callers) refreshLocked() {
	c.resolved = time.Now()
	if c.host == "" {
		return
	}
	if a, err := netip.ParseAddr(c.host); err == nil {
		c.server = map[netip.Addr]bool{a.Unmap(): true}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	addrs, err := c.resolve(ctx, c.host)
	if err != nil {
		return // keep what was known
	}
	c.server = map[netip.Addr]bool{}
	for _, a := range addrs {
		c.server[a.Unmap()] = true
	}
}

// describe says who may call, for the refusal and the start log.
func (c *callers) describe() string {
	if c.explicit != nil {
		var s []string
		for _, p := range c.explicit {
			s = append(s, p.String())
		}
		return "the --coopr-allow list (" + strings.Join(s, ", ") + ")"
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var s []string
	for a := range c.server {
		s = append(s, a.String())
	}
	return fmt.Sprintf("loopback and the Coopr server's addresses (%s: %s)", c.host, strings.Join(s, ", "))
}

// guard refuses callers that may not use the API with 403 and what to
// do, and logs each refused address once a minute at most.
func (p *Provisioner) guard(next http.Handler) http.Handler {
	var mu sync.Mutex
	logged := map[netip.Addr]time.Time{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ap, err := netip.ParseAddrPort(r.RemoteAddr)
		if err == nil && p.callers.allowed(ap.Addr()) {
			next.ServeHTTP(w, r)
			return
		}
		who := r.RemoteAddr
		if err == nil {
			who = ap.Addr().Unmap().String()
			mu.Lock()
			if time.Since(logged[ap.Addr()]) > time.Minute {
				logged[ap.Addr()] = time.Now()
				p.log.Warn("coopr: refused a provisioner API call from an address that may not make it", "from", who,
					"method", r.Method, "path", r.URL.Path, "allowed", p.callers.describe())
			}
			mu.Unlock()
		}
		http.Error(w, fmt.Sprintf("loomd refuses provisioner API calls from %s: only %s may make them; if this is the Coopr server (behind a proxy or NAT), add its address to --coopr-allow",
			who, p.callers.describe()), http.StatusForbidden)
	})
}
