package http

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	nethttp "net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/loomrt/loom/bindings"
)

// response is what one call returns to Lua.
type response struct {
	status int
	header nethttp.Header
	body   []byte
	url    string // final URL after redirects, without credentials
}

// outcome is the result of one attempt.
type outcome struct {
	res *response
	err *bindings.Error
	// retryable: a connection error, a per-attempt timeout, 429 or 5xx.
	retryable bool
	// unsent: the request cannot have reached the server (dial failed),
	// so retrying is safe whatever the method.
	unsent     bool
	retryAfter time.Duration
	hasAfter   bool
}

// excerptLen bounds the body excerpt in a checked-status error.
const excerptLen = 512

// do performs r under the hook's context, with retries.
func (b *Binding) do(h bindings.Host, r *request) (*response, error) {
	ctx := h.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	log := h.Logger()
	allow := h.Permissions().HTTP
	if err := checkTarget(allow, r.url, r.unixSocket); err != nil {
		var be *bindings.Error
		errors.As(err, &be)
		return nil, r.wrap(be)
	}
	rt, err := b.transportFor(r)
	if err != nil {
		return nil, err
	}
	if b.opts.Intercept != nil {
		rt = intercepted{b.opts.Intercept, rt}
	}
	if r.tls.insecureSkipVerify {
		log.Warn("http: TLS certificate verification disabled by opts.tls.insecure_skip_verify",
			slog.String("method", r.method), slog.String("url", r.displayURL))
	}
	client := &nethttp.Client{
		Transport: rt,
		CheckRedirect: func(req *nethttp.Request, via []*nethttp.Request) error {
			if r.maxRedirects == 0 {
				return nethttp.ErrUseLastResponse
			}
			if len(via) > r.maxRedirects {
				return bindings.Errorf("http", "stopped after %d redirects (last to %s)", r.maxRedirects, redactURL(req.URL))
			}
			if err := checkTarget(allow, req.URL, r.unixSocket); err != nil {
				var be *bindings.Error
				errors.As(err, &be)
				be.Message = "redirected to " + redactURL(req.URL) + ": " + be.Message
				return be
			}
			return nil
		},
	}
	canRetry := idempotent(r.method) || r.retryNonIdempotent
	for attempt := 1; ; attempt++ {
		o := b.attempt(ctx, log, client, r, attempt)
		if attempt > r.retries || !o.retryable || !(canRetry || o.unsent) {
			return o.final(r, attempt)
		}
		wait := backoff(r.retryDelay, r.retryMaxDelay, attempt)
		if o.hasAfter {
			if o.retryAfter > r.retryMaxDelay {
				log.Debug("http: not retrying, Retry-After exceeds retry_max_delay",
					slog.String("method", r.method), slog.String("url", r.displayURL),
					slog.Duration("retry_after", o.retryAfter), slog.Duration("retry_max_delay", r.retryMaxDelay))
				return o.final(r, attempt)
			}
			wait = o.retryAfter
		}
		if dl, ok := bindings.HookDeadline(ctx); ok && dl.Sub(b.opts.Clock.Now()) <= wait {
			log.Debug("http: not retrying, the wait would pass the hook deadline",
				slog.String("method", r.method), slog.String("url", r.displayURL), slog.Duration("wait", wait))
			return o.final(r, attempt)
		}
		log.Debug("http retry", slog.String("method", r.method), slog.String("url", r.displayURL),
			slog.Int("attempt", attempt+1), slog.Duration("wait", wait))
		b.retries.Add(1)
		if err := b.opts.Clock.Sleep(ctx, wait); err != nil {
			return nil, r.hookDone(ctx, attempt, "waiting to retry")
		}
	}
}

// final turns the last attempt's outcome into the call's result.
func (o outcome) final(r *request, attempts int) (*response, error) {
	if o.err != nil {
		if attempts > 1 {
			o.err.Message += fmt.Sprintf(" (after %d attempts)", attempts)
			o.err.Fields["attempts"] = attempts
		}
		return nil, o.err
	}
	if r.check && o.res.status >= 400 {
		excerpt := r.scrub(truncate(string(o.res.body), excerptLen))
		line := strings.Join(strings.Fields(truncate(excerpt, 200)), " ")
		e := r.errorf("http", "HTTP %d %s", o.res.status, nethttp.StatusText(o.res.status))
		if line != "" {
			e.Message += ": " + line
		}
		if attempts > 1 {
			e.Message += fmt.Sprintf(" (after %d attempts)", attempts)
			e.Fields["attempts"] = attempts
		}
		e.Fields["status"] = o.res.status
		e.Fields["body"] = excerpt
		return nil, e
	}
	return o.res, nil
}

// attempt sends r once and reads the response body.
func (b *Binding) attempt(ctx context.Context, log *slog.Logger, client *nethttp.Client, r *request, n int) outcome {
	timeout := r.timeout
	if _, ok := ctx.Deadline(); !ok && timeout == 0 {
		timeout = b.opts.DefaultTimeout
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		actx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()

	var body io.Reader
	if r.hasBody {
		body = bytes.NewReader(r.body)
	}
	req, err := nethttp.NewRequestWithContext(actx, r.method, r.url.String(), body)
	if err != nil {
		return outcome{err: r.errorf("config", "building request: %v", err)}
	}
	req.Header = r.header.Clone()
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", b.opts.UserAgent)
	}
	if r.host != "" {
		req.Host = r.host
	}
	b.requests.Add(1)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		o := r.transportFailure(ctx, actx, err, timeout, n)
		log.Debug("http request", slog.String("method", r.method), slog.String("url", r.displayURL),
			slog.Int("attempt", n), slog.Duration("duration", time.Since(start)),
			slog.String("error", r.scrub(o.err.Message)))
		return o
	}
	defer resp.Body.Close()
	finalURL := redactURL(resp.Request.URL)
	if resp.ContentLength > r.maxBody {
		return outcome{err: r.tooLarge(resp.StatusCode, resp.ContentLength)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, r.maxBody+1))
	if err != nil {
		o := r.transportFailure(ctx, actx, fmt.Errorf("reading response body: %w", err), timeout, n)
		log.Debug("http request", slog.String("method", r.method), slog.String("url", r.displayURL),
			slog.Int("attempt", n), slog.Int("status", resp.StatusCode), slog.Duration("duration", time.Since(start)),
			slog.String("error", r.scrub(o.err.Message)))
		return o
	}
	if int64(len(data)) > r.maxBody {
		return outcome{err: r.tooLarge(resp.StatusCode, -1)}
	}
	log.Debug("http request", slog.String("method", r.method), slog.String("url", r.displayURL),
		slog.Int("attempt", n), slog.Int("status", resp.StatusCode), slog.Duration("duration", time.Since(start)),
		slog.Int("bytes", len(data)))
	o := outcome{res: &response{status: resp.StatusCode, header: resp.Header, body: data, url: finalURL}}
	if resp.StatusCode == nethttp.StatusTooManyRequests || resp.StatusCode >= 500 {
		o.retryable = true
		o.retryAfter, o.hasAfter = parseRetryAfter(resp.Header.Get("Retry-After"), b.opts.Clock.Now())
	}
	return o
}

// transportFailure classifies an error from sending a request or reading
// its response.
func (r *request) transportFailure(ctx, actx context.Context, err error, timeout time.Duration, attempt int) outcome {
	var be *bindings.Error
	if errors.As(err, &be) { // from CheckRedirect: allow-list, redirect cap
		return outcome{err: r.wrap(be)}
	}
	if ctx.Err() != nil {
		return outcome{err: r.hookDone(ctx, attempt, "")}
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		e := r.errorf("timeout", "timed out after %s (opts.timeout)", timeout)
		return outcome{err: e, retryable: true}
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	e := r.errorf("connect", "%s", cause.Error())
	e.Fields["cause"] = r.scrub(cause.Error())
	return outcome{err: e, retryable: !permanent(err), unsent: unsent(err)}
}

// hookDone is the error for a call cut by the hook's deadline or cancel.
func (r *request) hookDone(ctx context.Context, attempts int, while string) *bindings.Error {
	what := "hook deadline exceeded"
	if errors.Is(ctx.Err(), context.Canceled) {
		what = "hook canceled"
	}
	if while != "" {
		what += " while " + while
	}
	e := r.errorf("timeout", "%s", what)
	if attempts > 1 {
		e.Fields["attempts"] = attempts
	}
	return e
}

func (r *request) tooLarge(status int, length int64) *bindings.Error {
	size := "more than " + formatCount(r.maxBody) + " bytes"
	if length >= 0 {
		size = formatCount(length) + " bytes"
	}
	e := r.errorf("http", "response body of %s exceeds max_body (%d bytes); raise opts.max_body or page the request", size, r.maxBody)
	e.Fields["status"] = status
	e.Fields["max_body"] = r.maxBody
	return e
}

// errorf builds an error naming the call's method and redacted URL.
func (r *request) errorf(kind, format string, args ...any) *bindings.Error {
	return &bindings.Error{
		Kind:    kind,
		Message: r.method + " " + r.displayURL + ": " + fmt.Sprintf(format, args...),
		Fields:  map[string]any{"method": r.method, "url": r.displayURL},
	}
}

// wrap prefixes an error raised below the call with its method and URL.
func (r *request) wrap(be *bindings.Error) *bindings.Error {
	e := r.errorf(be.Kind, "%s", be.Message)
	for k, v := range be.Fields {
		e.Fields[k] = v
	}
	return e
}

// idempotent reports whether a method may be repeated safely (RFC 9110 9.2.2).
func idempotent(method string) bool {
	switch method {
	case nethttp.MethodGet, nethttp.MethodHead, nethttp.MethodOptions, nethttp.MethodTrace,
		nethttp.MethodPut, nethttp.MethodDelete:
		return true
	}
	return false
}

// unsent reports whether err happened before any byte of the request
// could reach the server: a failed dial (to the server or the proxy).
func unsent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && (oe.Op == "dial" || oe.Op == "proxyconnect")
}

// permanent reports errors that a retry cannot fix: certificate and TLS
// protocol failures.
func permanent(err error) bool {
	var (
		cv  *tls.CertificateVerificationError
		rh  tls.RecordHeaderError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		inv x509.CertificateInvalidError
	)
	// A transport can say an error will not change on retry (loomd
	// test's router: no fake serves that host).
	var p interface{ Permanent() bool }
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &ua) ||
		errors.As(err, &hn) || errors.As(err, &inv) || (errors.As(err, &p) && p.Permanent())
}

// backoff is the wait before retry number n (1-based): retryDelay doubled
// n-1 times, capped at maxDelay, with jitter in [d/2, d].
func backoff(delay, maxDelay time.Duration, n int) time.Duration {
	d := delay
	for i := 1; i < n && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > 1<<30 {
			n = 1 << 30
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := nethttp.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// truncate cuts s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "..."
}

// intercepted asks Options.Intercept before the transport.
type intercepted struct {
	first func(req *nethttp.Request) (*nethttp.Response, error, bool)
	next  nethttp.RoundTripper
}

func (t intercepted) RoundTrip(req *nethttp.Request) (*nethttp.Response, error) {
	if resp, err, ok := t.first(req); ok {
		return resp, err
	}
	return t.next.RoundTrip(req)
}
