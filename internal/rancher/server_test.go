package rancher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/loomrt/loom/internal/rancher/driverpb"
	"github.com/loomrt/loom/runtime"
)

// Every RPC of the service runs one hook, and every hook of the
// clusterdriver kind is reachable from one RPC.
func TestMethodsCoverTheKind(t *testing.T) {
	rpcs := map[string]bool{}
	for _, m := range driverpb.Driver_ServiceDesc.Methods {
		rpcs[m.MethodName] = true
	}
	hooks := map[string]bool{}
	for _, h := range runtime.KindOf(runtime.ClusterDriver).Hooks {
		hooks[h.Name] = true
	}
	if len(Methods) != len(rpcs) || len(Methods) != len(hooks) {
		t.Fatalf("%d methods, %d RPCs in drivers.proto, %d hooks in the kind", len(Methods), len(rpcs), len(hooks))
	}
	for _, m := range Methods {
		if !rpcs[m.RPC] || !hooks[m.Hook] {
			t.Fatalf("%s -> %s: RPC known %v, hook known %v", m.RPC, m.Hook, rpcs[m.RPC], hooks[m.Hook])
		}
		delete(rpcs, m.RPC)
		delete(hooks, m.Hook)
	}
	if len(rpcs) != 0 || len(hooks) != 0 {
		t.Fatalf("not mapped: RPCs %v, hooks %v", rpcs, hooks)
	}
}

func TestCode(t *testing.T) {
	for _, tc := range []struct {
		e    runtime.CallError
		want codes.Code
	}{
		{runtime.CallError{Class: runtime.ClassRetry}, codes.Unknown},
		{runtime.CallError{Class: runtime.ClassTerminal}, codes.Unknown},
		{runtime.CallError{Class: runtime.ClassNotFound}, codes.Unknown},
		{runtime.CallError{Class: runtime.ClassTerminal, Reason: runtime.ReasonUnimplemented}, codes.Unknown},
		{runtime.CallError{Class: runtime.ClassTerminal, Reason: runtime.ReasonInvalidResult}, codes.Unknown},
		{runtime.CallError{Class: runtime.ClassRetry, Reason: runtime.ReasonTimeout}, codes.Unknown},
	} {
		if got := Code(&tc.e); got != tc.want {
			t.Errorf("Code(%+v) = %s, want %s", tc.e, got, tc.want)
		}
	}
}

func TestFlagsOut(t *testing.T) {
	f, err := flagsOut(map[string]any{
		"n":    map[string]any{"type": "intPtr", "default": float64(3)},
		"on":   map[string]any{"type": "boolPtr", "default": true},
		"tags": map[string]any{"type": "stringSlice", "default": []any{"a", "b"}, "usage": "tags"},
		"pw":   map[string]any{"type": "string", "password": true, "default": "x"},
		"none": map[string]any{"type": "string"},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := f.GetOptions()
	if o["n"].GetDefault().GetDefaultInt() != 3 || !o["on"].GetDefault().GetDefaultBool() ||
		strings.Join(o["tags"].GetDefault().GetDefaultStringSlice().GetValue(), ",") != "a,b" || o["tags"].GetUsage() != "tags" ||
		!o["pw"].GetPassword() || o["pw"].GetDefault().GetDefaultString() != "x" || o["none"].GetDefault() != nil {
		t.Fatalf("flags: %v", f)
	}
	for _, tc := range []struct {
		flag map[string]any
		want string
	}{
		{map[string]any{"type": "int", "default": "3"}, `flag "f" (type int): default: want an integer, got string "3"`},
		{map[string]any{"type": "int", "default": 1.5}, `want an integer, got number 1.5`},
		{map[string]any{"type": "bool", "default": "yes"}, `want a boolean`},
		{map[string]any{"type": "stringSlice", "default": []any{"a", float64(1)}}, `[2]: want a string, got number 1`},
		{map[string]any{"type": "string", "default": false}, `want a string, got boolean false`},
	} {
		if _, err := flagsOut(map[string]any{"f": tc.flag}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("flagsOut(%v): %v, want %q", tc.flag, err, tc.want)
		}
	}
}

// clusterInfoIn leaves out empty fields; clusterInfoOut reads them back.
func TestClusterInfoRoundTrip(t *testing.T) {
	ci := &driverpb.ClusterInfo{Endpoint: "https://e", NodeCount: 3, Metadata: map[string]string{"state": "{}"}, ClientKey: "k"}
	in := clusterInfoIn(ci)
	if len(in) != 4 {
		t.Fatalf("clusterInfoIn: %v", in)
	}
	in["node_count"] = float64(3) // as a result comes back from Lua
	in["metadata"] = map[string]any{"state": "{}"}
	out, err := clusterInfoOut(in)
	if err != nil || out.GetEndpoint() != "https://e" || out.GetNodeCount() != 3 || out.GetMetadata()["state"] != "{}" || out.GetClientKey() != "k" {
		t.Fatalf("clusterInfoOut: %v, %v", out, err)
	}
	if _, err := clusterInfoOut(map[string]any{"node_count": 2.5}); err == nil {
		t.Fatal("a fractional node_count passed")
	}
}

// docs/kinds/rancher.md's table names every RPC with its hook.
func TestDocsTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/kinds/rancher.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range Methods {
		row := "| `" + m.RPC + "`"
		i := strings.Index(string(doc), row)
		if i < 0 {
			t.Fatalf("docs/kinds/rancher.md has no row for %s", m.RPC)
		}
		line := string(doc[i:])
		line = line[:strings.Index(line, "\n")]
		if !strings.Contains(line, "| `"+m.Hook+"` |") {
			t.Fatalf("docs/kinds/rancher.md: the row of %s does not name hook %s: %s", m.RPC, m.Hook, line)
		}
	}
}

// fakeCaller answers every call with res and err, and keeps the request.
type fakeCaller struct {
	res *runtime.CallResult
	err error
	req *runtime.CallRequest
}

func (f *fakeCaller) Call(_ context.Context, c *runtime.CallRequest) (*runtime.CallResult, error) {
	f.req = c
	return f.res, f.err
}

func failed(class, reason, msg string, result any) *runtime.CallResult {
	return &runtime.CallResult{Status: 1, Result: result, Message: msg,
		Error: &runtime.CallError{Class: class, Reason: reason, Message: msg}}
}

func TestServerAnswers(t *testing.T) {
	ctx := context.Background()
	f := &fakeCaller{}
	s := NewServer(f, "drv", nil)

	// A partial create answers OK with create_error; the retry's input
	// has no create_error, and a successful answer clears it.
	f.res = failed(runtime.ClassRetry, "", "quota", map[string]any{"metadata": map[string]any{"state": "{}"}, "create_error": "old"})
	ci, err := s.Create(ctx, &driverpb.CreateRequest{})
	if err != nil || ci.GetCreateError() != "drv create: quota" || ci.GetMetadata()["state"] != "{}" {
		t.Fatalf("partial Create: %v, %v", ci, err)
	}
	f.res = &runtime.CallResult{Result: map[string]any{"endpoint": "e", "create_error": "stale"}}
	ci, err = s.Create(ctx, &driverpb.CreateRequest{ClusterInfo: ci})
	if err != nil || ci.GetCreateError() != "" || strings.Contains(string(f.req.Input), "create_error") {
		t.Fatalf("retried Create: %v, %v; input %s", ci, err, f.req.Input)
	}
	if f.req.Type != "drv" || f.req.Hook != "create" || !strings.HasPrefix(f.req.CallID, "rancher-drv-") {
		t.Fatalf("request: %+v", f.req)
	}

	// A hook's error carries its class and reason as an ErrorInfo.
	f.res = failed(runtime.ClassTerminal, runtime.ReasonUnimplemented, "ETCD backup operations are not implemented", nil)
	_, err = s.ETCDSave(ctx, &driverpb.SaveETCDSnapshotRequest{})
	st := status.Convert(err)
	if st.Code() != codes.Unknown || st.Message() != "drv etcd_save: ETCD backup operations are not implemented" || len(st.Details()) != 1 {
		t.Fatalf("ETCDSave: %v", err)
	}
	if ei, ok := st.Details()[0].(*errdetails.ErrorInfo); !ok || ei.GetReason() != "UNIMPLEMENTED" || ei.GetDomain() != "loom.clusterdriver" ||
		ei.GetMetadata()["class"] != "terminal" || ei.GetMetadata()["hook"] != "etcd_save" || ei.GetMetadata()["call_id"] == "" {
		t.Fatalf("ETCDSave details: %v", st.Details())
	}

	// Never a nil message.
	f.res = &runtime.CallResult{}
	if e, err := s.Remove(ctx, &driverpb.ClusterInfo{}); err != nil || e == nil {
		t.Fatalf("Remove: %v, %v", e, err)
	}
	if v, err := s.GetVersion(ctx, &driverpb.ClusterInfo{}); err != nil || v == nil {
		t.Fatalf("GetVersion with no result: %v, %v", v, err)
	}

	// A flag default the protocol cannot carry is the plugin's bug.
	f.res = &runtime.CallResult{Result: map[string]any{"n": map[string]any{"type": "int", "default": "x"}}}
	_, err = s.GetDriverCreateOptions(ctx, &driverpb.Empty{})
	if st := status.Convert(err); st.Code() != codes.Unknown || !strings.HasPrefix(st.Message(), `drv create_options: the result does not fit the Rancher protocol: flag "n"`) ||
		len(st.Details()) != 1 || st.Details()[0].(*errdetails.ErrorInfo).GetReason() != "INVALID_RESULT" {
		t.Fatalf("bad default: %v", err)
	}

	// Calls that could not run.
	for _, tc := range []struct {
		err    error
		want   codes.Code
		reason string
	}{
		{fmt.Errorf("%w: bad input", runtime.ErrInvalidCall), codes.Unknown, "INVALID_CALL"},
		{runtime.ErrClosed, codes.Unknown, "UNAVAILABLE"},
		{fmt.Errorf("%w: ctx", runtime.ErrCancelled), codes.Canceled, "CANCELLED"},
		{errors.New("boom"), codes.Unknown, "INTERNAL"},
	} {
		f.res, f.err = nil, tc.err
		_, err := s.PostCheck(ctx, &driverpb.ClusterInfo{})
		st := status.Convert(err)
		if st.Code() != tc.want || !strings.HasPrefix(st.Message(), "drv post_check: ") || len(st.Details()) != 1 ||
			st.Details()[0].(*errdetails.ErrorInfo).GetReason() != tc.reason {
			t.Errorf("host error %v: got %v %v, want %s %s", tc.err, err, st.Details(), tc.want, tc.reason)
		}
	}
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	f.err = fmt.Errorf("%w: deadline", runtime.ErrCancelled)
	if _, err := s.PostCheck(dctx, &driverpb.ClusterInfo{}); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("deadline: %v", err)
	}
}
