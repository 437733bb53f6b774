package test

// Cluster jobs run in the daemon (issue 21 items 1 and 8): loomd apply
// submits the job and follows it; the CLI dying changes nothing; loomd
// cluster watch re-attaches; a daemon that dies is replaced by another
// sharing the queue, which takes the job over and finishes it without
// running a finished task again, while the CLI keeps following.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// proc is a loomd command running in the background.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{}
}

// start runs a loomd command without waiting for it.
func (e *clusterEnv) start(args ...string) *proc {
	e.t.Helper()
	p := &proc{cmd: e.cmd(context.Background(), args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	e.t.Cleanup(func() { p.kill9() })
	return p
}

func (p *proc) kill9() {
	select {
	case <-p.exited:
		return // reaped: -pid may be another process's group by now
	default:
	}
	if p.cmd.Process != nil {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.exited
}

// wait waits for the command to end and returns its exit status.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		p.kill9()
		t.Fatalf("loomd %v did not end within %v\n--- stdout\n%s\n--- stderr\n%s", p.cmd.Args[1:], d, p.stdout.String(), p.stderr.String())
		return -1
	}
}

// hold makes the named task ("START db") wait on every host until gate.
func (e *clusterEnv) hold(task string) {
	e.t.Helper()
	for _, h := range e.hosts {
		os.Remove(h.HostPath(fxGate))
		if err := os.WriteFile(h.HostPath(fxHold), []byte(task), 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
}

// gate lets the held task go on.
func (e *clusterEnv) gate() {
	for _, h := range e.hosts {
		os.WriteFile(h.HostPath(fxGate), nil, 0o644)
		os.Remove(h.HostPath(fxHold))
	}
}

// waitEffect waits until a host's log shows task (e.g. "START db")
// started, without clearing the logs.
func (e *clusterEnv) waitEffect(task string, p *proc) {
	e.t.Helper()
	name, svc, _ := strings.Cut(task, " ")
	end := time.Now().Add(2 * time.Minute)
	for time.Now().Before(end) {
		for _, h := range e.hosts {
			data, _ := os.ReadFile(h.HostPath(fxLog))
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) > 2 && f[1] == name && f[2] == svc {
					return
				}
			}
		}
		select {
		case <-p.exited:
			e.t.Fatalf("loomd %v ended before %s started:\n%s\n%s", p.cmd.Args[1:], task, p.stdout.String(), p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	e.t.Fatalf("%s never started:\n%s", task, p.stderr.String())
}

// doneTasks reads from the state which service tasks of job are done.
func (e *clusterEnv) doneTasks(steps []planStep, step int, job string) map[string]bool {
	e.t.Helper()
	var s clusterState
	out, _ := e.loomd(0, "cluster", "get", "shop")
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		e.t.Fatal(err)
	}
	done := map[string]bool{}
	off := 0 // the step's first task, job-wide
	for _, st := range steps[:step] {
		off += len(st.Tasks)
	}
	for _, j := range s.Jobs {
		if j.ID != job {
			continue
		}
		for i, x := range steps[step].Tasks {
			if j.Tasks[strconv.Itoa(off+i)].Status == "done" && x.Service != "" {
				done[x.TaskName+" "+x.Service+"@"+x.NodeID] = true
			}
		}
	}
	return done
}

// TestClusterDaemon: loomd apply submits the job to the daemon, which
// runs it. The CLI is killed -9 mid-job: the job goes on, the API shows
// it running on the daemon, and loomd cluster watch re-attaches and ends
// with the summary; no task ran twice. Then a scale-up whose daemon is
// killed -9 mid-job and restarted: the CLI keeps following (exit 0), the
// new daemon takes the job over at once (same host, process gone) and
// finishes both steps; history shows the takeover; the job log has the
// plugins' lines. Then destroy through the daemon.
func TestClusterDaemon(t *testing.T) {
	e := newClusterEnv(t, 4)
	e.writeSpec(2, "hello")
	e.hold("START db")
	serveArgs := []string{"--tenant", clTenant, "--ack-wait", "2s", "--known-hosts", e.known}
	d := startDaemon(t, e.dir, "serve1.log", nil, serveArgs...)
	e.server = d.url()
	create := e.plan()

	apply := e.start("apply", e.spec, "--log-format", "json")
	e.waitEffect("START db", apply)
	if !strings.Contains(apply.stderr.String(), "loomd: job shop-001 submitted to the loomd at "+d.url()) {
		t.Errorf("apply did not say where the job runs:\n%s", apply.stderr.String())
	}
	apply.kill9()

	// The daemon runs it: the API says so, with who runs it.
	code, body := d.call("GET", "/v1/clusters/shop", "")
	var rep struct {
		Status  string `json:"status"`
		LastJob struct {
			Status  string `json:"status"`
			Runner  string `json:"runner"`
			Running []struct{ TaskName, Service string }
		} `json:"lastJob"`
	}
	if code != 200 || json.Unmarshal(body, &rep) != nil || rep.LastJob.Status != "running" || !strings.HasPrefix(rep.LastJob.Runner, "loomd ") {
		t.Fatalf("GET /v1/clusters/shop after the CLI died: %d %s", code, body)
	}
	watch := e.start("cluster", "watch", "shop", "--log-format", "json")
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	if !watch.stderr.waitFor(wctx, "following job shop-001") {
		t.Fatalf("watch did not attach:\n%s", watch.stderr.String())
	}
	e.gate()
	if code := watch.wait(t, 2*time.Minute); code != 0 || !strings.Contains(watch.stdout.String(), "Cluster shop: active (job shop-001, apply: complete") {
		t.Fatalf("watch: exit %d\n%s\n%s", code, watch.stdout.String(), watch.stderr.String())
	}
	if !strings.Contains(watch.stderr.String(), `"msg":"task finished"`) {
		t.Errorf("watch off a terminal prints the job's lines:\n%s", watch.stderr.String())
	}
	// Nothing died but the CLI: every task ran exactly once.
	fx := e.effects()
	e.checkOrder(create, fx, nil)

	// Scale up 2 -> 3 web nodes: one job, create, then reconfigure the
	// others (the cluster config's macros count the web nodes: every
	// service's inputs change). The daemon dies at CONFIGURE db of the
	// second step; a new one on the same data and address takes over; the
	// CLI follows throughout.
	e.writeSpec(3, "hello")
	scale := e.plan()
	if len(scale) != 2 || scale[0].Action != "create" || scale[1].Action != "reconfigure" {
		t.Fatalf("scale plan: %+v", scale)
	}
	e.hold("CONFIGURE db")
	apply = e.start("apply", e.spec, "--log-format", "json")
	e.waitEffect("CONFIGURE db", apply)
	doneBefore := e.doneTasks(scale, 1, "shop-002")
	for _, x := range scale[0].Tasks { // the first step had ended
		if x.Service != "" {
			doneBefore[x.TaskName+" "+x.Service+"@"+x.NodeID] = true
		}
	}
	d.kill9()
	e.gate()
	d = startDaemon(t, e.dir, "serve2.log", nil, append(serveArgs, "--listen", strings.TrimPrefix(d.url(), "http://"))...)
	if code := apply.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("apply across the daemon's death: exit %d\n%s\n%s", code, apply.stdout.String(), apply.stderr.String())
	}
	out, errs := apply.stdout.String(), apply.stderr.String()
	for _, want := range []string{"Step 1/2, create (create 1 node(s)): complete", "Step 2/2, reconfigure (reconfigure base, db, web): complete",
		"Cluster shop: active (job shop-002, apply: complete"} {
		if !strings.Contains(out, want) {
			t.Errorf("apply's output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errs, "no loomd of --server answers") || !strings.Contains(errs, "taken over by loomd") {
		t.Errorf("apply did not report the daemon's death and the takeover:\n%s", errs)
	}
	fx = e.effects()
	e.checkOrder(scale, fx, func(k string) bool { return !doneBefore[k] })
	e.onceEach(fx, doneBefore)
	hist, _ := e.loomd(0, "cluster", "history", "shop")
	if !strings.Contains(hist, "interrupted") || !strings.Contains(hist, "taken over") || !strings.Contains(hist, "gone from this host") {
		t.Errorf("history lacks the takeover:\n%s", hist)
	}
	logs, _ := e.loomd(0, "cluster", "logs", "shop", "--job", "shop-002")
	for _, want := range []string{"task started", "running effect.sh", "taken over by loomd"} {
		if !strings.Contains(logs, want) {
			t.Errorf("cluster logs lacks %q:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "shop-001-") {
		t.Errorf("--job shop-002 printed another job's lines:\n%s", logs)
	}

	// Detach, then destroy.
	out, _ = e.loomd(0, "destroy", "shop", "--detach")
	if !strings.Contains(out, "Follow it: loomd cluster watch shop") {
		t.Errorf("destroy --detach:\n%s", out)
	}
	wout, _ := e.loomd(0, "cluster", "watch", "shop")
	if !strings.Contains(wout, "Cluster shop: terminated (job shop-003, destroy: complete") {
		t.Errorf("watch of the destroy:\n%s", wout)
	}
	if c := e.claims(); len(c) != 0 {
		t.Errorf("claims after destroy: %v", c)
	}
}

// TestClusterTakeover: two daemons share a queue on a 3-node NATS
// cluster; the CLI follows through both (--server A,B). The daemon that
// runs the job is killed -9 while START db runs; the other takes the job
// over and finishes it; the CLI keeps following and exits 0. No task that
// had finished ran again; the history names both daemons. Then a rolling
// restart: A comes back, a scale-up runs on B, and B is stopped with
// SIGTERM mid-job: it hands the job over, A resumes it at once, the CLI
// follows to the end.
func TestClusterTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster and two daemons")
	}
	nc := startNATSCluster(t)
	e := newClusterEnv(t, 4)
	e.writeSpec(2, "hello")
	e.hold("START db")
	args := []string{"--tenant", clTenant, "--ack-wait", "2s", "--known-hosts", e.known}
	a := startDaemon(t, e.dir, "a.log", nil, append(args, nc.daemonArgs(filepath.Join(e.dir, "data-a"))...)...)
	b := startDaemon(t, e.dir, "b.log", nil, append(args, nc.daemonArgs(filepath.Join(e.dir, "data-b"))...)...)
	e.server = a.url() + "," + b.url()
	create := e.plan()
	apply := e.start("apply", e.spec, "--log-format", "json")
	e.waitEffect("START db", apply)
	doneBefore := e.doneTasks(create, 0, "shop-001")
	a.kill9()
	e.gate()
	if code := apply.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("apply across the takeover: exit %d\n%s\n%s", code, apply.stdout.String(), apply.stderr.String())
	}
	if !strings.Contains(apply.stdout.String(), "Cluster shop: active (job shop-001, apply: complete") ||
		!strings.Contains(apply.stderr.String(), "taken over by loomd") {
		t.Errorf("apply:\n%s\n%s", apply.stdout.String(), apply.stderr.String())
	}
	fx := e.effects()
	e.checkOrder(create, fx, func(k string) bool { return !doneBefore[k] })
	e.onceEach(fx, doneBefore)
	code, body := b.call("GET", "/v1/clusters/shop/job", "")
	var job struct {
		State  string `json:"state"`
		Owner  string `json:"owner"`
		Owners int    `json:"owners"`
	}
	if code != 200 || json.Unmarshal(body, &job) != nil || job.State != "complete" || job.Owners != 2 {
		t.Errorf("GET /v1/clusters/shop/job: %d %s", code, body)
	}
	hist, _ := e.loomd(0, "cluster", "history", "shop", "--server", b.url())
	if !strings.Contains(hist, "taken over") || !strings.Contains(hist, "loomd "+job.Owner) {
		t.Errorf("history:\n%s", hist)
	}

	// Rolling restart: A back, the job on B, B stopped gracefully.
	a = startDaemon(t, e.dir, "a2.log", nil, append(args, nc.daemonArgs(filepath.Join(e.dir, "data-a"))...)...)
	e.server = b.url() + "," + a.url()
	e.writeSpec(3, "hello")
	scale := e.plan()
	e.hold("CONFIGURE db")
	apply = e.start("apply", e.spec, "--log-format", "json")
	e.waitEffect("CONFIGURE db", apply)
	b.signal(syscall.SIGTERM)
	e.gate()
	if code := apply.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("apply across a graceful handover: exit %d\n%s\n%s", code, apply.stdout.String(), apply.stderr.String())
	}
	if code := b.exitCode(); code != 0 {
		t.Errorf("the daemon that handed its job over exited %d:\n%s", code, b.logTail())
	}
	errs := apply.stderr.String()
	if !strings.Contains(errs, "a loomd sharing the queue resumes it") || !strings.Contains(errs, "from the daemon that shut down") {
		t.Errorf("apply did not show the handover:\n%s", errs)
	}
	fx = e.effects()
	e.checkOrder(scale, fx, func(k string) bool { return strings.HasPrefix(k, "CONFIGURE db@") })
}
