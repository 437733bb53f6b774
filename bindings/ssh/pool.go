package ssh

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// pool holds the SSH connections of one Binding.
//
// Connections are grouped by pool key (host, port, user, credential hash,
// host-key policy, jump chain). A caller borrows one session slot on the
// least busy live connection of its group; when every connection has
// SessionsPerConn sessions in use and the group has fewer than
// ConnsPerKey connections, it dials another; otherwise it waits.
type pool struct {
	opts Options
	salt []byte // keys credential hashes; per process, never exported

	mu      sync.Mutex
	groups  map[string]*group
	perHost map[string]chan struct{} // handshake slots per host:port
	global  chan struct{}            // handshake slots overall
	wake    chan struct{}            // closed and replaced on every change
	closed  bool
	nextID  int64
	reaper  chan struct{} // closed to stop the reaper; nil until first dial
	wg      sync.WaitGroup

	opened, reused, evicted, closedIdle   atomic.Int64
	sessionsOpened, retries, dialFailures atomic.Int64
	handshaking, refused                  atomic.Int64
}

type group struct {
	conns   []*pconn
	dialing int
}

// pconn is one pooled SSH connection.
type pconn struct {
	p       *pool
	id      int64
	key     string
	cfg     *connConfig
	client  *ssh.Client
	bastion *pconn // the jump connection this one tunnels through

	// Guarded by pool.mu.
	inUse      int
	dependents int // connections tunnelled through this one
	lastUse    time.Time
	created    time.Time
	closing    bool // closed on purpose (idle, drain), not lost

	dead    chan struct{} // closed when the transport is gone
	deadErr error         // why; set before dead is closed
}

func newPool(opts Options) *pool {
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		panic("ssh: crypto/rand failed: " + err.Error())
	}
	return &pool{
		opts:    opts,
		salt:    salt,
		groups:  map[string]*group{},
		perHost: map[string]chan struct{}{},
		global:  make(chan struct{}, opts.MaxHandshakes),
		wake:    make(chan struct{}),
	}
}

// broadcast wakes every waiter. Callers hold p.mu.
func (p *pool) broadcast() {
	close(p.wake)
	p.wake = make(chan struct{})
}

func (c *pconn) isDead() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}

// errPoolClosed is returned once Close has started.
var errPoolClosed = errors.New("the ssh binding is closed")

// acquire lends a session slot on a connection for cfg. The caller must
// release it. Errors are *bindings.Error.
func (p *pool) acquire(ctx context.Context, cfg *connConfig, key string, b *Binding, logger *slog.Logger) (*pconn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, cfg.connError("connect", "%v", errPoolClosed)
		}
		g := p.groups[key]
		if g == nil {
			g = &group{}
			p.groups[key] = g
		}
		var best *pconn
		live := 0
		for _, c := range g.conns {
			if c.isDead() || c.closing {
				continue
			}
			live++
			if c.inUse < p.opts.SessionsPerConn && (best == nil || c.inUse < best.inUse) {
				best = c
			}
		}
		if best != nil {
			probe := best.inUse == 0 && time.Since(best.lastUse) > p.opts.IdleCheck
			best.inUse++
			best.lastUse = time.Now()
			p.mu.Unlock()
			p.reused.Add(1)
			if probe && !best.ping(5*time.Second) {
				best.kill(errors.New("no answer to a keepalive after being idle"))
				p.release(best)
				continue
			}
			return best, nil
		}
		if live+g.dialing < p.opts.ConnsPerKey {
			victim, err := p.makeRoom(cfg)
			if err != nil {
				p.forget(key, g)
				p.mu.Unlock()
				return nil, err
			}
			g.dialing++
			p.mu.Unlock()
			if victim != nil {
				victim.kill(errors.New("closed to make room in the pool (MaxConns)"))
			}
			if err = p.checkDescriptors(cfg); err == nil {
				var c *pconn
				c, err = p.dial(ctx, cfg, key, b, logger)
				if err == nil {
					return p.added(g, c, cfg)
				}
			}
			p.mu.Lock()
			g.dialing--
			p.forget(key, g)
			p.broadcast()
			p.mu.Unlock()
			return nil, err
		}
		wake := p.wake
		p.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, cfg.connError("timeout", "waiting for a free session: %v", ctx.Err())
		}
	}
}

// forget drops an empty group (a failed private key would stay forever).
// Callers hold p.mu.
func (p *pool) forget(key string, g *group) {
	if len(g.conns) == 0 && g.dialing == 0 && p.groups[key] == g {
		delete(p.groups, key)
	}
}

// added files a freshly dialled connection into its group, lent to the
// caller who dialled it.
func (p *pool) added(g *group, c *pconn, cfg *connConfig) (*pconn, error) {
	p.mu.Lock()
	g.dialing--
	if p.closed {
		p.broadcast()
		p.mu.Unlock()
		c.client.Close()
		return nil, cfg.connError("connect", "%v", errPoolClosed)
	}
	c.inUse = 1
	g.conns = append(g.conns, c)
	p.broadcast()
	p.mu.Unlock()
	p.opened.Add(1)
	p.watch(c)
	return c, nil
}

// release returns a session slot.
func (p *pool) release(c *pconn) {
	p.mu.Lock()
	c.inUse--
	c.lastUse = time.Now()
	p.broadcast()
	p.mu.Unlock()
}

// watch starts the goroutines of a new connection: one waits for the
// transport to end and evicts the entry, one sends keepalives.
func (p *pool) watch(c *pconn) {
	p.mu.Lock()
	if p.reaper == nil && !p.closed {
		p.reaper = make(chan struct{})
		p.wg.Add(1)
		go p.reap(p.reaper)
	}
	p.mu.Unlock()
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		err := c.client.Wait()
		c.kill(err)
		p.evict(c)
	}()
	go func() {
		defer p.wg.Done()
		c.keepalive()
	}()
}

// kill marks the connection dead and closes it. Safe to call many times.
func (c *pconn) kill(err error) {
	c.p.mu.Lock()
	select {
	case <-c.dead:
		c.p.mu.Unlock()
		return
	default:
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	c.deadErr = err
	close(c.dead)
	c.p.mu.Unlock()
	c.client.Close()
}

// evict removes a dead connection from its group.
func (p *pool) evict(c *pconn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.groups[c.key]
	if g == nil {
		return
	}
	for i, x := range g.conns {
		if x == c {
			g.conns = append(g.conns[:i], g.conns[i+1:]...)
			if c.closing {
				p.closedIdle.Add(1)
			} else {
				p.evicted.Add(1)
				p.opts.Logger.Info("ssh connection lost; evicted from the pool", "conn", c.cfg.String(), "err", c.deadErr)
			}
			if c.bastion != nil {
				c.bastion.dependents--
			}
			break
		}
	}
	if len(g.conns) == 0 && g.dialing == 0 {
		delete(p.groups, c.key)
	}
	p.broadcast()
}

// keepalive sends keepalive@openssh.com every interval and closes the
// connection after keepaliveMax unanswered requests in a row. OpenSSH
// answers with a failure, which still proves the peer is alive.
func (c *pconn) keepalive() {
	t := time.NewTicker(c.cfg.keepalive)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-c.dead:
			return
		case <-t.C:
		}
		if c.ping(c.cfg.keepalive) {
			misses = 0
			continue
		}
		misses++
		if misses >= c.cfg.keepaliveMax {
			c.kill(errors.New("keepalive: no answer from the server"))
			return
		}
	}
}

// ping sends one keepalive and reports whether an answer came in time.
// SendRequest blocks on its own, so it runs in a goroutine under a timer.
func (c *pconn) ping(timeout time.Duration) bool {
	done := make(chan error, 1)
	go func() {
		_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
		done <- err
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err == nil
	case <-t.C:
		return false
	case <-c.dead:
		return false
	}
}

// reap closes connections idle longer than IdleTimeout, or older than
// MaxAge once idle.
func (p *pool) reap(stop chan struct{}) {
	defer p.wg.Done()
	every := p.opts.IdleTimeout / 4
	if every > 30*time.Second {
		every = 30 * time.Second
	}
	if every < 50*time.Millisecond {
		every = 50 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var victims []*pconn
		now := time.Now()
		p.mu.Lock()
		for _, g := range p.groups {
			for _, c := range g.conns {
				if c.inUse > 0 || c.dependents > 0 || c.closing {
					continue
				}
				if now.Sub(c.lastUse) > p.opts.IdleTimeout || now.Sub(c.created) > p.opts.MaxAge {
					c.closing = true
					victims = append(victims, c)
				}
			}
		}
		p.mu.Unlock()
		for _, c := range victims {
			c.kill(errors.New("closed after idle timeout"))
		}
	}
}

// closeKey closes the idle connections of one pool key (a private
// connection's conn:close()). Busy ones close when released and idle.
func (p *pool) closeKey(key string) {
	var victims []*pconn
	p.mu.Lock()
	if g := p.groups[key]; g != nil {
		for _, c := range g.conns {
			if c.inUse == 0 && c.dependents == 0 && !c.closing {
				c.closing = true
				victims = append(victims, c)
			}
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		c.kill(errors.New("closed by conn:close()"))
		p.evict(c) // now, not when the transport notices: it is gone for the caller
	}
}

// close drains the pool: no new borrowers, wait up to DrainTimeout for
// sessions in use, then close everything and wait for the goroutines.
func (p *pool) close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.broadcast()
	p.mu.Unlock()

	deadline := time.Now().Add(p.opts.DrainTimeout)
	var busy int
	for {
		p.mu.Lock()
		busy = 0
		for _, g := range p.groups {
			for _, c := range g.conns {
				busy += c.inUse
			}
		}
		wake := p.wake
		p.mu.Unlock()
		if busy == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-wake:
		case <-time.After(time.Until(deadline)):
		}
	}
	var all []*pconn
	p.mu.Lock()
	for _, g := range p.groups {
		for _, c := range g.conns {
			c.closing = true
			all = append(all, c)
		}
	}
	if p.reaper != nil {
		close(p.reaper)
	}
	p.mu.Unlock()
	// Close tunnelled connections before their bastions.
	for _, c := range all {
		if c.bastion != nil {
			c.kill(errors.New("pool closed"))
		}
	}
	for _, c := range all {
		c.kill(errors.New("pool closed"))
	}
	p.wg.Wait()
	if busy > 0 {
		return bindings.Errorf("io", "ssh pool closed with %d session(s) still in use after %v", busy, p.opts.DrainTimeout)
	}
	return nil
}

func (p *pool) stats() map[string]float64 {
	p.mu.Lock()
	var open, inUse int
	for _, g := range p.groups {
		for _, c := range g.conns {
			open++
			inUse += c.inUse
		}
	}
	p.mu.Unlock()
	return map[string]float64{
		"connections_open":        float64(open),
		"connections_opened":      float64(p.opened.Load()),
		"connections_reused":      float64(p.reused.Load()),
		"connections_evicted":     float64(p.evicted.Load()),
		"connections_closed_idle": float64(p.closedIdle.Load()),
		"sessions_in_use":         float64(inUse),
		"sessions_opened":         float64(p.sessionsOpened.Load()),
		"handshakes_in_flight":    float64(p.handshaking.Load()),
		"handshake_retries":       float64(p.retries.Load()),
		"dial_failures":           float64(p.dialFailures.Load()),
		"connections_refused":     float64(p.refused.Load()),
	}
}
