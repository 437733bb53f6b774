package ssh

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// dialErr is a classified dial failure.
type dialErr struct {
	err       *bindings.Error
	retryable bool // reset, EOF, refusal: worth another try
}

// dial opens a new pooled connection, retrying resets with jitter.
func (p *pool) dial(ctx context.Context, cfg *connConfig, key string, b *Binding, logger *slog.Logger) (*pconn, error) {
	var last *dialErr
	for attempt := 0; attempt <= p.opts.DialRetries; attempt++ {
		if attempt > 0 {
			p.retries.Add(1)
			backoff := p.opts.RetryBase << (attempt - 1)
			sleep := time.Duration(rand.Int64N(int64(backoff) + 1))
			select {
			case <-time.After(sleep):
			case <-ctx.Done():
				p.dialFailures.Add(1)
				return nil, cfg.connError("timeout", "hook deadline reached while retrying the connection (last error: %s)", last.err.Message)
			}
		}
		c, de := p.dialOnce(ctx, cfg, key, b, logger)
		if de == nil {
			return c, nil
		}
		last = de
		if !de.retryable {
			break
		}
	}
	p.dialFailures.Add(1)
	return nil, last.err
}

// handshakeSlot takes a handshake slot for addr (per host and global).
func (p *pool) handshakeSlot(ctx context.Context, addr string) (func(), error) {
	p.mu.Lock()
	sem := p.perHost[addr]
	if sem == nil {
		sem = make(chan struct{}, p.opts.HandshakesPerHost)
		p.perHost[addr] = sem
	}
	p.mu.Unlock()
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case p.global <- struct{}{}:
	case <-ctx.Done():
		<-sem
		return nil, ctx.Err()
	}
	p.handshaking.Add(1)
	return func() {
		p.handshaking.Add(-1)
		<-p.global
		<-sem
	}, nil
}

// dialOnce makes one attempt: TCP (or a tunnel through the bastion), then
// the SSH handshake under a deadline that covers banner, kex and auth.
func (p *pool) dialOnce(ctx context.Context, cfg *connConfig, key string, b *Binding, logger *slog.Logger) (*pconn, *dialErr) {
	v, err := b.newVerifier(cfg, logger)
	if err != nil {
		return nil, &dialErr{err: cfg.connError("config", "%v", err)}
	}
	var (
		conn    net.Conn
		bastion *pconn
	)
	// The bastion first: taking its own handshake slot while holding the
	// target's could deadlock when both are the same host.
	if cfg.jump != nil {
		bastion, err = p.acquire(ctx, cfg.jump, cfg.jump.poolKey(p.salt), b, logger)
		if err != nil {
			var be *bindings.Error
			errors.As(err, &be)
			e := cfg.connError(be.Kind, "through jump host: %s", be.Message)
			return nil, &dialErr{err: e}
		}
		defer p.release(bastion)
	}
	release, err := p.handshakeSlot(ctx, cfg.addr())
	if err != nil {
		return nil, &dialErr{err: cfg.connError("timeout", "hook deadline reached while waiting for a handshake slot: %v", err)}
	}
	defer release()

	if cfg.jump != nil {
		dctx, cancel := context.WithTimeout(ctx, cfg.connectTimeout)
		conn, err = bastion.client.DialContext(dctx, "tcp", cfg.addr())
		cancel()
		if err != nil {
			kind := "connect"
			if bastion.isDead() {
				kind = "transport_lost"
			}
			return nil, &dialErr{err: cfg.connError(kind, "opening a tunnel through %s: %v", cfg.jump, err)}
		}
	} else {
		conn, err = p.opts.dialTCP(ctx, cfg.connectTimeout, cfg.addr())
		if err != nil {
			return nil, classifyTCP(ctx, cfg, err)
		}
	}

	// x/crypto has no handshake timeout (golang/go#51926): a server that
	// accepts and stays silent blocks NewClientConn forever. Close the
	// conn when the deadline or the hook's context ends.
	var timedOut atomic.Bool
	timer := time.AfterFunc(cfg.handshakeTimeout, func() { timedOut.Store(true); conn.Close() })
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	config := &ssh.ClientConfig{
		User:              cfg.user,
		Auth:              cfg.authMethods(),
		HostKeyCallback:   v.callback,
		HostKeyAlgorithms: v.algorithms(),
	}
	sc, chans, reqs, err := ssh.NewClientConn(conn, cfg.addr(), config)
	timer.Stop()
	stop()
	if err != nil {
		conn.Close()
		return nil, classifyHandshake(ctx, cfg, v, err, timedOut.Load())
	}
	c := &pconn{
		p: p, key: key, cfg: cfg, client: ssh.NewClient(sc, chans, reqs),
		created: time.Now(), lastUse: time.Now(), dead: make(chan struct{}),
	}
	p.mu.Lock()
	p.nextID++
	c.id = p.nextID
	if bastion != nil {
		c.bastion = bastion
		bastion.dependents++
	}
	p.mu.Unlock()
	logger.Debug("ssh connection opened", "conn", cfg.String(), "id", c.id)
	return c, nil
}

func classifyTCP(ctx context.Context, cfg *connConfig, err error) *dialErr {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return &dialErr{err: cfg.connError("timeout", "hook deadline reached during TCP connect")}
	case errors.As(err, &ne) && ne.Timeout():
		return &dialErr{err: cfg.connError("timeout", "TCP connect timed out after %v", cfg.connectTimeout)}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &dialErr{err: cfg.connError("connect", "connection refused"), retryable: true}
	default:
		return &dialErr{err: cfg.connError("connect", "TCP connect failed: %v", stripAddr(err))}
	}
}

var attemptedMethods = regexp.MustCompile(`attempted methods \[[^\]]*\]`)

func classifyHandshake(ctx context.Context, cfg *connConfig, v *verifier, err error, timedOut bool) *dialErr {
	if he := v.rejected(); he != nil {
		return &dialErr{err: he}
	}
	msg := err.Error()
	switch {
	case timedOut:
		return &dialErr{err: cfg.connError("timeout", "SSH handshake (banner, key exchange, auth) timed out after %v", cfg.handshakeTimeout)}
	case ctx.Err() != nil:
		return &dialErr{err: cfg.connError("timeout", "hook deadline reached during the SSH handshake")}
	case strings.Contains(msg, "unable to authenticate") || errors.Is(err, errPasswordRejected):
		methods := attemptedMethods.FindString(msg)
		if methods == "" {
			methods = "password rejected"
		}
		return &dialErr{err: cfg.connError("auth", "authentication failed (%s)", methods)}
	case strings.Contains(msg, "no common algorithm for host key"):
		return &dialErr{err: cfg.connError("host_key", "the server offers none of the host key types trusted for it (%s)", strings.Join(v.algorithms(), ", "))}
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		strings.Contains(msg, "connection reset"), strings.Contains(msg, "EOF"):
		// sshd drops connections past MaxStartups with a reset or EOF.
		return &dialErr{err: cfg.connError("connect", "the server closed the connection during the handshake (%v)", stripAddr(err)), retryable: true}
	default:
		return &dialErr{err: cfg.connError("connect", "SSH handshake failed: %v", stripAddr(err))}
	}
}

// stripAddr drops the "dial tcp 1.2.3.4:22:" prefixes Go adds, since the
// error already names the connection.
func stripAddr(err error) string {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}
