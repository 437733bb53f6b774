package ssh

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/localpath"
)

// maxKeyFile bounds a key_file: private keys and certificates are a few KiB.
const maxKeyFile = 1 << 20

// connConfig is a parsed ssh.connect table. It never leaves the binding:
// it holds secrets.
type connConfig struct {
	host string
	port int
	user string

	password string
	signer   ssh.Signer // from key / key_file (+ passphrase), maybe a cert signer

	hostKey hostKeyConfig
	jump    *connConfig

	connectTimeout   time.Duration
	handshakeTimeout time.Duration
	keepalive        time.Duration
	keepaliveMax     int

	// private connections (reuse=false) get a pool key of their own and
	// close with conn:close().
	private bool
}

// addr is host:port as dialled.
func (c *connConfig) addr() string { return net.JoinHostPort(c.host, strconv.Itoa(c.port)) }

// String is user@host:port, the way errors name a connection.
func (c *connConfig) String() string { return c.user + "@" + c.addr() }

// errFields are the fields every connection error carries.
func (c *connConfig) errFields() map[string]any {
	return map[string]any{"host": c.host, "port": c.port, "user": c.user}
}

// connError builds a structured error naming the connection.
func (c *connConfig) connError(kind, format string, args ...any) *bindings.Error {
	e := bindings.Errorf(kind, "ssh %s: %s", c, fmt.Sprintf(format, args...))
	e.Fields = c.errFields()
	return e
}

// parseConnConfig reads an ssh.connect table. Secrets found in it are
// registered with the host before anything can fail and print them.
func (m *module) parseConnConfig(t *lua.LTable, where string, depth int) (*connConfig, error) {
	if depth > 4 {
		return nil, bindings.Errorf("config", "%s: jump chain deeper than 4 hosts", where)
	}
	// Secrets first, so that no later error path can leak them.
	for _, k := range []string{"password", "passphrase", "key"} {
		if s, ok := t.RawGetString(k).(lua.LString); ok {
			m.addSecret(string(s))
		}
	}
	o := m.b.opts
	f := newFields(t, where)
	c := &connConfig{
		host:             f.str("host"),
		port:             f.integer("port", 22),
		user:             f.str("user"),
		password:         f.str("password"),
		connectTimeout:   f.duration("connect_timeout", o.ConnectTimeout),
		handshakeTimeout: f.duration("handshake_timeout", o.HandshakeTimeout),
		keepalive:        f.duration("keepalive", o.KeepaliveInterval),
		keepaliveMax:     f.integer("keepalive_max", o.KeepaliveMax),
		private:          !f.boolean("reuse", true),
	}
	key, keyFile, passphrase, cert := f.str("key"), f.str("key_file"), f.str("passphrase"), f.str("cert")
	hk := f.table("host_key")
	jump := f.table("jump")
	if err := f.done(); err != nil {
		return nil, err
	}
	if c.host == "" {
		return nil, bindings.Errorf("config", "%s: host is required", where)
	}
	if c.user == "" {
		return nil, bindings.Errorf("config", "%s: user is required (host %s)", where, c.host)
	}
	if c.port <= 0 || c.port > 65535 {
		return nil, bindings.Errorf("config", "%s: port %d out of range", where, c.port)
	}
	if c.keepaliveMax <= 0 {
		c.keepaliveMax = o.KeepaliveMax
	}
	if key != "" && keyFile != "" {
		return nil, bindings.Errorf("config", "%s: give key or key_file, not both", where)
	}
	if keyFile != "" {
		b, err := localpath.ReadFile(m.h, where+": key_file", keyFile, maxKeyFile)
		if err != nil {
			return nil, err
		}
		key = string(b)
		m.addSecret(key)
	}
	if key != "" {
		s, err := parseSigner(key, passphrase, cert)
		if err != nil {
			return nil, bindings.Errorf("config", "%s: %v", where, err)
		}
		c.signer = s
	} else if cert != "" {
		return nil, bindings.Errorf("config", "%s: cert needs key or key_file", where)
	}
	if c.signer == nil && c.password == "" {
		return nil, bindings.Errorf("config", "%s: no credentials: give password, key or key_file", where)
	}
	var err error
	if c.hostKey, err = m.parseHostKeyConfig(hk, where+".host_key"); err != nil {
		return nil, err
	}
	if jump != nil {
		if c.jump, err = m.parseConnConfig(jump, where+".jump", depth+1); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// addSecret registers s and each line of it (a PEM key's body lines could
// otherwise show up alone in some output).
func (m *module) addSecret(s string) {
	if s == "" {
		return
	}
	m.h.AddSecret(s)
	if strings.Contains(s, "\n") {
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
				m.h.AddSecret(line)
			}
		}
	}
}

// parseSigner parses a private key (OpenSSH, PKCS#1/8, EC PEM), with an
// optional passphrase and an optional OpenSSH user certificate.
func parseSigner(key, passphrase, cert string) (ssh.Signer, error) {
	var (
		s   ssh.Signer
		err error
	)
	if passphrase != "" {
		s, err = ssh.ParsePrivateKeyWithPassphrase([]byte(key), []byte(passphrase))
	} else {
		s, err = ssh.ParsePrivateKey([]byte(key))
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errors.New("the private key is encrypted and no passphrase was given")
	case err != nil && passphrase != "":
		// x/crypto reports a wrong passphrase as "x509: decryption password incorrect".
		return nil, errors.New("cannot decrypt the private key: wrong passphrase or unsupported format")
	case err != nil:
		return nil, errors.New("cannot parse the private key (want OpenSSH or PEM format)")
	}
	if cert == "" {
		return s, nil
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(cert))
	if err != nil {
		return nil, fmt.Errorf("parsing cert: %v", err)
	}
	c, ok := pub.(*ssh.Certificate)
	if !ok {
		return nil, errors.New("cert is a plain public key, not an OpenSSH certificate")
	}
	cs, err := ssh.NewCertSigner(c, s)
	if err != nil {
		return nil, fmt.Errorf("cert does not match the key: %v", err)
	}
	return cs, nil
}

// errPasswordRejected stops keyboard-interactive from retrying a password
// that the "password" method already got rejected (each try costs sshd's
// PAM delay, ~3 s).
var errPasswordRejected = errors.New("password rejected")

// authMethods builds fresh auth methods for one dial: key first, then the
// password, then keyboard-interactive answering with the password (for
// PAM-only servers), but never trying the password twice.
func (c *connConfig) authMethods() []ssh.AuthMethod {
	var methods []ssh.AuthMethod
	if c.signer != nil {
		methods = append(methods, ssh.PublicKeys(c.signer))
	}
	if c.password != "" {
		var tried atomic.Bool
		pw := c.password
		methods = append(methods,
			ssh.PasswordCallback(func() (string, error) { tried.Store(true); return pw, nil }),
			ssh.KeyboardInteractive(func(_, _ string, questions []string, _ []bool) ([]string, error) {
				if len(questions) == 0 {
					return nil, nil
				}
				if tried.Swap(true) {
					return nil, errPasswordRejected
				}
				answers := make([]string, len(questions))
				for i := range answers {
					answers[i] = pw
				}
				return answers, nil
			}))
	}
	return methods
}

// identity is a keyed hash of the credentials: connections made with
// different credentials never share a pool entry, and the key cannot be
// brute-forced back to a password (the salt is per process and secret).
func (c *connConfig) identity(salt []byte) string {
	h := hmac.New(sha256.New, salt)
	fmt.Fprintf(h, "pw\x00%s\x00", c.password)
	if c.signer != nil {
		h.Write(c.signer.PublicKey().Marshal())
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// poolKey identifies connections that may be shared.
func (c *connConfig) poolKey(salt []byte) string {
	var b strings.Builder
	for cc := c; cc != nil; cc = cc.jump {
		if cc != c {
			b.WriteString(" via ")
		}
		fmt.Fprintf(&b, "%s id=%s hk=%s", cc, cc.identity(salt), cc.hostKey.hash())
	}
	return b.String()
}
