package api

import (
	"net/http"
	"strings"
	"testing"
)

// A task for a type no daemon serves is accepted, and the answer says so.
func TestSubmitUnservedTypeWarns(t *testing.T) {
	f := newFixture(t, Config{})
	code, body := f.do("POST", "/v1/tasks", `{"taskId":"u-1","taskName":"INSTALL","config":{"service":{"action":{"type":"nope"}}}}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST = %d %s, want 202", code, body)
	}
	sub := decode[SubmitResponse](t, body)
	if sub.Served || !strings.Contains(sub.Warning, "automator/nope") || !strings.Contains(sub.Warning, "automator/shell") {
		t.Errorf("answer = %s, want served false and a warning naming automator/nope and the served automator/shell", body)
	}
	if !strings.Contains(string(body), `"served":false`) {
		t.Errorf("answer = %s, want the served field spelled out", body)
	}
	code, body = f.do("POST", "/v1/tasks", installTask)
	if sub := decode[SubmitResponse](t, body); code != http.StatusAccepted || !sub.Served || sub.Warning != "" {
		t.Errorf("served type: %d %s, want served true and no warning", code, body)
	}
}
