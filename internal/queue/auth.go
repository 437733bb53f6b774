package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// NkeyFileName is the file under the data directory holding the nkey seed
// the embedded server requires from every client, loomd's own included.
const NkeyFileName = "nats.nk"

// embeddedAuth says how the embedded server authenticates clients and how
// loomd's own in-process client proves itself.
type embeddedAuth struct {
	nkeyFile string        // the seed file; "" with a token
	pub      string        // the seed's public key (server side)
	client   []nats.Option // the in-process client's credentials
	nkeys    []*server.NkeyUser
}

// newEmbeddedAuth loads or creates the credentials of the embedded server.
// With an operator-chosen token, the server requires that token (token
// and nkey authentication cannot be mixed in one NATS server). Otherwise it
// requires the nkey whose seed is in cfg.NkeyFile, or in
// <data>/nats.nk, generated on first start with mode 0600. An nkey never
// travels on the wire: the client signs a nonce the server sends.
func newEmbeddedAuth(cfg Config) (embeddedAuth, error) {
	if cfg.Token != "" {
		return embeddedAuth{client: []nats.Option{nats.Token(cfg.Token)}}, nil
	}
	path := cfg.NkeyFile
	if path == "" {
		path = filepath.Join(cfg.DataDir, NkeyFileName)
		if err := ensureSeedFile(path); err != nil {
			return embeddedAuth{}, err
		}
	}
	kp, err := loadSeed(path)
	if err != nil {
		return embeddedAuth{}, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return embeddedAuth{}, fmt.Errorf("nkey seed %s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	sign := func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }
	return embeddedAuth{
		nkeyFile: abs,
		pub:      pub,
		client:   []nats.Option{nats.Nkey(pub, sign)},
		nkeys:    []*server.NkeyUser{{Nkey: pub}},
	}, nil
}

// ensureSeedFile creates a user nkey seed at path (mode 0600) unless the
// file exists. O_EXCL keeps two racing starts from writing different keys.
func ensureSeedFile(path string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		return fmt.Errorf("generating the nats nkey for %s: %w", path, err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("generating the nats nkey for %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the nats nkey seed %s: %w (is the data directory writable?)", path, err)
	}
	_, err = f.Write(append(seed, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("writing the nats nkey seed %s: %w", path, err)
	}
	return nil
}

// loadSeed reads a user nkey seed file, refusing one that other users can
// read: whoever holds the seed can read and forge every task.
func loadSeed(path string) (nkeys.KeyPair, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("nats nkey seed: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("nats nkey seed %s is readable by other users (mode %#o): whoever reads it can read and forge tasks; run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the nats nkey seed: %w", err)
	}
	kp, err := parseSeed(b)
	if err != nil {
		return nil, fmt.Errorf("nats nkey seed %s: %w (want a user seed starting with SU, as written by loomd or nsc)", path, err)
	}
	return kp, nil
}

// parseSeed finds the user seed in b: the whole file, or the first line
// starting with "SU" (files written by nk or nsc carry comments).
func parseSeed(b []byte) (nkeys.KeyPair, error) {
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "SU") {
			return nkeys.FromSeed([]byte(line))
		}
	}
	return nil, errors.New("no user seed found")
}

// clientAuth turns the credentials of cfg into options for a client of an
// external NATS. The secrets stay in the options; errors name files, never
// their contents.
func clientAuth(cfg Config) ([]nats.Option, error) {
	var opts []nats.Option
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if cfg.User != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.NkeyFile != "" {
		kp, err := loadSeed(cfg.NkeyFile)
		if err != nil {
			return nil, err
		}
		pub, err := kp.PublicKey()
		if err != nil {
			return nil, fmt.Errorf("nats nkey seed %s: %w", cfg.NkeyFile, err)
		}
		opts = append(opts, nats.Nkey(pub, func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) }))
	}
	if cfg.CredsFile != "" {
		if _, err := os.Stat(cfg.CredsFile); err != nil {
			return nil, fmt.Errorf("nats credentials file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.TLSCA != "" {
		if _, err := os.Stat(cfg.TLSCA); err != nil {
			return nil, fmt.Errorf("nats TLS CA file: %w", err)
		}
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	if cfg.TLSCert != "" {
		for _, f := range []string{cfg.TLSCert, cfg.TLSKey} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("nats TLS client certificate: %w", err)
			}
		}
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	return opts, nil
}

// validateAuth checks that the credentials in cfg fit its mode.
func (c Config) validateAuth() []error {
	var errs []error
	n := 0
	for _, set := range []bool{c.Token != "", c.User != "", c.NkeyFile != "", c.CredsFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		errs = append(errs, errors.New("several NATS credentials given (token, user, nkey, creds file): give one"))
	}
	if c.Password != "" && c.User == "" {
		errs = append(errs, errors.New("a NATS password needs a NATS user"))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("a NATS TLS client certificate needs both the certificate and its key"))
	}
	if len(c.URLs) == 0 {
		if c.User != "" || c.CredsFile != "" {
			errs = append(errs, errors.New("NATS user/password and creds files are for an external NATS (--nats); the embedded server requires the nkey in <data>/"+NkeyFileName+" (or --nats-nkey), or --nats-token"))
		}
		if c.TLSCA != "" || c.TLSCert != "" {
			errs = append(errs, errors.New("NATS TLS files are for an external NATS (--nats); the embedded server's listener speaks plain NATS (use it on loopback or a trusted network)"))
		}
	}
	return errs
}

// JoinHint tells an operator how another daemon joins this one's embedded
// server, or "" when it does not listen. It names the credential file or
// flag, never the secret.
func (q *Queue) JoinHint() string {
	u := q.ClientURL()
	if u == "" {
		return ""
	}
	if q.auth.nkeyFile == "" {
		return fmt.Sprintf("loomd serve --nats %s with the same --nats-token (LOOM_NATS_TOKEN)", u)
	}
	return fmt.Sprintf("loomd serve --nats %s --nats-nkey FILE, FILE being a copy of %s (mode 0600)", u, q.auth.nkeyFile)
}

// redactURLs joins NATS URLs for messages, with any password or token in
// them replaced by "xxxxx".
func redactURLs(urls []string) string {
	out := make([]string, len(urls))
	for i, s := range urls {
		u, err := url.Parse(s)
		switch {
		case err != nil:
			out[i] = "(unparsable URL)"
		case u.User != nil:
			if _, hasPw := u.User.Password(); hasPw {
				out[i] = u.Redacted()
			} else {
				u.User = url.User("xxxxx") // a token alone in the user part
				out[i] = u.String()
			}
		default:
			out[i] = s
		}
	}
	return strings.Join(out, ",")
}
