package coopr_test

import (
	"bytes"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/coopr/coopfake"
)

func newCA(t *testing.T, name string) *coopfake.CA {
	t.Helper()
	ca, err := coopfake.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *coopfake.CA, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	certPEM, keyPEM, err := ca.Issue(cn, false)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM
}

func tlsFake(t *testing.T, ca *coopfake.CA) *coopfake.Server {
	t.Helper()
	srv, err := coopfake.StartRequiringClientCerts(ca)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// writeAtomic replaces a file as a certificate renewal tool does.
func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a log sink the provisioner's goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func logTo(b *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// TestTLSClientCertificate: against a server that requires a client
// certificate signed by its CA, loomd registers, takes and finishes with
// --coopr-ca/--coopr-cert/--coopr-key; a renewed certificate written over
// the files is used from the next connection on, without a restart.
func TestTLSClientCertificate(t *testing.T) {
	ca := newCA(t, "coopr-test-ca")
	srv := tlsFake(t, ca)
	dir := t.TempDir()
	files := coopr.TLS{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client.key")}
	certPEM, keyPEM := issue(t, ca, "loom-client-1")
	writeAtomic(t, files.CAFile, ca.PEM)
	writeAtomic(t, files.CertFile, certPEM)
	writeAtomic(t, files.KeyFile, keyPEM)

	r := &runner{}
	startWith(t, srv, coopr.Config{TLS: files, Runner: r, Tenants: map[string]int{"t1": 1}})
	if err := srv.Enqueue("t1", task("tls-1")); err != nil {
		t.Fatal(err)
	}
	if f, err := srv.WaitFinished(ctx(t), "tls-1"); err != nil || f.Status != 0 {
		t.Fatalf("finish over TLS: %+v %v\n%s", f, err, strings.Join(srv.Log(), "\n"))
	}
	if !strings.Contains(strings.Join(srv.Log(), "\n"), "POST /v2/tasks/finish -> 200 client=loom-client-1") {
		t.Errorf("the finish did not come with the client certificate:\n%s", strings.Join(srv.Log(), "\n"))
	}

	// Renewal: new pair over the same files; the server restarts, so the
	// next requests open new connections.
	certPEM, keyPEM = issue(t, ca, "loom-client-2")
	writeAtomic(t, files.KeyFile, keyPEM)
	writeAtomic(t, files.CertFile, certPEM)
	if err := srv.Restart(50 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := srv.Enqueue("t1", task("tls-2")); err != nil {
		t.Fatal(err)
	}
	if f, err := srv.WaitFinished(ctx(t), "tls-2"); err != nil || f.Status != 0 {
		t.Fatalf("finish after the renewal: %+v %v\n%s", f, err, strings.Join(srv.Log(), "\n"))
	}
	if !strings.Contains(strings.Join(srv.Log(), "\n"), "POST /v2/tasks/finish -> 200 client=loom-client-2") {
		t.Errorf("the renewed certificate was not used:\n%s", strings.Join(srv.Log(), "\n"))
	}
	if r.count("tls-1") != 1 || r.count("tls-2") != 1 {
		t.Errorf("runs: %v", r.runs)
	}
}

// TestTLSRefusals: what goes wrong says what to do, at start for bad
// files, in the log for a server that refuses loomd or that loomd does
// not trust.
func TestTLSRefusals(t *testing.T) {
	ca := newCA(t, "coopr-test-ca")
	srv := tlsFake(t, ca)
	dir := t.TempDir()
	caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
	certPEM, keyPEM := issue(t, ca, "loom-client")
	writeAtomic(t, caFile, ca.PEM)
	writeAtomic(t, certFile, certPEM)
	writeAtomic(t, keyFile, keyPEM)
	both := filepath.Join(dir, "both.pem")
	writeAtomic(t, both, append(append([]byte{}, certPEM...), keyPEM...))
	enc := filepath.Join(dir, "enc.key")
	writeAtomic(t, enc, pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte("not really")}))
	other := newCA(t, "another-ca")
	otherPEM := filepath.Join(dir, "other-ca.pem")
	writeAtomic(t, otherPEM, other.PEM)

	for _, tc := range []struct {
		name string
		url  string
		tls  coopr.TLS
		want string
	}{
		{"plain http", "http://127.0.0.1:1", coopr.TLS{CAFile: caFile}, "apply to an https:// server"},
		{"no such CA file", srv.URL(), coopr.TLS{CAFile: filepath.Join(dir, "nope.pem")}, "reading the CA bundle (--coopr-ca)"},
		{"CA file without certificates", srv.URL(), coopr.TLS{CAFile: keyFile}, "holds no PEM certificate"},
		{"key without certificate", srv.URL(), coopr.TLS{KeyFile: keyFile}, "--coopr-key needs --coopr-cert"},
		{"encrypted key", srv.URL(), coopr.TLS{CertFile: certFile, KeyFile: enc}, "is encrypted (Coopr's trust.cert.pass)"},
		{"mismatched pair", srv.URL(), coopr.TLS{CertFile: certFile, KeyFile: caFile}, "do not load"},
	} {
		_, err := coopr.New(coopr.Config{ServerURL: tc.url, TLS: tc.tls, Runner: &runner{}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Coopr's trust.cert.path: one file with the certificate and its key.
	if _, err := coopr.New(coopr.Config{ServerURL: srv.URL(), TLS: coopr.TLS{CAFile: caFile, CertFile: both}, Runner: &runner{}}); err != nil {
		t.Errorf("certificate and key in one file: %v", err)
	}

	for _, tc := range []struct {
		name string
		tls  coopr.TLS
		want string
	}{
		{"no client certificate", coopr.TLS{CAFile: caFile}, "refused this provisioner's client certificate"},
		{"server CA not trusted", coopr.TLS{CAFile: otherPEM, CertFile: certFile, KeyFile: keyFile}, "name it with --coopr-ca"},
	} {
		var logs syncBuffer
		startWith(t, srv, coopr.Config{TLS: tc.tls, Runner: &runner{}, ID: "loom-" + strings.ReplaceAll(tc.name, " ", "-"), Logger: logTo(&logs)})
		eventually(t, tc.name+" logged", func() bool { return strings.Contains(logs.String(), tc.want) })
		if _, ok := srv.Provisioner("loom-" + strings.ReplaceAll(tc.name, " ", "-")); ok {
			t.Errorf("%s: registered anyway", tc.name)
		}
	}
}
