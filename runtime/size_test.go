package runtime_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"256MiB": 256 << 20, "1G": 1 << 30, "1GiB": 1 << 30, "512 M": 512 << 20, "1000": 1000, "2MB": 2000000} {
		if got, err := runtime.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1M", "1.5G", "lots", "0", "99999999999T"} {
		if _, err := runtime.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded; want an error", in)
		}
	}
	if got := runtime.FormatSize(256 << 20); got != "256 MiB" {
		t.Errorf("FormatSize = %q", got)
	}
}

func TestMemoryLimitFromDefinition(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "big", Family: "provider", Classname: "Big",
		Files: map[string]string{"b.lua": `Big = {} function Big:create() end`},
		Top:   map[string]any{"limits": map[string]any{"memory": "1GiB"}}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "plain", Family: "provider", Classname: "Plain",
		Files: map[string]string{"p.lua": `Plain = {} function Plain:create() end`}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "tiny", Family: "provider", Classname: "Tiny",
		Files: map[string]string{"t.lua": `Tiny = {} function Tiny:create() end`},
		Top:   map[string]any{"limits": map[string]any{"memory": "1MiB"}}})
	luatest.WriteFile(t, filepath.Join(dir, "typed", "typed.json"),
		`{"name":"typed","providertypes":["typed"],"typed":{"classname":"T","limits":{"memory":"lots"}}}`)
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	got := map[string]int64{}
	for _, ti := range rt.Types() {
		got[ti.Name] = ti.MemoryLimit
	}
	if got["big"] != 1<<30 || got["plain"] != 0 {
		t.Errorf("memory limits = %v, want big 1GiB and plain 0 (the daemon's default)", got)
	}
	var all []string
	for _, e := range rt.LoadErrors() {
		all = append(all, e.Error())
	}
	msg := strings.Join(all, "\n")
	for _, want := range []string{`limits.memory "1MiB": below the minimum of 64 MiB`, `type "typed": limits.memory: size "lots"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("load errors lack %q:\n%s", want, msg)
		}
	}
}
