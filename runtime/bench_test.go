package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// benchPlugins writes a no-op automator "noop" and a ~300-line provider
// "big" into a temp plugins dir.
func benchPlugins(b testing.TB) string {
	dir := b.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	write("noop/noop.json", `{"name":"noop","automatortypes":["hello"],"hello":{"name":"hello","classname":"Noop"}}`)
	write("noop/noop.lua", `Noop = require("loom").Automator:extend("Noop")
function Noop:install(input) end`)
	var sb strings.Builder
	sb.WriteString("Big = require(\"loom\").Provider:extend(\"Big\")\nlocal json = require(\"loom.json\")\n")
	for i := 0; sb.Len() < 9000 || strings.Count(sb.String(), "\n") < 300; i++ {
		fmt.Fprintf(&sb, "local function helper%d(input, n)\n  local t = {id = n, name = \"h%d\", tags = {\"a\", \"b\"}}\n  if n > %d then return json.encode(t) end\n  return tostring(input) .. t.name\nend\n", i, i, i)
	}
	sb.WriteString("function Big:create(input) self.result.status = 0 end\n")
	write("big/big.json", `{"name":"big","providertypes":["big"],"big":{"name":"big","classname":"Big"}}`)
	write("big/big.lua", sb.String())
	return dir
}

func benchRuntime(b testing.TB, dir string) *Runtime {
	rt, err := New(Options{PluginsDir: dir, WorkDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Load(context.Background()); err != nil {
		b.Fatal(err)
	}
	for _, e := range rt.LoadErrors() {
		if !e.Warning {
			b.Fatal(e)
		}
	}
	return rt
}

// BenchmarkTaskOverhead is the whole per-task cost of a no-op hook on a
// realistic ~2 KB Coopr task: parse, VM checkout, task to Lua, the call,
// result to JSON.
func BenchmarkTaskOverhead(b *testing.B) {
	data, err := os.ReadFile("testdata/task-2k.json")
	if err != nil {
		b.Fatal(err)
	}
	rt := benchRuntime(b, benchPlugins(b))
	defer rt.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := rt.Run(ctx, data)
		if err != nil || res.Status != 0 {
			b.Fatal(err, res)
		}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNativeBaseline is what a native Go "hook" costs for the same
// work: decode the task JSON into a map and encode a result.
func BenchmarkNativeBaseline(b *testing.B) {
	data, err := os.ReadFile("testdata/task-2k.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var task map[string]any
		if err := json.Unmarshal(data, &task); err != nil {
			b.Fatal(err)
		}
		res := map[string]any{"taskId": task["taskId"], "status": 0, "duration_ms": 0.0}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdLoad loads a plugins dir holding one ~300-line plugin:
// scan, hash, compile, provision the first VM.
func BenchmarkColdLoad(b *testing.B) {
	dir := benchPlugins(b)
	os.RemoveAll(filepath.Join(dir, "noop"))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rt := benchRuntime(b, dir)
		if len(rt.Types()) != 1 {
			b.Fatal("plugin not loaded")
		}
		rt.Close()
	}
}

// TestIdleVMMemory measures the heap held by 1,000 warm idle VMs of a
// plugin type (target: at most 100 MB). It reports, and fails only far
// beyond the target, since heap figures vary with the Go version.
func TestIdleVMMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	rt := benchRuntime(t, benchPlugins(t))
	defer rt.Close()
	pt := rt.snap.Load().types["hello"]
	heap := func() uint64 {
		goruntime.GC()
		goruntime.GC()
		var m goruntime.MemStats
		goruntime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	vms := make([]*vm, 1000)
	for i := range vms {
		v, err := newVM(rt, pt, "default")
		if err != nil {
			t.Fatal(err)
		}
		vms[i] = v
	}
	after := heap()
	mb := float64(after-before) / (1 << 20)
	t.Logf("1000 idle VMs hold %.1f MiB (%.1f KiB each)", mb, mb*1024/1000)
	if mb > 300 {
		t.Fatalf("1000 idle VMs hold %.1f MiB; the target is 100 MB", mb)
	}
	for _, v := range vms {
		v.close()
	}
}

// BenchmarkOverheadRatio interleaves the two workloads above in short
// rounds and reports the median of the per-round ratios, so the noise of a
// shared machine hits both sides alike. ns/op is one Loom task.
func BenchmarkOverheadRatio(b *testing.B) {
	data, err := os.ReadFile("testdata/task-2k.json")
	if err != nil {
		b.Fatal(err)
	}
	rt := benchRuntime(b, benchPlugins(b))
	defer rt.Close()
	ctx := context.Background()
	loom := func() {
		res, err := rt.Run(ctx, data)
		if err != nil || res.Status != 0 {
			b.Fatal(err, res)
		}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
	native := func() {
		var task map[string]any
		if err := json.Unmarshal(data, &task); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(map[string]any{"taskId": task["taskId"], "status": 0, "duration_ms": 0.0}); err != nil {
			b.Fatal(err)
		}
	}
	const round = 100
	var ratios []float64
	var loomTotal time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		t0 := time.Now()
		for i := 0; i < round; i++ {
			native()
		}
		t1 := time.Now()
		for i := 0; i < round; i++ {
			loom()
		}
		t2 := time.Now()
		loomTotal += t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
	}
	sort.Float64s(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-native")
	b.ReportMetric(float64(loomTotal.Nanoseconds())/float64(len(ratios)*round), "ns/task")
}
