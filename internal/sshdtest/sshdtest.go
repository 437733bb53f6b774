// Package sshdtest starts a real OpenSSH sshd (Debian's openssh-server) on
// 127.0.0.1 for tests: a generated sshd_config on a free port, generated
// host keys, test users with an authorized key and a password, sudo rules
// for them, and a log file tests can read (for example to count
// "Accepted" lines and prove connection reuse).
//
// It needs root (to run sshd and to create the local test users). When
// /usr/sbin/sshd is missing or the process is not root, Start skips the
// test, unless the environment says CI=true, where it fails instead: CI
// must install openssh-server and sudo.
package sshdtest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SshdPath is where Debian's openssh-server installs sshd.
const SshdPath = "/usr/sbin/sshd"

// Default test users. User needs a password for sudo; NoPasswdUser has
// NOPASSWD sudo. Both accept the same key and password. Root logs in with
// the key only, and only when Config.AllowRoot is set.
const (
	User         = "loomtest"
	NoPasswdUser = "loomtestnp"
	Root         = "root"
)

// stateDir holds the shared test users' password, created once per machine
// under a file lock so that concurrent test processes agree on it.
const stateDir = "/var/lib/loom-sshdtest"

// Config tunes one sshd. The zero value gives sshd's own defaults
// (MaxSessions 10, MaxStartups 10:30:100).
type Config struct {
	// MaxSessions is sshd's MaxSessions; 0 keeps the default (10).
	MaxSessions int
	// MaxStartups is sshd's MaxStartups; "" keeps the default (10:30:100).
	MaxStartups string
	// Extra is appended verbatim to the generated sshd_config.
	Extra string
	// HostCA, when set, signs the ed25519 host key into a host
	// certificate (principal: the Host address) that sshd presents.
	HostCA ssh.Signer
	// AllowRoot lets root log in with the test key (PermitRootLogin
	// prohibit-password; the key is authorized in the server's own dir,
	// root's ~/.ssh is not touched). sshd treats root sessions apart: it
	// refuses signal requests for them, so tests of remote kills need it.
	AllowRoot bool
	// PrivateDirs are absolute directories that this sshd (and every
	// session it starts) sees as an empty tmpfs of its own, in a mount
	// namespace of its own: several sshd on loopback then act as separate
	// hosts for those paths. Server.HostPath reads them from the test.
	PrivateDirs []string
	// Host is the loopback address sshd listens on (any of 127.0.0.0/8;
	// default 127.0.0.1), and Port its port (0: a free one). Several sshd
	// on 127.0.0.2, 127.0.0.3... with the same Port act as hosts that all
	// run sshd on one port, as machines of a cloud do on 22 (FreePort
	// finds a port free on all of them).
	Host string
	Port int
	// UserKeyPEM, when set, is the users' key (an OpenSSH or PKCS#8 PEM
	// private key) instead of a generated one: several hosts that take
	// one key, as a cloud's machines take one key pair.
	UserKeyPEM []byte
}

// Server is a running sshd. Its fields are read-only.
type Server struct {
	// Host is the loopback address (Config.Host, default "127.0.0.1");
	// Port the port sshd listens on.
	Host string
	Port int
	// Addr is Host:Port.
	Addr string
	// Users are the login names: User (password sudo) and NoPasswdUser.
	User, NoPasswdUser string
	// Password is the users' login (and sudo) password.
	Password string
	// KeyPEM is the users' authorized ed25519 private key (OpenSSH PEM).
	KeyPEM []byte
	// KeyFile is KeyPEM written to a 0600 file.
	KeyFile string
	// EncryptedKeyPEM is the same key encrypted with KeyPassphrase.
	EncryptedKeyPEM []byte
	// KeyPassphrase unlocks EncryptedKeyPEM.
	KeyPassphrase string
	// Signer is the parsed user key.
	Signer ssh.Signer
	// HostKeys maps "ed25519", "ecdsa" and "rsa" to sshd's host keys.
	HostKeys map[string]ssh.PublicKey
	// Dir holds the config, keys and log; LogPath is sshd's log file.
	Dir, LogPath string

	cmd      *exec.Cmd
	stopOnce sync.Once
	exited   chan struct{}
	// holder keeps the private dirs' mount namespace while sshd is down.
	holder *exec.Cmd
	// holderExited is closed when the holder has exited (reaped).
	holderExited chan struct{}
	mu           sync.Mutex
}

// Start starts sshd for the test and stops it at cleanup. It skips the
// test when sshd cannot run here (missing binary, not root), unless
// CI=true, where that is a failure.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if reason := unavailable(); reason != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("sshdtest: %s (CI=true: install openssh-server and sudo, run as root)", reason)
		}
		t.Skipf("sshdtest: %s; install with: apt-get install -y openssh-server sudo (needs root)", reason)
	}
	if len(cfg.PrivateDirs) > 0 {
		// Mount namespaces need CAP_SYS_ADMIN, which some containers
		// lack; nothing can be installed to fix that, so the test skips.
		if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
			t.Skipf("sshdtest: PrivateDirs need mount namespaces, and unshare --mount failed here: %v: %s", err, out)
		}
	}
	s, err := start(cfg)
	if err != nil {
		t.Fatalf("sshdtest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartServer starts sshd outside a Go test (loomd test --sshd); the
// caller stops it. It says why when sshd cannot run here.
func StartServer(cfg Config) (*Server, error) {
	if reason := unavailable(); reason != "" {
		return nil, fmt.Errorf("sshdtest: %s; install with: apt-get install -y openssh-server sudo, and run as root", reason)
	}
	return start(cfg)
}

func unavailable() string {
	if _, err := os.Stat(SshdPath); err != nil {
		return SshdPath + " not found"
	}
	if os.Geteuid() != 0 {
		return "not running as root (sshd and the test users need it)"
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		return "sudo not found"
	}
	return ""
}

func start(cfg Config) (*Server, error) {
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil, fmt.Errorf("Config.Host %q is not an IPv4 loopback address (127.0.0.0/8)", host)
	}
	password, err := ensureUsers()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "sshdtest-")
	if err != nil {
		return nil, err
	}
	// sshd reads authorized_keys as the user, so the dir must be traversable.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	s := &Server{
		Host: host, User: User, NoPasswdUser: NoPasswdUser, Password: password,
		Dir: dir, LogPath: filepath.Join(dir, "sshd.log"), HostKeys: map[string]ssh.PublicKey{},
		exited: make(chan struct{}),
	}
	if err := s.writeKeys(cfg.HostCA, cfg.UserKeyPEM); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = FreePort(host); err != nil {
				os.RemoveAll(dir)
				return nil, err
			}
		}
		if lastErr = s.launch(cfg, port); lastErr == nil {
			return s, nil
		}
		if cfg.Port != 0 {
			break // the caller's port: trying again cannot help
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (s *Server) writeKeys(ca ssh.Signer, userKeyPEM []byte) error {
	_, edPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	ecPriv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	rsaPriv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	for name, key := range map[string]any{"ed25519": edPriv, "ecdsa": ecPriv, "rsa": rsaPriv} {
		block, err := ssh.MarshalPrivateKey(key, "sshdtest host key")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "ssh_host_"+name+"_key"), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
		signer, err := ssh.NewSignerFromKey(key)
		if err != nil {
			return err
		}
		s.HostKeys[name] = signer.PublicKey()
	}
	if ca != nil {
		cert := &ssh.Certificate{
			Key: s.HostKeys["ed25519"], CertType: ssh.HostCert, KeyId: "sshdtest",
			ValidPrincipals: []string{s.Host}, ValidBefore: ssh.CertTimeInfinity,
		}
		if err := cert.SignCert(rand.Reader, ca); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.Dir, "ssh_host_ed25519_key-cert.pub"), ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
			return err
		}
	}

	var userPriv any
	if userKeyPEM != nil {
		k, err := ssh.ParseRawPrivateKey(userKeyPEM)
		if err != nil {
			return fmt.Errorf("Config.UserKeyPEM: %w", err)
		}
		if p, ok := k.(*ed25519.PrivateKey); ok {
			k = *p
		}
		userPriv = k
	} else if _, userPriv, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return err
	}
	block, err := ssh.MarshalPrivateKey(userPriv, "sshdtest user key")
	if err != nil {
		return err
	}
	s.KeyPEM = pem.EncodeToMemory(block)
	s.KeyPassphrase = "pass-" + randHex(8)
	enc, err := ssh.MarshalPrivateKeyWithPassphrase(userPriv, "sshdtest user key", []byte(s.KeyPassphrase))
	if err != nil {
		return err
	}
	s.EncryptedKeyPEM = pem.EncodeToMemory(enc)
	s.KeyFile = filepath.Join(s.Dir, "user_key")
	if err := os.WriteFile(s.KeyFile, s.KeyPEM, 0o600); err != nil {
		return err
	}
	if s.Signer, err = ssh.NewSignerFromKey(userPriv); err != nil {
		return err
	}
	authDir := filepath.Join(s.Dir, "authorized_keys")
	if err := os.Mkdir(authDir, 0o755); err != nil {
		return err
	}
	line := ssh.MarshalAuthorizedKey(s.Signer.PublicKey())
	for _, u := range []string{User, NoPasswdUser, Root} {
		if err := os.WriteFile(filepath.Join(authDir, u), line, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) launch(cfg Config, port int) error {
	s.Port = port
	s.Addr = net.JoinHostPort(s.Host, strconv.Itoa(port))
	var b strings.Builder
	fmt.Fprintf(&b, "ListenAddress %s:%d\n", s.Host, port)
	for _, name := range []string{"ed25519", "ecdsa", "rsa"} {
		fmt.Fprintf(&b, "HostKey %s\n", filepath.Join(s.Dir, "ssh_host_"+name+"_key"))
	}
	if cfg.HostCA != nil {
		fmt.Fprintf(&b, "HostCertificate %s\n", filepath.Join(s.Dir, "ssh_host_ed25519_key-cert.pub"))
	}
	fmt.Fprintf(&b, "AuthorizedKeysFile %s/%%u\n", filepath.Join(s.Dir, "authorized_keys"))
	b.WriteString("StrictModes no\nPidFile none\nUsePAM yes\nPasswordAuthentication yes\n" +
		"KbdInteractiveAuthentication yes\nPubkeyAuthentication yes\n" +
		"AllowTcpForwarding yes\nLogLevel VERBOSE\nAcceptEnv LANG LC_* APP_*\n" +
		"Subsystem sftp internal-sftp\n")
	if cfg.AllowRoot {
		fmt.Fprintf(&b, "PermitRootLogin prohibit-password\nAllowUsers %s %s %s\n", User, NoPasswdUser, Root)
	} else {
		fmt.Fprintf(&b, "PermitRootLogin no\nAllowUsers %s %s\n", User, NoPasswdUser)
	}
	if cfg.MaxSessions > 0 {
		fmt.Fprintf(&b, "MaxSessions %d\n", cfg.MaxSessions)
	}
	if cfg.MaxStartups != "" {
		fmt.Fprintf(&b, "MaxStartups %s\n", cfg.MaxStartups)
	}
	b.WriteString(cfg.Extra)
	conf := filepath.Join(s.Dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(b.String()), 0o600); err != nil {
		return err
	}
	if out, err := exec.Command(SshdPath, "-t", "-f", conf).CombinedOutput(); err != nil {
		return fmt.Errorf("sshd -t rejected the config: %v: %s", err, out)
	}
	// Truncate the log from a previous attempt.
	if err := os.WriteFile(s.LogPath, nil, 0o644); err != nil {
		return err
	}
	cmd := exec.Command(SshdPath, "-D", "-f", conf, "-E", s.LogPath)
	if len(cfg.PrivateDirs) > 0 {
		// unshare and sh exec in place, so the pid stays sshd's.
		script := `set -e; for d in "$@"; do mkdir -p "$d"; mount -t tmpfs -o mode=0755 tmpfs "$d"; done; exec ` +
			SshdPath + ` -D -f "$SSHDTEST_CONF" -E "$SSHDTEST_LOG"`
		args := append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, cfg.PrivateDirs...)
		cmd = exec.Command("unshare", args...)
		cmd.Env = append(os.Environ(), "SSHDTEST_CONF="+conf, "SSHDTEST_LOG="+s.LogPath)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting sshd: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) { cmd.Wait(); close(exited) }(s.exited)

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("sshd exited at start: %s", s.Logs())
		default:
		}
		if bannerOK(s.Addr) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("sshd did not answer on %s within 10s: %s", s.Addr, s.Logs())
}

// HostPath is where the test reads path as this sshd's sessions see it:
// inside Config.PrivateDirs, through the sshd's mount namespace.
func (s *Server) HostPath(path string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder != nil {
		// The sshd may be down: the holder keeps the same namespace.
		return fmt.Sprintf("/proc/%d/root%s", s.holder.Process.Pid, path)
	}
	if s.cmd == nil || s.cmd.Process == nil {
		return path
	}
	return fmt.Sprintf("/proc/%d/root%s", s.cmd.Process.Pid, path)
}

func bannerOK(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "SSH-2.0-")
}

// Stop kills sshd and every per-connection process it forked (and their
// children), then removes its files. It is safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.kill()
		if s.holder != nil && !closed(s.holderExited) {
			syscall.Kill(-s.holder.Process.Pid, syscall.SIGKILL)
			<-s.holderExited
		}
		os.RemoveAll(s.Dir)
	})
}

// closed says whether a process's exited channel is closed: the process
// was reaped, and its pid (its process group's id) may be another
// process's by now. pid_max is 32768 on many machines, and a busy one
// runs through it in minutes: a SIGKILL to -pid of a process reaped long
// ago (sshd after Down, or after an Up that failed) kills whichever
// group leader has that pid now, such as another test's service process
// (setsid makes one).
func closed(exited chan struct{}) bool {
	select {
	case <-exited:
		return true
	default:
		return false
	}
}

// kill stops sshd and its sessions (nothing when sshd was reaped
// already: see closed).
func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil && !closed(s.exited) {
		pids := Descendants(s.cmd.Process.Pid)
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		<-s.exited
	}
}

// Down takes the host down as a network partition would: sshd and every
// session stop, so connections are refused, while what runs on the host
// outside its sessions and its Config.PrivateDirs live on (a process
// holds their mount namespace). Up brings it back.
func (s *Server) Down() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holder == nil && s.cmd != nil && s.cmd.Process != nil {
		if err := s.hold(); err != nil {
			return err
		}
	}
	s.kill()
	return nil
}

// hold starts the holder: a process in sshd's mount namespace that
// outlives sshd. It gets the namespace through a descriptor opened here
// (nsenter --mount=/proc/self/fd/3), not through sshd's pid, and hold
// returns once the holder is in it: sshd is killed right after, and a
// holder still starting then would find no /proc/<sshd>/ns/mnt to enter
// (the restart then fails with "nsenter: cannot open /proc/N/ns/mnt").
func (s *Server) hold() error {
	nsPath := fmt.Sprintf("/proc/%d/ns/mnt", s.cmd.Process.Pid)
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil // sshd is gone already: nothing to hold
	}
	defer ns.Close()
	want, err := os.Readlink(nsPath)
	if err != nil {
		return nil
	}
	h := exec.Command("nsenter", "--mount=/proc/self/fd/3", "sleep", "infinity")
	h.ExtraFiles = []*os.File{ns}
	h.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	h.Stderr = &stderr
	if err := h.Start(); err != nil {
		return fmt.Errorf("sshdtest: holding the host's private dirs: %w", err)
	}
	exited := make(chan struct{})
	go func() { h.Wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", h.Process.Pid)); got == want {
			s.holder = h
			s.holderExited = exited
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("sshdtest: the holder of the host's private dirs exited (%s): %s", h.ProcessState, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			syscall.Kill(-h.Process.Pid, syscall.SIGKILL)
			<-exited
			return fmt.Errorf("sshdtest: the holder of the host's private dirs did not enter sshd's mount namespace within 10s")
		}
	}
}

// Up starts sshd again after Down, on the same address, with the same
// keys and private dirs. While the host was down, another process may
// have taken its port for a moment (an outgoing connection's ephemeral
// port comes from the same range): a restart that exits is tried again
// for up to 10 s.
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	conf := filepath.Join(s.Dir, "sshd_config")
	deadline := time.Now().Add(10 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		cmd := exec.Command(SshdPath, "-D", "-f", conf, "-E", s.LogPath)
		if s.holder != nil {
			cmd = exec.Command("nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", s.holder.Process.Pid), SshdPath, "-D", "-f", conf, "-E", s.LogPath)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("sshdtest: restarting sshd: %w", err)
		}
		s.cmd = cmd
		s.exited = make(chan struct{})
		go func(exited chan struct{}) { cmd.Wait(); close(exited) }(s.exited)
	wait:
		for time.Now().Before(deadline) {
			select {
			case <-s.exited:
				last = fmt.Errorf("sshdtest: sshd exited at restart (%s): %s\nits log:\n%s", cmd.ProcessState, stderr.String(), s.Logs())
				time.Sleep(200 * time.Millisecond)
				break wait
			default:
			}
			if bannerOK(s.Addr) {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	s.kill()
	if last != nil {
		return last
	}
	return fmt.Errorf("sshdtest: sshd did not answer on %s within 10s of its restart", s.Addr)
}

// KillConnections SIGKILLs sshd's per-connection processes (and whatever
// runs under them), leaving the listener up: clients see their transport
// die mid-command, and new connections still work.
func (s *Server) KillConnections() int {
	if closed(s.exited) {
		return 0
	}
	pids := Descendants(s.cmd.Process.Pid)
	for _, p := range pids {
		syscall.Kill(p, syscall.SIGKILL)
	}
	return len(pids)
}

// Logs returns sshd's log so far.
func (s *Server) Logs() string {
	b, _ := os.ReadFile(s.LogPath)
	return string(b)
}

// Accepted counts sshd's "Accepted <method> for <user>" log lines: one per
// successful authentication, that is one per new SSH connection. (At
// LogLevel VERBOSE sshd also logs "Accepted key ... found at", which is not
// counted.)
func (s *Server) Accepted() int {
	return len(acceptedLine.FindAllString(s.Logs(), -1))
}

var acceptedLine = regexp.MustCompile(`(?m)Accepted [a-z-]+ for \S+ from `)

// KnownHosts writes a known_hosts file holding the host keys of the given
// types ("ed25519", "ecdsa", "rsa"; none means all) for this server's
// address, and returns its path.
func (s *Server) KnownHosts(types ...string) string {
	if len(types) == 0 {
		types = []string{"ed25519", "ecdsa", "rsa"}
	}
	var b strings.Builder
	for _, typ := range types {
		b.WriteString(knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKeys[typ]))
		b.WriteByte('\n')
	}
	f, err := os.CreateTemp(s.Dir, "known_hosts-")
	if err != nil {
		panic(err) // the server dir is ours; this cannot fail short of a broken disk
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		panic(err)
	}
	return f.Name()
}

// Descendants lists the pids of every live process below pid (not pid
// itself), read from /proc.
func Descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	pp, err := strconv.Atoi(f[1])
	return pp, err == nil
}

// TopProcessesMatching is ProcessesMatching without the matches whose
// parent matches too. A shell that forks a command shows its own command
// line in the child until the child's exec, so counting a service's
// processes with ProcessesMatching sees two for one while a loop forks
// (often, on a loaded machine); counts use this instead.
func TopProcessesMatching(substr string) []int {
	all := ProcessesMatching(substr)
	set := make(map[int]bool, len(all))
	for _, p := range all {
		set[p] = true
	}
	var out []int
	for _, p := range all {
		if pp, ok := parentOf(p); ok && set[pp] {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ProcessesMatching lists the pids whose command line contains substr.
// Tests use it to check that no remote process was left behind.
func ProcessesMatching(substr string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue
		}
		if strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), substr) {
			out = append(out, p)
		}
	}
	return out
}

// ensureUsers creates the test users and their sudo rules if they are
// missing, and returns their password. It is idempotent and safe across
// concurrent test processes: the password is generated once per machine
// under a file lock and kept in stateDir.
func ensureUsers() (string, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	pwFile := filepath.Join(stateDir, "password")
	pwBytes, err := os.ReadFile(pwFile)
	password := strings.TrimSpace(string(pwBytes))
	fresh := false
	if errors.Is(err, os.ErrNotExist) || password == "" {
		password = "Pw-" + randHex(12)
		fresh = true
	} else if err != nil {
		return "", err
	}
	for _, u := range []string{User, NoPasswdUser} {
		if _, err := exec.Command("id", "-u", u).Output(); err != nil {
			if out, err := exec.Command("useradd", "-m", "-s", "/bin/bash", u).CombinedOutput(); err != nil {
				return "", fmt.Errorf("useradd %s: %v: %s", u, err, out)
			}
			fresh = true
		}
	}
	if fresh {
		in := fmt.Sprintf("%s:%s\n%s:%s\n", User, password, NoPasswdUser, password)
		cmd := exec.Command("chpasswd")
		cmd.Stdin = strings.NewReader(in)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("chpasswd: %v: %s", err, out)
		}
		if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	sudoers := fmt.Sprintf("# written by loom's internal/sshdtest\n%s ALL=(ALL:ALL) ALL\n%s ALL=(ALL:ALL) NOPASSWD: ALL\n", User, NoPasswdUser)
	path := "/etc/sudoers.d/loom-sshdtest"
	if cur, _ := os.ReadFile(path); string(cur) != sudoers {
		if err := os.MkdirAll("/etc/sudoers.d", 0o755); err != nil {
			return "", err
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(sudoers), 0o440); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, path); err != nil {
			return "", err
		}
	}
	return password, nil
}

// FreePort returns a TCP port that is free on every one of hosts (default
// 127.0.0.1), for sshd on several loopback addresses with one port.
func FreePort(hosts ...string) (int, error) {
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		l, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		for _, h := range hosts[1:] {
			o, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok, lastErr = false, err
				break
			}
			o.Close()
		}
		l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no port free on all of %v: %v", hosts, lastErr)
}

// PID is sshd's process id: with Config.PrivateDirs, nsenter -t PID -m
// runs a command in the host's mount namespace (as the sessions see it).
func (s *Server) PID() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}
