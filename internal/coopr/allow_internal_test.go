package coopr

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// The default list: loopback, and the server host's addresses, looked up
// again (at most every reresolveAfter) when an unknown address calls, so
// a server that moved is let in.
func TestCallersDefault(t *testing.T) {
	answer := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	lookups := 0
	c := newCallers(nil, "http://coopr.example.com:55055")
	c.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups++
		if host != "coopr.example.com" {
			t.Errorf("looked up %q", host)
		}
		return answer, nil
	}
	for _, tc := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"192.0.2.10", true}, {"::ffff:192.0.2.10", true}, {"192.0.2.11", false},
	} {
		if got := c.allowed(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("allowed(%s) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if lookups != 1 {
		t.Errorf("%d lookups, want 1 (an unknown caller within %v does not look up again)", lookups, reresolveAfter)
	}
	// The server moved: once the interval has passed, its new address is in.
	answer = []netip.Addr{netip.MustParseAddr("192.0.2.11")}
	c.resolved = time.Now().Add(-2 * reresolveAfter)
	if !c.allowed(netip.MustParseAddr("192.0.2.11")) || c.allowed(netip.MustParseAddr("192.0.2.10")) {
		t.Errorf("after the server moved: %v", c.server)
	}
	// An IP literal needs no lookup.
	lit := newCallers(nil, "http://198.51.100.7:55055")
	lit.resolve = func(context.Context, string) ([]netip.Addr, error) {
		t.Error("looked up an IP literal")
		return nil, nil
	}
	if !lit.allowed(netip.MustParseAddr("198.51.100.7")) || lit.allowed(netip.MustParseAddr("198.51.100.8")) {
		t.Error("IP literal server")
	}
}
