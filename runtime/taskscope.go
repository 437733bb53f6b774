package runtime

import (
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// What a task holds ends with it (issue 20 item 7): the bindings register
// what outlives one call (private connections) with the task's scope, and
// the sandbox remembers the coroutines the task made. endTask releases
// both when the task's hook ends, whatever the plugin did.

// coroutines are the coroutines of the running task.
type coroutines struct {
	n       int // created, against Limits.MaxCoroutines
	threads []*lua.LState
}

// release ends every coroutine the task made (a suspended one kept in a
// global holds no memory and never runs again) and returns how many were
// still alive.
func (c *coroutines) release() int {
	alive := 0
	for _, th := range c.threads {
		if !th.Dead {
			alive++
		}
		th.Release()
	}
	c.threads, c.n = nil, 0
	return alive
}

// newScope gives the VM a fresh scope for task, under its type's caps
// (limits.connections and limits.descriptors, else the runtime's).
func (v *vm) newScope(task string) {
	v.endTask()
	def := bindings.TaskLimits{Conns: v.rt.limits.MaxTaskConns, Descriptors: v.rt.limits.MaxTaskDescriptors}
	if v.pt != nil && v.pt.def != nil {
		def = v.pt.def.taskLimits(v.pt.plugin.def, def)
	}
	v.scope = bindings.NewScope(task, def)
}

// TaskScope implements bindings.Scoped.
func (v *vm) TaskScope() *bindings.Scope { return v.scope }

// endTask releases what the task still holds and the coroutines it made,
// and says so when the plugin left something open.
func (v *vm) endTask() {
	if v.scope != nil {
		released := v.scope.Close()
		v.scope = nil
		if len(released) > 0 {
			shown := released
			if len(shown) > 5 {
				shown = shown[:5]
			}
			v.Logger().Warn("the task ended still holding what it opened; loomd released it (close connections with conn:close() when done)",
				"released", len(released), "what", strings.Join(shown, "; "))
		}
	}
	v.coroutines.release()
}
