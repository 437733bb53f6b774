// Command cluster benchmarks loomd apply on a cluster of no-op plugins:
// the same create run with --parallelism 1 (every task one after the
// other: the baseline) and with higher parallelism, in one process run,
// reported as ratios. By default the applies run --local; with -daemon
// they go through a loomd serve started for the run (tasks through its
// queue, cluster state in its store), as in production. docs/benchmarks.md
// ("Cluster apply") records its figures and the command line.
//
//	go build -o /tmp/loomd ./cmd/loomd
//	go run ./bench/cluster -loomd /tmp/loomd -nodes 100 -latency 0
//	go run ./bench/cluster -loomd /tmp/loomd -nodes 100 -latency 20ms
//	go run ./bench/cluster -loomd /tmp/loomd -nodes 100 -daemon -parallelism 1,16,64
//
// -latency makes every hook sleep that long (time.sleep), standing in for
// the SSH or cloud API round trips real plugins wait on.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const providerLua = `local loom = require("loom")
local time = require("loom.time")
NoopProvider = loom.Provider:extend("NoopProvider")
local LATENCY = %g
local function wait() if LATENCY > 0 then time.sleep(LATENCY) end end
function NoopProvider:create(input)
  wait()
  self.result.result.providerid = "noop-" .. self.task.nodeId
  self.result.result["ssh-auth"] = { user = "root" }
end
function NoopProvider:confirm(input)
  wait()
  self.result.ipaddresses = { access_v4 = "192.0.2.1", bind_v4 = "192.0.2.1" }
end
function NoopProvider:delete(input) wait() end
return NoopProvider
`

const automatorLua = `local loom = require("loom")
local time = require("loom.time")
NoopAutomator = loom.Automator:extend("NoopAutomator")
local LATENCY = %g
local function wait() if LATENCY > 0 then time.sleep(LATENCY) end end
for _, h in ipairs({"bootstrap", "install", "configure", "init", "start", "stop", "remove"}) do
  NoopAutomator[h] = function(self, input) wait() end
end
return NoopAutomator
`

func main() {
	bin := flag.String("loomd", "loomd", "loomd binary")
	nodes := flag.Int("nodes", 100, "nodes in the cluster")
	latency := flag.Duration("latency", 0, "time every hook sleeps (0: true no-op)")
	pars := flag.String("parallelism", "1,16,64", "comma-separated --parallelism values; the first is the baseline")
	keep := flag.Bool("keep", false, "keep the temp dir")
	daemon := flag.Bool("daemon", false, "run the applies through a loomd serve (queue and cluster store) instead of --local")
	flag.StringVar(&serveArgs, "serve-args", "", "more arguments of the loomd serve -daemon starts (space-separated, e.g. \"--concurrency 64 --pprof\")")
	flag.BoolVar(&warm, "warm", false, "apply one more cluster first, untimed, at the largest --parallelism: the daemon's worker processes are started before the timed runs")
	flag.Parse()
	if err := run(*bin, *nodes, *latency, strings.Split(*pars, ","), *keep, *daemon); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(bin string, nodes int, latency time.Duration, pars []string, keep, daemon bool) error {
	dir, err := os.MkdirTemp(os.Getenv("BENCH_TMP"), "loom-bench-cluster-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Println("dir:", dir)
	}
	write := func(rel, content string) error {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, []byte(content), 0o644)
	}
	sec := latency.Seconds()
	files := map[string]string{
		"plugins/noopp/noopp.json": `{"name": "noopp", "providertypes": ["noopp"], "noopp": {"name": "noopp", "classname": "NoopProvider",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/noopp/noopp.lua": fmt.Sprintf(providerLua, sec),
		"plugins/noopa/noopa.json": `{"name": "noopa", "automatortypes": ["noopa"], "noopa": {"name": "noopa", "classname": "NoopAutomator",
  "parameters": {"admin": {"fields": {}}, "user": {"fields": {}}}}}`,
		"plugins/noopa/noopa.lua": fmt.Sprintf(automatorLua, sec),
		"bench.yaml": fmt.Sprintf(`name: NAME
provider: {type: noopp}
nodegroups:
  - {name: n, count: %d, services: [a, b]}
services:
  a:
    actions:
      install: {type: noopa}
      configure: {type: noopa}
      start: {type: noopa}
  b:
    install: {requires: [a]}
    runtime: {requires: [a]}
    actions:
      install: {type: noopa}
      configure: {type: noopa}
      start: {type: noopa}
`, nodes),
	}
	specText := files["bench.yaml"]
	delete(files, "bench.yaml")
	for _, p := range pars {
		// One cluster per run: each starts from nothing.
		files["bench-"+p+".yaml"] = strings.Replace(specText, "NAME", "bench-"+p, 1)
	}
	files["bench-warm.yaml"] = strings.Replace(specText, "NAME", "bench-warm", 1)
	for rel, c := range files {
		if err := write(rel, c); err != nil {
			return err
		}
	}
	plan, err := loomd(bin, dir, "plan", "bench-"+pars[0]+".yaml", "--state-dir", filepath.Join(dir, "plan-state"))
	if err != nil {
		return err
	}
	fmt.Println(strings.SplitN(plan, "\n", 2)[0])
	mode := "--local"
	if daemon {
		url, stop, err := serve(bin, dir)
		if err != nil {
			return err
		}
		defer stop()
		mode = "through loomd serve (queue fsync always)"
		defer func(old string) { serverURL = old }(serverURL)
		serverURL = url
	}
	fmt.Printf("nodes %d, hook latency %v, %s\n", nodes, latency, mode)
	runs := pars
	if warm {
		most, n := pars[0], 0
		for _, p := range pars {
			if v, _ := strconv.Atoi(p); v > n {
				most, n = p, v
			}
		}
		runs = append([]string{"warm:" + most}, pars...)
	}
	var base time.Duration
	i := -1
	for _, p := range runs {
		name := "bench-" + p
		if w, ok := strings.CutPrefix(p, "warm:"); ok {
			name, p = "bench-warm", w
		} else {
			i++
		}
		args := []string{"apply", name + ".yaml", "--parallelism", p, "--log-level", "warn", "--yes"}
		if daemon {
			args = append(args, "--server", serverURL)
		} else {
			args = append(args, "--local", "--state-dir", filepath.Join(dir, "state-"+p))
		}
		start := time.Now()
		if _, err := loomd(bin, dir, args...); err != nil {
			return err
		}
		d := time.Since(start)
		if name == "bench-warm" {
			fmt.Printf("warm-up (--parallelism %s, untimed)\n", p)
			continue
		}
		if i == 0 {
			base = d
			fmt.Printf("--parallelism %-4s %8.2fs (baseline)\n", p, d.Seconds())
			continue
		}
		fmt.Printf("--parallelism %-4s %8.2fs  %.1f× faster than --parallelism %s\n", p, d.Seconds(), base.Seconds()/d.Seconds(), pars[0])
	}
	return nil
}

// serverURL is the daemon's URL in -daemon mode.
var serverURL string

// serveArgs are more arguments of loomd serve (-serve-args).
var serveArgs string

// warm applies a cluster first, untimed (-warm).
var warm bool

// serve starts loomd serve on a free loopback port and waits until it is
// healthy.
func serve(bin, dir string) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, "serve", "--listen", addr, "--data", filepath.Join(dir, "data"), "--log-level", "warn",
		"--plugins", filepath.Join(dir, "plugins"), "--work-dir", filepath.Join(dir, "work"))
	cmd.Args = append(cmd.Args, strings.Fields(serveArgs)...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return "", nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		logf.Close()
	}
	url := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop, nil
			}
		}
	}
	stop()
	return "", nil, fmt.Errorf("loomd serve did not become healthy (log: %s)", logf.Name())
}

func loomd(bin, dir string, args ...string) (string, error) {
	args = append(args, "--plugins", filepath.Join(dir, "plugins"), "--work-dir", filepath.Join(dir, "work"))
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("loomd %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), nil
}
