// Package machinecontroller implements kubermatic machine-controller's
// cloud provider interface (k8c.io/machine-controller v1.65.0,
// pkg/cloudprovider/types.Provider) by calling a Lua plugin of the
// cloudproviders kind through a Loom runtime. The types are the real ones,
// imported from machine-controller: the package compile-checks against
// the interface, and machine-controller's own errors come out of it
// (errors.Is(err, ErrInstanceNotFound), errors.As(err, &TerminalError{}),
// errors.Is(err, providerconfig.ErrOSNotSupported)).
//
// machine-controller has no plugin mechanism: its providers sit in a
// package-private map in pkg/cloudprovider/provider.go, each built from
// the controller's ConfigVarResolver. A host adds an entry there that
// returns a Provider (see docs/kinds/machine-controller.md):
//
//	rt, _ := runtime.New(runtime.Options{PluginsDir: "/plugins", Bindings: std.New(std.Options{})})
//	_ = rt.Load(ctx)
//	"lua-fakecloud": func(cvr providerconfig.ConfigVarResolver) cloudprovidertypes.Provider {
//		p, err := machinecontroller.New(rt, "fakecloud", cvr)
//		...
//	},
//
// Each method runs one hook (AddDefaults: add_defaults, Validate:
// validate, Get: get, Create: create, Cleanup: cleanup,
// MachineMetricsLabels: metrics_labels, MigrateUID: migrate_uid,
// SetMetricsForMachines: set_metrics) with the Kubernetes JSON of the
// machine or spec as its input; the runtime checks input and result
// against the contract (loomd kinds cloudprovider). The fields the
// type's definition declares as ConfigVars (host.config_vars) are
// resolved through the controller's resolver first, and the hooks of
// Get, Create and Cleanup may call the controller's ProviderData
// (MachineUpdater, Kubernetes client) as self.host functions.
package machinecontroller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	cperrors "k8c.io/machine-controller/pkg/cloudprovider/errors"
	"k8c.io/machine-controller/pkg/cloudprovider/instance"
	cloudprovidertypes "k8c.io/machine-controller/pkg/cloudprovider/types"
	"k8c.io/machine-controller/sdk/apis/cluster/common"
	clusterv1alpha1 "k8c.io/machine-controller/sdk/apis/cluster/v1alpha1"
	"k8c.io/machine-controller/sdk/providerconfig"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
)

var _ cloudprovidertypes.Provider = (*Provider)(nil)

// Provider is a machine-controller cloud provider backed by one Lua
// cloudproviders type. It is safe for concurrent use (the controller runs
// several workers): each call checks out its own VM.
type Provider struct {
	t   *kindcall.Type
	rt  *runtime.Runtime
	cvr providerconfig.ConfigVarResolver
}

// New returns the provider for the loaded cloudproviders type name. cvr
// is the ConfigVarResolver machine-controller hands every provider
// factory: the fields the type declares in host.config_vars are resolved
// through it. It may be nil only for a type that declares none.
func New(rt *runtime.Runtime, name string, cvr providerconfig.ConfigVarResolver) (*Provider, error) {
	t, err := kindcall.New(rt, name, runtime.CloudProvider)
	if err != nil {
		return nil, err
	}
	return &Provider{t: t, rt: rt, cvr: cvr}, nil
}

// AddDefaults runs add_defaults with {spec} and returns the spec it
// returns (the spec unchanged when the plugin does not define it). The
// webhook writes the result back to the Machine, so the spec's ConfigVars
// reach this hook as written, never resolved: a secret must not end up
// in the Machine object.
func (p *Provider) AddDefaults(log *zap.SugaredLogger, spec clusterv1alpha1.MachineSpec) (clusterv1alpha1.MachineSpec, error) {
	var out clusterv1alpha1.MachineSpec
	err := p.call(context.Background(), log, request{hook: "add_defaults", id: spec.Name, in: map[string]any{"spec": spec}}, &out)
	if err != nil {
		return spec, err
	}
	return out, nil
}

// Validate runs validate with {spec}, its ConfigVars resolved. Its error
// rejects the Machine in the admission webhook.
func (p *Provider) Validate(ctx context.Context, log *zap.SugaredLogger, spec clusterv1alpha1.MachineSpec) error {
	r := request{hook: "validate", id: spec.Name}
	if err := p.resolved(&r, "spec", spec, nil); err != nil {
		return err
	}
	return p.call(ctx, log, r, nil)
}

// Get runs get with {machine}. A not_found error from the plugin is
// ErrInstanceNotFound, after which the controller creates the instance.
func (p *Provider) Get(ctx context.Context, log *zap.SugaredLogger, machine *clusterv1alpha1.Machine, data *cloudprovidertypes.ProviderData) (instance.Instance, error) {
	r := request{hook: "get", id: machineID(machine), data: data, machine: machine}
	if err := p.resolved(&r, "machine", machine, nil); err != nil {
		return nil, err
	}
	var out Instance
	if err := p.call(ctx, log, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Create runs create with {machine, userdata}. The controller calls Get
// then Create again after a non-terminal error: the plugin's create must
// be idempotent (tag the instance with metadata.uid).
func (p *Provider) Create(ctx context.Context, log *zap.SugaredLogger, machine *clusterv1alpha1.Machine, data *cloudprovidertypes.ProviderData, userdata string) (instance.Instance, error) {
	r := request{hook: "create", id: machineID(machine), data: data, machine: machine}
	if err := p.resolved(&r, "machine", machine, map[string]any{"userdata": userdata}); err != nil {
		return nil, err
	}
	var out Instance
	if err := p.call(ctx, log, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Cleanup runs cleanup with {machine}: true when the instance and its
// resources are gone, false to be called again (the controller waits
// 10 s).
func (p *Provider) Cleanup(ctx context.Context, log *zap.SugaredLogger, machine *clusterv1alpha1.Machine, data *cloudprovidertypes.ProviderData) (bool, error) {
	r := request{hook: "cleanup", id: machineID(machine), data: data, machine: machine}
	if err := p.resolved(&r, "machine", machine, nil); err != nil {
		return false, err
	}
	var done bool
	if err := p.call(ctx, log, r, &done); err != nil {
		return false, err
	}
	return done, nil
}

// MachineMetricsLabels runs metrics_labels with {machine}. The hook must
// not call the cloud's API; its timeout bounds it.
func (p *Provider) MachineMetricsLabels(machine *clusterv1alpha1.Machine) (map[string]string, error) {
	r := request{hook: "metrics_labels", id: machineID(machine)}
	if err := p.resolved(&r, "machine", machine, nil); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if err := p.call(context.Background(), nil, r, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// MigrateUID runs migrate_uid with {machine, new_uid}: the plugin re-tags
// the instance found by the old uid. A type whose definition sets
// host.uid_tagging must define the hook (it does not load otherwise).
func (p *Provider) MigrateUID(ctx context.Context, log *zap.SugaredLogger, machine *clusterv1alpha1.Machine, newUID types.UID) error {
	r := request{hook: "migrate_uid", id: machineID(machine)}
	if err := p.resolved(&r, "machine", machine, map[string]any{"new_uid": string(newUID)}); err != nil {
		return err
	}
	return p.call(ctx, log, r, nil)
}

// SetMetricsForMachines runs set_metrics with {machines} (the items of
// the list, as written: their ConfigVars are not resolved), every 10
// minutes.
func (p *Provider) SetMetricsForMachines(machines clusterv1alpha1.MachineList) error {
	items := machines.Items
	if items == nil {
		items = []clusterv1alpha1.Machine{}
	}
	return p.call(context.Background(), nil, request{hook: "set_metrics", in: map[string]any{"machines": items}}, nil)
}

func machineID(m *clusterv1alpha1.Machine) string {
	if m == nil {
		return ""
	}
	if m.Namespace == "" {
		return m.Name
	}
	return m.Namespace + "/" + m.Name
}

// request is one hook call: its input, the secrets resolved into it, and
// the controller's ProviderData for the host functions.
type request struct {
	hook, id string
	in       map[string]any
	secrets  []string
	data     *cloudprovidertypes.ProviderData
	machine  *clusterv1alpha1.Machine
}

// call runs a hook; a failure becomes a *kindcall.Error that also stands
// for machine-controller's error of the same meaning.
func (p *Provider) call(ctx context.Context, log *zap.SugaredLogger, r request, out any) error {
	req := kindcall.Request{Hook: r.hook, Input: r.in, ID: r.id, Secrets: r.secrets}
	if log != nil {
		req.Logger = slog.New(zapslog.NewHandler(log.Desugar().Core()))
	}
	if r.data != nil {
		req.Host = p.hostFuncs(r.data, r.machine)
	}
	err := p.t.Call(ctx, req, out)
	var ce *kindcall.Error
	if !errors.As(err, &ce) {
		return err
	}
	ce.Host = hostErrors(r.hook, ce)
	return ce
}

// settings returns the type's host settings as loaded now (a reload may
// change them).
func (p *Provider) settings() map[string]any {
	ti, err := kindcall.Lookup(p.rt, p.t.Name(), runtime.CloudProvider)
	if err != nil {
		return nil
	}
	return ti.Host
}

// hostErrors maps a call's class and reason onto machine-controller's
// errors. The controller records a terminal error's message on the
// Machine (status.errorMessage) and stops retrying; a not_found from get
// makes it create the instance; anything else is retried with backoff.
func hostErrors(hook string, ce *kindcall.Error) []error {
	var out []error
	if ce.Reason == "os_not_supported" {
		out = append(out, providerconfig.ErrOSNotSupported)
	}
	switch ce.Class {
	case runtime.ClassNotFound:
		out = append(out, cperrors.ErrInstanceNotFound)
	case runtime.ClassTerminal:
		reason := ce.Reason
		if errors.Is(ce.Err, runtime.ErrInvalidCall) {
			// The machine or spec breaks the contract: a configuration
			// problem, whichever method it reached.
			reason = string(common.InvalidConfigurationMachineError)
		}
		out = append(out, cperrors.TerminalError{Reason: terminalReason(hook, reason), Message: ce.Error()})
	}
	return out
}

// terminalReason is the plugin's reason when it is one of the
// MachineStatusError values, otherwise the one that fits the hook (the
// controller itself records CreateError for get and create, DeleteError
// for cleanup).
func terminalReason(hook, reason string) common.MachineStatusError {
	switch r := common.MachineStatusError(reason); r {
	case common.InvalidConfigurationMachineError, common.UnsupportedChangeMachineError, common.InsufficientResourcesMachineError,
		common.CreateMachineError, common.UpdateMachineError, common.DeleteMachineError, common.JoinClusterTimeoutMachineError:
		return r
	}
	switch hook {
	case "get", "create":
		return common.CreateMachineError
	case "cleanup":
		return common.DeleteMachineError
	case "migrate_uid":
		return common.UpdateMachineError
	default:
		return common.InvalidConfigurationMachineError
	}
}

// Instance is the instance a get or create hook returned: machine-
// controller's instance.Instance.
type Instance struct {
	InstanceName       string                            `json:"name"`
	InstanceID         string                            `json:"id"`
	InstanceProviderID string                            `json:"provider_id"`
	InstanceAddresses  map[string]corev1.NodeAddressType `json:"addresses"`
	InstanceStatus     instance.Status                   `json:"status"`
}

var _ instance.Instance = (*Instance)(nil)

// Name is the instance's name.
func (i *Instance) Name() string { return i.InstanceName }

// ID is the cloud's id of the instance.
func (i *Instance) ID() string { return i.InstanceID }

// ProviderID is the Node's expected spec.providerID; empty means none.
func (i *Instance) ProviderID() string { return i.InstanceProviderID }

// Addresses maps each address to its kind (InternalIP, ExternalIP ...).
func (i *Instance) Addresses() map[string]corev1.NodeAddressType {
	out := make(map[string]corev1.NodeAddressType, len(i.InstanceAddresses))
	for a, t := range i.InstanceAddresses {
		out[a] = t
	}
	return out
}

// Status is running, creating, deleting, deleted or unknown (the
// default when the plugin gives none).
func (i *Instance) Status() instance.Status {
	if i.InstanceStatus == "" {
		return instance.StatusUnknown
	}
	return i.InstanceStatus
}

func (i *Instance) String() string {
	return fmt.Sprintf("instance %s (id %s, %s)", i.InstanceName, i.InstanceID, i.Status())
}
