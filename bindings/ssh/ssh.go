// Package ssh is the loom.ssh binding: pooled SSH connections for
// provisioning plugins, with strict host-key checking, bounded command
// execution and file transfer (SFTP, tar streams).
//
// One Binding value serves a whole runtime. It owns a connection pool
// keyed by (host, port, user, auth identity, host-key policy, jump chain),
// so hooks and tasks that talk to the same host share one SSH connection
// (about four sessions on it at a time; a second connection past that).
// Every blocking call honours the hook's context. See docs/bindings/ssh.md
// for the Lua API.
package ssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// Options configure a Binding. The zero value is strict host-key checking
// against no known_hosts files (so only task-pinned keys are trusted), with
// the pool defaults documented on each field.
type Options struct {
	// KnownHosts are OpenSSH known_hosts files trusted for every
	// connection (plain, hashed and @cert-authority lines; @revoked
	// entries are honoured). Missing files are ignored.
	KnownHosts []string
	// AllowTOFU lets plugins ask for host_key={policy="tofu"}: an unknown
	// host's key is accepted once and appended to TOFUFile. A changed key
	// still fails.
	AllowTOFU bool
	// AllowInsecure lets plugins ask for host_key={policy="insecure"},
	// which accepts any host key. It logs a warning every time. For tests.
	AllowInsecure bool
	// TOFUFile is where TOFU appends keys; it defaults to the first
	// KnownHosts file. It is also trusted under the strict policy.
	TOFUFile string

	// SessionsPerConn is how many sessions (commands, transfers) run at
	// once on one connection before another connection opens. Default 4;
	// keep it below sshd's MaxSessions (10) minus 2.
	SessionsPerConn int
	// ConnsPerKey caps the connections per pool key. Default 2. Callers
	// past SessionsPerConn*ConnsPerKey wait for a free session.
	ConnsPerKey int
	// MaxConns caps the connections of the whole pool, private ones
	// included. Default 256. A new connection past it first closes the
	// least recently used idle shared connection; when none is idle it
	// fails with kind "limit". (A task's own cap on private connections
	// is the runtime's: bindings.TaskLimits.)
	MaxConns int
	// HandshakesPerHost bounds concurrent handshakes to one host:port
	// (sshd's MaxStartups starts dropping at 10). Default 4.
	HandshakesPerHost int
	// MaxHandshakes bounds concurrent handshakes overall. Default 32.
	MaxHandshakes int
	// DialRetries is how many times a dial that failed with a reset, EOF
	// or refusal is retried, with full-jitter exponential back-off from
	// RetryBase. Default 4; negative means none. Auth and host-key
	// failures are never retried.
	DialRetries int
	// RetryBase is the first back-off step. Default 200ms.
	RetryBase time.Duration
	// IdleTimeout closes connections unused for this long. Default 5m.
	IdleTimeout time.Duration
	// MaxAge closes connections (once idle) older than this. Default 1h.
	MaxAge time.Duration
	// IdleCheck: a connection idle longer than this is probed with a
	// keepalive before it is lent out. Default 30s.
	IdleCheck time.Duration
	// KeepaliveInterval and KeepaliveMax: a keepalive@openssh.com request
	// every interval; after KeepaliveMax unanswered ones in a row the
	// connection is closed and evicted. Defaults 15s and 3. Plugins may
	// override both per connection.
	KeepaliveInterval time.Duration
	KeepaliveMax      int
	// ConnectTimeout (TCP connect) and HandshakeTimeout (banner, key
	// exchange, auth) are the defaults for ssh.connect. Defaults 10s, 15s.
	ConnectTimeout   time.Duration
	HandshakeTimeout time.Duration
	// KillGrace is how long a timed-out command gets between TERM and
	// KILL, unless exec's kill_grace says otherwise. Default 5s.
	KillGrace time.Duration
	// DrainTimeout is how long Close waits for sessions in use to end
	// before it closes their connections. Default 10s.
	DrainTimeout time.Duration
	// Logger receives pool events (evictions, TOFU, drain). Hook-level
	// events go to the hook's logger. Default: discard.
	Logger *slog.Logger
	// Dial, when set, opens connections to hosts (and ssh.keyscan's)
	// instead of a net.Dialer: loomd test routes them to in-process fake
	// hosts. Tunnels through a jump host still go through the bastion.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// EarlyDials, when set (and Dial is not), are TCP connections opened
	// ahead: a connection to an address there takes it instead of
	// dialling (see EarlyDials). The caller closes them.
	EarlyDials *EarlyDials
	// Clock times ssh.wait_host_keys' budget and the pauses between its
	// attempts. Default: the wall clock; loomd test gives its virtual one,
	// so a plugin waiting for sshd runs at once in tests.
	Clock bindings.Clock
}

// dialTCP opens the TCP connection to addr, within timeout when it is
// positive.
func (o Options) dialTCP(ctx context.Context, timeout time.Duration, addr string) (net.Conn, error) {
	if o.Dial != nil {
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return o.Dial(ctx, "tcp", addr)
	}
	if c, err := o.EarlyDials.take(ctx, addr, timeout); c != nil || err != nil {
		if err != nil {
			return nil, err
		}
		return quickAck(c), nil
	}
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return quickAck(c), nil
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(i *int, v int) {
		if *i <= 0 {
			*i = v
		}
	}
	defInt(&o.SessionsPerConn, 4)
	defInt(&o.ConnsPerKey, 2)
	defInt(&o.MaxConns, 256)
	defInt(&o.HandshakesPerHost, 4)
	defInt(&o.MaxHandshakes, 32)
	defInt(&o.KeepaliveMax, 3)
	switch {
	case o.DialRetries == 0:
		o.DialRetries = 4
	case o.DialRetries < 0:
		o.DialRetries = 0
	}
	def(&o.RetryBase, 200*time.Millisecond)
	def(&o.IdleTimeout, 5*time.Minute)
	def(&o.MaxAge, time.Hour)
	def(&o.IdleCheck, 30*time.Second)
	def(&o.KeepaliveInterval, 15*time.Second)
	def(&o.ConnectTimeout, 10*time.Second)
	def(&o.HandshakeTimeout, 15*time.Second)
	def(&o.KillGrace, 5*time.Second)
	def(&o.DrainTimeout, 10*time.Second)
	if o.TOFUFile == "" && len(o.KnownHosts) > 0 {
		o.TOFUFile = o.KnownHosts[0]
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Clock = bindings.ClockOrReal(o.Clock)
	return o
}

// Binding is the loom.ssh module. It is safe for concurrent use by many
// VMs. Build it with New, register it in a bindings.Registry, and Close it
// when the runtime shuts down.
type Binding struct {
	opts  Options
	pool  *pool
	probe ssh.PublicKey // a key no host has: asks known_hosts what it knows
	tofu  tofuWriter
}

// New returns a Binding with its (empty) pool. It starts no goroutines
// until the first connection is made.
func New(opts Options) *Binding {
	opts = opts.withDefaults()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic("ssh: crypto/rand failed: " + err.Error()) // cannot happen on supported platforms
	}
	probe, err := ssh.NewPublicKey(pub)
	if err != nil {
		panic("ssh: " + err.Error())
	}
	return &Binding{opts: opts, pool: newPool(opts), probe: probe}
}

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec { return moduleSpec }

// Open implements bindings.Binding: it returns the module table for one VM.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	registerConnType(L)
	m := &module{b: b, h: h}
	t := L.NewTable()
	L.SetFuncs(t, map[string]lua.LGFunction{
		"connect":        m.connect,
		"from_input":     m.fromInput,
		"keyscan":        m.keyscan,
		"quote":          luaQuote,
		"wait_host_keys": m.waitHostKeys,
	})
	return t
}

// Close implements bindings.Closer: it drains the pool, waiting up to
// Options.DrainTimeout for sessions in use, then closes every connection.
func (b *Binding) Close() error { return b.pool.close() }

// Stats implements bindings.StatsReporter. Keys:
// connections_open, connections_opened, connections_reused,
// connections_evicted (transport died), connections_closed_idle,
// sessions_in_use, sessions_opened, handshakes_in_flight,
// handshake_retries, dial_failures.
func (b *Binding) Stats() map[string]float64 { return b.pool.stats() }

// module is one VM's view of the binding.
type module struct {
	b *Binding
	h bindings.Host
}
