package runtime

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// BenchmarkCallVsTask compares a called kind's hook (a cluster driver's
// post_check: a ClusterInfo in, checked against its input shape, a
// ClusterInfo out, checked against the result shape) with the no-op Coopr
// task of BenchmarkOverheadRatio, interleaved in rounds of 100: the cost
// of the kind machinery against the task path it sits beside.
func BenchmarkCallVsTask(b *testing.B) {
	data, err := os.ReadFile("testdata/task-2k.json")
	if err != nil {
		b.Fatal(err)
	}
	dir := benchPlugins(b)
	os.MkdirAll(filepath.Join(dir, "drv"), 0o755)
	os.WriteFile(filepath.Join(dir, "drv", "drv.json"), []byte(`{"name":"drv","clusterdrivers":["drv"],"drv":{"classname":"Drv"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "drv", "drv.lua"), []byte(`Drv = require("loom").ClusterDriver:extend("Drv")
function Drv:create_options() return {} end
function Drv:create(req) return {} end
function Drv:remove(req) end
function Drv:post_check(req) req.cluster_info.service_account_token = "t" return req.cluster_info end`), 0o644)
	rt := benchRuntime(b, dir)
	defer rt.Close()
	ctx := context.Background()
	call := &CallRequest{CallID: "b", Type: "drv", Hook: "post_check", Input: json.RawMessage(`{"cluster_info": {
	  "version": "1.30", "endpoint": "https://10.0.0.1", "username": "admin", "password": "p",
	  "root_ca_certificate": "Q0EgY2VydGlmaWNhdGUgZGF0YQ==", "client_certificate": "Y2xpZW50", "client_key": "a2V5",
	  "node_count": 3, "status": "RUNNING", "metadata": {"state": "{\"id\":\"c-1\",\"api_url\":\"https://k8s.example\"}", "region": "eu"}}}`)}
	task := func() {
		res, err := rt.Run(ctx, data)
		if err != nil || res.Status != 0 {
			b.Fatal(err, res)
		}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
	hook := func() {
		res, err := rt.Call(ctx, call)
		if err != nil || res.Status != 0 {
			b.Fatal(err, res)
		}
		if _, err := json.Marshal(res); err != nil {
			b.Fatal(err)
		}
	}
	const round = 100
	var ratios []float64
	var callTotal time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		t0 := time.Now()
		for i := 0; i < round; i++ {
			task()
		}
		t1 := time.Now()
		for i := 0; i < round; i++ {
			hook()
		}
		t2 := time.Now()
		callTotal += t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
	}
	sort.Float64s(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-task")
	b.ReportMetric(float64(callTotal.Nanoseconds())/float64(len(ratios)*round), "ns/call")
}
