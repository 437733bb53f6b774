package http

import "github.com/loomrt/loom/bindings"

// optsDoc documents the opts table shared by every request function.
const optsDoc = `opts (all optional):
  headers: table of name -> string or list of strings.
  query: table of name -> string, number, boolean or list; appended to the URL's query.
  body: request body string. json: a Lua value sent as JSON (sets Content-Type and Accept to application/json). body and json are exclusive.
  timeout: seconds per attempt; defaults to the time left before the hook deadline, and is always bounded by it.
  retries: how many times to retry after a connection error, a timeout, 429 or 5xx (default 0). Back-off is exponential with jitter, starting at retry_delay seconds (default 0.5) and capped at retry_max_delay seconds (default 30). A Retry-After header sets the wait; one longer than retry_max_delay, or past the hook deadline, ends the retries. Only idempotent methods (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) are retried, unless retry_non_idempotent = true; a request whose connection could not be opened is retried for any method.
  max_body: response body cap in bytes (default 4 MiB); a larger body raises an "http" error.
  follow_redirects: true (default, up to 10), false (3xx are returned as data), or a maximum count.
  tls: {ca = pem (trusted instead of the system roots), client_cert = pem, client_key = pem, server_name = string, insecure_skip_verify = true (logged as a warning)}.
  unix_socket: path of a unix socket to connect to instead of the URL's host (for example /var/run/docker.sock).
  basic_auth: {user = string, password = string}. bearer: token string. Both set Authorization; both are registered as secrets.
  check: true raises an "http" error for a status >= 400.`

// errorsDoc documents the errors every request function raises.
const errorsDoc = `Errors are tables {kind, message, method, url, ...}; the URL never carries credentials:
  "config": bad arguments or options.
  "permission": the host (or a redirect's host, or the unix socket) is not in the plugin's permissions.http allow-list; fields host or socket, allowed.
  "connect": the connection failed (DNS, refused, reset, TLS); field cause.
  "timeout": opts.timeout expired, or the hook deadline passed or the hook was canceled.
  "http": a status >= 400 with check = true (fields status, body: a bounded excerpt), a body over max_body (fields status, max_body), or too many redirects.`

// responseDoc documents the response table.
const responseDoc = `Returns a response table: status (number), ok (true for 2xx), headers (lower-case names; repeated headers joined with ", "), body (string), url (the final URL after redirects, without credentials), and the method resp:json(). Statuses >= 400 are data unless opts.check is true.`

// Spec describes loom.http as data.
func (b *Binding) Spec() bindings.ModuleSpec {
	verb := func(name, method string) bindings.FuncSpec {
		return bindings.FuncSpec{
			Name:    name,
			Params:  []string{"url string", "opts? http.RequestOptions"},
			Returns: []string{"http.Response"},
			Doc:     "Same as http.request(\"" + method + "\", url, opts).",
		}
	}
	return bindings.ModuleSpec{
		Name: "http",
		Doc: "HTTP client for cloud APIs: JSON in and out, timeouts bounded by the hook deadline, retries that honour " +
			"Retry-After, TLS with private CAs and client certificates, unix sockets, pooled connections, the plugin's " +
			"host allow-list, and credentials kept out of logs and errors.",
		Types: types,
		Funcs: []bindings.FuncSpec{
			{
				Name:    "request",
				Params:  []string{"method string", "url string", "opts? http.RequestOptions"},
				Returns: []string{"http.Response"},
				Doc:     "Sends an HTTP request and reads the whole response. " + responseDoc + "\n" + optsDoc + "\n" + errorsDoc,
			},
			verb("get", "GET"),
			verb("head", "HEAD"),
			verb("post", "POST"),
			verb("put", "PUT"),
			verb("patch", "PATCH"),
			verb("delete", "DELETE"),
			{
				Name:    "resp:json",
				Params:  nil,
				Returns: []string{"any"},
				Doc: "Decodes the response body as JSON (objects become tables, arrays sequences, null nil), within the " +
					"JSON converter's depth and size limits. Returns nil for an empty body. Raises an \"http\" error " +
					"naming the URL when the body is not valid JSON.",
			},
		},
	}
}
