// Command cluster benchmarks loomd apply --local on a cluster of no-op
// plugins: the same create run with --parallelism 1 (every task one after
// the other: the baseline) and with higher parallelism, in one process
// run, reported as ratios. docs/benchmarks.md ("Cluster apply") records
// its figures and the command line.
//
//	go build -o /tmp/loomd ./cmd/loomd
//	go run ./bench/cluster -loomd /tmp/loomd -nodes 100 -latency 0
//	go run ./bench/cluster -loomd /tmp/loomd -nodes 100 -latency 20ms
//
// -latency makes every hook sleep that long (time.sleep), standing in for
// the SSH or cloud API round trips real plugins wait on.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	flag.Parse()
	if err := run(*bin, *nodes, *latency, strings.Split(*pars, ","), *keep); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(bin string, nodes int, latency time.Duration, pars []string, keep bool) error {
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
		"bench.yaml": fmt.Sprintf(`name: bench
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
	for rel, c := range files {
		if err := write(rel, c); err != nil {
			return err
		}
	}
	plan, err := loomd(bin, dir, "plan", "bench.yaml", "--state-dir", filepath.Join(dir, "plan-state"))
	if err != nil {
		return err
	}
	fmt.Println(strings.SplitN(plan, "\n", 2)[0])
	fmt.Printf("nodes %d, hook latency %v\n", nodes, latency)
	var base time.Duration
	for i, p := range pars {
		state := filepath.Join(dir, "state-"+p)
		start := time.Now()
		if _, err := loomd(bin, dir, "apply", "bench.yaml", "--local", "--parallelism", p, "--state-dir", state, "--log-level", "warn"); err != nil {
			return err
		}
		d := time.Since(start)
		if i == 0 {
			base = d
			fmt.Printf("--parallelism %-4s %8.2fs (baseline)\n", p, d.Seconds())
			continue
		}
		fmt.Printf("--parallelism %-4s %8.2fs  %.1f× faster than --parallelism %s\n", p, d.Seconds(), base.Seconds()/d.Seconds(), pars[0])
	}
	return nil
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
