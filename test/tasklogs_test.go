package test

// Every task's own log through the built binary: two daemons share a
// queue, the task runs in a's worker process, its lines are read and
// followed through b.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/tasklog"
)

// chattyLua logs what it does (a field declared sensitive among them),
// config.lines more lines, and fails when config.fail is set; with
// config.quiet it logs nothing.
const chattyLua = `local loom = require("loom")
Chatty = loom.Automator:extend("Chatty")
function Chatty:install(input)
  local c = self.task.config
  if c.quiet then self.result.result.ok = true return end
  log.info("installing " .. c.service.name, {host = "web-1"})
  log.warn("unlocking with " .. tostring(c.vault_word))
  for i = 1, (c.lines or 0) do log.info("step " .. i) end
  if c.fail then error("the disk of " .. self.task.taskId .. " is full") end
  self.result.result.ok = true
end
return Chatty
`

const chattySecret = "vault-word-Q7m2x9k4"

func writeChatty(t *testing.T, plugins string) {
	t.Helper()
	dir := filepath.Join(plugins, "chatty")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "plugin.json"), `{"name": "chatty", "main": "main.lua", "automatortypes": ["chatty"],
  "chatty": {"name": "chatty", "classname": "Chatty",
    "parameters": {"admin": {"fields": {"vault_word": {"label": "Vault word", "type": "text", "sensitive": true}}}}}}`)
	writeAtomic(t, filepath.Join(dir, "main.lua"), chattyLua)
}

func chattyTask(id, extra string) string {
	return fmt.Sprintf(`{"taskId": %q, "taskName": "INSTALL", "config": {%s"vault_word": %q, "service": {"name": "web", "action": {"type": "chatty"}}}}`,
		id, extra, chattySecret)
}

func TestTaskLogsAcrossDaemons(t *testing.T) {
	dir := serveDir(t)
	writeChatty(t, filepath.Join(dir, "plugins"))
	a := startDaemon(t, dir, "a.log", nil, "--nats-listen", "127.0.0.1:0", "--task-log-lines", "40")
	bdir := serveDir(t) // b serves no plugin type: every task runs on a
	b := startDaemon(t, bdir, "b.log", nil, "--nats", a.natsURL(), "--nats-nkey", filepath.Join(dir, "data", "nats.nk"))
	cli := func(args ...string) cliRun {
		return loomd(t, "", append(append([]string{"task"}, args...), "--server", b.url())...)
	}

	// A failing task that logs past its bound, followed through b from
	// the moment it is queued: the CLI prints every stored line, then
	// exits 1 as the task failed.
	b.submit(chattyTask("chatty-1", `"lines": 100, "fail": true, `))
	r := cli("logs", "chatty-1", "--follow")
	if r.code != 1 || !strings.Contains(r.stderr, "task chatty-1 failed") {
		t.Fatalf("task logs --follow = exit %d\nstdout: %s\nstderr: %s\na: %s", r.code, r.stdout, r.stderr, a.logTail())
	}
	out := r.stdout
	for _, want := range []string{"--- attempt 1 on ", "INFO installing web", "host=web-1", "WARN unlocking with [REDACTED]",
		"INFO step 1 ", "this attempt's log reached 30 lines", "lines (", "were not stored here", "INFO step 100 ",
		"the attempt ended: status 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, chattySecret) || strings.Contains(out, "INFO step 50 ") {
		t.Errorf("the log shows the secret, or a line from the middle past the bound:\n%s", out)
	}
	// The daemon's own log keeps every line, redacted, as before.
	if l, _ := os.ReadFile(filepath.Join(dir, "a.log")); !strings.Contains(string(l), "step 50") || strings.Contains(string(l), chattySecret) {
		t.Errorf("a's own log lost a plugin line or shows the secret")
	}

	// --json: one object per line, cursors in order.
	r = cli("logs", "chatty-1", "--json")
	var last uint64
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var l tasklog.Line
		if err := json.Unmarshal([]byte(line), &l); err != nil || l.Seq < last || l.Attempt != 1 {
			t.Fatalf("task logs --json line %q: %v (exit %d, %s)", line, err, r.code, r.stderr)
		}
		last = l.Seq
		n++
	}
	if r.code != 0 || n < 40 {
		t.Errorf("task logs --json = exit %d, %d lines", r.code, n)
	}

	// A task that logs nothing has an empty log, done once it finished.
	b.submit(chattyTask("quiet-1", `"quiet": true, `))
	if got := b.wait("quiet-1"); got.State != "succeeded" {
		t.Fatalf("quiet-1 is %s", got.State)
	}
	code, body := b.call("GET", "/v1/tasks/quiet-1/logs", "")
	var page api.TaskLogResponse
	if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil || len(page.Lines) != 0 || !page.Done {
		t.Errorf("quiet-1's log: %d %s", code, body)
	}
	if r := cli("logs", "quiet-1", "--follow"); r.code != 0 || r.stdout != "" {
		t.Errorf("following quiet-1: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}

	// Deleting a task deletes its log.
	if r := cli("delete", "chatty-1"); r.code != 0 {
		t.Fatalf("delete: exit %d %s", r.code, r.stderr)
	}
	if r := cli("logs", "chatty-1"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("a deleted task's log: exit %d %q", r.code, r.stderr)
	}
}
