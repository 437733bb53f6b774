package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

// clientOptions are the flags of the commands that talk to a running
// loomd over its HTTP API.
type clientOptions struct {
	server string
	token  string
}

func (o *clientOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.server, "server", "http://"+api.DefaultAddr, "URL of the loomd HTTP API; several, comma-separated, are daemons sharing a queue: a command that follows a cluster job goes on with the next when one does not answer")
	fs.StringVar(&o.token, "token", "", "bearer token of the loomd HTTP API")
}

// apiClient calls a loomd's HTTP API. With several servers (daemons
// sharing a queue), base is the one in use; failover moves to the next.
type apiClient struct {
	base  string
	bases []string
	token string
	hc    *http.Client
}

func (o *clientOptions) client() (*apiClient, error) {
	c := &apiClient{token: o.token, hc: &http.Client{}}
	for _, part := range strings.Split(o.server, ",") {
		s := strings.TrimRight(strings.TrimSpace(part), "/")
		if s == "" {
			continue
		}
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		if _, err := url.Parse(s); err != nil {
			return nil, usageErr(fmt.Errorf("--server %q: %w", part, err))
		}
		c.bases = append(c.bases, s)
	}
	if len(c.bases) == 0 {
		return nil, usageErr(fmt.Errorf("--server %q: no URL", o.server))
	}
	c.base = c.bases[0]
	return c, nil
}

// unreachable reports whether err means the daemon did not answer (as
// opposed to an answer with an error status).
func unreachable(err error) bool {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code == http.StatusServiceUnavailable || ae.code == http.StatusBadGateway || ae.code == http.StatusGatewayTimeout
	}
	var ce *callError
	return errors.As(err, &ce)
}

// callError is a request that got no answer.
type callError struct {
	base string
	err  error
}

func (e *callError) Error() string {
	return fmt.Sprintf("calling loomd at %s: %v (is it running? start it with 'loomd serve', or set --server / LOOM_SERVER)", e.base, e.err)
}
func (e *callError) Unwrap() error { return e.err }

// doFailover is do on the server in use, then on each other one in turn
// while they do not answer; the one that answers stays in use.
func (c *apiClient) doFailover(ctx context.Context, method, path string, body []byte, out any) error {
	var err error
	for range c.bases {
		if err = c.do(ctx, method, path, body, out); err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		if len(c.bases) > 1 {
			i := slices.Index(c.bases, c.base)
			c.base = c.bases[(i+1)%len(c.bases)]
		}
	}
	return err
}

// apiError is an error answer from loomd.
type apiError struct {
	code int
	msg  string
	body []byte // the answer as sent (a 409 of /v1/clusters/{name}/lock names the holder)
}

func (e *apiError) Error() string { return fmt.Sprintf("loomd answered %d: %s", e.code, e.msg) }

// do sends a request and decodes a 2xx JSON answer into out. A request
// the daemon refused unread because its in-flight budget was full (503
// with api.NotReadHeader) is sent again after its Retry-After.
func (c *apiClient) do(ctx context.Context, method, path string, body []byte, out any) error {
	for {
		wait, err := c.doOnce(ctx, method, path, body, out)
		if wait <= 0 {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// doOnce is one attempt of do; wait > 0 asks for another after it.
func (c *apiClient) doOnce(ctx context.Context, method, path string, body []byte, out any) (wait time.Duration, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, usageErr(fmt.Errorf("building the request: %w", err))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, &callError{base: c.base, err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading loomd's answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(api.NotReadHeader) != "" {
			wait = time.Second
			if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && n > 0 {
				wait = min(time.Duration(n)*time.Second, 30*time.Second)
			}
		}
		return wait, &apiError{code: resp.StatusCode, msg: e.Error, body: data}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("decoding loomd's answer: %w", err)
		}
	}
	return 0, nil
}

// clientErr maps an API error to the exit codes of loomd run: 2 for bad
// input (400, 404, 401), 1 otherwise.
func clientErr(err error) error {
	var ae *apiError
	if errors.As(err, &ae) && (ae.code == http.StatusBadRequest || ae.code == http.StatusNotFound ||
		ae.code == http.StatusUnauthorized || ae.code == http.StatusRequestEntityTooLarge) {
		return usageErr(err)
	}
	return err
}

// submittedGrace is how long a task this command just submitted may be
// unknown to the daemon: one accepted while the NATS cluster elected a
// leader gets its record when a worker claims it.
const submittedGrace = 30 * time.Second

// waitTask long-polls until the task is finished or timeout (0: no limit)
// passes. submitted says this command queued the task (the daemon
// accepted it): a 404 within submittedGrace is then asked again.
func (c *apiClient) waitTask(ctx context.Context, id string, timeout time.Duration, submitted bool) (api.Task, error) {
	started := time.Now()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	for {
		poll := 60 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			poll = min(poll, max(time.Until(dl), time.Millisecond))
		}
		var t api.Task
		err := c.do(ctx, "GET", "/v1/tasks/"+url.PathEscape(id)+"?wait="+poll.String(), nil, &t)
		var ae *apiError
		if submitted && errors.As(err, &ae) && ae.code == http.StatusNotFound && time.Since(started) < submittedGrace && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// The long poll was cut by our deadline: say where the task is.
				gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				gerr := c.do(gctx, "GET", "/v1/tasks/"+url.PathEscape(id), nil, &t)
				cancel()
				if gerr == nil && !t.State.Terminal() {
					return t, &exitError{code: ExitTimeout, err: fmt.Errorf("task %s is still %s after %v; it keeps going: check later with 'loomd task wait %s'", id, t.State, timeout, id)}
				}
				if gerr == nil {
					return t, nil // it finished just as we gave up
				}
				return t, &exitError{code: ExitTimeout, err: fmt.Errorf("task %s is not finished after %v; it keeps going: check later with 'loomd task wait %s'", id, timeout, id)}
			}
			return t, err
		}
		if t.State.Terminal() {
			return t, nil
		}
		if ctx.Err() != nil {
			return t, &exitError{code: ExitTimeout, err: fmt.Errorf("task %s is still %s after %v; it keeps going: check later with 'loomd task wait %s'", id, t.State, timeout, id)}
		}
	}
}

type submitOptions struct {
	client  clientOptions
	file    string
	wait    bool
	timeout time.Duration
}

func (a *App) newSubmitCmd(g *globalOptions) *cobra.Command {
	o := &submitOptions{}
	cmd := &cobra.Command{
		Use:   "submit TASK.json",
		Short: "Queue a Coopr task on a running loomd (- reads stdin) and print {taskId, state}",
		Long: `Queue a Coopr task on a running loomd through its HTTP API. Without taskId the
task gets a new one. Submitting an id loomd already knows runs nothing again.

Prints {"taskId": ..., "state": ...}. With --wait it waits for the task to
finish and prints its result JSON, with loomd run's exit status: 0 when the
status is 0, 1 when the task failed, 2 for a malformed task or bad flags.
--wait gives up after --timeout (default 10m) with exit status 3; the task
keeps going ('loomd task wait ID' picks it up). --timeout 0 waits for good.

When no loomd serves the task's plugin type, loomd accepts the task (it
waits in the queue), answers "served": false, and submit prints the
warning on stderr.`,
		Example: `  loomd submit examples/tasks/install.json
  loomd submit --wait task.json --server http://10.0.0.5:7070 --token "$LOOM_TOKEN"
  cat task.json | loomd submit -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.file = args[0]
			return a.runSubmit(cmd.Context(), o)
		},
	}
	o.client.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the task to finish and print its result")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Minute, "with --wait, give up after this long (exit 3; the task keeps going); 0 waits for good")
	// --wait-timeout is the old name of --timeout.
	cmd.Flags().DurationVar(&o.timeout, "wait-timeout", 10*time.Minute, "")
	_ = cmd.Flags().MarkDeprecated("wait-timeout", "use --timeout")
	return cmd
}

func (a *App) runSubmit(ctx context.Context, o *submitOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var data []byte
	var err error
	if o.file == "-" {
		data, err = io.ReadAll(a.In)
	} else {
		data, err = os.ReadFile(o.file)
	}
	if err != nil {
		return usageErr(fmt.Errorf("reading the task: %w", err))
	}
	c, err := o.client.client()
	if err != nil {
		return err
	}
	if o.wait {
		t, err := c.submitWait(ctx, data, o.timeout, func(warning string) {
			fmt.Fprintf(a.Err, "loomd: warning: %s\n", warning)
		})
		if err != nil {
			return clientErr(err)
		}
		return a.printResult(t)
	}
	var sub api.SubmitResponse
	if err := c.do(ctx, "POST", "/v1/tasks", data, &sub); err != nil {
		return clientErr(err)
	}
	if sub.Warning != "" {
		fmt.Fprintf(a.Err, "loomd: warning: %s\n", sub.Warning)
	}
	return a.printJSON(sub)
}

// submitPoll is the wait of submitWait's one request: most tasks finish
// within it, and the warning that no daemon serves the task's type comes
// with its answer, so it must not be long; a longer task costs GET long
// polls after it, which are little next to its run.
const submitPoll = 2 * time.Second

// submitWait queues a task and waits for it in one request (POST
// /v1/tasks?wait=), then, while it is not finished, long-polls as
// waitTask until timeout (0: no limit). warn gets the submit's warning.
func (c *apiClient) submitWait(ctx context.Context, data []byte, timeout time.Duration, warn func(string)) (api.Task, error) {
	// The task gets its id here, not from the daemon, so that an answer
	// lost on the way (the wait lasts) can be looked up by its id.
	id := ""
	if t, err := runtime.ParseTask(data); err == nil {
		id = t.TaskID
		if id == "" {
			nid := queue.NewID()
			if d, err := runtime.WithID(data, nid); err == nil {
				data, id = d, nid
			}
		}
	}
	var deadline time.Time
	poll := submitPoll
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
		poll = min(poll, timeout)
	}
	// The daemon answers when the wait is over; the margin covers a
	// daemon that does not (a lost connection is an error, not a hang).
	pctx, cancel := context.WithTimeout(ctx, poll+30*time.Second)
	var sub api.SubmitWaitResponse
	err := c.do(pctx, "POST", "/v1/tasks?wait="+poll.String(), data, &sub)
	cancel()
	var ae *apiError
	if err != nil && id != "" && (!errors.As(err, &ae) || ae.code == http.StatusServiceUnavailable) {
		return sub.Task, fmt.Errorf("%w (task %s may or may not be queued: 'loomd task wait %s' finds it if it is)", err, id, id)
	}
	if err != nil {
		return sub.Task, err
	}
	if sub.Warning != "" {
		warn(sub.Warning)
	}
	// A daemon older than POST ?wait= answers the submit alone (no
	// "created"): the finished task's result is then read by the poll.
	if sub.State.Terminal() && !sub.Created.IsZero() {
		return sub.Task, nil
	}
	var rest time.Duration
	if timeout > 0 {
		if rest = time.Until(deadline); rest <= 0 {
			return sub.Task, &exitError{code: ExitTimeout, err: fmt.Errorf("task %s is still %s after %v; it keeps going: check later with 'loomd task wait %s'", sub.TaskID, sub.State, timeout, sub.TaskID)}
		}
	}
	return c.waitTask(ctx, sub.TaskID, rest, true)
}

// printResult prints a finished task's Coopr result JSON and returns the
// exit status of loomd run.
func (a *App) printResult(t api.Task) error {
	res := t.Result
	if len(res) == 0 { // failed without running to the end (gave up after retries)
		res, _ = json.Marshal(map[string]any{"taskId": t.TaskID, "status": 1, "message": t.Error})
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, res, "", "  "); err != nil {
		buf.Reset()
		buf.Write(res)
	}
	fmt.Fprintf(a.Out, "%s\n", buf.Bytes())
	if t.State != queue.Succeeded {
		if t.Error != "" {
			fmt.Fprintf(a.Err, "loomd: task %s failed: %s\n", t.TaskID, t.Error)
		}
		return silentExit(ExitFailure)
	}
	return nil
}

func (a *App) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	fmt.Fprintf(a.Out, "%s\n", b)
	return nil
}
