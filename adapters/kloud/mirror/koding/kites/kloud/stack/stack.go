// Package stack mirrors the types of koding/kites/kloud/stack (at
// koding/koding 74c20cb0) that kloud's provider API takes and returns:
// credentials, templates, machines, the requests of the stack kite
// methods, credential descriptions and errors.
package stack

import (
	"errors"
	"fmt"
	"sort"

	"github.com/loomrt/loom/adapters/kloud/mirror/github.com/koding/kite"
	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/machinestate"
)

// KiteMap maps resource names to the kite IDs they own (stackmethods.go).
type KiteMap map[string]string

// Credential is a jCredential's data; Credential and Bootstrap are of the
// provider's schema types (stackmethods.go).
type Credential struct {
	Title      string
	Provider   string
	Identifier string
	Credential interface{}
	Bootstrap  interface{}
}

// SSHKeyPair is a generated SSH key pair (stackmethods.go).
type SSHKeyPair struct {
	Name    string `json:"ssh_key_name"`
	Private []byte `json:"ssh_private_key"`
	Public  []byte `json:"ssh_public_key"`
}

// Machine is a jComputeStack machine: what plan found in a template and
// apply filled in (stackmethods.go).
type Machine struct {
	Provider   string            `json:"provider"`
	Label      string            `json:"label"`
	Attributes map[string]string `json:"attributes"`
	Credential *Credential       `json:"-"`

	QueryString string                 `json:"queryString,omitempty"`
	RegisterURL string                 `json:"registerURL,omitempty"`
	State       machinestate.State     `json:"state,omitempty"`
	StateReason string                 `json:"stateReason,omitempty"`
	Meta        map[string]interface{} `json:"meta,omitempty"`
}

// Machines maps labels to machines (stackmethods.go).
type Machines map[string]*Machine

// Slice lists the machines sorted by label.
func (m Machines) Slice() []*Machine {
	labels := make([]string, 0, len(m))
	for l := range m {
		labels = append(labels, l)
	}
	sort.Strings(labels)
	out := make([]*Machine, 0, len(m))
	for _, l := range labels {
		out = append(out, m[l])
	}
	return out
}

// Template is a JSON Terraform template and its terraformer key
// (stackmethods.go).
type Template struct {
	Key     string // unique terraformer key for a given template; optional
	Content string // terraformer template content; required
}

// Validator is implemented by schema values that can check themselves
// (stackmethods.go).
type Validator interface {
	Valid() error
}

// InfoResponse is the result of the info kite method (stackmethods.go).
type InfoResponse struct {
	State        machinestate.State `json:"State"`
	Name         string             `json:"name,omitempty"`
	InstanceType string             `json:"instanceType,omitempty"`
}

// ApplyRequest is the argument of the apply kite method (stackmethods.go).
type ApplyRequest struct {
	Provider    string              `json:"provider"`
	StackID     string              `json:"stackId"`
	GroupName   string              `json:"groupName"`
	Credentials map[string][]string `json:"credentials,omitempty"`
	Variables   map[string]string   `json:"variables,omitempty"`
	Destroy     bool
}

// Valid checks the request as kloud does.
func (req *ApplyRequest) Valid() error {
	if req.StackID == "" {
		return errors.New("stackId is empty")
	}
	if req.GroupName == "" {
		return errors.New("group name is empty")
	}
	return nil
}

// AuthenticateRequest is the argument of the authenticate kite method
// (stackmethods.go).
type AuthenticateRequest struct {
	Provider    string   `json:"provider"`
	Identifiers []string `json:"identifiers"`
	GroupName   string   `json:"groupName"`
}

// Valid checks the request as kloud does.
func (req *AuthenticateRequest) Valid() error {
	if len(req.Identifiers) == 0 {
		return errors.New("identifiers are not passed")
	}
	if req.GroupName == "" {
		return errors.New("group name is not passed")
	}
	return nil
}

// AuthenticateResult is one credential's verification (stackmethods.go).
type AuthenticateResult struct {
	Verified bool   `json:"verified"`
	Message  string `json:"message,omitempty"`
}

// AuthenticateResponse maps identifiers to their results.
type AuthenticateResponse map[string]*AuthenticateResult

// BootstrapRequest is the argument of the bootstrap kite method
// (stackmethods.go).
type BootstrapRequest struct {
	Provider    string   `json:"provider"`
	Identifiers []string `json:"identifiers"`
	GroupName   string   `json:"groupName"`
	Destroy     bool
}

// Valid checks the request as kloud does.
func (req *BootstrapRequest) Valid() error {
	if len(req.Identifiers) == 0 {
		return errors.New("identifiers are not passed")
	}
	if req.GroupName == "" {
		return errors.New("group name is not passed")
	}
	return nil
}

// Description describes a provider's credential and bootstrap types for
// the credential.describe kite method (credential.go).
type Description struct {
	Provider   string   `json:"provider,omitempty"`
	Credential []Value  `json:"credential"`
	Bootstrap  []Value  `json:"bootstrap,omitempty"`
	UserData   []string `json:"userData,omitempty"`
	CloudInit  bool     `json:"cloudInit"`
}

// Enumer is a value with a limited set of values (credential.go).
type Enumer interface {
	Enums() []Enum
}

// Enum is one enum value (credential.go).
type Enum struct {
	Title string      `json:"title,omitempty"`
	Value interface{} `json:"value"`
}

// Enums is an enum list (credential.go).
type Enums []Enum

// Value describes one field of a credential or bootstrap type
// (credential.go).
type Value struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Label    string `json:"label"`
	Secret   bool   `json:"secret"`
	ReadOnly bool   `json:"readOnly"`
	Values   Enums  `json:"values,omitempty"`
}

// Error is an expected stack error: kloud logs it (errors.go).
type Error struct {
	Err error
}

// Error is the wrapped error's message.
func (e *Error) Error() string { return e.Err.Error() }

// The kloud error codes the adapter and its tests use (errors.go).
const (
	ErrMachineNotFound       = 106
	ErrMachineNotImplemented = 412
	ErrStackNotImplemented   = 413
	ErrCredentialIsMissing   = 414
)

var kloudErrors = map[int]string{
	ErrMachineNotFound:       "Machine is not found",
	ErrMachineNotImplemented: "Provider doesn't implement the machine interface",
	ErrStackNotImplemented:   "Provider doesn't implement the stack interface",
	ErrCredentialIsMissing:   "Credential is missing",
}

// NewError returns the kite error of a kloud error code (errors.go). It
// panics for a code it has no message for, as kloud's does.
func NewError(errorCode int) *kite.Error {
	msg, ok := kloudErrors[errorCode]
	if !ok {
		panic(fmt.Sprintf("no message is defined for error code %d", errorCode))
	}
	code := fmt.Sprint(errorCode)
	return &kite.Error{Type: "kloudError", Message: msg + " (error code: " + code + ")", CodeVal: code}
}
