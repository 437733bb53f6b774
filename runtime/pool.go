package runtime

import (
	"sync"
	"sync/atomic"
)

// maxUses retires a VM after this many tasks: gopher-lua never shrinks a
// table's key index, so long-lived module caches would only grow.
const maxUses = 10000

// pool is a bounded set of warm VMs for one plugin type version. It is a
// mutex-guarded slice, not a sync.Pool: the GC empties a sync.Pool
// without closing the states.
type pool struct {
	mu     sync.Mutex
	idle   []*vm
	max    int
	closed bool
	newVM  func() (*vm, error)

	inUse   atomic.Int64
	created atomic.Int64
	retired atomic.Int64
}

func newPool(max int, newVM func() (*vm, error)) *pool {
	return &pool{max: max, newVM: newVM}
}

// get checks out a warm VM, or provisions a new one.
func (p *pool) get() (*vm, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		v := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		p.inUse.Add(1)
		return v, nil
	}
	p.mu.Unlock()
	v, err := p.newVM()
	if err != nil {
		return nil, err
	}
	p.created.Add(1)
	p.inUse.Add(1)
	return v, nil
}

// put returns a VM. A broken, worn-out or surplus VM, or any VM once the
// pool is closed (its version was replaced), is closed instead.
func (p *pool) put(v *vm) {
	p.inUse.Add(-1)
	p.mu.Lock()
	if v.broken || v.uses >= maxUses || p.closed || len(p.idle) >= p.max {
		p.mu.Unlock()
		p.retired.Add(1)
		v.close()
		return
	}
	p.idle = append(p.idle, v)
	p.mu.Unlock()
}

// add seeds the pool with an already provisioned VM.
func (p *pool) add(v *vm) {
	p.created.Add(1)
	p.inUse.Add(1)
	p.put(v)
}

// drain closes the idle VMs and makes the pool close VMs as they return,
// so in-flight tasks finish on the old version.
func (p *pool) drain() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.closed = true
	p.mu.Unlock()
	for _, v := range idle {
		p.retired.Add(1)
		v.close()
	}
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}
