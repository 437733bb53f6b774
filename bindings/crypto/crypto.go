// Package crypto is the loom.crypto binding: digests, HMAC, constant-time
// comparison, random bytes, base64 and hex, and signatures with private
// keys that never reach Lua.
//
// Cloud APIs authenticate requests with these: AWS signs every request
// with HMAC-SHA256 (SigV4), Google trades a JWT signed with a service
// account's RSA key (RS256) for an access token. A provider plugin does
// that in Lua with this module; only the key handling is Go's.
//
// A private key is loaded by reference: from a file the hook may read (its
// own resources, such as a Google service-account key uploaded as an
// api_keys resource) or from one of the task's sensitive fields, named.
// crypto.key returns a handle that can sign and tell its public half; the
// private key's text is registered as a task secret, and no function,
// field or error message gives it back.
//
// The package is named crypto like the module; it imports the standard
// library's crypto packages by their own names.
package crypto

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// maxRandom bounds one crypto.random call: keys and tokens are tens of
// bytes; a megabyte of randomness is a plugin bug.
const maxRandom = 4096

// Binding is the loom.crypto module. It holds no state.
type Binding struct{}

// New returns the crypto binding.
func New() *Binding { return &Binding{} }

// encType is the LuaLS type of an output encoding argument.
const encType = `"hex"|"base64"|"base64url"|"raw"`

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	return bindings.ModuleSpec{
		Name: "crypto",
		Doc: "Digests (SHA-1, SHA-256, SHA-512, MD5), HMAC, constant-time comparison, random bytes, base64 and hex, " +
			"and signatures (RS256, ES256, EdDSA...) with private keys loaded by reference from a resource file or a sensitive field: " +
			"a key's text is a task secret and never reaches Lua. Outputs are hex unless enc says \"base64\", \"base64url\" (no padding) or \"raw\" (bytes).",
		Types: []bindings.TypeSpec{
			{
				Name:    "crypto.Key",
				Doc:     "A private key handle from crypto.key or crypto.generate_key. Its fields describe the public half; the private key cannot be read back.",
				Methods: "key",
				Fields: []bindings.FieldSpec{
					{Name: "type", Type: `"rsa"|"ecdsa"|"ed25519"`, Doc: "the key's algorithm"},
					{Name: "bits", Type: "integer", Doc: "modulus size (rsa) or curve size (ecdsa); 256 for ed25519"},
					{Name: "algorithms", Type: "string[]", Doc: "what key:sign accepts for this key (\"RS256\", \"PS256\", \"ES256\", \"EdDSA\"...)"},
					{Name: "public_pem", Type: "string", Doc: "the public key, PEM (PKIX)"},
					{Name: "public_ssh", Type: "string", Doc: "the public key as an authorized_keys line (\"ssh-ed25519 AAAA... comment\")"},
					{Name: "fingerprint", Type: "string", Doc: "OpenSSH SHA256 fingerprint of the public key (\"SHA256:...\")"},
					{Name: "fingerprint_md5", Type: "string", Doc: "OpenSSH MD5 fingerprint (\"aa:bb:...\"), as AWS shows imported RSA key pairs"},
					{Name: "source", Type: "string", Doc: "where it came from: \"resource <path>\", \"field <name>\" or \"generated\""},
					{Name: "path", Type: "string", Optional: true, Doc: "generate_key: the file the private key was written to"},
					{Name: "client_email", Type: "string", Optional: true, Doc: "a Google service-account key's client_email"},
					{Name: "client_id", Type: "string", Optional: true, Doc: "a Google service-account key's client_id"},
					{Name: "private_key_id", Type: "string", Optional: true, Doc: "a Google service-account key's private_key_id (the JWT kid)"},
					{Name: "project_id", Type: "string", Optional: true, Doc: "a Google service-account key's project_id"},
					{Name: "token_uri", Type: "string", Optional: true, Doc: "a Google service-account key's token_uri"},
				},
			},
			{
				Name:  "crypto.KeySource",
				Doc:   "crypto.key's argument: exactly one of resource and field.",
				Exact: true,
				Fields: []bindings.FieldSpec{
					{Name: "resource", Type: "string", Optional: true, Doc: "a file the hook may read (its work dir, e.g. \"api_keys/sa.json\", its plugin folder, a resource the task names)"},
					{Name: "field", Type: "string", Optional: true, Doc: "the name of a sensitive (or password) field of the task holding the key"},
					{Name: "passphrase", Type: "string", Optional: true, Doc: "the passphrase of an encrypted OpenSSH or legacy PEM key (a secret)"},
				},
			},
			{
				Name:  "crypto.GenerateOptions",
				Doc:   "crypto.generate_key's options.",
				Exact: true,
				Fields: []bindings.FieldSpec{
					{Name: "type", Type: `"ed25519"|"rsa"|"ecdsa"`, Optional: true, Doc: "key type (\"ed25519\")"},
					{Name: "bits", Type: "integer", Optional: true, Doc: "rsa: 2048 to 8192 (3072); ecdsa: 256, 384 or 521 (256)"},
					{Name: "path", Type: "string", Optional: true, Doc: "write the private key (OpenSSH format, mode 0600) to this file in the work dir; without it the key lives only in the handle"},
					{Name: "overwrite", Type: "boolean", Optional: true, Doc: "replace an existing file at path (false: an existing file is an error)"},
					{Name: "comment", Type: "string", Optional: true, Doc: "the comment of public_ssh and of the OpenSSH file"},
				},
			},
		},
		Funcs: []bindings.FuncSpec{
			{Name: "sha256", Params: []string{"data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "The SHA-256 digest of data, hex unless enc says otherwise."},
			{Name: "sha1", Params: []string{"data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "The SHA-1 digest of data (for protocols that need it; not for new signatures)."},
			{Name: "sha512", Params: []string{"data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "The SHA-512 digest of data."},
			{Name: "md5", Params: []string{"data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "The MD5 digest of data: for checksums APIs ask for (Content-MD5) and legacy fingerprints only."},
			{Name: "hmac", Params: []string{`algo "sha256"|"sha1"|"sha512"`, "key string", "data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "The HMAC of data under key. Raises \"config\" for another algorithm; the key is never in a message."},
			{Name: "equal", Params: []string{"a string", "b string"}, Returns: []string{"boolean"},
				Doc: "Compares two strings in time that depends only on their lengths (for signatures and tokens)."},
			{Name: "random", Params: []string{"n integer", "enc? " + encType}, Returns: []string{"string"},
				Doc: "n (1 to 4096) random bytes from the operating system's generator, hex unless enc says otherwise."},
			{Name: "base64_encode", Params: []string{"data string"}, Returns: []string{"string"},
				Doc: "Standard base64, padded."},
			{Name: "base64_decode", Params: []string{"text string"}, Returns: []string{"string"},
				Doc: "Decodes standard base64, padded or not; line breaks are ignored. Raises \"config\" on other characters."},
			{Name: "base64url_encode", Params: []string{"data string"}, Returns: []string{"string"},
				Doc: "URL-safe base64 without padding, as JWTs use."},
			{Name: "base64url_decode", Params: []string{"text string"}, Returns: []string{"string"},
				Doc: "Decodes URL-safe base64, padded or not. Raises \"config\" on other characters."},
			{Name: "hex_encode", Params: []string{"data string"}, Returns: []string{"string"},
				Doc: "Lower-case hex."},
			{Name: "hex_decode", Params: []string{"text string"}, Returns: []string{"string"},
				Doc: "Decodes hex (either case). Raises \"config\" on an odd length or other characters."},
			{Name: "key", Params: []string{"src crypto.KeySource"}, Returns: []string{"crypto.Key"},
				Doc: "Loads a private key by reference: src.resource, a file the hook may read (a PEM key: PKCS#1, PKCS#8, SEC 1; an OpenSSH key; " +
					"or a Google service-account JSON key, whose client_email, private_key_id, project_id and token_uri become fields), " +
					"or src.field, the name of one of the task's sensitive fields holding such a text. The text is registered as a task secret. " +
					"Raises \"config\" (no such field, not sensitive, not a key: messages never quote the text), \"permission\" or \"io\" (the file)."},
			{Name: "generate_key", Params: []string{"opts? crypto.GenerateOptions"}, Returns: []string{"crypto.Key"},
				Doc: "Generates a key pair (ed25519 unless opts.type says rsa or ecdsa). With opts.path, writes the private key in OpenSSH format " +
					"(mode 0600, atomically, in the hook's work dir) for SSH clients such as the automators; public_ssh is what a cloud installs."},
			{Name: "key:sign", Params: []string{"alg string", "data string", "enc? " + encType}, Returns: []string{"string"},
				Doc: "Signs data with the key: RS256, RS384, RS512, PS256, PS384, PS512 (rsa), ES256, ES384, ES512 (ecdsa: the JWS form, r and s " +
					"fixed-size, not ASN.1), EdDSA (ed25519). The signature is base64url (no padding, as in a JWT) unless enc says otherwise."},
		},
	}
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	registerKeyType(L)
	digest := func(name string, f func() hash.Hash) lua.LGFunction {
		return func(L *lua.LState) int {
			data := checkString(L, 1, "crypto."+name, "data")
			enc := encoding(L, 2, "crypto."+name)
			hh := f()
			hh.Write([]byte(data))
			L.Push(lua.LString(encode(hh.Sum(nil), enc)))
			return 1
		}
	}
	m := &module{h: h}
	return L.SetFuncs(L.CreateTable(0, 16), map[string]lua.LGFunction{
		"sha256":           digest("sha256", sha256.New),
		"sha1":             digest("sha1", sha1.New),
		"sha512":           digest("sha512", sha512.New),
		"md5":              digest("md5", md5.New),
		"hmac":             hmacFn,
		"equal":            equal,
		"random":           random,
		"base64_encode":    func(L *lua.LState) int { return encodeFn(L, "base64_encode", "base64") },
		"base64url_encode": func(L *lua.LState) int { return encodeFn(L, "base64url_encode", "base64url") },
		"hex_encode":       func(L *lua.LState) int { return encodeFn(L, "hex_encode", "hex") },
		"base64_decode":    base64Decode,
		"base64url_decode": base64URLDecode,
		"hex_decode":       hexDecode,
		"key":              m.key,
		"generate_key":     m.generateKey,
	})
}

// module is the module's table for one VM.
type module struct{ h bindings.Host }

// checkString returns argument n as a string (a number is not one: a
// digest of 1e+15's text is rarely what was meant).
func checkString(L *lua.LState, n int, where, what string) string {
	v, ok := L.Get(n).(lua.LString)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "%s: %s (argument %d) must be a string, got %s", where, what, n, L.Get(n).Type()))
	}
	return string(v)
}

// encoding reads an optional output encoding argument; hex by default.
func encoding(L *lua.LState, n int, where string) string {
	return encodingOr(L, n, where, "hex")
}

func encodingOr(L *lua.LState, n int, where, def string) string {
	switch v := L.Get(n).(type) {
	case *lua.LNilType:
		return def
	case lua.LString:
		switch s := string(v); s {
		case "hex", "base64", "base64url", "raw":
			return s
		}
	}
	bindings.Raise(L, bindings.Errorf("config", `%s: enc (argument %d) must be "hex", "base64", "base64url" or "raw", got %s`, where, n, describe(L.Get(n))))
	return ""
}

// describe names a Lua value for an error message: strings are quoted
// only when short, since an argument could be a secret passed in the
// wrong place.
func describe(v lua.LValue) string {
	if s, ok := v.(lua.LString); ok {
		if len(s) <= 16 {
			return `"` + string(s) + `"`
		}
		return "a string"
	}
	return v.Type().String()
}

func encode(b []byte, enc string) string {
	switch enc {
	case "base64":
		return base64.StdEncoding.EncodeToString(b)
	case "base64url":
		return base64.RawURLEncoding.EncodeToString(b)
	case "raw":
		return string(b)
	}
	return hex.EncodeToString(b)
}

func encodeFn(L *lua.LState, name, enc string) int {
	L.Push(lua.LString(encode([]byte(checkString(L, 1, "crypto."+name, "data")), enc)))
	return 1
}

func hmacFn(L *lua.LState) int {
	algo := checkString(L, 1, "crypto.hmac", "algo")
	var f func() hash.Hash
	switch strings.ToLower(algo) {
	case "sha256":
		f = sha256.New
	case "sha1":
		f = sha1.New
	case "sha512":
		f = sha512.New
	default:
		bindings.Raise(L, bindings.Errorf("config", `crypto.hmac: algo must be "sha256", "sha1" or "sha512", got %s`, describe(L.Get(1))))
	}
	key := checkString(L, 2, "crypto.hmac", "key")
	data := checkString(L, 3, "crypto.hmac", "data")
	enc := encoding(L, 4, "crypto.hmac")
	mac := hmac.New(f, []byte(key))
	mac.Write([]byte(data))
	L.Push(lua.LString(encode(mac.Sum(nil), enc)))
	return 1
}

func equal(L *lua.LState) int {
	a := checkString(L, 1, "crypto.equal", "a")
	b := checkString(L, 2, "crypto.equal", "b")
	L.Push(lua.LBool(subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1))
	return 1
}

func random(L *lua.LState) int {
	n, ok := L.Get(1).(lua.LNumber)
	if !ok || float64(n) != float64(int(n)) || n < 1 || n > maxRandom {
		bindings.Raise(L, bindings.Errorf("config", "crypto.random: n must be an integer from 1 to %d, got %s", maxRandom, L.Get(1).String()))
	}
	enc := encoding(L, 2, "crypto.random")
	b := make([]byte, int(n))
	if _, err := rand.Read(b); err != nil {
		bindings.Raise(L, bindings.Errorf("io", "crypto.random: the system's random generator failed: %v", err))
	}
	L.Push(lua.LString(encode(b, enc)))
	return 1
}

// base64Decode accepts padded and unpadded standard base64, and ignores
// line breaks (PEM bodies, wrapped API output).
func base64Decode(L *lua.LState) int {
	s := checkString(L, 1, "crypto.base64_decode", "text")
	s = strings.NewReplacer("\r", "", "\n", "").Replace(s)
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "crypto.base64_decode: not standard base64: %v", err))
	}
	L.Push(lua.LString(b))
	return 1
}

func base64URLDecode(L *lua.LState) int {
	s := checkString(L, 1, "crypto.base64url_decode", "text")
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "crypto.base64url_decode: not URL-safe base64: %v", err))
	}
	L.Push(lua.LString(b))
	return 1
}

func hexDecode(L *lua.LState) int {
	s := checkString(L, 1, "crypto.hex_decode", "text")
	b, err := hex.DecodeString(s)
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "crypto.hex_decode: not hex: %v", err))
	}
	L.Push(lua.LString(b))
	return 1
}
