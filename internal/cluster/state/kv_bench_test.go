package state

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/queue"
)

// BenchmarkKVPutGet1000: a 1,000-node cluster with a 9,000-task job,
// written whole (first Put), rewritten with one task changed (the Put at
// a job's end), and read back.
func BenchmarkKVPutGet1000(b *testing.B) {
	s := openKV(b)
	c := &Cluster{Name: "big", Status: Pending, Nodes: map[string]*Node{}}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("big-n-%d", i+1)
		c.Nodes[id] = &Node{ID: id, Num: 1000 + i, Hostname: id + ".local", State: NodeActive, Services: []string{"a", "b"},
			IPAddresses: map[string]any{"access_v4": "10.0.0.1"}, Results: map[string]any{"providerid": "vm-" + id}}
	}
	j := &Job{ID: "big-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{}}
	for i := 0; i < 9000; i++ {
		j.Tasks[i] = &Task{Status: TaskDone, Name: "INSTALL", Node: "big-n-1", Service: "a", Stage: 4,
			Runs: []Run{{ID: fmt.Sprintf("big-001-%04d-1", i+1), Name: "INSTALL", Status: TaskDone, Started: time.Now(), Duration: 12.5}}}
	}
	c.Jobs = []*Job{j}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := s.Put(c); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		j.Tasks[5].Status = TaskFailed
		if err := s.Put(c); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		got, err := s.Get("big")
		if err != nil || len(got.LastJob().Tasks) != 9000 {
			b.Fatal(err)
		}
		t3 := time.Now()
		b.ReportMetric(t1.Sub(t0).Seconds()*1000, "ms/put-first")
		b.ReportMetric(t2.Sub(t1).Seconds()*1000, "ms/put-one-change")
		b.ReportMetric(t3.Sub(t2).Seconds()*1000, "ms/get")
		j.Tasks[5].Status = TaskDone
	}
}

// BenchmarkKVAppendRound: a round of the executor's journal on a 100-node
// cluster (16 tasks and their nodes), as one journal message (Append, the
// default), the same with the journal gate of loomd serve asking the
// queue's view of the announcements before each round (journal-gated: a
// daemon serving 50 plugin types, every daemon reading the journal), and
// written to its keys (AppendChanges) as one atomic batch and key by key
// (what a round costs while an older loomd is live).
func BenchmarkKVAppendRound(b *testing.B) {
	for _, mode := range []string{"journal", "journal-gated", "batch", "keys"} {
		b.Run(mode, func(b *testing.B) {
			s, q := openKVQueue(b)
			if !s.atomic {
				b.Fatal("the embedded server refused atomic batches")
			}
			if mode == "journal-gated" {
				var routes []queue.Route
				for i := range 50 {
					routes = append(routes, queue.Route{Family: "automator", Type: fmt.Sprintf("type%d", i)})
				}
				if err := q.SetTypes(context.Background(), routes); err != nil {
					b.Fatal(err)
				}
				s.SetJournalGate(func() ([]string, bool) { return q.Lacking(JournalCapability) })
				if l, sure := q.Lacking(JournalCapability); len(l) > 0 || !sure {
					b.Fatalf("the gate is closed: %v %v", l, sure)
				}
			}
			s.atomic = mode != "keys"
			c := &Cluster{Name: "bench", Status: Pending, Nodes: map[string]*Node{}}
			for i := range 100 {
				id := fmt.Sprintf("bench-n-%d", i+1)
				c.Nodes[id] = &Node{ID: id, Num: 1000 + i, Hostname: id + ".local", State: NodeActive, Services: []string{"a", "b"}}
			}
			c.Jobs = []*Job{{ID: "bench-001", Action: "create", Status: JobRunning, Tasks: map[int]*Task{}}}
			if err := s.Put(c); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var changes []Change
				for k := range 16 {
					n := c.Nodes[fmt.Sprintf("bench-n-%d", (i*16+k)%100+1)]
					idx := i*16 + k
					changes = append(changes, Change{Node: n}, Change{Job: "bench-001", Task: &idx,
						Rec: &Task{Status: TaskDone, Name: "INSTALL", Node: n.ID, Runs: []Run{{ID: fmt.Sprintf("bench-001-%04d-1", idx+1), Status: TaskDone}}}})
				}
				var err error
				if strings.HasPrefix(mode, "journal") {
					err = s.Append(c, changes)
				} else {
					err = s.AppendChanges(c.Name, changes)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
