// Package listeners is the registry of the sockets this process listens
// on: loomd's API, the Coopr provisioner API, the Rancher driver port, the
// embedded NATS server's ports, and any listener added later. Each one
// registers where it is opened (Listen wraps net.Listen; Add records a
// socket a library opened), with its actual address, and leaves the
// registry when it closes.
//
// Plugins must never reach the daemon that runs them: loom.http asks
// Match at dial time, with the peer address actually dialled (after DNS
// and after every redirect), and refuses a connection to any registered
// port on any address of this machine: loopback, unspecified (0.0.0.0 and
// :: reach the local host on Linux), IPv4-mapped and IPv4-compatible IPv6
// forms, and the host's own interface addresses. Worker processes get the
// daemon's list over the worker protocol (Replace), so the registry there
// follows the daemon's.
package listeners

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Listener is one registered socket.
type Listener struct {
	// Name says what it is, for error messages: "API (--listen)".
	Name string `json:"name"`
	// Network is "tcp" or "unix".
	Network string `json:"network"`
	// Addr is the address it listens on: host:port as the socket reports
	// it (the port a :0 listener was given), or a unix socket's path.
	Addr string `json:"addr"`
}

// Registry holds the listeners of one process. The zero value is not
// usable; a nil *Registry holds nothing and matches nothing. It is safe for
// concurrent use.
type Registry struct {
	mu      sync.Mutex
	seq     uint64
	version uint64
	entries map[uint64]Listener

	// notify serialises the watchers' calls, so they see the versions in
	// order.
	notify   sync.Mutex
	watchSeq uint64
	watchers map[uint64]func([]Listener, uint64)

	// interfaceAddrs lists the host's addresses; tests replace it.
	interfaceAddrs func() ([]net.Addr, error)
}

// New returns an empty registry.
func New() *Registry {
	return &Registry{entries: map[uint64]Listener{}, watchers: map[uint64]func([]Listener, uint64){},
		interfaceAddrs: net.InterfaceAddrs}
}

// Listen opens a listener with net.Listen and registers it under name
// until it is closed. A listener on a fixed port is registered before the
// socket is bound, so no connection can reach it before the deny is in
// place; one on port 0 is registered with the port it was given, just
// after binding.
func (r *Registry) Listen(name, network, address string) (net.Listener, error) {
	var pre func()
	if r != nil {
		if _, port, err := net.SplitHostPort(address); err == nil && port != "0" && port != "" && isTCP(network) {
			pre = r.AddAddr(name, network, address)
		} else if network == "unix" {
			pre = r.AddAddr(name, network, address)
		}
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		if pre != nil {
			pre()
		}
		return nil, err
	}
	if r == nil {
		return ln, nil
	}
	remove := r.Add(name, ln.Addr())
	if pre != nil {
		pre()
	}
	return &listener{Listener: ln, remove: remove}, nil
}

// listener removes its registration when closed.
type listener struct {
	net.Listener
	once   sync.Once
	remove func()
}

func (l *listener) Close() error {
	err := l.Listener.Close()
	l.once.Do(l.remove)
	return err
}

// Add registers a socket something else opened (the embedded NATS server
// opens its own) under name, with its actual address. The returned func
// removes it; calling it again does nothing.
func (r *Registry) Add(name string, addr net.Addr) (remove func()) {
	if r == nil || addr == nil {
		return func() {}
	}
	network := addr.Network()
	if isTCP(network) {
		network = "tcp"
	}
	return r.AddAddr(name, network, addr.String())
}

// AddAddr registers a listener by its network and address (host:port, or
// a unix socket's path).
func (r *Registry) AddAddr(name, network, address string) (remove func()) {
	if r == nil {
		return func() {}
	}
	if isTCP(network) {
		network = "tcp"
	}
	r.mu.Lock()
	r.seq++
	id := r.seq
	r.entries[id] = Listener{Name: name, Network: network, Addr: address}
	r.version++
	r.mu.Unlock()
	r.changed()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.entries, id)
			r.version++
			r.mu.Unlock()
			r.changed()
		})
	}
}

// Replace sets the whole list, as the daemon sent it (a worker process's
// registry follows the daemon's) with the daemon registry's version. An
// older list than the registry holds is ignored, so lists delivered out of
// order never undo a newer one.
func (r *Registry) Replace(ls []Listener, version uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if version < r.version {
		r.mu.Unlock()
		return
	}
	r.entries = make(map[uint64]Listener, len(ls))
	for _, l := range ls {
		r.seq++
		r.entries[r.seq] = l
	}
	r.version = version
	r.mu.Unlock()
	r.changed()
}

// List returns the registered listeners, in the order they were added,
// and the registry's version (it grows with every change).
func (r *Registry) List() ([]Listener, uint64) {
	if r == nil {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]uint64, 0, len(r.entries))
	for id := range r.entries {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]Listener, 0, len(ids))
	for _, id := range ids {
		out = append(out, r.entries[id])
	}
	return out, r.version
}

// Watch calls fn with the current list at once, then after every change,
// one call at a time and in order, until stop is called. fn runs on the
// goroutine that made the change, before Listen or Add returns: a watcher
// that forwards the list (to worker processes) has done so by then.
func (r *Registry) Watch(fn func(ls []Listener, version uint64)) (stop func()) {
	if r == nil {
		return func() {}
	}
	r.notify.Lock()
	r.watchSeq++
	id := r.watchSeq
	r.watchers[id] = fn
	ls, v := r.List()
	fn(ls, v)
	r.notify.Unlock()
	return func() {
		r.notify.Lock()
		delete(r.watchers, id)
		r.notify.Unlock()
	}
}

func (r *Registry) changed() {
	r.notify.Lock()
	defer r.notify.Unlock()
	if len(r.watchers) == 0 {
		return
	}
	ls, v := r.List()
	ids := make([]uint64, 0, len(r.watchers))
	for id := range r.watchers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r.watchers[id](ls, v)
	}
}

// Match reports the registered listener a dial to address (network
// "tcp", "tcp4", "tcp6" or "unix") would reach, if any. A TCP address
// matches a listener on the same port when its IP is the listener's own,
// or any address of this machine: loopback, unspecified (0.0.0.0/8, ::),
// the host's interface addresses, in any IPv4-mapped or IPv4-compatible
// IPv6 form, with or without a zone. A unix path matches a listener's path
// after cleaning and resolving symlinks.
func (r *Registry) Match(network, address string) (Listener, bool) {
	if r == nil {
		return Listener{}, false
	}
	ls, _ := r.List()
	if len(ls) == 0 {
		return Listener{}, false
	}
	if network == "unix" || network == "unixgram" || network == "unixpacket" {
		return matchUnix(ls, address)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return Listener{}, false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return Listener{}, false
	}
	ip := parseIP(host)
	var local *bool // computed once, only when a port matches
	for _, l := range ls {
		if l.Network != "tcp" {
			continue
		}
		lh, lp, err := net.SplitHostPort(l.Addr)
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(lp); err != nil || n != port {
			continue
		}
		if ip == nil {
			// A name, not an IP: dialers resolve before they connect,
			// so only a caller checking a URL's host gets here.
			if isLocalName(host) {
				return l, true
			}
			continue
		}
		if lip := parseIP(lh); lip != nil && lip.Equal(ip) {
			return l, true
		}
		if local == nil {
			v := r.isLocal(ip)
			local = &v
		}
		if *local {
			return l, true
		}
	}
	return Listener{}, false
}

// parseIP parses an IP literal, dropping an IPv6 zone, and returns the
// IPv4 form of an IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible
// (::a.b.c.d) address.
func parseIP(host string) net.IP {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return nil
	}
	if v4 := ip.To4(); v4 != nil {
		return v4
	}
	// ::a.b.c.d (deprecated IPv4-compatible form), but not :: or ::1.
	if ip16 := ip.To16(); ip16 != nil && isZero(ip16[:12]) && !isZero(ip16[12:14]) {
		return net.IPv4(ip16[12], ip16[13], ip16[14], ip16[15]).To4()
	}
	return ip
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// isLocal reports whether a connection to ip reaches this machine.
func (r *Registry) isLocal(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	if v4 := ip.To4(); v4 != nil && v4[0] == 0 {
		return true // 0.0.0.0/8: "this network", routed to the host itself
	}
	addrs, err := r.interfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		var aip net.IP
		switch v := a.(type) {
		case *net.IPNet:
			aip = v.IP
		case *net.IPAddr:
			aip = v.IP
		}
		if aip != nil && aip.Equal(ip) {
			return true
		}
	}
	return false
}

// isLocalName reports names that always mean this machine.
func isLocalName(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	return h == "localhost" || strings.HasSuffix(h, ".localhost") || h == "ip6-localhost" || h == "ip6-loopback"
}

func matchUnix(ls []Listener, path string) (Listener, bool) {
	want := canonicalPath(path)
	for _, l := range ls {
		if l.Network == "unix" && canonicalPath(l.Addr) == want {
			return l, true
		}
	}
	return Listener{}, false
}

func canonicalPath(p string) string {
	if strings.HasPrefix(p, "@") {
		return p // an abstract socket: no file
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return filepath.Clean(p)
}

func isTCP(network string) bool {
	return network == "tcp" || network == "tcp4" || network == "tcp6"
}

// String describes a listener for messages: "loomd's own API (--listen),
// listening on 127.0.0.1:7070".
func (l Listener) String() string {
	return fmt.Sprintf("loomd's own %s, listening on %s", l.Name, l.Addr)
}
