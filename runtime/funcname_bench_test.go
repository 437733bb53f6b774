package runtime

import (
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// BenchmarkCaughtErrorTraceback measures what naming costs on the error
// path: one op is a hook (called from Go, as the runtime calls hooks)
// catching one error with pcall, for which gopher-lua builds a traceback
// whose hook frame is named by scanning the entry table and the globals.
// "upstream" leaves Options.FuncName nil (the frame reads "main chunk"),
// the baseline of the same run; "funcname" is the runtime's (cached per
// task); "funcname-uncached" searches every time, the cost of a task's
// first traceback through a function.
//
//	go test -run XXX -bench CaughtErrorTraceback -count 3 ./runtime/
func BenchmarkCaughtErrorTraceback(b *testing.B) {
	for _, c := range []struct {
		name   string
		named  bool
		cached bool
	}{{"upstream", false, false}, {"funcname", true, true}, {"funcname-uncached", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			var quota coroutines
			v := &vm{pt: &pluginType{name: "bench", def: &TypeDef{Classname: "Bench"}}}
			v.L = newSandboxState(DefaultLimits, &quota)
			defer v.L.Close()
			L := v.L
			// Globals shaped like a plugin's: a class with hooks and
			// helpers, a helper table, a config table.
			if err := L.DoString(`
Bench = {}
for _, h in ipairs({"create", "confirm", "delete", "bootstrap", "install", "configure", "start", "stop", "remove"}) do
  Bench[h] = function(self, input) return h end
end
helpers = {}
for i = 1, 40 do helpers["h" .. i] = function() return i end end
CONFIG = {}
for i = 1, 100 do CONFIG["key" .. i] = i end
function Bench:catch(input)
  local ok, err = pcall(error, "refused")
  return err
end`); err != nil {
				b.Fatal(err)
			}
			v.entry = L.GetGlobal("Bench").(*lua.LTable)
			switch {
			case c.cached:
				L.Options.FuncName = v.funcName
			case c.named:
				// Every error pays the search, as the first one of a
				// task does.
				L.Options.FuncName = v.searchFuncName
			}
			fn := v.entry.RawGetString("catch")
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := L.CallByParam(lua.P{Fn: fn, NRet: 1, Protect: true}, v.entry); err != nil {
					b.Fatal(err)
				}
				L.Pop(1)
			}
		})
	}
}
