package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPprofIsOptIn(t *testing.T) {
	get := func(h http.Handler, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	off := newFixture(t, Config{})
	if code, body := get(off.h, "/debug/pprof/"); code != http.StatusNotFound || !strings.Contains(body, "--pprof") {
		t.Errorf("without Pprof: %d %s, want 404 naming --pprof", code, body)
	}
	on := newFixture(t, Config{Pprof: true, Token: "s3cret"})
	if code, _ := get(on.h, "/debug/pprof/"); code != http.StatusUnauthorized {
		t.Errorf("with Pprof, without the token: %d, want 401", code)
	}
	for path, want := range map[string]int{
		"/debug/pprof/":                  http.StatusOK,
		"/debug/pprof/goroutine?debug=1": http.StatusOK,
		"/debug/pprof/cmdline":           http.StatusNotFound,
	} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		w := httptest.NewRecorder()
		on.h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("GET %s = %d, want %d", path, w.Code, want)
		}
	}
}
