package hostile

// Archives, secrets in other encodings and what a task holds (issue 20
// items 2, 4, 6 and 7): Coopr resource archives that try to write outside
// the work root, a plugin that leaks a secret upper-cased, in base64, hex
// and partly URL-escaped, a task body the scanner used to accept, tasks
// that keep SSH connections and coroutines past their end.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/internal/coopr/coopfake"
	"github.com/loomrt/loom/internal/sshdtest"
)

// leakedSecret is the secret: a space, a #, a slash.
const leakedSecret = "S3cr3t Token#Value/1234"

func ioCases() []hcase {
	return []hcase{
		{name: "archive-escapes", class: "archives",
			attack: "a Coopr server syncs 9 resource archives: the issue's chained links (`kit/x -> .`, then `kit/x/x/x/l -> ../../..`, then a file under `kit/l/` naming a directory outside), a link that escapes only through a link defined after it, a link then a directory of the same name, `..` in a name, an absolute name, an absolute link, a hard link, a device, a FIFO",
			expect: "every archive refused with the entry named; nothing written outside the work root, nothing activated",
			run:    func(t *testing.T, s *suite) string { return s.archiveEscapes(t) }},
		{name: "redact-encodings", class: "secrets",
			attack: "a plugin leaks a sensitive field upper- and lower-cased, in base64 (both alphabets, inside an HTTP Basic header), hex (both cases) and as a URL's partly escaped path (`S3cr3t%20Token#Value/1234` from loom.http's error), through its error, stdout, stderr, result data and logs",
			expect: "no form of the secret in the record, the task list or the daemon's log",
			plugin: &plugin{params: `{"admin": {"fields": {"leak_token": {"type": "text", "sensitive": true}}}}`, timeout: "10s", top: `local crypto = require("loom.crypto"); local http = require("loom.http")`,
				body: `local tok = self.task.config.leak_token
  log.info("upper " .. string.upper(tok) .. " hex " .. crypto.hex_encode(tok))
  log.info("Authorization: Basic " .. crypto.base64_encode("admin:" .. tok))
  self.result.stdout = crypto.base64_encode(tok) .. " " .. crypto.base64url_encode(tok)
  self.result.stderr = string.upper(crypto.hex_encode(tok)) .. " " .. string.lower(tok)
  self.result.result.data = {b64 = crypto.base64_encode(tok), blob = crypto.base64_encode(json.encode({t = tok}))}
  local ok, err = pcall(http.get, "http://127.0.0.1:1/v2/" .. tok, {timeout = 2})
  log.info("request failed: " .. tostring(err and err.message))
  error("auth failed for " .. string.upper(tok) .. ": " .. tostring(err and err.message))`},
			config: fmt.Sprintf(`"leak_token": %q`, leakedSecret),
			want:   want{check: func(t *testing.T, s *suite, r record) { s.checkNoLeak(t, r) }}},
		{name: "post-invalid-escape", attack: "a task whose config holds `\"\\0\"` and `\"\\q\"` (escapes JSON has not)", class: "input",
			expect: "HTTP 400: the task scanner takes only JSON's escapes (it took any, found by FuzzTaskScan)",
			run: func(t *testing.T, s *suite) string {
				return s.expectStatus(t, "POST", "/v1/tasks", `{"taskId":"esc-1","taskName":"INSTALL","config":{"x":"\0\q","service":{"action":{"type":"ordinary"}}}}`, 400)
			}},
		{name: "ssh-private-conns-kept", class: "resources", serial: true,
			attack: "tenant A's task opens 118 `ssh.connect{reuse=false}` to a real sshd and never closes them; another opens 10 and keeps them in a global; then tenant B's task runs a command",
			expect: "the 118 fail at the 17th with kind limit; the 10 are closed when the task ends (a warning names them); the worker holds no SSH connection after either; tenant B's task runs",
			plugin: &plugin{timeout: "60s", body: `local f = self.task.config
  local opts = {host = f.host, port = f.port, user = f.user, key = f.key, host_key = {policy = "pinned", pinned = {f.pin}}}
  if f.cmd then
    self.result.result.out = ssh.connect(opts):exec(f.cmd, {check = true}).stdout
    return
  end
  opts.reuse = false
  KEPT = KEPT or {}
  for i = 1, f.n do KEPT[#KEPT + 1] = ssh.connect(opts) end`},
			run: func(t *testing.T, s *suite) string { return s.sshKept(t) }},
		{name: "coroutines-kept-in-global", class: "resources",
			attack: "each task creates 200 coroutines that suspend holding a 2,000-entry table, keeps them in a module global, and counts how many an earlier task left alive",
			expect: "every coroutine an earlier task left is dead: released when its task ended",
			plugin: &plugin{timeout: "20s", body: `local alive, dead = 0, 0
  for _, co in ipairs(KEPT or {}) do
    if coroutine.status(co) == "dead" then dead = dead + 1 else alive = alive + 1 end
  end
  KEPT = {}
  for i = 1, 200 do
    local co = coroutine.create(function(...) local t = {} for j = 1, 2000 do t[j] = j end coroutine.yield(t) end)
    coroutine.resume(co)
    KEPT[i] = co
  end
  self.result.result.alive, self.result.result.dead = alive, dead`},
			run: func(t *testing.T, s *suite) string { return s.coroutinesKept(t) }},
	}
}

// archiveEscapes syncs a tenant whose resources are hostile archives from
// the suite's fake Coopr server and checks the daemon refused each.
func (s *suite) archiveEscapes(t *testing.T) string {
	outside := filepath.Join(s.dir, "outside-archives")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	abs := strings.TrimPrefix(outside, "/")
	up := strings.Repeat("../", 40)
	type member struct {
		name, link string
		kind       byte
	}
	archives := map[string][]member{
		"chained": {{"chained/", "", tar.TypeDir}, {"chained/x", ".", tar.TypeSymlink},
			{"chained/" + strings.Repeat("x/", 40) + "l", up, tar.TypeSymlink}, {"chained/l/" + abs + "/pwned", "", tar.TypeReg}},
		"later":    {{"later/d/e/", "", tar.TypeDir}, {"later/d/e/a", "b/../../../../" + abs, tar.TypeSymlink}, {"later/d/e/b", "../..", tar.TypeSymlink}},
		"linkdir":  {{"linkdir/d", up + abs, tar.TypeSymlink}, {"linkdir/d/", "", tar.TypeDir}, {"linkdir/d/pwned", "", tar.TypeReg}},
		"dotdot":   {{"dotdot/../../../../../../../../" + abs + "/pwned", "", tar.TypeReg}},
		"absolute": {{outside + "/pwned", "", tar.TypeReg}},
		"abslink":  {{"abslink/l", outside, tar.TypeSymlink}},
		"hardlink": {{"hardlink/h", "/etc/passwd", tar.TypeLink}},
		"device":   {{"device/null", "", tar.TypeChar}},
		"fifo":     {{"fifo/p", "", tar.TypeFifo}},
	}
	var active []any
	for name, ms := range archives {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, m := range ms {
			h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.kind, Mode: 0o755}
			if m.kind == tar.TypeReg {
				h.Size = 5
			}
			tw.WriteHeader(h)
			if m.kind == tar.TypeReg {
				tw.Write([]byte("pwned"))
			}
		}
		tw.Close()
		gz.Close()
		s.own.coopr.SetResource("archives", "automatortypes", "h-archives", "archives", name, 1, buf.Bytes())
		active = append(active, map[string]any{"name": name, "version": 1})
	}
	spec := map[string]any{"automatortypes": map[string]any{"h-archives": map[string]any{
		"archives": map[string]any{"format": "archive", "active": active}}}}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	mark := s.d.logSize()
	if _, err := coopfake.PutTenant(ctx, "http://"+s.own.cooprAddr, "archives", 0, spec); err != nil {
		t.Fatalf("PUT /v2/tenants/archives: %v", err)
	}
	defer coopfake.DeleteTenant(ctx, "http://"+s.own.cooprAddr, "archives")
	var problems string
	end := time.Now().Add(bound)
	for problems == "" {
		for _, line := range strings.Split(s.d.logSince(mark), "\n") {
			if strings.Contains(line, `"tenant":"archives"`) && strings.Contains(line, "could not be synced") {
				var m map[string]any
				json.Unmarshal([]byte(line), &m)
				problems = fmt.Sprint(m["problems"])
			}
		}
		if time.Now().After(end) {
			t.Fatalf("no failed sync of tenant archives in the log within %s:\n%s", bound, clip(s.d.logSince(mark), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
	refused := 0
	for name := range archives {
		if strings.Contains(problems, "/archives/"+name+" v1:") {
			refused++
		} else {
			t.Errorf("archive %s was not refused: %s", name, clip(problems, 2000))
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("an archive wrote %s outside the work root", filepath.Join(outside, ents[0].Name()))
	}
	typeDir := filepath.Join(s.dir, "work", "archives", "automatortypes", "h-archives")
	if links, _ := os.ReadDir(filepath.Join(typeDir, "archives")); len(links) > 0 {
		t.Errorf("refused archives were activated: %v", links)
	}
	if versions, _ := filepath.Glob(filepath.Join(typeDir, ".resources", "archives", "*", "*")); len(versions) > 0 {
		t.Errorf("refused archives were kept: %v", versions)
	}
	return fmt.Sprintf("%d of %d archives refused: %s", refused, len(archives), clip(problems, 300))
}

// leakForms are the spellings of leakedSecret that must not come out.
func leakForms() map[string]string {
	b := []byte(leakedSecret)
	u, _ := url.Parse("http://127.0.0.1:1/v2/" + leakedSecret)
	forms := map[string]string{
		"plain": leakedSecret, "upper": strings.ToUpper(leakedSecret), "lower": strings.ToLower(leakedSecret),
		"base64": strings.TrimRight(base64.StdEncoding.EncodeToString(b), "="), "base64url": base64.RawURLEncoding.EncodeToString(b),
		"hex": hex.EncodeToString(b), "HEX": strings.ToUpper(hex.EncodeToString(b)),
		"url": strings.TrimPrefix(u.String(), "http://127.0.0.1:1/v2/"), "path-escaped": url.PathEscape(leakedSecret),
	}
	for k := 0; k < 3; k++ {
		e := base64.StdEncoding.EncodeToString(append(make([]byte, k), b...))
		forms["base64 at +"+strconv.Itoa(k)] = e[(8*k+5)/6 : 8*(k+len(b))/6]
	}
	return forms
}

// checkNoLeak looks for every form of the secret in the record, the task
// list and the daemon's log.
func (s *suite) checkNoLeak(t *testing.T, r record) {
	t.Helper()
	raw, _ := json.Marshal(r.raw)
	_, list := s.d.call("GET", "/v1/tasks?type=h-redact-encodings&limit=100", "", nil)
	// The worker's log lines reach the daemon's log after the record:
	// wait for the last one (redacted) before reading it.
	end := time.Now().Add(bound)
	for !s.d.logContains("request failed: ") && time.Now().Before(end) {
		time.Sleep(50 * time.Millisecond)
	}
	logs := s.d.logSince(0)
	for ch, text := range map[string]string{"record": string(raw), "task list": string(list), "daemon log": logs} {
		for form, f := range leakForms() {
			if strings.Contains(text, f) {
				i := strings.Index(text, f)
				t.Errorf("%s: the %s form of the secret leaked: …%s…", ch, form, text[max(0, i-60):min(len(text), i+len(f)+60)])
			}
		}
	}
	if !strings.Contains(string(raw), "[REDACTED]") || !strings.Contains(logs, "[REDACTED]") {
		t.Errorf("no redaction marker: the leak was not there to catch (record %s)", clip(string(raw), 400))
	}
}

// startSSHD starts the real sshd the resource cases use, when one can run
// here (root, openssh-server); otherwise they skip.
func (s *suite) startSSHD(t *testing.T) {
	srv, err := sshdtest.StartServer(sshdtest.Config{})
	if err != nil {
		t.Logf("the SSH resource cases will skip: %v", err)
		return
	}
	t.Cleanup(srv.Stop)
	s.sshd = srv
}

// sshConfig is the task config members that point the SSH plugin at the
// suite's sshd.
func (s *suite) sshConfig(extra string) string {
	pin := ssh.FingerprintSHA256(s.sshd.HostKeys["ed25519"])
	c := fmt.Sprintf(`"host": %q, "port": %d, "user": %q, "key": %q, "pin": %q`, s.sshd.Host, s.sshd.Port, s.sshd.User, s.sshd.KeyPEM, pin)
	if extra != "" {
		c += ", " + extra
	}
	return c
}

// sshKept runs the SSH plugin as tenant A (118, then 10 kept
// connections), counts the connections its worker still holds, and runs a
// command as tenant B.
func (s *suite) sshKept(t *testing.T) string {
	if s.sshd == nil {
		t.Skip("no sshd here (needs root and openssh-server)")
	}
	typ := "h-ssh-private-conns-kept"
	run := func(tenant, extra string) record {
		body := strings.Replace(taskFor(typ, s.d.nextID("ssh-"+tenant), s.sshConfig(extra)), `{`, fmt.Sprintf(`{"tenantId": %q, `, tenant), 1)
		return s.d.wait(t, s.d.submit(t, body))
	}
	held := func() int {
		n := 0
		for _, pid := range workerPIDs(s.d.cmd.Process.Pid, typ) {
			n += tcpConnsTo(pid, s.sshd.Port)
		}
		return n
	}
	r118 := run("hoga", `"n": 118`)
	s.checkRecord(t, want{kinds: []string{"limit"}, msg: []string{"16 connections, the limit per task"}}, r118)
	after118 := held()
	r10 := run("hoga", `"n": 10`)
	if r10.State != "succeeded" {
		t.Errorf("10 kept connections: %s", r10)
	}
	after10 := held()
	if after118 != 0 || after10 != 0 {
		t.Errorf("the worker still holds %d SSH connections after the 118 and %d after the 10, want 0", after118, after10)
	}
	if !s.d.logContains("the task ended still holding what it opened") {
		t.Errorf("no warning that the task's connections were released")
	}
	rb := run("hogb", `"cmd": "echo served"`)
	res, _ := rb.Result["result"].(map[string]any)
	if rb.State != "succeeded" || res["out"] != "served\n" {
		t.Errorf("tenant B's task after them: %s", rb)
	}
	return fmt.Sprintf("118: %s; 10: %s; SSH connections held by the worker after each: %d, %d; tenant B: %s", r118.short(), r10.short(), after118, after10, rb.short())
}

// tcpConnsTo counts pid's established TCP connections to port on
// loopback (its sockets' inodes, found in /proc/net/tcp).
func tcpConnsTo(pid, port int) int {
	inodes := map[string]bool{}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range ents {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "01" { // 01: ESTABLISHED
			continue
		}
		if _, p, ok := strings.Cut(f[2], ":"); ok {
			if v, err := strconv.ParseInt(p, 16, 32); err == nil && int(v) == port && inodes[f[9]] {
				n++
			}
		}
	}
	return n
}

// coroutinesKept runs the coroutine plugin five times for one tenant: each
// run reports what the earlier runs left alive.
func (s *suite) coroutinesKept(t *testing.T) string {
	alive, dead := 0, 0
	for i := 0; i < 5; i++ {
		r := s.d.wait(t, s.d.submit(t, taskFor("h-coroutines-kept-in-global", s.d.nextID("coroutines"), "")))
		res, _ := r.Result["result"].(map[string]any)
		if r.State != "succeeded" || res == nil {
			t.Fatalf("run %d: %s", i, r)
		}
		a, _ := res["alive"].(float64)
		d, _ := res["dead"].(float64)
		alive += int(a)
		dead += int(d)
	}
	if alive != 0 {
		t.Errorf("%d coroutines of earlier tasks were still alive", alive)
	}
	return fmt.Sprintf("coroutines of earlier tasks seen by 5 runs: %d dead, %d alive", dead, alive)
}

// logSince is the daemon's log from byte offset off on.
func (d *daemon) logSince(off int64) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil || int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}
