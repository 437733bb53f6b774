package runtime_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A runtime loaded from another's Sources serves the same versions, with
// the folders on disk broken meanwhile: what loomd's workers rely on.
func TestSourcesLoadTheValidatedVersions(t *testing.T) {
	dir := t.TempDir()
	write := func(code string) {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: "v", Family: "provider", Classname: "V",
			Files: map[string]string{"v.lua": code, "lib/two.lua": `return 2`}})
	}
	write(`local two = require("lib.two") V = {} function V:create() self.result.result.v = two end`)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	want := rt.Types()[0]
	write(`V = {} function V:create( broken`)
	if rep, _ := rt.Reload(context.Background()); len(rep.Kept) != 1 {
		t.Fatalf("broken reload: %+v", rep)
	}
	// Through JSON, as the load frame carries them.
	b, err := json.Marshal(rt.Sources())
	if err != nil {
		t.Fatal(err)
	}
	var srcs []runtime.PluginSource
	if err := json.Unmarshal(b, &srcs); err != nil {
		t.Fatal(err)
	}
	w := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Sources: srcs})
	for _, e := range w.LoadErrors() {
		if !e.Warning {
			t.Errorf("load error from the sources: %v", e)
		}
	}
	types := w.Types()
	if len(types) != 1 || types[0].Version != want.Version || types[0].Dir != want.Dir {
		t.Fatalf("types from the sources = %+v, want version %s in %s", types, want.Version, want.Dir)
	}
	if r := luatest.Run(t, w, luatest.Task("CREATE", "v", nil)); r.Status != 0 || r.Result["v"] != float64(2) {
		t.Fatalf("run from the sources: %+v", r)
	}
	// No plugins is a set of sources too: the folder is not read.
	empty := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Sources: []runtime.PluginSource{}})
	if n := len(empty.Types()); n != 0 {
		t.Errorf("empty sources loaded %d types", n)
	}
}
