package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/apply"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/cluster/state"
)

// followGiveUp is how long a follower keeps trying daemons that do not
// answer before it gives up (the job goes on regardless).
const followGiveUp = 10 * time.Minute

// submitJob sends the request to the daemon at --server, which runs the
// job, and follows it from here (or returns at once with --detach). Unless
// cf.yes, the daemon's plan is shown and confirmed first, and submitted
// with it: the daemon runs that plan exactly, or refuses.
func (a *App) submitJob(ctx context.Context, g *globalOptions, o *clusterOptions, name string, req runner.Request, prep func(*state.Cluster, *runner.Request) error, cf confirmation) error {
	c, err := o.client.client()
	if err != nil {
		return err
	}
	if err := a.checkRemoteCluster(ctx, c, name, req.Verb); err != nil {
		return err
	}
	if prep != nil {
		cl, err := a.remoteState(ctx, c, name)
		var ae *apiError
		if errors.As(err, &ae) && ae.code == http.StatusNotFound {
			cl, err = nil, nil
		}
		if err != nil {
			return err
		}
		if err := prep(cl, &req); err != nil {
			return err
		}
	}
	if !cf.yes && req.Expect == nil {
		doc, err := a.remotePlan(ctx, c, name, req)
		if err != nil {
			return err
		}
		if doc.Empty() {
			return a.noChanges(ctx, c, name, req, doc.Notes)
		}
		if err := a.confirm(doc, cf); err != nil {
			return err
		}
		// Run what was shown: the drift the daemon's refresh found, not a
		// new refresh.
		req.Expect, req.Drift, req.Refresh = doc.Expect(), doc.Drift, false
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var resp api.JobSubmitResponse
	err = c.doFailover(ctx, "POST", "/v1/clusters/"+url.PathEscape(name)+"/jobs", body, &resp)
	if err := jobCallErr(err); err != nil {
		return err
	}
	if !resp.Changes {
		return a.noChanges(ctx, c, name, req, resp.Notes)
	}
	jv := resp.Job
	if resp.Attached {
		fmt.Fprintf(a.Err, "loomd: cluster %s already runs this change as job %s (on loomd %s): following it\n", name, jv.ID, jv.Owner)
	} else {
		fmt.Fprintf(a.Err, "loomd: job %s submitted to the loomd at %s, which runs it (loomd %s), in %d step(s):\n", jv.ID, c.base, jv.Owner, len(jv.Steps))
		for i, st := range jv.Steps {
			fmt.Fprintf(a.Err, "  %d. %s (%s, %d tasks)\n", i+1, st.Action, st.Reason, st.Tasks)
		}
	}
	if o.detach {
		fmt.Fprintf(a.Out, "Job %s of cluster %s runs on loomd %s.\nFollow it: loomd cluster watch %s%s\nIts log:   loomd cluster logs %s%s\n",
			jv.ID, name, jv.Owner, name, o.serverFlag(), name, o.serverFlag())
		return nil
	}
	return a.followJob(ctx, g, o, c, name, jv)
}

// remotePlan asks the daemon for the plan of a request (made with its
// plugins and resource files; nothing runs).
func (a *App) remotePlan(ctx context.Context, c *apiClient, name string, req runner.Request) (*apply.Document, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var doc apply.Document
	err = c.doFailover(ctx, "POST", "/v1/clusters/"+url.PathEscape(name)+"/plan", body, &doc)
	if err := jobCallErr(err); err != nil {
		return nil, err
	}
	return &doc, nil
}

// jobCallErr turns an answer of the job endpoints into the command's
// error: a bad request or a plan that no longer holds is a usage error
// (exit 2), a busy cluster exit 1.
func jobCallErr(err error) error {
	var ae *apiError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae) && (ae.code == http.StatusBadRequest || ae.code == http.StatusPreconditionFailed):
		return usageErr(errors.New(ae.msg))
	case errors.As(err, &ae) && ae.code == http.StatusConflict:
		return errors.New(ae.msg)
	}
	return err
}

// noChanges says the cluster already is as asked.
func (a *App) noChanges(ctx context.Context, c *apiClient, name string, req runner.Request, notes []string) error {
	if req.Verb == runner.VerbDestroy {
		fmt.Fprintf(a.Out, "Cluster %s has no nodes: nothing to destroy.\n", name)
		return nil
	}
	fmt.Fprintf(a.Out, "No changes: cluster %s is as %s says.\n", name, req.SpecFile)
	for _, n := range notes {
		fmt.Fprintf(a.Out, "Note: %s\n", n)
	}
	fmt.Fprintln(a.Out)
	cl, err := a.remoteState(ctx, c, name)
	if err != nil {
		return err
	}
	return a.printClusterSummary(cl, nil, "")
}

// serverFlag is " --server URL" unless --server is the default.
func (o *clusterOptions) serverFlag() string {
	if o.client.server != "" && o.client.server != "http://"+api.DefaultAddr {
		return " --server " + o.client.server
	}
	return ""
}

// checkRemoteCluster refuses to create anew, through the daemon, a cluster
// whose state is in the default state dir (applied with --local): its
// machines would be made twice. Destroying a cluster the daemon does not
// know is a usage error.
func (a *App) checkRemoteCluster(ctx context.Context, c *apiClient, name, verb string) error {
	err := c.doFailover(ctx, "GET", "/v1/clusters/"+url.PathEscape(name), nil, nil)
	var ae *apiError
	if !errors.As(err, &ae) || ae.code != http.StatusNotFound {
		return nil // known, or the submit says what is wrong
	}
	st := &apiStore{c: c, ctx: ctx}
	if hint := a.stateFileHint(st, name); hint != "" {
		if verb == runner.VerbDestroy {
			return usageErr(errors.New(hint))
		}
		return errors.New(hint)
	}
	if verb == runner.VerbDestroy {
		return usageErr(fmt.Errorf("cluster %s: %w (in the store of the loomd at %s): 'loomd cluster list' shows the clusters it knows", name, state.ErrNotFound, c.base))
	}
	return nil
}

// remoteState reads the whole state of a cluster from the daemon.
func (a *App) remoteState(ctx context.Context, c *apiClient, name string) (*state.Cluster, error) {
	return a.remoteStateQuery(ctx, c, name, "")
}

// summaryState reads what a summary of job shows of a cluster's state:
// that job alone, the records of its tasks that finished well cut to
// their status (a daemon before ?job and ?brief answers the whole state:
// the summary is the same).
func (a *App) summaryState(ctx context.Context, c *apiClient, name, job string) (*state.Cluster, error) {
	return a.remoteStateQuery(ctx, c, name, "?brief=true&job="+url.QueryEscape(job))
}

func (a *App) remoteStateQuery(ctx context.Context, c *apiClient, name, query string) (*state.Cluster, error) {
	var raw json.RawMessage
	if err := c.doFailover(ctx, "GET", "/v1/clusters/"+url.PathEscape(name)+"/state"+query, nil, &raw); err != nil {
		return nil, fmt.Errorf("cluster %s: reading its state: %w", name, err)
	}
	if string(raw) == "null" {
		return nil, nil
	}
	return state.Unmarshal(name, raw)
}

// followJob follows a job the daemon runs until it ends: a live view on a
// terminal (plugin lines stay in the job log), else the job log's lines;
// each step's summary as it ends, the cluster's at the end. Ctrl-C
// detaches: the job goes on. A daemon that stops answering is retried,
// then the next of --server: the job goes on without this process.
func (a *App) followJob(ctx context.Context, g *globalOptions, o *clusterOptions, c *apiClient, name string, jv *api.JobView) error {
	logger, err := a.newLogger(g.log)
	if err != nil {
		return err
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	f := &follower{a: a, c: c, o: o, name: name, logger: logger, seq: jv.LogSeq, rec: jv.Record,
		live: o.live && stderrTerminal(a.Err) && g.log.format != "json", printed: map[string]bool{}}
	if o.retry == "" {
		o.retry = retryOf(o, jv.Record)
	}
	err = f.run(sctx)
	f.closeView()
	if sctx.Err() != nil && ctx.Err() == nil && err == nil {
		return &exitError{code: 130, err: fmt.Errorf("detached: job %s keeps running on the daemons sharing the queue (loomd %s now); follow it again with 'loomd cluster watch %s%s', stop it with 'loomd cluster cancel %s%s'",
			f.rec.ID, orUnknown(f.rec.Owner), name, o.serverFlag(), name, o.serverFlag())}
	}
	return err
}

// retryOf is the command that resumes a job after a failure.
func retryOf(o *clusterOptions, rec runner.Record) string {
	if rec.Request.Verb == runner.VerbDestroy {
		return o.retryCommand("destroy", rec.Cluster)
	}
	return o.retryCommand("apply", orUnknown(rec.Request.SpecFile))
}

// stepKey names a step of a job (the summaries printed).
func stepKey(st runner.Step) string { return fmt.Sprintf("%s/%d", st.Job, st.Index) }

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

type follower struct {
	a      *App
	c      *apiClient
	o      *clusterOptions
	name   string
	logger *slog.Logger
	live   bool

	seq     uint64
	rec     runner.Record
	view    *liveView
	viewJob string
	printed map[string]bool // step jobs summarized
	down    time.Time       // since when no daemon answers
	// ending: the log says the job ended. Its record says so a moment
	// later (the daemon writes the log entry first, then lets go of the
	// cluster's lock and records the end: a few milliseconds): it is
	// looked at again after endWait, first endWaitFirst then twice as
	// long each time up to endWaitMax, not after the next 2-second wait
	// for the log.
	ending  bool
	endWait time.Duration
}

// The waits for the log between looks at a job record after its log said
// it ended. A fixed 50 ms wait made a follower end 20-50 ms after its
// job, about a tenth of a 100-node create through a daemon.
const (
	endWaitFirst = 5 * time.Millisecond
	endWaitMax   = time.Second
)

func (f *follower) path(sub string) string { return "/v1/clusters/" + url.PathEscape(f.name) + sub }

// logPath is the job log past f.seq (more is more query parameters).
// Without the live view, only log lines and job events: a task's state
// changes are only for the view, and a 100-node create has about 1,800
// of them, which the daemon encoded and this process decoded for nothing.
func (f *follower) logPath(more string) string {
	q := fmt.Sprintf("/log?after=%d", f.seq)
	if !f.live {
		q += "&kind=" + joblog.KindLog + "," + joblog.KindJob
	}
	return f.path(q + more)
}

// run follows until the job ends (its exit status) or ctx ends (nil).
func (f *follower) run(ctx context.Context) error {
	check := true
	lastCheck := time.Time{}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if check || time.Since(lastCheck) > 3*time.Second {
			var jv api.JobView
			err := f.c.doFailover(ctx, "GET", f.path("/job"), nil, &jv)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				if gone, gerr := f.trouble(ctx, err); gone {
					continue
				} else if gerr != nil {
					return gerr
				}
				return err
			}
			f.answered()
			lastCheck, check = time.Now(), false
			if jv.ID != f.rec.ID {
				return fmt.Errorf("cluster %s now runs job %s, not %s: 'loomd cluster watch %s' follows it", f.name, jv.ID, f.rec.ID, f.name)
			}
			f.rec = jv.Record
			if f.rec.Done() {
				// Show what the log holds past what was read before the
				// summary: a follower that was cut off (its daemon died)
				// may find the job already ended by the daemon that took
				// it over, and the takeover is in those lines.
				f.drain(ctx)
			}
			if done, err := f.sync(ctx); done || err != nil {
				return err
			}
		}
		wait := "2s"
		if f.ending {
			f.endWait = min(max(2*f.endWait, endWaitFirst), endWaitMax)
			wait, check = f.endWait.String(), true
		}
		var resp api.LogResponse
		err := f.c.doFailover(ctx, "GET", f.logPath("&wait="+wait), nil, &resp)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if gone, gerr := f.trouble(ctx, err); gone {
				check = true
				continue
			} else if gerr != nil {
				return gerr
			}
			return err
		}
		f.answered()
		for _, e := range resp.Entries {
			if f.entry(ctx, e.Entry) {
				check = true
			}
		}
		f.seq = max(f.seq, resp.Next)
	}
}

// drain shows the job log's entries past f.seq, without waiting for new
// ones. A daemon that does not answer leaves the rest unread: the summary
// follows anyway.
func (f *follower) drain(ctx context.Context) {
	for range 100 {
		var resp api.LogResponse
		if err := f.c.doFailover(ctx, "GET", f.logPath(""), nil, &resp); err != nil {
			return
		}
		for _, e := range resp.Entries {
			f.entry(ctx, e.Entry)
		}
		if resp.Next <= f.seq {
			return
		}
		f.seq = resp.Next
	}
}

// entry shows one log entry; true when it changes the job's course (a
// step began or ended, a takeover).
func (f *follower) entry(ctx context.Context, e joblog.Entry) bool {
	switch e.Kind {
	case joblog.KindTask:
		if f.view != nil && e.Job == f.viewJob && e.Task != nil {
			f.view.set(e.Task.Index, e.Task.Run, e.Task.Status, e.Task.Message, e.Time)
		}
		return false
	case joblog.KindJob:
		if e.Attr("event") == "ended" {
			f.ending = true
		}
		if f.live {
			if ev := e.Attr("event"); f.view != nil && (ev == "takeover" || ev == "interrupted") {
				f.view.setNote(e.Msg)
			}
		} else {
			_ = f.logger.Handler().Handle(ctx, joblog.Record(e))
		}
		return true
	default:
		if !f.live {
			_ = f.logger.Handler().Handle(ctx, joblog.Record(e))
		}
		return false
	}
}

// sync catches up with the job record: prints the summaries of steps that
// ended, puts the live view on the step running, and ends the follow when
// the job ended (done, with its exit status).
func (f *follower) sync(ctx context.Context) (bool, error) {
	// The state as a summary of a job shows it, read once per job.
	states := map[string]*state.Cluster{}
	getState := func(job string) (*state.Cluster, error) {
		if cl, ok := states[job]; ok {
			return cl, nil
		}
		cl, err := f.a.summaryState(ctx, f.c, f.name, job)
		if err != nil {
			return nil, err
		}
		states[job] = cl
		return cl, nil
	}
	steps := f.rec.Steps
	for i, st := range steps {
		if st.Job == "" || f.printed[stepKey(st)] || (st.Status != runner.StepComplete && st.Status != runner.StepFailed) {
			continue
		}
		if len(steps) > 1 && f.view == nil {
			cl, err := getState(st.Job)
			if err != nil {
				return false, err
			}
			if j := findJob(cl, st.Job); j != nil {
				f.a.printStep(i, st, j)
			}
		}
		f.printed[stepKey(st)] = true
	}
	if f.rec.Done() {
		closed := f.view != nil
		f.closeView()
		cl, err := getState(f.rec.ID)
		if err != nil {
			return true, err
		}
		last := findJob(cl, f.rec.ID)
		if closed && last != nil && len(steps) > 1 {
			for i, st := range runner.StepsOf(last) {
				f.a.printStep(i, st, last)
			}
		}
		if err := f.a.printClusterSummary(cl, last, f.o.retry); err != nil {
			return true, err
		}
		switch {
		case f.rec.State == runner.StateComplete:
			return true, nil
		case last == nil || last.Status == state.JobComplete:
			fmt.Fprintf(f.a.Out, "\nJob %s %s: %s\n", f.rec.ID, f.rec.State, f.rec.Message)
		case f.rec.State == runner.StateCancelled:
			fmt.Fprintf(f.a.Out, "Job %s was %s.\n", f.rec.ID, f.rec.Message)
		}
		return true, silentExit(ExitFailure)
	}
	if f.live && f.viewJob != f.rec.ID {
		f.closeView()
		var sv api.StepView
		if err := f.c.doFailover(ctx, "GET", f.path("/jobs/"+url.PathEscape(f.rec.ID)), nil, &sv); err != nil {
			return false, nil // drawn at the next look
		}
		vp := &viewPlan{action: sv.Action, stages: make([][]int, sv.Stages)}
		for _, t := range sv.Tasks {
			for len(vp.tasks) <= t.Index {
				vp.tasks = append(vp.tasks, viewTask{})
			}
			vp.tasks[t.Index] = viewTask{name: t.Name, node: t.Node, service: t.Service, stage: t.Stage}
			if t.Stage >= 1 && t.Stage <= sv.Stages {
				vp.stages[t.Stage-1] = append(vp.stages[t.Stage-1], t.Index)
			}
		}
		f.view = startLiveView(f.a.Err, vp, f.rec.ID)
		f.viewJob = f.rec.ID
		for _, t := range sv.Tasks {
			run := t.Run
			if run == "" {
				run = t.Name
			}
			f.view.set(t.Index, run, t.Status, t.Message, t.Started)
		}
		if !f.down.IsZero() {
			f.view.setNote(fmt.Sprintf("no loomd answers since %s; retrying", f.down.Format(time.TimeOnly)))
		}
	}
	return false, nil
}

func findJob(cl *state.Cluster, id string) *state.Job {
	if cl == nil || id == "" {
		return nil
	}
	for _, j := range cl.Jobs {
		if j.ID == id {
			return j
		}
	}
	return nil
}

func (f *follower) closeView() {
	if f.view != nil {
		f.view.close()
		f.view, f.viewJob = nil, ""
	}
}

// trouble handles an error of a call: a daemon that does not answer is
// retried (true) until followGiveUp; anything else is returned as is.
func (f *follower) trouble(ctx context.Context, err error) (bool, error) {
	if !unreachable(err) {
		return false, nil
	}
	if f.down.IsZero() {
		f.down = time.Now()
		msg := fmt.Sprintf("no loomd of --server answers (%v): the job goes on in the daemons sharing the queue; retrying (Ctrl-C detaches)", err)
		if f.view != nil {
			f.view.setNote(msg)
		} else {
			fmt.Fprintln(f.a.Err, "loomd: "+msg)
		}
	}
	if time.Since(f.down) > followGiveUp {
		return false, fmt.Errorf("no loomd answered for %v; job %s goes on without this process: 'loomd cluster watch %s' follows it again", followGiveUp, f.rec.ID, f.name)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	return true, nil
}

// answered notes a daemon answers again.
func (f *follower) answered() {
	if f.down.IsZero() {
		return
	}
	f.down = time.Time{}
	msg := fmt.Sprintf("the loomd at %s answers: following job %s again", f.c.base, f.rec.ID)
	if f.view != nil {
		f.view.setNote("")
	} else {
		fmt.Fprintln(f.a.Err, "loomd: "+msg)
	}
}

// runWatch re-attaches to a cluster's job: its progress until it ends
// (exit status as apply's), or the outcome of the last one.
func (a *App) runWatch(ctx context.Context, g *globalOptions, o *clusterOptions, name string) error {
	if o.local || o.stateDir != "" {
		return usageErr(errors.New("watch follows the jobs a loomd runs; a --local apply runs in its own process (its log: 'loomd cluster logs NAME --local --follow')"))
	}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var jv api.JobView
	err = c.doFailover(ctx, "GET", "/v1/clusters/"+url.PathEscape(name)+"/job", nil, &jv)
	var ae *apiError
	if errors.As(err, &ae) && (ae.code == http.StatusNotFound || ae.code == http.StatusBadRequest) {
		return usageErr(fmt.Errorf("%s: 'loomd cluster list' shows the clusters the loomd at %s knows", ae.msg, c.base))
	}
	if err != nil {
		return err
	}
	o.retry = retryOf(o, jv.Record)
	if jv.State == runner.StateRunning {
		fmt.Fprintf(a.Err, "loomd: following job %s of cluster %s (%s, on loomd %s)\n", jv.ID, name, jv.Request.Verb, orUnknown(jv.Owner))
		if !jv.Liveness.Running && jv.Liveness.Note != "" {
			fmt.Fprintln(a.Err, "loomd: "+jv.Liveness.Note)
		}
	} else {
		fmt.Fprintf(a.Err, "loomd: job %s of cluster %s ended %s at %s\n", jv.ID, name, jv.State, jv.Ended.UTC().Format(time.RFC3339))
	}
	return a.followJob(ctx, g, o, c, name, &jv)
}

// runLogs prints a cluster's job log: the executor's and the plugins'
// lines, and the job events; --follow waits for more.
func (a *App) runLogs(ctx context.Context, o *clusterOptions, name string, follow, asJSON bool, job string) error {
	print := func(e joblog.Entry) {
		if e.Kind == joblog.KindTask || (job != "" && e.Job != job) {
			return
		}
		if asJSON {
			data, _ := json.Marshal(e)
			fmt.Fprintln(a.Out, string(data))
			return
		}
		fmt.Fprintln(a.Out, joblog.Format(e))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.local || o.stateDir != "" {
		st, err := a.clusterStore(ctx, o)
		if err != nil {
			return err
		}
		f := &joblog.File{Dir: st.(fileStore).Dir}
		if _, err := os.Stat(f.Path(name)); err != nil {
			if _, err := st.Get(name); err != nil {
				return a.clusterGetErr(st, name, err)
			}
		}
		if follow {
			return f.Follow(sctx, name, print)
		}
		return f.Read(name, print)
	}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	if err := c.doFailover(ctx, "GET", "/v1/clusters/"+url.PathEscape(name), nil, nil); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && (ae.code == http.StatusNotFound || ae.code == http.StatusBadRequest) {
			return usageErr(fmt.Errorf("%s: 'loomd cluster list' shows the clusters the loomd at %s knows", ae.msg, c.base))
		}
		return err
	}
	var seq uint64
	var down time.Time
	for {
		wait := ""
		if follow {
			wait = "&wait=30s"
		}
		q := fmt.Sprintf("/log?after=%d&kind=log,job%s", seq, wait)
		if job != "" {
			q += "&job=" + url.QueryEscape(job)
		}
		var resp api.LogResponse
		err := c.doFailover(sctx, "GET", "/v1/clusters/"+url.PathEscape(name)+q, nil, &resp)
		if sctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !follow || !unreachable(err) {
				return err
			}
			if down.IsZero() {
				down = time.Now()
				fmt.Fprintf(a.Err, "loomd: %v; retrying\n", err)
			}
			if time.Since(down) > followGiveUp {
				return err
			}
			time.Sleep(time.Second)
			continue
		}
		down = time.Time{}
		for _, e := range resp.Entries {
			print(e.Entry)
		}
		if resp.Next == seq && !follow {
			return nil
		}
		seq = resp.Next
	}
}

// runCancel asks the daemon running a cluster's job to stop it.
func (a *App) runCancel(ctx context.Context, o *clusterOptions, name string) error {
	if o.local || o.stateDir != "" {
		return usageErr(errors.New("cancel stops the jobs a loomd runs; stop a --local apply with Ctrl-C"))
	}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var jv api.JobView
	err = c.doFailover(ctx, "POST", "/v1/clusters/"+url.PathEscape(name)+"/job/cancel?by="+url.QueryEscape(requester()), nil, &jv)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && (ae.code == http.StatusNotFound || ae.code == http.StatusBadRequest):
		return usageErr(errors.New(ae.msg))
	case errors.As(err, &ae) && ae.code == http.StatusConflict:
		return errors.New(ae.msg)
	case err != nil:
		return err
	}
	if jv.State == runner.StateCancelled {
		fmt.Fprintf(a.Out, "Job %s of cluster %s cancelled (no daemon ran it).\n", jv.ID, name)
	} else {
		fmt.Fprintf(a.Out, "Job %s of cluster %s: cancel requested; loomd %s stops it (running tasks end first). 'loomd cluster watch %s' shows it end; 'loomd %s' resumes it.\n",
			jv.ID, name, orUnknown(jv.Owner), name, strings.TrimPrefix(retryOf(o, jv.Record), "loomd "))
	}
	return nil
}
