package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/redact"
)

// Hooks nested in a session's running code: loomd test runs a test file
// in a session (Session.Do), and the hooks a test runs (loom.test.run)
// on the same VM, from inside the test's call, so that a test's spies and
// stubs on the plugin's tables are the ones the hooks call. The per-call
// state of the VM (context, task id, logger, secrets, scope) is the
// test's before and after each hook.

// vmState is what begin and newScope replace and a nested hook restores.
type vmState struct {
	ctx        context.Context
	logger     *slog.Logger
	baseLogger *slog.Logger
	logAttrs   [3]string
	grants     []bindings.Grant
	taskID     string
	secrets    *redact.Set
	coroutines coroutines
	scope      *bindings.Scope
	sensitive  map[string]string
	top        int
	broken     bool
}

// saveState takes the running code's per-call state off the VM: the
// nested hook starts with no scope and no coroutines of its own.
func (v *vm) saveState() vmState {
	s := vmState{ctx: v.ctx, logger: v.logger, baseLogger: v.baseLogger, logAttrs: v.logAttrs, grants: v.grants,
		taskID: v.taskID, secrets: v.secrets, coroutines: v.coroutines, scope: v.scope, top: v.top, broken: v.broken}
	if len(v.sensitive) > 0 {
		s.sensitive = make(map[string]string, len(v.sensitive))
		for k, val := range v.sensitive {
			s.sensitive[k] = val
		}
	}
	v.coroutines = coroutines{}
	v.scope = nil
	return s
}

// restoreState gives the running code its state back. A nested hook that
// failed does not retire the session's VM: the code that ran it goes on
// (a test reports the hook's failure and runs the next one).
func (v *vm) restoreState(s vmState) {
	v.ctx, v.logger, v.baseLogger, v.logAttrs = s.ctx, s.logger, s.baseLogger, s.logAttrs
	v.grants, v.taskID, v.secrets = s.grants, s.taskID, s.secrets
	v.coroutines, v.scope, v.top, v.broken = s.coroutines, s.scope, s.top, s.broken
	clear(v.sensitive)
	for k, val := range s.sensitive {
		if v.sensitive == nil {
			v.sensitive = map[string]string{}
		}
		v.sensitive[k] = val
	}
	if s.ctx != nil {
		v.L.SetContext(s.ctx)
	}
}

// RunTaskNested runs a task from inside the code a Do call is running on
// the session's VM (a Go function that code called): hooks of the
// session's type run on the session's VM, nested in that code, so they
// see what it changed in the plugin's tables (a test's spies and stubs);
// other types run in their pools. ctx bounds the task; each hook's
// deadline comes from its definition (Options.HookContext). The VM stays
// the session's whatever the hook did.
func (s *Session) RunTaskNested(ctx context.Context, task *Task, logger *slog.Logger) (*Result, error) {
	if s.v.nested == 0 {
		return nil, errors.New("RunTaskNested outside a Do call")
	}
	defer s.onHookThread()()
	return s.rt.runTaskHeld(ctx, task, logger, s.v)
}

// HookThread is the thread of the session's VM that nested hooks run on:
// it shares the VM's globals and heap, but has a stack of its own, so a
// hook running on another goroutine never touches the stack of the code
// that ran it (whose locals a fake's handler may be writing through its
// upvalues meanwhile, see internal/plugtest's gate).
func (s *Session) HookThread() *lua.LState {
	if s.hook == nil || s.hookOf != s.v {
		s.hook, _ = s.v.L.NewThread()
		s.hookOf = s.v
	}
	return s.hook
}

// onHookThread makes the VM run on its hook thread until the returned
// function puts the main state back.
func (s *Session) onHookThread() func() {
	main := s.v.L
	s.v.L = s.HookThread()
	return func() { s.v.L = main }
}

// CallNested is RunTaskNested for a called kind's hook (loom.test.call).
func (s *Session) CallNested(ctx context.Context, c *CallRequest, logger *slog.Logger) (*CallResult, error) {
	if s.v.nested == 0 {
		return nil, errors.New("CallNested outside a Do call")
	}
	if logger == nil {
		logger = s.rt.logger
	}
	defer s.onHookThread()()
	return s.rt.callHeld(ctx, c, logger, s.v)
}

// CancelledError is the error of a hook stopped because its caller's
// context ended (ErrCancelled): it says where in the plugin the hook was,
// so a runaway hook is reported at its own line.
type CancelledError struct {
	// What is the task or call and hook: "task t-1, linode create".
	What string
	// Where is the plugin's file:line the hook was running, when known.
	Where string
	// Traceback is the hook's Lua traceback at that moment.
	Traceback string
	// Cause is why the caller's context ended.
	Cause error
}

func (e *CancelledError) Error() string {
	at := ""
	if e.Where != "" {
		at = " (running at " + e.Where + ")"
	}
	return fmt.Sprintf("%v: %s%s: %v", ErrCancelled, e.What, at, e.Cause)
}

// Unwrap makes errors.Is(err, ErrCancelled) and the cause hold.
func (e *CancelledError) Unwrap() []error { return []error{ErrCancelled, e.Cause} }

var leadingWhere = regexp.MustCompile(`^([^\s:][^:\n]*\.lua:\d+):`)

// interrupted builds the CancelledError of a hook whose Lua error callErr
// was raised by its context ending.
func interrupted(what string, callErr error, cause error) error {
	msg, trace, _ := describeLuaError(callErr)
	e := &CancelledError{What: what, Traceback: trace, Cause: cause}
	if m := leadingWhere.FindStringSubmatch(msg); m != nil {
		e.Where = m[1]
	}
	return e
}
