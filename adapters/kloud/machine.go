package kloud

import (
	"context"
	"fmt"
)

// luaMachine is the provider's Machine for one machine: kloud builds a
// BaseMachine (the machine's document, its typed credential, bootstrap
// and metadata) and hands it to the provider's Machine constructor.
type luaMachine struct {
	a  *adapter
	bm *kBaseMachine
}

var _ kMachine = (*luaMachine)(nil)

// newMachine checks what kloud decoded for the machine, as kloud checks a
// Go provider's values that implement Valid(): the metadata
// (valid_metadata), the credential and the bootstrap. An error here is
// the error of kloud's start, stop or info.
func (a *adapter) newMachine(bm *kBaseMachine) (kMachine, error) {
	m := &luaMachine{a: a, bm: bm}
	id := m.id()
	if err := a.validate("valid_metadata", id, bm.Metadata, a.schema.metadata); err != nil {
		return nil, err
	}
	if err := a.validate("valid_credential", id, bm.Credential, a.schema.credential); err != nil {
		return nil, err
	}
	if a.schema.bootstrap != nil && !empty(bm.Bootstrap) {
		if err := a.validate("valid_bootstrap", id, bm.Bootstrap, a.schema.bootstrap); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// id names the machine in the plugin's logs.
func (m *luaMachine) id() string {
	if m.bm.Machine == nil {
		return ""
	}
	return m.bm.Label
}

// in is the machine hooks' MachineRequest.
func (m *luaMachine) in() (map[string]any, []string) {
	bm := m.bm
	c := &kCredential{Provider: bm.Provider, Credential: bm.Credential, Bootstrap: bm.Bootstrap}
	machine := map[string]any{}
	if bm.Machine != nil {
		c.Identifier = bm.Machine.Credential
		machine = map[string]any{
			"label": bm.Label, "uid": bm.Uid, "provider": bm.Machine.Provider, "query_string": bm.QueryString,
			"ip_address": bm.IpAddress, "register_url": bm.RegisterURL, "state": bm.State().String(),
		}
		if meta := map[string]any(bm.Meta); len(meta) > 0 {
			machine["meta"] = meta
		}
	}
	in := map[string]any{"credential": m.a.credentialIn(c), "machine": machine}
	if md := toLua(bm.Metadata); md != nil {
		in["metadata"] = md
	}
	return in, m.a.secrets(c)
}

// Start runs start: kloud's start calls Info first, and Start only when
// the machine is neither running nor starting; then it waits for Klient.
// The returned table is patched onto the machine's stored metadata.
func (m *luaMachine) Start(ctx context.Context) (interface{}, error) { return m.action(ctx, "start") }

// Stop runs stop: kloud calls it unless Info says stopping or stopped.
func (m *luaMachine) Stop(ctx context.Context) (interface{}, error) { return m.action(ctx, "stop") }

func (m *luaMachine) action(ctx context.Context, hook string) (interface{}, error) {
	in, secrets := m.in()
	var patch map[string]any
	if err := m.a.call(ctx, hook, m.id(), in, &patch, secrets...); err != nil {
		return nil, kloudError(err)
	}
	return metadataPatch(patch), nil
}

// Info runs info: the machine's real state, and a metadata patch. A
// not_found error (or code 106) is kloud's ErrMachineNotFound.
func (m *luaMachine) Info(ctx context.Context) (kMachineState, interface{}, error) {
	in, secrets := m.in()
	var out struct {
		State    string         `json:"state"`
		Metadata map[string]any `json:"metadata"`
	}
	if err := m.a.call(ctx, "info", m.id(), in, &out, secrets...); err != nil {
		return 0, nil, kloudError(err)
	}
	st, ok := machineStates[out.State]
	if !ok {
		// The contract's result check lists the states; this guards a
		// mirror that knows fewer.
		return 0, nil, fmt.Errorf("%s info: unknown machine state %q", m.a.t.Name(), out.State)
	}
	return st, metadataPatch(out.Metadata), nil
}

// metadataPatch is a hook's metadata for kloud, which patches non-nil
// metadata onto the stored document: nil when the hook returned none.
func metadataPatch(m map[string]any) interface{} {
	if len(m) == 0 {
		return nil
	}
	return m
}
