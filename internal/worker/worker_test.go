package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	httpb "github.com/loomrt/loom/bindings/http"
	"github.com/loomrt/loom/bindings/listeners"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// The test binary doubles as the worker process: with LOOM_TEST_WORKER
// set it serves the plugins in LOOM_TEST_PLUGINS on fd 3.
func TestMain(m *testing.M) {
	if os.Getenv("LOOM_TEST_WORKER") != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	var mem int64
	fmt.Sscan(os.Getenv("LOOM_TEST_MEMORY"), &mem)
	own := listeners.New()
	opts := worker.ChildOptions{Type: os.Getenv("LOOM_TEST_TYPE"), Memory: mem, Listeners: own}
	if os.Getenv("LOOM_TEST_NO_WATCHDOG") != "" {
		opts.WatchInterval = time.Hour // only the OS limit acts
	}
	_ = syscall.SetNonblock(3, true) // as loomd worker does: the netpoller reads it
	c, err := worker.NewChild(os.NewFile(3, "conn"), opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logger := slog.New(c.LogHandler(slog.LevelInfo))
	rt, err := runtime.New(runtime.Options{PluginsDir: os.Getenv("LOOM_TEST_PLUGINS"), WorkDir: os.Getenv("LOOM_TEST_WORK"), Logger: logger,
		Bindings: std.New(std.Options{HTTP: httpb.Options{Listeners: own}}),
		Expose: map[string]any{
			// die ends the process the way a Go fatal error does.
			"die": func() { fmt.Fprintln(os.Stderr, "fatal error: simulated crash"); os.Exit(2) },
			// block ignores the hook's context, as a stuck builtin would.
			"block": func() { time.Sleep(time.Hour) },
		}})
	if err == nil {
		err = rt.Load(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Serve(context.Background(), rt); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// syncBuffer is a log sink the test reads while workers write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const plugins = `
Ok = {}
function Ok:create(input)
  loom_log.info("creating", "host", input.hostname)
  self.result.result.ok = true
end
function Ok:delete() error("nope") end

Hog = {}
function Hog:create()
  local s = string.rep("x", 1024 * 1024)
  local t = {}
  for i = 1, 100000 do t[#t+1] = s .. i end
end

Crash = {}
function Crash:create() require("loom.host").die() end

Spin = {}
function Spin:create() while true do end end

Stuck = {}
function Stuck:create() require("loom.host").block() end

Dial = {}
function Dial:create(input)
  local ok, err = pcall(require("loom.http").get, self.task.config.url, {timeout = 2})
  self.result.result.kind = ok and "none" or err.kind
  self.result.result.message = ok and "" or err.message
end
`

type env struct {
	env     *[]string // more environment for workers started from now on
	sup     *worker.Supervisor
	logs    *syncBuffer
	plugins string
}

func newEnv(t testing.TB, cfg worker.Config) *env {
	t.Helper()
	dir := t.TempDir()
	work := t.TempDir()
	for _, name := range []string{"Ok", "Hog", "Crash", "Spin", "Stuck", "Dial"} {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: strings.ToLower(name), Family: "provider", Classname: name,
			Files: map[string]string{"p.lua": "local loom_log = require('loom.log')\n" + plugins}})
	}
	e := &env{logs: &syncBuffer{}, plugins: dir}
	cfg.Logger = slog.New(slog.NewTextHandler(e.logs, nil)).With("component", "worker")
	var extraEnv []string
	cfg.Command = func(spec worker.TypeSpec) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(append(os.Environ(), extraEnv...), "LOOM_TEST_WORKER=1", "LOOM_TEST_PLUGINS="+dir, "LOOM_TEST_WORK="+work,
			"LOOM_TEST_TYPE="+spec.Name, fmt.Sprintf("LOOM_TEST_MEMORY=%d", spec.Memory))
		return cmd
	}
	e.sup = worker.New(cfg)
	e.env = &extraEnv
	e.setTypes("v1", 128<<20)
	t.Cleanup(e.sup.Close)
	return e
}

func (e *env) setTypes(version string, mem int64) {
	var specs []worker.TypeSpec
	for _, n := range []string{"ok", "hog", "crash", "spin", "stuck", "dial"} {
		specs = append(specs, worker.TypeSpec{Name: n, Version: version, Memory: mem})
	}
	e.sup.SetTypes(specs)
}

func task(id, typ string) []byte {
	return withName("CREATE", id, typ)
}

func withName(name, id, typ string) []byte {
	return []byte(`{"taskId":"` + id + `","taskName":"` + name + `","config":{"provider":{"providertype":"` + typ + `"},"hostname":"n1.example.com"}}`)
}

type result struct {
	Status  int            `json:"status"`
	Message string         `json:"message"`
	Result  map[string]any `json:"result"`
	Error   map[string]any `json:"error"`
}

func run(t *testing.T, e *env, ctx context.Context, id, typ string, timeout time.Duration) (result, error) {
	t.Helper()
	b, status, err := e.sup.Run(ctx, typ, id, task(id, typ), timeout)
	var r result
	if err == nil {
		if jerr := json.Unmarshal(b, &r); jerr != nil {
			t.Fatalf("result of %s is not JSON: %v: %s", id, jerr, b)
		}
		if r.Status != status {
			t.Errorf("status %d, but the result says %d", status, r.Status)
		}
	}
	return r, err
}

func TestRunReusesWorkerAndForwardsLogs(t *testing.T) {
	e := newEnv(t, worker.Config{})
	for i := range 3 {
		r, err := run(t, e, context.Background(), fmt.Sprint("t", i), "ok", time.Minute)
		if err != nil || r.Status != 0 || r.Result["ok"] != true {
			t.Fatalf("run %d: %+v, %v", i, r, err)
		}
	}
	// An idle worker of another type serves a type that has none: no
	// process per task when types outnumber workers.
	if b, _, err := e.sup.Run(context.Background(), "spin", "other", withName("DELETE", "other", "spin"), time.Minute); err != nil || !bytes.Contains(b, []byte("unimplemented delete")) {
		t.Errorf("a run of another type: %s, %v", b, err)
	}
	if st := e.sup.Stats(); st.Started != 1 || st.Live != 1 || st.Idle != 1 {
		t.Errorf("stats %+v: want one worker started and kept", st)
	}
	// The console's list: the one idle worker, its pid, memory and budget.
	if ws := e.sup.Workers(); len(ws) != 1 || ws[0].PID <= 0 || ws[0].RSS <= 0 || ws[0].Budget <= 0 || ws[0].TaskID != "" || ws[0].IdleSince.IsZero() {
		t.Errorf("Workers() = %+v: want one idle worker with its pid, RSS and budget", ws)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, `msg="creating host n1.example.com"`) || !strings.Contains(logs, "task=t2") ||
		!strings.Contains(logs, "type=ok") {
		t.Errorf("worker logs did not reach the parent with task and type:\n%s", logs)
	}
	// Not found and plugin failures travel as in-process runs report them.
	if _, err := run(t, e, context.Background(), "x", "nosuch", time.Minute); !errors.Is(err, runtime.ErrPluginNotFound) {
		t.Errorf("unknown type: %v, want ErrPluginNotFound", err)
	}
	b, st, err := e.sup.Run(context.Background(), "ok", "d1", withName("DELETE", "d1", "ok"), time.Minute)
	if err != nil || st != 1 || !bytes.Contains(b, []byte("nope")) {
		t.Errorf("failing hook: %s, %d, %v", b, st, err)
	}
}

// A hook growing a table of fresh strings fails its own task with kind
// memory, while a task running beside it succeeds; the next run of the
// type gets a fresh worker.
func TestMemoryBudgetFailsOnlyThatTask(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's shadow memory counts against the worker's memory limit")
	}
	e := newEnv(t, worker.Config{})
	var wg sync.WaitGroup
	var hog, ok result
	var hogErr, okErr error
	wg.Add(2)
	go func() { defer wg.Done(); hog, hogErr = run(t, e, context.Background(), "hog1", "hog", time.Minute) }()
	go func() { defer wg.Done(); ok, okErr = run(t, e, context.Background(), "ok1", "ok", time.Minute) }()
	wg.Wait()
	if okErr != nil || ok.Status != 0 {
		t.Errorf("the task beside the hog: %+v, %v", ok, okErr)
	}
	if hogErr != nil || hog.Status != 1 || hog.Error["kind"] != "memory" || !strings.Contains(hog.Message, "128 MiB") {
		t.Fatalf("hog: %+v, %v; want a failed result with kind memory naming the limit\n%s", hog, hogErr, e.logs.String())
	}
	if r, err := run(t, e, context.Background(), "ok2", "ok", time.Minute); err != nil || r.Status != 0 {
		t.Errorf("after the hog: %+v, %v", r, err)
	}
	// Without the watchdog, the OS limit kills the worker: the task still
	// fails with kind memory, naming the limit, and the type is served
	// again.
	*e.env = append(*e.env, "LOOM_TEST_NO_WATCHDOG=1")
	e.setTypes("v2", 128<<20) // a reload: idle workers retire, new ones start
	hog2, err := run(t, e, context.Background(), "hog2", "hog", time.Minute)
	if err != nil || hog2.Error["kind"] != "memory" || !strings.Contains(hog2.Message, `worker for "hog" died: out of memory (limit 128 MiB)`) {
		t.Errorf("hog killed by the OS limit: %+v, %v", hog2, err)
	}
	if st := e.sup.Stats(); st.OOM != 1 {
		t.Errorf("stats %+v: want one worker dead of OOM", st)
	}
}

func TestWorkerDeathIsReportedAndReplaced(t *testing.T) {
	e := newEnv(t, worker.Config{})
	_, err := run(t, e, context.Background(), "c1", "crash", time.Minute)
	var de *worker.DeathError
	if !errors.As(err, &de) || !errors.Is(err, worker.ErrDied) || de.OOM ||
		!strings.Contains(err.Error(), `worker for "crash" died: exit status 2: fatal error: simulated crash`) {
		t.Fatalf("crash: %v; want a DeathError naming the cause", err)
	}
	if r, err := run(t, e, context.Background(), "ok1", "ok", time.Minute); err != nil || r.Status != 0 {
		t.Errorf("after the crash: %+v, %v", r, err)
	}
	if st := e.sup.Stats(); st.Died != 1 {
		t.Errorf("stats %+v: want one death", st)
	}
}

func TestCancelStopsTheHook(t *testing.T) {
	e := newEnv(t, worker.Config{CancelGrace: 300 * time.Millisecond})
	for _, typ := range []string{"spin", "stuck"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("operator cancelled the task")) })
		_, err := run(t, e, ctx, "c-"+typ, typ, time.Minute)
		if !errors.Is(err, runtime.ErrCancelled) || !strings.Contains(err.Error(), "operator cancelled the task") {
			t.Errorf("%s: %v; want ErrCancelled with the cause", typ, err)
		}
	}
	// The stuck worker was killed; a new one serves.
	if r, err := run(t, e, context.Background(), "ok1", "ok", time.Minute); err != nil || r.Status != 0 {
		t.Errorf("after cancelling: %+v, %v", r, err)
	}
	if !strings.Contains(e.logs.String(), "did not stop a cancelled hook in time; killing it") {
		t.Errorf("the stuck worker's kill was not logged:\n%s", e.logs.String())
	}
}

func TestDeadlineBackstopKillsSilentWorker(t *testing.T) {
	e := newEnv(t, worker.Config{DeadlineGrace: 100 * time.Millisecond, CancelGrace: 100 * time.Millisecond})
	r, err := run(t, e, context.Background(), "s1", "stuck", 100*time.Millisecond)
	if err != nil || r.Status != 1 || r.Error["kind"] != "timeout" || !strings.Contains(r.Message, "did not stop at its deadline of 100ms") {
		t.Fatalf("stuck past its deadline: %+v, %v", r, err)
	}
}

func TestReloadStartsNewWorkers(t *testing.T) {
	e := newEnv(t, worker.Config{})
	if _, err := run(t, e, context.Background(), "a", "ok", time.Minute); err != nil {
		t.Fatal(err)
	}
	e.setTypes("v2", 128<<20)
	if _, err := run(t, e, context.Background(), "b", "ok", time.Minute); err != nil {
		t.Fatal(err)
	}
	if st := e.sup.Stats(); st.Started != 2 || st.Live != 1 {
		t.Errorf("stats %+v: want a second worker for the new version and the old one gone", st)
	}
	e.sup.Close()
	if _, err := run(t, e, context.Background(), "c", "ok", time.Minute); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestConnFrames(t *testing.T) {
	var buf bytes.Buffer
	c := worker.NewConn(&buf)
	if err := c.Send(&worker.Frame{Type: "future-kind", ID: 3}); err != nil {
		t.Fatal(err)
	}
	if err := c.Send(&worker.Frame{Type: worker.TypePing, ID: 4}); err != nil {
		t.Fatal(err)
	}
	// A run frame's task goes as it is, after the frame's JSON.
	task := "{\n  \"taskId\": \"t-1\",\n  \"config\": {\"s\": \"}\\\"\"}\n}\n"
	if err := c.Send(&worker.Frame{Type: worker.TypeRun, ID: 5, Task: json.RawMessage(task), Memory: 7}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"future-kind", worker.TypePing, worker.TypeRun} {
		f, err := c.Recv()
		if err != nil || f.Type != want || f.V != worker.Version {
			t.Fatalf("Recv = %+v, %v; want %s", f, err, want)
		}
		if want == worker.TypeRun && (string(f.Task) != task || f.ID != 5 || f.Memory != 7) {
			t.Fatalf("run frame: %+v, task %q", f, f.Task)
		}
	}
	if _, err := c.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("empty stream: %v, want EOF", err)
	}
	// Only a run frame carries a task; bytes after another frame's JSON
	// are an error.
	if err := c.Send(&worker.Frame{Type: worker.TypeResult, Task: json.RawMessage(`{}`)}); err == nil {
		t.Error("a result frame with a task was sent")
	}
	buf.Reset()
	extra := `{"v":2,"type":"result","id":1}x`
	buf.Write([]byte{0, 0, 0, byte(len(extra))})
	buf.WriteString(extra)
	if f, err := c.Recv(); err == nil || !strings.Contains(err.Error(), "1 bytes after its JSON") {
		t.Errorf("a result frame with bytes after it: %+v, %v", f, err)
	}
	buf.Reset()
	buf.Write([]byte{0xff, 0, 0, 0})
	if _, err := c.Recv(); !errors.Is(err, worker.ErrFrameTooLarge) {
		t.Errorf("oversized frame: %v", err)
	}
	buf.Reset()
	buf.Write([]byte{0, 0, 0, 16})
	buf.WriteString(`{"v":9,"type":"x"}`[:16])
	if _, err := c.Recv(); err == nil {
		t.Errorf("truncated frame decoded")
	}
}

// discard is a stream that drops what is written to it.
type discard struct{}

func (discard) Read([]byte) (int, error)    { return 0, io.EOF }
func (discard) Write(b []byte) (int, error) { return len(b), nil }

// TestConnSendCopiesTheTaskOnce: a run frame's task (tens of kilobytes
// for a cluster job's, every node of the cluster) is copied once into the
// frame written, not once more into the frame's JSON first.
func TestConnSendCopiesTheTaskOnce(t *testing.T) {
	c := worker.NewConn(discard{})
	task := json.RawMessage(`{"taskId":"t-1","config":{"nodes":"` + strings.Repeat("n", 1<<20) + `"}}`)
	f := &worker.Frame{Type: worker.TypeRun, ID: 5, Task: task}
	if err := c.Send(f); err != nil {
		t.Fatal(err)
	}
	var before, after goruntime.MemStats
	const sends = 20
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	for range sends {
		if err := c.Send(f); err != nil {
			t.Fatal(err)
		}
	}
	goruntime.ReadMemStats(&after)
	if per := float64(after.TotalAlloc-before.TotalAlloc) / sends; per > 1.5*float64(len(task)) {
		t.Errorf("Send allocated %.0f bytes for a task of %d (%.2f times)", per, len(task), per/float64(len(task)))
	}
}

// dial runs the Dial plugin against url in a worker and returns the error
// kind and message of its loom.http call ("none" when it got through).
func dial(t *testing.T, e *env, id, url string) (kind, msg string) {
	t.Helper()
	body := []byte(`{"taskId":"` + id + `","taskName":"CREATE","config":{"provider":{"providertype":"dial"},"url":"` + url + `"}}`)
	b, _, err := e.sup.Run(context.Background(), "dial", id, body, time.Minute)
	if err != nil {
		t.Fatalf("run %s: %v", id, err)
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil || r.Result == nil {
		t.Fatalf("result of %s: %s", id, b)
	}
	return fmt.Sprint(r.Result["kind"]), fmt.Sprint(r.Result["message"])
}

// TestWorkersRefuseTheDaemonsListeners: the daemon's registry reaches
// its workers, those running when a listener opens (before the open
// returns) and those started later, and follows it when one closes.
func TestWorkersRefuseTheDaemonsListeners(t *testing.T) {
	reg := listeners.New()
	e := newEnv(t, worker.Config{Listeners: reg})
	// A worker is running before the daemon opens the listener.
	if k, m := dial(t, e, "d0", "http://127.0.0.1:9/"); k != "connect" {
		t.Fatalf("nothing registered yet: %s %s, want a connect error", k, m)
	}
	ln, err := reg.Listen("Coopr provisioner API (--coopr-listen)", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for i, host := range []string{"0.0.0.0", "[::]", "localhost", "[::ffff:127.0.0.1]"} {
		k, m := dial(t, e, fmt.Sprint("d1-", i), "http://"+host+":"+port+"/v2/tenants/victim")
		if k != "permission" || !strings.Contains(m, "Coopr provisioner API") {
			t.Errorf("%s: %s %s, want a permission error naming the listener", host, k, m)
		}
	}
	if st := e.sup.Stats(); st.Started != 1 {
		t.Errorf("%d workers started: the check must have run in the worker that was already there", st.Started)
	}
	// A worker started now gets the list before its first run.
	e.setTypes("v2", 128<<20)
	if k, _ := dial(t, e, "d2", "http://0.0.0.0:"+port+"/"); k != "permission" {
		t.Errorf("a new worker: %s, want permission", k)
	}
	if st := e.sup.Stats(); st.Started != 2 {
		t.Errorf("%d workers started, want a second one after the reload", st.Started)
	}
	ln.Close()
	if k, m := dial(t, e, "d3", "http://127.0.0.1:"+port+"/"); k != "connect" {
		t.Errorf("after the listener closed: %s %s, want a plain connect error", k, m)
	}
}
