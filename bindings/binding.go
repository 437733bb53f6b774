// Package bindings defines the contract between Loom's Lua runtime and the
// Go modules that plugins reach through require("loom.<module>").
//
// A Binding is a value built once per runtime. It holds process-wide state
// (an SSH connection pool, an HTTP transport) and opens its Lua module table
// once per VM. Bindings never import the runtime: everything they need about
// the hook that is running (its context, logger, work dir, permissions) comes
// through the Host interface, which the runtime's VM implements. Imports flow
// one way: runtime -> bindings -> bindings/<module>.
package bindings

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// Host is what a binding may know about the VM and the hook it serves.
//
// A VM serves many tasks over its life, so bindings must call these methods
// at call time, never cache their results when the module is opened.
type Host interface {
	// Context is the running hook's context: its deadline and cancellation.
	// Every blocking call a binding makes must honour it.
	Context() context.Context
	// Logger logs with the task id, plugin type and hook already attached.
	// Values registered with AddSecret are redacted from its output.
	Logger() *slog.Logger
	// PluginDir is the plugin's folder (its JSON definition and Lua files).
	PluginDir() string
	// WorkDir is the hook's working directory,
	// <work-root>/<tenant>/<providertypes|automatortypes>/<type>: the only
	// place the hook may write. Local paths a plugin hands to a binding
	// must resolve inside WorkDir, PluginDir (read only) or a Grant (read
	// only); package bindings/localpath applies that rule.
	WorkDir() string
	// Grants are the files of other plugin types that the running task
	// names and the hook may read. They change with every task.
	Grants() []Grant
	// Permissions is what the plugin definition allows beyond the default.
	Permissions() Permissions
	// AddSecret registers a value that must never appear in logs, results
	// or error messages for the rest of the task.
	AddSecret(secret string)
	// Redact returns s with every secret of the task removed, in every
	// encoding. A binding that shortens text (a log line cut at 64 KiB)
	// must redact first, so a cut never leaves a secret's first characters.
	Redact(s string) string
	// TaskID is the id of the task being run, for error messages. It is
	// empty outside a task (in the REPL before :task, at load time).
	TaskID() string
}

// SensitiveFields is implemented by a Host that can hand a binding the
// value of one of the running task's sensitive fields (declared
// "sensitive", or of type "password", in the plugin's definition) by
// name. loom.crypto loads a private key this way, so that a plugin names
// its key rather than passing the key's text through Lua. ok is false when
// the task has no such field, the field is not sensitive, or its value is
// not a string. Hosts without task fields (the REPL before :task) need not
// implement it.
type SensitiveFields interface {
	SensitiveField(name string) (value string, ok bool)
}

// Grant is another plugin type's resource that the running task names,
// such as a provider's SSH key in config["ssh-auth"].identityfile, which the
// automators of the node need. A grant is read-only, and the runtime makes
// one only for a path inside a declared resource folder (resourceTypes) of a
// type the task names, in the task's tenant. A named path that breaks the
// rule is still listed, with Denied saying why, so the error can tell the
// plugin author what to fix.
type Grant struct {
	// Named is the path as the task wrote it.
	Named string
	// Path is the file or folder on this host: absolute and clean, under
	// <work-root>/<tenant>/<providertypes|automatortypes>/<type>/<resource>.
	Path string
	// Denied, when set, is why the task's path is refused.
	Denied string
	// Root, when set, is the work dir of the type that owns Path: symlinks
	// in Path resolve within Root, never outside it. Resource versions
	// synced from a Coopr server are activated by links from the resource
	// folder into <type work dir>/.resources. Empty keeps them within
	// Path's own folder.
	Root string
}

// Permissions lists what a plugin definition grants. The zero value grants
// the defaults.
type Permissions struct {
	// HTTP is the allow-list of hosts ("api.example.com", "*.example.net")
	// a plugin may reach. Empty means no restriction.
	HTTP []string
}

// Binding is one Lua module, required as "loom.<Name()>".
type Binding interface {
	// Spec describes the module: its name and its functions, as data. It
	// feeds the binding reference, the LuaLS stubs and the REPL completer.
	Spec() ModuleSpec
	// Open builds the module's table for one VM. It runs once per VM, when
	// the plugin first requires the module. h stays valid for the VM's life.
	Open(L *lua.LState, h Host) lua.LValue
}

// Closer is implemented by bindings that hold resources (pools, clients)
// to release when the runtime closes.
type Closer interface {
	Close() error
}

// StatsReporter is implemented by bindings that expose gauges and counters,
// for example an SSH pool's open and reused connections. Keys are stable
// metric-friendly names.
type StatsReporter interface {
	Stats() map[string]float64
}

// ModuleSpec documents a module as data.
type ModuleSpec struct {
	// Name is the module name without the "loom." prefix, e.g. "ssh".
	Name string
	// Doc is a one-paragraph description.
	Doc string
	// Funcs lists the module's functions and methods in table order.
	Funcs []FuncSpec
	// Types declares the module's classes: option tables, result tables
	// and handles, named "<module>.<Name>" ("ssh.ExecOptions"). Params,
	// Returns and fields refer to them by name; the stubs render them as
	// LuaLS ---@class blocks so an editor completes and checks their keys.
	Types []TypeSpec
}

// TypeSpec documents one class of a module.
type TypeSpec struct {
	// Name is the class name, "ssh.ExecOptions".
	Name string
	// Doc is a one-line description.
	Doc string
	// Exact marks a table whose keys are all listed (an options table the
	// binding rejects unknown keys of): LuaLS flags any other key.
	Exact bool
	// Methods, when set, is the receiver name of the FuncSpecs that are
	// this class's methods: "conn" for "conn:exec".
	Methods string
	// Aliases are older names of the class that stay valid ("ssh.conn").
	Aliases []string
	// Fields lists the keys, in the order the docs show them.
	Fields []FieldSpec
}

// FieldSpec documents one key of a class.
type FieldSpec struct {
	// Name is the key.
	Name string
	// Type in LuaLS notation: "string", "number|string", "ssh.SudoOptions".
	Type string
	// Optional keys may be absent (nil).
	Optional bool
	// Doc is a one-line description, with the default in parentheses.
	Doc string
}

// Optional returns a copy of t named name whose fields are all optional,
// for a table that overrides some keys of t (ssh.from_input's opts).
func (t TypeSpec) Optional(name, doc string) TypeSpec {
	o := t
	o.Name, o.Doc, o.Aliases, o.Methods = name, doc, nil, ""
	o.Fields = make([]FieldSpec, len(t.Fields))
	for i, f := range t.Fields {
		f.Optional = true
		f.Doc = strings.TrimSpace(strings.ReplaceAll(f.Doc, "(required)", ""))
		o.Fields[i] = f
	}
	return o
}

// FuncSpec documents one function or method.
type FuncSpec struct {
	// Name as called from Lua: "connect", or "conn:exec" for a method.
	Name string
	// Params in LuaLS notation, e.g. {"cmd string", "opts? table"}.
	Params []string
	// Returns in LuaLS notation, e.g. {"table"}.
	Returns []string
	// Doc is what the function does, its options and its errors.
	Doc string
}

// Registry is the set of bindings a runtime offers its plugins. It is a
// value, not a global: tests and embedders build the registry they want.
type Registry struct {
	mu       sync.RWMutex
	bindings map[string]Binding
}

// NewRegistry returns a registry holding the given bindings.
// It panics on a duplicate name, which is a programming error.
func NewRegistry(bs ...Binding) *Registry {
	r := &Registry{bindings: make(map[string]Binding)}
	for _, b := range bs {
		r.Register(b)
	}
	return r
}

// Register adds a binding. It panics on a duplicate or empty name.
func (r *Registry) Register(b Binding) {
	name := b.Spec().Name
	if name == "" {
		panic("bindings: binding with an empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.bindings[name]; dup {
		panic(fmt.Sprintf("bindings: duplicate binding %q", name))
	}
	r.bindings[name] = b
}

// Lookup returns the binding for a module name ("ssh", not "loom.ssh").
func (r *Registry) Lookup(name string) (Binding, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.bindings[name]
	return b, ok
}

// Names lists the registered module names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	names := make([]string, 0, len(r.bindings))
	for n := range r.bindings {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Stats merges the stats of every binding that reports some, prefixing
// each key with the module name ("ssh_connections_open").
func (r *Registry) Stats() map[string]float64 {
	out := make(map[string]float64)
	for _, n := range r.Names() {
		b, _ := r.Lookup(n)
		if s, ok := b.(StatsReporter); ok {
			for k, v := range s.Stats() {
				out[n+"_"+k] = v
			}
		}
	}
	return out
}

// Close closes every binding that holds resources and joins their errors.
func (r *Registry) Close() error {
	var errs []error
	for _, n := range r.Names() {
		b, _ := r.Lookup(n)
		if c, ok := b.(Closer); ok {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing binding %q: %w", n, err))
			}
		}
	}
	return joinErrors(errs)
}
