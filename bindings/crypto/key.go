package crypto

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/localpath"
)

// keyTypeName names the metatable of key userdata.
const keyTypeName = "loom.crypto.key"

// maxKeyFile bounds a key file: a 16384-bit RSA key in a service-account
// JSON is under 20 KiB.
const maxKeyFile = 64 << 10

// key is what crypto.key and crypto.generate_key return. priv never
// leaves Go; the string fields describe the public half.
type key struct {
	priv   crypto.Signer
	typ    string // rsa, ecdsa, ed25519
	bits   int
	source string
	path   string
	// meta holds a Google service-account key's public fields.
	meta map[string]string
	// derived lazily
	pub ssh.PublicKey
}

// serviceAccountFields are the fields of a Google service-account JSON
// key that are not secret and that a plugin needs (the JWT's iss and kid,
// the token endpoint, the project).
var serviceAccountFields = []string{"client_email", "client_id", "private_key_id", "project_id", "token_uri"}

func registerKeyType(L *lua.LState) {
	mt := L.NewTypeMetatable(keyTypeName)
	if mt.RawGetString("__index") != lua.LNil {
		return
	}
	sign := L.NewFunction(keySign)
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		k := checkKey(L, 1, "index")
		name, _ := L.Get(2).(lua.LString)
		L.Push(k.field(L, string(name), sign))
		return 1
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		bindings.Raise(L, bindings.Errorf("config", "crypto.Key is read-only (setting %s)", L.Get(2).String()))
		return 0
	}))
	mt.RawSetString("__tostring", L.NewFunction(func(L *lua.LState) int {
		k := checkKey(L, 1, "tostring")
		L.Push(lua.LString(fmt.Sprintf("crypto.Key(%s %d, %s, %s)", k.typ, k.bits, k.publicKey().Type(), ssh.FingerprintSHA256(k.publicKey()))))
		return 1
	}))
	mt.RawSetString("__metatable", lua.LString("locked"))
}

func checkKey(L *lua.LState, n int, method string) *key {
	ud, ok := L.Get(n).(*lua.LUserData)
	var k *key
	if ok {
		k, ok = ud.Value.(*key)
	}
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "key:%s: called without a key (use key:%s(...), not key.%s(...))", method, method, method))
	}
	return k
}

func (k *key) publicKey() ssh.PublicKey {
	if k.pub == nil {
		pub, err := ssh.NewPublicKey(k.priv.Public())
		if err != nil {
			// Every type crypto.key accepts has an SSH form.
			panic(fmt.Sprintf("crypto: public key of a %s key: %v", k.typ, err))
		}
		k.pub = pub
	}
	return k.pub
}

// algorithms lists the JOSE names key:sign takes for this key.
func (k *key) algorithms() []string {
	switch k.typ {
	case "rsa":
		return []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	case "ecdsa":
		switch k.bits {
		case 256:
			return []string{"ES256"}
		case 384:
			return []string{"ES384"}
		case 521:
			return []string{"ES512"}
		}
		return nil
	}
	return []string{"EdDSA"}
}

func (k *key) field(L *lua.LState, name string, sign *lua.LFunction) lua.LValue {
	switch name {
	case "sign":
		return sign
	case "type":
		return lua.LString(k.typ)
	case "bits":
		return lua.LNumber(k.bits)
	case "algorithms":
		t := L.NewTable()
		for _, a := range k.algorithms() {
			t.Append(lua.LString(a))
		}
		return t
	case "public_pem":
		der, err := x509.MarshalPKIXPublicKey(k.priv.Public())
		if err != nil {
			bindings.Raise(L, bindings.Errorf("config", "crypto.Key: encoding the public key: %v", err))
		}
		return lua.LString(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	case "public_ssh":
		line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.publicKey())))
		if c := k.meta["comment"]; c != "" {
			line += " " + c
		}
		return lua.LString(line)
	case "fingerprint":
		return lua.LString(ssh.FingerprintSHA256(k.publicKey()))
	case "fingerprint_md5":
		return lua.LString(ssh.FingerprintLegacyMD5(k.publicKey()))
	case "source":
		return lua.LString(k.source)
	case "path":
		if k.path == "" {
			return lua.LNil
		}
		return lua.LString(k.path)
	}
	for _, f := range serviceAccountFields {
		if f == name {
			if v, ok := k.meta[name]; ok {
				return lua.LString(v)
			}
			return lua.LNil
		}
	}
	return lua.LNil
}

// keySign is key:sign(alg, data [, enc]).
func keySign(L *lua.LState) int {
	k := checkKey(L, 1, "sign")
	alg := checkString(L, 2, "key:sign", "alg")
	data := []byte(checkString(L, 3, "key:sign", "data"))
	enc := encodingOr(L, 4, "key:sign", "base64url")
	sig, err := k.sign(alg, data)
	if err != nil {
		bindings.Raise(L, err)
	}
	L.Push(lua.LString(encode(sig, enc)))
	return 1
}

func (k *key) sign(alg string, data []byte) ([]byte, error) {
	ok := false
	for _, a := range k.algorithms() {
		ok = ok || a == alg
	}
	if !ok {
		return nil, bindings.Errorf("config", "key:sign: a %s %d key signs with %s, not %q", k.typ, k.bits, strings.Join(k.algorithms(), ", "), alg)
	}
	var h crypto.Hash
	switch alg[len(alg)-3:] {
	case "256":
		h = crypto.SHA256
	case "384":
		h = crypto.SHA384
	case "512":
		h = crypto.SHA512
	}
	if alg == "EdDSA" {
		return k.priv.Sign(rand.Reader, data, crypto.Hash(0))
	}
	digest := digestOf(h, data)
	switch alg[:2] {
	case "RS":
		return k.priv.Sign(rand.Reader, digest, h)
	case "PS":
		return k.priv.Sign(rand.Reader, digest, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash, Hash: h})
	}
	// ES*: JWS wants r and s as fixed-size big-endian integers (RFC 7518
	// 3.4), not the ASN.1 sequence Go produces.
	priv := k.priv.(*ecdsa.PrivateKey)
	r, s, err := ecdsa.Sign(rand.Reader, priv, digest)
	if err != nil {
		return nil, bindings.Errorf("config", "key:sign: %v", err)
	}
	size := (priv.Curve.Params().BitSize + 7) / 8
	out := make([]byte, 2*size)
	r.FillBytes(out[:size])
	s.FillBytes(out[size:])
	return out, nil
}

func digestOf(h crypto.Hash, data []byte) []byte {
	switch h {
	case crypto.SHA384:
		d := sha512.Sum384(data)
		return d[:]
	case crypto.SHA512:
		d := sha512.Sum512(data)
		return d[:]
	}
	d := sha256.Sum256(data)
	return d[:]
}

// key is crypto.key{resource = path | field = name [, passphrase]}.
func (m *module) key(L *lua.LState) int {
	const where = "crypto.key"
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "%s: want a table {resource = path} or {field = name}, got %s", where, L.Get(1).Type()))
	}
	opts := readOptions(L, t, where, "resource", "field", "passphrase")
	resource, field, passphrase := opts["resource"], opts["field"], opts["passphrase"]
	if (resource == "") == (field == "") {
		bindings.Raise(L, bindings.Errorf("config", "%s: give exactly one of resource (a key file) and field (a sensitive field's name)", where))
	}
	if passphrase != "" {
		m.h.AddSecret(passphrase)
	}
	var text, source string
	if resource != "" {
		source = "resource " + resource
		b, err := localpath.ReadFile(m.h, where, resource, maxKeyFile)
		if err != nil {
			bindings.Raise(L, err)
		}
		text = string(b)
	} else {
		source = "field " + field
		fs, ok := m.h.(bindings.SensitiveFields)
		var v string
		if ok {
			v, ok = fs.SensitiveField(field)
		}
		if !ok {
			bindings.Raise(L, bindings.Errorf("config", "%s: the task has no sensitive field %q: a key is read only from a field the plugin's definition declares \"sensitive\" (or of type \"password\")", where, field))
		}
		text = v
	}
	addSecret(m.h, text)
	k, err := parseKey(text, passphrase)
	if err != nil {
		// The cause names formats, never the text; Redact is for a
		// library message that might quote it anyway.
		bindings.Raise(L, bindings.Errorf("config", "%s: %s: %s", where, source, m.h.Redact(err.Error())))
	}
	k.source = source
	pushKey(L, k)
	return 1
}

func pushKey(L *lua.LState, k *key) {
	ud := L.NewUserData()
	ud.Value = k
	L.SetMetatable(ud, L.GetTypeMetatable(keyTypeName))
	L.Push(ud)
}

// addSecret registers a key's text, and each line of it and, for a JSON
// key, the private key inside (a line of a PEM body could otherwise show
// up alone in some output).
func addSecret(h bindings.Host, text string) {
	if strings.TrimSpace(text) == "" {
		return
	}
	h.AddSecret(text)
	var sa struct {
		PrivateKey string `json:"private_key"`
	}
	if json.Unmarshal([]byte(text), &sa) == nil && sa.PrivateKey != "" {
		h.AddSecret(sa.PrivateKey)
		text = sa.PrivateKey
	}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if len(line) >= 16 && !strings.HasPrefix(line, "-----") {
			h.AddSecret(line)
		}
	}
}

// parseKey reads a PEM or OpenSSH private key, or a Google
// service-account JSON key. Errors name the format, never the text.
func parseKey(text, passphrase string) (*key, error) {
	meta := map[string]string{}
	trimmed := strings.TrimSpace(text)
	if strings.HasPrefix(trimmed, "{") {
		var sa map[string]any
		if err := json.Unmarshal([]byte(trimmed), &sa); err != nil {
			return nil, errors.New("not a JSON key file: the JSON does not parse")
		}
		pk, _ := sa["private_key"].(string)
		if pk == "" {
			return nil, errors.New("a JSON key file needs a private_key (a Google service-account key: IAM > Service accounts > Keys > Add key > JSON)")
		}
		for _, f := range serviceAccountFields {
			if v, ok := sa[f].(string); ok {
				meta[f] = v
			}
		}
		trimmed = pk
	}
	if !strings.Contains(trimmed, "-----BEGIN ") {
		return nil, errors.New("not a private key: want PEM (PKCS#1, PKCS#8, SEC 1), an OpenSSH private key, or a Google service-account JSON key")
	}
	var (
		raw any
		err error
	)
	if passphrase != "" {
		raw, err = ssh.ParseRawPrivateKeyWithPassphrase([]byte(trimmed), []byte(passphrase))
	} else {
		raw, err = ssh.ParseRawPrivateKey([]byte(trimmed))
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errors.New("the private key is encrypted: give its passphrase")
	case err != nil && passphrase != "":
		return nil, errors.New("cannot decrypt the private key: wrong passphrase or unsupported format")
	case err != nil:
		return nil, errors.New("cannot parse the private key (want PKCS#1, PKCS#8, SEC 1 or OpenSSH; a PKCS#8 key encrypted with a password is not supported)")
	}
	return newKey(raw, meta)
}

func newKey(raw any, meta map[string]string) (*key, error) {
	switch p := raw.(type) {
	case *rsa.PrivateKey:
		if p.N.BitLen() < 2048 {
			return nil, fmt.Errorf("the RSA key has %d bits; at least 2048 are needed", p.N.BitLen())
		}
		return &key{priv: p, typ: "rsa", bits: p.N.BitLen(), meta: meta}, nil
	case *ecdsa.PrivateKey:
		return &key{priv: p, typ: "ecdsa", bits: p.Curve.Params().BitSize, meta: meta}, nil
	case ed25519.PrivateKey:
		return &key{priv: p, typ: "ed25519", bits: 256, meta: meta}, nil
	case *ed25519.PrivateKey:
		return &key{priv: *p, typ: "ed25519", bits: 256, meta: meta}, nil
	}
	return nil, fmt.Errorf("a %T key cannot sign here (want RSA, ECDSA or Ed25519)", raw)
}

// generateKey is crypto.generate_key([opts]).
func (m *module) generateKey(L *lua.LState) int {
	const where = "crypto.generate_key"
	var opts map[string]string
	switch v := L.Get(1).(type) {
	case *lua.LNilType:
		opts = map[string]string{}
	case *lua.LTable:
		opts = readOptions(L, v, where, "type", "bits", "path", "overwrite", "comment")
	default:
		bindings.Raise(L, bindings.Errorf("config", "%s: want an options table, got %s", where, v.Type()))
	}
	typ := opts["type"]
	if typ == "" {
		typ = "ed25519"
	}
	bits := 0
	if s := opts["bits"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			bindings.Raise(L, bindings.Errorf("config", "%s: bits must be an integer, got %q", where, s))
		}
		bits = n
	}
	var (
		raw any
		err error
	)
	switch typ {
	case "ed25519":
		if bits != 0 && bits != 256 {
			bindings.Raise(L, bindings.Errorf("config", "%s: an ed25519 key has 256 bits, not %d", where, bits))
		}
		_, raw, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		if bits == 0 {
			bits = 3072
		}
		if bits < 2048 || bits > 8192 {
			bindings.Raise(L, bindings.Errorf("config", "%s: an rsa key has 2048 to 8192 bits, not %d", where, bits))
		}
		raw, err = rsa.GenerateKey(rand.Reader, bits)
	case "ecdsa":
		var c elliptic.Curve
		switch bits {
		case 0, 256:
			c = elliptic.P256()
		case 384:
			c = elliptic.P384()
		case 521:
			c = elliptic.P521()
		default:
			bindings.Raise(L, bindings.Errorf("config", "%s: an ecdsa key has 256, 384 or 521 bits, not %d", where, bits))
		}
		raw, err = ecdsa.GenerateKey(c, rand.Reader)
	default:
		bindings.Raise(L, bindings.Errorf("config", `%s: type must be "ed25519", "rsa" or "ecdsa", got %q`, where, typ))
	}
	if err != nil {
		bindings.Raise(L, bindings.Errorf("io", "%s: generating a %s key: %v", where, typ, err))
	}
	k, err := newKey(raw, map[string]string{"comment": opts["comment"]})
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "%s: %v", where, err))
	}
	k.source = "generated"
	if p := opts["path"]; p != "" {
		if err := m.writeKey(k, p, opts["comment"], opts["overwrite"] == "true"); err != nil {
			bindings.Raise(L, err)
		}
		k.path = p
	}
	pushKey(L, k)
	return 1
}

// writeKey writes k's private key in OpenSSH format to p in the work dir:
// mode 0600, through a temp file renamed into place, never over an
// existing file unless overwrite.
func (m *module) writeKey(k *key, p, comment string, overwrite bool) error {
	const where = "crypto.generate_key"
	block, err := ssh.MarshalPrivateKey(k.priv, comment)
	if err != nil {
		return bindings.Errorf("config", "%s: encoding the key: %v", where, err)
	}
	data := pem.EncodeToMemory(block)
	addSecret(m.h, string(data))
	a, rel, err := localpath.Resolve(m.h, where, p, true)
	if err != nil {
		return err
	}
	if !a.Writable {
		return bindings.Errorf("permission", "%s: %s is in %s, which is read only: write keys to the hook's work dir", where, p, a.What)
	}
	root, err := localpath.OpenRoot(a, where)
	if err != nil {
		return err
	}
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o750); err != nil {
			return localpath.IOError(where, p, err)
		}
	}
	if _, err := root.Lstat(rel); err == nil && !overwrite {
		return bindings.Errorf("io", "%s: %s exists already (load it with crypto.key{resource = ...}, or pass overwrite = true)", where, p)
	} else if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return localpath.IOError(where, p, err)
	}
	tmp := rel + ".tmp-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return localpath.IOError(where, p, err)
	}
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = root.Rename(tmp, rel)
	}
	if werr != nil {
		_ = root.Remove(tmp)
		return localpath.IOError(where, p, werr)
	}
	return nil
}

// readOptions reads an options table of string, number and boolean
// values (as strings), rejecting unknown keys.
func readOptions(L *lua.LState, t *lua.LTable, where string, known ...string) map[string]string {
	out := map[string]string{}
	t.ForEach(func(k, v lua.LValue) {
		ks, ok := k.(lua.LString)
		found := false
		for _, n := range known {
			found = found || (ok && string(ks) == n)
		}
		if !found {
			bindings.Raise(L, bindings.Errorf("config", "%s: unknown option %s (known: %s)", where, k.String(), strings.Join(known, ", ")))
		}
		switch x := v.(type) {
		case lua.LString:
			out[string(ks)] = string(x)
		case lua.LNumber:
			out[string(ks)] = x.String()
		case lua.LBool:
			out[string(ks)] = strconv.FormatBool(bool(x))
		default:
			bindings.Raise(L, bindings.Errorf("config", "%s: option %s must be a string, got %s", where, string(ks), v.Type()))
		}
	})
	return out
}
