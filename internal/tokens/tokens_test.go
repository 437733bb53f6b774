package tokens

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	opsSecret  = "ops-0123456789abcdef"
	acmeSecret = "acme-0123456789abcdef"
	roSecret   = "acme-ro-0123456789abcdef"
)

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // as config tools do
		t.Fatal(err)
	}
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestLoadAndCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	writeFile(t, path, `{"tokens": [
		{"name": "ops", "admin": true, "token": "`+opsSecret+`"},
		{"name": "acme-ci", "tenant": "acme", "sha256": "`+sum(acmeSecret)+`"},
		{"name": "acme-ro", "tenant": "acme", "readOnly": true, "token": "`+roSecret+`"}
	]}`, 0o600)
	s, err := Load(path, "the-single-admin-token")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secret string
		want   Token
	}{
		{"the-single-admin-token", Token{Name: "--token"}},
		{opsSecret, Token{Name: "ops"}},
		{acmeSecret, Token{Name: "acme-ci", Tenant: "acme"}},
		{roSecret, Token{Name: "acme-ro", Tenant: "acme", ReadOnly: true}},
	} {
		got, ok := s.Check(c.secret)
		if !ok || got != c.want {
			t.Errorf("Check(%s) = %+v %v, want %+v", c.secret[:4], got, ok, c.want)
		}
	}
	for _, bad := range []string{"", "nope", sum(acmeSecret), opsSecret + " "} {
		if tok, ok := s.Check(bad); ok {
			t.Errorf("Check(%q) accepted as %v", bad, tok)
		}
	}
	acme, _ := s.Check(acmeSecret)
	if acme.Admin() || !acme.CanWrite() || !acme.SeesTenant("acme", "default") || acme.SeesTenant("victim", "default") ||
		acme.SeesTenant("", "default") || !acme.SeesTenant("", "acme") {
		t.Errorf("tenant token scope wrong: %v", acme)
	}
	ops, _ := s.Check(opsSecret)
	if !ops.Admin() || !ops.SeesTenant("victim", "default") {
		t.Errorf("admin token scope wrong: %v", ops)
	}
	if got := acme.String(); got != `token "acme-ci" (tenant acme)` {
		t.Errorf("String = %s", got)
	}
	if New("").Open() != true || s.Open() {
		t.Error("Open is wrong")
	}
}

func TestFileErrorsNameTheProblem(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		mode    os.FileMode
		want    []string
	}{
		"not json":       {`{"tokens": [`, 0o600, []string{"unexpected EOF", "want {\"tokens\""}},
		"unknown key":    {`{"tokens": [{"name": "a", "admin": true, "token": "` + opsSecret + `", "scope": "x"}]}`, 0o600, []string{`unknown field "scope"`}},
		"no scope":       {`{"tokens": [{"name": "a", "token": "` + opsSecret + `"}]}`, 0o600, []string{`tokens[0] ("a"): set "tenant"`}},
		"both scopes":    {`{"tokens": [{"name": "a", "admin": true, "tenant": "t", "token": "` + opsSecret + `"}]}`, 0o600, []string{"not both"}},
		"bad tenant":     {`{"tokens": [{"name": "a", "tenant": "../x", "token": "` + opsSecret + `"}]}`, 0o600, []string{`tenant "../x" is not a tenant id`}},
		"short":          {`{"tokens": [{"name": "a", "admin": true, "token": "short"}]}`, 0o600, []string{"5 characters", "at least 16"}},
		"no secret":      {`{"tokens": [{"name": "a", "admin": true}]}`, 0o600, []string{`set "token"`}},
		"bad sha":        {`{"tokens": [{"name": "a", "admin": true, "sha256": "abc"}]}`, 0o600, []string{"64 hex digits"}},
		"duplicate name": {`{"tokens": [{"name": "a", "admin": true, "token": "` + opsSecret + `"}, {"name": "a", "tenant": "t", "token": "` + acmeSecret + `"}]}`, 0o600, []string{"another token has this name"}},
		"same secret":    {`{"tokens": [{"name": "a", "admin": true, "token": "` + opsSecret + `"}, {"name": "b", "tenant": "t", "sha256": "` + sum(opsSecret) + `"}]}`, 0o600, []string{`the same secret as token "a"`}},
		"world-readable": {`{"tokens": [{"name": "a", "admin": true, "token": "` + opsSecret + `"}]}`, 0o644, []string{"other users may read it", "chmod o-rwx"}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		writeFile(t, path, c.content, c.mode)
		_, err := Load(path, "")
		if err == nil {
			t.Errorf("%s: loaded", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want it to say %q", name, err, w)
			}
		}
		if strings.Contains(err.Error(), opsSecret) || strings.Contains(err.Error(), acmeSecret) {
			t.Errorf("%s: the error shows a token: %v", name, err)
		}
	}
	// Only digests: other users may read the file.
	path := filepath.Join(dir, "digests.json")
	writeFile(t, path, `{"tokens": [{"name": "a", "admin": true, "sha256": "`+sum(opsSecret)+`"}]}`, 0o644)
	if _, err := Load(path, ""); err != nil {
		t.Errorf("a world-readable file of digests: %v", err)
	}
	if _, err := Load(path, opsSecret); err == nil || !strings.Contains(err.Error(), "same as --token") {
		t.Errorf("a file token equal to --token: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.json"), ""); err == nil || !strings.Contains(err.Error(), "--tokens-file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestWatchReloads: a change of the file (replaced by a rename, as
// editors and config tools do) takes effect without a restart: a revoked
// token stops working, a new one starts; a broken file keeps the tokens
// in force.
func TestWatchReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	writeFile(t, path, `{"tokens": [{"name": "acme-ci", "tenant": "acme", "token": "`+acmeSecret+`"}]}`, 0o600)
	s, err := Load(path, "")
	if err != nil {
		t.Fatal(err)
	}
	stop, err := s.Watch(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	writeFile(t, path, `{"tokens": [{"name": "ops", "admin": true, "token": "`+opsSecret+`"}]}`, 0o600)
	eventually("the new token", func() bool { _, ok := s.Check(opsSecret); return ok })
	if _, ok := s.Check(acmeSecret); ok {
		t.Error("a token removed from the file still works")
	}
	writeFile(t, path, `{"tokens": [`, 0o600)
	time.Sleep(500 * time.Millisecond) // the debounce and a reload that fails
	if _, ok := s.Check(opsSecret); !ok {
		t.Error("a broken file dropped the tokens in force")
	}
	// Written in place.
	if err := os.WriteFile(path, []byte(`{"tokens": [{"name": "acme-ci", "tenant": "acme", "token": "`+acmeSecret+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually("the token written in place", func() bool { _, ok := s.Check(acmeSecret); return ok })
}
