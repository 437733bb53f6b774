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
	limit   int
	timeout time.Duration
}

func (a *App) newTaskCmd(g *globalOptions) *cobra.Command {
	o := &taskOptions{}
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Inspect tasks on a running loomd: get, list, wait",
		Long: `Inspect the tasks of a running loomd through its HTTP API. Output is a
human-readable table on a terminal and JSON otherwise (or with --json).`,
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
		Short: "List tasks, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskList(cmd.Context(), o)
		},
	}
	list.Flags().StringVar(&o.state, "state", "", "only tasks in this state: queued, running, succeeded or failed")
	list.Flags().StringVar(&o.typ, "type", "", "only tasks for this plugin type")
	list.Flags().IntVar(&o.limit, "limit", 100, "at most this many tasks (0: all)")
	wait := &cobra.Command{
		Use:   "wait ID",
		Short: "Wait for a task to finish and show it (exit 0 succeeded, 1 failed)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runTaskWait(cmd.Context(), o, args[0])
		},
	}
	wait.Flags().DurationVar(&o.timeout, "timeout", 0, "give up after this long (exit 3; the task keeps going)")
	cmd.AddCommand(get, list, wait)
	return cmd
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
	t, err := c.waitTask(ctxOr(ctx), id, o.timeout)
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
	if o.typ != "" {
		q.Set("type", o.typ)
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
	fmt.Fprintln(tw, "TASK\tSTATE\tTYPE\tHOOK\tATTEMPTS\tCREATED\tTOOK")
	for _, t := range l.Tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", t.TaskID, t.State, t.Family+"/"+t.Type, t.Hook, t.Attempts,
			t.Created.Local().Format("2006-01-02 15:04:05"), took(t))
	}
	return tw.Flush()
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
