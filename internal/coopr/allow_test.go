package coopr_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/coopr"
)

// getFrom calls GET url from the local address src (a loopback address).
func getFrom(t *testing.T, src, url string) (int, string) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", url, src, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAPIAllowList: the provisioner API (no authentication, as in Coopr)
// answers loopback and the server by default, and only the --coopr-allow
// list when one is given; a refused caller gets 403 saying what to do.
func TestAPIAllowList(t *testing.T) {
	_, p := start(t, coopr.Config{Runner: &runner{}})
	if code, _ := getFrom(t, "127.0.0.1", "http://"+p.APIAddr()+"/heartbeat"); code != http.StatusOK {
		t.Errorf("loopback caller by default: %d, want 200", code)
	}

	allow, err := coopr.ParseAllow([]string{"127.0.0.2, 10.1.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	_, q := start(t, coopr.Config{Runner: &runner{}, Allow: allow, ID: "loom-allow"})
	api := "http://" + q.APIAddr()
	code, body := getFrom(t, "127.0.0.1", api+"/heartbeat")
	if code != http.StatusForbidden || !strings.Contains(body, "127.0.0.1") || !strings.Contains(body, "--coopr-allow") ||
		!strings.Contains(body, "127.0.0.2/32, 10.1.0.0/16") {
		t.Errorf("a caller off the list: %d %q, want 403 naming it, the list and the flag", code, body)
	}
	if code, _ := getFrom(t, "127.0.0.2", api+"/heartbeat"); code != http.StatusOK {
		t.Errorf("a caller on the list: %d, want 200", code)
	}
	if _, err := coopr.ParseAllow([]string{"10.0.0.0/33"}); err == nil || !strings.Contains(err.Error(), "--coopr-allow") {
		t.Errorf("a bad prefix: %v", err)
	}
}
