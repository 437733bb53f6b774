package chefsolo_test

// BenchmarkBootstrap: BOOTSTRAP of a node whose resources are current (the
// digest check alone) against one that needs them shipped, on a real sshd,
// with resources the size of Coopr's bundled set (about 1,800 files):
//
//	go test -run XXX -bench BenchmarkBootstrap -benchtime 10x ./plugins/chef-solo/
//
// Figures and the command are recorded in docs/benchmarks.md.

import (
	"fmt"
	"strings"
	"testing"
)

func benchResources(e *env) {
	for c := 0; c < 200; c++ {
		files := map[string]string{"metadata.rb": fmt.Sprintf("name 'cb%d'\nversion '1.0.0'\n", c)}
		for r := 0; r < 8; r++ {
			files[fmt.Sprintf("recipes/r%d.rb", r)] = strings.Repeat(fmt.Sprintf("log 'cookbook %d recipe %d'\n", c, r), 400)
		}
		e.resource("cookbooks", fmt.Sprintf("cb%d", c), 1, files)
	}
}

func BenchmarkBootstrap(b *testing.B) {
	for _, mode := range []string{"current", "changed"} {
		b.Run(mode, func(b *testing.B) {
			e := newEnv(b, false)
			benchResources(e)
			must(e.t, e.run("BOOTSTRAP", nil))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if mode == "changed" {
					b.StopTimer()
					e.resource("cookbooks", "cb0", 2+i, map[string]string{"metadata.rb": "name 'cb0'\n",
						"recipes/default.rb": fmt.Sprintf("log '%d'\n", i)})
					b.StartTimer()
				}
				res := e.run("BOOTSTRAP", nil)
				if res.Status != 0 {
					b.Fatalf("BOOTSTRAP: %s", res.Message)
				}
				want := map[string]string{"current": "resources current", "changed": "shipped"}[mode]
				if !strings.Contains(res.Stdout, want) {
					b.Fatalf("BOOTSTRAP %s: %s", mode, res.Stdout)
				}
			}
		})
	}
}
