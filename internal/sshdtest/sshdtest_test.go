package sshdtest

import (
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
