package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A *_test.lua file is never plugin code: it does not run at load time
// and does not change the plugin's version.
func TestLoaderSkipsTestFiles(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "p", Family: "provider", Classname: "P",
		Files: map[string]string{"p.lua": `P = require("loom").Provider:extend("P")`}})
	before := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir}).Types()[0].Version
	luatest.WriteFile(t, filepath.Join(dir, "p", "p_test.lua"), `error("a test file ran at load time")`)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			t.Fatalf("load error: %v", e)
		}
	}
	if v := rt.Types()[0].Version; v != before {
		t.Errorf("version changed from %s to %s by a test file", before, v)
	}
}

// Options.Folders loads exactly the folders given, not their siblings.
func TestFolders(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b"} {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: n, Family: "provider", Classname: strings.ToUpper(n),
			Files: map[string]string{n + ".lua": strings.ToUpper(n) + ` = require("loom").Provider:extend("x")`}})
	}
	luatest.WriteFile(t, filepath.Join(dir, "broken", "broken.json"), `{"name": "broken", "providertypes": [`)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Folders: []string{filepath.Join(dir, "b")}})
	if types := rt.Types(); len(types) != 1 || types[0].Name != "b" {
		t.Fatalf("types %+v", types)
	}
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			t.Errorf("a sibling's problem was reported: %v", e)
		}
	}
	rt = luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Folders: []string{dir}})
	if errs := rt.LoadErrors(); len(errs) != 1 || !strings.Contains(errs[0].Message, "no plugin definition here") {
		t.Errorf("a folder without a definition: %v", errs)
	}
}
