package machinecontroller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	cperrors "k8c.io/machine-controller/pkg/cloudprovider/errors"
	"k8c.io/machine-controller/pkg/cloudprovider/instance"
	cloudprovidertypes "k8c.io/machine-controller/pkg/cloudprovider/types"
	"k8c.io/machine-controller/sdk/apis/cluster/common"
	clusterv1alpha1 "k8c.io/machine-controller/sdk/apis/cluster/v1alpha1"
	"k8c.io/machine-controller/sdk/providerconfig"
	"k8c.io/machine-controller/sdk/providerconfig/configvar"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrlruntimeclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
		// The error echoes the credential, as careless APIs do: the
		// adapter must keep it out of messages and logs.
		reply(500, map[string]any{"error": "database on fire for " + r.Header.Get("Authorization")})
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
	case r.Method == "PUT":
		var id int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/servers/"), &id)
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		s.byID[id]["labels"] = body["labels"]
		reply(200, map[string]any{"server": s.byID[id]})
	default:
		reply(405, nil)
	}
}

func (s *servers) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

func newProvider(t *testing.T, objs ...ctrlruntimeclient.Object) (*Provider, *runtime.Runtime) {
	t.Helper()
	rt := luatest.NewRuntime(t, runtime.Options{
		PluginsDir: filepath.Join("..", "..", "examples", "kinds"),
		Bindings:   std.New(std.Options{}),
	})
	p, err := New(rt, "fakecloud", configvar.NewResolver(context.Background(), fakeClient(t, objs...)))
	if err != nil {
		t.Fatal(err)
	}
	return p, rt
}

// fakeClient is a controller-runtime fake client that knows core objects
// and machine-controller's Machines, holding objs.
func fakeClient(t *testing.T, objs ...ctrlruntimeclient.Object) ctrlruntimeclient.Client {
	t.Helper()
	scheme := kruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := clusterv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
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
	// The uid changes (machine-controller's migration): the server is
	// re-tagged, and found by the new uid.
	if err := p.MigrateUID(ctx, log, m, "uid-2"); err != nil {
		t.Fatalf("MigrateUID: %v", err)
	}
	m.UID = "uid-2"
	if got, err := p.Get(ctx, log, m, nil); err != nil || got.ID() != "1" {
		t.Fatalf("Get after MigrateUID: %v %v", got, err)
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
	if strings.Contains(err.Error(), "hz-token") {
		t.Fatalf("the token leaked: %v", err)
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
	if _, err := New(rt, "s3like", nil); err == nil || !strings.Contains(err.Error(), `"s3like"`) || !strings.Contains(err.Error(), "bucketprovisioner type, not a cloudprovider type") {
		t.Fatalf("New(s3like): %v", err)
	}
	if _, err := New(rt, "ghost", nil); err == nil || !strings.Contains(err.Error(), "loaded cloudprovider types: fakecloud") {
		t.Fatalf("New(ghost): %v", err)
	}
}

// withCPS returns a spec whose cloudProviderSpec is cps (ConfigVars as
// the user writes them).
func withCPS(t *testing.T, cps map[string]any) clusterv1alpha1.MachineSpec {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"cloudProvider": "fakecloud", "operatingSystem": "ubuntu", "cloudProviderSpec": cps})
	if err != nil {
		t.Fatal(err)
	}
	return clusterv1alpha1.MachineSpec{ObjectMeta: metav1.ObjectMeta{Name: "w"},
		ProviderSpec: clusterv1alpha1.ProviderSpec{Value: &kruntime.RawExtension{Raw: raw}}}
}

// TestConfigVars checks that the fields the definition declares in
// host.config_vars (token: a ConfigVarString with env FAKECLOUD_TOKEN;
// publicIp: a ConfigVarBool) are resolved through machine-controller's
// own resolver (configvar.Resolver over a fake Kubernetes client) before
// the hooks run, that a value read from a Secret never shows in errors,
// and that add_defaults (whose result is written back to the Machine)
// sees them unresolved.
func TestConfigVars(t *testing.T) {
	api := &servers{token: "tok-from-secret", byID: map[int]map[string]any{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fakecloud"},
		Data: map[string][]byte{"token": []byte("tok-from-secret")}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "fakecloud-opts"},
		Data: map[string]string{"public": "false", "token": "tok-from-configmap"}}
	p, _ := newProvider(t, secret, cm)
	ctx := context.Background()
	log := zap.NewNop().Sugar()
	fromSecret := map[string]any{"secretKeyRef": map[string]any{"namespace": "kube-system", "name": "fakecloud", "key": "token"}}
	noPublic := map[string]any{"configMapKeyRef": map[string]any{"namespace": "kube-system", "name": "fakecloud-opts", "key": "public"}}
	s := withCPS(t, map[string]any{"apiUrl": srv.URL, "token": fromSecret, "publicIp": noPublic})

	// Admission: add_defaults gets the references as written (its result
	// goes back into the Machine), validate the resolved values.
	d, err := p.AddDefaults(log, s)
	if err != nil {
		t.Fatal(err)
	}
	if got := cloudProviderSpec(t, d)["token"]; !reflect.DeepEqual(got, fromSecret) {
		t.Fatalf("AddDefaults resolved the token into the spec: %v", got)
	}
	if err := p.Validate(ctx, log, d); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	m := &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "kube-system", UID: "u-cv"}, Spec: d}
	if _, err := p.Create(ctx, log, m, nil, ""); err != nil {
		t.Fatalf("Create with a token from a Secret: %v", err)
	}
	api.mu.Lock()
	created := api.byID[1]
	api.mu.Unlock()
	if created["public_ip"] != false {
		t.Fatalf("the ConfigMap's publicIp=false did not reach the plugin: %v", created)
	}
	// The controller's Machine is untouched.
	if got := cloudProviderSpec(t, m.Spec)["token"]; !reflect.DeepEqual(got, fromSecret) {
		t.Fatalf("the Machine's spec changed: %v", got)
	}
	// A value read from a Secret is a secret of the call: the API's error
	// echoes it, the message does not.
	api.failGet = true
	_, err = p.Get(ctx, log, m, nil)
	api.failGet = false
	if err == nil || strings.Contains(err.Error(), "tok-from-secret") || !strings.Contains(err.Error(), "[REDACTED]") {
		t.Fatalf("Get on a 500: %v (the Secret's value must be redacted)", err)
	}

	// A plain value and a ConfigMap resolve too (a plain string is a
	// ConfigVarString's value).
	api.token = "tok-from-configmap"
	m.Spec = withCPS(t, map[string]any{"apiUrl": srv.URL,
		"token": map[string]any{"configMapKeyRef": map[string]any{"namespace": "kube-system", "name": "fakecloud-opts", "key": "token"}}})
	if inst, err := p.Get(ctx, log, m, nil); err != nil || inst.ID() != "1" {
		t.Fatalf("Get with a token from a ConfigMap: %v %v", inst, err)
	}
	// The environment when the field gives nothing (GetStringValueOrEnv).
	api.token = "tok-from-env"
	t.Setenv("FAKECLOUD_TOKEN", "tok-from-env")
	m.Spec = withCPS(t, map[string]any{"apiUrl": srv.URL})
	if inst, err := p.Get(ctx, log, m, nil); err != nil || inst.ID() != "1" {
		t.Fatalf("Get with the token from FAKECLOUD_TOKEN: %v %v", inst, err)
	}

	// A Secret that is not there (yet) is retried; a field that is no
	// ConfigVar fails the same way every time: terminal.
	m.Spec = withCPS(t, map[string]any{"apiUrl": srv.URL,
		"token": map[string]any{"secretKeyRef": map[string]any{"namespace": "kube-system", "name": "later", "key": "token"}}})
	_, err = p.Get(ctx, log, m, nil)
	if _, ok := terminal(err); ok || err == nil || !strings.Contains(err.Error(), "resolving cloudProviderSpec.token (a ConfigVarString, host.config_vars)") ||
		!strings.Contains(err.Error(), "later") {
		t.Fatalf("Get with a missing Secret: %v, want a retry naming it", err)
	}
	m.Spec = withCPS(t, map[string]any{"apiUrl": srv.URL, "token": "x", "publicIp": []any{1, 2}})
	if _, err := p.Create(ctx, log, m, nil, ""); err == nil {
		t.Fatal("Create with a malformed ConfigVarBool succeeded")
	} else if r, ok := terminal(err); !ok || r != common.CreateMachineError || !strings.Contains(err.Error(), "cloudProviderSpec.publicIp (a ConfigVarBool") {
		t.Fatalf("Create with a malformed ConfigVarBool: %v (terminal %v %q)", err, ok, r)
	}

	// Without a resolver, a type that declares config_vars is refused
	// with what to do.
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: filepath.Join("..", "..", "examples", "kinds"), Bindings: std.New(std.Options{})})
	bare, err := New(rt, "fakecloud", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bare.Validate(ctx, log, s); err == nil || !strings.Contains(err.Error(), "has no ConfigVarResolver") {
		t.Fatalf("Validate without a resolver: %v", err)
	}
}

// TestProviderData checks the controller's ProviderData as the hooks see
// it: update_machine through a MachineUpdater over the fake client (as
// machine-controller's: re-read, modify, update), and the Kubernetes
// client's k8s_get/k8s_list/k8s_delete for a type whose definition asks
// for them (host.kubernetes), refused to one that does not.
func TestProviderData(t *testing.T) {
	api := &servers{token: "hz-token", byID: map[int]map[string]any{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	ctx := context.Background()
	log := zap.NewNop().Sugar()
	m := &clusterv1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "kube-system", UID: "u-pd"}, Spec: spec(t, srv.URL, "hz-token", "ubuntu")}
	vol := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "w-data", Labels: map[string]string{"machine": "w"}},
		Data: map[string][]byte{"k": []byte("v")}}
	c := fakeClient(t, m.DeepCopy(), vol)
	data := &cloudprovidertypes.ProviderData{Ctx: ctx, Client: c, Update: updater(c)}

	p, _ := newProvider(t)
	if _, err := p.Create(ctx, log, m, data, ""); err != nil {
		t.Fatalf("Create: %v", err)
	}
	stored := &clusterv1alpha1.Machine{}
	if err := c.Get(ctx, ctrlruntimeclient.ObjectKeyFromObject(m), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Annotations["fakecloud.example.com/server-id"] != "1" || m.Annotations["fakecloud.example.com/server-id"] != "1" {
		t.Fatalf("update_machine: stored %v, passed %v", stored.Annotations, m.Annotations)
	}

	// A type that asks for the client (host.kubernetes read_write).
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "kube", Family: "cloudprovider", Classname: "Kube",
		Extra: map[string]any{"host": map[string]any{"kubernetes": "read_write"}},
		Files: map[string]string{"kube.lua": `
Kube = require("loom").CloudProvider:extend("Kube")
function Kube:get(req)
  local s = self.host.k8s_get({ api_version = "v1", kind = "Secret", namespace = "kube-system", name = "w-data" })
  local none = self.host.k8s_get({ api_version = "v1", kind = "Secret", namespace = "kube-system", name = "nope" })
  local list = self.host.k8s_list({ api_version = "v1", kind = "Secret", namespace = "kube-system", labels = { machine = "w" } })
  self.host.update_machine({ annotations = { seen = s.metadata.name .. "/" .. tostring(none) .. "/" .. #list },
    labels = { gone = false }, finalizers = { add = { "kube/cleanup" } } })
  return { id = s.metadata.name }
end
function Kube:create(req) return {} end
function Kube:cleanup(req)
  if req.machine.metadata.name == "bad" then self.host.k8s_get({ kind = "Secret" }) end
  local deleted = self.host.k8s_delete({ api_version = "v1", kind = "Secret", namespace = "kube-system", name = "w-data" })
  self.host.update_machine({ finalizers = { remove = { "kube/cleanup" } } })
  return not deleted
end
`}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "nokube", Family: "cloudprovider", Classname: "NoKube",
		Files: map[string]string{"nokube.lua": `
NoKube = require("loom").CloudProvider:extend("NoKube")
function NoKube:get(req)
  local h = self.host or {}
  return { id = type(h.k8s_get) .. "/" .. type(h.update_machine) }
end
function NoKube:create(req) return {} end
function NoKube:cleanup(req) return true end
`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Bindings: std.New(std.Options{})})
	kube, err := New(rt, "kube", nil)
	if err != nil {
		t.Fatal(err)
	}
	m.Labels = map[string]string{"gone": "soon"}
	if err := c.Update(ctx, m); err != nil {
		t.Fatal(err)
	}
	inst, err := kube.Get(ctx, log, m, data)
	if err != nil || inst.ID() != "w-data" {
		t.Fatalf("Get: %v %v", inst, err)
	}
	if err := c.Get(ctx, ctrlruntimeclient.ObjectKeyFromObject(m), stored); err != nil {
		t.Fatal(err)
	}
	if stored.Annotations["seen"] != "w-data/nil/1" || stored.Labels["gone"] != "" || !contains(stored.Finalizers, "kube/cleanup") {
		t.Fatalf("after Get: annotations %v labels %v finalizers %v", stored.Annotations, stored.Labels, stored.Finalizers)
	}
	for i, want := range []bool{false, true} {
		done, err := kube.Cleanup(ctx, log, m, data)
		if err != nil || done != want {
			t.Fatalf("Cleanup #%d: %v %v, want %v", i+1, done, err, want)
		}
	}
	if err := c.Get(ctx, ctrlruntimeclient.ObjectKeyFromObject(m), stored); err != nil || contains(stored.Finalizers, "kube/cleanup") {
		t.Fatalf("after Cleanup: finalizers %v, %v", stored.Finalizers, err)
	}
	// A bad argument is the plugin's bug: terminal.
	bad := m.DeepCopy()
	bad.Name = "bad"
	if _, err := kube.Cleanup(ctx, log, bad, data); err == nil {
		t.Fatal("Cleanup with a bad k8s_get succeeded")
	} else if r, ok := terminal(err); !ok || r != common.InvalidConfigurationMachineError || !strings.Contains(err.Error(), "self.host.k8s_get: want api_version") {
		t.Fatalf("Cleanup with a bad k8s_get: %v (terminal %v %q)", err, ok, r)
	}
	// Without host.kubernetes: the updater, not the client.
	nokube, err := New(rt, "nokube", nil)
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := nokube.Get(ctx, log, m, data); err != nil || inst.ID() != "nil/function" {
		t.Fatalf("nokube Get: %v %v", inst, err)
	}
	// Without ProviderData (Validate, or a nil data): no host functions.
	if inst, err := nokube.Get(ctx, log, m, nil); err != nil || inst.ID() != "nil/nil" {
		t.Fatalf("nokube Get without data: %v %v", inst, err)
	}
}

// updater is machine-controller's MachineUpdater over c: re-read the
// Machine, apply the modifiers, update it, and copy the result back.
func updater(c ctrlruntimeclient.Client) cloudprovidertypes.MachineUpdater {
	return func(m *clusterv1alpha1.Machine, mods ...cloudprovidertypes.MachineModifier) error {
		fresh := &clusterv1alpha1.Machine{}
		if err := c.Get(context.Background(), ctrlruntimeclient.ObjectKeyFromObject(m), fresh); err != nil {
			return err
		}
		for _, mod := range mods {
			mod(fresh)
		}
		if err := c.Update(context.Background(), fresh); err != nil {
			return err
		}
		*m = *fresh
		return nil
	}
}
