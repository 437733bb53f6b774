// Package luaval converts between JSON, Go values and Lua values, with
// limits on depth, size and node count, and with cycle detection.
//
// It is the hot path of every task: a task's JSON becomes Lua tables and a
// hook's result table becomes JSON. The decoder scans JSON bytes straight
// into presized LTables, without an intermediate map[string]any.
//
// Conventions:
//   - JSON objects become tables with string keys; arrays become sequences.
//   - JSON null becomes nil, so keys with null values are absent in Lua.
//   - A table with only a sequence part (keys 1..n) encodes as an array;
//     anything else encodes as an object whose keys are strings or numbers.
//   - An empty table encodes as {} unless it carries the array marker
//     (see MarkArray), which makes it [].
//   - Numbers are float64 (Lua 5.1): integers above 2^53 lose precision, so
//     ids should travel as strings.
package luaval

import (
	"errors"
	"fmt"
)

// Limits bound a conversion. Zero fields take the defaults.
type Limits struct {
	// MaxDepth is the deepest nesting of tables/objects/arrays.
	MaxDepth int
	// MaxNodes is the most values (scalars and containers) converted.
	MaxNodes int
	// MaxBytes is the largest JSON input accepted or output produced.
	MaxBytes int
	// Stop, when set, is watched every 4096 values: the conversion fails
	// with ErrStopped once it is closed. Bindings pass the hook's context's
	// Done, so a document of 32 MiB (about a second in one Go call) cannot
	// outlive the hook's deadline.
	Stop <-chan struct{}
}

// DefaultLimits are generous for provisioning tasks (a Coopr task is a few
// KB) while keeping a hostile value from eating the process.
var DefaultLimits = Limits{MaxDepth: 64, MaxNodes: 1 << 20, MaxBytes: 32 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = DefaultLimits.MaxNodes
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	return l
}

// Typed errors callers may branch on.
var (
	ErrTooDeep  = errors.New("value nested too deep")
	ErrTooLarge = errors.New("value too large")
	ErrCycle    = errors.New("table contains a cycle")
	ErrStopped  = errors.New("stopped: the hook's deadline passed or it was cancelled")
)

// PathError says where in a value a conversion failed, e.g.
// "result.ssh-auth.key: cannot convert function to JSON".
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	path := e.Path
	if len(path) > 100 {
		path = path[:40] + "..." + path[len(path)-40:]
	}
	return fmt.Sprintf("at %s: %v", path, e.Err)
}

func (e *PathError) Unwrap() error { return e.Err }

// stopEvery+1 is how many values Decode and Encode convert between looks
// at Limits.Stop.
const stopEvery = 1<<12 - 1

// stopped reports ErrStopped once stop is closed.
func stopped(stop <-chan struct{}) error {
	select {
	case <-stop:
		return ErrStopped
	default:
		return nil
	}
}
