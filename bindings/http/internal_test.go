package http

import (
	nethttp "net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"7", 7 * time.Second, true},
		{" 0 ", 0, true},
		{"-3", 0, false},
		{"soon", 0, false},
		{now.Add(90 * time.Second).Format(nethttp.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(nethttp.TimeFormat), 0, true},
	} {
		got, ok := parseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	for n := 1; n <= 12; n++ {
		for i := 0; i < 50; i++ {
			d := backoff(100*time.Millisecond, 2*time.Second, n)
			full := min(100*time.Millisecond<<(n-1), 2*time.Second)
			if d < full/2 || d > full {
				t.Fatalf("backoff(n=%d) = %v, want in [%v, %v]", n, d, full/2, full)
			}
		}
	}
}

func TestAllowed(t *testing.T) {
	list := []string{"api.example.com", "*.example.net", "10.0.0.1", "unix:/run/x.sock"}
	for host, want := range map[string]bool{
		"api.example.com":      true,
		"API.Example.COM.":     true,
		"example.com":          false,
		"evil-api.example.com": false,
		"a.example.net":        true,
		"a.b.example.net":      true,
		"example.net":          false,
		"badexample.net":       false,
		"10.0.0.1":             true,
		"10.0.0.2":             false,
	} {
		if got := allowed(list, host); got != want {
			t.Errorf("allowed(%q) = %v, want %v", host, got, want)
		}
	}
	if !allowed(nil, "anything") || !allowed([]string{"*"}, "anything") {
		t.Error("empty list and * must allow everything")
	}
	if !allowedSocket(list, "/run/x.sock") || allowedSocket(list, "/run/y.sock") || allowedSocket(nil, "/z") || !allowedSocket([]string{"*"}, "/z") {
		t.Error("allowedSocket: a socket needs its own unix: entry (or *); an empty list grants none")
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://u:p@api.example.com/v2/x?page=2":                "https://api.example.com/v2/x?page=2",
		"https://tok@api.example.com/":                           "https://api.example.com/",
		"https://h/x?access_token=abc&page=1&X-Amz-Signature=zz": "https://h/x?X-Amz-Signature=REDACTED&access_token=REDACTED&page=1",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := redactURL(u); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
	if got := redactRawURL("http://u:p@h:99999999/%zz?token=1"); got != "http://h:99999999/%zz?REDACTED" {
		t.Errorf("redactRawURL = %q", got)
	}
}

// TestDocsCoverOptionsAndFunctions keeps docs/bindings/http.md in step
// with the options the parser accepts and the functions the spec lists.
func TestDocsCoverOptionsAndFunctions(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "bindings", "http.md"))
	if err != nil {
		t.Fatalf("reading the binding reference: %v", err)
	}
	text := string(doc)
	for k := range optionKeys {
		if !strings.Contains(text, "| `"+k+"` |") {
			t.Errorf("option %s is not in the options table of docs/bindings/http.md", k)
		}
	}
	for k := range tlsKeys {
		if !strings.Contains(text, k+" = ") {
			t.Errorf("tls option %s is not documented", k)
		}
	}
	for _, f := range New(Options{}).Spec().Funcs {
		name := "http." + f.Name + "("
		if strings.HasPrefix(f.Name, "resp:") {
			name = f.Name + "()"
		}
		if !strings.Contains(text, name) {
			t.Errorf("function %s is not documented", name)
		}
	}
}

// TestOptionClassesMatchParser keeps the spec's http.RequestOptions and
// http.TLSOptions classes (the LuaLS stubs) equal to the keys the parser
// accepts, so an editor never flags a valid option or misses a typo.
func TestOptionClassesMatchParser(t *testing.T) {
	want := map[string]map[string]bool{"http.RequestOptions": optionKeys, "http.TLSOptions": tlsKeys}
	for _, ty := range New(Options{}).Spec().Types {
		keys, ok := want[ty.Name]
		if !ok {
			continue
		}
		delete(want, ty.Name)
		declared := map[string]bool{}
		for _, f := range ty.Fields {
			declared[f.Name] = true
			if !keys[f.Name] {
				t.Errorf("%s declares %s, which the parser rejects", ty.Name, f.Name)
			}
		}
		for k := range keys {
			if !declared[k] {
				t.Errorf("%s lacks %s, which the parser accepts", ty.Name, k)
			}
		}
	}
	for name := range want {
		t.Errorf("the spec declares no %s", name)
	}
}
