// Package kindcall lets a Go host call one plugin type of a called kind
// (a bucket provisioner, a machine-controller cloud provider ...) with Go
// values. It is the seam the Go adapters of those contracts are built on:
// the hook runs through Runtime.Call (input checked against the kind, the
// pooled sandboxed VM, the hook's timeout, the result checked against the
// contract), and kindcall only encodes the input as JSON, decodes the
// result into a Go value and turns a failure into an *Error that says
// where it happened and what class the contract gives it.
//
//	t, err := kindcall.New(rt, "fakecloud", runtime.CloudProvider)
//	var inst struct{ ID string `json:"id"` }
//	err = t.Call(ctx, kindcall.Request{Hook: "get", Input: map[string]any{"machine": m}}, &inst)
//	var ce *kindcall.Error
//	if errors.As(err, &ce) && ce.Class == runtime.ClassNotFound { ... }
package kindcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/loomrt/loom/runtime"
)

// Type is one loaded plugin type of a called kind. It is safe for
// concurrent use: every call checks out its own VM.
type Type struct {
	rt     *runtime.Runtime
	name   string
	family runtime.Family
}

// New returns the plugin type name of the runtime, which must be loaded
// and of the given family. The type is looked up again at every call, so
// a reload of the plugins folder is seen by the next call.
func New(rt *runtime.Runtime, name string, family runtime.Family) (*Type, error) {
	if rt == nil {
		return nil, errors.New("kindcall: nil runtime")
	}
	if k := runtime.KindOf(family); k == nil || k.Coopr {
		return nil, fmt.Errorf("kindcall: %q is not a called kind (want one of %s)", family, calledFamilies())
	}
	if _, err := Lookup(rt, name, family); err != nil {
		return nil, fmt.Errorf("kindcall: %w", err)
	}
	return &Type{rt: rt, name: name, family: family}, nil
}

// Lookup returns what the runtime loaded for the plugin type name, which
// must be of the given family. Its error names the type's real family and
// the definition key to list it under, or the type's load error, and the
// loaded types of the family, so that a host (an adapter, loomd driver)
// can hand it to its user as it is.
func Lookup(rt *runtime.Runtime, name string, family runtime.Family) (runtime.TypeInfo, error) {
	if rt == nil {
		return runtime.TypeInfo{}, errors.New("nil runtime")
	}
	key := string(family)
	if k := runtime.KindOf(family); k != nil {
		key = k.Key
	}
	var same []string
	for _, ti := range rt.Types() {
		if ti.Name == name {
			if ti.Family != family {
				return runtime.TypeInfo{}, fmt.Errorf("plugin type %q (%s) is a %s type, not a %s type: list it under %q in its definition",
					name, ti.Definition, ti.Family, family, key)
			}
			return ti, nil
		}
		if ti.Family == family {
			same = append(same, ti.Name)
		}
	}
	var failed string
	for _, le := range rt.LoadErrors() {
		if le.Type == name && !le.Warning {
			failed = fmt.Sprintf(" (it failed to load: %v)", le)
		}
	}
	have := "none"
	if len(same) > 0 {
		have = strings.Join(same, ", ")
	}
	return runtime.TypeInfo{}, fmt.Errorf("no loaded plugin declares the %s type %q%s; loaded %s types: %s",
		family, name, failed, family, have)
}

// Name is the plugin type's name.
func (t *Type) Name() string { return t.name }

// Family is the type's kind.
func (t *Type) Family() runtime.Family { return t.family }

// Request is one call of a hook.
type Request struct {
	// Hook is the hook to run ("get", "provision" ...).
	Hook string
	// Input is a Go value that encodes as a JSON object: the hook's input
	// table. Nil means {}.
	Input any
	// ID names the call in the plugin's logs ("default/worker-1", a
	// claim's namespace/name); it may be empty.
	ID string
	// Logger, when set, receives the call's log lines instead of the
	// runtime's logger.
	Logger *slog.Logger
	// Secrets are values the host knows are secret (read from a
	// Kubernetes Secret for the input): redacted from the call's
	// messages, traceback and logs.
	Secrets []string
	// Host holds the host's functions the hook may call as
	// self.host.<name>(arg), for this call only (runtime.HostFunc).
	Host map[string]runtime.HostFunc
}

// Call runs a hook and decodes its result into out (a pointer; nil
// discards it). A hook that fails returns an *Error. A partial hook's
// result (a result returned together with an error) is still decoded
// into out.
func (t *Type) Call(ctx context.Context, r Request, out any) error {
	id, hook := r.ID, r.Hook
	req := &runtime.CallRequest{CallID: id, Type: t.name, Hook: hook, Kind: t.family, Logger: r.Logger,
		Secrets: r.Secrets, Host: r.Host}
	if r.Input != nil {
		raw, err := json.Marshal(r.Input)
		if err != nil {
			return &Error{Type: t.name, Family: t.family, Hook: hook, CallID: id, Class: runtime.ClassTerminal,
				Message: fmt.Sprintf("encoding the input as JSON: %v", err), Err: runtime.ErrInvalidCall}
		}
		req.Input = raw
	}
	res, err := t.rt.Call(ctx, req)
	if err != nil {
		e := &Error{Type: t.name, Family: t.family, Hook: hook, CallID: id, Message: err.Error(), Err: err}
		switch {
		case errors.Is(err, runtime.ErrInvalidCall):
			// The same input fails the same way every time.
			e.Class = runtime.ClassTerminal
		default:
			// Not loaded (yet), cancelled, closed: another try may work.
			e.Class = runtime.ClassRetry
		}
		return e
	}
	if out != nil && res.Result != nil {
		if derr := decode(res.Result, out); derr != nil && res.Error == nil {
			return &Error{Type: t.name, Family: t.family, Hook: hook, CallID: id, Plugin: res.Plugin,
				Class: runtime.ClassTerminal, Reason: runtime.ReasonInvalidResult,
				Message: fmt.Sprintf("decoding the result into %T: %v", out, derr)}
		}
	}
	if res.Error != nil {
		return &Error{Type: t.name, Family: t.family, Hook: hook, CallID: id, Plugin: res.Plugin,
			Class: res.Error.Class, Reason: res.Error.Reason, Code: res.Error.Code, Message: res.Error.Message,
			Stderr: res.Stderr, Defaulted: res.Defaulted}
	}
	return nil
}

func decode(v, out any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// Error is a failed call: the hook returned or raised an error, its
// result broke the contract, it timed out, or the call could not run
// (Err is then the runtime's error: ErrInvalidCall, ErrPluginNotFound,
// ErrCancelled, ErrClosed). Secrets are already redacted from Message and
// Stderr.
type Error struct {
	Type   string
	Family runtime.Family
	Hook   string
	CallID string
	// Plugin is <type>@<version> of the plugin that ran.
	Plugin string
	// Class is runtime.ClassRetry, ClassTerminal or ClassNotFound; Reason
	// and Code refine it as the kind's contract allows.
	Class   string
	Reason  string
	Code    int
	Message string
	// Stderr holds the Lua traceback of a raised error.
	Stderr string
	// Defaulted is set when the plugin does not define the hook and the
	// contract's answer for an absent hook is this error.
	Defaulted bool
	// Err is the runtime's error when the call could not run.
	Err error
	// Host holds the errors of the host's own API this failure stands for
	// (machine-controller's ErrInstanceNotFound, a TerminalError ...).
	// Adapters set it; errors.Is and errors.As find them.
	Host []error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Family, e.Type)
	if e.Plugin != "" && e.Plugin != e.Type {
		fmt.Fprintf(&b, " (%s)", e.Plugin)
	}
	fmt.Fprintf(&b, ", hook %s", e.Hook)
	if e.CallID != "" {
		fmt.Fprintf(&b, " for %s", e.CallID)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %s", e.Message)
		return b.String()
	}
	fmt.Fprintf(&b, ": %s", e.Class)
	if e.Reason != "" {
		fmt.Fprintf(&b, " (%s)", e.Reason)
	}
	fmt.Fprintf(&b, ": %s", e.Message)
	if e.Defaulted {
		b.WriteString(" (the plugin does not define this hook)")
	}
	return b.String()
}

// Unwrap returns the runtime's error and the host errors.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, len(e.Host)+1)
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return append(out, e.Host...)
}

func calledFamilies() string {
	var out []string
	for _, k := range runtime.Kinds() {
		if !k.Coopr {
			out = append(out, string(k.Family))
		}
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
