package crypto_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings/bindingstest"
	cryptob "github.com/loomrt/loom/bindings/crypto"
)

func newState(t *testing.T) (*lua.LState, *bindingstest.Host) {
	t.Helper()
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, cryptob.New())
	bindingstest.Run(t, L, `crypto = require("loom.crypto")`)
	return L, h
}

// eval runs `return <expr>` and returns the first result as a string.
func eval(t *testing.T, L *lua.LState, expr string) string {
	t.Helper()
	if err := L.DoString("return " + expr); err != nil {
		t.Fatalf("%s: %s", expr, bindingstest.ErrorMessage(err))
	}
	v := L.Get(-1)
	L.Pop(L.GetTop())
	if s, ok := v.(lua.LString); ok {
		return string(s)
	}
	return v.String()
}

// raises runs code and returns the binding error ("kind: message").
func raises(t *testing.T, L *lua.LState, code string) string {
	t.Helper()
	err := L.DoString(code)
	if err == nil {
		t.Fatalf("%s: no error", code)
	}
	return bindingstest.ErrorMessage(err)
}

func TestDigestsAndHMAC(t *testing.T) {
	L, _ := newState(t)
	for expr, want := range map[string]string{
		`crypto.sha256("abc")`:                         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
		`crypto.sha256("")`:                            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		`crypto.sha1("abc")`:                           "a9993e364706816aba3e25717850c26c9cd0d89d",
		`crypto.md5("abc")`:                            "900150983cd24fb0d6963f7d28e17f72",
		`crypto.sha512("abc"):sub(1, 16)`:              "ddaf35a193617aba",
		`crypto.sha256("abc", "base64")`:               "ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=",
		`crypto.sha256("abc", "base64url")`:            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0",
		`crypto.hex_encode(crypto.sha1("abc", "raw"))`: "a9993e364706816aba3e25717850c26c9cd0d89d",
		// RFC 4231 test case 2, RFC 2202 test case 2.
		`crypto.hmac("sha256", "Jefe", "what do ya want for nothing?")`:            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
		`crypto.hmac("sha1", "Jefe", "what do ya want for nothing?")`:              "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79",
		`crypto.hmac("SHA512", "Jefe", "what do ya want for nothing?"):sub(1, 16)`: "164b7a7bfcf819e2",
	} {
		if got := eval(t, L, expr); got != want {
			t.Errorf("%s = %s, want %s", expr, got, want)
		}
	}
}

// The SigV4 signing key, derived in Lua as the aws provider does, equals
// the example of AWS's documentation ("Examples of how to derive a signing
// key for Signature Version 4").
func TestSigV4SigningKeyInLua(t *testing.T) {
	L, _ := newState(t)
	got := eval(t, L, `(function()
		local k = crypto.hmac("sha256", "AWS4wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "raw")
		k = crypto.hmac("sha256", k, "us-east-1", "raw")
		k = crypto.hmac("sha256", k, "iam", "raw")
		return crypto.hmac("sha256", k, "aws4_request")
	end)()`)
	if want := "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"; got != want {
		t.Errorf("signing key %s, want %s", got, want)
	}
}

func TestEncodingsRandomEqual(t *testing.T) {
	L, _ := newState(t)
	for expr, want := range map[string]string{
		`crypto.base64_encode("\255\254hi")`:                  "//5oaQ==",
		`crypto.base64_decode("//5oaQ==") == "\255\254hi"`:    "true",
		`crypto.base64_decode("//5o\naQ") == "\255\254hi"`:    "true",
		`crypto.base64url_encode("\255\254hi")`:               "__5oaQ",
		`crypto.base64url_decode("__5oaQ==") == "\255\254hi"`: "true",
		`crypto.hex_encode("\0\171")`:                         "00ab",
		`crypto.hex_decode("00AB") == "\0\171"`:               "true",
		`#crypto.random(16)`:                                  "32",
		`#crypto.random(16, "raw")`:                           "16",
		`crypto.random(8) ~= crypto.random(8)`:                "true",
		`crypto.equal("abc", "abc")`:                          "true",
		`crypto.equal("abc", "abd")`:                          "false",
		`crypto.equal("abc", "abcd")`:                         "false",
	} {
		if got := eval(t, L, expr); got != want {
			t.Errorf("%s = %s, want %s", expr, got, want)
		}
	}
	for code, want := range map[string]string{
		`crypto.base64_decode("a$b")`:     "config: crypto.base64_decode: not standard base64",
		`crypto.base64url_decode("a+b")`:  "config: crypto.base64url_decode: not URL-safe base64",
		`crypto.hex_decode("abc")`:        "config: crypto.hex_decode: not hex",
		`crypto.random(0)`:                "config: crypto.random: n must be an integer from 1 to 4096",
		`crypto.random(4097)`:             "config: crypto.random: n must be an integer",
		`crypto.sha256("x", "octal")`:     `config: crypto.sha256: enc (argument 2) must be "hex", "base64", "base64url" or "raw", got "octal"`,
		`crypto.sha256(42)`:               "config: crypto.sha256: data (argument 1) must be a string, got number",
		`crypto.hmac("md5", "k", "d")`:    `config: crypto.hmac: algo must be "sha256", "sha1" or "sha512", got "md5"`,
		`crypto.hmac("sha256", nil, "d")`: "config: crypto.hmac: key (argument 2) must be a string, got nil",
	} {
		if got := raises(t, L, code); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %s, want %s...", code, got, want)
		}
	}
}

// A secret passed as a wrong argument is not quoted back.
func TestErrorsDoNotQuoteLongArguments(t *testing.T) {
	L, _ := newState(t)
	secret := "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	msg := raises(t, L, `crypto.hmac("`+secret+`", "k", "d")`)
	if strings.Contains(msg, secret) {
		t.Errorf("the error quotes the argument: %s", msg)
	}
}

// keyFiles writes one private key of each kind the binding reads into the
// host's work dir and returns the keys by file name.
func keyFiles(t *testing.T, h *bindingstest.Host) map[string]crypto.Signer {
	t.Helper()
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaKey)
	sec1, _ := x509.MarshalECPrivateKey(ecKey)
	openssh, _ := ssh.MarshalPrivateKey(edKey, "test")
	files := map[string][]byte{
		"keys/rsa-pkcs1.pem": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}),
		"keys/rsa-pkcs8.pem": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
		"keys/ec.pem":        pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}),
		"keys/ed25519":       pem.EncodeToMemory(openssh),
	}
	sa, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "loom-test", "private_key_id": "0123abcd",
		"private_key": string(files["keys/rsa-pkcs8.pem"]), "client_email": "loom@loom-test.iam.gserviceaccount.com",
		"client_id": "1234567890", "token_uri": "https://oauth2.googleapis.com/token",
	})
	files["api_keys/sa.json"] = sa
	for name, data := range files {
		p := filepath.Join(h.Work, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, data, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]crypto.Signer{"keys/rsa-pkcs1.pem": rsaKey, "keys/rsa-pkcs8.pem": rsaKey, "keys/ec.pem": ecKey,
		"keys/ed25519": edKey, "api_keys/sa.json": rsaKey}
}

// verify checks a base64url signature as a JWS verifier would.
func verify(t *testing.T, pub crypto.PublicKey, alg string, data, sig64 string) {
	t.Helper()
	sig, err := base64.RawURLEncoding.DecodeString(sig64)
	if err != nil {
		t.Fatalf("%s: signature is not base64url: %v", alg, err)
	}
	d := sha256.Sum256([]byte(data))
	var ok bool
	switch alg {
	case "RS256":
		ok = rsa.VerifyPKCS1v15(pub.(*rsa.PublicKey), crypto.SHA256, d[:], sig) == nil
	case "PS256":
		ok = rsa.VerifyPSS(pub.(*rsa.PublicKey), crypto.SHA256, d[:], sig, nil) == nil
	case "ES256":
		if len(sig) != 64 {
			t.Fatalf("ES256 signature has %d bytes, want 64 (r||s)", len(sig))
		}
		r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])
		ok = ecdsa.Verify(pub.(*ecdsa.PublicKey), d[:], r, s)
	case "EdDSA":
		ok = ed25519.Verify(pub.(ed25519.PublicKey), []byte(data), sig)
	}
	if !ok {
		t.Errorf("%s signature does not verify", alg)
	}
}

func TestKeysSignAndStaySecret(t *testing.T) {
	L, h := newState(t)
	keys := keyFiles(t, h)
	algs := map[string][]string{"keys/rsa-pkcs1.pem": {"RS256", "PS256"}, "keys/rsa-pkcs8.pem": {"RS256"},
		"keys/ec.pem": {"ES256"}, "keys/ed25519": {"EdDSA"}, "api_keys/sa.json": {"RS256"}}
	for file, signer := range keys {
		for _, alg := range algs[file] {
			sig := eval(t, L, `crypto.key({resource = "`+file+`"}):sign("`+alg+`", "header.payload")`)
			verify(t, signer.Public(), alg, "header.payload", sig)
		}
		// The handle tells the public half, never the private one.
		pub, _ := ssh.NewPublicKey(signer.Public())
		if got := eval(t, L, `crypto.key({resource = "`+file+`"}).fingerprint`); got != ssh.FingerprintSHA256(pub) {
			t.Errorf("%s: fingerprint %s, want %s", file, got, ssh.FingerprintSHA256(pub))
		}
		der, _ := x509.MarshalPKIXPublicKey(signer.Public())
		if got := eval(t, L, `crypto.key({resource = "`+file+`"}).public_pem`); got != string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})) {
			t.Errorf("%s: public_pem %s", file, got)
		}
		data, _ := os.ReadFile(filepath.Join(h.Work, file))
		for _, expr := range []string{`tostring(k)`, `k.private`, `k.priv`, `k.pem`, `k.key`} {
			got := eval(t, L, `(function() local k = crypto.key({resource = "`+file+`"}); return `+expr+` end)()`)
			if got != "" && got != "nil" && strings.Contains(string(data), strings.TrimSpace(got)) {
				t.Errorf("%s: %s gives key material", file, expr)
			}
		}
		found := false
		for _, s := range h.Secrets() {
			found = found || s == string(data)
		}
		if !found {
			t.Errorf("%s: the key's text was not registered as a secret", file)
		}
	}
	// The service-account key's public fields.
	for field, want := range map[string]string{"client_email": "loom@loom-test.iam.gserviceaccount.com", "private_key_id": "0123abcd",
		"project_id": "loom-test", "token_uri": "https://oauth2.googleapis.com/token", "type": "rsa", "bits": "2048",
		"source": "resource api_keys/sa.json"} {
		if got := eval(t, L, `crypto.key({resource = "api_keys/sa.json"}).`+field); got != want {
			t.Errorf("sa key %s = %q, want %q", field, got, want)
		}
	}
	if got := eval(t, L, `table.concat(crypto.key({resource = "keys/ec.pem"}).algorithms, ",")`); got != "ES256" {
		t.Errorf("ec algorithms %s", got)
	}
	if got := eval(t, L, `crypto.key({resource = "keys/ec.pem"}).client_email`); got != "nil" && got != "" {
		t.Errorf("a PEM key has client_email %q", got)
	}
}

func TestKeyFromASensitiveField(t *testing.T) {
	L, h := newState(t)
	keys := keyFiles(t, h)
	data, _ := os.ReadFile(filepath.Join(h.Work, "api_keys/sa.json"))
	h.Sensitive = map[string]string{"google_json_key": string(data)}
	sig := eval(t, L, `crypto.key({field = "google_json_key"}):sign("RS256", "x")`)
	verify(t, keys["api_keys/sa.json"].Public(), "RS256", "x", sig)
	if got := eval(t, L, `crypto.key({field = "google_json_key"}).source`); got != "field google_json_key" {
		t.Errorf("source %q", got)
	}
	msg := raises(t, L, `crypto.key({field = "region"})`)
	if !strings.Contains(msg, `the task has no sensitive field "region"`) {
		t.Errorf("a field that is not sensitive: %s", msg)
	}
}

func TestKeyErrorsNeverQuoteTheKey(t *testing.T) {
	L, h := newState(t)
	keyFiles(t, h)
	junk := "-----BEGIN RSA PRIVATE KEY-----\nTUlJRXBBSUJBQUtDQVFFQXRvcFNlY3JldEtleU1hdGVyaWFsMDEyMzQ1Njc4OQ==\n-----END RSA PRIVATE KEY-----\n"
	os.WriteFile(filepath.Join(h.Work, "bad.pem"), []byte(junk), 0o600)
	os.WriteFile(filepath.Join(h.Work, "notes.json"), []byte(`{"private_key_x": "TUlJRXBBSUJBQUtDQVFFQXRvcFNlY3JldEtleU1hdGVyaWFs"}`), 0o600)
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	os.WriteFile(filepath.Join(h.Work, "small.pem"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(small)}), 0o600)
	h.Sensitive = map[string]string{"k": junk}
	for code, want := range map[string]string{
		`crypto.key({resource = "bad.pem"})`:                        "config: crypto.key: resource bad.pem: cannot parse the private key",
		`crypto.key({field = "k"})`:                                 "config: crypto.key: field k: cannot parse the private key",
		`crypto.key({resource = "notes.json"})`:                     "config: crypto.key: resource notes.json: a JSON key file needs a private_key",
		`crypto.key({resource = "small.pem"})`:                      "config: crypto.key: resource small.pem: the RSA key has 1024 bits",
		`crypto.key({resource = "missing.pem"})`:                    "io: crypto.key: missing.pem does not exist",
		`crypto.key({resource = "/etc/shadow"})`:                    "permission: crypto.key: /etc/shadow is outside the hook's work dir",
		`crypto.key({resource = "../../x"})`:                        "permission: crypto.key: ../../x is outside",
		`crypto.key({})`:                                            "config: crypto.key: give exactly one of resource",
		`crypto.key({resource = "a", field = "b"})`:                 "config: crypto.key: give exactly one of resource",
		`crypto.key({resourse = "bad.pem"})`:                        "config: crypto.key: unknown option resourse",
		`crypto.key("bad.pem")`:                                     "config: crypto.key: want a table",
		`crypto.key({resource = "keys/ec.pem"}):sign("RS256", "x")`: `config: key:sign: a ecdsa 256 key signs with ES256, not "RS256"`,
		`crypto.key({resource = "keys/ec.pem"}).sign("RS256", "x")`: "config: key:sign: called without a key",
		`crypto.key({resource = "keys/ec.pem"}).type = "rsa"`:       "config: crypto.Key is read-only",
	} {
		got := raises(t, L, code)
		if !strings.HasPrefix(got, want) {
			t.Errorf("%s:\n got %s\nwant %s...", code, got, want)
		}
		if strings.Contains(got, "TUlJRXBBSUJB") || strings.Contains(got, "BEGIN") {
			t.Errorf("%s: the error quotes the key: %s", code, got)
		}
	}
}

func TestGenerateKey(t *testing.T) {
	L, h := newState(t)
	line := eval(t, L, `(function()
		local k = crypto.generate_key({path = "ssh_keys/node-1", comment = "loom-node-1"})
		assert(k.type == "ed25519" and k.path == "ssh_keys/node-1" and k.source == "generated")
		return k.public_ssh
	end)()`)
	data, err := os.ReadFile(filepath.Join(h.Work, "ssh_keys/node-1"))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(h.Work, "ssh_keys/node-1")); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	signer, err := ssh.ParsePrivateKey(data)
	if err != nil {
		t.Fatalf("the written key does not parse as an SSH key: %v", err)
	}
	if want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey()))) + " loom-node-1"; line != want {
		t.Errorf("public_ssh %q, want %q", line, want)
	}
	// Loaded again from the file, it is the same key.
	if got, want := eval(t, L, `crypto.key({resource = "ssh_keys/node-1"}).fingerprint`), ssh.FingerprintSHA256(signer.PublicKey()); got != want {
		t.Errorf("reloaded fingerprint %s, want %s", got, want)
	}
	if msg := raises(t, L, `crypto.generate_key({path = "ssh_keys/node-1"})`); !strings.Contains(msg, "exists already") {
		t.Errorf("overwriting without overwrite = true: %s", msg)
	}
	eval(t, L, `crypto.generate_key({path = "ssh_keys/node-1", overwrite = true, type = "rsa", bits = 2048}).bits`)
	if again, _ := os.ReadFile(filepath.Join(h.Work, "ssh_keys/node-1")); string(again) == string(data) {
		t.Error("overwrite = true left the old key")
	}
	if got := eval(t, L, `crypto.generate_key({type = "ecdsa", bits = 384}):sign("ES384", "x") ~= nil`); got != "true" {
		t.Error("ecdsa 384 key does not sign")
	}
	if got := eval(t, L, `crypto.generate_key().path`); got != "nil" && got != "" {
		t.Errorf("a key without path has path %q", got)
	}
	os.WriteFile(filepath.Join(h.Dir, "x"), nil, 0o600)
	for code, want := range map[string]string{
		`crypto.generate_key({path = "` + filepath.Join(h.Dir, "k") + `"})`: "permission: crypto.generate_key:",
		`crypto.generate_key({path = "/tmp/k"})`:                            "permission: crypto.generate_key: /tmp/k is outside",
		`crypto.generate_key({type = "dsa"})`:                               `config: crypto.generate_key: type must be "ed25519", "rsa" or "ecdsa"`,
		`crypto.generate_key({type = "rsa", bits = 1024})`:                  "config: crypto.generate_key: an rsa key has 2048 to 8192 bits",
		`crypto.generate_key({type = "ecdsa", bits = 128})`:                 "config: crypto.generate_key: an ecdsa key has 256, 384 or 521 bits",
	} {
		if got := raises(t, L, code); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %s, want %s...", code, got, want)
		}
	}
	found := false
	for _, s := range h.Secrets() {
		found = found || strings.Contains(s, "OPENSSH PRIVATE KEY")
	}
	if !found {
		t.Error("the generated key's text was not registered as a secret")
	}
}
