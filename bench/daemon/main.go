// Command daemon benchmarks a built loomd serve end to end, as a user sees
// it: through the HTTP API of a real process with its embedded NATS
// (file store, fsync on every write). docs/benchmarks.md ("Daemon and
// queue") records its figures and the command line.
//
//	go build -o /tmp/loomd ./cmd/loomd
//	go run ./bench/daemon -loomd /tmp/loomd
//	go run ./bench/daemon -ceiling     # the task streams alone, no loomd: 1 stream, then 4 shards
//	go run ./bench/daemon -starts 10 -loomd /tmp/loomd -baseline /tmp/loomd-before   # starts only
//	go run ./bench/daemon -idle 5 -loomd /tmp/loomd -baseline /tmp/loomd-before     # idle CPU only
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const pluginLua = `local loom = require("loom")
Noop = loom.Automator:extend("Noop")
local VERSION = "%s"
local LINES = %d
function Noop:install(input)
  for i = 1, LINES do log.info("step " .. i .. " of " .. LINES) end
  self.result.result.version = VERSION
end
return Noop
`

// pluginLog is -plugin-log: the lines every task's hook logs.
var pluginLog = flag.Int("plugin-log", 0, "log lines (loom.log info) each task's hook writes; with -log-level info they reach the task's log")

var startsServing = flag.Bool("starts-serving", false, "with -starts: stop each loomd only once it logged \"loomd serving\" (it serves tasks), not as soon as /healthz answers, so that its startup= is there for every start")

// oneRequest is -one-request: each task is submitted and waited for in
// one request (POST /v1/tasks?wait=), or, when false, in two (POST, then
// GET /v1/tasks/{id}?wait=), as before.
var oneRequest = flag.Bool("one-request", true, "submit and wait for each task in one request (POST /v1/tasks?wait=30s); false: POST, then GET ?wait=30s (the only way for a loomd older than POST ?wait=)")

// idleWait is -idle-wait: how long the workers sit idle after the last
// -idle-samples task before their memory is read.
var idleWait = flag.Duration("idle-wait", 1500*time.Millisecond, "with -idle-samples: time the workers sit idle after the last task before their memory is read")

func main() {
	bin := flag.String("loomd", "loomd", "loomd binary")
	plugins := flag.Int("plugins", 50, "plugin folders to load")
	tasks := flag.Int("tasks", 5000, "no-op tasks for the throughput run")
	clients := flag.Int("clients", 32, "concurrent API clients in the throughput run")
	concurrency := flag.Int("concurrency", 8, "loomd --concurrency")
	samples := flag.Int("samples", 300, "sequential tasks for the latency run")
	reloads := flag.Int("reloads", 5, "hot reloads to time (a reload retires the idle workers: 0 leaves the throughput run's workers for -idle-samples)")
	keep := flag.Bool("keep", false, "keep the temp dir")
	fsync := flag.String("fsync", "always", "loomd --fsync")
	isolation := flag.String("isolation", "worker", "loomd --isolation: worker (hooks in worker processes) or none (in process)")
	logLevel := flag.String("log-level", "warn", "loomd --log-level (info logs a line per finished task)")
	ceiling := flag.Bool("ceiling", false, "measure only the work-queue streams with fsync on every write (no loomd): one stream, then -shards of them, in turn")
	shards := flag.Int("shards", 4, "with -ceiling: the sharded run's stream count (loomd shards its task stream in 4)")
	idleSamples := flag.Int("idle-samples", 5, "tasks each submitted after 1.5 s without any (workers give memory back after 1 s idle): their latency, then the idle workers' RSS")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of loomd (--pprof) taken during the throughput run to this file (with -idle: during one more idle run of -loomd)")
	profileSeconds := flag.Int("profile-seconds", 5, "with -cpuprofile: seconds to profile, from the start of the throughput run")
	starts := flag.Int("starts", 0, "only measure N starts until /healthz answers, each on a new store and then again on that store (no tasks)")
	baseline := flag.String("baseline", "", "with -starts or -idle: a second loomd binary started right before -loomd in every round; ratios per round")
	idle := flag.Int("idle", 0, "only measure the CPU of an idle loomd serve (no tasks) N times, each on a new store")
	idleSettle := flag.Duration("idle-settle", 5*time.Second, "with -idle: time after \"loomd serving\" before the measurement (the other shards' consumers are created meanwhile)")
	idleWindow := flag.Duration("idle-window", 20*time.Second, "with -idle: how long each measurement lasts")
	flag.Parse()
	if *idle > 0 {
		if err := idleCPU(*bin, *baseline, *plugins, *idle, *idleSettle, *idleWindow, *keep, *fsync, *isolation, *cpuProfile); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *starts > 0 {
		if err := startTimes(*bin, *baseline, *plugins, *starts, *keep, *fsync, *isolation); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *ceiling {
		for _, n := range []int{1, *shards} {
			if err := streamCeiling(*tasks, *clients, *concurrency, n); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				os.Exit(1)
			}
		}
		return
	}
	prof := profileSpec{file: *cpuProfile, seconds: *profileSeconds}
	if err := run(*bin, *plugins, *tasks, *clients, *concurrency, *samples, *reloads, *idleSamples, *keep, *fsync, *isolation, *logLevel, prof); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// profileSpec asks for a CPU profile of loomd during the throughput run.
type profileSpec struct {
	file    string
	seconds int
}

// benchDir makes a temporary directory holding n no-op plugin folders.
func benchDir(prefix string, n int) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	for i := range n {
		if err := writePlugin(dir, fmt.Sprintf("noop%02d", i), "v0"); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

func run(bin string, nPlugins, nTasks, nClients, concurrency, nSamples, nReloads, nIdle int, keep bool, fsync, isolation, logLevel string, prof profileSpec) error {
	dir, err := benchDir("loomd-bench-", nPlugins)
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	addr, err := freePort()
	if err != nil {
		return err
	}
	base := "http://" + addr
	args := []string{"serve", "--plugins", filepath.Join(dir, "plugins"), "--data", filepath.Join(dir, "data"),
		"--work-dir", filepath.Join(dir, "work"), "--listen", addr, "--concurrency", fmt.Sprint(concurrency), "--log-level", logLevel, "--fsync", fsync, "--isolation", isolation}
	if prof.file != "" {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "loomd.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nClients * 2}}

	// 1. Start until the API answers.
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for {
		resp, err := hc.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			return fmt.Errorf("loomd did not answer within 30s; see %s", logf.Name())
		}
		time.Sleep(2 * time.Millisecond)
	}
	fmt.Printf("start with %d plugin folders until /healthz answers: %.1f ms\n", nPlugins, ms(time.Since(start)))

	// 2. Idle RSS with the plugins loaded.
	time.Sleep(2 * time.Second)
	fmt.Printf("idle RSS with %d plugins loaded: %.1f MiB\n", nPlugins, rssMiB(cmd.Process.Pid))

	// 3. Latency of one task: POST ?wait (or POST, then GET ?wait) until
	// the result.
	var lat []time.Duration
	for i := range nSamples {
		t0 := time.Now()
		if _, err := submitAndWait(hc, base, fmt.Sprintf("lat-%d", i), "noop00"); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	fmt.Printf("submit-to-result latency, %d sequential no-op tasks: p50 %.2f ms, p90 %.2f ms, p99 %.2f ms\n",
		nSamples, ms(lat[len(lat)/2]), ms(lat[len(lat)*9/10]), ms(lat[len(lat)*99/100]))

	// 4. Throughput: nClients clients each submit and wait for results.
	cpu0, own0 := treeCPU(cmd.Process.Pid), procCPU(fmt.Sprint(cmd.Process.Pid))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, nClients)
	profDone := make(chan error, 1)
	if prof.file != "" {
		go func() { profDone <- fetchProfile(hc, base, prof) }()
	} else {
		profDone <- nil
	}
	t0 := time.Now()
	for range nClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(nTasks) {
					return
				}
				if _, err := submitAndWait(hc, base, fmt.Sprintf("tp-%d", i), fmt.Sprintf("noop%02d", int(i)%nPlugins)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(t0)
	close(errs)
	for err := range errs {
		return err
	}
	if err := <-profDone; err != nil {
		return err
	}
	requests := "POST then GET ?wait"
	if *oneRequest {
		requests = "POST ?wait"
	}
	fmt.Printf("throughput, %d no-op tasks over %d types, %d API clients (submit, run, result seen; %s), --concurrency %d --fsync %s --isolation %s --log-level %s: %.0f tasks/s (%.2f s)\n",
		nTasks, nPlugins, nClients, requests, concurrency, fsync, isolation, logLevel, float64(nTasks)/el.Seconds(), el.Seconds())
	counts, err := taskCounters(hc, base)
	if err != nil {
		return err
	}
	fmt.Printf("loom_tasks_total after %d tasks: queued %.0f, running %.0f, succeeded %.0f, failed %.0f\n",
		nSamples+nTasks, counts["queued"], counts["running"], counts["succeeded"], counts["failed"])
	own := procCPU(fmt.Sprint(cmd.Process.Pid)) - own0
	all := treeCPU(cmd.Process.Pid) - cpu0
	fmt.Printf("CPU during the throughput run, per task: %.0f µs (loomd %.0f µs, its workers %.0f µs)\n",
		perTask(all, nTasks), perTask(own, nTasks), perTask(all-own, nTasks))
	n, sum := childrenRSS(cmd.Process.Pid)
	fmt.Printf("RSS after the runs: %.1f MiB (daemon); %d worker processes, %.1f MiB together\n", rssMiB(cmd.Process.Pid), n, sum)

	// 5. Hot reload: change a plugin, then submit until the new version
	// serves. A reload retires the idle workers, so -reloads 0 leaves the
	// throughput run's workers for the idle measurement below.
	var rl []time.Duration
	for r := 1; r <= nReloads; r++ {
		want := fmt.Sprintf("v%d", r)
		t0 := time.Now()
		if err := writePlugin(dir, "noop00", want); err != nil {
			return err
		}
		for i := 0; ; i++ {
			got, err := submitAndWait(hc, base, fmt.Sprintf("rl-%d-%d", r, i), "noop00")
			if err != nil {
				return err
			}
			if got == want {
				break
			}
			if time.Since(t0) > 30*time.Second {
				return fmt.Errorf("reload %d: still %s after 30s", r, got)
			}
		}
		rl = append(rl, time.Since(t0))
		time.Sleep(300 * time.Millisecond)
	}
	if len(rl) > 0 {
		slices.Sort(rl)
		fmt.Printf("hot reload, plugin file written until a new task runs the new version (%d reloads): median %.0f ms, max %.0f ms\n",
			nReloads, ms(rl[len(rl)/2]), ms(rl[len(rl)-1]))
	}

	// 6. A task after an idle spell, then the idle workers' memory.
	if nIdle > 0 {
		var il []time.Duration
		for i := range nIdle {
			time.Sleep(1500 * time.Millisecond)
			t0 := time.Now()
			if _, err := submitAndWait(hc, base, fmt.Sprintf("idle-%d", i), fmt.Sprintf("noop%02d", i%nPlugins)); err != nil {
				return err
			}
			il = append(il, time.Since(t0))
		}
		slices.Sort(il)
		fmt.Printf("submit-to-result latency of a task after 1.5 s idle (%d samples): p50 %.2f ms, max %.2f ms\n", nIdle, ms(il[len(il)/2]), ms(il[len(il)-1]))
		time.Sleep(*idleWait)
		ws := workerMemory(cmd.Process.Pid)
		if len(ws) > 0 {
			minRSS := ws[0].rss
			var maxRSS, sumRSS, sumAnon, sumPSS float64
			for _, w := range ws {
				minRSS = min(minRSS, w.rss)
				maxRSS = max(maxRSS, w.rss)
				sumRSS += w.rss
				sumAnon += w.anon
				sumPSS += w.pss
			}
			n := float64(len(ws))
			fmt.Printf("idle workers (%s after the last task): %d, RSS %.1f–%.1f MiB, mean %.1f MiB (private anonymous %.1f MiB, PSS %.1f MiB)\n",
				*idleWait, len(ws), minRSS, maxRSS, sumRSS/n, sumAnon/n, sumPSS/n)
		}
	}
	return nil
}

// memory is a process's RSS, anonymous RSS and PSS, in MiB.
type memory struct{ rss, anon, pss float64 }

// workerMemory is the memory of pid's children (loomd's workers).
func workerMemory(pid int) []memory {
	var out []memory
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if f := procStat(e.Name()); len(f) > 1 && f[1] == fmt.Sprint(pid) {
			var m memory
			m.rss = kibField(filepath.Join("/proc", e.Name(), "status"), "VmRSS:") / 1024
			m.anon = kibField(filepath.Join("/proc", e.Name(), "status"), "RssAnon:") / 1024
			m.pss = kibField(filepath.Join("/proc", e.Name(), "smaps_rollup"), "Pss:") / 1024
			out = append(out, m)
		}
	}
	return out
}

// kibField reads a "Name: N kB" line of a /proc file.
func kibField(path, name string) float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, name); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb
		}
	}
	return -1
}

// fetchProfile writes loomd's CPU profile of the next prof.seconds.
func fetchProfile(hc *http.Client, base string, prof profileSpec) error {
	resp, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, prof.seconds))
	if err != nil {
		return fmt.Errorf("cpu profile: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cpu profile: %d %v %.200s", resp.StatusCode, err, data)
	}
	return os.WriteFile(prof.file, data, 0o644)
}

// taskCounters sums loom_tasks_total by state from /metrics.
func taskCounters(hc *http.Client, base string) (map[string]float64, error) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "loom_tasks_total{")
		if !ok {
			continue
		}
		_, rest, _ := strings.Cut(line, `state="`)
		state, _, _ := strings.Cut(rest, `"`)
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			out[state] += v
		}
	}
	return out, sc.Err()
}

func perTask(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func writePlugin(dir, typ, version string) error {
	p := filepath.Join(dir, "plugins", typ)
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	def := fmt.Sprintf(`{"name": %q, "main": "main.lua", "automatortypes": [%q], %q: {"name": %q, "classname": "Noop", "parameters": {}}}`, typ, typ, typ, typ)
	if err := os.WriteFile(filepath.Join(p, "plugin.json"), []byte(def), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "main.lua.tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf(pluginLua, version, *pluginLog)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(p, "main.lua"))
}

// submitAndWait posts one task, long-polls its result (in the same
// request with -one-request), and returns the version the plugin reported.
func submitAndWait(hc *http.Client, base, id, typ string) (string, error) {
	body := fmt.Sprintf(`{"taskId": %q, "taskName": "INSTALL", "config": {"service": {"name": "web", "action": {"type": %q}}}}`, id, typ)
	path := "/v1/tasks"
	if *oneRequest {
		path += "?wait=30s"
	}
	resp, err := hc.Post(base+path, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("POST %s: %d %s", id, resp.StatusCode, b)
	}
	var t struct {
		State  string `json:"state"`
		Result struct {
			Result struct {
				Version string `json:"version"`
			} `json:"result"`
		} `json:"result"`
	}
	if !*oneRequest || json.Unmarshal(b, &t) != nil || t.State != "succeeded" {
		// Two requests, or one whose wait ran out: long-poll.
		resp, err = hc.Get(base + "/v1/tasks/" + id + "?wait=30s")
		if err != nil {
			return "", err
		}
		b, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err := json.Unmarshal(b, &t); err != nil || t.State != "succeeded" {
		return "", fmt.Errorf("task %s: %s", id, b)
	}
	return t.Result.Result.Version, nil
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func rssMiB(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}

// treeCPU is the CPU time (user and system) of pid and its live
// children, from /proc (10 ms ticks).
func treeCPU(pid int) time.Duration {
	total := procCPU(fmt.Sprint(pid))
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if f := procStat(e.Name()); len(f) > 1 && f[1] == fmt.Sprint(pid) {
			total += procCPU(e.Name())
		}
	}
	return total
}

// procStat returns the fields of /proc/<pid>/stat after the command name.
func procStat(pid string) []string {
	stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(stat, ')')
	return strings.Fields(string(stat[i+1:]))
}

func procCPU(pid string) time.Duration {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	var u, s int64
	fmt.Sscan(f[11], &u)
	fmt.Sscan(f[12], &s)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// childrenRSS counts the processes whose parent is pid (loomd's workers)
// and sums their RSS.
func childrenRSS(pid int) (int, float64) {
	entries, _ := os.ReadDir("/proc")
	n, sum := 0, 0.0
	for _, e := range entries {
		if f := procStat(e.Name()); len(f) > 1 && f[1] == fmt.Sprint(pid) {
			var child int
			fmt.Sscan(e.Name(), &child)
			n++
			sum += rssMiB(child)
		}
	}
	return n, sum
}
