package localpath_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/bindings/localpath"
)

func kindOf(err error) string {
	if e, ok := err.(*bindings.Error); ok {
		return e.Kind
	}
	return ""
}

// Real resolves inside the areas, creates missing parents for writes,
// follows symlinks that stay inside, and grants a named folder's files.
func TestRealInsideAreas(t *testing.T) {
	h := bindingstest.NewHost(t)
	os.MkdirAll(filepath.Join(h.Work, "data"), 0o755)
	os.WriteFile(filepath.Join(h.Work, "data", "f"), []byte("x"), 0o600)
	os.Symlink("data", filepath.Join(h.Work, "alias"))
	os.WriteFile(filepath.Join(h.Dir, "lib.sh"), []byte("x"), 0o644)
	granted := filepath.Join(t.TempDir(), "t1", "providertypes", "aws", "ssh_keys")
	os.MkdirAll(granted, 0o755)
	os.WriteFile(filepath.Join(granted, "k.pem"), []byte("k"), 0o400)
	h.Granted = []bindings.Grant{{Named: "/var/coopr/work/t1/providertypes/aws/ssh_keys", Path: granted}}

	realWork, _ := filepath.EvalSymlinks(h.Work)
	realGrant, _ := filepath.EvalSymlinks(granted)
	for _, tc := range []struct {
		p     string
		write bool
		want  string
	}{
		{"data/f", false, filepath.Join(realWork, "data", "f")},
		{"alias/f", false, filepath.Join(realWork, "data", "f")},
		{".", false, realWork},
		{"new/deeper/file", true, filepath.Join(realWork, "new", "deeper", "file")},
		{filepath.Join(h.Dir, "lib.sh"), false, ""},
		{"/var/coopr/work/t1/providertypes/aws/ssh_keys/k.pem", false, filepath.Join(realGrant, "k.pem")},
		{filepath.Join(granted, "k.pem"), false, filepath.Join(realGrant, "k.pem")},
	} {
		got, err := localpath.Real(h, "test", tc.p, tc.write)
		if err != nil {
			t.Errorf("Real(%q, write=%v): %v", tc.p, tc.write, err)
			continue
		}
		if tc.want != "" && got != tc.want {
			t.Errorf("Real(%q) = %q, want %q", tc.p, got, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(h.Work, "new", "deeper")); err != nil {
		t.Errorf("parents of a write were not created: %v", err)
	}
}

// Refusals are decided on the spelling and say nothing about the disk.
func TestResolveRefusals(t *testing.T) {
	h := bindingstest.NewHost(t)
	h.Granted = []bindings.Grant{{Named: "/x/t1/providertypes/aws/ssh_keys/k.pem", Path: filepath.Join(t.TempDir(), "k.pem")}}
	for _, tc := range []struct {
		p     string
		write bool
		kind  string
		want  string
	}{
		{"", false, "config", "empty path"},
		{"a\x00b", false, "config", "NUL"},
		{"../x", false, "permission", "outside the hook's work dir"},
		{h.Work + "/../x", false, "permission", "outside the hook's work dir"},
		{h.Work + "x/y", false, "permission", "outside the hook's work dir"},
		{filepath.Join(h.Dir, "x"), true, "permission", "read-only"},
		{"/x/t1/providertypes/aws/ssh_keys/k.pem", true, "permission", "never write"},
		{"/x/t1/providertypes/aws/ssh_keys/other.pem", false, "permission", "outside the hook's work dir"},
	} {
		_, _, err := localpath.Resolve(h, "test", tc.p, tc.write)
		if kindOf(err) != tc.kind || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%q, write=%v) = %v, want %s error with %q", tc.p, tc.write, err, tc.kind, tc.want)
		}
	}
}

// A granted file that is a link into its owner's work dir (a resource
// version a Coopr server synced, activated through .resources) resolves
// when the grant names the owner's work dir as Root; a link leaving the
// owner's work dir does not, and neither does a sibling the task did not
// name.
func TestGrantLinksWithinOwner(t *testing.T) {
	h := bindingstest.NewHost(t)
	owner := filepath.Join(t.TempDir(), "t1", "providertypes", "aws")
	version := filepath.Join(owner, ".resources", "ssh_keys", "k.pem", "2")
	os.MkdirAll(version, 0o755)
	os.MkdirAll(filepath.Join(owner, "ssh_keys"), 0o755)
	os.WriteFile(filepath.Join(version, "k.pem"), []byte("k"), 0o400)
	os.WriteFile(filepath.Join(owner, "claims.json"), []byte("{}"), 0o600)
	os.Symlink("../.resources/ssh_keys/k.pem/2/k.pem", filepath.Join(owner, "ssh_keys", "k.pem"))
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("s"), 0o600)
	os.Symlink(outside, filepath.Join(owner, "ssh_keys", "out.pem"))
	grant := func(name string) bindings.Grant {
		return bindings.Grant{Named: "/var/coopr/work/t1/providertypes/aws/ssh_keys/" + name, Path: filepath.Join(owner, "ssh_keys", name), Root: owner}
	}
	h.Granted = []bindings.Grant{grant("k.pem"), grant("out.pem")}
	realVersion, _ := filepath.EvalSymlinks(version)
	if got, err := localpath.Real(h, "test", "/var/coopr/work/t1/providertypes/aws/ssh_keys/k.pem", false); err != nil || got != filepath.Join(realVersion, "k.pem") {
		t.Errorf("a granted link into .resources: %q %v", got, err)
	}
	if _, err := localpath.Real(h, "test", "/var/coopr/work/t1/providertypes/aws/ssh_keys/out.pem", false); kindOf(err) != "permission" {
		t.Errorf("a granted link out of the owner's work dir: %v", err)
	}
	for _, p := range []string{filepath.Join(owner, "claims.json"), filepath.Join(owner, ".resources", "ssh_keys", "k.pem", "2", "k.pem")} {
		if _, err := localpath.Real(h, "test", p, false); kindOf(err) != "permission" {
			t.Errorf("%s is not named by the task but resolved: %v", p, err)
		}
	}
}
