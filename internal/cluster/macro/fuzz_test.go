package macro

import (
	"errors"
	"strings"
	"testing"
)

// FuzzExpand (issue 20 item 6): Check and Expand agree on what is a
// macro. A string Check accepts expands against a cluster holding every
// service it names, failing only for an address the cluster lacks; one it
// refuses fails to expand the same way; a string without '%' is kept.
// Neither panics, and expansion stays proportional to the input.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{
		"%host.self%", "%ip.self% %ip.access_v4.self%", "%host.service.zk%", "%ip.service.zk[1]%",
		"%num.service.zk%", "%instance.self.service.zk%", "%join(map(ip.service.zk,'$:2181'),',')%",
		"%join(host.service.web,' ')%", "100%% done", "%cluster.owner%", "%host.service.zk[99]%",
		"%map(host.service.zk,'$$-$')%", "%join(map(ip.bind_v6.service.db,'[$]'),';')%", "%%%", "%host.%",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<12 {
			return
		}
		services, checkErr := Check(s)
		addrs := map[string]any{DefaultIPType: "10.0.0.1", "access_v4": "192.0.2.1"}
		nodes := []Node{
			{ID: "n1", Num: 1, Hostname: "a.example.com", IPAddresses: addrs, Services: services},
			{ID: "n2", Num: 2, Hostname: "b.example.com", IPAddresses: addrs, Services: services},
			{ID: "n3", Num: 3, Hostname: "c.example.com", IPAddresses: map[string]any{}},
		}
		c := NewCluster(nodes)
		out, err := c.Expand(s, "n1")
		if checkErr != nil {
			if err == nil {
				t.Fatalf("Check refused %q (%v), Expand took it: %q", s, checkErr, out)
			}
			return
		}
		var inc *IncompleteError
		if err != nil && !errors.As(err, &inc) && !strings.Contains(err.Error(), "no instance") {
			t.Fatalf("Check accepted %q, Expand failed: %v", s, err)
		}
		if !strings.Contains(s, "%") && (err != nil || out != s) {
			t.Fatalf("a string without %% changed: %q -> %q, %v", s, out, err)
		}
		// Three nodes: at most a few copies of each macro's format.
		if len(out) > 8*len(s)+256 {
			t.Fatalf("%d bytes of input expanded to %d", len(s), len(out))
		}
	})
}
