package plugtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pkg/sftp"
	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"
)

// sshRouter is the loom.ssh dialer of a test runtime: a connection to a
// host:port some SSH fake claims is served in process by that fake, and
// anything else fails: tests never reach the network. It also keeps the
// test's known_hosts file in step with the open fakes.
type sshRouter struct {
	mu         sync.Mutex
	hosts      map[string]*sshFake // "host:port" -> fake
	knownHosts string
	real       map[string][]string // real servers' addr -> known_hosts lines
	// fallback, in the REPL's kit, dials what no fake claims (nil in
	// tests: they never reach the network).
	fallback func(ctx context.Context, network, addr string) (net.Conn, error)
}

func newSSHRouter(knownHosts string) *sshRouter {
	return &sshRouter{hosts: map[string]*sshFake{}, knownHosts: knownHosts}
}

func hostPort(host string, port int) string {
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(port))
}

func (r *sshRouter) add(f *sshFake) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range f.hosts {
		if o := r.hosts[hostPort(h, f.port)]; o != nil {
			return fmt.Errorf("%s is already served by another SSH fake (created at %s); close it first (fake:close())", hostPort(h, f.port), o.where)
		}
	}
	for _, h := range f.hosts {
		r.hosts[hostPort(h, f.port)] = f
	}
	return r.writeKnownHosts()
}

func (r *sshRouter) remove(f *sshFake) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, o := range r.hosts {
		if o == f {
			delete(r.hosts, k)
		}
	}
	r.writeKnownHosts()
}

// writeKnownHosts lists the host keys of the open fakes that are known
// (known = true, the default), as OpenSSH writes them.
func (r *sshRouter) writeKnownHosts() error {
	var lines []string
	for hp, f := range r.hosts {
		if !f.known {
			continue
		}
		name := strings.TrimSuffix(hp, ":22")
		if f.port != 22 {
			host, port, _ := net.SplitHostPort(hp)
			name = "[" + host + "]:" + port
		} else if h, _, err := net.SplitHostPort(hp); err == nil {
			name = h
		}
		lines = append(lines, name+" "+strings.TrimSpace(string(ssh.MarshalAuthorizedKey(f.signer.PublicKey()))))
	}
	for _, l := range r.real {
		lines = append(lines, l...)
	}
	sort.Strings(lines)
	data := strings.Join(lines, "\n")
	if data != "" {
		data += "\n"
	}
	return os.WriteFile(r.knownHosts, []byte(data), 0o600)
}

// dial is sshb.Options.Dial: it hands one end of a socket pair to the
// fake that claims addr.
func (r *sshRouter) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	key := net.JoinHostPort(strings.TrimSuffix(strings.ToLower(host), "."), port)
	if r.isReal(addr) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	r.mu.Lock()
	f := r.hosts[key]
	var known []string
	for k := range r.hosts {
		known = append(known, k)
	}
	r.mu.Unlock()
	if f == nil && r.fallback != nil {
		return r.fallback(ctx, "tcp", addr)
	}
	if f == nil {
		sort.Strings(known)
		hint := "no SSH fake is open"
		if len(known) > 0 {
			hint = "SSH fakes serve " + strings.Join(known, ", ")
		}
		return nil, fmt.Errorf("loomd test: no SSH fake serves %s (%s): tests never reach the network; add one with loom.test.ssh{host = %q, port = %s}", addr, hint, host, port)
	}
	c, err := f.connect()
	if err != nil {
		return nil, err
	}
	return &dialedConn{Conn: c, addr: dialedAddr(addr)}, nil
}

// dialedConn is the client end of a fake's connection, reporting the
// address the plugin dialed (known_hosts checks it).
type dialedConn struct {
	net.Conn
	addr dialedAddr
}

func (c *dialedConn) RemoteAddr() net.Addr { return c.addr }

// CloseWrite half-closes, for tunnels.
func (c *dialedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

type dialedAddr string

func (a dialedAddr) Network() string { return "tcp" }
func (a dialedAddr) String() string  { return string(a) }

// socketPair returns two connected in-process stream sockets (kernel
// buffered, unlike net.Pipe, which deadlocks the SSH version exchange).
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "loomd-test-ssh")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 1 {
				conns[0].Close()
			} else {
				syscall.Close(fds[1])
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// sshResponse is a canned answer to a command.
type sshResponse struct {
	stdout, stderr []byte
	exit           int
	signal         string
	delay          time.Duration
}

// sshExpect answers the commands a matcher accepts.
type sshExpect struct {
	m       cmdMatcher
	canned  []*sshResponse
	served  int
	handler *lua.LFunction
}

// sshRecord is one interaction with the fake host.
type sshRecord struct {
	Kind     string // exec, upload, download, login, tunnel, cleanup
	Command  string
	Path     string
	Bytes    int
	User     string // the effective user (sudo's target, else the login)
	Login    string
	Sudo     bool
	Env      map[string]string
	Stdin    []byte
	Pty      bool
	Exit     int
	Signal   string
	Stdout   []byte
	Stderr   []byte
	Builtin  string // how loom.ssh's own transfer commands were carried out
	Matched  string // the expectation that answered
	Method   string // login: password, publickey, none
	Captures []string
}

// sshFake is one fake host: a real SSH server (golang.org/x/crypto/ssh)
// reached over in-process sockets, with canned command answers and an
// in-memory filesystem served over SFTP.
type sshFake struct {
	hosts  []string
	port   int
	where  string
	known  bool
	strict bool
	hasTar bool
	user   string
	pass   string
	keys   []ssh.PublicKey
	sudo   bool
	sudoPW string
	env    map[string]string // the login environment (exec's login_env reads it)
	signer ssh.Signer
	fs     *vfs
	pump   *pump
	router *sshRouter

	mu        sync.Mutex
	expects   []*sshExpect
	log       []*sshRecord
	unmatched []string
	conns     map[*ssh.ServerConn]bool
	running   map[int]*execState
	nextPID   int
	closed    bool
}

func newSSHFake(r *sshRouter, p *pump) (*sshFake, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, err
	}
	return &sshFake{port: 22, known: true, strict: true, hasTar: true, sudo: true, signer: signer, fs: newVFS(),
		pump: p, router: r, conns: map[*ssh.ServerConn]bool{}, running: map[int]*execState{}, nextPID: 4000}, nil
}

func (f *sshFake) record(r *sshRecord) {
	f.mu.Lock()
	f.log = append(f.log, r)
	f.mu.Unlock()
}

// connect opens an in-process connection served by the fake.
func (f *sshFake) connect() (net.Conn, error) {
	f.mu.Lock()
	closed := f.closed
	f.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("loomd test: the SSH fake created at %s is closed", f.where)
	}
	client, server, err := socketPair()
	if err != nil {
		return nil, err
	}
	go f.serveConn(server)
	return client, nil
}

func (f *sshFake) close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	conns := f.conns
	f.conns = map[*ssh.ServerConn]bool{}
	running := f.running
	f.mu.Unlock()
	for _, ex := range running {
		ex.stop("KILL")
	}
	for c := range conns {
		c.Close()
	}
}

func (f *sshFake) serverConfig() *ssh.ServerConfig {
	login := func(c ssh.ConnMetadata, method string, ok bool, why string) (*ssh.Permissions, error) {
		if f.user != "" && c.User() != f.user {
			ok, why = false, fmt.Sprintf("user %q is not %q", c.User(), f.user)
		}
		if !ok {
			return nil, fmt.Errorf("loomd test: %s login refused: %s", method, why)
		}
		return &ssh.Permissions{Extensions: map[string]string{"method": method}}, nil
	}
	cfg := &ssh.ServerConfig{
		PasswordCallback: func(c ssh.ConnMetadata, pw []byte) (*ssh.Permissions, error) {
			switch {
			case f.pass != "":
				return login(c, "password", string(pw) == f.pass, "wrong password")
			case len(f.keys) > 0:
				return login(c, "password", false, "the fake takes keys only")
			}
			return login(c, "password", true, "")
		},
		PublicKeyCallback: func(c ssh.ConnMetadata, k ssh.PublicKey) (*ssh.Permissions, error) {
			if len(f.keys) > 0 {
				for _, a := range f.keys {
					if bytes.Equal(a.Marshal(), k.Marshal()) {
						return login(c, "publickey", true, "")
					}
				}
				return login(c, "publickey", false, "key "+ssh.FingerprintSHA256(k)+" is not authorized")
			}
			if f.pass != "" {
				return login(c, "publickey", false, "the fake takes a password only")
			}
			return login(c, "publickey", true, "")
		},
	}
	if f.pass == "" && len(f.keys) == 0 {
		cfg.NoClientAuth = true
		cfg.NoClientAuthCallback = func(c ssh.ConnMetadata) (*ssh.Permissions, error) { return login(c, "none", true, "") }
	}
	cfg.AddHostKey(f.signer)
	return cfg
}

func (f *sshFake) serveConn(nc net.Conn) {
	sc, chans, reqs, err := ssh.NewServerConn(nc, f.serverConfig())
	if err != nil {
		nc.Close()
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		sc.Close()
		return
	}
	f.conns[sc] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.conns, sc)
		f.mu.Unlock()
		sc.Close()
	}()
	f.record(&sshRecord{Kind: "login", User: sc.User(), Login: sc.User(), Method: sc.Permissions.Extensions["method"]})
	go func() {
		for r := range reqs { // keepalives
			if r.WantReply {
				r.Reply(true, nil)
			}
		}
	}()
	for ch := range chans {
		switch ch.ChannelType() {
		case "session":
			go f.session(sc, ch)
		case "direct-tcpip":
			go f.tunnel(sc, ch)
		default:
			ch.Reject(ssh.UnknownChannelType, "the SSH fake serves session and direct-tcpip channels")
		}
	}
}

// tunnel serves a jump host's forwarded connection: to another fake.
func (f *sshFake) tunnel(sc *ssh.ServerConn, nc ssh.NewChannel) {
	var p struct {
		Addr     string
		Port     uint32
		OrigAddr string
		OrigPort uint32
	}
	if err := ssh.Unmarshal(nc.ExtraData(), &p); err != nil {
		nc.Reject(ssh.ConnectionFailed, "bad direct-tcpip request")
		return
	}
	target := net.JoinHostPort(p.Addr, strconv.Itoa(int(p.Port)))
	f.record(&sshRecord{Kind: "tunnel", Path: target, User: sc.User(), Login: sc.User()})
	conn, err := f.router.dial(context.Background(), "tcp", target)
	if err != nil {
		nc.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	ch, reqs, err := nc.Accept()
	if err != nil {
		conn.Close()
		return
	}
	go ssh.DiscardRequests(reqs)
	go func() {
		io.Copy(conn, ch)
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	io.Copy(ch, conn)
	ch.Close()
	conn.Close()
}

// execState is a command the fake host is "running".
type execState struct {
	pid   int
	stopC chan string
	once  sync.Once
}

func (e *execState) stop(sig string) {
	e.once.Do(func() { e.stopC <- sig; close(e.stopC) })
}

// session serves one session channel: env, pty, exec, signal, and the
// sftp subsystem.
func (f *sshFake) session(sc *ssh.ServerConn, nc ssh.NewChannel) {
	ch, reqs, err := nc.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	env := map[string]string{}
	pty := false
	var cur *execState
	var mu sync.Mutex
	done := make(chan struct{})
	for {
		select {
		case r, ok := <-reqs:
			if !ok {
				return
			}
			switch r.Type {
			case "env":
				var kv struct{ Name, Value string }
				ssh.Unmarshal(r.Payload, &kv)
				env[kv.Name] = kv.Value
				r.Reply(true, nil)
			case "pty-req":
				pty = true
				r.Reply(true, nil)
			case "signal":
				var s struct{ Signal string }
				ssh.Unmarshal(r.Payload, &s)
				mu.Lock()
				if cur != nil {
					cur.stop(s.Signal)
				}
				mu.Unlock()
				if r.WantReply {
					r.Reply(true, nil)
				}
			case "exec":
				var c struct{ Command string }
				ssh.Unmarshal(r.Payload, &c)
				ex := &execState{stopC: make(chan string, 1)}
				mu.Lock()
				cur = ex
				mu.Unlock()
				r.Reply(true, nil)
				go func() {
					defer close(done)
					f.exec(sc, ch, c.Command, env, pty, ex)
				}()
			case "subsystem":
				var s struct{ Name string }
				ssh.Unmarshal(r.Payload, &s)
				if s.Name != "sftp" {
					r.Reply(false, nil)
					continue
				}
				r.Reply(true, nil)
				go func() {
					defer close(done)
					fsys := &sftpFS{v: f.fs, user: sc.User(), record: func(kind, p string, n int) {
						f.record(&sshRecord{Kind: kind, Path: p, Bytes: n, User: sc.User(), Login: sc.User()})
					}}
					srv := sftp.NewRequestServer(ch, fsys.handlers(), sftp.WithStartDirectory(homeOf(sc.User())))
					srv.Serve()
					srv.Close()
					ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
					ch.Close()
				}()
			default:
				if r.WantReply {
					r.Reply(false, nil)
				}
			}
		case <-done:
			// Drain what is left until the client closes the channel.
			go ssh.DiscardRequests(reqs)
			return
		}
	}
}

func homeOf(user string) string {
	if user == "root" {
		return "/root"
	}
	return "/home/" + user
}

// exec runs one exec request: the binding's wrapper and sudo are played
// out as the real ones behave (start marker, prompt, refusals), then the
// command is answered by an expectation, or by the fake itself for
// loom.ssh's own transfer commands.
func (f *sshFake) exec(sc *ssh.ServerConn, ch ssh.Channel, line string, env map[string]string, pty bool, ex *execState) {
	login := sc.User()
	errW := io.Writer(ch.Stderr())
	if pty {
		errW = ch
	}
	exit := func(code int, sig string) {
		if sig != "" {
			ch.SendRequest("exit-signal", false, ssh.Marshal(struct {
				Signal     string
				CoreDumped bool
				Error      string
				Lang       string
			}{Signal: sig}))
		} else {
			ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{uint32(code)}))
		}
		ch.CloseWrite()
		ch.Close()
	}
	inv, err := parseInvocation(line)
	if err != nil {
		fmt.Fprintf(errW, "sh: syntax error: %v\n", err)
		exit(2, "")
		return
	}
	stdin := &stdinReader{r: ch, pty: pty}
	if inv.envMarker != "" {
		// login_env: the login user's environment, as its sh exports it.
		loginEnv := map[string]string{"HOME": homeOf(login), "USER": login, "LOGNAME": login, "SHELL": "/bin/sh",
			"PATH": "/usr/local/bin:/usr/bin:/bin"}
		for k, v := range f.env {
			loginEnv[k] = v
		}
		for k, v := range env {
			loginEnv[k] = v
		}
		fmt.Fprintf(errW, "%s\n%s%s\n", inv.envMarker, exportLines(loginEnv), inv.envMarker)
	}
	user := login
	if inv.sudo != nil {
		user = inv.sudo.user
		switch {
		case !f.sudo:
			fmt.Fprintf(errW, "%s is not in the sudoers file.  This incident will be reported.\n", login)
			exit(1, "")
			return
		case f.sudoPW != "" && inv.sudo.noPass:
			fmt.Fprintf(errW, "sudo: a password is required\n")
			exit(1, "")
			return
		case inv.sudo.prompt != "":
			io.WriteString(errW, inv.sudo.prompt)
			pw, _ := stdin.line()
			if f.sudoPW != "" && pw != f.sudoPW {
				io.WriteString(errW, "\nSorry, try again.\n"+inv.sudo.prompt)
				stdin.rest()
				fmt.Fprintf(errW, "\nsudo: 1 incorrect password attempt\n")
				exit(1, "")
				return
			}
		}
	}
	if inv.kill != nil {
		f.kill(ch, inv, user, login)
		exit(0, "")
		return
	}
	f.mu.Lock()
	f.nextPID++
	ex.pid = f.nextPID
	f.running[ex.pid] = ex
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.running, ex.pid)
		f.mu.Unlock()
	}()
	if inv.marker != "" {
		fmt.Fprintf(errW, "%s%d:g\n", inv.marker, ex.pid)
	}
	allEnv := map[string]string{}
	if inv.envEnd != "" {
		// The wrapper reads the environment block, then runs the command.
		var block []string
		for {
			l, ok := stdin.line()
			if l == inv.envEnd {
				break
			}
			if !ok {
				exit(125, "")
				return
			}
			block = append(block, l)
		}
		for k, v := range applyEnvBlock(block) {
			allEnv[k] = v
		}
	}
	in := stdin.rest()
	for k, v := range env {
		allEnv[k] = v
	}
	for k, v := range inv.env {
		allEnv[k] = v
	}
	rec := &sshRecord{Kind: "exec", Command: inv.cmd, User: user, Login: login, Sudo: inv.sudo != nil, Env: allEnv, Stdin: in, Pty: pty}
	resp := f.answer(rec, in)
	if resp.delay > 0 {
		t := time.NewTimer(resp.delay)
		select {
		case <-t.C:
		case sig := <-ex.stopC:
			t.Stop()
			resp = &sshResponse{signal: strings.TrimPrefix(sig, "SIG"), stdout: resp.stdout[:0], stderr: resp.stderr[:0]}
		}
	}
	rec.Exit, rec.Signal, rec.Stdout, rec.Stderr = resp.exit, resp.signal, resp.stdout, resp.stderr
	if resp.signal != "" {
		rec.Exit = -1
	}
	f.record(rec)
	ch.Write(resp.stdout)
	errW.Write(resp.stderr)
	exit(resp.exit, resp.signal)
}

// kill plays the binding's kill script: the fake command with that pid
// is stopped (it ends with signal TERM).
func (f *sshFake) kill(ch ssh.Channel, inv *invocation, user, login string) {
	f.mu.Lock()
	ex := f.running[inv.kill.target]
	f.mu.Unlock()
	if ex != nil {
		ex.stop("TERM")
		io.WriteString(ch, "loom-kill:killed\n")
	} else {
		io.WriteString(ch, "loom-kill:gone\n")
	}
	if inv.kill.cleanup != "" {
		f.record(&sshRecord{Kind: "cleanup", Command: inv.kill.cleanup, User: user, Login: login, Sudo: inv.sudo != nil})
	}
}

// stdinReader reads a command's stdin: a line (sudo's password), then
// the rest up to EOF (on a pty, up to ^D, which is how the binding ends
// it there).
type stdinReader struct {
	r   io.Reader
	pty bool
	buf []byte
	eof bool
}

const maxFakeStdin = 256 << 20

func (s *stdinReader) fill() bool {
	if s.eof {
		return false
	}
	b := make([]byte, 32<<10)
	n, err := s.r.Read(b)
	s.buf = append(s.buf, b[:n]...)
	if s.pty {
		if i := bytes.IndexByte(s.buf, 4); i >= 0 {
			s.buf = s.buf[:i]
			s.eof = true
		}
	}
	if err != nil || len(s.buf) > maxFakeStdin {
		s.eof = true
	}
	return n > 0 || !s.eof
}

func (s *stdinReader) line() (string, bool) {
	for {
		if i := bytes.IndexByte(s.buf, '\n'); i >= 0 {
			l := string(s.buf[:i])
			s.buf = s.buf[i+1:]
			return strings.TrimSuffix(l, "\r"), true
		}
		if !s.fill() {
			l := string(s.buf)
			s.buf = nil
			return l, false
		}
	}
}

func (s *stdinReader) rest() []byte {
	for s.fill() {
	}
	b := s.buf
	s.buf = nil
	return b
}

// answer finds what a command gets: an expectation's answer (the last
// one defined wins), else the fake's own handling of loom.ssh's transfer
// commands, else exit 127 and, when strict, a failed test.
func (f *sshFake) answer(rec *sshRecord, stdin []byte) *sshResponse {
	if r := f.expected(rec); r != nil {
		return r
	}
	if r := f.builtin(rec, stdin); r != nil {
		return r
	}
	msg := fmt.Sprintf("unexpected command on the SSH fake for %s: %s", strings.Join(f.hosts, ", "), shortCmd(rec.Command))
	f.mu.Lock()
	f.unmatched = append(f.unmatched, msg)
	f.mu.Unlock()
	return &sshResponse{exit: 127, stderr: []byte("loomd test: " + msg + " (add an expectation: fake:on(command, {stdout = ..., exit_code = ...}))\n")}
}

func shortCmd(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return strconv.Quote(s)
}

func (f *sshFake) expected(rec *sshRecord) *sshResponse {
	f.mu.Lock()
	var hit *sshExpect
	var caps []string
	for i := len(f.expects) - 1; i >= 0; i-- {
		if c, ok := f.expects[i].m.match(rec.Command); ok {
			hit, caps = f.expects[i], c
			break
		}
	}
	if hit == nil {
		f.mu.Unlock()
		return nil
	}
	rec.Matched, rec.Captures = hit.m.text, caps
	if hit.handler == nil {
		r := hit.canned[min(hit.served, len(hit.canned)-1)]
		hit.served++
		f.mu.Unlock()
		c := *r
		return &c
	}
	f.mu.Unlock()
	reply := make(chan *sshResponse, 1)
	call := &handlerCall{run: func(L *lua.LState) lua.LValue { return f.runHandler(L, hit, rec, reply) }}
	if !f.pump.send(context.Background(), call) {
		return &sshResponse{exit: 125, stderr: []byte("loomd test: a Lua handler of the SSH fake runs only while loom.test.run or loom.test.chain waits for a hook\n")}
	}
	return <-reply
}

// builtin carries out the commands loom.ssh runs for its own transfers
// (upload_dir's tar stream, chown and rename after an upload, sudo
// installs and reads, temp file removal) on the fake's filesystem.
func (f *sshFake) builtin(rec *sshRecord, stdin []byte) *sshResponse {
	cmd := rec.Command
	fail := func(code int, format string, a ...any) *sshResponse {
		return &sshResponse{exit: code, stderr: []byte(fmt.Sprintf(format, a...) + "\n")}
	}
	if m := tarForm.FindStringSubmatch(cmd); m != nil {
		rec.Builtin = "tar"
		if !f.hasTar {
			return fail(127, "loom: no tar on this host")
		}
		remote := unquote1(m[1])
		rec.Path = cleanAbs(remote)
		n, err := f.untar(remote, rec.User, stdin)
		rec.Bytes = n
		if err != nil {
			return fail(2, "tar: %v\nloom: extraction failed", err)
		}
		if m[3] != "" {
			u, g := splitOwner(unquote1(m[3]))
			if r := f.chownAs(rec.User, remote, u, g, true); r != nil {
				r.stderr = append(r.stderr, "loom: extraction failed\n"...)
				return r
			}
		}
		if m[4] != "" {
			after := &sshRecord{Kind: "exec", Command: strings.TrimSpace(m[4]), User: rec.User, Login: rec.Login, Sudo: rec.Sudo, Env: rec.Env, Pty: rec.Pty}
			r := f.answer(after, nil)
			after.Exit, after.Stdout, after.Stderr = r.exit, r.stdout, r.stderr
			f.record(after)
			return r
		}
		return &sshResponse{}
	}
	if m := sudoPutHead.FindStringSubmatch(cmd); m != nil {
		rec.Builtin = "install"
		src, dst := unquote1(m[1]), unquote1(m[2])
		rec.Path = cleanAbs(dst)
		data := f.fs.get(src)
		if data == nil {
			return fail(1, "cp: cannot stat '%s': No such file or directory", src)
		}
		old := f.fs.get(dst)
		mode, owner, group := fs.FileMode(0o644), rec.User, rec.User
		if old != nil {
			mode, owner, group = old.mode.Perm(), old.owner, old.group
		}
		if mm := sudoChmod.FindStringSubmatch(cmd); mm != nil {
			v, _ := strconv.ParseUint(mm[1], 8, 32)
			mode = fs.FileMode(v)
		}
		if mm := sudoChown.FindStringSubmatch(cmd); mm != nil {
			u, g := splitOwner(unquote1(mm[1]))
			if u != "" {
				owner = u
			}
			if g != "" {
				group = g
			}
		}
		if err := f.fs.put(dst, data.data, mode, owner, group); err != nil {
			return fail(1, "cp: cannot create regular file '%s': %v", dst, err)
		}
		f.fs.remove(src)
		rec.Bytes = len(data.data)
		return &sshResponse{}
	}
	words, err := ShellWords(cmd)
	if err != nil {
		return nil
	}
	switch {
	case len(words) == 4 && words[0] == "chown" && words[2] == "--":
		rec.Builtin = "chown"
		u, g := splitOwner(words[1])
		rec.Path = cleanAbs(words[3])
		if r := f.chownAs(rec.User, words[3], u, g, false); r != nil {
			return r
		}
		return &sshResponse{}
	case len(words) == 10 && words[0] == "chown" && words[2] == "--" && words[4] == "&&" && words[5] == "mv" && words[6] == "-f" && words[7] == "--":
		rec.Builtin = "chown"
		u, g := splitOwner(words[1])
		rec.Path = cleanAbs(words[9])
		if r := f.chownAs(rec.User, words[3], u, g, false); r != nil {
			return r
		}
		if err := f.fs.rename(words[8], words[9], true); err != nil {
			return fail(1, "mv: %v", err)
		}
		return &sshResponse{}
	case len(words) == 4 && words[0] == "rm" && words[1] == "-f" && words[2] == "--":
		rec.Builtin, rec.Path = "rm", cleanAbs(words[3])
		f.fs.remove(words[3])
		return &sshResponse{}
	case len(words) == 3 && words[0] == "cat" && words[1] == "--":
		rec.Builtin, rec.Path = "cat", cleanAbs(words[2])
		n := f.fs.get(words[2])
		if n == nil || n.mode.IsDir() {
			return fail(1, "cat: %s: No such file or directory", words[2])
		}
		rec.Bytes = len(n.data)
		return &sshResponse{stdout: n.data}
	}
	return nil
}

// chownAs changes owners as user would: only root may give files away.
func (f *sshFake) chownAs(user, p, owner, group string, recursive bool) *sshResponse {
	if user != "root" && (owner != "" && owner != user || group != "" && group != user) {
		return &sshResponse{exit: 1, stderr: []byte(fmt.Sprintf("chown: changing ownership of '%s': Operation not permitted\n", p))}
	}
	if err := f.fs.chown(p, owner, group, recursive); err != nil {
		return &sshResponse{exit: 1, stderr: []byte(fmt.Sprintf("chown: cannot access '%s': No such file or directory\n", p))}
	}
	return nil
}

// untar extracts a tar stream into dir (made first, as mkdir -p).
func (f *sshFake) untar(dir, user string, data []byte) (int, error) {
	v := f.fs
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.mkdirAll(dir, user); err != nil {
		return 0, err
	}
	tr := tar.NewReader(bytes.NewReader(data))
	total := 0
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		p := path.Join(cleanAbs(dir), path.Clean("/"+h.Name))
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := v.mkdirAll(p, user); err != nil {
				return total, err
			}
			if _, n, _ := v.resolve(p, true); n != nil {
				n.mode, n.mtime = fs.ModeDir|mode, h.ModTime
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				return total, err
			}
			if err := v.mkdirAll(path.Dir(p), user); err != nil {
				return total, err
			}
			v.nodes[p] = &vnode{mode: mode, data: b, owner: user, group: user, mtime: h.ModTime}
			total += len(b)
		case tar.TypeSymlink:
			if err := v.mkdirAll(path.Dir(p), user); err != nil {
				return total, err
			}
			v.nodes[p] = &vnode{mode: fs.ModeSymlink | 0o777, link: h.Linkname, owner: user, group: user, mtime: h.ModTime}
		}
	}
}

// takeUnmatched returns and clears the unexpected commands.
func (f *sshFake) takeUnmatched() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.unmatched
	f.unmatched = nil
	return u
}

// summary lists what the fake ran, for failure messages.
func (f *sshFake) summary() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, r := range f.log {
		switch r.Kind {
		case "exec":
			if r.Builtin != "" {
				fmt.Fprintf(&b, "\n  (loom.ssh %s %s)", r.Builtin, r.Path)
				continue
			}
			fmt.Fprintf(&b, "\n  exec %s -> exit %d", shortCmd(r.Command), r.Exit)
		case "upload", "download":
			fmt.Fprintf(&b, "\n  %s %s (%d bytes)", r.Kind, r.Path, r.Bytes)
		}
	}
	if b.Len() == 0 {
		return "the SSH fake ran no command and moved no file"
	}
	return "the SSH fake saw:" + b.String()
}

// hostKeyBlob is the base64 key blob (known_hosts' third field, the
// format of Coopr's ssh_host_keys).
func (f *sshFake) hostKeyBlob() string {
	return base64.StdEncoding.EncodeToString(f.signer.PublicKey().Marshal())
}
