package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/stdlib"
)

// Options configure a Runtime. Only PluginsDir is required.
type Options struct {
	// PluginsDir holds the plugin folders.
	PluginsDir string
	// WorkDir is the work-dir root; each hook runs with the Coopr working
	// directory <WorkDir>/<Tenant>/<providertypes|automatortypes>/<type>.
	// Default "work".
	WorkDir string
	// Tenant is the tenant of tasks that carry no tenantId. Default
	// "default". Work dirs and pooled VMs are per (tenant, type).
	Tenant string
	// ProvisionerID and WorkerID are copied into every result
	// (provisionerId, workerId), as a Coopr worker did. loomd serve sets
	// them to its daemon id and <host>.<pid>; empty leaves them out.
	ProvisionerID string
	WorkerID      string
	// Bindings are the Lua modules plugins may require as "loom.<name>".
	// Nil means just log and json (see bindings/std for the full set).
	Bindings *bindings.Registry
	// Logger receives plugin and runtime logs. Nil discards them.
	Logger *slog.Logger
	// DefaultTimeout is a hook's deadline when its definition sets none.
	// Default 10 minutes.
	DefaultTimeout time.Duration
	// Timeout, when set, overrides every definition's timeouts
	// (loomd run --timeout).
	Timeout time.Duration
	// LoadTimeout bounds running a plugin's top-level code when a VM is
	// provisioned. Default 10 seconds.
	LoadTimeout time.Duration
	// PoolSize is the number of warm idle VMs kept per plugin type.
	// Default 8.
	PoolSize int
	// Limits bound each VM; zero fields take DefaultLimits.
	Limits Limits
	// QuietMissingHooks logs the hooks plugins do not define at debug
	// level instead of warn: loomd run runs one task, and a task for an
	// undefined hook fails with its own clear message anyway.
	QuietMissingHooks bool
	// Expose, when non-nil, makes these Go values available to plugins as
	// require("loom.host").<name>, through gopher-luar. It is an explicit
	// opt-in for trusted embedders: every exported method and field of
	// the values becomes callable from Lua.
	Expose map[string]any
	// Folders, when set, are the only plugin folders loaded: PluginsDir
	// is not scanned (loomd test and plugins check on one plugin, so its
	// siblings' problems do not show).
	Folders []string
	// Sources, when set, are the plugin versions loaded, byte for byte
	// as another runtime validated them (its Sources): the plugin folders
	// are not read. loomd's worker processes load the daemon's versions
	// this way, so a plugin half-written or broken on disk never reaches
	// them.
	Sources []PluginSource
	// LazyTypes makes a type's first VM with its first task or call, not
	// at load, so a process holds VMs only for the types it runs. Loading
	// then checks no more than that the plugin's code compiles: a type
	// whose code fails when it runs fails its first task instead of the
	// load, and missing hooks are not reported. For versions another
	// runtime validated (Sources): loomd's workers, each of which could
	// serve any of the daemon's types, held a VM of every one of them
	// (about 140 KiB each: 7 MiB with 50 types).
	LazyTypes bool
	// PermitHTTP, when set, returns hosts added to every non-empty
	// permissions.http allow-list. loomd test uses it for the fakes a
	// test permits explicitly; loomd itself never sets it.
	PermitHTTP func() []string
	// InstructionHook, when set, is called before every instruction of
	// plugin code (see the vendored gopher-lua's LOOM.md): loomd test
	// --coverage counts lines with it. It is called from every VM at
	// once, so it must be safe for concurrent use.
	InstructionHook func(L *lua.LState, proto *lua.FunctionProto, pc int)
	// HookContext, when set, makes each hook's context in place of
	// context.WithTimeout(ctx, timeout), timeout being the hook's
	// deadline (the definition's timeouts, or Timeout). loomd test puts
	// the deadline on its virtual clock with it, leaving ctx's real
	// deadline (--timeout) to bound real time only.
	HookContext func(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc)
}

// Sentinel errors callers branch on.
var (
	// ErrPluginNotFound: no loaded plugin serves the task's type.
	ErrPluginNotFound = errors.New("plugin type not found")
	// ErrCancelled: the caller cancelled the task's context (shutdown,
	// Ctrl-C). The task did not finish and may be run again.
	ErrCancelled = errors.New("task cancelled")
	// ErrClosed: the runtime was closed.
	ErrClosed = errors.New("runtime closed")
)

// Runtime loads plugins and runs tasks through them. It is safe for
// concurrent use: each task checks out its own VM.
type Runtime struct {
	opts     Options
	logger   *slog.Logger
	bindings *bindings.Registry
	limits   Limits
	workRoot string
	stdlib   map[string]*lua.FunctionProto

	reloadMu sync.Mutex
	snap     atomic.Pointer[snapshot]
	closed   atomic.Bool
}

// snapshot is one immutable generation of loaded plugin types.
type snapshot struct {
	types  map[string]*pluginType
	errors []*LoadError

	sensitiveOnce sync.Once
	sensitive     map[string]bool
}

// sensitiveNames is the set of field names that any loaded definition
// declares sensitive or of type password. A task's values under these
// keys are secrets wherever they appear in the task.
func (s *snapshot) sensitiveNames() map[string]bool {
	s.sensitiveOnce.Do(func() {
		s.sensitive = map[string]bool{}
		for _, pt := range s.types {
			for _, g := range pt.def.Parameters {
				if g == nil {
					continue
				}
				for name, f := range g.Fields {
					if f != nil && (f.Sensitive || f.Type == "password") {
						s.sensitive[name] = true
					}
				}
			}
		}
	})
	return s.sensitive
}

// pluginType is one provider or automator type of a loaded plugin version.
type pluginType struct {
	name    string
	family  Family
	plugin  *plugin
	def     *TypeDef
	pool    *pool
	hooks   []string // hooks the entry table defines
	missing []string // hooks it does not define (or inherits as failing defaults)
	// inspected is set once hooks and missing are known: at load, or
	// (Options.LazyTypes) when hookList first needs them.
	inspectMu sync.Mutex
	inspected bool

	workDirs sync.Map // work dirs known to exist, by tenant
}

// TypeInfo describes a loaded plugin type.
type TypeInfo struct {
	Name        string `json:"name"`
	Family      Family `json:"family"`
	Plugin      string `json:"plugin"`
	Description string `json:"description,omitempty"`
	Dir         string `json:"dir"`
	Definition  string `json:"definition"`
	Classname   string `json:"classname,omitempty"`
	Version     string `json:"version"`
	// Key is the definition key listing the type (providertypes,
	// clusterdrivers, ...); Coopr is set for task-driven kinds.
	Key   string   `json:"key"`
	Coopr bool     `json:"coopr,omitempty"`
	Hooks []string `json:"hooks"`
	// Missing lists the kind's hooks the plugin does not define: a Coopr
	// kind's tasks for them fail; a called kind's optional hooks are
	// answered by the host as the contract says.
	Missing []string `json:"missing_hooks,omitempty"`
	// MemoryLimit is the definition's limits.memory in bytes; 0 means
	// the daemon's default.
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// Definition as written, for registering the type with a Coopr server.
	Raw []byte `json:"-"`
	// Host is the type's "host" settings, checked against the kind's
	// settings shape: what an adapter reads about the type.
	Host map[string]any `json:"host,omitempty"`
}

// Stats are the runtime's gauges.
type Stats struct {
	Types      int `json:"types"`
	LoadErrors int `json:"load_errors"`
	VMsIdle    int `json:"vms_idle"`
	VMsInUse   int `json:"vms_in_use"`
	VMsCreated int `json:"vms_created"`
	VMsRetired int `json:"vms_retired"`
	// Bindings holds the bindings' own stats (e.g. ssh_connections_open).
	Bindings map[string]float64 `json:"bindings,omitempty"`
}

// New validates the options and prepares a runtime. It loads nothing:
// call Load.
func New(opts Options) (*Runtime, error) {
	if opts.PluginsDir == "" {
		return nil, errors.New("runtime options: PluginsDir is required")
	}
	if opts.WorkDir == "" {
		opts.WorkDir = "work"
	}
	if opts.Tenant == "" {
		opts.Tenant = "default"
	}
	if !ValidTenant(opts.Tenant) {
		return nil, fmt.Errorf("runtime options: tenant %q must be %s", opts.Tenant, tenantRule)
	}
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 10 * time.Minute
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 8
	}
	if opts.LoadTimeout <= 0 {
		opts.LoadTimeout = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Bindings == nil {
		opts.Bindings = DefaultBindings()
	}
	root, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("runtime options: work dir %q: %w", opts.WorkDir, err)
	}
	rt := &Runtime{
		opts:     opts,
		logger:   opts.Logger,
		bindings: opts.Bindings,
		limits:   opts.Limits.withDefaults(),
		workRoot: root,
		stdlib:   make(map[string]*lua.FunctionProto),
	}
	for _, name := range stdlib.Modules() {
		src, _ := stdlib.Source(name)
		proto, lerr := compileChunk(src, "stdlib/"+strings.ReplaceAll(name, ".", "/")+".lua")
		if lerr != nil {
			return nil, fmt.Errorf("compiling the embedded stdlib: %v", lerr)
		}
		rt.stdlib[name] = proto
	}
	rt.snap.Store(&snapshot{types: map[string]*pluginType{}})
	return rt, nil
}

// Load scans the plugins directory and loads every plugin it finds. A
// broken plugin does not stop the others: its problems are reported by
// LoadErrors (and logged). Load returns an error only when the directory
// itself cannot be read.
func (rt *Runtime) Load(ctx context.Context) error {
	_, err := rt.Reload(ctx)
	return err
}

// ReloadReport says what a Reload changed.
type ReloadReport struct {
	Added, Updated, Removed []string
	// Kept lists types whose new version failed to load and whose
	// previous version keeps serving.
	Kept []string
	// Errors are the load problems of this scan.
	Errors []*LoadError
}

// Changed reports whether the set of serving versions changed.
func (r ReloadReport) Changed() bool {
	return len(r.Added)+len(r.Updated)+len(r.Removed) > 0
}

// Reload rescans the plugins directory. Unchanged plugin versions keep
// their warm pools; a changed plugin gets a new pool while in-flight tasks
// finish on the old version, whose pool then drains; a broken new version
// is reported and the previous good version keeps serving.
func (rt *Runtime) Reload(ctx context.Context) (ReloadReport, error) {
	if rt.closed.Load() {
		return ReloadReport{}, ErrClosed
	}
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	var rep ReloadReport
	var plugins []*plugin
	var errs []*LoadError
	var failed map[string]bool // types whose new version is broken
	switch {
	case rt.opts.Sources != nil:
		plugins, errs, failed = scanSources(rt.opts.Sources)
	case len(rt.opts.Folders) > 0:
		plugins, errs, failed = scanFolders(rt.opts.Folders)
	default:
		if _, err := os.Stat(rt.opts.PluginsDir); err != nil {
			return rep, fmt.Errorf("reading the plugins directory %q: %w (set --plugins or LOOM_PLUGINS)", rt.opts.PluginsDir, err)
		}
		plugins, errs, failed = scanPlugins(rt.opts.PluginsDir)
	}
	old := rt.snap.Load()
	next := &snapshot{types: make(map[string]*pluginType)}
	claimed := make(map[string]string) // type -> definition file
	// Types declared by definitions that failed before compiling still
	// count as "present but broken", so their old version keeps serving.
	for _, e := range errs {
		if e.Type != "" {
			failed[e.Type] = true
		}
	}
	for _, p := range plugins {
		names := make([]string, 0, len(p.def.Types))
		for n := range p.def.Types {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, name := range names {
			if prev, dup := claimed[name]; dup {
				errs = append(errs, &LoadError{Plugin: p.def.Name, Type: name, File: p.defFile,
					Message: fmt.Sprintf("type %q is already defined by %s; rename one of them", name, prev)})
				continue
			}
			claimed[name] = p.defFile
			if o, ok := old.types[name]; ok && o.plugin.version == p.version && o.plugin.defFile == p.defFile {
				next.types[name] = o
				continue
			}
			pt, err := rt.buildType(p, name)
			if err != nil {
				var le *LoadError
				if !errors.As(err, &le) {
					le = &LoadError{Plugin: p.def.Name, Type: name, File: p.defFile, Message: err.Error()}
				}
				errs = append(errs, le)
				failed[name] = true
				continue
			}
			next.types[name] = pt
			if !pt.kind().Coopr || rt.opts.LazyTypes {
				continue // a called kind's absent hooks are answered by the host
			}
			for _, h := range pt.missing {
				errs = append(errs, &LoadError{Plugin: p.def.Name, Type: name, File: p.defFile, Warning: true, Hook: h,
					Message: fmt.Sprintf("%s does not define hook %q; %s tasks for this type will fail with \"unimplemented %s in %s\"",
						pt.def.Classname, h, taskNameOf(h), h, pt.def.Classname)})
			}
		}
	}
	// A broken new version keeps the old one serving.
	for name, o := range old.types {
		if _, ok := next.types[name]; !ok && failed[name] {
			next.types[name] = o
			rep.Kept = append(rep.Kept, name)
		}
	}
	next.errors = errs
	rt.snap.Store(next)
	for name, o := range old.types {
		n, ok := next.types[name]
		switch {
		case !ok:
			rep.Removed = append(rep.Removed, name)
			o.pool.drain()
		case n != o:
			rep.Updated = append(rep.Updated, name)
			o.pool.drain()
		}
	}
	for name := range next.types {
		if _, ok := old.types[name]; !ok {
			rep.Added = append(rep.Added, name)
		}
	}
	sort.Strings(rep.Added)
	sort.Strings(rep.Updated)
	sort.Strings(rep.Removed)
	sort.Strings(rep.Kept)
	rep.Errors = errs
	for _, e := range errs {
		level := slog.LevelError
		switch {
		case e.Warning && e.Hook != "" && rt.opts.QuietMissingHooks:
			level = slog.LevelDebug
		case e.Warning:
			level = slog.LevelWarn
		}
		rt.logger.Log(ctx, level, "plugin load problem", "at", e.Location(), "plugin", e.Plugin, "type", e.Type, "error", e.Message)
	}
	for _, name := range rep.Kept {
		rt.logger.Warn("new plugin version failed to load; the previous version keeps serving", "type", name)
	}
	return rep, nil
}

func taskNameOf(hook string) string {
	for name, h := range hookByTask {
		if h.hook == hook {
			return name
		}
	}
	return strings.ToUpper(hook)
}

// buildType provisions the first VM of a type, which validates the plugin
// (its code runs and its entry table exists), and seeds the pool with it.
func (rt *Runtime) buildType(p *plugin, name string) (*pluginType, error) {
	td := p.def.Types[name]
	pt := &pluginType{name: name, family: td.kind.Family, plugin: p, def: td}
	pt.pool = newPool(rt.opts.PoolSize, func(tenant string) (*vm, error) { return newVM(rt, pt, tenant) })
	if rt.opts.LazyTypes {
		return pt, nil
	}
	v, err := newVM(rt, pt, rt.opts.Tenant)
	if err != nil {
		return nil, err
	}
	pt.hooks, pt.missing = v.inspectHooks()
	pt.inspected = true
	if k := pt.kind(); !k.Coopr {
		var lacking []string
		for _, h := range pt.missing {
			if k.Hook(h).Required {
				lacking = append(lacking, h)
			}
		}
		if len(lacking) > 0 {
			v.close()
			return nil, &LoadError{Plugin: p.def.Name, Type: name, File: p.defFile,
				Message: fmt.Sprintf("%s %s does not define the required hook(s) %s of the %s contract (docs/kinds/%s.md); define them as %s:%s(req)",
					k.Family, orClass(td.Classname), strings.Join(lacking, ", "), k.Family, k.Family, orClass(td.Classname), lacking[0])}
		}
		if le := requiredBySettings(p, name, td, pt.missing); le != nil {
			v.close()
			return nil, le
		}
	}
	pt.pool.add(v)
	return pt, nil
}

// requiredBySettings refuses a type whose host settings make hooks
// required (Kind.RequiredWhen) that it does not define. The error points
// at the setting's line in the definition.
func requiredBySettings(p *plugin, name string, td *TypeDef, missing []string) *LoadError {
	k := td.kind
	for _, r := range k.RequiredWhen {
		if on, _ := td.hostSettings[r.Setting].(bool); !on {
			continue
		}
		var lacking []string
		for _, h := range r.Hooks {
			if contains(missing, h) {
				lacking = append(lacking, h)
			}
		}
		if len(lacking) == 0 {
			continue
		}
		return &LoadError{Plugin: p.def.Name, Type: name, File: p.defFile,
			Line: jsonKeyLines(p.defData)["/"+name+"/host/"+r.Setting],
			Message: fmt.Sprintf("%s %s sets host.%s, so it must define %s (docs/kinds/%s.md): %s; define %s:%s(req), or set host.%s to false",
				k.Family, orClass(td.Classname), r.Setting, strings.Join(lacking, ", "), k.Family, r.Why,
				orClass(td.Classname), lacking[0], r.Setting)}
	}
	return nil
}

func orClass(c string) string {
	if c == "" {
		return "entry table"
	}
	return c
}

// kind is the type's kind.
func (pt *pluginType) kind() *Kind {
	if pt.def != nil && pt.def.kind != nil {
		return pt.def.kind
	}
	return KindOf(pt.family)
}

// inspectHooks lists the family's hooks the entry table defines, and
// those it lacks or inherits from the failing base defaults. It follows
// __index chains of tables only: no Lua runs.
// TrimIdleVMs closes the idle VMs of every plugin type but the one that
// ran last, and returns how many it closed. A process that can serve many
// types, one task at a time (a loomd worker), calls it when it has been
// idle a while: the next task of another type provisions a VM again.
func (rt *Runtime) TrimIdleVMs() int {
	s := rt.snap.Load()
	if s == nil {
		return 0
	}
	var last *pluginType
	for _, pt := range s.types {
		if last == nil || pt.pool.puts.Load() > last.pool.puts.Load() {
			last = pt
		}
	}
	n := 0
	for _, pt := range s.types {
		if pt != last {
			n += pt.pool.closeIdle()
		}
	}
	return n
}

// hookList is the hooks the type defines and those it does not. With
// Options.LazyTypes they are read from a VM the first time they are
// needed (the VM goes back to the pool); an error is the VM's.
func (pt *pluginType) hookList(tenant string) (hooks, missing []string, err error) {
	pt.inspectMu.Lock()
	defer pt.inspectMu.Unlock()
	if !pt.inspected {
		v, err := pt.pool.get(tenant)
		if err != nil {
			return nil, nil, err // tried again with the next call
		}
		pt.hooks, pt.missing = v.inspectHooks()
		pt.inspected = true
		pt.pool.put(v)
	}
	return pt.hooks, pt.missing, nil
}

func (v *vm) inspectHooks() (defined, missing []string) {
	hooks := v.pt.kind().HookNames()
	var defaults *lua.LTable
	if loom, ok := v.loaded.RawGetString("loom").(*lua.LTable); ok {
		defaults, _ = loom.RawGetString("_defaults").(*lua.LTable)
	}
	for _, h := range hooks {
		fn := lookupChain(v.entry, h)
		_, isFn := fn.(*lua.LFunction)
		if !isFn || (defaults != nil && defaults.RawGet(fn) != lua.LNil) {
			if !v.pt.kind().Hook(h).Optional {
				missing = append(missing, h)
			}
			continue
		}
		defined = append(defined, h)
	}
	return defined, missing
}

func lookupChain(t *lua.LTable, key string) lua.LValue {
	for i := 0; t != nil && i < 32; i++ {
		if v := t.RawGetString(key); v != lua.LNil {
			return v
		}
		mt, ok := t.Metatable.(*lua.LTable)
		if !ok {
			return lua.LNil
		}
		t, _ = mt.RawGetString("__index").(*lua.LTable)
	}
	return lua.LNil
}

// Types lists the loaded plugin types, sorted by name.
func (rt *Runtime) Types() []TypeInfo {
	s := rt.snap.Load()
	out := make([]TypeInfo, 0, len(s.types))
	for _, pt := range s.types {
		pt.inspectMu.Lock() // hookList may fill them in (Options.LazyTypes)
		hooks, missing := pt.hooks, pt.missing
		pt.inspectMu.Unlock()
		out = append(out, TypeInfo{
			Name: pt.name, Family: pt.family, Plugin: pt.plugin.def.Name,
			Description: pt.plugin.def.Description, Dir: pt.plugin.display,
			Definition: pt.plugin.defFile, Classname: pt.def.Classname,
			Version: pt.plugin.version, Hooks: hooks, Missing: missing, Raw: pt.def.Raw,
			Key: pt.kind().Key, Coopr: pt.kind().Coopr,
			MemoryLimit: pt.def.memoryLimit(pt.plugin.def), Host: pt.def.hostSettings,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LoadErrors returns the problems of the latest scan, errors and
// warnings, in scan order.
func (rt *Runtime) LoadErrors() []*LoadError {
	return append([]*LoadError(nil), rt.snap.Load().errors...)
}

// Stats returns the VM pool gauges and the bindings' stats.
func (rt *Runtime) Stats() Stats {
	s := rt.snap.Load()
	st := Stats{Types: len(s.types), Bindings: rt.bindings.Stats()}
	for _, e := range s.errors {
		if !e.Warning {
			st.LoadErrors++
		}
	}
	for _, pt := range s.types {
		st.VMsIdle += pt.pool.idleCount()
		st.VMsInUse += int(pt.pool.inUse.Load())
		st.VMsCreated += int(pt.pool.created.Load())
		st.VMsRetired += int(pt.pool.retired.Load())
	}
	return st
}

// Bindings returns the runtime's binding registry.
func (rt *Runtime) Bindings() *bindings.Registry { return rt.bindings }

// Close drains every pool and closes the bindings (SSH connections, HTTP
// clients). Tasks still running finish; new ones fail with ErrClosed.
func (rt *Runtime) Close() error {
	if rt.closed.Swap(true) {
		return nil
	}
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	for _, pt := range rt.snap.Load().types {
		pt.pool.drain()
	}
	return rt.bindings.Close()
}

// moduleNames lists what require("loom...") reaches, for error messages.
func (rt *Runtime) moduleNames() []string {
	names := []string{}
	for n := range rt.stdlib {
		names = append(names, n)
	}
	for _, n := range rt.bindings.Names() {
		names = append(names, "loom."+n)
	}
	sort.Strings(names)
	return names
}
