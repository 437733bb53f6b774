package runtime

import (
	"sync"
	"sync/atomic"
)

// maxUses retires a VM after this many tasks: gopher-lua never shrinks a
// table's key index, so long-lived module caches would only grow.
const maxUses = 10000

// tenantsIdle bounds the idle VMs of one type across tenants, in units of
// the per-tenant bound: a daemon serving many tenants keeps the busiest
// warm without holding a full pool for each.
const tenantsIdle = 4

// pool is a bounded set of warm VMs for one plugin type version, kept per
// tenant: a VM keeps module-level state between tasks, so it only ever
// serves the tenant it was built for (a global one tenant's task leaves
// behind must never reach another's). It is a mutex-guarded map of
// slices, not a sync.Pool: the GC empties a sync.Pool without closing the
// states.
type pool struct {
	mu     sync.Mutex
	idle   map[string][]*vm // by tenant
	nIdle  int
	max    int // idle VMs per tenant
	closed bool
	newVM  func(tenant string) (*vm, error)

	inUse   atomic.Int64
	created atomic.Int64
	retired atomic.Int64
	puts    atomic.Int64 // a counter of returns, so TrimIdleVMs knows the pool used last
}

func newPool(max int, newVM func(tenant string) (*vm, error)) *pool {
	return &pool{max: max, newVM: newVM, idle: make(map[string][]*vm)}
}

// get checks out a warm VM of the tenant, or provisions a new one.
func (p *pool) get(tenant string) (*vm, error) {
	p.mu.Lock()
	if list := p.idle[tenant]; len(list) > 0 {
		v := list[len(list)-1]
		if len(list) == 1 {
			delete(p.idle, tenant)
		} else {
			p.idle[tenant] = list[:len(list)-1]
		}
		p.nIdle--
		p.mu.Unlock()
		p.inUse.Add(1)
		return v, nil
	}
	p.mu.Unlock()
	v, err := p.newVM(tenant)
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
	if v.broken || v.uses >= maxUses || p.closed || len(p.idle[v.tenant]) >= p.max || p.nIdle >= p.max*tenantsIdle {
		p.mu.Unlock()
		p.retired.Add(1)
		v.close()
		return
	}
	p.idle[v.tenant] = append(p.idle[v.tenant], v)
	p.nIdle++
	p.mu.Unlock()
	p.puts.Store(lastPut.Add(1))
}

// lastPut orders the pools' most recent returns.
var lastPut atomic.Int64

// closeIdle closes the idle VMs and returns how many; the pool stays
// open.
func (p *pool) closeIdle() int {
	p.mu.Lock()
	idle := p.idle
	p.idle = make(map[string][]*vm)
	p.nIdle = 0
	p.mu.Unlock()
	n := 0
	for _, list := range idle {
		for _, v := range list {
			p.retired.Add(1)
			v.close()
			n++
		}
	}
	return n
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
	p.idle = make(map[string][]*vm)
	p.nIdle = 0
	p.closed = true
	p.mu.Unlock()
	for _, list := range idle {
		for _, v := range list {
			p.retired.Add(1)
			v.close()
		}
	}
}

func (p *pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nIdle
}
