// Package provider mirrors koding/kites/kloud/stack/provider (at
// koding/koding 74c20cb0): how a kloud provider registers (Register,
// Provider, Schema), the interfaces it implements (Stack, Machine), and
// the base values kloud builds around it (BaseStack, BaseMachine, the
// template and user-data helpers).
package provider

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
)

var (
	providersMu   sync.RWMutex
	providers     = make(map[string]*Provider)
	providerDescs = make(map[string]*stack.Description)
)

// Register registers p (provider.go). It panics on a nil provider, an
// empty name or a name registered already, and records the provider's
// description for credential.describe.
func Register(p *Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if p == nil {
		panic("stack: Register provider is nil")
	}
	if p.Name == "" {
		panic("stack: Register provider name is empty")
	}
	if _, dup := providers[p.Name]; dup {
		panic("stack: Register called twice for " + p.Name)
	}
	providers[p.Name] = p
	providerDescs[p.Name] = &stack.Description{
		Provider:   p.Name,
		Credential: mustDescribe(p.Schema.newCredential()),
		Bootstrap:  mustDescribe(p.Schema.newBootstrap()),
		UserData:   p.userdataPath(),
		CloudInit:  !p.NoCloudInit,
	}
}

// Unregister removes a provider. Mirror only (kloud registers providers
// once, at init): the tests register the same Lua type more than once.
func Unregister(name string) {
	providersMu.Lock()
	defer providersMu.Unlock()
	delete(providers, name)
	delete(providerDescs, name)
}

// All lists the registered providers (provider.go), sorted by name here.
func All() []*Provider {
	providersMu.RLock()
	defer providersMu.RUnlock()
	all := make([]*Provider, 0, len(providers))
	for _, p := range providers {
		all = append(all, p)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all
}

// Desc returns the descriptions of the named providers, or of all
// (provider.go).
func Desc(names ...string) map[string]*stack.Description {
	providersMu.RLock()
	defer providersMu.RUnlock()
	out := make(map[string]*stack.Description)
	var want []string
	for _, n := range names {
		if n != "" {
			want = append(want, n)
		}
	}
	if len(want) == 0 {
		for k, v := range providerDescs {
			out[k] = v
		}
		return out
	}
	for _, k := range want {
		if v, ok := providerDescs[k]; ok {
			out[k] = v
		}
	}
	return out
}

// Provider describes a kloud provider (provider.go).
type Provider struct {
	// Name is the provider's name. Required.
	Name string
	// ResourceName is the machine resource's name; default "instance".
	ResourceName string
	// Userdata is the machine resource's user-data field; default
	// "user_data".
	Userdata string
	// UserdataPath is the JSON path to each machine's user data; default
	// {Name + "_" + ResourceName, "*", Userdata}.
	UserdataPath []string
	// NoCloudInit is set by providers whose machines run no cloud-init.
	NoCloudInit bool
	// Machine creates the value managing one machine. Required.
	Machine func(*BaseMachine) (Machine, error)
	// Stack creates the value handling a user's templates. Required.
	Stack func(*BaseStack) (Stack, error)
	// Schema types the credential, bootstrap and metadata; nil means
	// DefaultSchema.
	Schema *Schema
}

// DefaultSchema is used when a provider has no Schema (provider.go): a
// free-form credential, no bootstrap, the machine's attributes as its
// metadata.
var DefaultSchema = &Schema{
	NewCredential: func() interface{} { return make(map[string]interface{}) },
	NewBootstrap:  nil,
	NewMetadata: func(m *stack.Machine) interface{} {
		if m == nil {
			return make(map[string]interface{})
		}
		return m.Attributes
	},
}

// Schema types the data kloud moves for a provider (provider.go).
type Schema struct {
	// NewCredential makes the value a credential is decoded into.
	NewCredential func() (credential interface{})
	// NewBootstrap makes the value bootstrap outputs are decoded into;
	// nil (or a nil value) means no bootstrap data is read or written.
	NewBootstrap func() (bootstrap interface{})
	// NewMetadata makes a machine's metadata from what apply found, or a
	// zero value for a nil machine.
	NewMetadata func(*stack.Machine) (metadata interface{})
}

// Stack is what a provider implements for stacks (provider.go).
type Stack interface {
	VerifyCredential(*stack.Credential) error
	BootstrapTemplates(*stack.Credential) ([]*stack.Template, error)
	ApplyTemplate(*stack.Credential) (*stack.Template, error)
}

// Machine is what a provider implements for machines (provider.go).
// kloud's is declared with golang.org/x/net/context, an alias of
// context.Context since Go 1.9.
type Machine interface {
	Start(context.Context) (metadata interface{}, err error)
	Stop(context.Context) (metadata interface{}, err error)
	Info(context.Context) (state machinestate.State, metadata interface{}, err error)
}

func (p *Provider) resourceName() string {
	if p.ResourceName != "" {
		return p.ResourceName
	}
	return "instance"
}

func (p *Provider) userdata() string {
	if p.Userdata != "" {
		return p.Userdata
	}
	return "user_data"
}

func (p *Provider) userdataPath() []string {
	if p.UserdataPath != nil {
		return p.UserdataPath
	}
	return []string{p.Name + "_" + p.resourceName(), "*", p.userdata()}
}

func (ps *Schema) newCredential() interface{} {
	if ps != nil && ps.NewCredential != nil {
		return ps.NewCredential()
	}
	return DefaultSchema.NewCredential()
}

func (ps *Schema) newBootstrap() interface{} {
	if ps != nil && ps.NewBootstrap != nil {
		return ps.NewBootstrap()
	}
	return nil
}

func (ps *Schema) newMetadata(m *stack.Machine) interface{} {
	if ps != nil && ps.NewMetadata != nil {
		return ps.NewMetadata(m)
	}
	return DefaultSchema.NewMetadata(m)
}

// The exported forms below are mirror only: kloud calls the unexported
// ones from inside its package (Stacker, BaseStack); the test host that
// stands in for kloud lives in another package.

// NewCredentialValue is p.Schema's credential value, or the default's.
func (p *Provider) NewCredentialValue() interface{} { return p.Schema.newCredential() }

// NewBootstrapValue is p.Schema's bootstrap value, or nil.
func (p *Provider) NewBootstrapValue() interface{} { return p.Schema.newBootstrap() }

// NewMetadataValue is p.Schema's metadata for m, or the default's.
func (p *Provider) NewMetadataValue(m *stack.Machine) interface{} { return p.Schema.newMetadata(m) }

// ResourceType is the machine resource's name ("instance").
func (p *Provider) ResourceType() string { return p.resourceName() }

// UserdataField is the machine resource's user-data field.
func (p *Provider) UserdataField() string { return p.userdata() }

func mustDescribe(v interface{}) []stack.Value {
	desc, err := Describe(v)
	if err != nil {
		panic(fmt.Errorf("unable to create description for %T: %s", v, err))
	}
	return desc
}
