package gcefake

import (
	"net/url"
	"strings"
	"testing"
)

// The validator is able to fail: requests and answers the discovery
// document does not allow are refused, each with the reason.
func TestDiscoveryCatchesViolations(t *testing.T) {
	d, err := LoadDiscovery()
	if err != nil {
		t.Fatal(err)
	}
	if d.Revision == "" || len(d.methods) != 7 {
		t.Fatalf("revision %q, %d methods; want the 7 the provider calls", d.Revision, len(d.methods))
	}
	const base = "/compute/v1/projects/loom-test/zones/us-central1-a"
	good := `{"name":"web-1","machineType":"zones/us-central1-a/machineTypes/e2-small","disks":[{"boot":true,"type":"PERSISTENT",
		"initializeParams":{"sourceImage":"projects/debian-cloud/global/images/family/debian-12","diskSizeGb":"10"}}],
		"networkInterfaces":[{"network":"global/networks/default","accessConfigs":[{"name":"External NAT","type":"ONE_TO_ONE_NAT"}]}],
		"labels":{"coopr-node":"n1"},"metadata":{"items":[{"key":"ssh-keys","value":"u:ssh-ed25519 AAAA u"}]},"tags":{"items":["coopr"]},
		"scheduling":{"automaticRestart":false,"onHostMaintenance":"MIGRATE"}}`
	if _, err := d.Request("POST", base+"/instances", url.Values{"requestId": {"6f1c2d3e-5a6b-5c8d-9e0f-1a2b3c4d5e6f"}}, []byte(good)); err != nil {
		t.Fatalf("a valid insert is refused: %v", err)
	}
	for _, c := range []struct {
		method, path string
		query        url.Values
		body, want   string
	}{
		{"POST", base + "/instances", nil, strings.Replace(good, `"diskSizeGb":"10"`, `"diskSizeGb":10`, 1), "diskSizeGb: want a string"},
		{"POST", base + "/instances", nil, strings.Replace(good, `"name":"web-1"`, `"name":"Web_1"`, 1), `"Web_1" does not match`},
		{"POST", base + "/instances", nil, strings.Replace(good, `"name":"web-1",`, ``, 1), `property "name" is required by compute.instances.insert`},
		{"POST", base + "/instances", nil, strings.Replace(good, `"tags"`, `"tag"`, 1), `unknown property "tag"`},
		{"POST", base + "/instances", nil, strings.Replace(good, `"MIGRATE"`, `"MOVE"`, 1), `"MOVE" is not one of`},
		{"POST", base + "/instances", url.Values{"requestID": {"x"}}, good, "query parameter requestID is not a parameter"},
		{"POST", base + "/instances", nil, `[]`, "body: want an object"},
		{"GET", base + "/instances/Web_1", nil, "", "path parameter instance"},
		{"GET", base + "/instances", url.Values{"maxResults": {"many"}}, "", "query parameter maxResults"},
		{"GET", base + "/instances/web-1", nil, `{}`, "takes no request body"},
		{"PATCH", base + "/instances/web-1", nil, "", "is no method of the discovery document"},
		{"GET", "/compute/v1/projects/loom-test/global/instances", nil, "", "is no method"},
	} {
		_, err := d.Request(c.method, c.path, c.query, []byte(c.body))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s %v %s:\n got %v\nwant %q", c.method, c.path, c.query, c.body, err, c.want)
		}
	}
	get, _ := d.Request("GET", base+"/instances/web-1", nil, nil)
	for body, want := range map[string]string{
		`{"name":"web-1","status":"RUNNING","id":"12"}`: "",
		`{"name":"web-1","status":"BOOTING"}`:           `"BOOTING" is not one of`,
		`{"name":"web-1","id":12}`:                      "id: want a string",
		`{"name":"web-1","id":"x12"}`:                   `"x12" is not a uint64`,
		`{"name":"web-1","networkInterface":[]}`:        `unknown property "networkInterface"`,
		`{"name":"web-1","labels":{"a":1}}`:             `labels["a"]: want a string`,
	} {
		err := d.Response(get, 200, []byte(body))
		if (want == "" && err != nil) || (want != "" && (err == nil || !strings.Contains(err.Error(), want))) {
			t.Errorf("answer %s: %v, want %q", body, err, want)
		}
	}
	if err := d.Response(get, 404, []byte(`{"error":{"code":404,"message":"not found","errors":[{"reason":"notFound","domain":"global","message":"x"}]}}`)); err != nil {
		t.Errorf("a Google error answer is refused: %v", err)
	}
	if err := d.Response(get, 404, []byte(`{"error":"not found"}`)); err == nil {
		t.Error("an error answer that is not Google's envelope passed")
	}
}
