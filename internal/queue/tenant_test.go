package queue

import (
	"context"
	"testing"
)

// The task's tenantId (a Loom extension, issue 10) travels through the
// queue whole and is kept on the record, so operators see whose task it is.
func TestTenantIDOnRecord(t *testing.T) {
	q := open(t, testConfig(t))
	serve(t, q, newCounter(nil), 1, shell)
	body := []byte(`{"taskId":"ten-1","tenantId":"acme","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)
	if rec := submit(t, q, body); rec.TenantID != "acme" {
		t.Fatalf("submitted record tenant = %q, want acme", rec.TenantID)
	}
	if got := wait(t, q, "ten-1"); got.TenantID != "acme" {
		t.Fatalf("final record tenant = %q, want acme", got.TenantID)
	}
	if _, _, err := q.Submit(context.Background(), []byte(`{"taskId":"ten-2","tenantId":"../b","taskName":"INSTALL","config":{"service":{"action":{"type":"shell"}}}}`)); err == nil {
		t.Fatal("a tenantId with a path in it was queued")
	}
}
