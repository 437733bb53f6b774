package http_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/bindingstest"
	loomhttp "github.com/loomrt/loom/bindings/http"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM string
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))}
}

// issue signs a leaf certificate; it returns the PEMs and a tls.Certificate.
func (ca *testCA) issue(t *testing.T, cn string, usage x509.ExtKeyUsage, ips ...net.IP) (certPEM, keyPEM string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyPEM = string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	pair, err = tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

// newTLSServer starts an HTTPS server on 127.0.0.1 with a certificate from
// ca. With clientCA set it requires a client certificate signed by it.
func newTLSServer(t *testing.T, ca, clientCA *testCA) *httptest.Server {
	t.Helper()
	_, _, pair := ca.issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth, net.IPv4(127, 0, 0, 1))
	srv := httptest.NewUnstartedServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		who := "anonymous"
		if len(r.TLS.PeerCertificates) > 0 {
			who = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		io.WriteString(w, "hello "+who)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	if clientCA != nil {
		pool := x509.NewCertPool()
		pool.AddCert(clientCA.cert)
		srv.TLS.ClientCAs = pool
		srv.TLS.ClientAuth = tls.RequireAndVerifyClientCert
	}
	srv.Config.ErrorLog = discardLogger()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func TestTLSWithPrivateCA(t *testing.T) {
	ca := newCA(t, "loom test CA")
	srv := newTLSServer(t, ca, nil)
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL, "CA": ca.certPEM, "OTHER_CA": newCA(t, "other CA").certPEM})

	e.run(t, `assert(http.get(URL, {tls = {ca = CA}}).body == "hello anonymous")`)
	// Same TLS options again: the cached transport is reused.
	e.run(t, `assert(http.get(URL, {tls = {ca = CA}}).status == 200)`)
	if n := e.b.Stats()["transports"]; n != 1 {
		t.Errorf("cached transports = %v, want 1", n)
	}

	for _, code := range []string{
		`http.get(URL)`, // system roots do not know the test CA
		`http.get(URL, {tls = {ca = OTHER_CA}, retries = 2})`, // wrong CA; certificate errors are not retried
	} {
		le := e.runErr(t, code)
		if le.Kind != "connect" || !strings.Contains(le.Message, "GET "+srv.URL) || !strings.Contains(le.Message, "certificate") {
			t.Errorf("%s: got %s: %s", code, le.Kind, le.Message)
		}
		if strings.Contains(le.Message, "attempts") {
			t.Errorf("%s: a certificate error was retried: %s", code, le.Message)
		}
	}
}

func TestTLSInsecureSkipVerifyIsLogged(t *testing.T) {
	ca := newCA(t, "loom test CA")
	srv := newTLSServer(t, ca, nil)
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL})
	e.run(t, `assert(http.get(URL, {tls = {insecure_skip_verify = true}}).status == 200)`)
	logs := e.h.Logs()
	if !strings.Contains(logs, `"level":"WARN"`) || !strings.Contains(logs, "insecure_skip_verify") {
		t.Errorf("no warning logged for insecure_skip_verify:\n%s", logs)
	}
}

func TestMutualTLS(t *testing.T) {
	ca := newCA(t, "server CA")
	clientCA := newCA(t, "client CA")
	srv := newTLSServer(t, ca, clientCA)
	certPEM, keyPEM, _ := clientCA.issue(t, "loom-worker", x509.ExtKeyUsageClientAuth)
	e := newEnv(t, loomhttp.Options{})
	e.set(map[string]string{"URL": srv.URL, "CA": ca.certPEM, "CERT": certPEM, "KEY": keyPEM})

	e.run(t, `
		local r = http.get(URL, {tls = {ca = CA, client_cert = CERT, client_key = KEY}})
		assert(r.body == "hello loom-worker", r.body)
	`)
	le := e.runErr(t, `http.get(URL, {tls = {ca = CA}})`)
	if le.Kind != "connect" {
		t.Errorf("without a client certificate: got %s: %s", le.Kind, le.Message)
	}
	secrets := strings.Join(e.h.Secrets(), "\n")
	if !strings.Contains(secrets, keyPEM) {
		t.Errorf("client_key was not registered as a secret")
	}
	if strings.Contains(e.h.Logs(), "PRIVATE KEY") || strings.Contains(le.Message, "PRIVATE KEY") {
		t.Errorf("key material leaked")
	}
}

// TestConcurrentVMs runs several VMs on goroutines against one binding,
// mixing plain and TLS calls, so that -race checks the shared transports
// and the transport cache.
func TestConcurrentVMs(t *testing.T) {
	ca := newCA(t, "loom test CA")
	tlsSrv := newTLSServer(t, ca, nil)
	plain := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		io.WriteString(w, `{"n":1}`)
	}))
	defer plain.Close()
	b := loomhttp.New(loomhttp.Options{MaxTransports: 2})
	defer b.Close()

	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		h := bindingstest.NewHost(t)
		L := bindingstest.NewState(t, h, b)
		L.SetGlobal("PLAIN", lua.LString(plain.URL))
		L.SetGlobal("TLS", lua.LString(tlsSrv.URL))
		L.SetGlobal("CA", lua.LString(ca.certPEM))
		L.SetGlobal("NAME", lua.LString(fmt.Sprintf("127.0.0.%d", i%3+1)))
		go func() {
			errs <- L.DoString(`
				local http = require("loom.http")
				for i = 1, 10 do
					assert(http.get(PLAIN):json().n == 1)
					-- three distinct TLS configs (server_name differs) through a cache of two
					local ok, err = pcall(http.get, TLS, {tls = {ca = CA, server_name = NAME}})
					assert(ok or err.kind == "connect", tostring(err))
				end
			`)
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n := b.Stats()["transports"]; n > 2 {
		t.Errorf("transport cache holds %v, bound is 2", n)
	}
}
