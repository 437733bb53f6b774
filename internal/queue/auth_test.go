package queue

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loomrt/loom/bindings/listeners"
)

// refused asserts that a client with opts cannot connect to url, or if it
// connects, cannot read the task stream.
func refused(t *testing.T, what, url string, opts ...nats.Option) {
	t.Helper()
	nc, err := nats.Connect(url, append(opts, nats.Timeout(5*time.Second), nats.MaxReconnects(0))...)
	if err != nil {
		if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
			t.Errorf("%s: connect failed with %v, want an authorization violation", what, err)
		}
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err = js.Stream(ctx, StreamName)
	}
	if err == nil {
		t.Errorf("%s: connected and read stream %s, want a refusal", what, StreamName)
	}
}

// The embedded server requires its generated nkey, on loopback too: an
// unauthenticated client or one with another key is refused, a second
// daemon with a copy of the seed joins and shares the work.
func TestEmbeddedServerRequiresNkey(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	q := open(t, cfg)
	seed := filepath.Join(cfg.DataDir, NkeyFileName)
	st, err := os.Stat(seed)
	if err != nil {
		t.Fatalf("no generated seed: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("seed mode %#o, want 0600", st.Mode().Perm())
	}
	url := q.ClientURL()
	secret, _ := os.ReadFile(seed)
	hint := q.JoinHint()
	if !strings.Contains(hint, "--nats-nkey") || !strings.Contains(hint, seed) || !strings.Contains(hint, url) {
		t.Errorf("join hint %q: want --nats %s --nats-nkey and the seed's path", hint, url)
	}
	if strings.Contains(hint, strings.TrimSpace(string(secret))) {
		t.Errorf("join hint holds the seed itself")
	}

	refused(t, "no credentials", url)
	refused(t, "a token", url, nats.Token("guess"))
	refused(t, "user/password", url, nats.UserInfo("loomd", "loomd"))
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	refused(t, "another nkey", url, nats.Nkey(otherPub, func(n []byte) ([]byte, error) { return other.Sign(n) }))

	// A second daemon joins with a copy of the seed.
	cp := filepath.Join(t.TempDir(), "join.nk")
	if err := os.WriteFile(cp, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	q2 := open(t, Config{URLs: []string{url}, NkeyFile: cp, AckWait: time.Second, PollInterval: 50 * time.Millisecond, Logger: testLogger()})
	c := newCounter(nil)
	serve(t, q, c, 2, shell)
	submit(t, q2, task("joined-1", "shell"))
	if got := wait(t, q2, "joined-1"); got.State != Succeeded {
		t.Fatalf("task submitted by the joined daemon: %s", got.State)
	}

	// A seed copied without care is refused, not silently used.
	if err := os.Chmod(cp, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Config{URLs: []string{url}, NkeyFile: cp, Logger: testLogger()})
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("Open with a world-readable seed: %v, want a refusal naming chmod 600", err)
	}
}

// A restart keeps the generated key (joined daemons keep working), and the
// in-process connection works without a listener too.
func TestEmbeddedSeedSurvivesRestart(t *testing.T) {
	cfg := testConfig(t)
	q := open(t, cfg)
	seed := filepath.Join(cfg.DataDir, NkeyFileName)
	before, err := os.ReadFile(seed)
	if err != nil {
		t.Fatal(err)
	}
	submit(t, q, task("keep-1", "shell"))
	_ = q.Close()
	q = open(t, cfg)
	after, _ := os.ReadFile(seed)
	if string(before) != string(after) {
		t.Errorf("the seed changed across a restart")
	}
	if _, err := q.Get(context.Background(), "keep-1"); err != nil {
		t.Errorf("record after restart: %v", err)
	}
}

// With --nats-token the embedded server requires that token instead.
func TestEmbeddedServerWithToken(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Token = "s3cret-token-value"
	q := open(t, cfg)
	refused(t, "no credentials", q.ClientURL())
	refused(t, "wrong token", q.ClientURL(), nats.Token("nope"))
	if strings.Contains(q.JoinHint(), cfg.Token) || !strings.Contains(q.JoinHint(), "--nats-token") {
		t.Errorf("join hint %q: want it to name --nats-token, not the token", q.JoinHint())
	}
	q2 := open(t, Config{URLs: []string{q.ClientURL()}, Token: cfg.Token, Logger: testLogger()})
	if err := q2.Health(context.Background()); err != nil {
		t.Errorf("joined with the token: %v", err)
	}
}

func TestAuthConfigValidation(t *testing.T) {
	ext := []string{"nats://127.0.0.1:1"}
	for name, cfg := range map[string]Config{
		"two credentials":     {URLs: ext, Token: "a", User: "u"},
		"password alone":      {URLs: ext, Password: "p"},
		"cert without key":    {URLs: ext, TLSCert: "c.pem"},
		"user on embedded":    {DataDir: "x", User: "u", Password: "p"},
		"creds on embedded":   {DataDir: "x", CredsFile: "x.creds"},
		"tls on embedded":     {DataDir: "x", TLSCA: "ca.pem"},
		"missing nkey file":   {URLs: ext, NkeyFile: "/nonexistent/x.nk"},
		"missing creds file":  {URLs: ext, CredsFile: "/nonexistent/x.creds"},
		"missing CA":          {URLs: ext, TLSCA: "/nonexistent/ca.pem"},
		"missing client cert": {URLs: ext, TLSCert: "/nonexistent/c.pem", TLSKey: "/nonexistent/k.pem"},
	} {
		if _, err := Open(context.Background(), cfg); err == nil {
			t.Errorf("%s: Open succeeded, want a configuration error", name)
		}
	}
}

// An external NATS with TLS (verifying client certificates) and
// user/password: loomd connects with the CA, its certificate and the
// password; without the certificate, or with a wrong password, it is
// refused, and the error does not carry the password.
func TestExternalTLSAndPassword(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := writeCA(t, dir)
	writeCert(t, dir, "server", ca, caKey, true)
	writeCert(t, dir, "client", ca, caKey, false)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server-key.pem"),
		CaFile: filepath.Join(dir, "ca.pem"), Verify: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(dir, "js"),
		TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 5,
		Users:  []*server.User{{Username: "loomd", Password: "p4ssw0rd-xyz"}},
		NoSigs: true, NoLog: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	url := "tls://" + srv.Addr().String()
	base := Config{URLs: []string{url}, User: "loomd", Password: "p4ssw0rd-xyz",
		TLSCA: filepath.Join(dir, "ca.pem"), TLSCert: filepath.Join(dir, "client.pem"), TLSKey: filepath.Join(dir, "client-key.pem"),
		Logger: testLogger()}
	q := open(t, base)
	submit(t, q, task("tls-1", "shell"))

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	noCert := base
	noCert.TLSCert, noCert.TLSKey = "", ""
	if _, err := Open(ctx, noCert); err == nil {
		t.Errorf("connected without a client certificate")
	}
	badPw := base
	badPw.Password = "wrong-password-abc"
	if _, err := Open(ctx, badPw); err == nil {
		t.Errorf("connected with a wrong password")
	} else if strings.Contains(err.Error(), "wrong-password-abc") {
		t.Errorf("the error shows the password: %v", err)
	}
	inURL := base
	inURL.User, inURL.Password = "", ""
	inURL.URLs = []string{"tls://loomd:secretinurl@" + srv.Addr().String()}
	inURL.TLSCert = ""
	if _, err := Open(ctx, inURL); err == nil || strings.Contains(err.Error(), "secretinurl") {
		t.Errorf("error for a refused URL with a password: %v, want one without the password", err)
	}
}

func writeCA(t *testing.T, dir string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "loom test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "ca.pem"), "CERTIFICATE", der)
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func writeCert(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, isServer bool) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if isServer {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	kb, _ := x509.MarshalECPrivateKey(key)
	writePEM(t, filepath.Join(dir, name+"-key.pem"), "EC PRIVATE KEY", kb)
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The embedded server's client port is one of the daemon's own listeners
// while it serves (loom.http refuses it), with the port it was given.
func TestEmbeddedServerPortRegistered(t *testing.T) {
	cfg := testConfig(t)
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.Listeners = listeners.New()
	q, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := cfg.Listeners.List()
	u, _ := url.Parse(q.ClientURL())
	if len(ls) != 1 || ls[0].Name != "NATS client port (--nats-listen)" || ls[0].Addr != u.Host {
		t.Errorf("registered %v, want the client port %s", ls, u.Host)
	}
	if _, ok := cfg.Listeners.Match("tcp", "0.0.0.0:"+u.Port()); !ok {
		t.Errorf("0.0.0.0:%s is not refused", u.Port())
	}
	q.Close()
	if ls, _ := cfg.Listeners.List(); len(ls) != 0 {
		t.Errorf("after Close: %v, want nothing registered", ls)
	}
}
