package hostile

// The harness: one loomd serve process with a plugins folder of attack
// plugins, helpers to submit tasks and read their records, the "still
// serving" probe, the peak-RSS reading and the report.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// bound caps how long any one wait of the suite may take. It is a
	// bound against a hung daemon, never a latency check.
	bound = 90 * time.Second
	// maxPeakRSS is the daemon's peak RSS budget from issue 9.
	maxPeakRSS = 512 << 20
	// watchdogRSS kills the daemon before an attack that is not contained
	// yet can eat the shared machine.
	watchdogRSS = 3 << 30
)

// hostileEnv, when set on the daemon's environment, is ignored by loomd;
// it marks the process so a leftover one is easy to find.
const hostileEnv = "LOOM_HOSTILE_DAEMON=1"

// daemon is a loomd serve process.
type daemon struct {
	dir     string
	addr    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	code    int
	peakRSS int64 // highest VmRSS the watchdog saw, bytes

	mu   sync.Mutex
	seq  int
	rows []reportRow
}

// startDaemon runs loomd serve with the plugins under dir/plugins.
func startDaemon(t *testing.T, dir string, args ...string) *daemon {
	t.Helper()
	d := &daemon{dir: dir, addr: freeAddr(t), logPath: filepath.Join(dir, "loomd.log"), done: make(chan struct{})}
	full := append([]string{"serve", "--listen", d.addr, "--log-format", "json",
		"--plugins", filepath.Join(dir, "plugins"), "--data", filepath.Join(dir, "data"),
		"--work-dir", filepath.Join(dir, "work"), "--watch=false"}, args...)
	logf, err := os.Create(d.logPath)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(loomdBin, full...)
	d.cmd.Dir = dir
	d.cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), hostileEnv}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		logf.Close()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(d.kill)
	go d.watchdog()
	end := time.Now().Add(bound)
	for {
		if code, _ := d.call("GET", "/healthz", "", nil); code == http.StatusOK {
			return d
		}
		select {
		case <-d.done:
			t.Fatalf("loomd exited with %d before answering:\n%s", d.code, d.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(end) {
			t.Fatalf("loomd did not answer within %v:\n%s", bound, d.logTail())
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func (d *daemon) kill() {
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Kill()
	}
	<-d.done
}

func (d *daemon) alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// watchdog samples the daemon's RSS and kills it past watchdogRSS: an
// attack that is not contained must fail the suite, not the machine.
func (d *daemon) watchdog() {
	for d.alive() {
		if rss := procStatus(d.cmd.Process.Pid, "VmRSS"); rss > 0 {
			d.mu.Lock()
			d.peakRSS = max(d.peakRSS, rss)
			d.mu.Unlock()
			if rss > watchdogRSS {
				_ = d.cmd.Process.Kill()
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// procStatus reads a "kB" field of /proc/<pid>/status, in bytes (-1 when
// unreadable).
func procStatus(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return -1
			}
			return kb << 10
		}
	}
	return -1
}

func (d *daemon) url() string { return "http://" + d.addr }

var client = &http.Client{Timeout: bound}

// call sends a request; code 0 means the request itself failed.
func (d *daemon) call(method, path, body string, hdr http.Header) (int, []byte) {
	req, err := http.NewRequest(method, d.url()+path, strings.NewReader(body))
	if err != nil {
		return 0, []byte(err.Error())
	}
	req.Header.Set("Authorization", "Bearer "+adminToken) // the suite's admin token (tokens_test.go)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b
}

// record is a task record as GET /v1/tasks/{id} shows it, kept generic so
// fields other engineers add (crashes, error kinds) are visible.
type record struct {
	raw      map[string]any
	State    string
	Error    string
	Attempts int
	Result   map[string]any
	Duration time.Duration
}

// kind is the error kind of a finished task: result.error.kind, else a
// kind field on the record itself.
func (r record) kind() string {
	if e, ok := r.Result["error"].(map[string]any); ok {
		if k, ok := e["kind"].(string); ok {
			return k
		}
	}
	for _, key := range []string{"errorKind", "kind"} {
		if k, ok := r.raw[key].(string); ok {
			return k
		}
	}
	if e, ok := r.raw["error"].(map[string]any); ok {
		if k, ok := e["kind"].(string); ok {
			return k
		}
	}
	return ""
}

// message is everything a person reads about the outcome: the record's
// error, the result's message and its error message.
func (r record) message() string {
	parts := []string{r.Error}
	if m, ok := r.Result["message"].(string); ok {
		parts = append(parts, m)
	}
	if e, ok := r.Result["error"].(map[string]any); ok {
		if m, ok := e["message"].(string); ok {
			parts = append(parts, m)
		}
	}
	return strings.Join(parts, " | ")
}

func (r record) String() string {
	s := fmt.Sprintf("state=%s", r.State)
	if k := r.kind(); k != "" {
		s += " kind=" + k
	}
	if st, ok := r.Result["status"].(float64); ok {
		s += fmt.Sprintf(" status=%g", st)
	}
	if m := r.message(); strings.Trim(m, " |") != "" {
		s += " msg=" + clip(m, 300)
	}
	return s
}

// short is the outcome for the report: state, kind, how long the hook ran
// and the start of the message without file paths.
func (r record) short() string {
	s := r.State
	if k := r.kind(); k != "" {
		s += ", kind " + k
	}
	if r.Duration > 0 {
		s += fmt.Sprintf(", %s", r.Duration.Round(time.Millisecond))
	}
	msg := r.Error
	if m, ok := r.Result["message"].(string); ok && m != "" {
		msg = m
	}
	if i := strings.LastIndex(msg, ".lua:"); i >= 0 {
		if j := strings.Index(msg[i:], ": "); j >= 0 {
			msg = msg[i+j+2:]
		}
	}
	if i := strings.Index(msg, " (raise "); i > 0 {
		msg = msg[:i] // the how-to-fix hint names temp paths
	}
	if msg != "" {
		s += ": " + clip(msg, 100)
	}
	return s
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func parseRecord(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r.raw); err != nil {
		return r, err
	}
	r.State, _ = r.raw["state"].(string)
	r.Error, _ = r.raw["error"].(string)
	if a, ok := r.raw["attempts"].(float64); ok {
		r.Attempts = int(a)
	}
	r.Result, _ = r.raw["result"].(map[string]any)
	st, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(r.raw["started"]))
	fin, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(r.raw["finished"]))
	if err1 == nil && err2 == nil {
		r.Duration = fin.Sub(st)
	}
	return r, nil
}

// nextID returns a fresh task id.
func (d *daemon) nextID(prefix string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), d.seq)
}

// submit posts a task body and fails unless loomd queued it.
func (d *daemon) submit(t *testing.T, body string) string {
	t.Helper()
	code, b := d.call("POST", "/v1/tasks", body, nil)
	if code != http.StatusAccepted {
		t.Fatalf("POST /v1/tasks = %d %s", code, clip(string(b), 500))
	}
	var r struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.TaskID == "" {
		t.Fatalf("POST /v1/tasks answered %s", b)
	}
	return r.TaskID
}

// get reads a task record.
func (d *daemon) get(t *testing.T, id string) record {
	t.Helper()
	code, b := d.call("GET", "/v1/tasks/"+id, "", nil)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/tasks/%s = %d %s", id, code, clip(string(b), 500))
	}
	r, err := parseRecord(b)
	if err != nil {
		t.Fatalf("decoding the record of %s: %v", id, err)
	}
	return r
}

// wait long-polls until the task is finished, up to bound.
func (d *daemon) wait(t *testing.T, id string) record {
	t.Helper()
	end := time.Now().Add(bound)
	for {
		code, b := d.call("GET", "/v1/tasks/"+id+"?wait=10s", "", nil)
		if code == http.StatusOK {
			if r, err := parseRecord(b); err == nil && (r.State == "succeeded" || r.State == "failed") {
				return r
			}
		}
		if !d.alive() {
			t.Fatalf("loomd died (exit %d) while task %s ran:\n%s", d.code, id, d.logTail())
		}
		if time.Now().After(end) {
			t.Fatalf("task %s not finished within %v: %d %s\n%s", id, bound, code, clip(string(b), 500), d.logTail())
		}
	}
}

// probe runs one ordinary task and returns how long it took from submit to
// finish. It fails the test unless the task succeeds: the daemon must still
// serve after an attack.
func (d *daemon) probe(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	id := d.submit(t, ordinaryTask(d.nextID("probe")))
	r := d.wait(t, id)
	if r.State != "succeeded" {
		t.Fatalf("ordinary task %s after the attack: %s", id, r)
	}
	return time.Since(start)
}

// logSize is the daemon log's current size in bytes.
func (d *daemon) logSize() int64 {
	st, err := os.Stat(d.logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

func (d *daemon) logTail() string {
	f, err := os.Open(d.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, _ := f.Stat()
	off := max(st.Size()-4000, 0)
	b := make([]byte, st.Size()-off)
	_, _ = f.ReadAt(b, off)
	return string(b)
}

// logContains reports whether any log line holds s (lines are scanned up
// to 1 MiB each; longer ones are skipped).
func (d *daemon) logContains(s string) bool { return d.logCount(s) > 0 }

// logCount counts the log lines holding s.
func (d *daemon) logCount(s string) int {
	f, err := os.Open(d.logPath)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(s)) {
			n++
		}
	}
	return n
}

// hookPIDs returns the worker pid on the last log line whose message
// holds s (loomd tags the lines a worker forwards with its pid), or none.
func (d *daemon) hookPIDs(s string) []int {
	f, err := os.Open(d.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(s)) {
			continue
		}
		var l struct {
			Msg string  `json:"msg"`
			PID float64 `json:"pid"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil && strings.Contains(l.Msg, s) && l.PID > 0 {
			out = []int{int(l.PID)}
		}
	}
	return out
}

// reportRow is one line of the report.
type reportRow struct {
	name, attack, class, expect, observed string
	probe                                 time.Duration
	gap                                   string
}

func (d *daemon) report(row reportRow) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rows = append(d.rows, row)
}

// writeReport writes the rows as a Markdown table to LOOM_HOSTILE_REPORT.
func (d *daemon) writeReport(t *testing.T, baseline []time.Duration, hwm int64) {
	path := os.Getenv("LOOM_HOSTILE_REPORT")
	if path == "" {
		return
	}
	d.mu.Lock()
	rows := append([]reportRow(nil), d.rows...)
	d.mu.Unlock()
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	var b strings.Builder
	fmt.Fprintf(&b, "# hostile suite report (%s)\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "ordinary task latency before the attacks: %s (median of %d)\n\n", median(baseline), len(baseline))
	fmt.Fprintf(&b, "daemon peak RSS (VmHWM): %.1f MiB\n\n", float64(hwm)/(1<<20))
	var probes []time.Duration
	b.WriteString("| attack | class | expected outcome | observed outcome | test | ordinary task after |\n|---|---|---|---|---|---|\n")
	for _, r := range rows {
		obs := r.observed
		if r.gap != "" {
			obs = "known gap: " + r.gap
		}
		p := ""
		if r.probe > 0 {
			p = r.probe.Round(time.Millisecond).String()
			probes = append(probes, r.probe)
		}
		obs = strings.ReplaceAll(obs, d.dir, "$SUITE")
		fmt.Fprintf(&b, "| %s | %s | %s | %s | `%s` | %s |\n", cell(r.attack), r.class, cell(r.expect), cell(obs), r.name, p)
	}
	if len(probes) > 0 {
		sort.Slice(probes, func(i, j int) bool { return probes[i] < probes[j] })
		over := 0
		for _, p := range probes {
			if p > median(baseline)+2*time.Second {
				over++
			}
		}
		fmt.Fprintf(&b, "\nordinary task latency after an attack: median %s, max %s (%d probes, attacks running concurrently); %d more than 2 s over the latency before the attacks\n",
			median(probes), probes[len(probes)-1].Round(time.Millisecond), len(probes), over)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing the report: %v", err)
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2].Round(time.Millisecond)
}

// cell makes s safe inside a Markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	return strings.Join(strings.Fields(s), " ")
}
