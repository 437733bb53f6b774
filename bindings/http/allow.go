package http

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/loomrt/loom/bindings"
)

// unixPrefix marks an allow-list entry that grants a unix socket path:
// "unix:/var/run/docker.sock".
const unixPrefix = "unix:"

// allowed reports whether the allow-list grants host. An empty list grants
// everything. Entries are host names or IP addresses, matched without the
// port and case-insensitively; "*.example.net" matches any subdomain of
// example.net (not example.net itself); "*" matches every host.
func allowed(list []string, host string) bool {
	if len(list) == 0 {
		return true
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, e := range list {
		e = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(e)), ".")
		switch {
		case e == "*":
			return true
		case strings.HasPrefix(e, unixPrefix):
			continue
		case strings.HasPrefix(e, "*."):
			if strings.HasSuffix(host, e[1:]) && len(host) > len(e)-1 {
				return true
			}
		case e == host:
			return true
		}
	}
	return false
}

// allowedSocket reports whether the allow-list grants a unix socket path.
// Unlike hosts, sockets are never granted by default: an empty list grants
// none, since a local socket (docker.sock, an agent's) can be as good as
// root on the machine. Only "unix:<path>" entries, or "*", grant one.
func allowedSocket(list []string, path string) bool {
	for _, e := range list {
		e = strings.TrimSpace(e)
		if e == "*" || e == unixPrefix+path {
			return true
		}
	}
	return false
}

// checkTarget refuses a request (or a redirect) that the plugin's
// allow-list does not grant. With a unix socket the socket path is
// checked, not the URL's nominal host.
func checkTarget(list []string, u *url.URL, unixSocket string) error {
	if unixSocket != "" {
		if allowedSocket(list, unixSocket) {
			return nil
		}
		e := bindings.Errorf("permission", "unix socket %q is not in the plugin's http allow-list %s (add \"unix:%s\" to permissions.http in the plugin definition)",
			unixSocket, formatList(list), unixSocket)
		e.Fields = map[string]any{"socket": unixSocket, "allowed": append([]string(nil), list...)}
		return e
	}
	host := u.Hostname()
	if allowed(list, host) {
		return nil
	}
	e := bindings.Errorf("permission", "host %q is not in the plugin's http allow-list %s (permissions.http in the plugin definition)",
		host, formatList(list))
	e.Fields = map[string]any{"host": host, "allowed": append([]string(nil), list...)}
	return e
}

func formatList(list []string) string {
	q := make([]string, len(list))
	for i, e := range list {
		q[i] = fmt.Sprintf("%q", e)
	}
	return "[" + strings.Join(q, ", ") + "]"
}
