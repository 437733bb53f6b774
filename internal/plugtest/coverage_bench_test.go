package plugtest

import (
	"context"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// BenchmarkInstructionHook measures what loomd test --coverage costs a
// plugin's Lua code: the same loop under a context (the loop every hook
// runs in) without the hook (loomd serve, loomd test) and with the
// coverage counter. Report the ratio of the two in docs/benchmarks.md.
func BenchmarkInstructionHook(b *testing.B) {
	const src = `local t = {} for i = 1, 20000 do t[i % 64] = (t[i % 64] or 0) + i * 2 end return t`
	for _, c := range []struct {
		name string
		hook func(*lua.LState, *lua.FunctionProto, int)
	}{
		{"nil", nil},
		{"coverage", newCoverage().hook},
	} {
		b.Run(c.name, func(b *testing.B) {
			L := lua.NewState()
			defer L.Close()
			L.Options.InstructionHook = c.hook
			L.SetContext(context.Background())
			fn, err := L.LoadString(src)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				L.Push(fn)
				if err := L.PCall(0, 0, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
