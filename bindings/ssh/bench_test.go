package ssh

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/internal/sshdtest"
)

// BenchmarkSequential20 runs 20 commands one after another, on one pooled
// connection versus a fresh connection for each (Coopr's way). One op is
// the 20 commands.
func BenchmarkSequential20(b *testing.B) {
	e := newEnv(b, sshdtest.Config{}, nil)
	for _, bc := range []struct{ name, code string }{
		{"pooled", `local c = conn(); for i = 1, 20 do assert(c:exec("true").ok) end`},
		{"fresh", `for i = 1, 20 do local c = conn(USER, {reuse=false}); assert(c:exec("true").ok); c:close() end`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			fn, err := e.L.LoadString(bc.code)
			if err != nil {
				b.Fatal(err)
			}
			runIn(b, e.L, `assert(conn():exec("true").ok)`) // warm the pool
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e.L.Push(fn)
				if err := e.L.PCall(0, 0, nil); err != nil {
					b.Fatal(describe(err))
				}
			}
		})
	}
}

// BenchmarkUpload50MB uploads a 50 MB file over SFTP on loopback.
func BenchmarkUpload50MB(b *testing.B) {
	e := newEnv(b, sshdtest.Config{}, nil)
	const size = 50 << 20
	data := make([]byte, size)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(e.h.Work, "big.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	dir := remoteDir(b, e.srv.User)
	e.L.SetGlobal("DST", lua.LString(filepath.Join(dir, "big.bin")))
	runIn(b, e.L, `c = conn(); assert(c:exec("true").ok)`)
	fn, err := e.L.LoadString(`local r = c:upload("big.bin", DST); assert(r.bytes == 50 * 1024 * 1024)`)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e.L.Push(fn)
		if err := e.L.PCall(0, 0, nil); err != nil {
			b.Fatal(describe(err))
		}
	}
}
