package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/plan"
	"github.com/loomrt/loom/internal/cluster/state"
)

// liveView is loomd apply's progress on a terminal: per stage, how many
// tasks are done; every running task with its elapsed time; every failure
// with the first line of its message. It is redrawn in place twice a
// second; in CI or piped, the log lines are the progress instead.
type liveView struct {
	mu      sync.Mutex
	w       io.Writer
	p       *viewPlan
	job     string
	note    string      // a line under the header (a takeover, an unreachable daemon)
	status  []string    // per task: "", running, done, retrying, failed
	run     []string    // the run a running task is on (DELETE before a retried CREATE...)
	started []time.Time // when the running run started
	msg     []string
	lines   int // lines drawn last time, to move back over them
	last    int // lines of the last frame (lines counts the cleared ones too)
	stop    chan struct{}
	done    chan struct{}
}

// stderrTerminal reports whether w is a terminal.
func stderrTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// viewPlan is what a live view draws from: a plan's tasks and stages,
// from the plan itself (--local) or from the daemon's view of the job.
type viewPlan struct {
	action string
	tasks  []viewTask
	stages [][]int
}

type viewTask struct {
	name, node, service string
	stage               int
}

func viewOfPlan(p *plan.Plan) *viewPlan {
	v := &viewPlan{action: string(p.Action), stages: p.Stages}
	for _, t := range p.Tasks {
		v.tasks = append(v.tasks, viewTask{name: t.Name, node: t.Node, service: t.Service, stage: t.Stage})
	}
	return v
}

func newLiveView(w io.Writer, p *plan.Plan, job *state.Job) *liveView {
	v := startLiveView(w, viewOfPlan(p), job.ID)
	for i, t := range job.Tasks {
		if t != nil && t.Status == state.TaskDone {
			v.set(i, "", state.TaskDone, "", time.Time{})
		}
	}
	return v
}

// viewOfJob is a job's every step as one view: the steps' tasks one after
// the other (their job-wide indexes), stages numbered on across steps. A
// step whose plan no longer rebuilds (its nodes are gone) shows its task
// records.
func viewOfJob(cl *state.Cluster, job *state.Job) *viewPlan {
	v := &viewPlan{action: job.Action, tasks: make([]viewTask, job.TaskCount)}
	plans, _ := apply.JobPlans(cl, job)
	for k, st := range job.Steps {
		base := len(v.stages)
		if k < len(plans) && plans[k] != nil {
			p := plans[k]
			for i, t := range p.Tasks {
				if st.Offset+i < len(v.tasks) {
					v.tasks[st.Offset+i] = viewTask{name: t.Name, node: t.Node, service: t.Service, stage: base + t.Stage}
				}
			}
			for _, stage := range p.Stages {
				idx := make([]int, len(stage))
				for j, i := range stage {
					idx[j] = st.Offset + i
				}
				v.stages = append(v.stages, idx)
			}
			continue
		}
		stages := map[int][]int{}
		top := 0
		for i := st.Offset; i < st.Offset+st.Tasks && i < len(v.tasks); i++ {
			if rec := job.Tasks[i]; rec != nil {
				v.tasks[i] = viewTask{name: rec.Name, node: rec.Node, service: rec.Service, stage: base + rec.Stage}
				stages[rec.Stage] = append(stages[rec.Stage], i)
				top = max(top, rec.Stage)
			}
		}
		for s := 1; s <= top; s++ {
			v.stages = append(v.stages, stages[s])
		}
	}
	return v
}

// newJobView draws a whole job's progress (--local), the tasks it already
// did shown done.
func newJobView(w io.Writer, cl *state.Cluster, job *state.Job) *liveView {
	v := startLiveView(w, viewOfJob(cl, job), job.ID)
	for i, t := range job.Tasks {
		if t != nil && (t.Status == state.TaskDone || t.Status == state.TaskAbandoned) {
			v.set(i, "", t.Status, "", time.Time{})
		}
	}
	return v
}

// startLiveView draws p's progress until close.
func startLiveView(w io.Writer, p *viewPlan, job string) *liveView {
	n := len(p.tasks)
	v := &liveView{w: w, p: p, job: job, status: make([]string, n), run: make([]string, n), started: make([]time.Time, n),
		msg: make([]string, n), stop: make(chan struct{}), done: make(chan struct{})}
	go v.loop()
	return v
}

// observe is apply.Options.Observe.
func (v *liveView) observe(ev apply.Event) { v.set(ev.Task, ev.Run, ev.Status, ev.Message, ev.Time) }

// set records task i's state.
func (v *liveView) set(i int, run, status, msg string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if i < 0 || i >= len(v.status) {
		return
	}
	v.status[i] = status
	if run != "" {
		v.run[i] = run
	}
	if status == state.TaskRunning {
		v.started[i] = at
	}
	v.msg[i] = msg
}

// setNote shows a line under the header ("" removes it).
func (v *liveView) setNote(s string) {
	v.mu.Lock()
	v.note = s
	v.mu.Unlock()
}

func (v *liveView) loop() {
	defer close(v.done)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		v.draw(time.Now())
		select {
		case <-v.stop:
			v.draw(time.Now())
			if extra := v.lines - v.last; extra > 0 {
				// The last frame was shorter than the tallest: what
				// follows goes right under it, over the cleared lines.
				fmt.Fprintf(v.w, "\x1b[%dA", extra)
			}
			return
		case <-tick.C:
		}
	}
}

// close draws the last frame and stops.
func (v *liveView) close() {
	close(v.stop)
	<-v.done
}

func (v *liveView) draw(now time.Time) {
	v.mu.Lock()
	lines := v.render(now)
	v.mu.Unlock()
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines) // back to the first line drawn
	}
	for _, l := range lines {
		b.WriteString("\x1b[2K" + l + "\n")
	}
	for i := len(lines); i < v.lines; i++ {
		b.WriteString("\x1b[2K\n")
	}
	v.lines = max(len(lines), v.lines)
	v.last = len(lines)
	io.WriteString(v.w, b.String())
}

// render is the frame: a header, one line per unfinished stage (up to
// 8), the running tasks, and the failures.
func (v *liveView) render(now time.Time) []string {
	done, running, failed := 0, 0, 0
	for _, s := range v.status {
		switch s {
		case state.TaskDone:
			done++
		case state.TaskRunning:
			running++
		case state.TaskFailed:
			failed++
		}
	}
	out := []string{fmt.Sprintf("job %s %s: %d/%d tasks done, %d running, %d failed", v.job, v.p.action, done, len(v.p.tasks), running, failed)}
	if v.note != "" {
		out = append(out, "  "+v.note)
	}
	shown := 0
	for si, st := range v.p.stages {
		d, r, f := 0, 0, 0
		for _, i := range st {
			switch v.status[i] {
			case state.TaskDone:
				d++
			case state.TaskRunning:
				r++
			case state.TaskFailed, "retrying":
				f++
			}
		}
		if d == len(st) {
			continue
		}
		if shown == 8 {
			out = append(out, "  ...")
			break
		}
		shown++
		line := fmt.Sprintf("  stage %d: %d/%d done, %d running, %d pending", si+1, d, len(st), r, len(st)-d-r-f)
		if f > 0 {
			line += fmt.Sprintf(", %d failed or retrying", f)
		}
		out = append(out, line)
	}
	// At most 16 running and 10 failing tasks: the frame must fit a
	// terminal; the summary lists every failure at the end.
	shownRun, shownFail, moreRun, moreFail := 0, 0, 0, 0
	for i, s := range v.status {
		switch {
		case s == state.TaskRunning && shownRun == 16:
			moreRun++
			continue
		case (s == "retrying" || s == state.TaskFailed) && shownFail == 10:
			moreFail++
			continue
		}
		t := v.p.tasks[i]
		run := v.run[i]
		if run == "" {
			run = t.name
		}
		what := strings.TrimSpace(run + " " + t.service)
		if run != t.name {
			what = fmt.Sprintf("%s (before retrying %s)", run, strings.TrimSpace(t.name+" "+t.service))
		}
		switch s {
		case state.TaskRunning:
			shownRun++
			elapsed := "-"
			if !v.started[i].IsZero() {
				elapsed = now.Sub(v.started[i]).Round(100 * time.Millisecond).String()
			}
			out = append(out, fmt.Sprintf("  running  %-12s %s  %s", t.node, what, elapsed))
		case "retrying", state.TaskFailed:
			shownFail++
			out = append(out, fmt.Sprintf("  %-8s %-12s %s: %s", s, t.node, what, v.msg[i]))
		}
	}
	if moreRun+moreFail > 0 {
		out = append(out, fmt.Sprintf("  ... and %d more running, %d more failing", moreRun, moreFail))
	}
	return out
}
