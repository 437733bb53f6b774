package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// idleCPU is -idle: it measures the CPU an idle loomd serve uses (no
// task submitted) with nPlugins plugin folders, n times. Each round
// starts loomd on a new store, waits until it logged "loomd serving" and
// then settle more (the consumers of the other shards are created in the
// background meanwhile), and reads the CPU of loomd and its workers over
// window. With baseline set, each round measures that binary first, then
// bin, so that the two see the same load; the ratio per round is printed.
// With profile set, one more run of bin writes a CPU profile of the
// window there (not counted: the profiler costs CPU itself).
func idleCPU(bin, baseline string, nPlugins, n int, settle, window time.Duration, keep bool, fsync, isolation, profile string) error {
	dir, err := benchDir("loomd-idle-", nPlugins)
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
	perSec := make([][]float64, len(bins))
	for r := range n {
		for b, path := range bins {
			data := filepath.Join(dir, fmt.Sprintf("data-%d-%d", b, r))
			cpu, load, err := idleOnce(path, dir, data, fsync, isolation, settle, window, "")
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", path, r+1, err)
			}
			v := float64(cpu.Microseconds()) / 1000 / window.Seconds()
			perSec[b] = append(perSec[b], v)
			fmt.Printf("round %d %s: %.1f ms of CPU per second idle (load before: %s)\n", r+1, path, v, load)
			if !keep {
				_ = os.RemoveAll(data)
			}
		}
	}
	for b, path := range bins {
		fmt.Printf("%s: idle loomd serve with %d plugin folders, CPU of loomd and its workers over %s after %s settling (%d rounds): %s ms/s\n",
			path, nPlugins, window, settle, n, floats(perSec[b]))
	}
	if baseline != "" {
		var rs []string
		for r := range n {
			if perSec[0][r] > 0 {
				rs = append(rs, fmt.Sprintf("%.2f", perSec[1][r]/perSec[0][r]))
			} else {
				rs = append(rs, "?")
			}
		}
		fmt.Printf("%s ÷ %s per round: %s\n", bin, baseline, strings.Join(rs, " "))
	}
	if profile != "" {
		data := filepath.Join(dir, "data-profile")
		if _, _, err := idleOnce(bin, dir, data, fsync, isolation, settle, window, profile); err != nil {
			return fmt.Errorf("%s, profile run: %w", bin, err)
		}
		fmt.Printf("CPU profile of %s idle over %s: %s\n", bin, window, profile)
	}
	return nil
}

// floats lists vs with one decimal.
func floats(vs []float64) string {
	var s []string
	for _, v := range vs {
		s = append(s, fmt.Sprintf("%.1f", v))
	}
	return strings.Join(s, " ")
}

// loadAvg is the first field of /proc/loadavg (the 1-minute load).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// idleOnce starts bin serve on data, waits until it serves and settle
// more, and returns the CPU loomd and its workers used over window (10 ms
// ticks) and the load before it; with profile set, it writes a CPU
// profile of the window there instead of reading /proc only.
func idleOnce(bin, dir, data, fsync, isolation string, settle, window time.Duration, profile string) (time.Duration, string, error) {
	addr, err := freePort()
	if err != nil {
		return 0, "", err
	}
	logPath := data + ".log"
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, "", err
	}
	defer logf.Close()
	args := []string{"serve", "--plugins", filepath.Join(dir, "plugins"), "--data", data,
		"--work-dir", filepath.Join(dir, "work"), "--listen", addr, "--log-level", "info", "--fsync", fsync, "--isolation", isolation}
	if profile != "" {
		args = append(args, "--pprof")
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, "", err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	for servingLines(logPath) == 0 {
		if time.Since(start) > 60*time.Second {
			return 0, "", fmt.Errorf("loomd did not log \"loomd serving\" within 60s; see %s", logPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(settle)
	load := loadAvg()
	cpu0 := treeCPU(cmd.Process.Pid)
	if profile != "" {
		hc := &http.Client{Timeout: window + 30*time.Second}
		secs := int(window.Round(time.Second) / time.Second)
		if err := fetchProfile(hc, "http://"+addr, profileSpec{file: profile, seconds: max(secs, 1)}); err != nil {
			return 0, "", err
		}
	} else {
		time.Sleep(window)
	}
	cpu := treeCPU(cmd.Process.Pid) - cpu0
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			return 0, "", fmt.Errorf("loomd exited with %v after SIGTERM; see %s", err, logPath)
		}
	case <-time.After(30 * time.Second):
		return 0, "", fmt.Errorf("loomd did not stop within 30s of SIGTERM; see %s", logPath)
	}
	return cpu, load, nil
}
