package ssh

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings/bindingstest"
)

// TestOptionClassesMatchCode checks each options class of the spec
// against the keys the Go code reads: every function rejects unknown keys
// and lists the ones it read ("known: ..."), so a probe key shows them. A
// key added to the code but not to the class (or the reverse) fails here,
// before an editor flags a valid option as a typo.
func TestOptionClassesMatchCode(t *testing.T) {
	h := bindingstest.NewHost(t)
	h.Work = t.TempDir()
	b := New(Options{})
	t.Cleanup(func() { b.Close() })
	L := bindingstest.NewState(t, h, b)
	bindingstest.Run(t, L, `ssh = require("loom.ssh")`)
	// A handle that never connected: options are read and checked before
	// any network use.
	ud := L.NewUserData()
	ud.Value = &luaConn{cfg: &connConfig{host: "probe", port: 22, user: "probe"}}
	L.SetMetatable(ud, L.GetTypeMetatable(connTypeName))
	L.SetGlobal("CONN", ud)

	classes := map[string][]string{}
	for _, ty := range moduleSpec.Types {
		for _, f := range ty.Fields {
			classes[ty.Name] = append(classes[ty.Name], f.Name)
		}
	}
	known := regexp.MustCompile(`\(known: ([^)]*)\)`)
	for _, c := range []struct{ class, code string }{
		{"ssh.ConnectOptions", `ssh.connect{__probe = true}`},
		{"ssh.ConnectOverrides", `ssh.connect{__probe = true}`},
		{"ssh.HostKeyOptions", `ssh.connect{host = "h", user = "u", password = "p", host_key = {__probe = true}}`},
		{"ssh.KeyscanOptions", `ssh.keyscan{__probe = true}`},
		{"ssh.WaitHostKeysOptions", `ssh.wait_host_keys{__probe = true}`},
		{"ssh.ExecOptions", `CONN:exec("true", {__probe = true})`},
		{"ssh.SudoOptions", `CONN:exec("true", {sudo = {__probe = true}})`},
		{"ssh.UploadOptions", `CONN:upload("a", "/b", {__probe = true})`},
		{"ssh.UploadOptions", `CONN:write("/b", "x", {__probe = true})`},
		{"ssh.UploadDirOptions", `CONN:upload_dir("a", "/b", {__probe = true})`},
		{"ssh.DownloadOptions", `CONN:download("/b", "a", {__probe = true})`},
		{"ssh.ReadOptions", `CONN:read("/b", {__probe = true})`},
	} {
		err := L.DoString(c.code)
		if err == nil {
			t.Errorf("%s: the probe key was accepted", c.code)
			continue
		}
		m := known.FindStringSubmatch(bindingstest.ErrorMessage(err))
		if m == nil {
			t.Errorf("%s: no list of known options in %v", c.code, err)
			continue
		}
		read := strings.Split(m[1], ", ")
		declared := slices.Clone(classes[c.class])
		slices.Sort(read)
		slices.Sort(declared)
		if !slices.Equal(read, declared) {
			t.Errorf("%s declares %v; %s reads %v", c.class, declared, c.code, read)
		}
	}
}
