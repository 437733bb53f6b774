package sshdtest

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

func TestStartAndLogin(t *testing.T) {
	s := Start(t, Config{})
	for _, user := range []string{s.User, s.NoPasswdUser} {
		for name, auth := range map[string]ssh.AuthMethod{"key": ssh.PublicKeys(s.Signer), "password": ssh.Password(s.Password)} {
			cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{auth},
				HostKeyCallback: ssh.FixedHostKey(s.HostKeys["ed25519"]), HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}}
			c, err := ssh.Dial("tcp", s.Addr, cfg)
			if err != nil {
				t.Fatalf("%s by %s: %v\n%s", user, name, err, s.Logs())
			}
			sess, err := c.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			out, err := sess.Output("id -un")
			if err != nil || strings.TrimSpace(string(out)) != user {
				t.Fatalf("id -un = %q, %v", out, err)
			}
			c.Close()
		}
	}
	if n := s.Accepted(); n != 4 {
		t.Fatalf("Accepted lines = %d, want 4\n%s", n, s.Logs())
	}
}

// TestHostsOnOnePort starts two sshd on other loopback addresses with the
// same port, as two machines running sshd on 22, and logs in to each.
func TestHostsOnOnePort(t *testing.T) {
	hosts := []string{"127.0.0.2", "127.0.0.3"}
	port, err := FreePort(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	var key []byte // the first host's user key, taken by the second
	var pub string
	for _, h := range hosts {
		s := Start(t, Config{Host: h, Port: port, UserKeyPEM: key})
		if key == nil {
			key, pub = s.KeyPEM, string(s.Signer.PublicKey().Marshal())
		} else if string(s.Signer.PublicKey().Marshal()) != pub {
			t.Fatalf("the second host's key is not the one given")
		}
		if s.Addr != h+":"+strconv.Itoa(port) {
			t.Fatalf("Addr %s", s.Addr)
		}
		cfg := &ssh.ClientConfig{User: s.NoPasswdUser, Auth: []ssh.AuthMethod{ssh.PublicKeys(s.Signer)},
			HostKeyCallback: ssh.FixedHostKey(s.HostKeys["ed25519"]), HostKeyAlgorithms: []string{ssh.KeyAlgoED25519}}
		c, err := ssh.Dial("tcp", s.Addr, cfg)
		if err != nil {
			t.Fatalf("%s: %v\n%s", s.Addr, err, s.Logs())
		}
		c.Close()
	}
	if _, err := StartServer(Config{Host: "10.0.0.1"}); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a non-loopback Host: %v", err)
	}
}

// TestDownUpKeepsPrivateDirs takes hosts down and up again: what is in a
// private dir stays readable through HostPath while the host is down, and
// sshd comes back in the same namespace. Down kills sshd right after it
// starts the namespace's holder; a holder not yet in the namespace then
// lost it (the restart failed with "nsenter: cannot open /proc/N/ns/mnt").
func TestDownUpKeepsPrivateDirs(t *testing.T) {
	const dir = "/var/lib/sshdtest-private"
	for i := 0; i < 8; i++ {
		s := Start(t, Config{PrivateDirs: []string{dir}})
		mark := "host " + strconv.Itoa(i)
		if err := os.WriteFile(s.HostPath(dir+"/mark"), []byte(mark), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.Down(); err != nil {
			t.Fatalf("round %d: Down: %v", i, err)
		}
		if b, err := os.ReadFile(s.HostPath(dir + "/mark")); err != nil || string(b) != mark {
			t.Fatalf("round %d: host down, its private file reads %q, %v; want %q", i, b, err, mark)
		}
		if err := s.Up(); err != nil {
			t.Fatalf("round %d: Up: %v", i, err)
		}
		if b, err := os.ReadFile(s.HostPath(dir + "/mark")); err != nil || string(b) != mark {
			t.Fatalf("round %d: host up again, its private file reads %q, %v; want %q", i, b, err, mark)
		}
		s.Stop()
	}
}
