package ssh

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

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

// BenchmarkExecWrapper measures what the process-group wrapper costs a
// command: `true` on one open connection, run as is ("raw"), through the
// wrapper as exec sends it ("wrapped"), and through conn:exec ("exec":
// wrapper, marker scanning, pool). Each op runs all three, interleaved so
// that the machine's load hits them alike; the metrics are each one's
// mean time and the ratios to raw.
func BenchmarkExecWrapper(b *testing.B) {
	e := newEnv(b, sshdtest.Config{}, nil)
	client, err := ssh.Dial("tcp", e.addr(), &ssh.ClientConfig{
		User: e.srv.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(e.srv.Signer)},
		HostKeyCallback: ssh.FixedHostKey(e.srv.HostKeys["ed25519"]), HostKeyAlgorithms: []string{ssh.KeyAlgoED25519},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	run := func(cmd string) time.Duration {
		start := time.Now()
		s, err := client.NewSession()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.Run(cmd); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	wrapped := fmt.Sprintf("/bin/sh -c %s sh loom-started-0123456789abcdef: '' true", Quote(groupWrapper))
	runIn(b, e.L, `c = conn(); assert(c:exec("true").ok)`)
	fn, err := e.L.LoadString(`assert(c:exec("true").ok)`)
	if err != nil {
		b.Fatal(err)
	}
	var raw, wrap, exec time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw += run("true")
		wrap += run(wrapped)
		start := time.Now()
		e.L.Push(fn)
		if err := e.L.PCall(0, 0, nil); err != nil {
			b.Fatal(describe(err))
		}
		exec += time.Since(start)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
	b.ReportMetric(ms(raw), "raw-ms")
	b.ReportMetric(ms(wrap), "wrapped-ms")
	b.ReportMetric(ms(exec), "exec-ms")
	b.ReportMetric(float64(wrap)/float64(raw), "wrapped/raw")
	b.ReportMetric(float64(exec)/float64(raw), "exec/raw")
}
