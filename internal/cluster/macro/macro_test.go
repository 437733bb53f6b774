package macro

import (
	"errors"
	"strings"
	"testing"
)

func testCluster() *Cluster {
	ip := func(a string) map[string]any {
		return map[string]any{"access_v4": "10.0.0." + a, "bind_v4": "192.168.0." + a}
	}
	// Given out of nodenum order: expansion lists by nodenum.
	return NewCluster([]Node{
		{ID: "zk3", Num: 1003, Hostname: "zk3.local", IPAddresses: ip("3"), Services: []string{"zk", "base"}},
		{ID: "zk1", Num: 1001, Hostname: "zk1.local", IPAddresses: ip("1"), Services: []string{"zk", "base"}},
		{ID: "web", Num: 1000, Hostname: "web.local", IPAddresses: ip("9"), Services: []string{"web", "base"}},
		{ID: "new", Num: 1004, Hostname: "new.local", Services: []string{"cache"}},
	})
}

func TestExpand(t *testing.T) {
	c := testCluster()
	for in, want := range map[string]string{
		"%host.service.zk%":                                "zk1.local,zk3.local",
		"%ip.service.zk%":                                  "192.168.0.1,192.168.0.3",
		"%ip.access_v4.service.zk%":                        "10.0.0.1,10.0.0.3",
		"%host.service.zk[1]%":                             "zk3.local",
		"%ip.service.zk[0]%":                               "192.168.0.1",
		"%num.service.zk%":                                 "2",
		"%num.service.absent%":                             "0",
		"[%host.service.absent%]":                          "[]",
		"%instance.self.service.zk%":                       "2",
		"%host.self% %ip.self% %ip.access_v4.self%":        "zk3.local 192.168.0.3 10.0.0.3",
		"%join(map(host.service.zk,'$:2181'),',')%/chroot": "zk1.local:2181,zk3.local:2181/chroot",
		"%join(host.service.zk,' ')%":                      "zk1.local zk3.local",
		"%map(ip.service.zk,\"$$$\")%":                     "$192.168.0.1,$192.168.0.3",
		"100%% sure, %num.service.base% nodes":             "100%% sure, 3 nodes",
		"no macro":                                         "no macro",
		"one % sign":                                       "one % sign",
	} {
		got, err := c.Expand(in, "zk3")
		if err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestExpandErrors(t *testing.T) {
	c := testCluster()
	for in, want := range map[string]string{
		"%ip.service.cache%":        "node new has no bind_v4 address yet",
		"%host.service.zk[2]%":      "there are 2 nodes with service zk, so no instance [2]",
		"%hots.service.zk%":         `"hots.service.zk" is not a macro`,
		"%cluster.owner%":           "cluster.owner is not supported",
		"%join(host.service.zk,x)%": "a quoted string",
		"%host.service.zk[a]%":      "instance [a]",
		"%num.service.zk[1]%":       "takes no instance number",
		"%host.service.%":           "names no service",
	} {
		_, err := c.Expand(in, "zk3")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to say %q", in, err, want)
		}
	}
	var inc *IncompleteError
	if _, err := c.Expand("%ip.service.cache%", "zk3"); !errors.As(err, &inc) || inc.Node != "new" {
		t.Errorf("incomplete: %v", err)
	}
}

func TestExpandValueAndCheck(t *testing.T) {
	c := testCluster()
	cfg := map[string]any{"zk": "%host.service.zk%", "n": 3.0, "list": []any{"%num.service.zk%", true}, "plain": map[string]any{"a": "b"}}
	out, err := c.ExpandValue(cfg, "web")
	if err != nil {
		t.Fatal(err)
	}
	m := out.(map[string]any)
	if m["zk"] != "zk1.local,zk3.local" || m["list"].([]any)[0] != "2" || m["n"] != 3.0 || cfg["zk"] != "%host.service.zk%" {
		t.Errorf("expanded %v (original %v)", m, cfg)
	}
	svcs, err := CheckValue(cfg)
	if err != nil || strings.Join(svcs, ",") != "zk,zk" {
		t.Errorf("check: %v %v", svcs, err)
	}
	if _, err := CheckValue(map[string]any{"x": "%bad%"}); err == nil {
		t.Error("check accepted a bad macro")
	}
	if !Has(cfg) || Has(map[string]any{"a": "b"}) {
		t.Error("Has")
	}
}
