package runtime_test

import (
	"context"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// An error raised through a helper names the plugin line that called the
// helper (self:fail, error(msg, 2) in the plugin's own helper), and the
// traceback names the hook method instead of "main chunk".
func TestErrorLocationsAndTracebackNames(t *testing.T) {
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "where", Family: "provider", Classname: "Where", Files: map[string]string{
		"where.lua": `local loom = require("loom")
Where = loom.Provider:extend("Where")
local function check(v)
  if not v then error("flavor is required", 2) end
end
function Where:create(input)
  self:fail("no capacity for " .. input.hostname)
end
function Where:confirm(input)
  check(input.absent)
end
function Where:delete(input)
  error("gone", 2)
end
`}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
	cases := []struct {
		task      string
		message   string
		traceback []string
	}{
		// self:fail blames the hook's line 7, not stdlib/loom.lua.
		{"CREATE", "where.lua:7: no capacity for node1.example.com", []string{"where.lua:7: in function 'Where:create'", "in function 'fail'"}},
		// error(msg, 2) in a local helper blames its caller's line 10.
		{"CONFIRM", "where.lua:10: flavor is required", []string{"where.lua:10: in function 'Where:confirm'"}},
		// Level 2 in a hook the runtime called: no caller, so no position
		// (and no leading blank).
		{"DELETE", "gone", []string{"where.lua:13: in function 'Where:delete'"}},
	}
	for _, c := range cases {
		r := luatest.Run(t, rt, luatest.Task(c.task, "where", nil))
		if r.Status != 1 || !strings.HasSuffix(r.Message, c.message) || (c.task == "DELETE" && r.Message != c.message) {
			t.Errorf("%s: message %q, want it to end with %q", c.task, r.Message, c.message)
		}
		if strings.Contains(r.Message, "loom.lua") {
			t.Errorf("%s: the message blames the stdlib: %q", c.task, r.Message)
		}
		for _, w := range c.traceback {
			if !strings.Contains(r.Stderr, w) {
				t.Errorf("%s: traceback lacks %q:\n%s", c.task, w, r.Stderr)
			}
		}
		if strings.Contains(r.Stderr, "main chunk") {
			t.Errorf("%s: traceback calls a hook the main chunk:\n%s", c.task, r.Stderr)
		}
	}
}

// A statement evaluated at a line of piped input reports that line, in
// syntax errors and runtime errors, across multi-line statements.
func TestSessionEvalAtLine(t *testing.T) {
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: t.TempDir()})
	s, err := rt.NewSession("")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.EvalAt(ctx, "function f()\n  return nil + 1\nend", "stdin", 12, nil); err != nil {
		t.Fatal(err)
	}
	_, err = s.EvalAt(ctx, "f()", "stdin", 20, nil)
	var ee *runtime.EvalError
	if !asEvalError(err, &ee) || !strings.HasPrefix(ee.Message, "stdin:13:") || !strings.Contains(ee.Traceback, "stdin:13: in function 'f'") {
		t.Fatalf("want the error at stdin:13 inside f: %#v", err)
	}
	if _, err := s.EvalAt(ctx, "x = = 1", "stdin", 7, nil); err == nil || !strings.HasPrefix(err.Error(), "stdin:7: syntax error") {
		t.Fatalf("want a syntax error at stdin:7: %v", err)
	}
	vals, err := s.EvalAt(ctx, "1 + 1", "stdin", 3, nil)
	if err != nil || len(vals) != 1 || vals[0].String() != "2" {
		t.Fatalf("an expression still returns its value: %v %v", vals, err)
	}
}

func asEvalError(err error, target **runtime.EvalError) bool {
	ee, ok := err.(*runtime.EvalError)
	if ok {
		*target = ee
	}
	return ok
}
