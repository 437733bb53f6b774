package runtime

import (
	"context"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// sandboxBenchCases are pattern- and sort-heavy hooks, run in one
// benchmark against gopher-lua's own string and table functions (the
// baseline) and the sandbox's (port of Lua 5.1's matcher with a step
// budget and deadline checks, capped gsub, deadline-checked sort).
var sandboxBenchCases = []struct{ name, code string }{
	{"gsub-words-4KB", `local r, n = TEXT:gsub("%w+", "<%0>")`},
	{"gsub-spaces-16KB", `local r, n = BIG:gsub("%s+", " ")`},
	{"gmatch-kv-4KB", `local n = 0; for k, v in KV:gmatch("(%w+)=(%w+)") do n = n + 1 end`},
	{"match-anchored-x100", `for i = 1, 100 do local k, v = ("key = value"):match("^(%w+)%s*=%s*(%w+)$") end`},
	{"find-plain-and-pattern", `for i = 1, 100 do TEXT:find("lazy", 1, true); TEXT:find("d%a+g") end`},
	{"sort-10k", `local t = {}; for i = 1, 10000 do t[i] = (i * 7919) % 10000 end; table.sort(t)`},
	{"sort-10k-comparator", `local t = {}; for i = 1, 10000 do t[i] = (i * 7919) % 10000 end; table.sort(t, function(a, b) return a > b end)`},
	{"concat-op", `local s = ""; for i = 1, 1000 do s = "k" .. i .. "=" .. i .. ";" end`},
}

func benchState(b *testing.B, sandbox bool) *lua.LState {
	var L *lua.LState
	if sandbox {
		var quota coroutines
		L = newSandboxState(DefaultLimits, &quota)
	} else {
		L = lua.NewState()
	}
	text := strings.Repeat("the quick brown fox jumps over the lazy dog ", 100)[:4096]
	L.SetGlobal("TEXT", lua.LString(text))
	L.SetGlobal("BIG", lua.LString(strings.Repeat("word \t\n ", 2048)))
	L.SetGlobal("KV", lua.LString(strings.Repeat("key=value, ", 373)[:4096]))
	// Both run under a context, as hooks do: gopher-lua then checks it at
	// every instruction, and the sandbox's builtins watch it too.
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	L.SetContext(ctx)
	b.Cleanup(L.Close)
	return L
}

// BenchmarkSandboxBuiltins measures what the sandbox's guarded builtins
// cost against gopher-lua's unguarded ones, in the same run.
func BenchmarkSandboxBuiltins(b *testing.B) {
	for _, c := range sandboxBenchCases {
		for _, variant := range []string{"gopher-lua", "sandbox"} {
			b.Run(c.name+"/"+variant, func(b *testing.B) {
				L := benchState(b, variant == "sandbox")
				fn, err := L.LoadString(c.code)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
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
}

// BenchmarkGsub300KB is issue 9's gsub: 300 KB with a replacement per
// byte. gopher-lua's gsub rebuilt the string for every match (68 s in the
// issue); it is not re-run here.
func BenchmarkGsub300KB(b *testing.B) {
	L := benchState(b, true)
	L.SetGlobal("S", lua.LString(strings.Repeat("a", 300_000)))
	fn, err := L.LoadString(`local r, n = S:gsub("a", "b"); assert(n == 300000)`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		L.Push(fn)
		if err := L.PCall(0, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
}
