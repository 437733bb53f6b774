// Package tokens holds the bearer tokens loomd's HTTP API and web console
// accept, and what each may do: an admin token reaches every tenant and
// the daemon's own endpoints (metrics, pprof); a tenant token reaches only
// its tenant's tasks, calls and clusters; either may be read-only. The
// tokens come from --token (one admin token) and a tokens file
// (--tokens-file) that is read again whenever it changes.
//
// A handler asks the request's token (FromContext, set by the API's
// authentication) what it may see with SeesTenant, CanWrite and Admin.
// docs/api.md ("Authentication") describes the file and the rules.
package tokens

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/loomrt/loom/runtime"
)

// MinLength is the shortest token accepted: anything shorter can be
// guessed over the network.
const MinLength = 16

// Token is who a request is: a token's name and scope, never its secret.
type Token struct {
	// Name says which token it is in logs and messages ("ops",
	// "--token").
	Name string `json:"name"`
	// Tenant is the only tenant the token reaches; empty for an admin
	// token, which reaches every tenant.
	Tenant string `json:"tenant,omitempty"`
	// ReadOnly tokens may only read (GET and HEAD).
	ReadOnly bool `json:"readOnly,omitempty"`
}

// Anonymous is the caller of an API without any token configured (a
// loopback daemon without --token or --tokens-file): an admin.
var Anonymous = Token{Name: "anonymous"}

// Admin reports whether the token reaches every tenant and the daemon's
// own endpoints.
func (t Token) Admin() bool { return t.Tenant == "" }

// CanWrite reports whether the token may change anything.
func (t Token) CanWrite() bool { return !t.ReadOnly }

// SeesTenant reports whether the token reaches tenant's tasks, calls and
// clusters. An empty tenant is the daemon's default tenant (a task without
// tenantId runs as loomd's --tenant), passed as def.
func (t Token) SeesTenant(tenant, def string) bool {
	if t.Admin() {
		return true
	}
	if tenant == "" {
		tenant = def
	}
	return tenant == t.Tenant
}

// String describes the token for messages: `token "acme-ci" (tenant acme,
// read-only)`.
func (t Token) String() string {
	scope := "admin"
	if !t.Admin() {
		scope = "tenant " + t.Tenant
	}
	if t.ReadOnly {
		scope += ", read-only"
	}
	return fmt.Sprintf("token %q (%s)", t.Name, scope)
}

type ctxKey struct{}

// NewContext returns ctx carrying the request's token.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the request's token; ok is false when no
// authentication ran (a handler used outside the API).
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(ctxKey{}).(Token)
	return t, ok
}

// Bearer returns the token of an "Authorization: Bearer <token>" header.
func Bearer(r *http.Request) (string, bool) {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(got), ok
}

// entry is one accepted token: its scope and the SHA-256 of its secret
// (a file may hold only the digest).
type entry struct {
	tok Token
	sum [sha256.Size]byte
}

// Set is the tokens a daemon accepts. It is safe for concurrent use; the
// file's tokens are replaced as a whole when it is read again.
type Set struct {
	file  string
	admin []entry // --token

	mu      sync.RWMutex
	entries []entry // admin, then the file's
	loaded  time.Time
}

// New returns the set of one admin token (--token); an empty token makes
// an open set (no authentication).
func New(admin string) *Set {
	s := &Set{}
	if admin != "" {
		s.admin = []entry{{tok: Token{Name: "--token"}, sum: sha256.Sum256([]byte(admin))}}
	}
	s.entries = s.admin
	return s
}

// Load returns the set of admin (--token, may be empty) and the tokens of
// file (--tokens-file, may be empty).
func Load(file, admin string) (*Set, error) {
	s := New(admin)
	if file == "" {
		return s, nil
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file %s: %w", file, err)
	}
	s.file = abs
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Open reports whether the set holds no token at all: every request is
// Anonymous, an admin.
func (s *Set) Open() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.entries) == 0 && s.file == ""
}

// File is the tokens file, or "".
func (s *Set) File() string { return s.file }

// Check returns the token whose secret is secret. Every entry is compared
// in constant time, so the answer's timing says nothing about which
// tokens exist.
func (s *Set) Check(secret string) (Token, bool) {
	if secret == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	s.mu.RLock()
	defer s.mu.RUnlock()
	var found Token
	ok := false
	for _, e := range s.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 && !ok {
			found, ok = e.tok, true
		}
	}
	return found, ok
}

// Tokens lists the accepted tokens (names and scopes, no secrets).
func (s *Set) Tokens() []Token {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Token, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.tok
	}
	return out
}

// fileEntry is one token of the file.
type fileEntry struct {
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Admin    bool   `json:"admin,omitempty"`
	Tenant   string `json:"tenant,omitempty"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Reload reads the tokens file again. On any error the set keeps the
// tokens it had: a half-written or broken file never locks everyone out
// nor lets anyone in.
func (s *Set) Reload() error {
	if s.file == "" {
		return nil
	}
	entries, err := parseFile(s.file)
	if err != nil {
		return err
	}
	for _, a := range s.admin {
		for _, e := range entries {
			if e.sum == a.sum {
				return fmt.Errorf("%s: token %q is the same as --token: give each client its own token", s.file, e.tok.Name)
			}
		}
	}
	s.mu.Lock()
	s.entries = append(append([]entry(nil), s.admin...), entries...)
	s.loaded = time.Now()
	s.mu.Unlock()
	return nil
}

func parseFile(path string) ([]entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("--tokens-file: %w", err)
	}
	data, err := readLimited(f, 1<<20)
	if err != nil {
		return nil, fmt.Errorf("--tokens-file %s: %w", path, err)
	}
	var doc struct {
		Tokens []fileEntry `json:"tokens"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w (want {\"tokens\": [{\"name\": ..., \"token\": ..., \"tenant\": ... or \"admin\": true, \"readOnly\": ...}]}, docs/api.md)", path, err)
	}
	var errs []error
	names := map[string]bool{}
	sums := map[[sha256.Size]byte]string{}
	plain := false
	out := make([]entry, 0, len(doc.Tokens))
	for i, fe := range doc.Tokens {
		where := fmt.Sprintf("%s: tokens[%d]", path, i)
		if fe.Name != "" {
			where += fmt.Sprintf(" (%q)", fe.Name)
		}
		bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(where+": "+format, args...)) }
		switch {
		case fe.Name == "" || len(fe.Name) > 64 || strings.ContainsAny(fe.Name, "\x00\r\n\t"):
			bad("name must be 1 to 64 characters on one line: it names the token in logs")
		case names[fe.Name]:
			bad("another token has this name")
		}
		names[fe.Name] = true
		switch {
		case fe.Admin && fe.Tenant != "":
			bad("set either \"admin\": true or a \"tenant\", not both")
		case !fe.Admin && fe.Tenant == "":
			bad("set \"tenant\" (the only tenant it reaches) or \"admin\": true (every tenant)")
		case fe.Tenant != "" && !runtime.ValidTenant(fe.Tenant):
			bad("tenant %q is not a tenant id (1 to 64 letters, digits, '.', '_' or '-')", fe.Tenant)
		}
		var sum [sha256.Size]byte
		switch {
		case fe.Token != "" && fe.SHA256 != "":
			bad("set \"token\" or \"sha256\", not both")
		case fe.Token != "":
			if len(fe.Token) < MinLength {
				bad("the token is %d characters: use at least %d random ones (openssl rand -hex 32)", len(fe.Token), MinLength)
			}
			sum = sha256.Sum256([]byte(fe.Token))
			plain = true
		case fe.SHA256 != "":
			b, err := hex.DecodeString(strings.TrimPrefix(fe.SHA256, "sha256:"))
			if err != nil || len(b) != sha256.Size {
				bad("sha256 must be the 64 hex digits of the token's SHA-256 (printf %%s TOKEN | sha256sum)")
			}
			copy(sum[:], b)
		default:
			bad("set \"token\" (the secret) or \"sha256\" (its SHA-256, in hex)")
		}
		if other, dup := sums[sum]; dup && sum != [sha256.Size]byte{} {
			bad("the same secret as token %q: give each client its own token", other)
		}
		sums[sum] = fe.Name
		out = append(out, entry{tok: Token{Name: fe.Name, Tenant: fe.Tenant, ReadOnly: fe.ReadOnly}, sum: sum})
	}
	if plain && st.Mode().Perm()&0o007 != 0 {
		errs = append(errs, fmt.Errorf("%s holds tokens and other users may read it (mode %#o): chmod o-rwx %s, or keep only their \"sha256\"", path, st.Mode().Perm(), path))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func readLimited(f *os.File, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("more than %d bytes: that is not a tokens file", max)
	}
	return b, nil
}

// Watch reads the file again whenever it changes (it is replaced, written
// or renamed into place, as editors and config tools do), debounced by
// 100 ms, and logs what it loaded or why it kept the old tokens. stop ends
// the watch.
func (s *Set) Watch(log *slog.Logger) (stop func(), err error) {
	if s.file == "" {
		return func() {}, nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching --tokens-file: %w", err)
	}
	// The directory, not the file: a file replaced by a rename is a new
	// inode the old watch would not see.
	if err := w.Add(filepath.Dir(s.file)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watching --tokens-file %s: %w", s.file, err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var fire <-chan time.Time
		var timer *time.Timer
		for {
			select {
			case <-done:
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Clean(ev.Name) != s.file {
					continue
				}
				if timer == nil {
					timer = time.NewTimer(100 * time.Millisecond)
				} else {
					timer.Reset(100 * time.Millisecond)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("tokens file watcher error; reading it again to be safe", "file", s.file, "err", err)
				fire = time.After(0)
			case <-fire:
				fire = nil
				if err := s.Reload(); err != nil {
					log.Error("the tokens file did not load; the tokens loaded before stay in force", "file", s.file, "err", err)
					continue
				}
				log.Info("tokens file loaded", "file", s.file, "tokens", len(s.Tokens()))
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			_ = w.Close()
			wg.Wait()
		})
	}, nil
}
