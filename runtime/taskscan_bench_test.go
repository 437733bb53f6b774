package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// clusterTask is a cluster job's task for a cluster of n nodes: its
// config.nodes holds every node (what loomd apply sends, tens of
// kilobytes at 100 nodes).
func clusterTask(tb testing.TB, n int) []byte {
	tb.Helper()
	nodes := map[string]any{}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("shop-n-%d", i)
		nodes[id] = map[string]any{
			"nodenum": 1000 + i, "hostname": id + ".example.internal", "flavor": "standard-2", "image": "debian-12",
			"ipaddresses": map[string]string{"access_v4": "192.0.2.1", "bind_v4": "10.0.0.1"},
			"automators":  []string{"shell", "chef-solo"}, "services": []string{"base", "web", "db"},
			"providerid": fmt.Sprintf("i-%016x", i), "ssh-auth": map[string]any{"user": "root", "identityfile": "/keys/shop"},
		}
	}
	task := map[string]any{"taskId": "shop-001-0042-1", "jobId": "shop-001", "clusterId": "shop", "taskName": "INSTALL", "nodeId": "shop-n-7",
		"config": map[string]any{"hostname": "shop-n-7.example.internal", "automators": []string{"shell"}, "nodes": nodes,
			"provider": map[string]any{"name": "fake", "providertype": "fake", "provisioner": map[string]any{"region": "x", "note": "a \"quoted\" value\n"}},
			"service":  map[string]any{"name": "web", "action": map[string]any{"type": "shell", "fields": map[string]any{"script": "install.sh"}}},
			"cluster":  map[string]any{"env": "prod"}}}
	data, err := json.Marshal(task)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// BenchmarkParseClusterTask: ParseTask of a 100-node cluster's task, which
// the daemon runs once per task of a cluster job (its scan skips
// config.nodes).
func BenchmarkParseClusterTask(b *testing.B) {
	data := clusterTask(b, 100)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseTask(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseClusterTaskNodesChanged: as BenchmarkParseClusterTask, but
// each task's config.nodes differs from the last 16 tasks' (a node's
// address changed before every task): the cost when the scan has not
// seen the nodes before.
func BenchmarkParseClusterTaskNodesChanged(b *testing.B) {
	data := clusterTask(b, 100)
	at := bytes.Index(data, []byte(`"i-0000000000000032"`)) + 17
	var tasks [17][]byte
	for i := range tasks {
		tasks[i] = bytes.Clone(data)
		tasks[i][at] = "0123456789abcdefg"[i]
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := ParseTask(tasks[i%len(tasks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
