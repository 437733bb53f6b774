package coopfake

import (
	"net/http"
	"strings"
	"testing"
)

// TestStrict: the fake answers as the reference says the server does.
func TestStrict(t *testing.T) {
	s, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	call := func(method, path, body string, h ...string) int {
		req, _ := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	take := `{"provisionerId":"p1","workerId":"w1","tenantId":"t"}`
	cases := []struct {
		method, path, body string
		want               int
		h                  []string
	}{
		{"POST", "/v2/tasks/take", take, 403, nil}, // not registered
		{"PUT", "/v2/provisioners/p1", `{"id":"p2","capacityTotal":1,"host":"h","port":1}`, 400, nil},
		{"PUT", "/v2/provisioners/p1", `{"id":"p1","capacityTotal":"10","host":"h","port":"55056"}`, 200, nil}, // Gson takes strings
		{"GET", "/v2/tasks/take", "", 405, nil},
		{"POST", "/v2/tasks/take", `{"provisionerId":"p1","workerId":"","tenantId":"t"}`, 400, nil},
		{"POST", "/v2/tasks/take", take, 204, nil},
		{"POST", "/v2/provisioners/p1/heartbeat", `{"usage":{"t":1}}`, 200, nil},
		{"POST", "/v2/provisioners/nope/heartbeat", `{"usage":{}}`, 404, nil},
		{"POST", "/v2/provisioners/p1/heartbeat", `{`, 400, nil},
		{"POST", "/v2/tasks/finish", `{"provisionerId":"p1","workerId":"w1","tenantId":"t","taskId":"x"}`, 400, nil}, // no status
		{"POST", "/v2/tasks/finish", `{"provisionerId":"p1","workerId":"w1","tenantId":"t","taskId":"x","status":"0"}`, 400, nil},
		{"POST", "/v2/tasks/finish", `{"provisionerId":"p1","workerId":"w1","tenantId":"t","taskId":"x","status":0}`, 417, nil},
		{"PUT", "/v2/plugins/automatortypes/shell", `{"name":"shell"}`, 403, nil},
		{"PUT", "/v2/plugins/automatortypes/shell", `{"name":"other"}`, 400, []string{"Coopr-UserID", "admin", "Coopr-TenantID", "superadmin"}},
		{"PUT", "/v2/plugins/automatortypes/shell", `{"name":"shell"}`, 200, []string{"Coopr-UserID", "admin", "Coopr-TenantID", "superadmin"}},
		{"GET", "/v2/tenants/t/automatortypes/shell/scripts/a.sh/versions/x", "", 400, []string{"Coopr-TenantID", "t"}},
		{"GET", "/v2/tenants/t/automatortypes/shell/scripts/a.sh/versions/1", "", 404, []string{"Coopr-TenantID", "t"}},
		{"GET", "/v2/nope", "", 404, nil},
	}
	for _, c := range cases {
		if got := call(c.method, c.path, c.body, c.h...); got != c.want {
			t.Errorf("%s %s %s: %d, want %d", c.method, c.path, c.body, got, c.want)
		}
	}
	s.Enqueue("t", []byte(`{"taskId":"x","taskName":"CREATE","config":{}}`))
	if got := call("POST", "/v2/tasks/take", take); got != 200 {
		t.Fatalf("take: %d", got)
	}
	// Only the owner may finish.
	if got := call("POST", "/v2/tasks/finish", `{"provisionerId":"p1","workerId":"w2","tenantId":"t","taskId":"x","status":0}`); got != 417 {
		t.Errorf("another worker's finish: %d", got)
	}
	if got := call("POST", "/v2/tasks/finish", `{"provisionerId":"p1","workerId":"w1","tenantId":"t","taskId":"x","status":1}`); got != 200 {
		t.Errorf("finish: %d", got)
	}
	if f := s.Finishes(); len(f) != 1 || f[0].Status != 1 {
		t.Errorf("finishes %+v", f)
	}
}
