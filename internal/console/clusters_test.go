package console

import (
	"testing"

	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/state"
)

func TestWaitsFor(t *testing.T) {
	// Step 2 of a job (offset 10): START web on two nodes waits for its
	// node's CONFIGURE and for every START db (a barrier group).
	p := &plan.Plan{
		Tasks: []plan.Task{
			{Name: "START", Service: "db", Node: "db-1"},
			{Name: "START", Service: "db", Node: "db-2"},
			{Name: "CONFIGURE", Service: "web", Node: "web-1"},
			{Name: "START", Service: "web", Node: "web-1", Deps: []int{2}, Groups: []int{0}},
		},
		Groups: [][]int{{0, 1}},
	}
	job := &state.Job{Tasks: map[int]*state.Task{10: {Status: state.TaskDone}, 12: {Status: state.TaskRunning}}}
	if got := waitsFor(job, p, 10, 3); got != "CONFIGURE web on web-1, START db on db-2" {
		t.Fatalf("waitsFor = %q", got)
	}
	job.Tasks[11], job.Tasks[12] = &state.Task{Status: state.TaskDone}, &state.Task{Status: state.TaskSkipped}
	if got := waitsFor(job, p, 10, 3); got != "" {
		t.Fatalf("waitsFor with everything done = %q", got)
	}
}
