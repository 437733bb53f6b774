package http

import (
	"net/url"
	"strings"
)

// redacted replaces sensitive query values in URLs shown in logs and errors.
const redacted = "REDACTED"

// redactURL renders u for logs and error messages: without user info, and
// with the values of query parameters that look like credentials
// ("api_key", "token", "signature"...) replaced.
func redactURL(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User = nil
	if c.RawQuery != "" {
		q, err := url.ParseQuery(c.RawQuery)
		if err != nil {
			c.RawQuery = redacted
		} else {
			changed := false
			for k, vs := range q {
				if sensitiveParam(k) {
					for i := range vs {
						vs[i] = redacted
					}
					changed = true
				}
			}
			if changed {
				c.RawQuery = q.Encode()
			}
		}
	}
	return c.String()
}

// redactRawURL redacts a URL that did not parse: everything between the
// scheme and an '@' goes, and so does the query.
func redactRawURL(s string) string {
	if i := strings.IndexByte(s, '?'); i >= 0 {
		s = s[:i] + "?" + redacted
	}
	rest := s
	prefix := ""
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = rest[i+1:]
	}
	return prefix + rest
}

// sensitiveParam reports whether a query parameter carries a credential.
func sensitiveParam(name string) bool {
	n := lowerASCII(name)
	for _, w := range []string{"token", "secret", "password", "passwd", "api_key", "apikey", "api-key", "access_key", "signature", "sig", "auth", "credential"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return n == "key"
}

// addQuerySecrets registers the values of credential-like query
// parameters of r.url as secrets of the call.
func (r *request) addQuerySecrets() {
	for k, vs := range r.url.Query() {
		if sensitiveParam(k) {
			for _, v := range vs {
				r.addSecret(v)
			}
		}
	}
}
