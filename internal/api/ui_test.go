package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// stubQueue satisfies Queue; these tests never reach it.
type stubQueue struct{ Queue }

// TestUIBypassesOnlyItsPaths: the console's paths skip the bearer check
// (the console checks its session cookie), nothing else does, however
// the path is spelled.
func TestUIBypassesOnlyItsPaths(t *testing.T) {
	var hits []string
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits = append(hits, r.URL.Path) })
	s, err := New(Config{Addr: "127.0.0.1:0", Token: "secret-token-0123456789", Queue: stubQueue{}, UI: ui})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want int
	}{
		{"/ui/", http.StatusOK},
		{"/ui/tasks", http.StatusOK},
		{"/ui", http.StatusOK},
		{"/ui/../v1/tasks", http.StatusUnauthorized},
		{"/ui/%2e%2e/v1/tasks", http.StatusUnauthorized},
		{"/uix", http.StatusUnauthorized},
		{"/v1/tasks", http.StatusUnauthorized},
		{"/metrics", http.StatusUnauthorized},
	} {
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
		if w.Code != c.want {
			t.Errorf("GET %s = %d, want %d", c.path, w.Code, c.want)
		}
	}
	if len(hits) != 3 {
		t.Errorf("the console got %v, want its 3 paths", hits)
	}
	// Without a UI, /ui is an unknown endpoint like any other.
	s, err = New(Config{Addr: "127.0.0.1:0", Token: "secret-token-0123456789", Queue: stubQueue{}})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/ui/", nil)
	req.Header.Set("Authorization", "Bearer secret-token-0123456789")
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusNotFound {
		t.Errorf("GET /ui/ without a console = %d, want 404", w.Code)
	}
}
