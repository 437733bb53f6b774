package http

import "github.com/loomrt/loom/bindings"

// types are loom.http's classes, referenced from the spec. The options
// classes list exactly optionKeys and tlsKeys (a test holds them equal).
var types = []bindings.TypeSpec{
	{
		Name:  "http.RequestOptions",
		Doc:   "The options of http.request and of every verb function; all optional.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "headers", Type: "table<string, string|string[]>", Optional: true, Doc: "request headers, name -> value or list of values"},
			{Name: "query", Type: "table<string, string|number|boolean|table>", Optional: true, Doc: "appended to the URL's query; a list value repeats the name"},
			{Name: "body", Type: "string", Optional: true, Doc: "request body; not with json"},
			{Name: "json", Type: "any", Optional: true, Doc: "a Lua value sent as JSON (sets Content-Type and Accept); not with body"},
			{Name: "timeout", Type: "number", Optional: true, Doc: "seconds per attempt (the time left before the hook deadline, always bounded by it)"},
			{Name: "retries", Type: "integer", Optional: true, Doc: "retries after a connection error, timeout, 429 or 5xx (0)"},
			{Name: "retry_delay", Type: "number", Optional: true, Doc: "first back-off in seconds (0.5), exponential with jitter"},
			{Name: "retry_max_delay", Type: "number", Optional: true, Doc: "back-off cap in seconds (30); a longer Retry-After ends the retries"},
			{Name: "retry_non_idempotent", Type: "boolean", Optional: true, Doc: "also retry POST and PATCH (false)"},
			{Name: "max_body", Type: "integer", Optional: true, Doc: "response body cap in bytes (4 MiB); larger raises \"http\""},
			{Name: "follow_redirects", Type: "boolean|integer", Optional: true, Doc: "true (up to 10), false (3xx are data) or a maximum count"},
			{Name: "tls", Type: "http.TLSOptions", Optional: true, Doc: "private CA, client certificate, server name"},
			{Name: "unix_socket", Type: "string", Optional: true, Doc: "connect to this unix socket instead of the URL's host"},
			{Name: "basic_auth", Type: "http.BasicAuth|string[]", Optional: true, Doc: "sets Authorization: Basic (a secret)"},
			{Name: "bearer", Type: "string", Optional: true, Doc: "sets Authorization: Bearer (a secret)"},
			{Name: "check", Type: "boolean", Optional: true, Doc: "raise an \"http\" error for a status >= 400 (false)"},
		},
	},
	{
		Name:  "http.TLSOptions",
		Doc:   "TLS settings of a request.",
		Exact: true,
		Fields: []bindings.FieldSpec{
			{Name: "ca", Type: "string", Optional: true, Doc: "PEM CA certificates trusted instead of the system roots"},
			{Name: "client_cert", Type: "string", Optional: true, Doc: "PEM client certificate; with client_key"},
			{Name: "client_key", Type: "string", Optional: true, Doc: "PEM client key (a secret); with client_cert"},
			{Name: "server_name", Type: "string", Optional: true, Doc: "name to verify instead of the URL's host"},
			{Name: "insecure_skip_verify", Type: "boolean", Optional: true, Doc: "skip certificate verification (logged as a warning)"},
		},
	},
	{
		Name: "http.BasicAuth",
		Doc:  "Basic credentials; {user, password} as a list works too.",
		Fields: []bindings.FieldSpec{
			{Name: "user", Type: "string", Doc: "user name"},
			{Name: "password", Type: "string", Optional: true, Doc: "password"},
		},
	},
	{
		Name:    "http.Response",
		Doc:     "What a request returns; statuses >= 400 are data unless opts.check is true.",
		Methods: "resp",
		Aliases: []string{"loom_http_resp"},
		Fields: []bindings.FieldSpec{
			{Name: "status", Type: "integer", Doc: "HTTP status code"},
			{Name: "ok", Type: "boolean", Doc: "true for 2xx"},
			{Name: "headers", Type: "table<string, string>", Doc: `lower-case names; repeated headers joined with ", "`},
			{Name: "body", Type: "string", Doc: "the whole body"},
			{Name: "url", Type: "string", Doc: "the final URL after redirects, without credentials"},
		},
	},
}
