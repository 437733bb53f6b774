package cli

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/runtime"
)

// benchTask is a Coopr INSTALL task of a realistic size (about 700 bytes).
var benchTask = []byte(`{"taskId":"01KBENCH0000000000000000001","jobId":"00000139-002","clusterId":"00000139","taskName":"INSTALL","nodeId":"abcdef12-3456-7890-abcd-ef1234567890",` +
	`"config":{"automators":["shell"],"hostname":"web-1.example.internal","ipaddresses":{"access_v4":"10.0.3.17","bind_v4":"10.0.3.17"},` +
	`"provider":{"providertype":"openstack","provisioner":{"auth":{"openstack_username":"svc","openstack_tenant":"prod"}}},` +
	`"service":{"name":"nginx","action":{"type":"shell","script":"scripts/nginx_install.sh","args":"--port 8080 --workers 4"}},` +
	`"ssh-auth":{"user":"root","identityfile":"ssh_keys/prod.pem"},"cluster":{"defaultconfig":{},"nodes":["web-1","web-2","db-1"]}}}`)

type nopRunner struct{}

func (nopRunner) Run(context.Context, []byte) ([]byte, int, error) {
	return []byte(`{"status":0}`), 0, nil
}

// BenchmarkTaskRunner is what the daemon adds to every task it runs for
// its log, when the task logs nothing: the runner's read of the task's
// head, the attempt handed over from the claim, tracking in the tee.
// "parse" is what the runner did per task before (runtime.ParseTask, for
// cluster jobs' tasks only), for comparison.
func BenchmarkTaskRunner(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q, err := queue.Open(ctx, queue.Config{DataDir: b.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	tee := logstream.NewTee()
	l, err := tasklog.Open(ctx, q.JetStream(), tee, tasklog.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := taskRunner{next: nopRunner{}, origin: tasklog.OriginQueue, logs: taskLogs{l: l}, tee: tee,
		secrets: func([]byte) *redact.Set { return nil }}
	rec := queue.Record{TaskID: "01KBENCH0000000000000000001", State: queue.Running, Attempts: 1}
	b.Run("silent-task", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, _, err := r.Run(queue.WithRunningRecord(ctx, rec), benchTask); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := runtime.ParseTask(benchTask); err != nil {
				b.Fatal(err)
			}
		}
	})
}
