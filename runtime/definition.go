package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/loomrt/loom/bindings"
)

// Definition is a plugin's JSON definition, in Coopr's format plus Loom's
// optional additions (main, timeouts, permissions, limits).
//
//	{"name": "mycloud", "description": "...",
//	 "providertypes": ["mycloud"],
//	 "mycloud": {"name": "mycloud", "classname": "MyCloud",
//	             "parameters": {"admin": {"fields": {...}, "required": [[...]]}},
//	             "resourceTypes": {"ssh_keys": {"format": "file", "permissions": "0400"}}},
//	 "main": "mycloud.lua", "timeouts": {"default": "10m", "confirm": "30m"},
//	 "permissions": {"http": ["api.mycloud.example"]},
//	 "limits": {"memory": "512MiB"}}
type Definition struct {
	Name           string   `json:"name"`
	Description    string   `json:"description,omitempty"`
	ProviderTypes  []string `json:"providertypes,omitempty"`
	AutomatorTypes []string `json:"automatortypes,omitempty"`
	// Types holds the per-type objects, keyed by type name.
	Types map[string]*TypeDef `json:"-"`
	// KindTypes lists the declared types by kind, for every kind's key
	// (providertypes, clusterdrivers, ...), in the order written.
	KindTypes map[Family][]string `json:"-"`
	// Main, Timeouts, Permissions and Limits apply to every type unless
	// the type's own object overrides them.
	Main        string            `json:"main,omitempty"`
	Timeouts    map[string]string `json:"timeouts,omitempty"`
	Permissions *PermissionsDef   `json:"permissions,omitempty"`
	Limits      *LimitsDef        `json:"limits,omitempty"`
}

// LimitsDef bounds the resources of a plugin's hooks.
type LimitsDef struct {
	// Memory is the memory budget of one hook run, such as "512MiB" or
	// "1GiB" (see ParseSize). loomd serve enforces it in the worker
	// process running the hook; empty means the daemon's --plugin-memory.
	Memory string `json:"memory,omitempty"`
	// Connections caps the private connections one task holds at once
	// (ssh.connect{reuse=false}); 0 means the runtime's
	// Limits.MaxTaskConns (loomd --task-connections, default 16).
	Connections int `json:"connections,omitempty"`
	// Descriptors caps every descriptor one task holds across calls,
	// connections included; 0 means the runtime's
	// Limits.MaxTaskDescriptors (loomd --task-descriptors, default 32).
	Descriptors int `json:"descriptors,omitempty"`
}

// MaxTaskHeld bounds limits.connections and limits.descriptors: a task
// past it is a leak, not a workload (the SSH pool of one worker process
// holds 256 connections).
const MaxTaskHeld = 1024

// TypeDef is one declared plugin type of any kind.
type TypeDef struct {
	Name          string                     `json:"name,omitempty"`
	Classname     string                     `json:"classname"`
	Description   string                     `json:"description,omitempty"`
	Parameters    map[string]*ParameterGroup `json:"parameters,omitempty"`
	ResourceTypes map[string]json.RawMessage `json:"resourceTypes,omitempty"`
	Main          string                     `json:"main,omitempty"`
	Timeouts      map[string]string          `json:"timeouts,omitempty"`
	Permissions   *PermissionsDef            `json:"permissions,omitempty"`
	Limits        *LimitsDef                 `json:"limits,omitempty"`
	// Host holds the settings the kind's host program reads (its
	// Kind.Settings shape), checked at load.
	Host json.RawMessage `json:"host,omitempty"`
	// Raw is the type's object as written, which is what a Coopr server
	// receives when the plugin type is registered.
	Raw json.RawMessage `json:"-"`

	kind *Kind // the kind whose key lists the type
	// hostSettings is Host, decoded and checked against kind.Settings.
	hostSettings map[string]any
}

// Kind is the kind whose definition key lists the type.
func (t *TypeDef) Kind() *Kind { return t.kind }

// ParameterGroup is parameters.admin or parameters.user.
type ParameterGroup struct {
	Fields map[string]*Field `json:"fields,omitempty"`
	// Required lists alternative sets of field names: the task must fill
	// every field of at least one set.
	Required [][]string `json:"required,omitempty"`
}

// Field is one declared parameter field.
type Field struct {
	Label     string `json:"label,omitempty"`
	Type      string `json:"type,omitempty"`
	Tip       string `json:"tip,omitempty"`
	Default   any    `json:"default,omitempty"`
	Override  bool   `json:"override,omitempty"`
	Sensitive bool   `json:"sensitive,omitempty"`
	Options   []any  `json:"options,omitempty"`
}

// PermissionsDef grants a plugin access beyond the defaults.
type PermissionsDef struct {
	// HTTP is the allow-list of hosts for loom.http ("*.example.com").
	HTTP []string `json:"http,omitempty"`
}

// parseDefinition decodes a definition file. It returns (nil, nil) for a
// valid JSON file that declares no plugin types, so plugin folders may hold
// other JSON files (an example inventory, say).
func parseDefinition(data []byte) (*Definition, error) {
	var top map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&top); err != nil {
		return nil, fmt.Errorf("invalid JSON: %s", describeJSONError(data, err))
	}
	declared := false
	for _, k := range kindTable {
		if _, ok := top[k.Key]; ok {
			declared = true
		}
	}
	if !declared {
		return nil, nil
	}
	var d Definition
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("invalid definition: %s", describeJSONError(data, err))
	}
	if d.Name == "" {
		return nil, fmt.Errorf("missing \"name\"")
	}
	d.Types = make(map[string]*TypeDef)
	d.KindTypes = make(map[Family][]string)
	seen := make(map[string]string)
	var defHooks []string
	declare := func(k *Kind) error {
		raw, ok := top[k.Key]
		if !ok {
			return nil
		}
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return fmt.Errorf("%s must be a list of type names: %s", k.Key, describeJSONError(raw, err))
		}
		defHooks = append(defHooks, k.HookNames()...)
		for _, name := range list {
			if name == "" {
				return fmt.Errorf("%s lists an empty type name", k.Key)
			}
			if KindByKey(name) != nil {
				return fmt.Errorf("%s lists %q, which is a definition key; name the type something else", k.Key, name)
			}
			if prev, dup := seen[name]; dup {
				return fmt.Errorf("type %q is declared twice (in %s and %s)", name, prev, k.Key)
			}
			seen[name] = k.Key
			raw, ok := top[name]
			if !ok {
				return fmt.Errorf("%s declares %q but there is no %q object holding its classname", k.Key, name, name)
			}
			td := &TypeDef{Raw: raw, kind: k}
			if err := json.Unmarshal(raw, td); err != nil {
				return fmt.Errorf("type %q: %s", name, describeJSONError(raw, err))
			}
			if td.Name != "" && td.Name != name {
				return fmt.Errorf("type %q: its object's \"name\" is %q; they must match", name, td.Name)
			}
			if td.Classname == "" && td.Main == "" && d.Main == "" {
				return fmt.Errorf("type %q: missing \"classname\" (the Lua table holding its hooks) or \"main\"", name)
			}
			if err := validateTimeouts(td.Timeouts, k.HookNames()); err != nil {
				return fmt.Errorf("type %q: %w", name, err)
			}
			if err := td.Limits.validate(); err != nil {
				return fmt.Errorf("type %q: %w", name, err)
			}
			if err := td.parseHost(); err != nil {
				return fmt.Errorf("type %q: %w", name, err)
			}
			d.Types[name] = td
			d.KindTypes[k.Family] = append(d.KindTypes[k.Family], name)
		}
		return nil
	}
	for _, k := range kindTable {
		if err := declare(k); err != nil {
			return nil, err
		}
	}
	if len(d.Types) == 0 {
		return nil, fmt.Errorf("declares no types: %s are all empty", kindKeys())
	}
	if err := validateTimeouts(d.Timeouts, defHooks); err != nil {
		return nil, err
	}
	if err := d.Limits.validate(); err != nil {
		return nil, err
	}
	return &d, nil
}

// parseHost decodes and checks the type's "host" settings against its
// kind's shape.
func (t *TypeDef) parseHost() error {
	if len(t.Host) == 0 {
		return nil
	}
	if t.kind.Settings == nil {
		return fmt.Errorf("\"host\": %s types take no host settings; remove it", t.kind.Family)
	}
	var v any
	if err := json.Unmarshal(t.Host, &v); err != nil {
		return fmt.Errorf("host: %s", describeJSONError(t.Host, err))
	}
	out, err := t.kind.Settings.Check(v, "host")
	if err != nil {
		return fmt.Errorf("%w (docs/kinds/%s.md, \"Host settings\")", err, t.kind.Family)
	}
	t.hostSettings, _ = out.(map[string]any)
	return nil
}

// HostSettings returns the type's checked "host" settings (nil when the
// definition has none).
func (t *TypeDef) HostSettings() map[string]any { return t.hostSettings }

// validateTimeouts checks a timeouts object: its keys are "default" or
// one of hooks.
func validateTimeouts(m map[string]string, hooks []string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "default" && !contains(hooks, k) {
			return fmt.Errorf("timeouts: unknown hook %q (want default or one of %s)", k, strings.Join(hooks, ", "))
		}
		d, err := time.ParseDuration(m[k])
		if err != nil || d <= 0 {
			return fmt.Errorf("timeouts.%s: %q is not a positive Go duration such as \"10m\" or \"90s\"", k, m[k])
		}
	}
	return nil
}

// timeout returns the hook's deadline from the type's and the plugin's
// timeouts, falling back to def.
func (t *TypeDef) timeout(d *Definition, hook string, def time.Duration) time.Duration {
	for _, m := range []map[string]string{t.Timeouts, d.Timeouts} {
		if v, ok := m[hook]; ok {
			dur, _ := time.ParseDuration(v)
			return dur
		}
	}
	for _, m := range []map[string]string{t.Timeouts, d.Timeouts} {
		if v, ok := m["default"]; ok {
			dur, _ := time.ParseDuration(v)
			return dur
		}
	}
	return def
}

func (t *TypeDef) permissions(d *Definition) PermissionsDef {
	if t.Permissions != nil {
		return *t.Permissions
	}
	if d.Permissions != nil {
		return *d.Permissions
	}
	return PermissionsDef{}
}

func (t *TypeDef) main(d *Definition) string {
	if t.Main != "" {
		return t.Main
	}
	return d.Main
}

func (l *LimitsDef) validate() error {
	if l == nil {
		return nil
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"connections", l.Connections}, {"descriptors", l.Descriptors}} {
		if c.n < 0 || c.n > MaxTaskHeld {
			return fmt.Errorf("limits.%s %d: must be between 1 and %d (leave it out for the daemon's --task-%s)", c.name, c.n, MaxTaskHeld, c.name)
		}
	}
	if l.Connections > 0 && l.Descriptors > 0 && l.Connections > l.Descriptors {
		return fmt.Errorf("limits.connections %d is more than limits.descriptors %d: every connection holds a descriptor; raise descriptors too", l.Connections, l.Descriptors)
	}
	if l.Memory == "" {
		return nil
	}
	n, err := ParseSize(l.Memory)
	if err != nil {
		return fmt.Errorf("limits.memory: %w", err)
	}
	if n < MinMemoryLimit {
		return fmt.Errorf("limits.memory %q: below the minimum of %s (a worker process needs that much to start)", l.Memory, FormatSize(MinMemoryLimit))
	}
	return nil
}

// taskLimits are the per-task caps of the type's hooks: each field from
// the type's limits, else the definition's, else def (the runtime's).
// Connections raised without descriptors raise descriptors with them,
// since each connection holds one.
func (t *TypeDef) taskLimits(d *Definition, def bindings.TaskLimits) bindings.TaskLimits {
	out, connSet, descSet := def, false, false
	for _, l := range []*LimitsDef{d.Limits, t.Limits} { // the type's wins
		if l == nil {
			continue
		}
		if l.Connections > 0 {
			out.Conns, connSet = l.Connections, true
		}
		if l.Descriptors > 0 {
			out.Descriptors, descSet = l.Descriptors, true
		}
	}
	if connSet && !descSet && out.Descriptors < out.Conns {
		out.Descriptors = out.Conns
	}
	return out
}

// memoryLimit is the type's limits.memory in bytes, or 0 for the
// daemon's default.
func (t *TypeDef) memoryLimit(d *Definition) int64 {
	for _, l := range []*LimitsDef{t.Limits, d.Limits} {
		if l != nil && l.Memory != "" {
			n, _ := ParseSize(l.Memory)
			return n
		}
	}
	return 0
}
