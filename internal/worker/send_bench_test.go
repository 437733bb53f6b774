package worker_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/worker"
)

// BenchmarkConnSendClusterTask: one run frame carrying a task the size of
// a 100-node cluster job's (about 35 KB, most of it config.nodes).
//
//	go test -run '^$' -bench ConnSendClusterTask ./internal/worker/
func BenchmarkConnSendClusterTask(b *testing.B) {
	c := worker.NewConn(sink{})
	task := json.RawMessage(`{"taskId":"t-1","config":{"nodes":"` + strings.Repeat("n", 35<<10) + `"}}`)
	f := &worker.Frame{Type: worker.TypeRun, ID: 5, Task: task}
	b.SetBytes(int64(len(task)))
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Send(f); err != nil {
			b.Fatal(err)
		}
	}
}

// sink is a stream that drops what is written to it.
type sink struct{}

func (sink) Read([]byte) (int, error)    { return 0, nil }
func (sink) Write(b []byte) (int, error) { return len(b), nil }
