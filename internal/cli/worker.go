package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
)

// Isolation modes of loomd serve.
const (
	isolationWorker = "worker" // hooks run in worker processes (default)
	isolationNone   = "none"   // hooks run in the daemon's process
)

// workerOptions are the flags of the hidden loomd worker command, which
// loomd serve starts; they are not for people.
type workerOptions struct {
	g         *globalOptions
	typ       string
	memory    int64
	limitMode string
	timeout   time.Duration
	// fromDaemon: the first frame carries the plugin versions to load.
	fromDaemon bool
}

func (a *App) newWorkerCmd(g *globalOptions) *cobra.Command {
	o := &workerOptions{g: g}
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "Serve hooks for loomd serve in a child process (started by loomd serve, not by hand)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runWorker(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.typ, "type", "", "plugin type this worker serves")
	f.Int64Var(&o.memory, "memory", 0, "memory budget of a hook, in bytes (0: none)")
	f.StringVar(&o.limitMode, "limit-mode", "auto", "OS memory limit: auto, cgroup, rlimit or none")
	f.DurationVar(&o.timeout, "timeout", 0, "deadline for each hook, overriding the plugin definitions' timeouts")
	f.BoolVar(&o.fromDaemon, "plugins-from-daemon", false, "load the plugin versions the daemon sends, not the folders on disk")
	f.StringVar(&g.provisionerID, "provisioner-id", "", "provisionerId put in every result")
	f.StringVar(&g.workerID, "worker-id", "", "workerId put in every result")
	return cmd
}

func (a *App) runWorker(ctx context.Context, o *workerOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// fd 3 is the socket loomd serve passed; anything else means a person
	// ran the command.
	var st syscall.Stat_t
	if err := syscall.Fstat(3, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return usageErr(errors.New("loomd worker is started by loomd serve and talks to it on file descriptor 3; it is not run by hand"))
	}
	// Non-blocking, the Go netpoller reads it: the worker's one scheduler
	// thread waits in epoll instead of handing off between threads
	// (half the worker's CPU per task, measured with BenchmarkNoopTask).
	if err := syscall.SetNonblock(3, true); err != nil {
		return fmt.Errorf("loomd worker: file descriptor 3: %w", err)
	}
	conn := os.NewFile(3, "loomd-serve")
	// The daemon decides when workers stop: a Ctrl-C on its terminal
	// reaches the whole process group, and must not kill hooks the
	// daemon would rather let finish.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.g.log.level)); err != nil {
		return usageErr(fmt.Errorf("--log-level %q: want debug, info, warn or error", o.g.log.level))
	}
	// The daemon sends its listeners (and every change to them) before
	// any run: loom.http in this process refuses them.
	c, err := worker.NewChild(conn, worker.ChildOptions{Type: o.typ, Memory: o.memory, Mode: o.limitMode, Listeners: o.g.listeners})
	if err != nil {
		return err
	}
	logger := slog.New(c.LogHandler(lvl))
	// One hook at a time per worker: one idle VM per type is all it
	// reuses (the runtime's default keeps eight).
	rc := runtimeConfig{timeout: o.timeout, logger: logger, poolSize: 1}
	if o.fromDaemon {
		// The versions the daemon validated: the folders may be
		// half-written or hold a broken version the daemon refused.
		if rc.sources, err = c.ReceivePlugins(); err != nil {
			return err
		}
		rc.lazyTypes = true
	}
	rt, err := a.newRuntime(ctx, o.g, rc)
	if err != nil {
		return err
	}
	defer rt.Close()
	return c.Serve(ctx, rt)
}

// workerArgs are the command-line arguments that start a worker with the
// daemon's settings.
func workerArgs(g *globalOptions, o *serveOptions, spec worker.TypeSpec) []string {
	args := []string{"worker", "--type", spec.Name, "--memory", strconv.FormatInt(spec.Memory, 10),
		"--limit-mode", o.limitMode, "--plugins-from-daemon",
		"--plugins", g.pluginsDir, "--work-dir", g.workDir, "--tenant", g.tenant, "--log-level", g.log.level,
		"--ssh-allow-tofu=" + strconv.FormatBool(g.ssh.allowTOFU),
		"--ssh-allow-insecure=" + strconv.FormatBool(g.ssh.allowInsecure),
		"--task-connections", strconv.Itoa(g.taskConns), "--task-descriptors", strconv.Itoa(g.taskDescs)}
	if len(g.ssh.knownHosts) > 0 {
		args = append(args, "--known-hosts", strings.Join(g.ssh.knownHosts, ","))
	}
	if g.ssh.hostKeys != "" {
		// serve's own known_hosts (<data>/known_hosts by default).
		args = append(args, "--host-keys", g.ssh.hostKeys)
	}
	if o.timeout > 0 {
		args = append(args, "--timeout", o.timeout.String())
	}
	if g.provisionerID != "" {
		args = append(args, "--provisioner-id", g.provisionerID, "--worker-id", g.workerID)
	}
	return args
}

// typeSpecs are the worker pools' types: each loaded type, its version
// and its memory budget (its definition's limits.memory, else
// --plugin-memory).
func typeSpecs(types []runtime.TypeInfo, def int64) []worker.TypeSpec {
	out := make([]worker.TypeSpec, 0, len(types))
	for _, t := range types {
		mem := t.MemoryLimit
		if mem == 0 {
			mem = def
		}
		out = append(out, worker.TypeSpec{Name: t.Name, Version: t.Version, Memory: mem})
	}
	return out
}

// newSupervisor starts the worker supervisor of loomd serve.
func (a *App) newSupervisor(o *serveOptions, logger *slog.Logger) (*worker.Supervisor, error) {
	exe, name := a.Executable, a.Executable
	if exe == "" {
		var err error
		if name, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("finding loomd's own binary to start workers: %w (or use --isolation none)", err)
		}
		exe = name
		// The running binary itself, even when an upgrade replaced the
		// file: workers always speak the daemon's protocol version.
		if _, err := os.Stat("/proc/self/exe"); err == nil {
			exe = "/proc/self/exe"
		}
	}
	var cgroupDir string
	if o.limitMode == "auto" || o.limitMode == "cgroup" {
		dir, err := worker.PrepareCgroup()
		switch {
		case err == nil:
			cgroupDir = dir
			logger.Info("worker memory limits use cgroup v2", "dir", dir)
		case o.limitMode == "cgroup":
			return nil, usageErr(fmt.Errorf("--worker-limit cgroup: %w", err))
		default:
			logger.Debug("cgroup v2 is not available for worker memory limits; using RLIMIT_DATA", "reason", err)
		}
	}
	return worker.New(worker.Config{
		Command: func(spec worker.TypeSpec) *exec.Cmd {
			cmd := exec.Command(exe, workerArgs(o.g, o, spec)...)
			cmd.Args[0] = name // what ps shows
			return cmd
		},
		Logger:     logger,
		MaxWorkers: o.concurrency,
		CgroupDir:  cgroupDir,
		Listeners:  o.g.listeners,
	}), nil
}

// workerRunner runs queued tasks in worker processes.
type workerRunner struct {
	rt  *runtime.Runtime
	sup *worker.Supervisor
}

func (r workerRunner) Run(ctx context.Context, data []byte) ([]byte, int, error) {
	task, err := queue.ParsedTask(ctx, data)
	if err != nil {
		return nil, 0, err
	}
	_, typ, err := task.Route()
	timeout := r.rt.TaskTimeout(task)
	if err != nil || timeout == 0 {
		// No loaded type serves it: the runtime says why, running nothing.
		return runtimeRunner{r.rt}.Run(ctx, data)
	}
	res, status, err := r.sup.Run(ctx, typ, task.TaskID, data, timeout)
	if errors.Is(err, worker.ErrDied) {
		return nil, 0, fmt.Errorf("%w: %w", queue.ErrWorkerCrashed, err)
	}
	return res, status, err
}

// workerPlugins adds the worker processes' gauges to the runtime's stats
// for /metrics and /v1/plugins.
type workerPlugins struct {
	*runtime.Runtime
	sup *worker.Supervisor
}

func (p workerPlugins) Stats() runtime.Stats {
	s := p.Runtime.Stats()
	w := p.sup.Stats()
	if s.Bindings == nil {
		s.Bindings = map[string]float64{}
	}
	s.Bindings["workers_live"] = float64(w.Live)
	s.Bindings["workers_idle"] = float64(w.Idle)
	s.Bindings["workers_started"] = float64(w.Started)
	s.Bindings["workers_died"] = float64(w.Died)
	s.Bindings["workers_died_oom"] = float64(w.OOM)
	return s
}
