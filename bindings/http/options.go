package http

import (
	"encoding/base64"
	"math"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
	"github.com/loomrt/loom/bindings/redact"
)

// request is one parsed call: everything the Lua side asked for.
type request struct {
	fn         string // "http.get", for config errors
	method     string
	url        *url.URL
	displayURL string // url without credentials, for logs and errors
	header     nethttp.Header
	host       string // Host header override
	body       []byte
	hasBody    bool

	timeout            time.Duration // per attempt; 0 = the hook's deadline
	retries            int
	retryDelay         time.Duration
	retryMaxDelay      time.Duration
	retryNonIdempotent bool
	maxBody            int64
	maxRedirects       int // 0 = do not follow
	check              bool

	tls        tlsOptions
	unixSocket string

	// secrets are the credentials in this call, registered with the host
	// and scrubbed from error messages.
	secrets []string
}

// tlsOptions is opts.tls.
type tlsOptions struct {
	ca                 string
	clientCert         string
	clientKey          string
	serverName         string
	insecureSkipVerify bool
}

func (t tlsOptions) isZero() bool { return t == tlsOptions{} }

// optionKeys lists the keys opts may hold; any other key is a config error,
// so that a typo ("timout") does not pass silently.
var optionKeys = map[string]bool{
	"headers": true, "query": true, "body": true, "json": true,
	"timeout": true, "retries": true, "retry_delay": true, "retry_max_delay": true,
	"retry_non_idempotent": true, "max_body": true, "follow_redirects": true,
	"tls": true, "unix_socket": true, "basic_auth": true, "bearer": true, "check": true,
}

// optionNames are optionKeys in the order the docs list them.
var optionNames = []string{"headers", "query", "body", "json", "timeout", "retries", "retry_delay", "retry_max_delay",
	"retry_non_idempotent", "max_body", "follow_redirects", "tls", "unix_socket", "basic_auth", "bearer", "check"}

var tlsKeys = map[string]bool{
	"ca": true, "client_cert": true, "client_key": true, "server_name": true, "insecure_skip_verify": true,
}

// configError is a "config" error naming the function.
func (r *request) configError(format string, args ...any) *bindings.Error {
	e := bindings.Errorf("config", format, args...)
	e.Message = r.fn + ": " + e.Message
	return e
}

// addSecret records a credential of this call.
func (r *request) addSecret(s string) {
	if s != "" {
		r.secrets = append(r.secrets, s)
	}
}

// scrub replaces this call's credentials in s.
func (r *request) scrub(s string) string {
	for _, sec := range r.secrets {
		// As the redact package: a value shorter than redact.MinLen is
		// not cut out (a one-character bearer would garble every message
		// and hide nothing).
		if len(sec) >= redact.MinLen && strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, "[REDACTED]")
		}
	}
	return s
}

// parseCall validates a call's arguments. It returns the request even on
// error, so that the credentials it found are still registered as secrets.
func (b *Binding) parseCall(L *lua.LState, fn, method, rawURL string, opts *lua.LTable) (*request, error) {
	r := &request{
		fn:            fn,
		method:        strings.ToUpper(method),
		header:        make(nethttp.Header),
		retryDelay:    b.opts.RetryDelay,
		retryMaxDelay: b.opts.RetryMaxDelay,
		maxBody:       b.opts.DefaultMaxBody,
		maxRedirects:  b.opts.MaxRedirects,
	}
	if !validMethod(r.method) {
		return r, r.configError("invalid method %q", method)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Parse errors quote the URL, credentials included.
		return r, r.configError("invalid url %q", redactRawURL(rawURL))
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			r.addSecret(p)
			r.addSecret(url.PathEscape(p))
			// net/http sends URL user info as basic auth.
			r.addSecret(base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + p)))
		}
	}
	r.url = u
	r.displayURL = redactURL(u)
	r.addQuerySecrets()
	if u.Scheme != "http" && u.Scheme != "https" {
		return r, r.configError("url %s: scheme must be http or https", r.displayURL)
	}
	if u.Host == "" {
		return r, r.configError("url %s: no host", r.displayURL)
	}
	if opts == nil {
		return r, nil
	}
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	// Credentials first, so they are registered even if another option is wrong.
	if v := opts.RawGetString("bearer"); v != lua.LNil {
		s, ok := v.(lua.LString)
		if !ok || s == "" {
			fail(r.configError("opts.bearer must be a non-empty string"))
		} else {
			r.addSecret(string(s))
			r.header.Set("Authorization", "Bearer "+string(s))
		}
	}
	if v := opts.RawGetString("basic_auth"); v != lua.LNil {
		if err := r.parseBasicAuth(v); err != nil {
			fail(err)
		}
	}
	if v := opts.RawGetString("headers"); v != lua.LNil {
		if err := r.parseHeaders(v); err != nil {
			fail(err)
		}
	}
	if v, ok := opts.RawGetString("tls").(*lua.LTable); ok {
		if k := v.RawGetString("client_key"); k.Type() == lua.LTString {
			r.addSecret(k.String())
		}
	}
	if firstErr != nil {
		return r, firstErr
	}
	opts.ForEach(func(k, v lua.LValue) {
		if firstErr != nil {
			return
		}
		key, ok := k.(lua.LString)
		if !ok || !optionKeys[string(key)] {
			fail(r.configError("unknown option %s%s (known: %s)", k.String(), bindings.DidYouMean(k.String(), optionNames), strings.Join(optionNames, ", ")))
			return
		}
		switch key {
		case "query":
			fail(r.parseQuery(v))
		case "body":
			s, ok := v.(lua.LString)
			if !ok {
				fail(r.configError("opts.body must be a string, got %s (use opts.json for tables)", v.Type()))
				return
			}
			if opts.RawGetString("json") != lua.LNil {
				fail(r.configError("opts.body and opts.json are exclusive"))
				return
			}
			r.body, r.hasBody = []byte(s), true
		case "json":
			data, err := luaval.Encode(v, luaval.EncodeOptions{L: L})
			if err != nil {
				fail(r.configError("encoding opts.json: %v", err))
				return
			}
			r.body, r.hasBody = data, true
			if r.header.Get("Content-Type") == "" {
				r.header.Set("Content-Type", "application/json")
			}
			if r.header.Get("Accept") == "" {
				r.header.Set("Accept", "application/json")
			}
		case "timeout":
			d, err := r.seconds("timeout", v)
			if err == nil && d <= 0 {
				err = r.configError("opts.timeout must be positive")
			}
			r.timeout = d
			fail(err)
		case "retries":
			n, err := r.count("retries", v)
			if err == nil && n > b.opts.MaxRetries {
				err = r.configError("opts.retries is %d, more than the limit %d", n, b.opts.MaxRetries)
			}
			r.retries = n
			fail(err)
		case "retry_delay":
			d, err := r.seconds("retry_delay", v)
			r.retryDelay = d
			fail(err)
		case "retry_max_delay":
			d, err := r.seconds("retry_max_delay", v)
			r.retryMaxDelay = d
			fail(err)
		case "retry_non_idempotent":
			r.retryNonIdempotent, err = r.boolean("retry_non_idempotent", v)
			fail(err)
		case "check":
			r.check, err = r.boolean("check", v)
			fail(err)
		case "max_body":
			n, err := r.count("max_body", v)
			if err == nil && int64(n) > b.opts.MaxBodyLimit {
				err = r.configError("opts.max_body is %d bytes, more than the limit %d", n, b.opts.MaxBodyLimit)
			}
			if err == nil && n == 0 {
				err = r.configError("opts.max_body must be positive")
			}
			r.maxBody = int64(n)
			fail(err)
		case "follow_redirects":
			switch x := v.(type) {
			case lua.LBool:
				if !x {
					r.maxRedirects = 0
				}
			case lua.LNumber:
				n, err := r.count("follow_redirects", v)
				if err != nil {
					fail(err)
					return
				}
				r.maxRedirects = min(n, b.opts.MaxRedirects)
			default:
				fail(r.configError("opts.follow_redirects must be a boolean or a count, got %s", x.Type()))
			}
		case "tls":
			fail(r.parseTLS(v))
		case "unix_socket":
			s, ok := v.(lua.LString)
			if !ok || s == "" {
				fail(r.configError("opts.unix_socket must be a non-empty path"))
				return
			}
			r.unixSocket = string(s)
		}
	})
	return r, firstErr
}

func (r *request) parseBasicAuth(v lua.LValue) error {
	t, ok := v.(*lua.LTable)
	if !ok {
		return r.configError("opts.basic_auth must be a table {user=..., password=...}")
	}
	user, pass := t.RawGetString("user"), t.RawGetString("password")
	if user == lua.LNil && pass == lua.LNil {
		user, pass = t.RawGetInt(1), t.RawGetInt(2)
	}
	us, ok1 := user.(lua.LString)
	ps, ok2 := pass.(lua.LString)
	if !ok1 || (!ok2 && pass != lua.LNil) {
		return r.configError("opts.basic_auth must be {user=string, password=string}")
	}
	r.addSecret(string(ps))
	cred := base64.StdEncoding.EncodeToString([]byte(string(us) + ":" + string(ps)))
	r.addSecret(cred)
	r.header.Set("Authorization", "Basic "+cred)
	return nil
}

// sensitiveHeader reports whether a header's value is a credential.
func sensitiveHeader(name string) bool {
	n := lowerASCII(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie":
		return true
	}
	for _, w := range []string{"token", "secret", "password", "api-key", "apikey", "x-auth"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func (r *request) parseHeaders(v lua.LValue) error {
	t, ok := v.(*lua.LTable)
	if !ok {
		return r.configError("opts.headers must be a table, got %s", v.Type())
	}
	var err error
	t.ForEach(func(k, v lua.LValue) {
		if err != nil {
			return
		}
		name, ok := k.(lua.LString)
		if !ok || !validToken(string(name)) {
			err = r.configError("opts.headers: invalid header name %s", k.String())
			return
		}
		var values []string
		switch x := v.(type) {
		case lua.LString, lua.LNumber, lua.LBool:
			values = []string{x.String()}
		case *lua.LTable:
			x.ForEach(func(_, e lua.LValue) {
				switch e.(type) {
				case lua.LString, lua.LNumber, lua.LBool:
					values = append(values, e.String())
				default:
					err = r.configError("opts.headers[%q]: values must be strings", string(name))
				}
			})
		default:
			err = r.configError("opts.headers[%q] must be a string or a list of strings, got %s", string(name), v.Type())
		}
		if err != nil {
			return
		}
		for _, val := range values {
			if strings.ContainsAny(val, "\r\n") {
				err = r.configError("opts.headers[%q]: value contains a line break", string(name))
				return
			}
		}
		if sensitiveHeader(string(name)) {
			for _, val := range values {
				r.addSecret(val)
				if _, tok, ok := strings.Cut(val, " "); ok {
					r.addSecret(strings.TrimSpace(tok))
				}
			}
		}
		if strings.EqualFold(string(name), "Host") {
			r.host = values[len(values)-1]
			return
		}
		key := nethttp.CanonicalHeaderKey(string(name))
		r.header.Del(key) // opts.headers wins over bearer/basic_auth
		for _, val := range values {
			r.header.Add(key, val)
		}
	})
	return err
}

func (r *request) parseQuery(v lua.LValue) error {
	t, ok := v.(*lua.LTable)
	if !ok {
		return r.configError("opts.query must be a table, got %s", v.Type())
	}
	q := r.url.Query()
	var err error
	t.ForEach(func(k, v lua.LValue) {
		if err != nil {
			return
		}
		name, ok := k.(lua.LString)
		if !ok {
			err = r.configError("opts.query: keys must be strings, got %s", k.Type())
			return
		}
		switch x := v.(type) {
		case lua.LString, lua.LNumber, lua.LBool:
			q.Add(string(name), x.String())
		case *lua.LTable:
			x.ForEach(func(_, e lua.LValue) {
				switch e.(type) {
				case lua.LString, lua.LNumber, lua.LBool:
					q.Add(string(name), e.String())
				default:
					err = r.configError("opts.query[%q]: values must be strings or numbers", string(name))
				}
			})
		default:
			err = r.configError("opts.query[%q] must be a string, number, boolean or list, got %s", string(name), v.Type())
		}
	})
	if err == nil {
		r.url.RawQuery = q.Encode()
		r.displayURL = redactURL(r.url)
		r.addQuerySecrets()
	}
	return err
}

func (r *request) parseTLS(v lua.LValue) error {
	t, ok := v.(*lua.LTable)
	if !ok {
		return r.configError("opts.tls must be a table, got %s", v.Type())
	}
	var err error
	t.ForEach(func(k, v lua.LValue) {
		if err != nil {
			return
		}
		key, ok := k.(lua.LString)
		if !ok || !tlsKeys[string(key)] {
			err = r.configError("unknown option tls.%s%s (known: ca, client_cert, client_key, server_name, insecure_skip_verify)", k.String(),
				bindings.DidYouMean(k.String(), []string{"ca", "client_cert", "client_key", "server_name", "insecure_skip_verify"}))
			return
		}
		if key == "insecure_skip_verify" {
			r.tls.insecureSkipVerify, err = r.boolean("tls.insecure_skip_verify", v)
			return
		}
		s, ok := v.(lua.LString)
		if !ok {
			err = r.configError("opts.tls.%s must be a string, got %s", string(key), v.Type())
			return
		}
		switch key {
		case "ca":
			r.tls.ca = string(s)
		case "client_cert":
			r.tls.clientCert = string(s)
		case "client_key":
			r.tls.clientKey = string(s)
		case "server_name":
			r.tls.serverName = string(s)
		}
	})
	if err == nil && (r.tls.clientCert == "") != (r.tls.clientKey == "") {
		err = r.configError("opts.tls.client_cert and opts.tls.client_key go together")
	}
	return err
}

func (r *request) seconds(name string, v lua.LValue) (time.Duration, error) {
	n, ok := v.(lua.LNumber)
	if !ok || math.IsNaN(float64(n)) || n < 0 || n > 1e6 {
		return 0, r.configError("opts.%s must be a number of seconds, got %s", name, v.String())
	}
	return time.Duration(float64(n) * float64(time.Second)), nil
}

func (r *request) count(name string, v lua.LValue) (int, error) {
	n, ok := v.(lua.LNumber)
	if !ok || n < 0 || float64(n) != math.Trunc(float64(n)) || n > math.MaxInt32*8 {
		return 0, r.configError("opts.%s must be a non-negative integer, got %s", name, v.String())
	}
	return int(n), nil
}

func (r *request) boolean(name string, v lua.LValue) (bool, error) {
	bv, ok := v.(lua.LBool)
	if !ok {
		return false, r.configError("opts.%s must be a boolean, got %s", name, v.Type())
	}
	return bool(bv), nil
}

// validMethod reports whether m is an HTTP token.
func validMethod(m string) bool { return m != "" && validToken(m) }

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// formatCount renders n for messages.
func formatCount(n int64) string { return strconv.FormatInt(n, 10) }
