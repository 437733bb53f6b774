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
	p       *plan.Plan
	job     string
	status  []string    // per task: "", running, done, retrying, failed
	run     []string    // the run a running task is on (DELETE before a retried CREATE...)
	started []time.Time // when the running run started
	msg     []string
	lines   int // lines drawn last time, to move back over them
	stop    chan struct{}
	done    chan struct{}
}

// stderrTerminal reports whether w is a terminal.
func stderrTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newLiveView(w io.Writer, p *plan.Plan, job *state.Job) *liveView {
	n := len(p.Tasks)
	v := &liveView{w: w, p: p, job: job.ID, status: make([]string, n), run: make([]string, n), started: make([]time.Time, n),
		msg: make([]string, n), stop: make(chan struct{}), done: make(chan struct{})}
	for i, t := range job.Tasks {
		if t != nil && t.Status == state.TaskDone && i < n {
			v.status[i] = state.TaskDone
		}
	}
	go v.loop()
	return v
}

// observe is apply.Options.Observe.
func (v *liveView) observe(ev apply.Event) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.status[ev.Task] = ev.Status
	v.run[ev.Task] = ev.Run
	if ev.Status == state.TaskRunning {
		v.started[ev.Task] = ev.Time
	}
	v.msg[ev.Task] = ev.Message
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
	out := []string{fmt.Sprintf("job %s %s: %d/%d tasks done, %d running, %d failed", v.job, v.p.Action, done, len(v.p.Tasks), running, failed)}
	shown := 0
	for si, st := range v.p.Stages {
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
		t := v.p.Tasks[i]
		what := strings.TrimSpace(v.run[i] + " " + t.Service)
		if v.run[i] != t.Name {
			what = fmt.Sprintf("%s (before retrying %s)", v.run[i], strings.TrimSpace(t.Name+" "+t.Service))
		}
		switch s {
		case state.TaskRunning:
			shownRun++
			out = append(out, fmt.Sprintf("  running  %-12s %s  %s", t.Node, what, now.Sub(v.started[i]).Round(100*time.Millisecond)))
		case "retrying", state.TaskFailed:
			shownFail++
			out = append(out, fmt.Sprintf("  %-8s %-12s %s: %s", s, t.Node, what, v.msg[i]))
		}
	}
	if moreRun+moreFail > 0 {
		out = append(out, fmt.Sprintf("  ... and %d more running, %d more failing", moreRun, moreFail))
	}
	return out
}
