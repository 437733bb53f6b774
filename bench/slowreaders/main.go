// Command slowreaders measures what clients that ask for a large task
// result and do not read it cost a loomd: it runs one task whose result is
// -size bytes, then opens -readers connections that each send GET
// /v1/tasks/{id} and never read the answer (a receive buffer of 4 KiB),
// and reports the daemon's peak RSS (VmHWM) and how many of the readers
// got a 503 instead of the answer. Run it against builds before and
// after a change, alternated:
//
//	go build -o /tmp/bench-slowreaders ./bench/slowreaders
//	/tmp/bench-slowreaders -loomd /tmp/loomd-before -readers 48
//	/tmp/bench-slowreaders -loomd /tmp/loomd-after -readers 48
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const pluginLua = `local loom = require("loom")
Big = loom.Automator:extend("Big")
function Big:install(input)
  self.result.result.big = string.rep("r", %d)
end
return Big
`

func main() {
	bin := flag.String("loomd", "loomd", "loomd binary")
	size := flag.Int("size", 15<<20, "bytes of the task's result")
	readers := flag.Int("readers", 48, "connections that ask for the result and never read it")
	hold := flag.Duration("hold", 3*time.Second, "how long the readers hold their connections")
	flag.Parse()
	if err := run(*bin, *size, *readers, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "slowreaders:", err)
		os.Exit(1)
	}
}

func run(bin string, size, readers int, hold time.Duration) error {
	dir, err := os.MkdirTemp("", "loomd-slowreaders-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "plugins", "big")
	if err := os.MkdirAll(p, 0o755); err != nil {
		return err
	}
	def := `{"name": "big", "main": "main.lua", "automatortypes": ["big"], "big": {"name": "big", "classname": "Big", "parameters": {}}}`
	if err := os.WriteFile(filepath.Join(p, "plugin.json"), []byte(def), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(p, "main.lua"), []byte(fmt.Sprintf(pluginLua, size)), 0o644); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "serve", "--plugins", filepath.Join(dir, "plugins"), "--data", filepath.Join(dir, "data"),
		"--work-dir", filepath.Join(dir, "work"), "--listen", addr, "--log-level", "warn", "--api-max-conns", fmt.Sprint(readers+16))
	logf, err := os.Create(filepath.Join(dir, "loomd.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	base := "http://" + addr
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 30*time.Second {
			return fmt.Errorf("loomd did not answer within 30s")
		}
	}
	body := `{"taskId": "big-1", "taskName": "INSTALL", "config": {"service": {"name": "web", "action": {"type": "big"}}}}`
	resp, err := http.Post(base+"/v1/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	resp, err = http.Get(base + "/v1/tasks/big-1?wait=60s")
	if err != nil {
		return err
	}
	whole, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(whole, []byte(`"state":"succeeded"`)) {
		return fmt.Errorf("the task did not succeed: %.300s", whole)
	}
	time.Sleep(time.Second)
	pid := cmd.Process.Pid
	before := status(pid, "VmRSS")
	// The task itself (a 15 MiB result through a worker, the queue and the
	// store) set the peak: start it again from here.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting the peak RSS: %w", err)
	}

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	var conns []net.Conn
	for i := 0; i < readers; i++ {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			return err
		}
		fmt.Fprintf(c, "GET /v1/tasks/big-1 HTTP/1.1\r\nHost: x\r\n\r\n")
		conns = append(conns, c)
	}
	time.Sleep(hold)
	peak := status(pid, "VmHWM")
	refused, why := 0, ""
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil && r.StatusCode == http.StatusServiceUnavailable {
			refused++
			if why == "" {
				b, _ := io.ReadAll(io.LimitReader(r.Body, 300))
				why = string(b)
			}
		}
		c.Close()
	}
	fmt.Printf("loomd %s: result %d MiB, %d readers that do not read: RSS %.0f MiB before, peak (VmHWM) while they hold %.0f MiB; %d of %d answered 503 %.160s\n",
		bin, size>>20, readers, before, peak, refused, readers, strings.TrimSpace(why))
	return nil
}

// status reads a VmXXX line of /proc/<pid>/status in MiB.
func status(pid int, key string) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			var kb float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kb)
			return kb / 1024
		}
	}
	return -1
}
