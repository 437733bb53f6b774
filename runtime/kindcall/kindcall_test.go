package kindcall_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
	"github.com/loomrt/loom/runtime/luatest"
)

const machinesLua = `
M = require("loom").CloudProvider:extend("M")
local log = require("loom.log")
function M:get(req)
  log.info("looking", { uid = req.machine.metadata.uid })
  if req.machine.metadata.uid == "gone" then return nil, { not_found = true, message = "no such instance" } end
  if req.machine.metadata.uid == "boom" then error({ terminal = true, reason = "InsufficientResources", message = "quota" }) end
  if req.machine.metadata.uid == "bad" then return { status = "exploding" } end
  if req.machine.metadata.uid == "host" then
    local id = self.host.lookup({ uid = "host" })
    log.info("found " .. id .. " with key hunter2hunter2")
    return { id = id }
  end
  return { id = "i-" .. req.machine.metadata.uid, status = "running", addresses = { ["10.0.0.1"] = "InternalIP" } }
end
function M:create(req) return { id = "i-1" } end
function M:cleanup(req) return true end
`

func newType(t *testing.T) (*kindcall.Type, *runtime.Runtime) {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "m", Family: "cloudprovider", Classname: "M",
		Files: map[string]string{"m.lua": machinesLua}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "prov", Family: "provider", Classname: "P",
		Files: map[string]string{"p.lua": `P = require("loom").Provider:extend("P") function P:create() end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	typ, err := kindcall.New(rt, "m", runtime.CloudProvider)
	if err != nil {
		t.Fatal(err)
	}
	return typ, rt
}

type inst struct {
	ID        string            `json:"id"`
	Status    string            `json:"status"`
	Addresses map[string]string `json:"addresses"`
}

func machine(uid string) map[string]any {
	return map[string]any{"machine": map[string]any{"metadata": map[string]any{"name": "w", "uid": uid}}}
}

func TestCall(t *testing.T) {
	typ, _ := newType(t)
	ctx := context.Background()
	var logs bytes.Buffer
	var got inst
	err := typ.Call(ctx, kindcall.Request{Hook: "get", Input: machine("u1"), ID: "ns/w",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, &got)
	if err != nil || got.ID != "i-u1" || got.Addresses["10.0.0.1"] != "InternalIP" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if !strings.Contains(logs.String(), "looking") || !strings.Contains(logs.String(), "task=ns/w") {
		t.Errorf("the request's logger did not get the plugin's line: %q", logs.String())
	}
	var done bool
	if err := typ.Call(ctx, kindcall.Request{Hook: "cleanup", Input: machine("u1")}, &done); err != nil || !done {
		t.Fatalf("cleanup: %v %v", done, err)
	}
	// An absent optional hook answers as the contract says.
	labels := map[string]string{"x": "y"}
	if err := typ.Call(ctx, kindcall.Request{Hook: "metrics_labels", Input: machine("u1")}, &labels); err != nil || len(labels) != 1 {
		t.Fatalf("metrics_labels: %v %v", labels, err)
	}
}

func TestCallErrors(t *testing.T) {
	typ, _ := newType(t)
	ctx := context.Background()
	cases := []struct {
		name, hook string
		input      any
		class      string
		reason     string
		want       string
		sentinel   error
	}{
		{"not found", "get", machine("gone"), runtime.ClassNotFound, "", "cloudprovider m (m@", nil},
		{"raised terminal", "get", machine("boom"), runtime.ClassTerminal, "InsufficientResources", "hook get for ns/w: terminal (InsufficientResources): quota", nil},
		{"invalid result", "get", machine("bad"), runtime.ClassTerminal, runtime.ReasonInvalidResult, `result.status: "exploding" is not one of`, nil},
		{"input the contract refuses", "get", map[string]any{}, runtime.ClassTerminal, "", `input: missing "machine"`, runtime.ErrInvalidCall},
		{"unknown hook", "confirm", nil, runtime.ClassTerminal, "", `has no hook "confirm"`, runtime.ErrInvalidCall},
		{"input that is not JSON", "get", map[string]any{"f": func() {}}, runtime.ClassTerminal, "", "encoding the input as JSON", runtime.ErrInvalidCall},
	}
	for _, c := range cases {
		err := typ.Call(ctx, kindcall.Request{Hook: c.hook, Input: c.input, ID: "ns/w"}, nil)
		var ce *kindcall.Error
		if !errors.As(err, &ce) || ce.Class != c.class || ce.Reason != c.reason || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v (%#v), want class %s reason %q and %q", c.name, err, ce, c.class, c.reason, c.want)
			continue
		}
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%s: %v does not wrap %v", c.name, err, c.sentinel)
		}
	}
	// Host errors an adapter sets are found by errors.Is.
	hostErr := errors.New("instance not found")
	err := typ.Call(ctx, kindcall.Request{Hook: "get", Input: machine("gone")}, nil)
	var ce *kindcall.Error
	errors.As(err, &ce)
	ce.Host = []error{hostErr}
	if !errors.Is(err, hostErr) {
		t.Errorf("errors.Is does not find the host error in %v", err)
	}
	// A closed runtime is a retry that wraps ErrClosed.
	_, rt := newType(t)
	typ2, _ := kindcall.New(rt, "m", runtime.CloudProvider)
	rt.Close()
	err = typ2.Call(ctx, kindcall.Request{Hook: "get", Input: machine("u1")}, nil)
	if !errors.As(err, &ce) || ce.Class != runtime.ClassRetry || !errors.Is(err, runtime.ErrClosed) {
		t.Errorf("closed runtime: %v", err)
	}
}

func TestNew(t *testing.T) {
	_, rt := newType(t)
	for _, c := range []struct {
		name   string
		family runtime.Family
		want   string
	}{
		{"m", runtime.BucketProvisioner, `plugin type "m" (`},
		{"ghost", runtime.CloudProvider, `no loaded plugin declares the cloudprovider type "ghost"; loaded cloudprovider types: m`},
		{"ghost", runtime.BucketProvisioner, `loaded bucketprovisioner types: none`},
		{"prov", runtime.Provider, `"provider" is not a called kind (want one of bucketprovisioner, cloudprovider, clusterdriver, kloudprovider)`},
	} {
		if _, err := kindcall.New(rt, c.name, c.family); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%s, %s): %v, want %q", c.name, c.family, err, c.want)
		}
	}
	if _, err := kindcall.New(rt, "m", runtime.BucketProvisioner); err == nil || !strings.Contains(err.Error(), "is a cloudprovider type, not a bucketprovisioner type: list it under \"bucketprovisioners\"") {
		t.Errorf("wrong family: %v", err)
	}
}

// TestCallHostAndSecrets checks that Request.Host and Request.Secrets
// reach the runtime: the hook calls the host's function, and the secret
// is redacted from its log line.
func TestCallHostAndSecrets(t *testing.T) {
	typ, _ := newType(t)
	var logs bytes.Buffer
	var got inst
	err := typ.Call(context.Background(), kindcall.Request{Hook: "get", Input: machine("host"),
		Logger:  slog.New(slog.NewTextHandler(&logs, nil)),
		Secrets: []string{"hunter2hunter2"},
		Host: map[string]runtime.HostFunc{"lookup": func(_ context.Context, arg any) (any, error) {
			return "i-" + arg.(map[string]any)["uid"].(string), nil
		}}}, &got)
	if err != nil || got.ID != "i-host" {
		t.Fatalf("Call: %+v, %v", got, err)
	}
	if !strings.Contains(logs.String(), "found i-host with key [REDACTED]") || strings.Contains(logs.String(), "hunter2hunter2") {
		t.Fatalf("log: %s", logs.String())
	}
}
