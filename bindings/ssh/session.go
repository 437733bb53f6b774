package ssh

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// errTransport marks a session-open failure on a dead connection: the
// command never started, so a fresh connection may be tried.
type errTransport struct{ err error }

func (e errTransport) Error() string { return "transport lost: " + e.err.Error() }

// session borrows a connection for cfg and opens a session on it. On
// success the caller must Close the session and release the connection.
//
// If the borrowed connection turns out to be dead when the session is
// opened (nothing has run on it yet), it is evicted and one more
// connection is tried. Commands themselves are never retried.
func (b *Binding) session(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger) (*pconn, *ssh.Session, error) {
	for attempt := 0; ; attempt++ {
		c, err := b.pool.acquire(ctx, cfg, key, b, logger)
		if err != nil {
			return nil, nil, err
		}
		s, err := c.newSession(ctx)
		if err == nil {
			return c, s, nil
		}
		b.pool.release(c)
		var te errTransport
		if errors.As(err, &te) && attempt == 0 {
			logger.Debug("ssh connection found dead when opening a session; reconnecting", "conn", cfg.String())
			continue
		}
		if errors.As(err, &te) {
			return nil, nil, cfg.connError("transport_lost", "the connection dropped while opening a session: %v", te.err)
		}
		return nil, nil, err
	}
}

// newSession opens a session, retrying sshd's "open failed" refusals
// (MaxSessions frees slots asynchronously) without giving up on the
// connection, which stays healthy (yorc#291).
func (c *pconn) newSession(ctx context.Context) (*ssh.Session, error) {
	for attempt := 0; ; attempt++ {
		if c.isDead() {
			return nil, errTransport{c.deadErr}
		}
		s, err := c.openChannel(ctx)
		if err == nil {
			c.p.sessionsOpened.Add(1)
			return s, nil
		}
		if ctx.Err() != nil {
			return nil, c.cfg.connError("timeout", "hook deadline reached while opening a session")
		}
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			c.kill(err)
			return nil, errTransport{err}
		}
		if oce.Reason != ssh.ConnectionFailed || attempt >= 4 {
			return nil, c.cfg.connError("connect", "the server refused a session: %s (%d sessions in use on this connection; check sshd's MaxSessions)",
				oce.Message, c.sessionsInUse())
		}
		backoff := time.Duration(rand.Int64N(int64(50*time.Millisecond<<attempt))) + 10*time.Millisecond
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, c.cfg.connError("timeout", "hook deadline reached while opening a session")
		}
	}
}

// openChannel is NewSession under the context: a channel open can hang
// on a half-dead connection (golang/go#26643). The keepalive evicts such
// a connection; the context bounds the caller's wait meanwhile.
func (c *pconn) openChannel(ctx context.Context) (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := c.client.NewSession()
		ch <- opened{s, err}
	}()
	select {
	case o := <-ch:
		return o.s, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.s != nil {
				o.s.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func (c *pconn) sessionsInUse() int {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	return c.inUse
}

// lostError reports a transport that died under a running operation. The
// operation may or may not have completed on the host; it is not retried.
func lostError(cfg *connConfig, what string, c *pconn) *bindings.Error {
	why := "connection closed"
	if c != nil && c.isDead() && c.deadErr != nil { // deadErr is written before dead closes
		why = c.deadErr.Error()
	}
	return cfg.connError("transport_lost", "the connection was lost during %s (%s); it may or may not have completed and was not retried", what, why)
}
