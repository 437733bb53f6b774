package runtime_test

import (
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A 15 MB error message reaches the result cut to MaxErrorMessage, in the
// message and in stderr alike, saying how much was cut.
func TestHugeErrorMessageIsCut(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "huge", Family: "automator", Classname: "Huge",
		Files: map[string]string{"h.lua": `Huge = {} function Huge:install() error(string.rep("e", 15000000)) end`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	r := luatest.Run(t, rt, luatest.Task("INSTALL", "huge", nil))
	if r.Status == 0 {
		t.Fatal("the hook succeeded")
	}
	if len(r.Message) > runtime.MaxErrorMessage+64 || !strings.Contains(r.Message, "more bytes cut]") {
		t.Errorf("message of %d bytes, ends %q", len(r.Message), r.Message[max(0, len(r.Message)-60):])
	}
	if len(r.Stderr) > 2*runtime.MaxErrorMessage {
		t.Errorf("stderr of %d bytes", len(r.Stderr))
	}
}
