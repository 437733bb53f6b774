package listeners

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// fakeInterfaces makes the registry see one non-loopback interface
// address, whatever the machine has.
func fakeInterfaces(r *Registry, ips ...string) {
	r.interfaceAddrs = func() ([]net.Addr, error) {
		var out []net.Addr
		for _, s := range append([]string{"127.0.0.1", "::1"}, ips...) {
			out = append(out, &net.IPNet{IP: net.ParseIP(s), Mask: net.CIDRMask(8, 32)})
		}
		return out, nil
	}
}

func TestMatchEverySpellingOfThisMachine(t *testing.T) {
	for _, listen := range []string{"127.0.0.1:7070", "0.0.0.0:7070", "[::1]:7070", "[::]:7070", "localhost:7070", "10.9.8.7:7070"} {
		r := New()
		fakeInterfaces(r, "10.9.8.7", "fe80::1")
		r.AddAddr("API (--listen)", "tcp", listen)
		for _, c := range []struct {
			addr string
			want bool
		}{
			{"127.0.0.1:7070", true},
			{"127.0.0.2:7070", true}, // all of 127/8 is this machine
			{"[::1]:7070", true},
			{"[::ffff:127.0.0.1]:7070", true},
			{"[::127.0.0.1]:7070", true}, // IPv4-compatible
			{"0.0.0.0:7070", true},       // Linux routes the unspecified address to this host
			{"0.1.2.3:7070", true},
			{"[::]:7070", true},
			{"[::ffff:0.0.0.0]:7070", true},
			{"10.9.8.7:7070", true}, // an interface address
			{"[::ffff:10.9.8.7]:7070", true},
			{"[fe80::1%eth0]:7070", true}, // with a zone
			{"127.0.0.1:7071", false},
			{"10.1.2.3:7070", false},
			{"[2001:db8::1]:7070", false},
			{"93.184.216.34:7070", false},
		} {
			_, got := r.Match("tcp", c.addr)
			if got != c.want {
				t.Errorf("listening on %s: Match(%s) = %v, want %v", listen, c.addr, got, c.want)
			}
		}
	}
}

func TestMatchNamesAndUnixSockets(t *testing.T) {
	r := New()
	r.AddAddr("NATS client port (--nats-listen)", "tcp", "127.0.0.1:4222")
	if l, ok := r.Match("tcp", "localhost:4222"); !ok || l.Name != "NATS client port (--nats-listen)" {
		t.Errorf("localhost:4222 = %v %v", l, ok)
	}
	if _, ok := r.Match("tcp", "example.com:4222"); ok {
		t.Error("a remote name matched")
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	r.AddAddr("API socket", "unix", sock)
	if err := os.Symlink(sock, filepath.Join(dir, "link.sock")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sock, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sock, filepath.Join(dir, ".", "api.sock"), filepath.Join(dir, "link.sock")} {
		if _, ok := r.Match("unix", p); !ok {
			t.Errorf("unix %s did not match", p)
		}
	}
	if _, ok := r.Match("unix", filepath.Join(dir, "other.sock")); ok {
		t.Error("another socket matched")
	}
}

func TestListenRegistersActualAddressUntilClosed(t *testing.T) {
	r := New()
	ln, err := r.Listen("API (--listen)", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ls, v1 := r.List()
	if len(ls) != 1 || ls[0].Addr != ln.Addr().String() || ls[0].Network != "tcp" {
		t.Fatalf("List = %v, want the listener's own address %s", ls, ln.Addr())
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if _, ok := r.Match("tcp", "0.0.0.0:"+port); !ok {
		t.Errorf("0.0.0.0:%s does not match the listener", port)
	}
	ln.Close()
	ls, v2 := r.List()
	if len(ls) != 0 || v2 <= v1 {
		t.Errorf("after Close: %v (version %d, was %d), want empty and a newer version", ls, v2, v1)
	}
	if _, ok := r.Match("tcp", "127.0.0.1:"+port); ok {
		t.Error("a closed listener still matches")
	}
}

func TestListenOnFixedPortIsRegisteredBeforeBinding(t *testing.T) {
	// Take a port, free it, and listen on it: a watcher sees the
	// requested address before the socket exists.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.Addr().String()
	probe.Close()
	r := New()
	var seen [][]Listener
	stop := r.Watch(func(ls []Listener, _ uint64) {
		seen = append(seen, ls)
		if len(ls) > 0 {
			// The port is registered: nothing may be listening yet
			// on the first notice.
			if len(seen) == 2 {
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					t.Errorf("%s accepted a connection before the registry had it", addr)
				}
			}
		}
	})
	defer stop()
	ln, err := r.Listen("API (--listen)", "tcp", addr)
	if err != nil {
		t.Skipf("the port was taken again: %v", err)
	}
	defer ln.Close()
	if len(seen) < 2 || len(seen[1]) != 1 || seen[1][0].Addr != addr {
		t.Errorf("watch calls %v: want the empty list, then %s before the listener opened", seen, addr)
	}
	if ls, _ := r.List(); len(ls) != 1 {
		t.Errorf("List = %v: want exactly the listener (the early entry replaced)", ls)
	}
}

func TestReplaceIgnoresOlderVersions(t *testing.T) {
	r := New()
	r.Replace([]Listener{{Name: "API", Network: "tcp", Addr: "127.0.0.1:1"}}, 5)
	r.Replace([]Listener{}, 3) // late, older
	if ls, v := r.List(); len(ls) != 1 || v != 5 {
		t.Errorf("List = %v v%d, want the version 5 list", ls, v)
	}
	r.Replace(nil, 6)
	if ls, v := r.List(); len(ls) != 0 || v != 6 {
		t.Errorf("List = %v v%d, want empty at version 6", ls, v)
	}
	// A daemon with nothing registered yet sends version 0 first.
	w := New()
	w.Replace(nil, 0)
	w.Replace([]Listener{{Name: "API", Network: "tcp", Addr: "127.0.0.1:1"}}, 1)
	if ls, _ := w.List(); len(ls) != 1 {
		t.Errorf("a worker registry after versions 0 and 1: %v", ls)
	}
}

func TestNilRegistry(t *testing.T) {
	var r *Registry
	if _, ok := r.Match("tcp", "127.0.0.1:1"); ok {
		t.Error("a nil registry matched")
	}
	ln, err := r.Listen("x", "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	r.AddAddr("x", "tcp", "127.0.0.1:1")()
	r.Watch(func([]Listener, uint64) {})()
}
