package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/joblog"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/runtime"
)

// scope is what a session may see: every tenant, or some. The single API
// token sees everything; scoped tokens (issue 20) narrow it.
type scope struct {
	all     bool
	tenants map[string]bool
	// def is the daemon's --tenant: tasks without a tenantId run for it.
	def string
}

func (c *Console) scope(r *http.Request) scope { return c.scopeOf(r.Context()) }

// scopeOf is the scope of the session a request's context carries.
func (c *Console) scopeOf(ctx context.Context) scope {
	tok := tokens.Anonymous
	if s, ok := ctx.Value(sessionKey{}).(*session); ok && s != nil {
		tok = s.token
	}
	if tok.Admin() {
		return scope{all: true, def: c.cfg.DefaultTenant}
	}
	return scope{tenants: map[string]bool{tok.Tenant: true}, def: c.cfg.DefaultTenant}
}

// readOnly reports whether the request may not act: --ui-readonly, or a
// read-only token.
func (c *Console) readOnly(r *http.Request) bool {
	return c.cfg.ReadOnly || !tokenOf(r).CanWrite()
}

func (s scope) allows(tenant string) bool {
	if s.all {
		return true
	}
	if tenant == "" {
		tenant = s.def
	}
	return s.tenants[tenant]
}

// maxScan bounds the records one page of a list reads when it filters on
// what the queue's index does not hold (tenant, time): past it the page
// ends early with a cursor to go on from.
const maxScan = 5000

// listScoped reads queue pages until it has limit records the scope and
// the tenant and since filters allow, or maxScan records were read, or the
// list ended. The queue's own filters (state, type, cluster) run on its
// index; tenant and since are checked here. Rows come in whole queue
// pages, so a page may hold a few more than limit. since cuts the walk
// short: the list is ordered by time (queued, or finished), newest first.
func (c *Console) listScoped(ctx context.Context, f queue.Filter, sc scope, tenant string, limit int) (queue.Page, error) {
	since := time.Time{}
	return c.listFiltered(ctx, f, sc, tenant, since, limit)
}

// listResult is one page of the task list with how it was read.
type listResult struct {
	queue.Page
	Scanned int
	// Cut is true when the page ended at maxScan, not at limit.
	Cut bool
}

func (c *Console) listFiltered(ctx context.Context, f queue.Filter, sc scope, tenant string, since time.Time, limit int) (queue.Page, error) {
	res, err := c.listPage(ctx, f, sc, tenant, since, limit)
	return res.Page, err
}

func (c *Console) listPage(ctx context.Context, f queue.Filter, sc scope, tenant string, since time.Time, limit int) (listResult, error) {
	var out listResult
	postFilter := !sc.all || tenant != "" || !since.IsZero()
	if !postFilter {
		f.Limit = limit
		p, err := c.cfg.Queue.List(ctx, f)
		out.Page, out.Scanned = p, len(p.Records)
		return out, err
	}
	f.Limit = min(max(limit, 100), queue.MaxPageSize)
	for {
		p, err := c.cfg.Queue.List(ctx, f)
		if err != nil {
			return out, err
		}
		out.Scanned += len(p.Records)
		old := false
		for _, rec := range p.Records {
			if !since.IsZero() && listTime(rec).Before(since) {
				old = true
				break
			}
			if !sc.allows(rec.TenantID) {
				continue
			}
			if tenant != "" && rec.TenantID != tenant && !(rec.TenantID == "" && tenant == sc.def) {
				continue
			}
			out.Records = append(out.Records, rec)
		}
		out.Next = p.Next
		if old {
			out.Next = ""
		}
		switch {
		case out.Next == "", len(out.Records) >= limit:
			return out, nil
		case out.Scanned >= maxScan:
			out.Cut = true
			return out, nil
		}
		f.After = out.Next
	}
}

// listTime is the time a record is ordered by in lists.
func listTime(r queue.Record) time.Time {
	if r.State.Terminal() && r.Finished != nil {
		return *r.Finished
	}
	return r.Created
}

type tasksData struct {
	Tasks   []api.Task
	Next    string
	Filter  taskFilter
	States  []queue.State
	Types   []string
	Scanned int
	Cut     bool
	Error   string
	First   bool
	CLI     string
}

type taskFilter struct {
	State, Type, Cluster, Tenant, Since, After string
	Limit                                      int
}

// sinceChoices are the time filter's values.
var sinceChoices = map[string]time.Duration{"15m": 15 * time.Minute, "1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour}

func (c *Console) tasks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tf := taskFilter{State: q.Get("state"), Type: q.Get("type"), Cluster: q.Get("cluster"), Tenant: q.Get("tenant"),
		Since: q.Get("since"), After: q.Get("after"), Limit: 50}
	d := tasksData{Filter: tf, States: queue.States(), First: tf.After == ""}
	if c.cfg.Plugins != nil {
		for _, t := range c.cfg.Plugins.Types() {
			d.Types = append(d.Types, t.Name)
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > queue.MaxPageSize {
			d.Error = fmt.Sprintf("limit %q: want 1 to %d", l, queue.MaxPageSize)
		} else {
			d.Filter.Limit = n
		}
	}
	f := queue.Filter{Type: tf.Type, Cluster: tf.Cluster, After: tf.After}
	if tf.State != "" {
		st, err := queue.ParseState(tf.State)
		if err != nil {
			d.Error = err.Error()
		}
		f.State = st
	}
	var since time.Time
	if tf.Since != "" {
		dur, ok := sinceChoices[tf.Since]
		if !ok {
			d.Error = fmt.Sprintf("since %q: want 15m, 1h, 24h or 7d", tf.Since)
		}
		since = c.cfg.Now().Add(-dur)
	}
	if tf.Tenant != "" && !runtime.ValidTenant(tf.Tenant) {
		d.Error = fmt.Sprintf("tenant %q is not a tenant id", tf.Tenant)
	}
	d.CLI = taskListCLI(tf) + c.cliServer(r)
	code := http.StatusOK
	if d.Error == "" {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		res, err := c.listPage(ctx, f, c.scope(r), tf.Tenant, since, d.Filter.Limit)
		switch {
		case errors.Is(err, queue.ErrBadCursor):
			d.Error, code = "This page's cursor is not one loomd issued: start from the first page.", http.StatusBadRequest
		case err != nil:
			d.Error, code = "Reading the task list failed: "+err.Error(), http.StatusServiceUnavailable
		}
		for _, rec := range res.Records {
			d.Tasks = append(d.Tasks, api.TaskOf(rec))
		}
		d.Next, d.Scanned, d.Cut = res.Next, res.Scanned, res.Cut
	} else {
		code = http.StatusBadRequest
	}
	c.render(w, r, code, "tasks", &view{Title: "Tasks", Nav: "tasks", Topics: []string{topicTasks}, Data: d})
}

// taskListCLI is the loomd task list command for a filter.
func taskListCLI(f taskFilter) string {
	var b strings.Builder
	b.WriteString("loomd task list")
	for _, kv := range [][2]string{{"state", f.State}, {"type", f.Type}, {"cluster", f.Cluster}} {
		if kv[1] != "" {
			b.WriteString(" --" + kv[0] + " " + shellQuote(kv[1]))
		}
	}
	if f.Limit != 0 && f.Limit != queue.DefaultPageSize {
		b.WriteString(" --limit " + strconv.Itoa(f.Limit))
	}
	return b.String()
}

// taskResult is a task's Coopr result, read for showing.
type taskResult struct {
	Status    int            `json:"status"`
	Message   string         `json:"message"`
	Stdout    string         `json:"stdout"`
	Stderr    string         `json:"stderr"`
	Error     map[string]any `json:"error"`
	Hostname  string         `json:"hostname"`
	Duration  float64        `json:"duration_ms"`
	Plugin    string         `json:"plugin"`
	Provision string         `json:"provisionerId"`
	Worker    string         `json:"workerId"`
}

type taskData struct {
	Task      api.Task
	Result    *taskResult
	ErrorKind string
	ErrorMsg  string
	// Traceback is the Lua traceback of a failed hook (the stack part of
	// its stderr), when there is one.
	Traceback string
	// ResultJSON is the whole result, redacted; InputJSON the task.
	ResultJSON string
	InputJSON  string
	InputNote  string
	Timeline   []event
	Actions    []taskAction
	// Logs are the task's log lines (the last ones); LogNote says what
	// is left out or why there are none; LogMore: log.txt has more.
	Logs    []logLine
	LogNote string
	LogMore bool
	// LogCLI follows the log from a terminal.
	LogCLI string
	// ClusterHint: a failed task of a cluster runs again when the
	// cluster's job is resumed, not on its own.
	ClusterHint bool
	CLI         string
	// LocalRun: a cluster task its daemon ran on its own workers; the
	// page shows its run from the cluster's state.
	LocalRun bool
}

// event is one line of a task's timeline.
type event struct {
	At   time.Time
	What string
}

type taskAction struct {
	Name, Label, CLI string
	Danger           bool
}

func (c *Console) loadTask(w http.ResponseWriter, r *http.Request) (queue.Record, bool) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rec, err := c.cfg.Queue.Get(ctx, id)
	switch {
	case errors.Is(err, queue.ErrNotFound):
		c.notFound(w, r, fmt.Sprintf("loomd knows no task %q: it may have been deleted, or expired after --retain.", id))
		return rec, false
	case err != nil:
		c.unavailable(w, r, "reading task "+id, err)
		return rec, false
	case !c.scope(r).allows(rec.TenantID):
		c.notFound(w, r, fmt.Sprintf("loomd knows no task %q.", id))
		return rec, false
	}
	return rec, true
}

// loadTaskOrRun is loadTask for the pages that show a task: a cluster
// job's task its daemon ran on its own workers (loomd serve
// --cluster-tasks local) has no queue record, only its run in the
// cluster's state, which stands in for it (local is then true).
func (c *Console) loadTaskOrRun(w http.ResponseWriter, r *http.Request) (rec queue.Record, local, ok bool) {
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.cfg.Queue.Get(ctx, id); errors.Is(err, queue.ErrNotFound) {
		if rec, found := c.localRun(ctx, id); found {
			if !c.scope(r).allows(rec.TenantID) {
				c.notFound(w, r, fmt.Sprintf("loomd knows no task %q.", id))
				return rec, false, false
			}
			return rec, true, true
		}
	}
	rec, ok = c.loadTask(w, r)
	return rec, false, ok
}

// runID is a cluster job's run id: <job id>-<task number>-<run number>,
// the job id being <cluster>-<job number>.
var runID = regexp.MustCompile(`^(([a-z0-9][a-z0-9-]*)-[0-9]+)-([0-9]+)-([0-9]+)$`)

// localRun reads run id from its cluster's state as a task record (see
// loadTaskOrRun); false when no cluster has it.
func (c *Console) localRun(ctx context.Context, id string) (queue.Record, bool) {
	m := runID.FindStringSubmatch(id)
	if m == nil {
		return queue.Record{}, false
	}
	st, err := c.clusterState(ctx)
	if err != nil {
		return queue.Record{}, false
	}
	cl, err := st.Get(m[2])
	if err != nil {
		return queue.Record{}, false
	}
	num, _ := strconv.Atoi(m[3])
	for _, j := range cl.Jobs {
		if j.ID != m[1] {
			continue
		}
		tk := j.Tasks[num-1]
		if tk == nil {
			return queue.Record{}, false
		}
		for _, run := range tk.Runs {
			if run.ID != id {
				continue
			}
			started := run.Started
			rec := queue.Record{TaskID: id, TenantID: cl.Tenant, ClusterID: cl.Name, TaskName: run.Name, Attempts: 1,
				Created: started, Started: &started, Family: "automator", State: queue.Running}
			if run.Name == "CREATE" || run.Name == "CONFIRM" || run.Name == "DELETE" {
				rec.Family = "provider"
			}
			if run.Status == "done" || run.Status == "failed" {
				end := started.Add(time.Duration(run.Duration * float64(time.Millisecond)))
				st := run.Code
				rec.Finished, rec.Status, rec.State = &end, &st, queue.Succeeded
				if run.Status == "failed" {
					rec.State, rec.Error = queue.Failed, run.Message
					if st == 0 {
						st = 1
					}
				}
				rec.Result, _ = json.Marshal(map[string]any{"taskId": id, "status": st, "message": run.Message, "stdout": run.Stdout, "stderr": run.Stderr})
			}
			return rec, true
		}
	}
	return queue.Record{}, false
}

// actionsFor lists what may be done with a task in its state.
func (c *Console) actionsFor(r *http.Request, rec queue.Record, srv string) []taskAction {
	if c.readOnly(r) {
		return nil
	}
	id := shellQuote(rec.TaskID)
	if rec.State.Terminal() {
		acts := []taskAction{{Name: "delete", Label: "Delete", CLI: "loomd task delete " + id + srv, Danger: true}}
		if retryable(rec) {
			acts = append([]taskAction{{Name: "retry", Label: "Run again"}}, acts...)
		}
		return acts
	}
	return []taskAction{{Name: "cancel", Label: "Cancel", CLI: "loomd task cancel " + id + srv, Danger: true}}
}

func (c *Console) task(w http.ResponseWriter, r *http.Request) {
	rec, local, ok := c.loadTaskOrRun(w, r)
	if !ok {
		return
	}
	srv := c.cliServer(r)
	d := taskData{Task: api.TaskOf(rec), Actions: c.actionsFor(r, rec, srv), CLI: "loomd task get " + shellQuote(rec.TaskID) + srv}
	if local {
		d.Actions, d.CLI = nil, "loomd cluster get "+shellQuote(rec.ClusterID)+srv
		d.LocalRun = true
	}
	d.Task.Result = nil
	if len(rec.Result) > 0 {
		red := c.redact(rec.Result)
		d.ResultJSON = string(red)
		var res taskResult
		if json.Unmarshal(red, &res) == nil {
			d.Result = &res
			if k, ok := res.Error["kind"].(string); ok {
				d.ErrorKind = k
			}
			if m, ok := res.Error["message"].(string); ok {
				d.ErrorMsg = m
			}
			if i := strings.Index(res.Stderr, "stack traceback:"); i >= 0 {
				d.Traceback = res.Stderr[i:]
			}
		}
	}
	if local {
		d.InputNote = "The daemon that ran this cluster task ran it on its own workers (loomd serve --cluster-tasks local): the cluster's state has its run, not its input."
	} else if in, ok := c.cfg.Queue.(interface {
		Input(context.Context, string) ([]byte, error)
	}); ok {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		raw, err := in.Input(ctx, rec.TaskID)
		cancel()
		switch {
		case errors.Is(err, queue.ErrNoInput):
			d.InputNote = "loomd keeps a task's input while it is queued or running, and once it failed or was cancelled (up to 64 KiB); not once it succeeded."
		case err != nil:
			d.InputNote = "The input could not be read: " + err.Error()
		default:
			d.InputJSON = string(c.redact(raw))
		}
	}
	if rec.ClusterID != "" && (rec.State == queue.Failed || rec.State == queue.Cancelled) {
		d.ClusterHint = true
	}
	d.Timeline = timeline(rec)
	d.Logs, d.LogNote, d.LogMore = c.taskLogs(r.Context(), rec, local)
	if c.cfg.TaskLogs != nil {
		d.LogCLI = "loomd task logs " + shellQuote(rec.TaskID) + srv
		if !rec.State.Terminal() {
			d.LogCLI = "loomd task logs " + shellQuote(rec.TaskID) + " --follow" + srv
		}
	}
	c.render(w, r, http.StatusOK, "task", &view{Title: "Task " + rec.TaskID, Nav: "tasks", Topics: []string{"task:" + rec.TaskID}, Data: d})
}

// retryable reports whether a finished task can be run again from the
// console: it failed or was cancelled, its record kept its input, and it
// is no cluster's (a cluster task runs again when its job is resumed).
func retryable(rec queue.Record) bool {
	return (rec.State == queue.Failed || rec.State == queue.Cancelled) && len(rec.Input) > 0 && rec.ClusterID == ""
}

// redact prepares a task or result for showing: the plugins' sensitive
// fields and every secret-looking key masked (runtime.RedactTask).
func (c *Console) redact(doc []byte) []byte {
	if rd, ok := c.cfg.Plugins.(interface{ RedactTask([]byte) []byte }); ok && c.cfg.Plugins != nil {
		return rd.RedactTask(doc)
	}
	return runtime.RedactJSON(doc, nil)
}

// timeline lists what the record says happened, oldest first.
func timeline(rec queue.Record) []event {
	ev := []event{{At: rec.Created, What: "queued"}}
	if rec.Started != nil {
		what := fmt.Sprintf("attempt %d started", rec.Attempts)
		if rec.Owner != "" {
			what += " on " + rec.Owner
		}
		ev = append(ev, event{At: *rec.Started, What: what})
	}
	if rec.Finished != nil {
		what := string(rec.State)
		if rec.Status != nil {
			what += fmt.Sprintf(" (status %d)", *rec.Status)
		}
		ev = append(ev, event{At: *rec.Finished, What: what})
	}
	return ev
}

// taskConfirm is the page that asks before an action.
func (c *Console) taskConfirm(w http.ResponseWriter, r *http.Request) {
	rec, ok := c.loadTask(w, r)
	if !ok {
		return
	}
	name := r.PathValue("action")
	var act *taskAction
	for _, a := range c.actionsFor(r, rec, c.cliServer(r)) {
		if a.Name == name {
			act = &a
		}
	}
	if act == nil {
		c.refuse(w, r, http.StatusConflict, fmt.Sprintf("Task %s cannot be %s now.", rec.TaskID, pastTense(name)),
			fmt.Sprintf("It is %s. %s", rec.State, actionHelp(name, c.readOnly(r))))
		return
	}
	c.render(w, r, http.StatusOK, "confirm", &view{Title: act.Label + " task " + rec.TaskID + "?", Nav: "tasks", Data: map[string]any{
		"Action": act, "Back": Prefix + "/tasks/" + rec.TaskID, "Post": Prefix + "/tasks/" + rec.TaskID + "/" + name,
		"What": confirmText(name, rec),
	}})
}

func pastTense(action string) string {
	switch action {
	case "cancel":
		return "cancelled"
	case "delete":
		return "deleted"
	}
	return action
}

func actionHelp(action string, readOnly bool) string {
	switch {
	case readOnly:
		return "This console is read-only (--ui-readonly)."
	case action == "cancel":
		return "Only queued and running tasks can be cancelled."
	case action == "delete":
		return "Only finished tasks can be deleted: cancel it first."
	case action == "retry":
		return "A task runs again from the console once it failed or was cancelled and its input was kept (up to 64 KiB); a cluster's task runs again when its cluster's job is resumed."
	}
	return "The actions on a task are cancel, delete and run again."
}

func confirmText(action string, rec queue.Record) string {
	switch action {
	case "cancel":
		if rec.State == queue.Running {
			return "The task is running: the daemon running it cancels its hook and records it cancelled when the hook returns. A hook that finishes first keeps its result."
		}
		return "The task is queued: it is cancelled at once and never runs."
	case "delete":
		return "The task's record and result are deleted for good; its id becomes unknown."
	case "retry":
		return "The task is queued again as it was submitted, under a new id; this one stays as it is. " +
			"There is no CLI equivalent: the API does not hand out a task's input (it holds its secrets); submit the task's file with 'loomd submit' instead."
	}
	return ""
}

// Flash messages after actions: fixed texts chosen by a code in the
// redirect, never text from the request.
var flashes = map[string]string{
	"cancelled":        "The task was cancelled.",
	"cancel-requested": "Cancellation requested: the task stops when its hook returns.",
	"deleted":          "The task was deleted.",
	"retried":          "This is the new run of the task.",
	"reloaded":         "The plugins were reloaded.",
	"job-started":      "The job was submitted: this page follows it.",
	"job-attached":     "The same change was already running: this page follows it.",
	"no-changes":       "No changes: the cluster is as the spec says.",
	"job-cancelled":    "The job was asked to stop.",
}

func (c *Console) taskAction(w http.ResponseWriter, r *http.Request) {
	rec, ok := c.loadTask(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	id := rec.TaskID
	switch r.PathValue("action") {
	case "cancel":
		got, err := c.cfg.Queue.Cancel(ctx, id)
		if errors.Is(err, queue.ErrFinished) {
			c.refuse(w, r, http.StatusConflict, "Task "+id+" already finished.", fmt.Sprintf("It is %s: there is nothing to cancel.", got.State))
			return
		}
		if err != nil {
			c.unavailable(w, r, "cancelling task "+id, err)
			return
		}
		c.log.Info("console: task cancel", "task", id, "by", sessionOf(r).Subject, "state", got.State)
		flash := "cancelled"
		if !got.State.Terminal() {
			flash = "cancel-requested"
		}
		http.Redirect(w, r, query(Prefix+"/tasks/"+id, "done", flash), http.StatusSeeOther)
	case "delete":
		got, err := c.cfg.Queue.Delete(ctx, id)
		if errors.Is(err, queue.ErrNotFinished) {
			c.refuse(w, r, http.StatusConflict, "Task "+id+" is not finished.", fmt.Sprintf("It is %s: cancel it first, then delete it.", got.State))
			return
		}
		if err != nil {
			c.unavailable(w, r, "deleting task "+id, err)
			return
		}
		if c.cfg.TaskLogs != nil {
			if err := c.cfg.TaskLogs.Purge(ctx, id); err != nil {
				c.log.Warn("console: deleting a task's log lines failed; they expire with --retain", "task", id, "err", err)
			}
		}
		c.log.Info("console: task delete", "task", id, "by", sessionOf(r).Subject)
		http.Redirect(w, r, query(Prefix+"/tasks", "done", "deleted"), http.StatusSeeOther)
	case "retry":
		if !retryable(rec) {
			c.refuse(w, r, http.StatusConflict, "Task "+id+" cannot run again from here.", actionHelp("retry", false))
			return
		}
		task, err := runtime.WithID(rec.Input, queue.NewID())
		if err != nil {
			c.refuse(w, r, http.StatusConflict, "Task "+id+" cannot run again.", err.Error())
			return
		}
		got, _, err := c.cfg.Queue.Submit(ctx, task)
		if err != nil {
			c.unavailable(w, r, "queueing task "+id+" again", err)
			return
		}
		c.log.Info("console: task run again", "task", id, "new_task", got.TaskID, "by", sessionOf(r).Subject)
		http.Redirect(w, r, query(Prefix+"/tasks/"+got.TaskID, "done", "retried"), http.StatusSeeOther)
	default:
		c.refuse(w, r, http.StatusNotFound, "No such action.", actionHelp("", false))
	}
}

// logLine is one log line on a task's page; Head, when set, starts an
// attempt's lines ("attempt 2 on host-b").
type logLine struct {
	Head  string
	Time  time.Time
	Level string
	Msg   string
	Attrs string
	// Class marks warnings and errors ("log-warn", "log-error").
	Class string
}

// Bounds of a task's page's log: at most maxLogRead lines read, the last
// maxTaskLines shown (log.txt has every line read). The job log of a
// cluster task (without task logs) is read within logWindow stream
// messages, at most logBatches of them.
const (
	maxLogRead   = 50_000
	maxTaskLines = 500
	logWindow    = 50_000
	logBatches   = 2_000
)

// hiddenAttrs are the attributes a task's page does not repeat on every
// line: the page says them once.
var hiddenAttrs = map[string]bool{"task": true, "type": true, "family": true, "cluster": true, "job": true,
	"component": true, "worker_component": true, "plugin": true, "hook": true, "attempt": true, "taskName": true}

// readTaskLog reads a queued task's own log (local: a cluster task its
// daemon ran itself, see loadTaskOrRun).
func (c *Console) readTaskLog(ctx context.Context, rec queue.Record, local bool, limit int) (tasklog.Page, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	origin := tasklog.OriginQueue
	if local {
		origin = tasklog.OriginCluster
	}
	return c.cfg.TaskLogs.Read(ctx, rec.TaskID, 0, limit, tasklog.Filter{Origin: origin, Since: rec.Created.Add(-time.Minute)})
}

// taskLogs reads the task's log lines: the last maxTaskLines, with a note
// when there are more (or none), and whether log.txt has more.
func (c *Console) taskLogs(ctx context.Context, rec queue.Record, local bool) (lines []logLine, note string, more bool) {
	if c.cfg.TaskLogs == nil {
		lines, note = c.clusterTaskLogs(ctx, rec)
		return lines, note, false
	}
	page, err := c.readTaskLog(ctx, rec, local, maxLogRead)
	if err != nil {
		return nil, "The task's log could not be read: " + err.Error(), false
	}
	all := page.Lines
	switch {
	case len(all) == 0 && rec.State == queue.Queued:
		return nil, "No log line yet: the task has not run.", false
	case len(all) == 0 && rec.State == queue.Running:
		return nil, "No log line yet.", false
	case len(all) == 0:
		return nil, "This task logged nothing (at the daemons' --log-level).", false
	}
	first := 0
	if len(all) > maxTaskLines {
		first = len(all) - maxTaskLines
		note = fmt.Sprintf("The last %d of %d lines.", maxTaskLines, len(all))
		more = true
	}
	if page.More {
		note = fmt.Sprintf("The last %d of the first %d lines read; loomd task logs %s has them all.", maxTaskLines, len(all), shellQuote(rec.TaskID))
	}
	attempt, source := -1, ""
	for _, l := range all[first:] {
		ll := logLine{Time: l.Time, Level: l.Level, Msg: l.Msg}
		switch l.Level {
		case "WARN":
			ll.Class = "log-warn"
		case "ERROR":
			ll.Class = "log-error"
		}
		if l.Attempt != attempt || l.Source != source {
			attempt, source = l.Attempt, l.Source
			switch {
			case attempt > 0:
				ll.Head = fmt.Sprintf("Attempt %d on %s", attempt, source)
			default:
				ll.Head = "On " + source
			}
		}
		var attrs []string
		for _, a := range l.Attrs {
			if !hiddenAttrs[a.K] {
				attrs = append(attrs, a.K+"="+a.V)
			}
		}
		ll.Attrs = strings.Join(attrs, " ")
		lines = append(lines, ll)
	}
	return lines, note, more
}

// taskLogText serves a task's whole log as text (GET
// /ui/tasks/{id}/log.txt): every line read, one per line, each with its
// attempt and daemon.
func (c *Console) taskLogText(w http.ResponseWriter, r *http.Request) {
	rec, local, ok := c.loadTaskOrRun(w, r)
	if !ok {
		return
	}
	if c.cfg.TaskLogs == nil {
		c.notFound(w, r, "This loomd keeps no task logs (--task-log-max 0).")
		return
	}
	page, err := c.readTaskLog(r.Context(), rec, local, maxLogRead)
	if err != nil {
		c.unavailable(w, r, "reading the log of task "+rec.TaskID, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var b strings.Builder
	for _, l := range page.Lines {
		fmt.Fprintf(&b, "attempt=%d source=%s %s\n", l.Attempt, l.Source, logstream.Format(l.Entry))
	}
	if page.More {
		fmt.Fprintf(&b, "# the first %d lines; loomd task logs %s has them all\n", len(page.Lines), shellQuote(rec.TaskID))
	}
	_, _ = io.WriteString(w, b.String())
}

// clusterTaskLogs reads a cluster task's plugin log lines from the job
// log, for a daemon that keeps no task logs.
func (c *Console) clusterTaskLogs(ctx context.Context, rec queue.Record) ([]logLine, string) {
	const elsewhere = "This loomd keeps no task logs (--task-log-max 0): a task's log lines go to the daemon's log (stderr, with task=%s); a cluster job's tasks' also to its job log (loomd cluster logs NAME)."
	if rec.ClusterID == "" || c.cfg.JobLog == nil {
		return nil, fmt.Sprintf(elsewhere, rec.TaskID)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	last, err := c.cfg.JobLog.Last(ctx, rec.ClusterID)
	if err != nil {
		return nil, "The job log could not be read: " + err.Error()
	}
	after := uint64(0)
	if last > logWindow {
		after = last - logWindow
	}
	batches, err := c.cfg.JobLog.Read(ctx, rec.ClusterID, after, logBatches)
	if err != nil {
		return nil, "The job log could not be read: " + err.Error()
	}
	var out []logLine
	for _, b := range batches {
		for _, e := range b.Entries {
			if e.Kind != joblog.KindLog || e.Attr("task") != rec.TaskID {
				continue
			}
			var attrs []string
			for _, a := range e.Attrs {
				switch a.K {
				case "task", "type", "family", "cluster", "job":
					continue
				}
				attrs = append(attrs, a.K+"="+a.V)
			}
			out = append(out, logLine{Time: e.Time, Level: e.Level, Msg: e.Msg, Attrs: strings.Join(attrs, " ")})
		}
	}
	note := ""
	if len(out) > maxTaskLines {
		note = fmt.Sprintf("The last %d of %d lines (loomd cluster logs %s has them all).", maxTaskLines, len(out), rec.ClusterID)
		out = out[len(out)-maxTaskLines:]
	}
	if len(out) == 0 {
		note = fmt.Sprintf("No plugin log line of this task in the job log of cluster %s.", rec.ClusterID)
	}
	return out, note
}
