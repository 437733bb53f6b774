package machinecontroller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	cperrors "k8c.io/machine-controller/pkg/cloudprovider/errors"
	"k8c.io/machine-controller/pkg/cloudprovider/instance"
	"k8c.io/machine-controller/sdk/apis/cluster/common"
	clusterv1alpha1 "k8c.io/machine-controller/sdk/apis/cluster/v1alpha1"
	"k8c.io/machine-controller/sdk/providerconfig"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
	"github.com/loomrt/loom/runtime/luatest"
)

// servers is a fake of the Hetzner-like servers API that the example
// plugin examples/kinds/fakecloud wraps: servers labelled machine-uid,
// listed by label selector, behind a bearer token.
type servers struct {
	mu      sync.Mutex
	token   string
	next    int
	byID    map[int]map[string]any
	failGet bool // answer GET /servers with a 500
}

func (s *servers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		reply(401, map[string]any{"error": "bad token"})
		return
	}
	switch {
	case r.Method == "GET" && s.failGet:
		reply(500, map[string]any{"error": "database on fire"})
	case r.Method == "GET":
		uid := strings.TrimPrefix(r.URL.Query().Get("label_selector"), "machine-uid==")
		list := []any{}
		for _, srv := range s.byID {
			if srv["labels"].(map[string]any)["machine-uid"] == uid {
				list = append(list, srv)
			}
		}
		reply(200, map[string]any{"servers": list})
	case r.Method == "POST":
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		s.next++
		body["id"], body["status"], body["publicIp"], body["privateIp"] = s.next, "running", "203.0.113.9", "10.0.0.9"
		s.byID[s.next] = body
		reply(201, map[string]any{"server": body})
	case r.Method == "DELETE":
		var id int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/servers/"), &id)
		delete(s.byID, id)
		reply(204, nil)
	default:
		reply(405, nil)
	}
}

func (s *servers) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func newProvider(t *testing.T) (*Provider, *runtime.Runtime) {
	t.Helper()
	rt := luatest.NewRuntime(t, runtime.Options{
		PluginsDir: filepath.Join("..", "..", "examples", "kinds"),
		Bindings:   std.New(std.Options{}),
	})
	p, err := New(rt, "fakecloud")
	if err != nil {
		t.Fatal(err)
	}
	return p, rt
}

func spec(t *testing.T, url, token, os string) clusterv1alpha1.MachineSpec {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"cloudProvider": "fakecloud", "operatingSystem": os,
		"sshPublicKeys":     []string{"ssh-ed25519 AAAA test"},
		"cloudProviderSpec": map[string]any{"apiUrl": url, "token": token},
	})
	if err != nil {
		t.Fatal(err)
	}
	return clusterv1alpha1.MachineSpec{
		ObjectMeta:   metav1.ObjectMeta{Name: "worker-1"},
		ProviderSpec: clusterv1alpha1.ProviderSpec{Value: &kruntime.RawExtension{Raw: raw}},
		Versions:     clusterv1alpha1.MachineVersionInfo{Kubelet: "1.35.0"},
	}
}

func cloudProviderSpec(t *testing.T, s clusterv1alpha1.MachineSpec) map[string]any {
	t.Helper()
	var v struct {
		CloudProviderSpec map[string]any `json:"cloudProviderSpec"`
	}
	if err := json.Unmarshal(s.ProviderSpec.Value.Raw, &v); err != nil {
		t.Fatalf("providerSpec.value: %v", err)
	}
	return v.CloudProviderSpec
}

func terminal(err error) (common.MachineStatusError, bool) {
	ok, reason, _ := cperrors.IsTerminalError(err)
	return reason, ok
}

// TestProviderLifecycle drives the example fakecloud plugin through the
// adapter the way machine-controller does: admission (AddDefaults,
// Validate), the creation path (Get not found, Create, Get), metrics,
// and the deletion path (Cleanup until true, then Get is not found).
func TestProviderLifecycle(t *testing.T) {
	api := &servers{token: "hz-token", byID: map[int]map[string]any{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	p, _ := newProvider(t)
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(core).Sugar()

	s, err := p.AddDefaults(log, spec(t, srv.URL, "hz-token", "ubuntu"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cloudProviderSpec(t, s)["serverType"]; got != "cx22" || s.Name != "worker-1" || s.Versions.Kubelet != "1.35.0" {
		t.Fatalf("AddDefaults: serverType %v, spec %+v", got, s)
	}
	if err := p.Validate(ctx, log, s); err != nil {
		t.Fatalf("Validate: %v", err)
	}

	m := &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Namespace: "kube-system", UID: "uid-1"}, Spec: s}
	// The creation path: Get says ErrInstanceNotFound, then Create.
	_, err = p.Get(ctx, log, m, nil)
	if !cperrors.IsNotFound(err) {
		t.Fatalf("Get before Create: %v, want ErrInstanceNotFound", err)
	}
	if _, ok := terminal(err); ok {
		t.Fatalf("not found is terminal: %v", err)
	}
	if !strings.Contains(err.Error(), "hook get for kube-system/worker-1: not_found: instance not found") {
		t.Errorf("Get error does not say where: %v", err)
	}
	inst, err := p.Create(ctx, log, m, nil, "#cloud-config\n")
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if inst.ID() != "1" || inst.ProviderID() != "fakecloud://1" || inst.Status() != instance.StatusRunning || inst.Name() != "worker-1" ||
		inst.Addresses()["203.0.113.9"] != corev1.NodeExternalIP || inst.Addresses()["10.0.0.9"] != corev1.NodeInternalIP {
		t.Fatalf("Create: %+v", inst)
	}
	// A retried Create finds the server by its uid label.
	if _, err := p.Create(ctx, log, m, nil, "#cloud-config\n"); err != nil || api.count() != 1 {
		t.Fatalf("Create again: %v, %d servers", err, api.count())
	}
	got, err := p.Get(ctx, log, m, nil)
	if err != nil || got.ID() != "1" {
		t.Fatalf("Get: %v %v", got, err)
	}
	labels, err := p.MachineMetricsLabels(m)
	if err != nil || labels["size"] != "cx22" {
		t.Fatalf("MachineMetricsLabels: %v %v", labels, err)
	}
	// migrate_uid and set_metrics are not defined: the contract's no-ops.
	if err := p.MigrateUID(ctx, log, m, "uid-2"); err != nil {
		t.Fatalf("MigrateUID: %v", err)
	}
	if err := p.SetMetricsForMachines(clusterv1alpha1.MachineList{Items: []clusterv1alpha1.Machine{*m}}); err != nil {
		t.Fatalf("SetMetricsForMachines: %v", err)
	}

	// The deletion path: false (deleting), then true (gone), then Get is
	// not found and Cleanup stays true.
	for i, want := range []bool{false, true, true} {
		done, err := p.Cleanup(ctx, log, m, nil)
		if err != nil || done != want {
			t.Fatalf("Cleanup #%d: %v %v, want %v", i+1, done, err, want)
		}
	}
	if _, err := p.Get(ctx, log, m, nil); !errors.Is(err, cperrors.ErrInstanceNotFound) {
		t.Fatalf("Get after Cleanup: %v, want ErrInstanceNotFound", err)
	}
	if api.count() != 0 {
		t.Fatalf("%d servers left", api.count())
	}

	// The plugin's log lines went to the controller's logger, with the
	// call's machine.
	if n := logs.FilterField(zap.String("task", "kube-system/worker-1")).Len(); n == 0 {
		var seen []string
		for _, e := range logs.All() {
			seen = append(seen, fmt.Sprint(e.Message, e.ContextMap()))
		}
		t.Errorf("no log line for the machine in the zap logger; got %q", seen)
	}
}

// TestProviderErrors checks the contract's error semantics as
// machine-controller sees them.
func TestProviderErrors(t *testing.T) {
	api := &servers{token: "hz-token", byID: map[int]map[string]any{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	p, rt := newProvider(t)
	ctx := context.Background()
	log := zap.NewNop().Sugar()

	// Validate: a spec without credentials is a terminal InvalidConfiguration.
	err := p.Validate(ctx, log, spec(t, srv.URL, "", "ubuntu"))
	if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || !strings.Contains(err.Error(), "needs apiUrl and token") {
		t.Fatalf("Validate without token: %v (terminal %v %q)", err, ok, r)
	}
	// An unsupported OS is ErrOSNotSupported, terminal as Hetzner makes it.
	err = p.Validate(ctx, log, spec(t, srv.URL, "hz-token", "windows"))
	if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || !errors.Is(err, providerconfig.ErrOSNotSupported) {
		t.Fatalf("Validate windows: %v (terminal %v %q)", err, ok, r)
	}

	m := &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "worker-2", UID: "uid-2"}, Spec: spec(t, srv.URL, "stolen", "ubuntu")}
	// A rejected token is terminal; the controller records CreateError.
	_, err = p.Get(ctx, log, m, nil)
	if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || cperrors.IsNotFound(err) {
		t.Fatalf("Get with a bad token: %v (terminal %v %q)", err, ok, r)
	}
	var ce *kindcall.Error
	if !errors.As(err, &ce) || ce.Class != runtime.ClassTerminal || ce.Stderr == "" {
		t.Fatalf("Get with a bad token: %#v, want a terminal kindcall.Error with the Lua traceback", ce)
	}
	// A server error is transient: neither terminal nor not found.
	m.Spec = spec(t, srv.URL, "hz-token", "ubuntu")
	api.failGet = true
	_, err = p.Get(ctx, log, m, nil)
	if _, ok := terminal(err); ok || cperrors.IsNotFound(err) || !strings.Contains(err.Error(), "database on fire") {
		t.Fatalf("Get on a 500: %v, want a retry", err)
	}
	if _, err := p.Cleanup(ctx, log, m, nil); err == nil || errors.As(err, new(cperrors.TerminalError)) {
		t.Fatalf("Cleanup on a 500: %v, want a retry", err)
	}
	api.failGet = false

	// A machine without the cloud's credentials is terminal too.
	if _, err := p.Cleanup(ctx, log, &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "bare"}}, nil); err == nil {
		t.Fatal("Cleanup of a machine without a providerSpec succeeded")
	} else if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError {
		t.Fatalf("Cleanup of a machine without a providerSpec: %v (terminal %v %q)", err, ok, r)
	}
	// A spec the contract does not accept never reaches Lua: terminal, it
	// fails the same way every time.
	bad := spec(t, srv.URL, "hz-token", "ubuntu")
	bad.ProviderSpec.Value.Raw = []byte(`{"sshPublicKeys": "not a list", "cloudProviderSpec": {}}`)
	if err := p.Validate(ctx, log, bad); err == nil {
		t.Fatal("Validate of a malformed providerSpec succeeded")
	} else if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || !errors.Is(err, runtime.ErrInvalidCall) ||
		!strings.Contains(err.Error(), "sshPublicKeys") {
		t.Fatalf("Validate of a malformed providerSpec: %v (terminal %v %q)", err, ok, r)
	}
	if _, err := p.Create(ctx, log, &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "u"}, Spec: bad}, nil, ""); err == nil {
		t.Fatal("Create of a malformed providerSpec succeeded")
	} else if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || api.count() != 0 {
		t.Fatalf("Create of a malformed providerSpec: %v (terminal %v %q)", err, ok, r)
	}

	// New refuses a type of another kind, and an unknown one.
	if _, err := New(rt, "s3like"); err == nil || !strings.Contains(err.Error(), `"s3like"`) || !strings.Contains(err.Error(), "bucketprovisioner type, not a cloudprovider type") {
		t.Fatalf("New(s3like): %v", err)
	}
	if _, err := New(rt, "ghost"); err == nil || !strings.Contains(err.Error(), "loaded cloudprovider types: fakecloud") {
		t.Fatalf("New(ghost): %v", err)
	}
}
