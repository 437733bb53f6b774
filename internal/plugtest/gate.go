package plugtest

import (
	"sync"
	"sync/atomic"

	lua "github.com/yuin/gopher-lua"
)

// A test file's code, the plugin's hooks it runs and the fakes' Lua
// handlers share one VM: that is how a test's spies and stubs on the
// plugin's tables reach the hooks. A hook runs on its own goroutine, on a
// thread of the VM (Session.HookThread), while the test waits in
// loom.test.run and its goroutine serves the fakes' handlers on another
// thread; each thread has its own stack, and they share the heap
// (globals, the plugin's tables, the test's state and its locals that
// handlers reach through upvalues). The gate keeps them apart: the hook's side holds it while it
// runs Lua and lets go of it at each call (the instruction hook sees
// CALL, TAILCALL and TFORLOOP: a binding that waits for a handler is
// only reached through one of them); a handler runs only while holding
// it. So Lua code of the two sides never runs at once, and a handler
// runs exactly where a real server's answer would arrive: while the hook
// waits in a binding.
type gate struct {
	mu sync.Mutex
	// active is set while a hook runs nested (loom.test.run waits).
	active atomic.Bool
	// mainHolds says the hook's side holds mu. Only the goroutine that
	// runs the main state's Lua at the time (the hook's, then the test's
	// again) reads or writes it, one after the other.
	mainHolds bool
	root      *lua.LState // the VM's main state: the test's
	hooks     *lua.LState // the thread the hooks run on (Session.HookThread)
	handlers  *lua.LState // the thread the fakes' handlers run on
}

// isMain says whether L runs on the hook's side: the main state, or a
// coroutine resumed from it (not from the handlers' thread).
func (g *gate) isMain(L *lua.LState) bool {
	for s, n := L, 0; s != nil && n < 256; s, n = s.Parent, n+1 {
		switch s {
		case g.handlers:
			return false
		case g.root, g.hooks:
			return true
		}
	}
	return false
}

// instruction is the gate's part of the instruction hook.
func (g *gate) instruction(L *lua.LState, proto *lua.FunctionProto, pc int) {
	if !g.active.Load() || !g.isMain(L) {
		return
	}
	if !g.mainHolds {
		g.mu.Lock()
		g.mainHolds = true
	}
	switch int(proto.Code[pc] >> 26) {
	case lua.OP_CALL, lua.OP_TAILCALL, lua.OP_TFORLOOP:
		g.mainHolds = false
		g.mu.Unlock()
	}
}

// release lets go of the gate when the hook's side ends (on its
// goroutine, before it signals that it is done).
func (g *gate) release() {
	if g.mainHolds {
		g.mainHolds = false
		g.mu.Unlock()
	}
}

// handler runs fn (a fake's Lua handler) while the hook's side is not
// running Lua.
func (g *gate) handler(fn func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	fn()
}

// enter takes the gate for Go code of the hook's side that touches the
// shared heap outside an instruction (a spy recording a call): the gate
// was let go at the CALL that reached it.
func (g *gate) enter(L *lua.LState) {
	if g.active.Load() && g.isMain(L) && !g.mainHolds {
		g.mu.Lock()
		g.mainHolds = true
	}
}
