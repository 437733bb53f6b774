package ssh

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/loomrt/loom/bindings"
)

// Host-key policies.
const (
	policyStrict   = "strict"   // pinned keys ∪ known_hosts ∪ @cert-authority
	policyPinned   = "pinned"   // only the pinned keys
	policyTOFU     = "tofu"     // strict, but an unknown host is trusted once and recorded
	policyInsecure = "insecure" // anything (tests only; needs Options.AllowInsecure)
)

// hostKeyConfig is a connection's host-key policy.
type hostKeyConfig struct {
	policy string
	pinned []ssh.PublicKey // keys from key lines or base64 blobs
	pinFPs []string        // "SHA256:..." fingerprints
	files  []string        // extra known_hosts files (resolved local paths)
}

// hash identifies the policy in the pool key.
func (hk hostKeyConfig) hash() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", hk.policy)
	var pins []string
	for _, k := range hk.pinned {
		pins = append(pins, string(k.Marshal()))
	}
	pins = append(pins, hk.pinFPs...)
	sort.Strings(pins)
	for _, p := range append(pins, hk.files...) {
		fmt.Fprintf(h, "%s\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// parseHostKeyConfig reads host_key = {policy=, pinned=, known_hosts=}.
func (m *module) parseHostKeyConfig(t *lua.LTable, where string) (hostKeyConfig, error) {
	f := newFields(t, where)
	hk := hostKeyConfig{policy: f.str("policy")}
	pins := f.stringList("pinned")
	files := f.stringList("known_hosts")
	if err := f.done(); err != nil {
		return hk, err
	}
	if hk.policy == "" {
		hk.policy = policyStrict
		if len(pins) > 0 {
			hk.policy = policyPinned
		}
	}
	switch hk.policy {
	case policyStrict, policyPinned:
	case policyTOFU:
		if !m.b.opts.AllowTOFU {
			return hk, bindings.Errorf("permission", "%s: policy \"tofu\" is not enabled on this daemon (it needs the AllowTOFU option)", where)
		}
		if m.b.opts.TOFUFile == "" {
			return hk, bindings.Errorf("config", "%s: policy \"tofu\" needs a TOFU file (Options.TOFUFile or KnownHosts)", where)
		}
	case policyInsecure:
		if !m.b.opts.AllowInsecure {
			return hk, bindings.Errorf("permission", "%s: policy \"insecure\" is not enabled on this daemon (it needs the AllowInsecure option)", where)
		}
	default:
		return hk, bindings.Errorf("config", "%s: unknown policy %q (want strict, pinned, tofu or insecure)", where, hk.policy)
	}
	for i, p := range pins {
		k, fp, err := parsePin(p)
		if err != nil {
			return hk, bindings.Errorf("config", "%s.pinned[%d]: %v", where, i+1, err)
		}
		if k != nil {
			hk.pinned = append(hk.pinned, k)
		} else {
			hk.pinFPs = append(hk.pinFPs, fp)
		}
	}
	if hk.policy == policyPinned && len(hk.pinned)+len(hk.pinFPs) == 0 {
		return hk, bindings.Errorf("config", "%s: policy \"pinned\" with no pinned keys", where)
	}
	for _, file := range files {
		p, err := resolveLocal(m.h, file, false)
		if err != nil {
			return hk, err
		}
		hk.files = append(hk.files, p)
	}
	return hk, nil
}

// parsePin accepts "SHA256:<fp>", an authorized_keys-style line
// ("ssh-ed25519 AAAA... comment") or a bare base64 key blob (the format of
// Coopr's config.ssh_host_keys values).
func parsePin(p string) (ssh.PublicKey, string, error) {
	p = strings.TrimSpace(p)
	if strings.HasPrefix(p, "SHA256:") {
		return nil, p, nil
	}
	if k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(p)); err == nil {
		return k, "", nil
	}
	blob, err := base64.StdEncoding.DecodeString(p)
	if err != nil {
		return nil, "", errors.New("want \"SHA256:...\", a key line or a base64 key blob")
	}
	k, err := ssh.ParsePublicKey(blob)
	if err != nil {
		return nil, "", fmt.Errorf("not a public key: %v", err)
	}
	return k, "", nil
}

// pinsFromMap reads Coopr's config.ssh_host_keys ({"rsa": "<blob>", ...}).
func pinsFromMap(t *lua.LTable) ([]string, error) {
	var pins []string
	var err error
	t.ForEach(func(k, v lua.LValue) {
		s, ok := v.(lua.LString)
		if !ok && err == nil {
			err = fmt.Errorf("ssh_host_keys.%s: want a string, got %s", k, v.Type())
			return
		}
		if ok && strings.TrimSpace(string(s)) != "" {
			pins = append(pins, string(s))
		}
	})
	sort.Strings(pins)
	return pins, err
}

// verifier is the host-key check for one dial. It remembers why it
// rejected a key, so the dial error can say "host_key" and not just
// "handshake failed".
type verifier struct {
	b      *Binding
	cfg    *connConfig
	hk     hostKeyConfig
	files  []string // known_hosts files in force
	known  []knownhosts.KnownKey
	cas    bool // an @cert-authority line matches this host
	logger *slog.Logger

	mu  sync.Mutex
	err *bindings.Error
}

// newVerifier loads what is known about the host. It reads the
// known_hosts files once per dial, so keys added by TOFU (or by an
// operator) take effect without a restart.
func (b *Binding) newVerifier(cfg *connConfig, logger *slog.Logger) (*verifier, error) {
	v := &verifier{b: b, cfg: cfg, hk: cfg.hostKey, logger: logger}
	if v.hk.policy == policyPinned || v.hk.policy == policyInsecure {
		return v, nil
	}
	candidates := append(append([]string{}, b.opts.KnownHosts...), v.hk.files...)
	if b.opts.TOFUFile != "" {
		candidates = append(candidates, b.opts.TOFUFile)
	}
	seen := map[string]bool{}
	for _, f := range candidates {
		if seen[f] {
			continue
		}
		seen[f] = true
		if _, err := os.Stat(f); err == nil {
			v.files = append(v.files, f)
		}
	}
	if len(v.files) == 0 {
		return v, nil
	}
	cb, err := knownhosts.New(v.files...)
	if err != nil {
		return nil, bindings.Errorf("config", "reading known_hosts: %v", err)
	}
	addr := cfg.addr()
	remote := fakeAddr(addr)
	// Ask the database what it knows by showing it a key no host has.
	var ke *knownhosts.KeyError
	if err := cb(addr, remote, b.probe); errors.As(err, &ke) {
		v.known = ke.Want
	}
	// Does any @cert-authority line cover this host? Show it a fake host
	// certificate signed by each CA: "no authorities" means no.
	for _, ca := range certAuthorities(v.files) {
		cert := &ssh.Certificate{Key: b.probe, CertType: ssh.HostCert, SignatureKey: ca}
		if err := cb(addr, remote, cert); err != nil && !strings.Contains(err.Error(), "no authorities for hostname") {
			v.cas = true
			break
		}
	}
	return v, nil
}

// certAuthorities lists the CA keys of @cert-authority lines.
func certAuthorities(files []string) []ssh.PublicKey {
	var cas []ssh.PublicKey
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for len(data) > 0 {
			marker, _, key, _, rest, err := ssh.ParseKnownHosts(data)
			if err != nil {
				break
			}
			if marker == "cert-authority" {
				cas = append(cas, key)
			}
			data = rest
		}
	}
	return cas
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }

// algorithms derives HostKeyAlgorithms from the keys known for the host,
// so the server presents a key we can check (golang/go#29286: with only an
// ed25519 key in known_hosts, Go's default order asks for ECDSA first and
// reports a false mismatch). Unknown hosts get a modern default order.
func (v *verifier) algorithms() []string {
	var types []string
	for _, k := range v.hk.pinned {
		types = append(types, k.Type())
	}
	for _, k := range v.known {
		types = append(types, k.Key.Type())
	}
	var out []string
	seen := map[string]bool{}
	add := func(algs ...string) {
		for _, a := range algs {
			if !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
		}
	}
	if v.cas {
		add(ssh.CertAlgoED25519v01, ssh.CertAlgoECDSA256v01, ssh.CertAlgoECDSA384v01, ssh.CertAlgoECDSA521v01,
			ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01)
	}
	for _, t := range types {
		add(algorithmsForKeyType(t)...)
	}
	if len(out) == 0 || len(v.hk.pinFPs) > 0 {
		add(ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521,
			ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256)
	}
	return out
}

func algorithmsForKeyType(t string) []string {
	switch t {
	case ssh.KeyAlgoRSA:
		// OpenSSH >= 8.8 no longer signs with SHA-1 "ssh-rsa".
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	case ssh.CertAlgoRSAv01:
		return []string{ssh.CertAlgoRSASHA512v01, ssh.CertAlgoRSASHA256v01, ssh.CertAlgoRSAv01}
	default:
		return []string{t}
	}
}

// fingerprint is "ssh-ed25519 SHA256:..." (for a cert, the cert's key).
func fingerprint(k ssh.PublicKey) string {
	if c, ok := k.(*ssh.Certificate); ok {
		return c.Type() + " " + ssh.FingerprintSHA256(c.Key)
	}
	return k.Type() + " " + ssh.FingerprintSHA256(k)
}

// callback is the ssh.HostKeyCallback for this dial.
func (v *verifier) callback(hostname string, remote net.Addr, key ssh.PublicKey) error {
	err := v.check(hostname, remote, key)
	if err != nil {
		v.mu.Lock()
		v.err = err
		v.mu.Unlock()
		return err
	}
	return nil
}

func (v *verifier) rejected() *bindings.Error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.err
}

func (v *verifier) check(hostname string, remote net.Addr, key ssh.PublicKey) *bindings.Error {
	if v.hk.policy == policyInsecure {
		v.logger.Warn("ssh host key NOT verified (insecure policy)", "host", v.cfg.addr(), "user", v.cfg.user,
			"presented", fingerprint(key))
		return nil
	}
	fp := ssh.FingerprintSHA256(key)
	for _, p := range v.hk.pinned {
		if bytes.Equal(p.Marshal(), key.Marshal()) {
			return nil
		}
	}
	for _, p := range v.hk.pinFPs {
		if p == fp {
			return nil
		}
	}
	var expected []string
	for _, p := range v.hk.pinned {
		expected = append(expected, fingerprint(p)+" (pinned)")
	}
	for _, p := range v.hk.pinFPs {
		expected = append(expected, p+" (pinned)")
	}
	if v.hk.policy == policyPinned {
		return v.mismatch(key, expected)
	}
	if len(v.files) > 0 {
		cb, err := knownhosts.New(v.files...)
		if err != nil {
			return v.cfg.connError("host_key", "reading known_hosts: %v", err)
		}
		err = cb(hostname, remote, key)
		var ke *knownhosts.KeyError
		var re *knownhosts.RevokedError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &re):
			return v.cfg.connError("host_key", "host key %s is marked @revoked in %s:%d", fingerprint(key), re.Revoked.Filename, re.Revoked.Line)
		case errors.As(err, &ke):
			for _, w := range ke.Want {
				expected = append(expected, fmt.Sprintf("%s (%s:%d)", fingerprint(w.Key), w.Filename, w.Line))
			}
		default:
			// For example a host certificate not signed by a trusted CA.
			return v.cfg.connError("host_key", "host key %s rejected: %v", fingerprint(key), err)
		}
	}
	if len(expected) > 0 {
		return v.mismatch(key, expected)
	}
	if v.hk.policy == policyTOFU {
		return v.trustOnFirstUse(key)
	}
	e := v.cfg.connError("host_key", "host key verification failed: the host is unknown (no pinned key, not in known_hosts %v); it presented %s. Add it to known_hosts or pin it",
		v.files, fingerprint(key))
	e.Fields["presented"] = fp
	return e
}

func (v *verifier) mismatch(key ssh.PublicKey, expected []string) *bindings.Error {
	e := v.cfg.connError("host_key", "HOST KEY MISMATCH: the server presented %s but the trusted key(s) are %s. If the host was rebuilt, update the pinned keys or known_hosts; otherwise someone may be intercepting the connection",
		fingerprint(key), strings.Join(expected, ", "))
	e.Fields["presented"] = ssh.FingerprintSHA256(key)
	e.Fields["expected"] = expected
	return e
}

// tofuWriter serialises TOFU appends within the process; a file lock
// serialises them across processes.
type tofuWriter struct{ mu sync.Mutex }

// trustOnFirstUse records an unknown host's key in the TOFU file, unless
// another connection recorded one meanwhile (then that one must match).
func (v *verifier) trustOnFirstUse(key ssh.PublicKey) *bindings.Error {
	file := v.b.opts.TOFUFile
	v.b.tofu.mu.Lock()
	defer v.b.tofu.mu.Unlock()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return v.cfg.connError("host_key", "tofu: creating the dir of %s: %v", file, err)
	}
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return v.cfg.connError("host_key", "tofu: opening %s: %v", file, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return v.cfg.connError("host_key", "tofu: locking %s: %v", file, err)
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	addr := v.cfg.addr()
	if cb, err := knownhosts.New(file); err == nil {
		var ke *knownhosts.KeyError
		err := cb(addr, fakeAddr(addr), key)
		if err == nil {
			return nil // recorded by a concurrent dial
		}
		if errors.As(err, &ke) && len(ke.Want) > 0 {
			var expected []string
			for _, w := range ke.Want {
				expected = append(expected, fmt.Sprintf("%s (%s:%d)", fingerprint(w.Key), w.Filename, w.Line))
			}
			return v.mismatch(key, expected)
		}
	}
	line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n"
	if _, err := f.WriteString(line); err != nil {
		return v.cfg.connError("host_key", "tofu: writing %s: %v", file, err)
	}
	v.logger.Warn("ssh host key trusted on first use", "host", addr, "user", v.cfg.user,
		"key", fingerprint(key), "file", file)
	return nil
}
