package runtime_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// A hook logging in a loop writes at most MaxTaskLog bytes, then one
// warning; the next task has a fresh budget.
func TestTaskLogBudget(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "chatty", Family: "automator", Classname: "Chatty",
		Files: map[string]string{"c.lua": `Chatty = {}
function Chatty:install()
  local s = string.rep("f", 60000)
  for i = 1, 400 do log.info(s) end -- 24 MB
  self.result.status = 0
end`}})
	var buf bytes.Buffer
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	for i := range 2 {
		buf.Reset()
		r := luatest.Run(t, rt, luatest.Task("INSTALL", "chatty", nil))
		if r.Status != 0 {
			t.Fatalf("run %d: %s", i, r.Message)
		}
		if buf.Len() > runtime.MaxTaskLog+1<<20 {
			t.Errorf("run %d wrote %d bytes of logs, over the %d budget", i, buf.Len(), runtime.MaxTaskLog)
		}
		if buf.Len() < runtime.MaxTaskLog/2 {
			t.Errorf("run %d wrote only %d bytes: the budget is not per task", i, buf.Len())
		}
		if n := strings.Count(buf.String(), "further lines are dropped"); n != 1 {
			t.Errorf("run %d: %d drop warnings, want 1", i, n)
		}
	}
}
