package coopr

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// TLS configures the connection to an https:// Coopr server: the CAs
// that sign its certificate and the client certificate it may require
// (Coopr's trust.cert.path, one PEM holding the certificate and its key,
// works as CertFile alone).
type TLS struct {
	// CAFile is a PEM bundle of the CAs that sign the server's
	// certificate. Empty means the system's roots.
	CAFile string
	// CertFile is the client certificate (PEM, chain allowed). Empty
	// means no client certificate.
	CertFile string
	// KeyFile is CertFile's private key (PEM, unencrypted). Empty means
	// the key is in CertFile.
	KeyFile string
}

// Check loads the files as New will, so flags can be refused before
// anything starts.
func (c TLS) Check() error {
	_, err := c.clientConfig(slog.New(slog.NewTextHandler(io.Discard, nil)))
	return err
}

func (c TLS) empty() bool { return c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" }

// clientConfig loads the CAs and the client pair now, so a bad file stops
// loomd at start with a clear error. The client pair is read again when
// its files change, so a renewed certificate is used from the next
// connection on without a restart.
func (c TLS) clientConfig(log *slog.Logger) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		data, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("coopr: reading the CA bundle (--coopr-ca): %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("coopr: --coopr-ca %s holds no PEM certificate (want -----BEGIN CERTIFICATE----- blocks)", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.KeyFile != "" && c.CertFile == "" {
		return nil, errors.New("coopr: --coopr-key needs --coopr-cert (the client certificate it belongs to)")
	}
	if c.CertFile != "" {
		kp := &keyPair{certFile: c.CertFile, keyFile: c.KeyFile, log: log}
		if kp.keyFile == "" {
			kp.keyFile = c.CertFile
		}
		if err := kp.load(); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = kp.get
	}
	return cfg, nil
}

// keyPair is a client certificate reloaded when its files change.
type keyPair struct {
	certFile, keyFile string
	log               *slog.Logger

	mu       sync.Mutex
	cert     *tls.Certificate
	stamp    string // the files' sizes and mtimes when loaded
	failedAt string // the stamp whose reload failed (logged once)
}

func (k *keyPair) filesStamp() string {
	var b strings.Builder
	for _, f := range []string{k.certFile, k.keyFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

func (k *keyPair) load() error {
	stamp := k.filesStamp()
	certPEM, err := os.ReadFile(k.certFile)
	if err != nil {
		return fmt.Errorf("coopr: reading the client certificate (--coopr-cert): %w", err)
	}
	keyPEM := certPEM
	if k.keyFile != k.certFile {
		if keyPEM, err = os.ReadFile(k.keyFile); err != nil {
			return fmt.Errorf("coopr: reading the client key (--coopr-key): %w", err)
		}
	}
	if encryptedPEM(keyPEM) {
		return fmt.Errorf("coopr: the client key in %s is encrypted (Coopr's trust.cert.pass); loomd reads unencrypted keys only: "+
			"decrypt it once (openssl pkey -in KEY -out KEY.plain), keep that file readable by loomd only (mode 0600), and pass it as --coopr-key", k.keyFile)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		where := k.certFile
		if k.keyFile != k.certFile {
			where += " and " + k.keyFile
		}
		return fmt.Errorf("coopr: the client certificate and key in %s do not load: %w (--coopr-cert is the PEM certificate, --coopr-key its PEM key; one file may hold both)", where, err)
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		k.log.Warn("coopr: the client certificate has expired; the Coopr server will refuse it", "cert", k.certFile, "not_after", cert.Leaf.NotAfter)
	}
	k.mu.Lock()
	k.cert, k.stamp = &cert, stamp
	k.mu.Unlock()
	return nil
}

// get is tls.Config.GetClientCertificate: the current pair, reloaded
// first when its files changed. A reload that fails keeps the previous
// pair (a rotation caught half-written) and says so once.
func (k *keyPair) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	stamp := k.filesStamp()
	k.mu.Lock()
	changed := stamp != k.stamp && stamp != k.failedAt
	k.mu.Unlock()
	if changed {
		if err := k.load(); err != nil {
			k.mu.Lock()
			k.failedAt = stamp
			k.mu.Unlock()
			k.log.Error("coopr: the client certificate changed on disk but does not load; still using the previous one", "err", err)
		} else {
			k.log.Info("coopr: client certificate reloaded", "cert", k.certFile)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cert, nil
}

// encryptedPEM reports whether a PEM holds an encrypted private key
// (legacy Proc-Type headers or PKCS#8 ENCRYPTED PRIVATE KEY).
func encryptedPEM(data []byte) bool {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return false
		}
		if b.Type == "ENCRYPTED PRIVATE KEY" || (strings.HasSuffix(b.Type, "PRIVATE KEY") && strings.Contains(b.Headers["Proc-Type"], "ENCRYPTED")) {
			return true
		}
	}
}

// newClient is the HTTP client toward the server: the default transport
// (proxies from the environment, keep-alives) with the TLS settings.
func newClient(c TLS, log *slog.Logger) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if !c.empty() {
		cfg, err := c.clientConfig(log)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: tr}, nil
}

// certAlerts are the TLS alerts a server sends about the client's
// certificate (RFC 8446 §6.2): bad, unsupported, revoked, expired,
// unknown, unknown CA, required.
var certAlerts = map[uint8]bool{42: true, 43: true, 44: true, 45: true, 46: true, 48: true, 116: true}

// tlsHint says what to do about a TLS failure toward the server, or "".
func tlsHint(err error) string {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var re tls.AlertError
	msg := err.Error()
	switch {
	case errors.As(err, &ua):
		return "the server's certificate is signed by a CA this host does not trust: name it with --coopr-ca"
	case errors.As(err, &hn):
		return "the server's certificate does not name the host in --coopr-server: use a name it lists"
	case errors.As(err, &ci):
		return "the server's certificate is not valid now (expired, or not yet valid)"
	case errors.As(err, &re) && certAlerts[uint8(re)], strings.Contains(msg, "tls: certificate required"), strings.Contains(msg, "tls: bad certificate"),
		strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: expired certificate"):
		// net/http does not always wrap the alert: the words are matched too.
		return "the server refused this provisioner's client certificate (or needs one): check --coopr-cert and --coopr-key against the CAs the server trusts"
	case strings.Contains(msg, "http: server gave HTTP response to HTTPS client"):
		return "the server speaks plain HTTP: use http:// in --coopr-server"
	case strings.Contains(msg, "malformed HTTP response") && strings.Contains(msg, `\x15\x03`):
		return "the server speaks TLS: use https:// in --coopr-server"
	}
	return ""
}
