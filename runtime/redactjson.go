package runtime

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/loomrt/loom/bindings/redact"
)

// RedactTask returns a copy of a task (or any JSON document a task
// carries: a call's input, a result) fit to show a person: the value of
// every key that a loaded definition declares sensitive (or of type
// password), and of every key whose name says it holds a secret
// (password, secret, token, private key, credentials), becomes
// redact.Marker, and so does every other occurrence of those values in
// the document, in any spelling the redact package knows. Documents that
// are not JSON objects or arrays come back as redact.Marker: they cannot
// be checked.
func (rt *Runtime) RedactTask(doc []byte) []byte {
	names := map[string]bool{}
	if snap := rt.snap.Load(); snap != nil {
		for n := range snap.sensitiveNames() {
			names[n] = true
		}
	}
	return RedactJSON(doc, names)
}

// TaskSecrets returns the secrets a task declares, for redacting text
// about it (log lines, errors): the values of every key a loaded
// definition declares sensitive (or of type password), and of every key
// whose name says it holds a secret, as RedactTask finds them. A task
// that is not a JSON object gives an empty set.
func (rt *Runtime) TaskSecrets(task []byte) *redact.Set {
	names := map[string]bool{}
	if snap := rt.snap.Load(); snap != nil {
		for n := range snap.sensitiveNames() {
			names[n] = true
		}
	}
	set := redact.New()
	dec := json.NewDecoder(bytes.NewReader(task))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) == nil {
		collectSecrets(v, names, set, false, 0)
	}
	return set
}

// RedactJSON is RedactTask with the sensitive key names given.
func RedactJSON(doc []byte, sensitive map[string]bool) []byte {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []byte(strconv.Quote(redact.Marker))
	}
	switch v.(type) {
	case map[string]any, []any:
	default:
		return []byte(strconv.Quote(redact.Marker))
	}
	set := redact.New()
	collectSecrets(v, sensitive, set, false, 0)
	out := set.Value(v, false)
	out = maskKeys(out, sensitive, 0)
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return []byte(strconv.Quote(redact.Marker))
	}
	return b
}

// secretKey reports whether a key's name says its value is a secret.
// Host keys are public; private keys, passwords and tokens are not.
func secretKey(k string, sensitive map[string]bool) bool {
	if sensitive[k] {
		return true
	}
	lk := strings.ToLower(k)
	switch {
	case strings.Contains(lk, "password"), strings.Contains(lk, "passwd"), strings.Contains(lk, "secret"),
		strings.Contains(lk, "token"), strings.Contains(lk, "credential"), strings.Contains(lk, "private"),
		strings.Contains(lk, "apikey"), strings.Contains(lk, "api_key"), strings.Contains(lk, "api-key"),
		lk == "key", lk == "passphrase", strings.HasSuffix(lk, "_key") && !strings.Contains(lk, "host") && !strings.Contains(lk, "public"):
		return true
	}
	return false
}

// collectSecrets registers the values under secret keys (whole subtrees).
func collectSecrets(v any, sensitive map[string]bool, set *redact.Set, under bool, depth int) {
	if depth > MaxTaskDepth {
		return
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			collectSecrets(e, sensitive, set, under || secretKey(k, sensitive), depth+1)
		}
	case []any:
		for _, e := range x {
			collectSecrets(e, sensitive, set, under, depth+1)
		}
	case string:
		if under {
			set.AddField(x)
		}
	case json.Number:
		if under {
			if f, err := x.Float64(); err == nil {
				set.AddNumber(f, true)
			}
		}
	}
}

// maskKeys replaces the values of secret keys that are too short for the
// set to redact (it skips values under redact.MinLen), or not strings.
func maskKeys(v any, sensitive map[string]bool, depth int) any {
	if depth > MaxTaskDepth {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if secretKey(k, sensitive) {
				switch e.(type) {
				case map[string]any, []any:
					x[k] = maskAll(e, depth+1)
				case nil, bool:
				default:
					x[k] = redact.Marker
				}
				continue
			}
			x[k] = maskKeys(e, sensitive, depth+1)
		}
	case []any:
		for i, e := range x {
			x[i] = maskKeys(e, sensitive, depth+1)
		}
	}
	return v
}

// maskAll replaces every leaf under a secret key.
func maskAll(v any, depth int) any {
	if depth > MaxTaskDepth {
		return redact.Marker
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = maskAll(e, depth+1)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = maskAll(e, depth+1)
		}
		return x
	case nil, bool:
		return x
	}
	return redact.Marker
}
