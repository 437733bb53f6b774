package rancher

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/loomrt/loom/internal/rancher/driverpb"
	"github.com/loomrt/loom/runtime"
)

// BenchmarkRPCVsCall compares PostCheck through the Driver service (a gRPC
// client and server over loopback TCP, the messages converted to and from
// the hook's tables) with the same hook called in-process (runtime.Call),
// interleaved in rounds of 100: what the Rancher host adds to a call.
func BenchmarkRPCVsCall(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "drv")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "drv.json"), []byte(`{"name":"drv","clusterdrivers":["drv"],"drv":{"classname":"Drv"}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "drv.lua"), []byte(`Drv = require("loom").ClusterDriver:extend("Drv")
function Drv:create_options() return {} end
function Drv:create(req) return {} end
function Drv:remove(req) end
function Drv:post_check(req) req.cluster_info.service_account_token = "t" return req.cluster_info end`), 0o644)
	rt, err := runtime.New(runtime.Options{PluginsDir: filepath.Dir(dir), WorkDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	ctx := context.Background()
	if err := rt.Load(ctx); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	NewServer(rt, "drv", nil).Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := driverpb.NewDriverClient(conn)

	ci := &driverpb.ClusterInfo{Version: "1.30", Endpoint: "https://10.0.0.1", Username: "admin", Password: "p",
		RootCaCertificate: "Q0EgY2VydGlmaWNhdGUgZGF0YQ==", ClientCertificate: "Y2xpZW50", ClientKey: "a2V5", NodeCount: 3,
		Status: "RUNNING", Metadata: map[string]string{"state": `{"id":"c-1","api_url":"https://k8s.example"}`, "region": "eu"}}
	input, _ := json.Marshal(infoIn(ci))
	call := &runtime.CallRequest{CallID: "b", Type: "drv", Hook: "post_check", Input: input}
	direct := func() {
		res, err := rt.Call(ctx, call)
		if err != nil || res.Status != 0 {
			b.Fatal(err, res)
		}
	}
	rpc := func() {
		if out, err := client.PostCheck(ctx, ci); err != nil || out.GetServiceAccountToken() != "t" {
			b.Fatal(err, out)
		}
	}
	rpc() // connect
	const round = 100
	var ratios []float64
	var rpcTotal time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		t0 := time.Now()
		for i := 0; i < round; i++ {
			direct()
		}
		t1 := time.Now()
		for i := 0; i < round; i++ {
			rpc()
		}
		t2 := time.Now()
		rpcTotal += t2.Sub(t1)
		ratios = append(ratios, float64(t2.Sub(t1))/float64(t1.Sub(t0)))
	}
	sort.Float64s(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "x-call")
	b.ReportMetric(float64(rpcTotal.Nanoseconds())/float64(len(ratios)*round), "ns/rpc")
}
