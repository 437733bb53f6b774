package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// storeBytes sums the bytes JetStream reports for every stream loomd
// keeps (tasks, state shards, index, cancel requests, outputs), and the
// size of the files under the store directory.
func storeBytes(tb testing.TB, q *Queue, dir string) (streams, files int64) {
	tb.Helper()
	ctx := context.Background()
	names := q.js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := q.js.Stream(ctx, name)
		if err != nil {
			tb.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		streams += int64(info.State.Bytes)
	}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				files += fi.Size()
			}
		}
		return nil
	})
	return streams, files
}

// coopTask is a Coopr INSTALL task of a realistic size (about 700 bytes).
func coopTask(id string) []byte {
	return []byte(`{"taskId":"` + id + `","jobId":"00000139-002","clusterId":"00000139","taskName":"INSTALL","nodeId":"abcdef12-3456-7890-abcd-ef1234567890",` +
		`"config":{"automators":["shell"],"hostname":"web-1.example.internal","ipaddresses":{"access_v4":"10.0.3.17","bind_v4":"10.0.3.17"},` +
		`"provider":{"providertype":"openstack","provisioner":{"auth":{"openstack_username":"svc","openstack_tenant":"prod"}}},` +
		`"service":{"name":"nginx","action":{"type":"shell","script":"scripts/nginx_install.sh","args":"--port 8080 --workers 4"}},` +
		`"ssh-auth":{"user":"root","identityfile":"ssh_keys/prod.pem"},"cluster":{"defaultconfig":{},"nodes":["web-1","web-2","db-1"]}}}`)
}

// BenchmarkBytesPerTask runs tasks through their whole life (submit, run,
// a 300-byte result) and reports the store bytes per finished task, then
// deletes them as retention does and reports what is left. Run with
// -benchtime=2000x.
func BenchmarkBytesPerTask(b *testing.B) {
	cfg := Config{DataDir: b.TempDir(), Logger: testLogger(), Retain: -1}
	q, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	result := []byte(`{"status":0,"message":"installed","stdout":"` + strings.Repeat("x", 200) + `","stderr":"","result":{"version":"1.25.3"}}`)
	run := RunnerFunc(func(context.Context, []byte) ([]byte, int, error) { return result, 0, nil })
	if err := q.SetTypes(context.Background(), []Route{shell}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Serve(ctx, run, 8); close(done) }()
	defer func() { cancel(); <-done }()
	before, beforeFiles := storeBytes(b, q, cfg.DataDir)
	submitAndWait(b, q, func(i int64) []byte { return coopTask(fmt.Sprintf("bytes-%d", i)) })
	q.ix.bg.Wait() // old index entries removed
	after, afterFiles := storeBytes(b, q, cfg.DataDir)
	b.ReportMetric(float64(after-before)/float64(b.N), "stream-B/task")
	b.ReportMetric(float64(afterFiles-beforeFiles)/float64(b.N), "file-B/task")
	n, err := q.Sweep(context.Background(), time.Now().Add(time.Hour))
	if err != nil || n != b.N {
		b.Fatalf("Sweep = %d, %v; want %d", n, err, b.N)
	}
	swept, sweptFiles := storeBytes(b, q, cfg.DataDir)
	b.ReportMetric(float64(swept-before)/float64(b.N), "stream-B/task-after-delete")
	b.ReportMetric(float64(sweptFiles-beforeFiles)/float64(b.N), "file-B/task-after-delete")
}

// scanAll is the list before the index: read every record of every shard
// (a KV watch) and keep the matching ones. It is the baseline of
// BenchmarkList.
func (q *Queue) scanAll(ctx context.Context, f Filter) ([]Record, error) {
	var out []Record
	for _, kv := range q.kvs {
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return nil, err
		}
		for e := range w.Updates() {
			if e == nil {
				break
			}
			rec, err := decodeRecord(e)
			if err != nil {
				continue
			}
			if (f.State == "" || rec.State == f.State) && (f.Type == "" || rec.Type == f.Type) && (f.Cluster == "" || rec.ClusterID == f.Cluster) {
				out = append(out, rec)
			}
		}
		_ = w.Stop()
	}
	slices.SortFunc(out, func(a, b Record) int { return b.Created.Compare(a.Created) })
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// BenchmarkList measures a page of List against reading every record (the
// list before the index) on the same store, seeded with 100,000 finished
// and queued records (LOOM_BENCH_RECORDS overrides the count). Every
// sub-benchmark reports "scan/op": how many of its calls fit in the time of
// one full read, measured in the same run.
//
//	go test -run XXX -bench BenchmarkList -benchtime=200x ./internal/queue/
func BenchmarkList(b *testing.B) {
	n := 100_000
	if v := os.Getenv("LOOM_BENCH_RECORDS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	cfg := Config{DataDir: b.TempDir(), Logger: testLogger(), Retain: -1, SyncInterval: time.Minute}
	q, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	seed(b, q, n)
	ctx := context.Background()
	// The baseline: the median of 3 full reads.
	var scans []time.Duration
	for range 3 {
		start := time.Now()
		if _, err := q.scanAll(ctx, Filter{Limit: 100}); err != nil {
			b.Fatal(err)
		}
		scans = append(scans, time.Since(start))
	}
	slices.Sort(scans)
	scan := scans[1]
	b.Logf("%d records; reading every record: %v (median of 3)", n, scan)
	deep, err := q.List(ctx, Filter{Limit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n/2000 && deep.Next != ""; i++ { // a cursor half way down
		if deep, err = q.List(ctx, Filter{Limit: 1000, After: deep.Next}); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		f    Filter
	}{
		{"page100", Filter{Limit: 100}},
		{"page100-halfway", Filter{Limit: 100, After: deep.Next}},
		{"page1000", Filter{Limit: 1000}},
		{"page100-state=failed", Filter{State: Failed, Limit: 100}},                     // 5% of the tasks
		{"page100-state=queued", Filter{State: Queued, Limit: 100}},                     // 4%, the oldest ones
		{"page100-type=rare", Filter{Type: "rare", Limit: 100}},                         // 0.1%
		{"page100-cluster=c7", Filter{Cluster: "c7", Limit: 100}},                       // 1%
		{"page10-cluster=c20-failed", Filter{Cluster: "c20", State: Failed, Limit: 10}}, // 1%
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				p, err := q.List(ctx, c.f)
				if err != nil || len(p.Records) == 0 {
					b.Fatalf("List(%+v) = %d records, %v", c.f, len(p.Records), err)
				}
			}
			b.ReportMetric(float64(scan)/(float64(b.Elapsed())/float64(b.N)), "scan/op")
		})
	}
}

// seed writes n records as the queue would leave them: the first 4%
// queued (in the index's active class), then succeeded (90%) and failed
// (5%, every 20th), 10 plugin types plus a rare one (every 1000th), 100
// clusters.
func seed(b *testing.B, q *Queue, n int) {
	b.Helper()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				now := time.Now().UTC()
				rec := Record{TaskID: fmt.Sprintf("%s-%07d", NewID(), i), Family: "automator", Type: fmt.Sprintf("t%d", i%10),
					ClusterID: fmt.Sprintf("c%d", i%100), Hook: "install", TaskName: "INSTALL", Created: now, State: Succeeded, Attempts: 1}
				switch {
				case i < n*4/100:
					rec.State, rec.Attempts = Queued, 0
				case i%20 == 0:
					rec.State = Failed
				}
				if i%1000 == 999 {
					rec.Type = "rare"
				}
				if rec.State.Terminal() {
					st := 0
					rec.Started, rec.Finished, rec.Status = &now, &now, &st
					rec.Result = json.RawMessage(`{"status":0,"message":"ok","result":{}}`)
				}
				if _, err := q.write(context.Background(), Record{}, rec); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.Logf("seeded %d records in %v", n, time.Since(start).Round(time.Millisecond))
}
