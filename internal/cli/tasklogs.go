package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/loomrt/loom/bindings/redact"
	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/cluster/joblog"
	clusterrunner "github.com/loomrt/loom/internal/cluster/runner"
	"github.com/loomrt/loom/internal/logstream"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tasklog"
	"github.com/loomrt/loom/runtime"
)

// taskLogOptions are the --task-log-* flags of loomd serve.
type taskLogOptions struct {
	max   string
	lines int
	bytes string
}

func (o *taskLogOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.max, "task-log-max", "256MiB", "bytes of task log lines (every task's plugin and runtime lines) kept in the store, all tasks together, oldest dropped first; at most an eighth of the store; 0 keeps none")
	f.IntVar(&o.lines, "task-log-lines", tasklog.DefaultMaxLines, "log lines one attempt of a task keeps: the first three quarters, then the last quarter (a note says how many were left out)")
	f.StringVar(&o.bytes, "task-log-bytes", "512KiB", "bytes of log lines one attempt of a task keeps, as --task-log-lines")
}

// taskLogs is the daemon's task log, or nothing (--task-log-max 0).
type taskLogs struct{ l *tasklog.Log }

func (t taskLogs) log() *tasklog.Log { return t.l }

// Close stores what is pending and stops.
func (t taskLogs) Close() {
	if t.l != nil {
		t.l.Close()
	}
}

// startTaskLogs opens the task log stream, sized to --task-log-max but
// never more than an eighth of what the store can hold, expiring with the
// task records (--retain).
func (a *App) startTaskLogs(ctx context.Context, o *serveOptions, q *queue.Queue, tee *logstream.Tee, base *slog.Logger) (taskLogs, error) {
	max, err := runtime.ParseSize(o.taskLogs.max)
	if err != nil || max < 0 {
		return taskLogs{}, usageErr(fmt.Errorf("--task-log-max %q: want a size such as 256MiB, or 0 for no task logs", o.taskLogs.max))
	}
	per, err := runtime.ParseSize(o.taskLogs.bytes)
	if err != nil || per < 4<<10 {
		return taskLogs{}, usageErr(fmt.Errorf("--task-log-bytes %q: want a size of at least 4KiB, such as 512KiB", o.taskLogs.bytes))
	}
	if o.taskLogs.lines < 8 {
		return taskLogs{}, usageErr(fmt.Errorf("--task-log-lines %d: want at least 8", o.taskLogs.lines))
	}
	log := base.With("component", "tasklogs")
	if max == 0 {
		log.Info("task logs are off (--task-log-max 0): a task's log lines go only to this daemon's log")
		return taskLogs{}, nil
	}
	max, note := logstream.Fit(ctx, q.JetStream(), tasklog.StreamName, max, storeCapacity(ctx, q, base))
	if note != "" {
		log.Info("task logs: " + note)
	}
	var age time.Duration
	if o.retain > 0 {
		// Lines are written while a task runs; its record expires
		// --retain after it finished.
		age = o.retain + time.Hour
	}
	l, err := tasklog.Open(ctx, q.JetStream(), tee, tasklog.Options{Replicas: q.Replicas(), MaxBytes: max, MaxAge: age,
		MaxLines: o.taskLogs.lines, MaxTaskBytes: int(per), Source: q.Owner(), Paused: q.Tight, Logger: log, Retry: o.retry})
	if err != nil {
		return taskLogs{}, err
	}
	return taskLogs{l: l}, nil
}

// storeCapacity is what the store can still promise to a log stream (0:
// unknown or unlimited).
func storeCapacity(ctx context.Context, q *queue.Queue, log *slog.Logger) int64 {
	c, err := q.Capacity(ctx)
	if err != nil {
		log.Warn("cannot read the store's capacity; log streams keep their default sizes", "err", err)
	}
	return c
}

// taskRunner runs every task with its log lines kept in its own log (and
// a cluster job's task's also in the job's log), from whichever source
// the task came (origin): the queue or a Coopr server.
type taskRunner struct {
	next    queue.Runner
	origin  string
	logs    taskLogs
	tee     *logstream.Tee
	jobs    *clusterrunner.Runner
	jobLog  joblog.Sink
	source  string
	secrets func([]byte) *redact.Set
}

// from is the runner for tasks of one origin.
func (r taskRunner) from(origin string) taskRunner {
	r.origin = origin
	return r
}

// taskHead is what the runner reads of a task: no more than it needs.
type taskHead struct {
	TaskID    string `json:"taskId"`
	TenantID  string `json:"tenantId"`
	ClusterID string `json:"clusterId"`
	JobID     string `json:"jobId"`
}

func (r taskRunner) Run(ctx context.Context, task []byte) ([]byte, int, error) {
	// A queued task's record says what the log needs; only a cluster
	// job's task is read for its job, and a Coopr server's task for its
	// id and tenant.
	var t taskHead
	attempt := 0
	if rec, ok := queue.RunningRecord(ctx); ok && r.origin == tasklog.OriginQueue {
		t.TaskID, t.TenantID, t.ClusterID, attempt = rec.TaskID, rec.TenantID, rec.ClusterID, rec.Attempts
		if t.ClusterID != "" {
			var head taskHead
			_ = json.Unmarshal(task, &head)
			t.JobID = head.JobID
		}
	} else if p, err := queue.ParsedTask(ctx, task); err == nil && p.TaskID != "" {
		// The runtime's one-pass scan: a cluster task carries the
		// whole cluster's nodes, which decoding costs 0.1 ms a task.
		t = taskHead{TaskID: p.TaskID, TenantID: p.TenantID, ClusterID: p.ClusterID, JobID: p.JobID}
	} else if json.Unmarshal(task, &t) != nil || t.TaskID == "" {
		return r.next.Run(ctx, task) // the runtime says what is wrong with it
	}
	if t.ClusterID != "" && t.JobID != "" && r.jobs != nil && r.jobs.IsJob(t.ClusterID, t.JobID) {
		defer r.tee.Track(t.TaskID, joblog.Copy(r.jobLog, r.source, t.ClusterID, t.JobID))()
	}
	if r.logs.l == nil {
		return r.next.Run(ctx, task)
	}
	end := r.logs.l.Start(tasklog.Task{ID: t.TaskID, Tenant: t.TenantID, Origin: r.origin, Attempt: attempt,
		Secrets: func() *redact.Set { return r.secrets(task) }})
	res, status, err := r.next.Run(ctx, task)
	end(status, err)
	return res, status, err
}

// runTaskLogs prints a task's log (GET /v1/tasks/{id}/logs), following it
// with long polls until it is done when follow is set.
func (a *App) runTaskLogs(ctx context.Context, o *taskOptions, id string, follow bool) error {
	ctx = ctxOr(ctx)
	sctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var after uint64
	attempt, source := -1, ""
	for {
		path := fmt.Sprintf("/v1/tasks/%s/logs?after=%d", url.PathEscape(id), after)
		if follow {
			path += "&wait=30s"
		}
		var page api.TaskLogResponse
		err := c.doFailover(sctx, "GET", path, nil, &page)
		if sctx.Err() != nil {
			return silentExit(130) // Ctrl-C: the task goes on
		}
		if err != nil {
			return clientErr(err)
		}
		for _, l := range page.Lines {
			if o.json {
				data, _ := json.Marshal(l)
				fmt.Fprintln(a.Out, string(data))
				continue
			}
			if l.Attempt != attempt || l.Source != source {
				attempt, source = l.Attempt, l.Source
				if attempt > 0 {
					fmt.Fprintf(a.Out, "--- attempt %d on %s\n", attempt, source)
				} else {
					fmt.Fprintf(a.Out, "--- on %s\n", source)
				}
			}
			fmt.Fprintln(a.Out, logstream.Format(l.Entry))
		}
		after = page.Next
		switch {
		case page.More:
			continue
		case !follow:
			return nil
		case page.Done:
			if page.State != "" && page.State != queue.Succeeded {
				fmt.Fprintf(a.Err, "loomd: task %s %s\n", id, page.State)
				return silentExit(ExitFailure)
			}
			return nil
		}
	}
}
