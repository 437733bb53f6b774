package ssh

import (
	"errors"

	"github.com/loomrt/loom/bindings"
)

// Nothing a task opens outlives it (issue 20 item 7). A private connection
// (reuse=false) is held in the task's scope: the task's end closes it, and
// a task may hold at most its cap of them at once. Every handle ends with
// its task. The pool as a whole is capped too (Options.MaxConns), and a
// new connection is refused with kind "limit" when the process is short
// of descriptors.

// hold registers a private connection with the running task's scope; the
// release it returns closes the connection. Shared connections are not
// held: they return to the pool after each call.
func (m *module) hold(cfg *connConfig, key string) (*bindings.Scope, func(), error) {
	sc, ok := m.h.(bindings.Scoped)
	if !ok {
		return nil, nil, nil
	}
	scope := sc.TaskScope()
	if scope == nil || !cfg.private {
		return scope, nil, nil
	}
	release, err := scope.Hold(bindings.Conn, "ssh.connect "+cfg.String()+" (reuse=false)", func() { m.b.pool.closeKey(key) })
	return scope, release, err
}

// makeRoom is called before a new connection is dialled, with p.mu held.
// At MaxConns it picks the least recently used idle shared connection to
// close (the caller kills it once the lock is released); with none idle
// it refuses.
func (p *pool) makeRoom(cfg *connConfig) (*pconn, error) {
	total := 0
	var lru *pconn
	for _, g := range p.groups {
		total += g.dialing
		for _, c := range g.conns {
			if c.isDead() || c.closing {
				continue
			}
			total++
			if c.inUse == 0 && c.dependents == 0 && !c.cfg.private && (lru == nil || c.lastUse.Before(lru.lastUse)) {
				lru = c
			}
		}
	}
	if total < p.opts.MaxConns {
		return nil, nil
	}
	if lru == nil {
		p.refused.Add(1)
		return nil, cfg.connError("limit", "the SSH pool holds its maximum of %d connections, none of them idle (Options.MaxConns); retry when tasks end", p.opts.MaxConns)
	}
	lru.closing = true
	return lru, nil
}

// checkDescriptors refuses a new connection when the process is short of
// descriptors, after closing one idle shared connection to make room.
func (p *pool) checkDescriptors(cfg *connConfig) error {
	err := bindings.CheckDescriptors("")
	if err == nil {
		return nil
	}
	p.mu.Lock()
	var lru *pconn
	for _, g := range p.groups {
		for _, c := range g.conns {
			if !c.isDead() && !c.closing && c.inUse == 0 && c.dependents == 0 && !c.cfg.private && (lru == nil || c.lastUse.Before(lru.lastUse)) {
				lru = c
			}
		}
	}
	if lru != nil {
		lru.closing = true
	}
	p.mu.Unlock()
	if lru != nil {
		lru.kill(errors.New("closed to free a file descriptor"))
		<-lru.dead
		if bindings.CheckDescriptors("") == nil {
			return nil
		}
	}
	p.refused.Add(1)
	var be *bindings.Error
	errors.As(err, &be)
	return cfg.connError("limit", "%s", be.Message)
}
