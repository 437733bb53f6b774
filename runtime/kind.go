package runtime

import (
	"fmt"
	"sort"
	"strings"
)

// Kind is a plugin contract, declared as data: the definition key that
// lists its types, its hooks (required or optional, and what the host does
// when an optional one is absent), the input each hook gets, the result
// shape checked before it leaves the runtime, and the error classes a hook
// may return. Coopr's provider and automator are two kinds; the others are
// the contracts of reference/plugin-contracts.md (Rancher cluster drivers,
// bucket provisioners, machine-controller cloud providers, Kloud providers).
//
// A Coopr kind runs Coopr tasks (loomd run, the queue, a Coopr server): its
// hooks fill self.result. Every other kind is called (Runtime.Call, loomd
// call): a hook takes one table and returns its result, or nil and an error.
type Kind struct {
	// Family names the kind in results, logs and queue routes.
	Family Family `json:"family"`
	// Key is the definition key listing the kind's types ("clusterdrivers"),
	// and the kind's folder in the work-dir layout.
	Key string `json:"key"`
	// Base is the stdlib table plugins extend: require("loom").<Base>.
	Base string `json:"base"`
	// Title and Caller say what the contract is and who calls it.
	Title  string `json:"title"`
	Caller string `json:"caller"`
	// Coopr is set for the task-driven provider and automator kinds.
	Coopr bool `json:"coopr,omitempty"`
	// Hooks in the contract's order.
	Hooks []Hook `json:"hooks"`
	// Errors are the classes a hook of a called kind may return, beyond
	// the host's own (see HostReasons).
	Errors []ErrorClass `json:"errors,omitempty"`
	// Flags are shorthand error tables: {bucket_exists = true} means the
	// class and reason the flag maps to.
	Flags map[string]ErrorFlag `json:"flags,omitempty"`
	// Secrets are input keys whose values are secrets wherever they
	// appear: they never reach messages, stderr or logs.
	Secrets []string `json:"secrets,omitempty"`
	// Settings is the shape of a type's "host" object in its definition:
	// what the host program (an adapter) needs to know about the type
	// beyond its hooks (Kloud's resource name, machine-controller's
	// ConfigVar fields ...). Checked when the type loads; nil means the
	// kind takes none.
	Settings *Shape `json:"settings,omitempty"`
	// RequiredWhen makes hooks required when a boolean setting is true.
	RequiredWhen []SettingRequirement `json:"required_when,omitempty"`
}

// SettingRequirement makes Hooks required when the type's host setting
// Setting is true: a type that sets it and lacks one of them does not
// load, and the error says Why and what to do.
type SettingRequirement struct {
	Setting string   `json:"setting"`
	Hooks   []string `json:"hooks"`
	// Why the host needs the hooks, and how to do without them.
	Why string `json:"why"`
}

// Hook is one hook of a kind.
type Hook struct {
	Name string `json:"name"`
	// TaskName is the Coopr task that runs the hook (Coopr kinds only).
	TaskName string `json:"task,omitempty"`
	// Required hooks must be defined: a called kind's type that lacks one
	// does not load. A Coopr kind's missing hook is a warning and its
	// tasks fail with "unimplemented", as in Coopr.
	Required bool `json:"required"`
	// Input is the table the hook gets; Result what it must return (nil:
	// nothing, and any return value is ignored).
	Input  *Shape `json:"input,omitempty"`
	Result *Shape `json:"result,omitempty"`
	// Absent says what the host does when an optional hook is not defined.
	Absent string `json:"absent,omitempty"`
	// Optional (Coopr kinds) marks a hook a type need not define: its
	// absence is no warning (a task of it still fails "unimplemented").
	Optional bool `json:"optional,omitempty"`
	// Partial hooks may return a result together with an error, which the
	// caller keeps (a Rancher create that failed half way keeps its
	// metadata for the retry).
	Partial bool `json:"partial,omitempty"`
	// Classes are error classes only this hook may return (not_found from
	// a machine provider's get).
	Classes []string `json:"classes,omitempty"`
	// Doc says when the caller runs the hook and what it must do.
	Doc string `json:"doc,omitempty"`

	// absent computes the host's answer for an absent optional hook from
	// the call's input and the hooks the plugin does define.
	absent func(in map[string]any, defined func(string) bool) (any, *CallError)
	// verify checks what a shape cannot: a result against its input.
	verify func(in map[string]any, out any) error
}

// ErrorClass is an error class a kind's hooks may return, with the
// reasons the contract names for it (none means any reason, or none).
type ErrorClass struct {
	Class   string   `json:"class"`
	Reasons []string `json:"reasons,omitempty"`
	Doc     string   `json:"doc,omitempty"`
}

// ErrorFlag is what a shorthand flag in an error table stands for.
type ErrorFlag struct {
	Class  string `json:"class"`
	Reason string `json:"reason,omitempty"`
}

// The error classes.
const (
	// ClassRetry: transient; the caller retries with backoff. A plain
	// error message is a retry.
	ClassRetry = "retry"
	// ClassTerminal: retrying cannot help (bad configuration, an
	// operation the plugin does not support).
	ClassTerminal = "terminal"
	// ClassNotFound: the thing the hook looks for does not exist.
	ClassNotFound = "not_found"
)

// Reasons the host itself gives, valid in every called kind.
const (
	// ReasonUnimplemented: the plugin does not define an optional hook
	// whose contract answers with an error (terminal).
	ReasonUnimplemented = "unimplemented"
	// ReasonInvalidResult: the hook returned a value that does not match
	// the contract, or an error the contract does not have (terminal: a
	// plugin bug).
	ReasonInvalidResult = "invalid_result"
	// ReasonTimeout: the hook ran out of time (retry).
	ReasonTimeout = "timeout"
)

// HostReasons lists the reasons the host gives in any called kind.
var HostReasons = []string{ReasonUnimplemented, ReasonInvalidResult, ReasonTimeout}

// CallError is a called hook's error, classified.
type CallError struct {
	Class   string `json:"class"`
	Reason  string `json:"reason,omitempty"`
	Code    int    `json:"code,omitempty"`
	Message string `json:"message"`
}

func (e *CallError) Error() string {
	s := e.Class
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	return s + ": " + e.Message
}

// Kinds returns the six kinds, Coopr's first. The values are shared:
// callers must not modify them.
func Kinds() []*Kind { return append([]*Kind(nil), kindTable...) }

// KindOf returns the kind of a family, or nil.
func KindOf(f Family) *Kind {
	for _, k := range kindTable {
		if k.Family == f {
			return k
		}
	}
	return nil
}

// KindByKey returns the kind a definition key ("clusterdrivers") lists, or nil.
func KindByKey(key string) *Kind {
	for _, k := range kindTable {
		if k.Key == key {
			return k
		}
	}
	return nil
}

// Hook returns the kind's hook called name, or nil.
func (k *Kind) Hook(name string) *Hook {
	for i := range k.Hooks {
		if k.Hooks[i].Name == name {
			return &k.Hooks[i]
		}
	}
	return nil
}

// HookNames lists the kind's hooks in order.
func (k *Kind) HookNames() []string {
	out := make([]string, len(k.Hooks))
	for i, h := range k.Hooks {
		out[i] = h.Name
	}
	return out
}

// kindKeys lists every definition key, for messages.
func kindKeys() string {
	keys := make([]string, len(kindTable))
	for i, k := range kindTable {
		keys[i] = k.Key
	}
	return strings.Join(keys, ", ")
}

// allHookNames is every hook of every kind, sorted, for the REPL and
// timeouts.
func allHookNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range kindTable {
		for _, h := range k.Hooks {
			if !seen[h.Name] {
				seen[h.Name] = true
				out = append(out, h.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// AllHooks lists the hook names of every kind, sorted.
func AllHooks() []string { return allHookNames() }

// classify checks an error's class and reason against the kind and hook.
// An error the contract does not have becomes a terminal invalid_result
// error that says what was returned and what is allowed.
func (k *Kind) classify(h *Hook, e *CallError) *CallError {
	if e.Class == "" {
		e.Class = ClassRetry
	}
	if e.Reason != "" && contains(HostReasons, e.Reason) {
		return e
	}
	var allowed []string
	for _, c := range k.Errors {
		if c.Class == ClassNotFound && !contains(h.Classes, ClassNotFound) {
			continue
		}
		allowed = append(allowed, c.Class)
		if c.Class != e.Class {
			continue
		}
		if e.Reason == "" || len(c.Reasons) == 0 || contains(c.Reasons, e.Reason) {
			return e
		}
		return &CallError{Class: ClassTerminal, Reason: ReasonInvalidResult, Code: e.Code,
			Message: fmt.Sprintf("%s (the plugin gave reason %q for class %s, which the %s contract does not have; want one of %s)",
				e.Message, e.Reason, e.Class, k.Family, strings.Join(c.Reasons, ", "))}
	}
	return &CallError{Class: ClassTerminal, Reason: ReasonInvalidResult, Code: e.Code,
		Message: fmt.Sprintf("%s (the plugin gave error class %q, which %s %s cannot return; want one of %s)",
			e.Message, e.Class, k.Family, h.Name, strings.Join(allowed, ", "))}
}

// isCooprHook reports whether name is a provider or automator hook: one a
// Coopr task runs.
func isCooprHook(name string) bool {
	return contains(ProviderHooks, name) || contains(AutomatorHooks, name)
}
