// Package log is the loom.log binding, also installed as the global `log`
// in every plugin VM: leveled, structured logging into the daemon's logs,
// with the task id, plugin type and hook attached to every line.
package log

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
)

// maxMessage caps one log message; a plugin logging megabytes per line
// would flood the daemon's logs.
const maxMessage = 64 << 10

// maxAttrs caps the attributes one log call may add.
const maxAttrs = 64

// Binding is the loom.log module. It holds no state.
type Binding struct{}

// New returns the log binding.
func New() *Binding { return &Binding{} }

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	doc := "Logs at %[1]s level. msg may hold string.format verbs filled from the extra arguments; " +
		"a trailing table adds structured attributes: log.%[1]s(\"created %%s\", id, {region = r})."
	spec := bindings.ModuleSpec{Name: "log", Doc: "Leveled logging into loomd's logs. Also the global `log`; `print` logs at info level. " +
		"Every line carries the task id, plugin type and hook; registered secrets are redacted; messages are capped at 64 KiB."}
	for _, lvl := range []string{"debug", "info", "warn", "error"} {
		spec.Funcs = append(spec.Funcs, bindings.FuncSpec{
			Name: lvl, Params: []string{"msg string", "...any"}, Doc: fmt.Sprintf(doc, lvl),
		})
	}
	return spec
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	t := L.CreateTable(0, 4)
	for name, lvl := range map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError} {
		t.RawSetString(name, L.NewFunction(logFunc(h, lvl)))
	}
	return t
}

func logFunc(h bindings.Host, lvl slog.Level) lua.LGFunction {
	return func(L *lua.LState) int {
		logger := h.Logger()
		ctx := context.Background()
		if !logger.Enabled(ctx, lvl) {
			return 0
		}
		top := L.GetTop()
		var attrs []any
		if top >= 2 {
			if t, ok := L.Get(top).(*lua.LTable); ok {
				// One call may not write more than a message's worth of
				// attributes: a table of a million keys once wrote 1 GB.
				budget, dropped := maxMessage, 0
				for _, k := range luaval.SortedKeys(t) {
					v := t.RawGetString(k)
					if v == lua.LNil {
						continue
					}
					if len(attrs) >= maxAttrs || budget <= 0 {
						dropped++
						continue
					}
					// Redact before the cut, or a secret's first
					// characters survive it.
					key := capped(h.Redact(k))
					val := capped(h.Redact(L.ToStringMeta(v).String()))
					budget -= len(key) + len(val)
					attrs = append(attrs, slog.String(key, val))
				}
				if dropped > 0 {
					attrs = append(attrs, slog.Int("attrs_dropped", dropped))
				}
				top--
			}
		}
		msg := L.ToStringMeta(L.Get(1)).String()
		if top >= 2 {
			format := L.GetField(L.GetGlobal("string"), "format")
			if fn, ok := format.(*lua.LFunction); ok && strings.Contains(msg, "%") {
				L.Push(fn)
				for i := 1; i <= top; i++ {
					L.Push(L.Get(i))
				}
				L.Call(top, 1)
				msg = L.ToStringMeta(L.Get(-1)).String()
				L.Pop(1)
			} else {
				parts := []string{msg}
				for i := 2; i <= top; i++ {
					parts = append(parts, L.ToStringMeta(L.Get(i)).String())
				}
				msg = strings.Join(parts, " ")
			}
		}
		logger.Log(ctx, lvl, capped(h.Redact(msg)), attrs...)
		return 0
	}
}

func capped(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage] + "... [truncated]"
}
