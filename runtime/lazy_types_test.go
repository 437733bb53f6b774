package runtime_test

import (
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// LazyTypes: loading provisions no VM; each type gets one with its first
// task; a type whose code fails when it runs fails its task, not the
// load. TrimIdleVMs then keeps only the type that ran last.
func TestLazyTypesAndTrimIdleVMs(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: n, Family: "provider", Classname: "E",
			Files: map[string]string{"e.lua": "E = {}\nfunction E:create() self.result.result.ok = true end\n"}})
	}
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "broken", Family: "provider", Classname: "E",
		Files: map[string]string{"e.lua": "error('broken at load')\n"}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: t.TempDir(), LazyTypes: true})
	if st := rt.Stats(); st.VMsIdle != 0 || st.LoadErrors != 0 {
		t.Fatalf("after a lazy load: %d idle VMs, %d load errors; want none", st.VMsIdle, st.LoadErrors)
	}
	for _, n := range []string{"a", "b", "c", "a"} {
		r := luatest.Run(t, rt, []byte(`{"taskId":"t-`+n+`","taskName":"CREATE","config":{"provider":{"providertype":"`+n+`"}}}`))
		if r.Status != 0 || r.Result["ok"] != true {
			t.Fatalf("CREATE on %s: %+v", n, r)
		}
	}
	if r := luatest.Run(t, rt, []byte(`{"taskId":"t-broken","taskName":"CREATE","config":{"provider":{"providertype":"broken"}}}`)); r.Status == 0 {
		t.Errorf("CREATE on a type whose code fails: %+v, want a failure", r)
	}
	if got := rt.Stats().VMsIdle; got != 3 {
		t.Fatalf("%d idle VMs after tasks of a, b, c; want 3", got)
	}
	if n := rt.TrimIdleVMs(); n != 2 {
		t.Errorf("TrimIdleVMs closed %d VMs, want 2 (those of b and c)", n)
	}
	if got := rt.Stats().VMsIdle; got != 1 {
		t.Errorf("%d idle VMs after the trim, want 1 (a's, which ran last)", got)
	}
	if r := luatest.Run(t, rt, []byte(`{"taskId":"t-b2","taskName":"CREATE","config":{"provider":{"providertype":"b"}}}`)); r.Status != 0 {
		t.Errorf("CREATE on b after the trim: %+v", r)
	}
}
