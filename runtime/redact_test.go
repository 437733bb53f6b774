package runtime_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"

	cryptob "github.com/loomrt/loom/bindings/crypto"
	httpb "github.com/loomrt/loom/bindings/http"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// The secret has characters every encoding changes: a slash, a plus, a
// quote, an ampersand, angle brackets, a newline.
const (
	leakSecret = "Sk-9f/a+b\"c&d<e>f\ng-TAIL"
	leakPIN    = 48151623
	// leakURLSecret is the (20, item 4): pasted into a URL that
	// is parsed and printed again, it comes out partly escaped.
	leakURLSecret = "S3cr3t Token#Value/1234"
)

// leaky is an automator that declares no sensitive field itself: the
// secrets are its provider's (api_token, pin), carried in the task's
// config.provider.provisioner as Coopr servers send them. Each hook leaks
// them through one more channel or encoding.
const leaky = `
local json = require("loom.json")
local crypto = require("loom.crypto")
local http = require("loom.http")
Leaky = {}
local function pct(s)
  return (s:gsub("[^%w%-%._~]", function(c) return string.format("%%%02X", string.byte(c)) end))
end
function Leaky:install(input)
  local p = self.task.config.provider.provisioner
  local tok, pin, utok = p.api_token, p.pin, p.url_token
  local mode = input.fields.mode
  if mode == "upper" then
    log.info("token " .. string.upper(tok) .. " " .. string.lower(utok))
    self.result.stdout = string.upper(tok)
    error("auth failed for " .. string.lower(tok))
  elseif mode == "base64" then
    log.info("b64 " .. crypto.base64_encode(tok) .. " url " .. crypto.base64url_encode(utok))
    self.result.result.b64 = crypto.base64_encode(tok)
    self.result.stdout = crypto.base64url_encode(tok)
    error("bad token " .. crypto.base64_encode(utok))
  elseif mode == "blob" then
    -- Inside a longer base64 text: an HTTP Basic header, a JSON document.
    log.info("Authorization: Basic " .. crypto.base64_encode("admin:" .. tok))
    self.result.result.doc = crypto.base64_encode(json.encode({user = "x", token = utok, n = 1}))
    self.result.stderr = crypto.base64url_encode("ab" .. utok .. "cd")
    error("header " .. crypto.base64_encode("a:" .. utok))
  elseif mode == "hex" then
    log.info("hex " .. crypto.hex_encode(tok) .. " HEX " .. string.upper(crypto.hex_encode(utok)))
    self.result.result.hex = crypto.hex_encode(utok)
    error("digest " .. string.upper(crypto.hex_encode(tok)))
  elseif mode == "url" then
    -- The URL is parsed and printed again by Go: S3cr3t%20Token#Value/1234.
    local ok, err = pcall(http.get, "http://127.0.0.1:1/v2/" .. utok, {timeout = 2, retries = 0})
    log.info("request failed", {err = tostring(err and err.message)})
    self.result.result.err = tostring(err and err.message)
    error(err)
  elseif mode == "message" then
    error("auth failed for " .. tok)
  elseif mode == "quoted" then
    error(string.format("bad token %q", tok))
  elseif mode == "json" then
    error("request body " .. json.encode({token = tok}))
  elseif mode == "percent" then
    error("GET https://api.example.com/v2?token=" .. pct(tok))
  elseif mode == "number" then
    error("pin " .. pin .. " refused")
  elseif mode == "output" then
    self.result.stdout = "stdout " .. tok
    self.result.stderr = "stderr " .. pct(tok)
    self.result.status = 1
    self.result.message = string.format("%q", tok)
  elseif mode == "errtable" then
    error({kind = "auth", message = "nope", [tok] = "as a key", list = {"x", tok, {deep = pin}}, pin = pin})
  elseif mode == "data" then
    self.result.result.echo = tok
    self.result.result.nested = {list = {tok}, [tok] = 1, pin = pin}
    self.result.custom = {tok}
    self.result.status = 0
  elseif mode == "log" then
    log.info("token %s pin %d", tok, pin)
    log.info("quoted %q", tok)
    log.info("json " .. json.encode({t = tok}))
    log.info("attrs", {[tok] = "key", value = tok, pct = pct(tok)})
    self.result.status = 0
  elseif mode == "logcut" then
    -- The 64 KiB cut falls inside the secret.
    log.info(string.rep("x", 65536 - 6) .. tok)
    log.info("attr cut", {a = string.rep("y", 65536 - 6) .. tok})
    self.result.status = 0
  end
end
`

func leakRuntime(t *testing.T, logger *slog.Logger) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "tokprov", Family: "provider", Classname: "Tok",
		Files: map[string]string{"p.lua": `Tok = {} function Tok:create() self.result.status = 0 end`},
		Extra: map[string]any{"parameters": map[string]any{"admin": map[string]any{"fields": map[string]any{
			"api_token": map[string]any{"type": "text", "sensitive": true},
			"pin":       map[string]any{"type": "text", "sensitive": true},
			"url_token": map[string]any{"type": "text", "sensitive": true}}}}}})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "leaky", Family: "automator", Classname: "Leaky",
		Files: map[string]string{"a.lua": leaky}})
	reg := runtime.DefaultBindings()
	reg.Register(cryptob.New())
	reg.Register(httpb.New(httpb.Options{}))
	return luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, Logger: logger, Bindings: reg})
}

func leakTask(mode string) []byte {
	return luatest.Task("INSTALL", "leaky", map[string]any{
		"provider": map[string]any{"providertype": "tokprov", "provisioner": map[string]any{"api_token": leakSecret, "pin": leakPIN, "url_token": leakURLSecret}},
		"service":  map[string]any{"name": "svc", "action": map[string]any{"type": "leaky", "fields": map[string]any{"mode": mode}}},
	})
}

// leakForms is every spelling of the secrets a leak may take.
func leakForms() map[string]string {
	forms := map[string]string{"pin": strconv.Itoa(leakPIN)}
	for name, secret := range map[string]string{"token": leakSecret, "url token": leakURLSecret} {
		j, _ := json.Marshal(secret)
		var raw bytes.Buffer
		enc := json.NewEncoder(&raw)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(secret)
		q := strconv.Quote(secret)
		for form, s := range map[string]string{
			"plain":          secret,
			"head":           secret[:8], // what a cut leaves
			"query-escaped":  url.QueryEscape(secret),
			"path-escaped":   url.PathEscape(secret),
			"pct-upper":      strings.ToUpper(url.PathEscape(secret)),
			"json":           string(j[1 : len(j)-1]),
			"json-raw":       strings.TrimSpace(raw.String())[1 : len(strings.TrimSpace(raw.String()))-1],
			"go-quoted":      q[1 : len(q)-1],
			"lua-quoted":     strings.ReplaceAll(strings.ReplaceAll(secret, `"`, `\"`), "\n", "\\\n"),
			"json-in-result": strings.ReplaceAll(string(j[1:len(j)-1]), `\n`, `\\n`),
			"upper":          strings.ToUpper(secret),
			"lower":          strings.ToLower(secret),
			"base64":         base64.StdEncoding.EncodeToString([]byte(secret))[:len(secret)*4/3-2],
			"base64url":      base64.URLEncoding.EncodeToString([]byte(secret))[:len(secret)*4/3-2],
			"hex":            hex.EncodeToString([]byte(secret)),
			"HEX":            strings.ToUpper(hex.EncodeToString([]byte(secret))),
		} {
			forms[name+" "+form] = s
		}
		if u, err := url.Parse("http://127.0.0.1:1/v2/" + secret); err == nil {
			forms[name+" url"] = strings.TrimPrefix(u.String(), "http://127.0.0.1:1/v2/")
		}
		// The secret at each alignment inside a base64 blob: the
		// characters that depend on it alone.
		for k := 0; k < 3; k++ {
			for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
				b := e.EncodeToString(append(make([]byte, k), secret...))
				forms[fmt.Sprintf("%s base64 at +%d", name, k)] = b[(8*k+5)/6 : 8*(k+len(secret))/6]
			}
		}
	}
	return forms
}

// Every output channel, every encoding: no form of a provider's sensitive
// value leaves an automator task.
func TestRedactionEveryChannel(t *testing.T) {
	var jsonLogs, textLogs bytes.Buffer
	debug := &slog.HandlerOptions{Level: slog.LevelDebug} // the HTTP binding logs requests at debug
	multi := slog.New(fanout{slog.NewJSONHandler(&jsonLogs, debug), slog.NewTextHandler(&textLogs, debug)})
	rt := leakRuntime(t, multi)
	modes := []string{"message", "quoted", "json", "percent", "number", "output", "errtable", "data", "log", "logcut",
		"upper", "base64", "blob", "hex", "url"}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			jsonLogs.Reset()
			textLogs.Reset()
			res := luatest.Run(t, rt, leakTask(mode))
			out, err := json.Marshal(res)
			if err != nil {
				t.Fatal(err)
			}
			channels := map[string]string{
				"result JSON": string(out),
				"message":     res.Message,
				"stdout":      res.Stdout,
				"stderr":      res.Stderr,
				"error table": fmt.Sprint(res.Error),
				"JSON logs":   jsonLogs.String(),
				"text logs":   textLogs.String(),
			}
			for ch, text := range channels {
				for form, s := range leakForms() {
					if strings.Contains(text, s) {
						t.Errorf("%s: the %s form of the secret leaked: %q", ch, form, excerpt(text, s))
					}
				}
			}
			// The leak was there to catch: each mode shows the marker
			// somewhere, so a test that redacts nothing cannot pass.
			// (The 64 KiB cut may fall inside the marker itself.)
			all := string(out) + jsonLogs.String()
			if !strings.Contains(all, "[REDAC") {
				t.Errorf("no redaction marker anywhere; result %.300s\nlogs %.300s", out, jsonLogs.String())
			}
		})
	}
}

// The REPL prints the task's sensitive values redacted.
func TestRedactionInTheREPL(t *testing.T) {
	rt := leakRuntime(t, slog.New(slog.DiscardHandler))
	s, err := rt.NewSession("leaky")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetTask(leakTask("none")); err != nil {
		t.Fatal(err)
	}
	vals, err := s.Eval(context.Background(), "self.task.config.provider.provisioner.api_token .. ' and ' .. self.task.config.provider.provisioner.pin", slog.New(slog.DiscardHandler))
	if err != nil || len(vals) != 1 {
		t.Fatalf("eval: %v %v", vals, err)
	}
	got := s.Redact(vals[0].String())
	if strings.Contains(got, leakSecret) || strings.Contains(got, strconv.Itoa(leakPIN)) || !strings.Contains(got, "[REDACTED]") {
		t.Errorf("REPL output = %q", got)
	}
	_, err = s.Eval(context.Background(), "error('x ' .. self.task.config.provider.provisioner.api_token)", slog.New(slog.DiscardHandler))
	if err == nil || strings.Contains(err.Error(), leakSecret) {
		t.Errorf("REPL error = %v", err)
	}
}

func excerpt(text, s string) string {
	i := strings.Index(text, s)
	lo, hi := max(i-40, 0), min(i+len(s)+40, len(text))
	return text[lo:hi]
}

// fanout sends every record to several handlers.
type fanout []slog.Handler

func (f fanout) Enabled(ctx context.Context, l slog.Level) bool { return f[0].Enabled(ctx, l) }
func (f fanout) Handle(ctx context.Context, r slog.Record) error {
	for _, h := range f {
		if err := h.Handle(ctx, r.Clone()); err != nil {
			return err
		}
	}
	return nil
}
func (f fanout) WithAttrs(as []slog.Attr) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithAttrs(as)
	}
	return out
}
func (f fanout) WithGroup(name string) slog.Handler {
	out := make(fanout, len(f))
	for i, h := range f {
		out[i] = h.WithGroup(name)
	}
	return out
}
