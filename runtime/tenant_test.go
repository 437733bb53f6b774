package runtime_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// withTenant sets the task's top-level tenantId (a Loom extension).
func withTenant(t *testing.T, task []byte, tenant string) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(task, &m); err != nil {
		t.Fatal(err)
	}
	m["tenantId"] = tenant
	b, _ := json.Marshal(m)
	return b
}

// Issue 10 item 3: a pooled VM serves one (tenant, type). A global a task
// of tenant A leaves behind is invisible to tenant B's tasks (on the old
// main, B's task logged A's token), while A's next task still finds it
// (module-level caches keep working within a tenant). The hook runs in its
// tenant's work dir, and self.env.tenant says which.
func TestGlobalsDoNotCrossTenants(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "leaky", Family: "automator", Classname: "Leaky", Files: map[string]string{
		"leaky.lua": `
Leaky = require("loom").Automator:extend("Leaky")
function Leaky:install(input)
  self.result.result.seen = LEFT_BEHIND or "nothing"
  self.result.result.tenant = self.env.tenant
  self.result.result.work_dir = self.env.work_dir
  LEFT_BEHIND = input.fields.token
  self.result.status = 0
end`}})
	work := t.TempDir()
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: work, PoolSize: 1})
	task := func(tenant, token string) *runtime.Result {
		cfg := map[string]any{"service": map[string]any{"name": "s", "action": map[string]any{"type": "leaky", "fields": map[string]any{"token": token}}}}
		raw := luatest.Task("INSTALL", "leaky", cfg)
		if tenant != "" {
			raw = withTenant(t, raw, tenant)
		}
		res := luatest.Run(t, rt, raw)
		if res.Status != 0 {
			t.Fatalf("task of tenant %q: %+v", tenant, res)
		}
		return res
	}
	task("tenant-a", "token-of-a")
	b := task("tenant-b", "token-of-b")
	if b.Result["seen"] != "nothing" {
		t.Fatalf("tenant B's task saw a global tenant A left behind: %v", b.Result["seen"])
	}
	if b.TenantID != "tenant-b" {
		t.Fatalf("result tenantId = %q, want tenant-b", b.TenantID)
	}
	if js, _ := json.Marshal(b); !strings.Contains(string(js), `"tenantId":"tenant-b"`) {
		t.Fatalf("result JSON lacks tenantId: %s", js)
	}
	if b.Result["tenant"] != "tenant-b" || b.Result["work_dir"] != filepath.Join(work, "tenant-b", "automatortypes", "leaky") {
		t.Fatalf("tenant B's env: %v", b.Result)
	}
	if a := task("tenant-a", "again"); a.Result["seen"] != "token-of-a" {
		t.Fatalf("tenant A's own VM lost its module state: %v", a.Result["seen"])
	}
	// No tenantId: the runtime's tenant (Options.Tenant, default "default").
	if d := task("", "x"); d.Result["tenant"] != "default" || d.Result["seen"] != "nothing" {
		t.Fatalf("task without tenantId: %v", d.Result)
	}
	if _, err := os.Stat(filepath.Join(work, "tenant-b", "automatortypes", "leaky")); err != nil {
		t.Fatalf("tenant B's work dir: %v", err)
	}
}

// tenantId is a safe token: path tricks and odd values are bad input.
func TestTenantIDValidated(t *testing.T) {
	if !runtime.ValidTenant(strings.Repeat("a", 64)) || !runtime.ValidTenant("a") {
		t.Error("a tenant id of 1 or 64 characters was refused")
	}
	base := luatest.Task("INSTALL", "x", nil)
	for _, bad := range []string{"..", ".", "a/b", "../etc", "", "-x", strings.Repeat("a", 65), "a b"} {
		var m map[string]any
		json.Unmarshal(base, &m)
		m["tenantId"] = bad
		raw, _ := json.Marshal(m)
		_, err := runtime.ParseTask(raw)
		if bad == "" {
			if err != nil {
				t.Errorf("empty tenantId means the default tenant: %v", err)
			}
			continue
		}
		if !errors.Is(err, runtime.ErrInvalidTask) || !strings.Contains(err.Error(), "tenantId") {
			t.Errorf("tenantId %q: got %v, want an invalid-task error naming tenantId", bad, err)
		}
	}
	task, err := runtime.ParseTask(withTenant(t, base, "acme-1.prod_x"))
	if err != nil || task.TenantID != "acme-1.prod_x" {
		t.Fatalf("good tenantId: %v %+v", err, task)
	}
	if _, err := runtime.ParseTask([]byte(`{"taskName":"INSTALL","tenantId":7,"config":{"service":{"action":{"type":"x"}}}}`)); !errors.Is(err, runtime.ErrInvalidTask) {
		t.Fatalf("numeric tenantId: %v", err)
	}
}
