//go:build !koding

package kloud

// The kloud names the adapter uses, from the mirror of koding/koding's
// packages (mirror/, file and commit named there). Built inside a Koding
// tree with -tags koding, seam_koding.go takes them from the real
// packages instead; the rest of the adapter only uses these names.

import (
	"github.com/loomrt/loom/adapters/kloud/mirror/github.com/koding/kite"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack/provider"
)

// Koding reports whether the adapter was built against Koding's own
// packages (-tags koding) rather than the mirror.
const Koding = false

type (
	// Provider is kloud's provider.Provider: what provider.Register takes.
	Provider = provider.Provider

	kBaseStack    = provider.BaseStack
	kBaseMachine  = provider.BaseMachine
	kStack        = provider.Stack
	kMachine      = provider.Machine
	kSchema       = provider.Schema
	kCredential   = stack.Credential
	kTemplate     = stack.Template
	kMachineState = machinestate.State
	kStackMachine = stack.Machine
	kApplyRequest = stack.ApplyRequest
	kStackError   = stack.Error
	kEnum         = stack.Enum
	kEnumer       = stack.Enumer
	kKiteError    = kite.Error
)

var (
	registerProvider = provider.Register
	machineStates    = machinestate.States
)

const stateNotInitialized = machinestate.NotInitialized
