package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// startTimes is -starts: it only measures how long loomd serve takes
// until /healthz answers, n times, on a new store and then again on the
// store that start left (a restart, the usual case in production). With
// baseline set, each round starts that binary too, right before bin, so
// the two are compared under the same load; the ratio per round is
// printed, as the machine's noise is larger than the figures' spread.
func startTimes(bin, baseline string, nPlugins, n int, keep bool, fsync, isolation string) error {
	dir, err := benchDir("loomd-starts-", nPlugins)
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	bins := []string{bin}
	if baseline != "" {
		bins = []string{baseline, bin}
	}
	// fresh[b][round] and again[b][round]: wall time until /healthz
	// answered, and the CPU loomd and its workers had used by then (less
	// at the mercy of the machine's load); their "startup=" as logged by
	// loomd beside them.
	fresh := make([][]time.Duration, len(bins))
	again := make([][]time.Duration, len(bins))
	freshCPU := make([][]time.Duration, len(bins))
	againCPU := make([][]time.Duration, len(bins))
	logged := make([][]string, len(bins))
	for r := range n {
		for b, path := range bins {
			data := filepath.Join(dir, fmt.Sprintf("data-%d-%d", b, r))
			for pass := range 2 {
				d, cpu, line, err := startOnce(path, dir, data, fsync, isolation)
				if err != nil {
					return fmt.Errorf("%s, round %d: %w", path, r+1, err)
				}
				if pass == 0 {
					fresh[b] = append(fresh[b], d)
					freshCPU[b] = append(freshCPU[b], cpu)
				} else {
					again[b] = append(again[b], d)
					againCPU[b] = append(againCPU[b], cpu)
				}
				logged[b] = append(logged[b], line)
			}
			if !keep {
				_ = os.RemoveAll(data)
			}
		}
	}
	for b, path := range bins {
		fmt.Printf("%s: start with %d plugin folders until /healthz answers (%d rounds): new store %s; existing store %s\n",
			path, nPlugins, n, summary(fresh[b]), summary(again[b]))
		fmt.Printf("  CPU of loomd and its workers until /healthz answered: new store %s; existing store %s\n", summary(freshCPU[b]), summary(againCPU[b]))
		fmt.Printf("  loomd's own startup= (new, existing, ...): %s\n", strings.Join(logged[b], " "))
	}
	if baseline != "" {
		var rf, ra []string
		for r := range n {
			rf = append(rf, fmt.Sprintf("%.2f", float64(fresh[1][r])/float64(fresh[0][r])))
			ra = append(ra, fmt.Sprintf("%.2f", float64(again[1][r])/float64(again[0][r])))
		}
		fmt.Printf("%s ÷ %s per round: new store %s; existing store %s\n", bin, baseline, strings.Join(rf, " "), strings.Join(ra, " "))
		fmt.Printf("CPU until /healthz, median ÷ median: new store %.2f; existing store %.2f\n",
			float64(median(freshCPU[1]))/float64(median(freshCPU[0])), float64(median(againCPU[1]))/float64(median(againCPU[0])))
	}
	return nil
}

// median is the median of ds.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// summary is the median and range of ds, in ms, and the values in order
// of measurement.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	var all []string
	for _, d := range ds {
		all = append(all, fmt.Sprintf("%.0f", ms(d)))
	}
	return fmt.Sprintf("median %.0f ms, %.0f–%.0f ms [%s]", ms(s[len(s)/2]), ms(s[0]), ms(s[len(s)-1]), strings.Join(all, " "))
}

// startOnce starts bin serve on data with dir's plugins, waits until
// /healthz answers, stops it with SIGTERM and returns the time until the
// answer, the CPU loomd and its workers had used then (10 ms ticks) and
// the startup= of its "loomd serving" line.
func startOnce(bin, dir, data, fsync, isolation string) (time.Duration, time.Duration, string, error) {
	addr, err := freePort()
	if err != nil {
		return 0, 0, "", err
	}
	logPath := data + ".log"
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, 0, "", err
	}
	defer logf.Close()
	before := servingLines(logPath) // the log is appended to by each start on data
	cmd := exec.Command(bin, "serve", "--plugins", filepath.Join(dir, "plugins"), "--data", data,
		"--work-dir", filepath.Join(dir, "work"), "--listen", addr, "--log-level", "info", "--fsync", fsync, "--isolation", isolation)
	cmd.Stdout, cmd.Stderr = logf, logf
	hc := &http.Client{Timeout: 5 * time.Second}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, "", err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var took, cpu time.Duration
	for {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				took = time.Since(start)
				cpu = treeCPU(cmd.Process.Pid)
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			return 0, 0, "", fmt.Errorf("loomd did not answer within 30s; see %s", logPath)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// The API listens before the daemon serves tasks (the consumers,
	// cluster jobs and task logs open after): with -starts-serving, wait
	// for that too.
	for *startsServing && servingLines(logPath) <= before {
		if time.Since(start) > 30*time.Second {
			return 0, 0, "", fmt.Errorf("loomd did not log \"loomd serving\" within 30s; see %s", logPath)
		}
		time.Sleep(2 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			return 0, 0, "", fmt.Errorf("loomd exited with %v after SIGTERM; see %s", err, logPath)
		}
	case <-time.After(30 * time.Second):
		return 0, 0, "", fmt.Errorf("loomd did not stop within 30s of SIGTERM; see %s", logPath)
	}
	return took, cpu, loggedStartup(logPath), nil
}

// servingLines counts the "loomd serving" lines in the log at path.
func servingLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "loomd serving")
}

// loggedStartup is the startup= of the last "loomd serving" line in the
// log at path, or "?".
func loggedStartup(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	got := "?"
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "loomd serving") {
			continue
		}
		if _, v, ok := strings.Cut(line, "startup="); ok {
			v, _, _ = strings.Cut(v, " ")
			got = strings.Trim(v, `",`)
		} else if _, v, ok := strings.Cut(line, `"startup":`); ok {
			v, _, _ = strings.Cut(v, ",")
			got = strings.Trim(v, `" }`)
		}
	}
	return got
}
