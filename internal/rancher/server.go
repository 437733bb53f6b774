// Package rancher serves a Lua clusterdrivers plugin type as a Rancher
// kontainer-engine cluster driver: the gRPC service types.Driver
// (driverpb), each RPC mapped onto one hook of the clusterdriver kind and
// run through the runtime's calls (runtime.Runtime.Call), which check the
// input, answer for absent optional hooks as the contract says, and check
// the result. This package converts between the protocol's messages and
// the hooks' tables, and turns call errors into the gRPC statuses a Go
// driver's errors become (code Unknown: Rancher shows the bare message).
package rancher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/loomrt/loom/internal/rancher/driverpb"
	"github.com/loomrt/loom/runtime"
)

// Caller runs one hook of a called kind; *runtime.Runtime is one.
type Caller interface {
	Call(ctx context.Context, c *runtime.CallRequest) (*runtime.CallResult, error)
}

// Method pairs an RPC of types.Driver with the clusterdriver hook it runs.
type Method struct {
	// RPC is the method name on the wire (/types.Driver/<RPC>).
	RPC string
	// Hook is the clusterdriver hook (docs/kinds/clusterdriver.md).
	Hook string
}

// Methods lists every RPC of types.Driver and the hook it calls, in the
// service's order. Each hook of the clusterdriver kind appears once.
var Methods = []Method{
	{"Create", "create"},
	{"Update", "update"},
	{"PostCheck", "post_check"},
	{"Remove", "remove"},
	{"GetDriverCreateOptions", "create_options"},
	{"GetDriverUpdateOptions", "update_options"},
	{"GetVersion", "get_version"},
	{"SetVersion", "set_version"},
	{"GetNodeCount", "get_cluster_size"},
	{"SetNodeCount", "set_cluster_size"},
	{"GetCapabilities", "capabilities"},
	{"ETCDSave", "etcd_save"},
	{"ETCDRestore", "etcd_restore"},
	{"ETCDRemoveSnapshot", "etcd_remove_snapshot"},
	{"GetK8sCapabilities", "k8s_capabilities"},
	{"RemoveLegacyServiceAccount", "remove_legacy_service_account"},
}

// Server implements driverpb.DriverServer for one plugin type.
type Server struct {
	driverpb.UnimplementedDriverServer
	caller Caller
	typ    string
	logger *slog.Logger
	prefix string
	seq    atomic.Uint64
}

// NewServer returns a Driver service that calls the hooks of the
// clusterdrivers type typ through caller. Logs (one line per RPC) go to
// logger; nil discards them.
func NewServer(caller Caller, typ string, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{caller: caller, typ: typ, logger: logger,
		prefix: fmt.Sprintf("rancher-%s-%d-", typ, os.Getpid())}
}

// Register adds the Driver service to g, and gRPC server reflection as
// kontainer-engine's own server does (grpcurl can list the service).
func (s *Server) Register(g *grpc.Server) {
	driverpb.RegisterDriverServer(g, s)
	reflection.Register(g)
}

// call runs hook with input. A failed hook gives its result (a partial
// create's) and a status error; a call that could not run gives a status
// error and no result.
func (s *Server) call(ctx context.Context, rpc, hook string, input map[string]any) (any, error) {
	raw, err := json.Marshal(input)
	if err != nil {
		return nil, status.Errorf(codes.Unknown, "%s %s: encoding the input: %v", s.typ, hook, err)
	}
	id := s.prefix + fmt.Sprint(s.seq.Add(1))
	res, err := s.caller.Call(ctx, &runtime.CallRequest{CallID: id, Type: s.typ, Hook: hook, Input: raw})
	if err != nil {
		s.logger.Error("rpc failed", "rpc", rpc, "hook", hook, "call", id, "error", err)
		return nil, s.hostError(ctx, hook, id, err)
	}
	if res.Status == 0 {
		s.logger.Info("rpc", "rpc", rpc, "hook", hook, "call", id, "defaulted", res.Defaulted, "duration_ms", res.DurationMS)
		return res.Result, nil
	}
	attrs := []any{"rpc", rpc, "hook", hook, "call", id, "class", res.Error.Class, "message", res.Message}
	if res.Error.Reason != "" {
		attrs = append(attrs, "reason", res.Error.Reason)
	}
	if res.Stderr != "" {
		attrs = append(attrs, "traceback", res.Stderr)
	}
	s.logger.Error("rpc failed", attrs...)
	return res.Result, hookError(s.typ, hook, res.Error, id)
}

// Code is the gRPC status code of a hook's error: always Unknown, the code
// grpc-go gives an ordinary Go error, which is what a Go driver's failure
// becomes on the wire. kontainer-engine's client (types/rpc_client.go,
// handlErr) turns Unknown with a message into errors.New(message), so
// Rancher shows the bare text as it does for a Go driver; any other code
// would reach it as "rpc error: code = ... desc = ...". The class and
// reason travel in the status's ErrorInfo detail for clients that read
// details.
func Code(*runtime.CallError) codes.Code { return codes.Unknown }

// hookError is the status of a hook's error. Its ErrorInfo detail
// (domain loom.clusterdriver) carries the class and reason for clients
// that read details; Rancher's reads the message only.
func hookError(typ, hook string, e *runtime.CallError, callID string) error {
	reason := e.Reason
	if reason == "" {
		reason = e.Class
	}
	md := map[string]string{"class": e.Class, "type": typ, "hook": hook}
	if e.Reason != "" {
		md["reason"] = e.Reason
	}
	return withInfo(status.New(Code(e), errorText(typ, hook, e)), reason, md, callID)
}

// withInfo adds the ErrorInfo detail to st.
func withInfo(st *status.Status, reason string, md map[string]string, callID string) error {
	if callID != "" {
		md["call_id"] = callID
	}
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: "loom.clusterdriver", Metadata: md}); err == nil {
		st = d
	}
	return st.Err()
}

// errorText is what Rancher shows: the type, the hook and the message.
func errorText(typ, hook string, e *runtime.CallError) string {
	return fmt.Sprintf("%s %s: %s", typ, hook, e.Message)
}

// hostError maps an error of a call that could not run. The caller's own
// cancellation and deadline keep their gRPC codes (the client sees its
// own context's error anyway); everything else is Unknown, as a Go
// driver's error would be, so Rancher shows the bare message. The
// ErrorInfo reason says which: INVALID_CALL (the request does not fit
// the contract: the same request fails every time), UNAVAILABLE (the
// type is not loaded, the runtime is closing), INTERNAL.
func (s *Server) hostError(ctx context.Context, hook, callID string, err error) error {
	code, reason := codes.Unknown, "internal"
	switch {
	case errors.Is(err, runtime.ErrCancelled) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		code, reason = codes.DeadlineExceeded, "cancelled"
	case errors.Is(err, runtime.ErrCancelled):
		code, reason = codes.Canceled, "cancelled"
	case errors.Is(err, runtime.ErrInvalidCall):
		reason = "invalid_call"
	case errors.Is(err, runtime.ErrClosed), errors.Is(err, runtime.ErrPluginNotFound):
		reason = "unavailable"
	}
	md := map[string]string{"type": s.typ, "hook": hook}
	return withInfo(status.Newf(code, "%s %s: %v", s.typ, hook, err), reason, md, callID)
}

// Create runs create. A create that failed with a partial cluster_info
// answers OK with create_error set, as kontainer-engine's server helper
// does: Rancher keeps the info (and its metadata) for the retry, and its
// client turns create_error back into an error.
func (s *Server) Create(ctx context.Context, req *driverpb.CreateRequest) (*driverpb.ClusterInfo, error) {
	in := map[string]any{"options": optionsIn(req.GetDriverOptions())}
	if req.GetClusterInfo() != nil {
		ci := clusterInfoIn(req.GetClusterInfo())
		// The host owns create_error: the failure it recorded is the
		// reason for this retry, not part of the cluster.
		delete(ci, "create_error")
		in["cluster_info"] = ci
	}
	out, err := s.call(ctx, "Create", "create", in)
	if err != nil && out != nil {
		ci, cerr := clusterInfoOut(out)
		if cerr != nil {
			return nil, s.resultError("create", cerr)
		}
		ci.CreateError = status.Convert(err).Message()
		return ci, nil
	}
	ci, err := s.clusterInfo("create", out, err)
	if ci != nil {
		ci.CreateError = "" // Rancher's client would take it for a failure
	}
	return ci, err
}

// Update runs update.
func (s *Server) Update(ctx context.Context, req *driverpb.UpdateRequest) (*driverpb.ClusterInfo, error) {
	out, err := s.call(ctx, "Update", "update", map[string]any{
		"cluster_info": clusterInfoIn(req.GetClusterInfo()), "options": optionsIn(req.GetDriverOptions())})
	return s.clusterInfo("update", out, err)
}

// PostCheck runs post_check.
func (s *Server) PostCheck(ctx context.Context, ci *driverpb.ClusterInfo) (*driverpb.ClusterInfo, error) {
	out, err := s.call(ctx, "PostCheck", "post_check", infoIn(ci))
	return s.clusterInfo("post_check", out, err)
}

// Remove runs remove.
func (s *Server) Remove(ctx context.Context, ci *driverpb.ClusterInfo) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "Remove", "remove", infoIn(ci)))
}

// GetDriverCreateOptions runs create_options.
func (s *Server) GetDriverCreateOptions(ctx context.Context, _ *driverpb.Empty) (*driverpb.DriverFlags, error) {
	return s.flags(ctx, "GetDriverCreateOptions", "create_options")
}

// GetDriverUpdateOptions runs update_options.
func (s *Server) GetDriverUpdateOptions(ctx context.Context, _ *driverpb.Empty) (*driverpb.DriverFlags, error) {
	return s.flags(ctx, "GetDriverUpdateOptions", "update_options")
}

func (s *Server) flags(ctx context.Context, rpc, hook string) (*driverpb.DriverFlags, error) {
	out, err := s.call(ctx, rpc, hook, map[string]any{})
	if err != nil {
		return nil, err
	}
	f, err := flagsOut(out)
	if err != nil {
		return nil, s.resultError(hook, err)
	}
	return f, nil
}

// GetVersion runs get_version.
func (s *Server) GetVersion(ctx context.Context, ci *driverpb.ClusterInfo) (*driverpb.KubernetesVersion, error) {
	out, err := s.call(ctx, "GetVersion", "get_version", infoIn(ci))
	if err != nil {
		return nil, err
	}
	m, _ := out.(map[string]any)
	v, _ := m["version"].(string)
	return &driverpb.KubernetesVersion{Version: v}, nil
}

// SetVersion runs set_version.
func (s *Server) SetVersion(ctx context.Context, req *driverpb.SetVersionRequest) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "SetVersion", "set_version", map[string]any{
		"cluster_info": clusterInfoIn(req.GetInfo()), "version": req.GetVersion().GetVersion()}))
}

// GetNodeCount runs get_cluster_size.
func (s *Server) GetNodeCount(ctx context.Context, ci *driverpb.ClusterInfo) (*driverpb.NodeCount, error) {
	out, err := s.call(ctx, "GetNodeCount", "get_cluster_size", infoIn(ci))
	if err != nil {
		return nil, err
	}
	m, _ := out.(map[string]any)
	n, err := intField(m, "count")
	if err != nil {
		return nil, s.resultError("get_cluster_size", err)
	}
	return &driverpb.NodeCount{Count: n}, nil
}

// SetNodeCount runs set_cluster_size.
func (s *Server) SetNodeCount(ctx context.Context, req *driverpb.SetNodeCountRequest) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "SetNodeCount", "set_cluster_size", map[string]any{
		"cluster_info": clusterInfoIn(req.GetInfo()), "count": req.GetCount().GetCount()}))
}

// GetCapabilities runs capabilities: Rancher's readiness probe.
func (s *Server) GetCapabilities(ctx context.Context, _ *driverpb.Empty) (*driverpb.Capabilities, error) {
	out, err := s.call(ctx, "GetCapabilities", "capabilities", map[string]any{})
	if err != nil {
		return nil, err
	}
	return capabilitiesOut(out), nil
}

// ETCDSave runs etcd_save.
func (s *Server) ETCDSave(ctx context.Context, req *driverpb.SaveETCDSnapshotRequest) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "ETCDSave", "etcd_save", etcdIn(req.GetInfo(), req.GetDriverOptions(), req.GetSnapshotName())))
}

// ETCDRestore runs etcd_restore.
func (s *Server) ETCDRestore(ctx context.Context, req *driverpb.RestoreETCDSnapshotRequest) (*driverpb.ClusterInfo, error) {
	out, err := s.call(ctx, "ETCDRestore", "etcd_restore", etcdIn(req.GetInfo(), req.GetDriverOptions(), req.GetSnapshotName()))
	return s.clusterInfo("etcd_restore", out, err)
}

// ETCDRemoveSnapshot runs etcd_remove_snapshot.
func (s *Server) ETCDRemoveSnapshot(ctx context.Context, req *driverpb.RemoveETCDSnapshotRequest) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "ETCDRemoveSnapshot", "etcd_remove_snapshot", etcdIn(req.GetInfo(), req.GetDriverOptions(), req.GetSnapshotName())))
}

// GetK8SCapabilities runs k8s_capabilities (wire name GetK8sCapabilities).
func (s *Server) GetK8SCapabilities(ctx context.Context, o *driverpb.DriverOptions) (*driverpb.K8SCapabilities, error) {
	out, err := s.call(ctx, "GetK8sCapabilities", "k8s_capabilities", map[string]any{"options": optionsIn(o)})
	if err != nil {
		return nil, err
	}
	return k8sCapabilitiesOut(out), nil
}

// RemoveLegacyServiceAccount runs remove_legacy_service_account.
func (s *Server) RemoveLegacyServiceAccount(ctx context.Context, ci *driverpb.ClusterInfo) (*driverpb.Empty, error) {
	return s.empty(s.call(ctx, "RemoveLegacyServiceAccount", "remove_legacy_service_account", infoIn(ci)))
}

// empty answers an RPC without a result: never a nil message, which old
// clients fail to decode.
func (s *Server) empty(_ any, err error) (*driverpb.Empty, error) {
	if err != nil {
		return nil, err
	}
	return &driverpb.Empty{}, nil
}

func (s *Server) clusterInfo(hook string, out any, err error) (*driverpb.ClusterInfo, error) {
	if err != nil {
		return nil, err
	}
	ci, err := clusterInfoOut(out)
	if err != nil {
		return nil, s.resultError(hook, err)
	}
	return ci, nil
}

// resultError is a result the runtime's shape check let through but the
// protocol cannot carry (a flag default of the wrong type, a fractional
// count): a plugin bug.
func (s *Server) resultError(hook string, err error) error {
	e := &runtime.CallError{Class: runtime.ClassTerminal, Reason: runtime.ReasonInvalidResult,
		Message: fmt.Sprintf("the result does not fit the Rancher protocol: %v (docs/kinds/clusterdriver.md)", err)}
	s.logger.Error("rpc failed", "hook", hook, "class", e.Class, "reason", e.Reason, "message", e.Message)
	return hookError(s.typ, hook, e, "")
}
