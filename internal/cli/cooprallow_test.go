package cli

import (
	"strings"
	"testing"
	"time"
)

// --coopr-allow is parsed before anything starts: a bad entry, or the
// flag without --coopr-server, stops serve with the reason.
func TestCooprAllowFlag(t *testing.T) {
	base := cooprOptions{server: "http://127.0.0.1:55055", capacity: 1, heartbeat: time.Second, poll: time.Second}
	o := base
	o.allow = []string{"10.0.0.5", "10.1.0.0/16,::1"}
	if _, err := o.parse(); err != nil || len(o.allowed) != 3 || o.allowed[0].String() != "10.0.0.5/32" || o.allowed[1].String() != "10.1.0.0/16" {
		t.Errorf("parse: %v, allowed %v", err, o.allowed)
	}
	o = base
	o.allow = []string{"coopr.example.com"}
	if _, err := o.parse(); err == nil || !strings.Contains(err.Error(), "--coopr-allow") {
		t.Errorf("a host name: %v, want an error naming the flag", err)
	}
	o = cooprOptions{allow: []string{"10.0.0.5"}}
	if _, err := o.parse(); err == nil || !strings.Contains(err.Error(), "--coopr-allow needs --coopr-server") {
		t.Errorf("without --coopr-server: %v", err)
	}
}
