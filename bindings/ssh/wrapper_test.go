package ssh

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testShell is a POSIX shell the remote scripts must work with.
type testShell struct {
	name string
	path string // a path whose base name makes the binary a POSIX sh
}

// posixShells lists dash, busybox sh and bash, those installed here. CI
// installs all three (.ci/run); elsewhere a missing one is skipped.
func posixShells(t *testing.T) []testShell {
	t.Helper()
	var out []testShell
	for _, name := range []string{"dash", "bash"} {
		if p, err := exec.LookPath(name); err == nil {
			out = append(out, testShell{name, p})
		} else if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (CI=true: .ci/run installs it)", name)
		}
	}
	if p, err := exec.LookPath("busybox"); err == nil {
		// busybox picks the applet from argv[0]'s base name.
		link := filepath.Join(t.TempDir(), "sh")
		if err := os.Symlink(p, link); err != nil {
			t.Fatal(err)
		}
		out = append(out, testShell{"busybox", link})
	} else if os.Getenv("CI") == "true" {
		t.Fatalf("busybox is missing (CI=true: .ci/run installs it)")
	} else {
		t.Logf("busybox not installed: its sh is not tested (apt-get install -y busybox)")
	}
	return out
}

// TestGroupWrapperShells runs the exec wrapper under each shell without
// sshd: the marker names the command's pid and a process group that is
// the command's own (made with setsid when the shell is not a group
// leader, as under sudo without a pty), or says "p" when setsid is
// missing; output, exit status and death by signal pass through unchanged.
func TestGroupWrapperShells(t *testing.T) {
	const marker = "loom-started-test:"
	cmd := `printf 'out\nmore'; printf 'err\n' >&2; read -r _ _ _ _ g _ </proc/$$/stat; echo " $$ $g" >&2; exit 7`
	for _, sh := range posixShells(t) {
		for _, tc := range []struct {
			name   string
			leader bool   // started as a session leader, as sshd does
			path   string // PATH; "" keeps the test's
			mode   string
		}{
			{"leader", true, "", "g"},
			{"not a leader", false, "", "g"},
			{"not a leader, no setsid", false, "/nonexistent", "p"},
		} {
			t.Run(sh.name+"/"+tc.name, func(t *testing.T) {
				if tc.mode == "p" && builtinSetsid(sh.path) {
					// busybox-static prefers its own applets to PATH, so
					// its sh always finds setsid.
					t.Skipf("%s runs setsid without PATH (a standalone busybox)", sh.name)
				}
				c := exec.Command(sh.path, "-c", groupWrapper, "sh", marker, sh.path, cmd)
				if tc.leader {
					c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				}
				if tc.path != "" {
					c.Env = append(os.Environ(), "PATH="+tc.path)
				}
				var stdout, stderr bytes.Buffer
				c.Stdout, c.Stderr = &stdout, &stderr
				err := c.Run()
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 7 {
					t.Fatalf("exit: %v (stderr %q)", err, stderr.String())
				}
				if stdout.String() != "out\nmore" {
					t.Fatalf("stdout = %q", stdout.String())
				}
				pid := c.Process.Pid
				wantPG := pid
				if tc.mode == "p" {
					wantPG = syscall.Getpgrp() // it stayed in ours
				}
				want := fmt.Sprintf("%s%d:%s\nerr\n %d %d\n", marker, pid, tc.mode, pid, wantPG)
				if stderr.String() != want {
					t.Fatalf("stderr = %q, want %q", stderr.String(), want)
				}
			})
		}
		t.Run(sh.name+"/signal", func(t *testing.T) {
			c := exec.Command(sh.path, "-c", groupWrapper, "sh", marker, sh.path, "kill -TERM $$")
			err := c.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("kill -TERM $$: %v", err)
			}
			if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
				t.Fatalf("kill -TERM $$: wait status %v, want death by TERM", ws)
			}
		})
	}
}

// builtinSetsid reports whether the shell at path runs setsid with an
// empty PATH, as a busybox built with standalone applets does.
func builtinSetsid(path string) bool {
	c := exec.Command(path, "-c", "setsid true")
	c.Env = []string{"PATH=/nonexistent"}
	return c.Run() == nil
}

// TestKillScriptShells runs the stop script under each shell against a
// real process group with a child in the background: TERM ends it, or,
// when it ignores TERM, KILL does; then the cleanup code runs. The group's
// leader is our child and stays a zombie until we reap it, which the
// script must not count as alive.
func TestKillScriptShells(t *testing.T) {
	for _, sh := range posixShells(t) {
		for _, tc := range []struct {
			name, cmd, want string
			ownPG           bool
		}{
			{"group ends on TERM", "sleep %d & sleep %d", "loom-kill:gone\n", true},
			{"group ignores TERM", "trap '' TERM; sleep %d & sleep %d", "loom-kill:killed\n", true},
			{"lone process", "sleep %d & sleep %d", "loom-kill:gone\n", false},
		} {
			t.Run(sh.name+"/"+tc.name, func(t *testing.T) {
				a, _ := uniqueSleeps()
				n, _ := strconv.Atoi(strings.TrimPrefix(a, "sleep "))
				target := exec.Command(sh.path, "-c", fmt.Sprintf(tc.cmd, n, n+1))
				target.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
				if err := target.Start(); err != nil {
					t.Fatal(err)
				}
				defer target.Wait()
				// Wait for both sleeps: the script must find the whole group.
				deadline := time.Now().Add(10 * time.Second)
				for !runningExactly(fmt.Sprintf("sleep %d", n)) || !runningExactly(fmt.Sprintf("sleep %d", n+1)) {
					if time.Now().After(deadline) {
						t.Fatal("the target's sleeps did not start")
					}
					time.Sleep(10 * time.Millisecond)
				}
				flag := filepath.Join(t.TempDir(), "cleaned")
				out, err := exec.Command(sh.path, "-c", killScript(target.Process.Pid, tc.ownPG, 300*time.Millisecond),
					"sh", "touch "+flag+"; exit 5").Output()
				if err != nil {
					t.Fatalf("kill script: %v", err)
				}
				if want := tc.want + "loom-kill:cleanup:5\n"; string(out) != want {
					t.Fatalf("kill script printed %q, want %q", out, want)
				}
				if _, err := os.Stat(flag); err != nil {
					t.Fatalf("cleanup did not run: %v", err)
				}
				_, pkillErr := exec.LookPath("pkill")
				if tc.ownPG || pkillErr == nil {
					// A lone process's children are reached through
					// pkill -P; a group's through the group.
					if left := sleepsLeft(n, n+1); len(left) > 0 {
						t.Fatalf("processes left: %v", left)
					}
				}
			})
		}
	}
}

// sleepsLeft lists the "sleep n" commands still running.
func sleepsLeft(ns ...int) []string {
	var left []string
	for _, n := range ns {
		if c := fmt.Sprintf("sleep %d", n); runningExactly(c) {
			left = append(left, c)
		}
	}
	return left
}
