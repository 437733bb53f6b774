package shell_test

// The shell automator benchmark of issue 3 §7 (row 2): BOOTSTRAP then
// INSTALL on one host, with every step on one pooled connection (what the
// plugin does) versus the same steps each on a connection of its own (a
// Lua override loaded after shell.lua), and versus Coopr's own sequence of
// 10 connections (cooprFlow), in the same run against the same kind of
// sshd. It reports wall time per
// BOOTSTRAP+INSTALL and SSH connections per op, counted from sshd's
// "Accepted" log lines. Each op starts with a fresh runtime (an empty
// connection pool, as a restarted loomd), outside the timer.
//
//	go test ./plugins/shell -run '^$' -bench ShellBootstrapInstall -benchtime 20x -count 3

import (
	"fmt"
	"strings"
	"testing"
)

// perStepConnection replaces ShellAutomator:connection so that every step
// opens, and the next one closes, a private connection.
const perStepConnection = `
local ssh = require("loom.ssh")

-- Benchmark only: a fresh connection for every step, as Coopr did.
function ShellAutomator:connection(input)
  if self._conn ~= nil then self._conn:close() end
  local auth = input.sshauth or {}
  self._conn = ssh.from_input(input, self.task, { port = tonumber(auth.port), reuse = false })
  return self._conn
end
`

// cooprFlow replays Coopr's connection pattern (reference §7.1) with
// Loom's primitives, each step on a connection of its own: BOOTSTRAP is
// "which scp", mkdir+chown, then copy and unpack for each of scripts,
// archives and lib (8 connections); INSTALL copies the task JSON, then
// runs the script (2 connections). Copies are upload_dir (Coopr: scp of a
// tarball), unpacking is a cp -R (Coopr: tar xf). Benchmark only: it
// leaves the task JSON behind, as Coopr did.
const cooprFlow = perStepConnection + `
local json = require("loom.json")
local fs = require("loom.fs")

local function step(self, input, what, method, ...)
  return self:remote(input, what, method, ...)
end

function ShellAutomator:bootstrap(input)
  local cache = self.task.config.service.action.fields.cache_dir
  local sudo = self:sudo(input)
  local user = input.sshauth.user
  step(self, input, "which scp", "exec", "which scp", { check = true })
  step(self, input, "mkdir", "exec", "mkdir -p " .. ssh.quote(cache .. "/.coopr") .. " && chown -R " .. ssh.quote(user)
    .. " " .. ssh.quote(cache), { sudo = sudo, check = true })
  for _, d in ipairs({ "scripts", "archives", "lib" }) do
    local src = d == "lib" and (self.env.plugin_dir .. "/lib") or d
    if d == "lib" or fs.exists(d) then
      step(self, input, "copy " .. d, "upload_dir", src, cache .. "/.coopr/" .. d, { sudo = sudo })
      step(self, input, "unpack " .. d, "exec", "rm -rf " .. ssh.quote(cache .. "/" .. d) .. " && cp -R "
        .. ssh.quote(cache .. "/.coopr/" .. d) .. " " .. ssh.quote(cache .. "/" .. d) .. " && mkdir -p "
        .. ssh.quote(cache .. "/run"), { sudo = sudo, check = true })
    end
  end
  self.result.status = 0
end

local run_script = ShellAutomator.run_script
function ShellAutomator:run_script(input)
  if tostring(input.fields.cache_dir):sub(1, 1) ~= "/" then return run_script(self, input) end -- the warm-up task
  step(self, input, "copy the task JSON", "write", input.fields.cache_dir .. "/.coopr/" .. self.task.taskId .. ".json",
    json.encode(self.task), { mode = "0644", sudo = self:sudo(input) })
  return run_script(self, input)
end
ShellAutomator.install = ShellAutomator.run_script
`

func BenchmarkShellBootstrapInstall(b *testing.B) {
	for _, mode := range []struct {
		name   string
		extra  map[string]string
		fields map[string]any
	}{
		{"pooled", nil, nil},
		// Without the login environment for sudo (sudo -E): what reading
		// and restoring it in the script's session costs.
		{"pooled-no-sudo-env", nil, map[string]any{"sudo_env": "false"}},
		{"conn-per-step", map[string]string{"zz_per_step_connection.lua": perStepConnection}, nil},
		{"coopr-flow", map[string]string{"zz_coopr_flow.lua": cooprFlow}, nil},
	} {
		b.Run(mode.name, func(b *testing.B) {
			e := newEnv(b, mode.extra)
			// Resources of a typical service: a few scripts and a small
			// archive (40 files, 160 KiB).
			for i := 0; i < 5; i++ {
				e.writeWork(fmt.Sprintf("scripts/step%d.sh", i), "#!/bin/sh\necho step $0 \"$@\"\n", 0o755)
			}
			e.writeWork("scripts/install.sh", "#!/bin/sh\necho installing $(loom_lookup_key config/service/name) on $(loom_lookup_key config/hostname)\n", 0o755)
			for i := 0; i < 40; i++ {
				e.writeWork(fmt.Sprintf("archives/app/files/f%02d.dat", i), strings.Repeat("x", 4096), 0o644)
			}
			fields := map[string]any{"script": "install.sh"}
			for k, v := range mode.fields {
				fields[k] = v
			}
			boot, install := e.task("BOOTSTRAP", nil, nil), e.task("INSTALL", fields, nil)
			warm := e.task("INSTALL", map[string]any{"script": "install.sh", "cache_dir": "warm-up"}, nil)
			before := e.srv.Accepted()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.restart()
				// Warm a VM, as a running loomd has them: this task fails
				// its cache_dir check before any SSH.
				if r := e.run(warm); r.Status == 0 {
					b.Fatalf("the warm-up task ran: %s", r.Stdout)
				}
				b.StartTimer()
				mustOK(b, "BOOTSTRAP", e.run(boot))
				r := e.run(install)
				mustOK(b, "INSTALL", r)
				if !strings.HasPrefix(r.Stdout, "installing svc on node1.example.com") {
					b.Fatalf("INSTALL printed %q", r.Stdout)
				}
			}
			b.StopTimer()
			e.rt.Close()
			b.ReportMetric(float64(e.srv.Accepted()-before)/float64(b.N), "conns/op")
		})
	}
}
