package ssh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/internal/sshdtest"
)

// Issue 10 item 2, against the real sshd: an identityfile in another
// plugin's work dir logs in only when the task names it (a Grant, made by
// the runtime for a declared resource of a type the task names, in its
// tenant); Coopr's absolute provisioner-host paths map onto the grant. A
// path the task does not name, or one the runtime denied, fails before
// dialling. On the old main the first luaErr below logged in.
func TestIdentityFileOnlyWhenGranted(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	tenantDir := filepath.Dir(filepath.Dir(e.h.Work)) // <work>/<tenant>
	key := filepath.Join(tenantDir, "providertypes", "aws", "ssh_keys", "coopr.pem")
	if err := os.MkdirAll(filepath.Dir(key), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, e.srv.KeyPEM, 0o400); err != nil {
		t.Fatal(err)
	}
	rel := "../../providertypes/aws/ssh_keys/coopr.pem"
	e.L.SetGlobal("REL", lua.LString(rel))
	before := e.srv.Accepted()
	et := e.luaErr(`ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=REL}}, {config={}}, {port=PORT})`)
	wantKind(t, et, "permission", "outside the hook's work dir")
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file=REL}`)
	wantKind(t, et, "permission", "outside the hook's work dir")
	if e.srv.Accepted() != before {
		t.Fatal("an ungranted key_file must fail before dialling")
	}

	coopr := "/var/coopr/data/provisioner/work/tenant/providertypes/aws/ssh_keys/coopr.pem"
	e.h.Granted = []bindings.Grant{{Named: coopr, Path: key}, {Named: rel, Path: key},
		{Named: "/var/coopr/work/other/providertypes/aws/ssh_keys/coopr.pem", Denied: "it belongs to tenant other"}}
	e.L.SetGlobal("COOPR", lua.LString(coopr))
	e.run(`assert(ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=COOPR}}, {config={}}, {port=PORT}):exec("true").ok)`)
	e.run(`assert(ssh.connect{host=HOST, port=PORT, user=USER, key_file=REL, reuse=false}:exec("true").ok)`)
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file="/var/coopr/work/other/providertypes/aws/ssh_keys/coopr.pem"}`)
	wantKind(t, et, "permission", "belongs to tenant other")
	// A grant is read-only: downloading over it is refused.
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_test"}:download("/etc/hostname", REL)`)
	wantKind(t, et, "permission", "never write")
	if b, _ := os.ReadFile(key); string(b) != string(e.srv.KeyPEM) {
		t.Fatal("the granted key was overwritten")
	}
}

// Issue 10 item 7: SSH path errors say nothing about what is outside the
// sandbox: a present and a missing file get the same error, and a symlink
// pointing out is refused without naming its target, whether the target
// exists or not. On the old main a present file got "resolves to <real
// path>" and a missing one "does not exist".
func TestLocalPathErrorsRevealNothing(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	outside := t.TempDir()
	present := filepath.Join(outside, "present")
	if err := os.WriteFile(present, e.srv.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Symlink(present, filepath.Join(e.h.Work, "to-present"))
	os.Symlink(filepath.Join(outside, "missing"), filepath.Join(e.h.Work, "to-missing"))
	os.Symlink(outside, filepath.Join(e.h.Work, "dir"))
	e.run(`c = ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_test"}`)
	same := func(what, a, b string) {
		t.Helper()
		ea, eb := e.luaErr(a), e.luaErr(b)
		ma, mb := field(ea, "message"), field(eb, "message")
		if field(ea, "kind") != "permission" || field(eb, "kind") != "permission" {
			t.Errorf("%s: want permission errors, got %s: %s / %s: %s", what, field(ea, "kind"), ma, field(eb, "kind"), mb)
		}
		if strings.ReplaceAll(ma, "present", "X") != strings.ReplaceAll(mb, "missing", "X") {
			t.Errorf("%s: the errors differ, which tells what exists outside:\n%s\n%s", what, ma, mb)
		}
		for _, m := range []string{ma, mb} {
			if strings.Contains(m, outside) && !strings.Contains(a+b, outside) {
				t.Errorf("%s: the error names a symlink's target: %s", what, m)
			}
		}
	}
	for _, tc := range []struct{ what, tmpl string }{
		{"key_file", `ssh.connect{host=HOST, port=PORT, user=USER, key_file=%q}`},
		{"known_hosts", `ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_test", host_key={known_hosts=%q}}`},
		{"upload", `c:upload(%q, "/tmp/x")`},
		{"upload_dir", `c:upload_dir(%q, "/tmp/x")`},
		{"download", `c:download("/etc/hostname", %q)`},
	} {
		q := func(p string) string { return strings.Replace(tc.tmpl, "%q", `"`+p+`"`, 1) }
		same(tc.what+" absolute", q(present), q(filepath.Join(outside, "missing")))
		same(tc.what+" through a symlinked dir", q("dir/present"), q("dir/missing"))
		if tc.what != "download" { // download replaces the link itself, inside the work dir
			same(tc.what+" symlink", q("to-present"), q("to-missing"))
		}
	}
}
