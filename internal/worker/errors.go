package worker

import (
	"errors"
	"fmt"

	"github.com/loomrt/loom/runtime"
)

// Kinds of RunError, the reasons a worker could not run a task.
const (
	KindNotFound  = "not_found" // no loaded plugin serves the task's type
	KindInvalid   = "invalid"   // the task JSON is not a valid task
	KindCancelled = "cancelled" // the run was cancelled before it finished
	KindClosed    = "closed"    // the worker is shutting down
	KindError     = "error"     // anything else
)

// RunError is a task that a worker could not run, as sent in a result
// frame. It matches the runtime's sentinels with errors.Is, so callers
// branch on it as on an in-process run's error.
type RunError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *RunError) Error() string { return e.Message }

// Is maps kinds to the runtime's sentinel errors.
func (e *RunError) Is(target error) bool {
	switch e.Kind {
	case KindNotFound:
		return target == runtime.ErrPluginNotFound
	case KindInvalid:
		return target == runtime.ErrInvalidTask
	case KindCancelled:
		return target == runtime.ErrCancelled
	case KindClosed:
		return target == runtime.ErrClosed
	}
	return false
}

// runErrorOf describes a runtime error for the wire.
func runErrorOf(err error) *RunError {
	kind := KindError
	switch {
	case errors.Is(err, runtime.ErrPluginNotFound):
		kind = KindNotFound
	case errors.Is(err, runtime.ErrInvalidTask):
		kind = KindInvalid
	case errors.Is(err, runtime.ErrCancelled):
		kind = KindCancelled
	case errors.Is(err, runtime.ErrClosed):
		kind = KindClosed
	}
	return &RunError{Kind: kind, Message: err.Error()}
}

// ErrDied is matched (errors.Is) by the error of a run whose worker
// process died while running it, other than of exhausting its memory
// budget (that is a failed task with error kind "memory").
var ErrDied = errors.New("worker died")

// DeathError says why a worker process died during a run.
type DeathError struct {
	Type  string // plugin type the worker served
	PID   int
	Cause string // "exit status 2: fatal error: stack overflow", "out of memory"...
	OOM   bool   // it ran out of memory
	Limit int64  // its memory budget
}

func (e *DeathError) Error() string {
	if e.OOM {
		return fmt.Sprintf("worker for %q died: out of memory (limit %s)", e.Type, runtime.FormatSize(e.Limit))
	}
	return fmt.Sprintf("worker for %q died: %s", e.Type, e.Cause)
}

// Is makes a DeathError match ErrDied.
func (e *DeathError) Is(target error) bool { return target == ErrDied }
