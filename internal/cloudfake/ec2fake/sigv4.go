package ec2fake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// Credentials are an access key the fake accepts.
type Credentials struct {
	AccessKeyID, SecretAccessKey string
	// SessionToken, when set, must come in X-Amz-Security-Token
	// (temporary credentials from STS).
	SessionToken string
}

// authError is why a request's signature is refused, and the EC2 error
// code to answer with.
type authError struct {
	code, msg string
}

func (e *authError) Error() string { return e.code + ": " + e.msg }

// verify checks a request's Signature Version 4 (header form, as the EC2
// Query API takes it) against the accepted credentials, region and
// service "ec2", at time now (0 maxSkew: any time).
func verify(r *http.Request, body []byte, creds []Credentials, region string, now time.Time, maxSkew time.Duration) *authError {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return &authError{"AuthFailure", "AWS was not able to validate the provided access credentials"}
	}
	alg, rest, ok := strings.Cut(auth, " ")
	if !ok || alg != "AWS4-HMAC-SHA256" {
		return &authError{"IncompleteSignature", "Authorization header requires the AWS4-HMAC-SHA256 algorithm"}
	}
	parts := map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
		if ok {
			parts[k] = v
		}
	}
	cred, signedHeaders, sig := parts["Credential"], parts["SignedHeaders"], parts["Signature"]
	if cred == "" || signedHeaders == "" || sig == "" {
		return &authError{"IncompleteSignature", "Authorization header requires Credential, SignedHeaders and Signature"}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return &authError{"IncompleteSignature", fmt.Sprintf("Credential %q is not ACCESSKEY/DATE/REGION/SERVICE/aws4_request", cred)}
	}
	var c *Credentials
	for i := range creds {
		if creds[i].AccessKeyID == scope[0] {
			c = &creds[i]
		}
	}
	if c == nil {
		return &authError{"AuthFailure", "AWS was not able to validate the provided access credentials"}
	}
	amzDate := r.Header.Get("X-Amz-Date")
	t, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return &authError{"IncompleteSignature", "X-Amz-Date is missing or not YYYYMMDDTHHMMSSZ"}
	}
	if scope[1] != amzDate[:8] {
		return &authError{"SignatureDoesNotMatch", "the credential scope's date is not the date of X-Amz-Date"}
	}
	if scope[2] != region || scope[3] != "ec2" {
		return &authError{"SignatureDoesNotMatch", fmt.Sprintf("credential scope %s/%s, want %s/ec2", scope[2], scope[3], region)}
	}
	if maxSkew > 0 && (t.Sub(now) > maxSkew || now.Sub(t) > maxSkew) {
		return &authError{"RequestExpired", fmt.Sprintf("Request has expired: X-Amz-Date %s is more than %s away from the server's time", amzDate, maxSkew)}
	}
	signed := strings.Split(signedHeaders, ";")
	if !sort.StringsAreSorted(signed) {
		return &authError{"SignatureDoesNotMatch", "SignedHeaders are not sorted"}
	}
	has := map[string]bool{}
	for _, h := range signed {
		has[h] = true
	}
	if !has["host"] || !has["x-amz-date"] {
		return &authError{"SignatureDoesNotMatch", "SignedHeaders must include host and x-amz-date"}
	}
	if c.SessionToken != "" {
		if r.Header.Get("X-Amz-Security-Token") != c.SessionToken {
			return &authError{"AuthFailure", "AWS was not able to validate the provided access credentials (session token)"}
		}
		if !has["x-amz-security-token"] {
			return &authError{"SignatureDoesNotMatch", "X-Amz-Security-Token is not signed"}
		}
	}
	creq := CanonicalRequest(r, body, signed)
	want := Sign(c.SecretAccessKey, amzDate, region, "ec2", creq)
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return &authError{"AuthFailure", "AWS was not able to validate the provided access credentials (the signature does not match)"}
	}
	return nil
}

// CanonicalRequest is SigV4's canonical request for r with body, over
// the signed headers (lower-case, sorted).
func CanonicalRequest(r *http.Request, body []byte, signed []string) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n")
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	b.WriteString(path + "\n")
	b.WriteString(canonicalQuery(r.URL.Query()) + "\n")
	for _, h := range signed {
		v := r.Header.Values(h)
		if h == "host" {
			v = []string{r.Host}
		}
		for i := range v {
			v[i] = strings.Join(strings.Fields(v[i]), " ")
		}
		b.WriteString(h + ":" + strings.Join(v, ",") + "\n")
	}
	b.WriteString("\n" + strings.Join(signed, ";") + "\n")
	sum := sha256.Sum256(body)
	b.WriteString(hex.EncodeToString(sum[:]))
	return b.String()
}

func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, uriEncode(k)+"="+uriEncode(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

// uriEncode is SigV4's encoding: everything but A-Z a-z 0-9 - _ . ~ as
// %XX, upper-case hex.
func uriEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Sign returns the SigV4 signature (hex) of a canonical request made at
// amzDate (YYYYMMDDTHHMMSSZ).
func Sign(secret, amzDate, region, service, canonicalRequest string) string {
	sum := sha256.Sum256([]byte(canonicalRequest))
	scope := amzDate[:8] + "/" + region + "/" + service + "/aws4_request"
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	k := hmacSHA256([]byte("AWS4"+secret), amzDate[:8])
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	k = hmacSHA256(k, "aws4_request")
	return hex.EncodeToString(hmacSHA256(k, sts))
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
