package ssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/loomrt/loom/internal/sshdtest"
)

func randomKey(t testing.TB) ssh.PublicKey {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func blob(k ssh.PublicKey) string { return base64.StdEncoding.EncodeToString(k.Marshal()) }

func TestAuthFailure(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	et := e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, password="not-the-password"}`)
	wantKind(t, et, "auth", "authentication failed", e.addr(), e.srv.User)
	if strings.Contains(field(et, "message"), "not-the-password") {
		t.Fatal("the password is in the error message")
	}
	if field(et, "host") != e.srv.Host || field(et, "user") != e.srv.User {
		t.Fatalf("error fields host=%q user=%q", field(et, "host"), field(et, "user"))
	}

	// A key that is not authorised.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	block, err := ssh.MarshalPrivateKey(other, "")
	if err != nil {
		t.Fatal(err)
	}
	e.L.SetGlobal("OTHERKEY", lua.LString(pemEncode(block)))
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key=OTHERKEY}`)
	wantKind(t, et, "auth", "publickey")
	// Auth failures are not retried.
	if r := e.stat("handshake_retries"); r != 0 {
		t.Fatalf("auth failure was retried %v times", r)
	}
	// The right password works.
	e.run(`assert(ssh.connect{host=HOST, port=PORT, user=USER, password=PASSWORD}:exec("true").ok)`)
}

func TestKeyFileAndPassphrase(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	enc := filepath.Join(e.h.Work, "id_enc")
	if err := os.WriteFile(enc, e.srv.EncryptedKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e.L.SetGlobal("PASSPHRASE", lua.LString(e.srv.KeyPassphrase))
	// Relative key_file, resolved against the hook's work dir.
	e.run(`assert(ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_test"}:exec("true").ok)`)
	e.run(`assert(ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_enc", passphrase=PASSPHRASE}:exec("true").ok)`)
	before := e.srv.Accepted()
	et := e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_enc"}`)
	wantKind(t, et, "config", "encrypted")
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file="id_enc", passphrase="wrong"}`)
	wantKind(t, et, "config", "passphrase")
	if e.srv.Accepted() != before {
		t.Fatal("a key error must fail before dialling")
	}
	// A key file outside the work root and plugin dir.
	et = e.luaErr(`ssh.connect{host=HOST, port=PORT, user=USER, key_file="/etc/hostname"}`)
	wantKind(t, et, "permission", "outside")
}

func TestWrongHostKey(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	wrong := randomKey(t)
	real := e.srv.HostKeys["ed25519"]

	// Pinned key that does not match: both fingerprints in the error.
	e.L.SetGlobal("WRONG", lua.LString(blob(wrong)))
	et := e.luaErr(`conn(USER, {host_key={pinned={WRONG}}})`)
	wantKind(t, et, "host_key", "MISMATCH", ssh.FingerprintSHA256(wrong), ssh.FingerprintSHA256(real), e.addr())

	// A changed known_hosts entry.
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := knownhosts.Line([]string{knownhosts.Normalize(e.addr())}, wrong)
	if err := os.WriteFile(kh, []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := New(Options{KnownHosts: []string{kh}})
	defer b.Close()
	L := e.stateFor(b)
	et = luaErrIn(t, L, `conn()`)
	wantKind(t, et, "host_key", "MISMATCH", ssh.FingerprintSHA256(wrong), kh)
	if b.Stats()["handshake_retries"] != 0 {
		t.Fatal("host key failures must not be retried")
	}
	if e.srv.Accepted() != 0 {
		t.Fatal("no login may happen with a wrong host key")
	}
}

func TestUnknownHostStrictAndTOFU(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	dir := t.TempDir()
	tofuFile := filepath.Join(dir, "known_hosts")

	// Strict: the host is unknown.
	strict := New(Options{KnownHosts: []string{tofuFile}})
	defer strict.Close()
	et := luaErrIn(t, e.stateFor(strict), `conn()`)
	wantKind(t, et, "host_key", "unknown", ssh.FingerprintSHA256(e.srv.HostKeys["ed25519"]))
	// TOFU without the daemon's opt-in.
	et = luaErrIn(t, e.stateFor(strict), `conn(USER, {host_key={policy="tofu"}})`)
	wantKind(t, et, "permission", "AllowTOFU")

	// TOFU: accepted once, one line appended, even with concurrent dials.
	tofu := New(Options{KnownHosts: []string{tofuFile}, AllowTOFU: true})
	defer tofu.Close()
	done := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			L := e.stateFor(tofu)
			done <- L.DoString(`assert(conn(USER, {host_key={policy="tofu"}, reuse=false}):exec("true").ok)`)
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(tofuFile)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(data), "\n"); lines != 1 {
		t.Fatalf("TOFU file has %d lines, want 1:\n%s", lines, data)
	}
	if !strings.Contains(e.h.Logs(), "trusted on first use") {
		t.Fatal("TOFU must log an audit event")
	}
	// Now the host is known: strict accepts it too.
	runIn(t, e.stateFor(strict), `assert(conn():exec("true").ok)`)

	// A changed key is never accepted under TOFU.
	if err := os.WriteFile(tofuFile, []byte(knownhosts.Line([]string{knownhosts.Normalize(e.addr())}, randomKey(t))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	et = luaErrIn(t, e.stateFor(tofu), `conn(USER, {host_key={policy="tofu"}, reuse=false})`)
	wantKind(t, et, "host_key", "MISMATCH")
}

func TestKnownHostsSingleKeyType(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	for _, typ := range []string{"ed25519", "rsa", "ecdsa"} {
		t.Run(typ, func(t *testing.T) {
			b := New(Options{KnownHosts: []string{e.srv.KnownHosts(typ)}})
			defer b.Close()
			runIn(t, e.stateFor(b), `assert(conn():exec("true").ok)`)
			// The same with the key pinned as a task would (a bare blob).
			L := e.stateFor(b)
			L.SetGlobal("PIN", lua.LString(blob(e.srv.HostKeys[typ])))
			runIn(t, L, `assert(conn(USER, {host_key={pinned={PIN}}}):exec("true").ok)`)
		})
	}
	// A SHA256 fingerprint pin.
	b := New(Options{})
	defer b.Close()
	L := e.stateFor(b)
	L.SetGlobal("FP", lua.LString(ssh.FingerprintSHA256(e.srv.HostKeys["ed25519"])))
	runIn(t, L, `assert(conn(USER, {host_key={pinned=FP}}):exec("true").ok)`)
}

func TestCertAuthority(t *testing.T) {
	_, caPriv, _ := ed25519.GenerateKey(rand.Reader)
	ca, err := ssh.NewSignerFromKey(caPriv)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, sshdtest.Config{HostCA: ca}, &Options{KnownHosts: []string{}})
	kh := filepath.Join(t.TempDir(), "known_hosts")
	line := "@cert-authority " + knownhosts.Normalize(e.addr()) + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(ca.PublicKey()))) + "\n"
	if err := os.WriteFile(kh, []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
	b := New(Options{KnownHosts: []string{kh}})
	defer b.Close()
	runIn(t, e.stateFor(b), `assert(conn():exec("true").ok)`)
}

func TestInsecureNeedsOptIn(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{KnownHosts: []string{}})
	et := e.luaErr(`conn(USER, {host_key={policy="insecure"}})`)
	wantKind(t, et, "permission", "AllowInsecure")
	b := New(Options{AllowInsecure: true})
	defer b.Close()
	L := e.stateFor(b)
	runIn(t, L, `c = conn(USER, {host_key={policy="insecure"}}); assert(c:exec("true").ok)
		c2 = conn(USER, {host_key={policy="insecure"}})`)
	if n := strings.Count(e.h.Logs(), "DISABLED"); n != 2 {
		t.Fatalf("insecure must warn on every connect: %d warnings", n)
	}
}

func TestKeyscanAndFromInput(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, &Options{KnownHosts: []string{}})
	e.run(`keys = ssh.keyscan{host=HOST, port=PORT, timeout=5}`)
	for _, typ := range []string{"ed25519", "ecdsa", "rsa"} {
		if got := e.str("keys." + typ); got != blob(e.srv.HostKeys[typ]) {
			t.Fatalf("keyscan %s = %q", typ, got)
		}
	}
	// A Coopr automator input: ipaddress + sshauth, keys pinned by the task.
	e.run(`
		input = {hostname="h1", ipaddress=HOST, sshauth={user=USER, identityfile=KEYFILE}}
		task = {taskId="t1", config={ssh_host_keys={rsa=keys.rsa}}}
		c = ssh.from_input(input, task, {port=PORT})
		r = c:exec("id -un", {check=true})`)
	if got := e.str("r.stdout"); got != e.srv.User+"\n" {
		t.Fatalf("from_input exec: %q", got)
	}
	// The port a provider handed out in ssh-auth (a number, or a string
	// of one) is used without opts.port.
	e.run(`c = ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=KEYFILE, port=PORT}},
			{config={ssh_host_keys={rsa=keys.rsa}}})
		assert(c:exec("true").ok)
		c = ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=KEYFILE, port=tostring(PORT)}},
			{config={ssh_host_keys={rsa=keys.rsa}}})
		assert(c:exec("true").ok)`)
	// Password auth from sshauth, pinned ed25519 key.
	e.run(`c = ssh.from_input({ipaddress=HOST, sshauth={user=USER, password=PASSWORD}},
			{config={ssh_host_keys={ed25519=keys.ed25519}}}, {port=PORT})
		assert(c:exec("true").ok)`)
	// A wrong pinned key fails.
	e.L.SetGlobal("WRONG", lua.LString(blob(randomKey(t))))
	et := e.luaErr(`ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=KEYFILE}},
		{config={ssh_host_keys={ed25519=WRONG}}}, {port=PORT})`)
	wantKind(t, et, "host_key", "MISMATCH")
	// No pins and no known_hosts: strict refuses.
	et = e.luaErr(`ssh.from_input({ipaddress=HOST, sshauth={user=USER, identityfile=KEYFILE}}, {config={}}, {port=PORT})`)
	wantKind(t, et, "host_key", "unknown")
}

func TestAlgorithmsForKnownTypes(t *testing.T) {
	v := &verifier{hk: hostKeyConfig{policy: policyStrict}}
	v.known = []knownhosts.KnownKey{{Key: fakeKey("ssh-rsa")}}
	got := strings.Join(v.algorithms(), ",")
	if got != "rsa-sha2-512,rsa-sha2-256,ssh-rsa" {
		t.Fatalf("rsa-only host: %s", got)
	}
	v.known = []knownhosts.KnownKey{{Key: fakeKey("ssh-ed25519")}}
	if got := strings.Join(v.algorithms(), ","); got != "ssh-ed25519" {
		t.Fatalf("ed25519-only host: %s", got)
	}
	v.cas = true
	if got := v.algorithms(); got[0] != ssh.CertAlgoED25519v01 || got[len(got)-1] != "ssh-ed25519" {
		t.Fatalf("CA host: %v", got)
	}
}

type fakeKey string

func (k fakeKey) Type() string                                 { return string(k) }
func (k fakeKey) Marshal() []byte                              { return []byte(k) }
func (k fakeKey) Verify(data []byte, sig *ssh.Signature) error { return nil }

// stateFor is a Lua state on the env's host but another binding.
func (e *env) stateFor(b *Binding) *lua.LState { return e.newStateWith(b) }

func pemEncode(b *pem.Block) string { return string(pem.EncodeToMemory(b)) }
