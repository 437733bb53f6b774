package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
)

type taskOptions struct {
	client  clientOptions
	json    bool
	state   string
	typ     string
	cluster string
	after   string
	limit   int
	timeout time.Duration
	wait    time.Duration
}

func (a *App) newTaskCmd(g *globalOptions) *cobra.Command {
	o := &taskOptions{}
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Inspect and manage tasks on a running loomd: get, list, wait, cancel, delete",
		Long: `Inspect and manage the tasks of a running loomd through its HTTP API. Output
is a human-readable table on a terminal and JSON otherwise (or with --json).`,
		Args: cobra.NoArgs,
	}
	o.client.addFlags(cmd.PersistentFlags())
	cmd.PersistentFlags().BoolVar(&o.json, "json", false, "print JSON even on a terminal")

	get := &cobra.Command{
		Use:   "get ID",
		Short: "Show a task's state and result",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskGet(cmd.Context(), o, args[0])
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List tasks, newest first, a page at a time",
		Long: `List tasks, newest first (by the time a task was queued, or finished), one page at a time.
A page that is not the last ends with the cursor of the next one: pass it to
--after (it is opaque). With --json the cursor is the "next" field.`,
		Example: `  loomd task list --state failed --type docker
  loomd task list --cluster 00000139 --limit 20 --after <cursor from the previous page>`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskList(cmd.Context(), o)
		},
	}
	list.Flags().StringVar(&o.state, "state", "", "only tasks in this state: queued, running, succeeded, failed or cancelled")
	list.Flags().StringVar(&o.typ, "type", "", "only tasks for this plugin type")
	list.Flags().StringVar(&o.cluster, "cluster", "", "only tasks with this clusterId")
	list.Flags().IntVar(&o.limit, "limit", queue.DefaultPageSize, fmt.Sprintf("page size, 1 to %d", queue.MaxPageSize))
	list.Flags().StringVar(&o.after, "after", "", "cursor of the page to show, as printed after the previous page")
	wait := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a task to finish and show it (exit 0 succeeded, 1 failed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskWait(cmd.Context(), o, args[0])
		},
	}
	wait.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (exit 3; the task keeps going)")
	cancel := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a queued or running task (exit 0 once it is cancelled)",
		Long: `Cancel a task. A queued task is cancelled at once and never runs. A running
task's hook has its context cancelled on the daemon running it; the command
waits up to --wait for it to end. Either way the task ends in state
"cancelled" with error kind "cancelled" (a hook that finished successfully
before the request keeps its result: exit 1). A finished task is an error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskCancel(cmd.Context(), o, args[0])
		},
	}
	cancel.Flags().DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait for a running task to stop (0: do not wait)")
	del := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a finished task's record and result (the id may be submitted again)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskDelete(cmd.Context(), o, args[0])
		},
	}
	var follow bool
	logs := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a task's log lines: its plugin's and the runtime's (--follow until it ends)",
		Long: `Print a task's own log: the lines its plugin logged (loom.log) and what the
daemon said about it while it ran (a worker that died, a hook stopped at its
deadline, how each attempt ended), from whichever daemon ran it, secrets
redacted. Each attempt's lines start with a line naming the attempt and the
daemon. With --follow the command prints lines as they come until the task
has finished and its last line is printed, then exits 0 if it succeeded and 1
otherwise, as 'loomd task wait' does. With --json each line is a JSON object
(its "seq" is the cursor the API pages with).`,
		Example: `  loomd task logs 01HZX3K4Q7 --follow
  loomd task logs 01HZX3K4Q7 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskLogs(cmd.Context(), o, args[0], follow)
		},
	}
	logs.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the task has finished")
	cmd.AddCommand(get, list, wait, cancel, del, logs)
	return cmd
}

func (a *App) runTaskCancel(ctx context.Context, o *taskOptions, id string) error {
	ctx = ctxOr(ctx)
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var r api.CancelResponse
	if err := c.do(ctx, "POST", "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, &r); err != nil {
		return clientErr(err)
	}
	t := r.Task
	if r.CancelRequested && o.wait > 0 {
		// On a timeout (or a lost connection) the task is shown as the
		// cancel request found it, with the hint below.
		if w, err := c.waitTask(ctx, id, o.wait, false); err == nil || w.TaskID != "" {
			t = w
		}
	}
	if err := a.showTask(o, t); err != nil {
		return err
	}
	switch {
	case t.State == queue.Cancelled:
		return nil
	case !t.State.Terminal():
		fmt.Fprintf(a.Err, "loomd: task %s is still %s: its cancellation is requested; check with 'loomd task wait %s'\n", id, t.State, id)
	default:
		fmt.Fprintf(a.Err, "loomd: task %s %s before it could be cancelled\n", id, t.State)
	}
	return silentExit(ExitFailure)
}

func (a *App) runTaskDelete(ctx context.Context, o *taskOptions, id string) error {
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var r api.DeleteResponse
	if err := c.do(ctxOr(ctx), "DELETE", "/v1/tasks/"+url.PathEscape(id), nil, &r); err != nil {
		return clientErr(err)
	}
	if o.json || !a.StdoutTTY {
		return a.printJSON(r)
	}
	fmt.Fprintf(a.Out, "deleted task %s (%s)\n", r.TaskID, r.State)
	return nil
}

func (a *App) runTaskGet(ctx context.Context, o *taskOptions, id string) error {
	c, err := o.client.client()
	if err != nil {
		return err
	}
	var t api.Task
	if err := c.do(ctxOr(ctx), "GET", "/v1/tasks/"+url.PathEscape(id), nil, &t); err != nil {
		return clientErr(err)
	}
	return a.showTask(o, t)
}

func (a *App) runTaskWait(ctx context.Context, o *taskOptions, id string) error {
	c, err := o.client.client()
	if err != nil {
		return err
	}
	t, err := c.waitTask(ctxOr(ctx), id, o.timeout, false)
	if err != nil {
		return clientErr(err)
	}
	if err := a.showTask(o, t); err != nil {
		return err
	}
	if t.State != queue.Succeeded {
		return silentExit(ExitFailure)
	}
	return nil
}

func (a *App) runTaskList(ctx context.Context, o *taskOptions) error {
	if o.state != "" {
		if _, err := queue.ParseState(o.state); err != nil {
			return usageErr(fmt.Errorf("--state: %w", err))
		}
	}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	q := url.Values{}
	if o.state != "" {
		q.Set("state", o.state)
	}
	if o.limit < 1 || o.limit > queue.MaxPageSize {
		return usageErr(fmt.Errorf("--limit %d: want a page size from 1 to %d; page on with --after", o.limit, queue.MaxPageSize))
	}
	for k, v := range map[string]string{"type": o.typ, "cluster": o.cluster, "after": o.after} {
		if v != "" {
			q.Set(k, v)
		}
	}
	q.Set("limit", strconv.Itoa(o.limit))
	var l api.ListResponse
	if err := c.do(ctxOr(ctx), "GET", "/v1/tasks?"+q.Encode(), nil, &l); err != nil {
		return clientErr(err)
	}
	if o.json || !a.StdoutTTY {
		return a.printJSON(l)
	}
	if len(l.Tasks) == 0 {
		fmt.Fprintln(a.Out, "no tasks")
		return nil
	}
	tw := tabwriter.NewWriter(a.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATE\tTYPE\tHOOK\tCLUSTER\tATTEMPTS\tCREATED\tTOOK")
	for _, t := range l.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.TaskID, t.State, t.Family+"/"+t.Type, t.Hook, orDash(t.ClusterID), t.Attempts,
			t.Created.Local().Format("2006-01-02 15:04:05"), took(t))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Next != "" {
		fmt.Fprintf(a.Out, "next page: --after %s\n", l.Next)
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func took(t api.Task) string {
	if t.Started == nil || t.Finished == nil {
		return "-"
	}
	return t.Finished.Sub(*t.Started).Round(time.Millisecond).String()
}

// showTask prints one task: JSON for scripts, a summary on a terminal.
func (a *App) showTask(o *taskOptions, t api.Task) error {
	if o.json || !a.StdoutTTY {
		return a.printJSON(t)
	}
	tw := tabwriter.NewWriter(a.Out, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	tm := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return p.Local().Format("2006-01-02 15:04:05.000")
	}
	row("Task", t.TaskID)
	row("State", fmt.Sprintf("%s (attempts: %d)", t.State, t.Attempts))
	row("Type", t.Family+"/"+t.Type)
	row("Hook", strings.TrimSpace(t.Hook+" "+paren(t.TaskName)))
	row("Owner", t.Owner)
	row("Created", t.Created.Local().Format("2006-01-02 15:04:05.000"))
	row("Started", tm(t.Started))
	row("Finished", tm(t.Finished))
	if d := took(t); d != "-" {
		row("Took", d)
	}
	if t.Status != nil {
		row("Status", strconv.Itoa(*t.Status))
	}
	row("Error", t.Error)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(t.Result) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, t.Result, "", "  ") != nil {
			buf.Reset()
			buf.Write(t.Result)
		}
		fmt.Fprintf(a.Out, "Result\n%s\n", buf.Bytes())
	}
	return nil
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func ctxOr(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}
