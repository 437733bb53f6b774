package hostile

// Trust-boundary attacks (issue 10) and poison tasks (issue 9 item 2).

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// allCases is every case of the suite.
func allCases() []hcase {
	cases := pluginCases()
	cases = append(cases, requestCases()...)
	cases = append(cases, ownListenerCases()...)
	cases = append(cases, boundsCases()...)
	cases = append(cases, tokenCases()...)
	cases = append(cases, ioCases()...)
	return append(cases, trustCases()...)
}

// setupFiles are planted before the daemon starts: a Lua module outside
// every plugin folder, another tenant's file and another plugin's key,
// all holding the canary.
func setupFiles(s *suite) []setupFile {
	return []setupFile{
		{"evil.lua", fmt.Sprintf("return %q\n", s.canary)},
		{"work/other/automatortypes/h-trust-other-tenant-read/secret.txt", s.canary},
		{"work/default/providertypes/victim/ssh_keys/id_rsa", s.canary},
		{"work/default/automatortypes/ordinary/scripts/install.sh", "#!/bin/sh\necho ordinary\n"},
	}
}

// refused is the outcome of a confinement attack: the hook fails with a
// permission error, and nothing from outside its work dir reached it.
var refused = want{kinds: []string{"permission"}, within: withinDeadline}

func trustCases() []hcase {
	return []hcase{
		{name: "trust-known-hosts-write", class: "trust", expect: "fails with kind permission: no plugin can write the host-key trust store",
			plugin: &plugin{body: `fs.write("../../../known_hosts", "* ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostileHostileHostileHostileHostileHostile0\n")`},
			want: want{kinds: refused.kinds, within: withinDeadline, check: func(t *testing.T, s *suite, r record) {
				for _, p := range []string{"work/known_hosts", "data/known_hosts"} {
					if b, err := os.ReadFile(filepath.Join(s.dir, p)); err == nil && strings.Contains(string(b), "Hostile") {
						t.Errorf("%s holds the plugin's key", p)
					}
				}
			}}},
		{name: "trust-other-plugin-write", class: "trust", expect: "fails with kind permission: a plugin cannot overwrite another plugin's scripts",
			plugin: &plugin{body: `fs.write("../ordinary/scripts/install.sh", "#!/bin/sh\nrm -rf /\n")`},
			want: want{kinds: refused.kinds, within: withinDeadline, check: func(t *testing.T, s *suite, r record) {
				b, _ := os.ReadFile(filepath.Join(s.dir, "work/default/automatortypes/ordinary/scripts/install.sh"))
				if strings.Contains(string(b), "rm -rf") {
					t.Errorf("the ordinary plugin's install.sh was overwritten")
				}
			}}},
		{name: "trust-other-tenant-read", class: "trust", expect: "fails with kind permission: tenants never see each other's files",
			plugin: &plugin{body: `self.result.result.stolen = fs.read("../../../other/automatortypes/h-trust-other-tenant-read/secret.txt")`},
			want:   refused},
		{name: "trust-keyfile-traversal", class: "trust", expect: "fails with kind permission: key_file cannot name another plugin's ssh_keys",
			plugin: &plugin{body: `ssh.connect({host = "127.0.0.1", port = 9, user = "root", key_file = "../../providertypes/victim/ssh_keys/id_rsa", connect_timeout = 1})`},
			want:   refused},
		{name: "trust-tenant-globals", attack: "tenant A's task sets a global; tenant B's tasks read it", class: "trust", expect: "a global set in tenant A's task is invisible in tenant B's", serial: true,
			plugin: &plugin{body: `self.result.result.seen = tostring(rawget(_G, "LEAK")); LEAK = "tenant-" .. tostring(self.task.tenantId)`},
			run:    func(t *testing.T, s *suite) string { return s.tenantGlobals(t) }},
		{name: "poison-worker-killed", attack: "the hook sleeps; the suite SIGKILLs the worker running it, each attempt", class: "poison", expect: "a task whose run kills its worker twice fails with kind crash; no crash loop", serial: true,
			plugin: &plugin{timeout: "60s", body: `log.info("poison running " .. self.task.taskId); time.sleep(50)`},
			run:    func(t *testing.T, s *suite) string { return s.poison(t) }},
	}
}

// tenantGlobals runs the case's plugin for tenant A, then tenant B.
func (s *suite) tenantGlobals(t *testing.T) string {
	typ := "h-trust-tenant-globals"
	var seen []string
	for _, tenant := range []string{"tenanta", "tenantb", "tenantb"} {
		body := strings.Replace(taskFor(typ, s.d.nextID("tenant-"+tenant), ""), `{`, fmt.Sprintf(`{"tenantId": %q, `, tenant), 1)
		r := s.d.wait(t, s.d.submit(t, body))
		res, _ := r.Result["result"].(map[string]any)
		if r.State != "succeeded" || res == nil {
			t.Fatalf("tenant %s task: %s", tenant, r)
		}
		seen = append(seen, fmt.Sprint(res["seen"]))
	}
	if strings.Contains(seen[1], "tenanta") || strings.Contains(seen[2], "tenanta") {
		t.Errorf("tenant B saw tenant A's global: %q", seen)
	}
	return fmt.Sprintf("globals seen by A, B, B: %q", seen)
}

// poison kills the worker running the case's task each time it runs; the
// task must end failed with kind crash after 2 deaths.
func (s *suite) poison(t *testing.T) string {
	id := s.d.submit(t, taskFor("h-poison-worker-killed", s.d.nextID("poison"), ""))
	kills := 0
	end := time.Now().Add(bound)
	for time.Now().Before(end) {
		r := s.d.get(t, id)
		if r.State == "failed" || r.State == "succeeded" {
			s.checkRecord(t, want{kinds: []string{"crash"}, msg: []string{"crash"}}, r)
			if kills > 2 {
				t.Errorf("the worker was killed %d times before the task failed: want 2", kills)
			}
			return fmt.Sprintf("%s (after %d worker kills)", r.short(), kills)
		}
		if r.State == "running" && s.d.logCount("poison running "+id) > kills {
			pids := s.d.hookPIDs("poison running " + id)
			if len(pids) == 0 {
				pids = workerPIDs(s.d.cmd.Process.Pid, "h-poison-worker-killed")
			}
			if len(pids) == 0 {
				t.Fatalf("loomd has no worker process for h-poison-worker-killed to kill: hooks run in the daemon")
			}
			for _, p := range pids {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			kills++
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("task %s did not finish within %s after %d worker kills: %s", id, bound, kills, s.d.get(t, id))
	return ""
}

// workerPIDs lists the children of pid that are workers for plugin type
// typ (their command line holds "--type typ"); when no child names its
// type, every child.
func workerPIDs(pid int, typ string) []int {
	all := childPIDs(pid)
	var match []int
	named := false
	for _, p := range all {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "\x00--type\x00") {
			named = true
		}
		if strings.Contains(string(b), "\x00--type\x00"+typ+"\x00") {
			match = append(match, p)
		}
	}
	if !named {
		return all
	}
	return match
}

// childPIDs lists the direct children of pid.
func childPIDs(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(f); err == nil {
				out = append(out, p)
			}
		}
	}
	return out
}
