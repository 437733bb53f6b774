package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loomrt/loom/internal/tokens"
)

// The session cookie. Its value is payload.mac, both base64url; the
// payload is "v1|issued|expires|nonce|subject". The MAC key comes from the
// API token (HMAC-SHA256 of a fixed label under the token), so every
// daemon started with the same token accepts the same sessions, and
// changing the token ends every session. Without a token the key is
// random per process: the session then only anchors the CSRF token.
const (
	cookieName = "loom_ui"
	sessionTTL = 12 * time.Hour
	csrfField  = "csrf"
)

type sessionKeys struct {
	mac  []byte
	open bool // no token: anyone who reaches the API may use the console
}

func newSessionKeys(admin string, set *tokens.Set) sessionKeys {
	open := set == nil || set.Open()
	if admin == "" {
		k := make([]byte, 32)
		_, _ = rand.Read(k)
		return sessionKeys{mac: k, open: open}
	}
	m := hmac.New(sha256.New, []byte(admin))
	m.Write([]byte("loomd console session v1"))
	return sessionKeys{mac: m.Sum(nil), open: open}
}

// session is a signed-in (or, without a token, anonymous) viewer.
type session struct {
	Nonce string
	// Subject names the token signed in with (its name, never its
	// secret).
	Subject string
	Expires time.Time
	csrf    string
	// token is the token's scope as the tokens say now (a token removed
	// from the tokens file ends its sessions; a changed scope applies at
	// once).
	token tokens.Token
}

type sessionKey struct{}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionKey{}).(*session)
	return s
}

func (k sessionKeys) sign(payload string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfToken is the session's CSRF token: a MAC of its nonce, so it needs
// no storage and a page from another origin cannot guess it.
func (k sessionKeys) csrfToken(nonce string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte("csrf|" + nonce))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (k sessionKeys) newSession(subject string, now time.Time) (*session, string) {
	n := make([]byte, 16)
	_, _ = rand.Read(n)
	s := &session{Nonce: hex.EncodeToString(n), Subject: subject, Expires: now.Add(sessionTTL)}
	s.csrf = k.csrfToken(s.Nonce)
	payload := strings.Join([]string{"v1", strconv.FormatInt(now.Unix(), 10), strconv.FormatInt(s.Expires.Unix(), 10), s.Nonce, subject}, "|")
	return s, k.sign(payload)
}

// parse checks a cookie value; nil when it is not a valid, unexpired
// session.
func (k sessionKeys) parse(v string, now time.Time) *session {
	p64, mac64, ok := strings.Cut(v, ".")
	if !ok {
		return nil
	}
	payload, err := base64.RawURLEncoding.DecodeString(p64)
	if err != nil {
		return nil
	}
	got, err := base64.RawURLEncoding.DecodeString(mac64)
	if err != nil {
		return nil
	}
	m := hmac.New(sha256.New, k.mac)
	m.Write(payload)
	if !hmac.Equal(got, m.Sum(nil)) {
		return nil
	}
	f := strings.SplitN(string(payload), "|", 5)
	if len(f) != 5 || f[0] != "v1" {
		return nil
	}
	exp, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || now.Unix() >= exp {
		return nil
	}
	s := &session{Nonce: f[3], Subject: f[4], Expires: time.Unix(exp, 0)}
	s.csrf = k.csrfToken(s.Nonce)
	return s
}

func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, value string, expires time.Time) {
	ck := &http.Cookie{Name: cookieName, Value: value, Path: Prefix, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: secureRequest(r)}
	if value == "" {
		ck.MaxAge = -1
	} else {
		ck.Expires = expires
	}
	http.SetCookie(w, ck)
}

// authed lets a request through with its session, or sends it to the
// login page. Without a token, a request without a session gets a new
// anonymous one.
func (c *Console) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := c.cfg.Now()
		var s *session
		if ck, err := r.Cookie(cookieName); err == nil {
			s = c.keys.parse(ck.Value, now)
		}
		if s != nil {
			if tok, ok := c.tokenNamed(s.Subject); ok {
				s.token = tok
			} else {
				s = nil // the token was removed, or the console was opened up or locked
			}
		}
		if s == nil && c.keys.open && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			var v string
			s, v = c.keys.newSession(tokens.Anonymous.Name, now)
			s.token = tokens.Anonymous
			c.setCookie(w, r, v, s.Expires)
		}
		if s == nil {
			if r.Method != http.MethodGet && r.Method != http.MethodHead || strings.HasPrefix(r.URL.Path, Prefix+"/events") {
				c.refuse(w, r, http.StatusUnauthorized, "Your session ended.", "Sign in again, then repeat the action.")
				return
			}
			http.Redirect(w, r, query(Prefix+"/login", "next", r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if !c.lateReady(w, r) {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// lateReady waits for the parts the daemon opens after its API listens
// (Config.Late) and fills them into the configuration once; false when
// it answered 503 instead. Every reader of those fields is behind it.
func (c *Console) lateReady(w http.ResponseWriter, r *http.Request) bool {
	if c.cfg.Late == nil {
		return true
	}
	p, err := c.cfg.Late.Wait(r.Context())
	if err != nil {
		c.log.Warn("a console page needs what this loomd has not opened", "path", r.URL.Path, "err", err)
		w.Header().Set("Retry-After", "1")
		c.refuse(w, r, http.StatusServiceUnavailable, "loomd is still starting", err.Error())
		return false
	}
	c.lateOnce.Do(func() {
		c.cfg.Clusters = p.ClusterStore
		if p.ClusterJobs != nil {
			c.cfg.Jobs = p.ClusterJobs
		}
		if p.ClusterLog != nil {
			c.cfg.JobLog = p.ClusterLog
		}
		if p.TaskLogs != nil {
			c.cfg.TaskLogs = p.TaskLogs
		}
	})
	return true
}

// acting guards every action: read-only mode refuses it, and the request
// must come from a console page of this origin, carrying the session's
// CSRF token.
func (c *Console) acting(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.ReadOnly {
			c.refuse(w, r, http.StatusForbidden, "This console is read-only.", "loomd runs with --ui-readonly: use the API or the CLI for actions.")
			return
		}
		if s := sessionOf(r); s != nil && !s.token.CanWrite() {
			c.refuse(w, r, http.StatusForbidden, "Your token is read-only.", fmt.Sprintf("You signed in with %s: it may look, not act.", s.token))
			return
		}
		if !sameOrigin(r) {
			c.refuse(w, r, http.StatusForbidden, "Refused: the request came from another site.", "Actions are accepted only from this console's own pages.")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if err := r.ParseForm(); err != nil {
			c.refuse(w, r, http.StatusBadRequest, "The form could not be read.", err.Error())
			return
		}
		s := sessionOf(r)
		got := r.PostForm.Get(csrfField)
		if s == nil || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
			c.refuse(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or stale.",
				"Open the page again and repeat the action from it (the token changes when you sign in again or the daemon restarts without --token).")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin checks the browser's own statements of where a request
// comes from, when it makes them (every browser that runs the console
// does): Sec-Fetch-Site, else Origin against Host.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && o != "null" && strings.EqualFold(u.Host, r.Host)
	}
	return true
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix+"/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix + "/"
	}
	return next
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	next := safeNext(r.URL.Query().Get("next"))
	if c.keys.open {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", &view{Title: "Sign in", Data: map[string]any{"Next": next}})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		c.refuse(w, r, http.StatusBadRequest, "The form could not be read.", err.Error())
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if c.keys.open {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !sameOrigin(r) {
		c.refuse(w, r, http.StatusForbidden, "Refused: the sign-in came from another site.", "Sign in from this console's own page.")
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	tok, ok := c.cfg.Tokens.Check(secret)
	if secret == "" || !ok {
		// A wrong token costs the guesser time; the token itself should be
		// long and random (docs/ui.md).
		time.Sleep(300 * time.Millisecond)
		c.log.Warn("console: sign-in with a wrong token", "remote", r.RemoteAddr)
		c.render(w, r, http.StatusUnauthorized, "login", &view{Title: "Sign in", Data: map[string]any{"Next": next,
			"Error": "That is not one of this loomd's tokens (--token, LOOM_TOKEN or --tokens-file)."}})
		return
	}
	c.log.Info("console: signed in", "token", tok.Name, "remote", r.RemoteAddr)
	s, v := c.keys.newSession(tok.Name, c.cfg.Now())
	c.setCookie(w, r, v, s.Expires)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	_ = r.ParseForm()
	s := sessionOf(r)
	if !sameOrigin(r) || s == nil || subtle.ConstantTimeCompare([]byte(r.PostForm.Get(csrfField)), []byte(s.csrf)) != 1 {
		c.refuse(w, r, http.StatusForbidden, "Refused: the form's CSRF token is missing or stale.", "Sign out from this console's own page.")
		return
	}
	c.setCookie(w, r, "", time.Time{})
	target := Prefix + "/login"
	if c.keys.open {
		target = Prefix + "/"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

// refuse answers with an error page (the status and what to do).
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, code int, title, detail string) {
	c.render(w, r, code, "error", &view{Title: title, Data: map[string]any{"Code": code, "Detail": detail}})
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request, detail string) {
	c.refuse(w, r, http.StatusNotFound, "Not found", detail)
}

// errorf is refuse for a failed read of the daemon's state.
func (c *Console) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	c.log.Warn("console: "+what, "err", err)
	c.refuse(w, r, http.StatusServiceUnavailable, "loomd could not answer", fmt.Sprintf("%s: %v. Reload the page to try again.", what, err))
}

// tokenNamed is the current scope of the token a session signed in with.
// An open console (no token at all) has one anonymous admin.
func (c *Console) tokenNamed(name string) (tokens.Token, bool) {
	if c.keys.open {
		return tokens.Anonymous, name == tokens.Anonymous.Name
	}
	for _, t := range c.cfg.Tokens.Tokens() {
		if t.Name == name {
			return t, true
		}
	}
	return tokens.Token{}, false
}

// tokenOf is the request's token (an anonymous admin outside a session).
func tokenOf(r *http.Request) tokens.Token {
	if s := sessionOf(r); s != nil {
		return s.token
	}
	return tokens.Anonymous
}
