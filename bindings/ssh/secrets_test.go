package ssh

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/internal/sshdtest"
)

// TestSecretsNeverLeak runs every operation that handles a secret, the
// failing ones included, and greps everything the binding produced: the
// hook's log, every result and every error (all fields).
func TestSecretsNeverLeak(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	if err := os.WriteFile(filepath.Join(e.h.Work, "id_enc"), e.srv.EncryptedKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e.L.SetGlobal("PASSPHRASE", lua.LString(e.srv.KeyPassphrase))
	e.L.SetGlobal("ENCKEY", lua.LString(e.srv.EncryptedKeyPEM))
	dir := remoteDir(t, e.srv.User)
	e.L.SetGlobal("DIR", lua.LString(dir))
	e.run(`
		produced = {}
		local function keep(v) produced[#produced+1] = v end
		local function try(f) local ok, r = pcall(f); keep(r) end
		local pw = ssh.connect{host=HOST, port=PORT, user=USER, password=PASSWORD}
		keep(pw:exec("echo hi; echo there >&2"))
		try(function() return ssh.connect{host=HOST, port=PORT, user=USER, password=PASSWORD .. "x"} end)
		try(function() return ssh.connect{host=HOST, port=PORT, user=USER, key=ENCKEY} end)
		try(function() return ssh.connect{host=HOST, port=PORT, user=USER, key=ENCKEY, passphrase=PASSPHRASE .. "x"} end)
		local k = ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_enc", passphrase=PASSPHRASE}
		keep(k:exec("id -u", {sudo={password=PASSWORD}}))
		keep(k:exec("id -u; cat", {sudo={password=PASSWORD}, pty=true, stdin="data"}))
		try(function() return k:exec("false", {sudo={password=PASSWORD}, check=true}) end)
		try(function() return k:exec("id -u", {sudo={password=PASSWORD .. "x"}}) end)
		try(function() return k:exec("sleep 3630", {sudo={password=PASSWORD}, timeout=0.5, kill_grace=0.5, check=true}) end)
		keep(k:write(DIR .. "/f", "content", {sudo={password=PASSWORD}}))
		keep(k:read(DIR .. "/f", {sudo={password=PASSWORD}}))
		try(function() return k:write("/etc/loom-no-such-dir/f", "x", {sudo={password=PASSWORD .. "y"}}) end)
		try(function() return ssh.from_input({ipaddress=HOST, sshauth={user=USER, password=PASSWORD .. "z"}}, {config={}}, {port=PORT}) end)
	`)
	var all strings.Builder
	collect(&all, e.eval("produced"), 0)
	all.WriteString(e.h.Logs())
	all.WriteString(e.srv.Logs())
	text := all.String()
	if !strings.Contains(text, "rejected the password") || !strings.Contains(text, "authentication failed") {
		t.Fatalf("the failures did not happen as planned:\n%s", text)
	}

	secrets := []string{e.srv.Password, e.srv.KeyPassphrase}
	for _, line := range strings.Split(string(e.srv.KeyPEM)+string(e.srv.EncryptedKeyPEM), "\n") {
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Fatalf("secret %.6s... found in what the binding produced", s)
		}
	}
	// And they were all registered, so the runtime redacts them anywhere.
	reg := e.h.Secrets()
	for _, s := range []string{e.srv.Password, e.srv.Password + "x", e.srv.KeyPassphrase, string(e.srv.EncryptedKeyPEM)} {
		if !slices.Contains(reg, s) {
			t.Fatalf("secret %.6s... was not registered with AddSecret", s)
		}
	}
}

// collect appends every string in a Lua value.
func collect(b *strings.Builder, v lua.LValue, depth int) {
	if depth > 10 {
		return
	}
	switch x := v.(type) {
	case *lua.LTable:
		x.ForEach(func(k, v lua.LValue) {
			collect(b, k, depth+1)
			collect(b, v, depth+1)
		})
	default:
		b.WriteString(v.String())
		b.WriteByte('\n')
	}
}
