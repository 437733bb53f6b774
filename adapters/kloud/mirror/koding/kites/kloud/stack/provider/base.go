package provider

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/loomrt/loom/adapters/kloud/mirror/github.com/koding/kite"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/db/models"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
)

// DefaultKlientTimeout is how long kloud waits for a machine's Klient
// (machine.go).
const DefaultKlientTimeout = 5 * time.Minute

// BaseStack is what kloud builds around a provider's Stack for one kite
// request (provider.go): the request, its argument, the template being
// built, and the helpers a provider's ApplyTemplate uses. The fields
// kloud has for MongoDB, the eventer, the terraformer session and SSH
// keys are left out.
type BaseStack struct {
	Req      *kite.Request
	Builder  *Builder
	Provider *Provider

	// Arg is the kite method's argument: *stack.ApplyRequest,
	// *stack.BootstrapRequest or *stack.AuthenticateRequest.
	Arg        interface{}
	Credential interface{}
	Bootstrap  interface{}

	Planner   *Planner
	KlientIDs stack.KiteMap
	Metas     map[string]map[string]interface{}
	TunnelURL string

	Debug   bool
	TraceID string

	// SSHKeyPairFunc asks kloud to generate an SSH key pair for
	// bootstrap.
	SSHKeyPairFunc func(keypair *stack.SSHKeyPair) error

	// Keycreator creates a kite key for a user and a kite ID. Mirror only:
	// kloud's is bs.Session.Userdata.Keycreator (a JWT signed with kloud's
	// key); the test host supplies its own.
	Keycreator func(username, kiteID string) (string, error)
}

// Builder holds what kloud built for a request (builder.go): here, the
// template being applied.
type Builder struct {
	Template *Template
}

// Planner holds kloud's plan settings (stackplan.go): here, how long to
// wait for Klient.
type Planner struct {
	Provider      string
	ResourceType  string
	KlientTimeout time.Duration
}

// BaseMachine is what kloud builds around a provider's Machine (provider.go):
// the machine's document, its typed credential, bootstrap and metadata.
// The MongoDB session and the eventer are left out.
type BaseMachine struct {
	*models.Machine

	Credential interface{}
	Bootstrap  interface{}
	Metadata   interface{}

	KlientTimeout time.Duration
	Provider      string
	TraceID       string
	Debug         bool
	User          *models.User
	Req           *kite.Request
}

// ProviderName is the machine's provider.
func (bm *BaseMachine) ProviderName() string { return bm.Provider }

// Username is the name of the user owning the machine or making the
// request.
func (bm *BaseMachine) Username() string {
	if bm.User != nil {
		return bm.User.Name
	}
	if bm.Req != nil {
		return bm.Req.Username
	}
	return ""
}

// State is the machine's stored state.
func (bm *BaseMachine) State() machinestate.State { return machinestate.States[bm.Status.State] }

// BuildKiteKey creates a kite key for a new Klient of the machine label,
// and records the kite's ID for kloud to dial after apply (apply.go).
func (bs *BaseStack) BuildKiteKey(label, username string) (string, error) {
	if bs.Keycreator == nil {
		return "", errors.New("no kite key creator")
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	kiteID := hex.EncodeToString(id)
	key, err := bs.Keycreator(username, kiteID)
	if err != nil {
		return "", err
	}
	if bs.KlientIDs == nil {
		bs.KlientIDs = make(stack.KiteMap)
	}
	bs.KlientIDs[label] = kiteID
	return key, nil
}
