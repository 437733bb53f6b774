// Package kloud serves a Lua plugin of the kloudproviders kind as a
// Koding kloud provider: New builds the provider.Provider value a Go
// provider's init() hands provider.Register (Name, ResourceName, Userdata,
// UserdataPath, NoCloudInit, Schema, and the Stack and Machine
// constructors), and Register registers it, as Koding's example provider
// does. Its Stack (VerifyCredential, BootstrapTemplates, ApplyTemplate)
// and Machine (Start, Stop, Info) call the plugin's hooks through
// runtime/kindcall, and supply around them what a Go provider gets from
// kloud's helpers:
//
//   - the credential, bootstrap and metadata types, built from the
//     plugin's schema hook, so kloud decodes, describes (credential.describe)
//     and stores them as it does a Go provider's structs;
//   - their validation (the valid_* hooks) wherever kloud would call a
//     Go value's Valid();
//   - ApplyTemplate's work around the plugin's apply_template: each
//     machine's Klient cloud-init and kite key (BaseStack.BuildUserdata),
//     or the kite keys alone for clouds without cloud-init, and the
//     credential's secret variables shadowed in the resources
//     (Template.ShadowVariables).
//
// koding/koding is an archived GOPATH tree that no module can require, so
// the adapter compiles against a mirror of the kloud packages it uses
// (mirror/, file and commit named in each); inside a Koding tree, -tags
// koding compiles it against the real ones (docs/kinds/kloud.md). The
// package kloudtest drives a registered provider the way kloud's stack
// and machine handlers do.
package kloud

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
)

// Options configure the providers New builds.
type Options struct {
	// Context is the parent of the stack hooks' calls: kloud's Stack
	// methods take no context. Cancelling it (kloud shutting down) stops
	// them. Default context.Background(); each hook is bounded by its
	// timeout in the plugin's definition either way. Machine hooks get
	// kloud's context.
	Context context.Context
	// Logger receives the plugin's log lines, each with the call's
	// provider, hook and identifier. Default: the runtime's logger.
	Logger *slog.Logger
}

// adapter is one Lua type served as a kloud provider.
type adapter struct {
	t        *kindcall.Type
	opts     Options
	p        *Provider
	schema   *schema
	settings settings
}

// settings are the type's host settings (docs/kinds/kloudprovider.md).
type settings struct {
	ProviderName string   `json:"provider_name"`
	ResourceName string   `json:"resource_name"`
	Userdata     string   `json:"userdata"`
	UserdataPath []string `json:"userdata_path"`
	NoCloudInit  bool     `json:"no_cloud_init"`
}

// New builds the provider for the loaded kloudproviders type name,
// without registering it: its Name is the type's host.provider_name
// (default: the type's name), its Schema the types the plugin's schema
// hook describes. The schema is read once, here: kloud registers a
// provider once, so a reload of the plugin changes its hooks but not its
// schema.
func New(rt *runtime.Runtime, name string, opts Options) (*Provider, error) {
	t, err := kindcall.New(rt, name, runtime.KloudProvider)
	if err != nil {
		return nil, err
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	ti, err := kindcall.Lookup(rt, name, runtime.KloudProvider)
	if err != nil {
		return nil, fmt.Errorf("kloud: %w", err)
	}
	a := &adapter{t: t, opts: opts}
	if err := decodeJSON(ti.Host, &a.settings); err != nil {
		return nil, fmt.Errorf("kloud: %s: host settings: %w", name, err)
	}
	var described luaSchema
	if err := a.call(opts.Context, "schema", name, nil, &described); err != nil {
		return nil, fmt.Errorf("kloud: %s: reading its schema: %w", name, err)
	}
	if a.schema, err = buildSchema(described); err != nil {
		return nil, fmt.Errorf("kloud: %s: its schema: %w", name, err)
	}
	pname := a.settings.ProviderName
	if pname == "" {
		pname = name
	}
	a.p = &Provider{
		Name:         pname,
		ResourceName: a.settings.ResourceName,
		Userdata:     a.settings.Userdata,
		UserdataPath: a.settings.UserdataPath,
		NoCloudInit:  a.settings.NoCloudInit,
		Machine:      a.newMachine,
		Stack:        a.newStack,
		Schema:       a.schema.kloudSchema(),
	}
	return a.p, nil
}

// Register builds the provider for the type name and registers it with
// kloud (provider.Register). kloud's Register panics on a duplicate name;
// here that is an error.
func Register(rt *runtime.Runtime, name string, opts Options) (p *Provider, err error) {
	if p, err = New(rt, name, opts); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("kloud: registering %s as provider %q: %v", name, p.Name, r)
		}
	}()
	registerProvider(p)
	return p, nil
}

// RegisterAll registers every loaded kloudproviders type, in name order.
// It stops at the first that fails and returns those registered before.
func RegisterAll(rt *runtime.Runtime, opts Options) ([]*Provider, error) {
	var names []string
	for _, ti := range rt.Types() {
		if ti.Family == runtime.KloudProvider {
			names = append(names, ti.Name)
		}
	}
	sort.Strings(names)
	var out []*Provider
	for _, n := range names {
		p, err := Register(rt, n, opts)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// call runs a hook. Input nil means {}.
func (a *adapter) call(ctx context.Context, hook, id string, in map[string]any, out any, secrets ...string) error {
	return a.t.Call(ctx, kindcall.Request{Hook: hook, Input: in, ID: id, Logger: a.opts.Logger, Secrets: secrets}, out)
}

// kloudError is what kloud gets for a hook's error: a kite error with
// the code when the plugin gave one ({code = 412}) or the hook is a
// machine hook that found no machine (code 106, kloud's
// ErrMachineNotFound), else the *kindcall.Error itself (type, hook,
// class, message, Lua traceback).
func kloudError(err error) error {
	var ce *kindcall.Error
	if !errors.As(err, &ce) {
		return err
	}
	code := ce.Code
	if code == 0 && ce.Class == runtime.ClassNotFound {
		code = 106
	}
	if code == 0 {
		return err
	}
	c := strconv.Itoa(code)
	return &kKiteError{Type: "kloudError", Message: fmt.Sprintf("%s %s: %s (error code: %s)", ce.Type, ce.Hook, ce.Message, c), CodeVal: c}
}
