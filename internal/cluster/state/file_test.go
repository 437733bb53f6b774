package state

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJournal: Get replays the changes appended after the snapshot, skips
// those a later snapshot already holds, and drops a torn last line.
func TestJournal(t *testing.T) {
	s := &FileStore{Dir: t.TempDir()}
	c := &Cluster{Name: "c", Status: Pending, Nodes: map[string]*Node{"n1": {ID: "n1", State: NodeNew}},
		Jobs: []*Job{{ID: "c-001", Status: JobRunning, Tasks: map[int]*Task{}}}}
	if err := s.Put(c); err != nil {
		t.Fatal(err)
	}
	zero, one := 0, 1
	c.Seq++
	if err := s.Append(c, []Change{{Job: "c-001", Task: &zero, Rec: &Task{Status: TaskDone}}, {Node: &Node{ID: "n1", State: NodeCreated}}}); err != nil {
		t.Fatal(err)
	}
	c.Seq++
	if err := s.Append(c, []Change{{Job: "c-001", Task: &one, Rec: &Task{Status: TaskRunning}}, {Status: Incomplete}}); err != nil {
		t.Fatal(err)
	}
	// A crash mid-append leaves half a line.
	f, _ := os.OpenFile(filepath.Join(s.Dir, "c.journal"), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"seq":3,"changes":[{"job":"c-0`)
	f.Close()
	got, err := s.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	j := got.Jobs[0]
	if j.Tasks[0].Status != TaskDone || j.Tasks[1].Status != TaskRunning || got.Nodes["n1"].State != NodeCreated || got.Status != Incomplete || got.Seq != 2 {
		t.Fatalf("replayed: %+v tasks %v node %+v", got, j.Tasks, got.Nodes["n1"])
	}
	// A snapshot at seq 2 holds all that: nothing is replayed twice, even
	// if the journal survived (a crash before its removal).
	journal, _ := os.ReadFile(filepath.Join(s.Dir, "c.journal"))
	got.Jobs[0].Tasks[1].Status = TaskDone
	if err := s.Put(got); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Dir, "c.journal"), journal, 0o600)
	again, err := s.Get("c")
	if err != nil {
		t.Fatal(err)
	}
	if again.Jobs[0].Tasks[1].Status != TaskDone {
		t.Errorf("an old journal line overrode the newer snapshot: %v", again.Jobs[0].Tasks[1])
	}
	if names, _ := s.List(); len(names) != 1 || names[0] != "c" {
		t.Errorf("list: %v", names)
	}
	unlock, err := s.Lock("c")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Lock("c"); err == nil || !strings.Contains(err.Error(), "another loomd process") {
		t.Errorf("second lock: %v", err)
	}
	unlock()
	if _, err := s.Get("Bad_Name"); err == nil {
		t.Errorf("a bad name was accepted")
	}
}
