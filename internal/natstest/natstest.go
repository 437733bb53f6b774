// Package natstest starts clusters of real nats-server processes on
// loopback for tests: the queue's external-cluster deployment, small.
// internal/queue's failover tests and test/'s daemon clusters share it.
//
// The servers listen on ports the system assigns (port -1), read back
// from each server's ports file, so no other process can take a port
// between its choice and the server's bind: a test that picked free ports
// itself (listen on :0, close, start the server) lost the cluster now and
// then when test packages ran in parallel, after a 2-minute wait. The
// first server starts alone, with a route to itself (JetStream needs a
// configured route): its route port is the only one chosen before the
// bind, and chosen again should it be taken. The others route to it and
// find each other through it. A server killed and started again (Start) comes back on its
// old ports, as a restarted server does in production; when one of them
// was taken meanwhile, it comes back on ports the system assigns, and the
// test log says so.
package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/logtail"
)

// Build builds nats-server, from the nats-server module loomd depends on,
// into bin.
func Build(bin string) error {
	out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
	if err != nil {
		return fmt.Errorf("building nats-server: %v: %s", err, out)
	}
	return nil
}

// Config describes a cluster. Bin is required; the zero value of the rest
// is three servers named n0, n1, n2 in a cluster named loomtest.
type Config struct {
	// Bin is the nats-server binary (see Build).
	Bin string
	// Dir holds each server's config, JetStream store, log and ports
	// file; default a new t.TempDir().
	Dir string
	// Servers is the number of servers; default 3.
	Servers int
	// Name is the cluster's name; default loomtest.
	Name string
	// OneByOne starts each server once those before it listen, with
	// routes to all of them. By default the first server starts alone and
	// the others together, each with a route to the first only. A
	// topology built on route proxies (Route) may need OneByOne, so that
	// no server hears of another's direct address before it dialled it
	// through its proxy.
	OneByOne bool
	// Route is the URL server i dials to reach server j, whose route
	// listener is at addr (host:port); default nats-route://addr.
	Route func(i, j int, addr string) string
	// ClusterExtra is added to server i's cluster block (advertise,
	// pool_size, ...).
	ClusterExtra func(i int) string
	// Listening is called each time server i listens, at its first start
	// and after every restart, with its client and route addresses.
	Listening func(i int, client, route string)
	// ReadyWait bounds Start's and WaitReady's wait for the cluster to
	// place a stream on every server, and a server's wait to listen;
	// default 2 minutes (three servers forming a cluster and electing a
	// meta leader took over 30 s on a loaded 2-core machine).
	ReadyWait time.Duration
	// Logf says what the cluster did that the test did not ask for (a
	// server started on other ports); default t.Logf.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster; the test's cleanup kills its servers.
type Cluster struct {
	t   testing.TB
	cfg Config

	mu      sync.Mutex
	servers []*server
}

type server struct {
	name          string
	client, route int           // the ports it last listened on
	cmd           *exec.Cmd     // nil while down
	exited        chan struct{} // closed when cmd has ended
}

// restartTries bounds Start's attempts for one server: the first on its
// old ports, the next on ports the system assigns, which no other
// process can take; a third is only for the unforeseen.
const restartTries = 3

// Start starts the cluster and waits until it places a stream replicated
// on every server (every peer known and online). It fails the test, with
// the last lines of each server's log, if a server cannot start or the
// cluster does not form within cfg.ReadyWait.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	if cfg.Bin == "" {
		t.Fatal("natstest: Config.Bin is required")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Servers == 0 {
		cfg.Servers = 3
	}
	if cfg.Name == "" {
		cfg.Name = "loomtest"
	}
	if cfg.Route == nil {
		cfg.Route = func(_, _ int, addr string) string { return "nats-route://" + addr }
	}
	if cfg.ReadyWait == 0 {
		cfg.ReadyWait = 2 * time.Minute
	}
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	if err := os.MkdirAll(cfg.portsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	c := &Cluster{t: t, cfg: cfg}
	for i := range cfg.Servers {
		c.servers = append(c.servers, &server{name: fmt.Sprintf("n%d", i), client: -1, route: -1})
	}
	t.Cleanup(c.killAll)
	batches := [][]int{{0}}
	for i := 1; i < cfg.Servers; i++ {
		if cfg.OneByOne || len(batches) == 1 {
			batches = append(batches, nil)
		}
		batches[len(batches)-1] = append(batches[len(batches)-1], i)
	}
	if err := c.seed(); err != nil {
		t.Fatalf("natstest: %v%s", err, c.LogTails(30))
	}
	up := []int{0} // servers listening, which the next batch routes to
	for _, batch := range batches[1:] {
		launched := map[int]int64{}
		for _, i := range batch {
			off, err := c.spawn(i, c.routes(i, up))
			if err != nil {
				t.Fatalf("natstest: %v", err)
			}
			launched[i] = off
		}
		for _, i := range batch {
			if err := c.await(i, launched[i]); err != nil {
				t.Fatalf("natstest: %v%s", err, c.LogTails(30))
			}
		}
		up = append(up, batch...)
	}
	c.WaitReady()
	return c
}

// seed starts the first server. JetStream in a cluster will not start
// without a configured route, and no other server listens yet: its route
// is to itself, which it recognises as its own address and drops. That
// route port is thus the one port chosen before the bind (asked of the
// system and released); when another process took it meanwhile, the
// server exits at once, and it starts again on another, as Start does.
func (c *Cluster) seed() error {
	var err error
	for try := 1; try <= restartTries; try++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		c.mu.Lock()
		c.servers[0].route = port
		c.mu.Unlock()
		var off int64
		if off, err = c.spawn(0, []string{"nats-route://127.0.0.1:" + strconv.Itoa(port)}); err != nil {
			return err
		}
		err = c.await(0, off)
		var inUse *errInUse
		if !errors.As(err, &inUse) {
			return err
		}
		c.cfg.Logf("natstest: %s could not listen on route port %d, taken since it was chosen: choosing another", c.servers[0].name, port)
	}
	return err
}

func (cfg Config) portsDir() string { return filepath.Join(cfg.Dir, "ports") }

// routes are the route URLs of server i to the servers in to, as they
// listen now.
func (c *Cluster) routes(i int, to []int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var urls []string
	for _, j := range to {
		if j != i && c.servers[j].route > 0 {
			urls = append(urls, c.cfg.Route(i, j, "127.0.0.1:"+strconv.Itoa(c.servers[j].route)))
		}
	}
	return urls
}

// spawn writes server i's config (its last ports, -1 for the system's
// choice) and starts it; it returns the offset of its log where this
// run's lines begin.
func (c *Cluster) spawn(i int, routes []string) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.servers[i]
	if s.cmd != nil {
		return 0, fmt.Errorf("%s is already running", s.name)
	}
	quoted := make([]string, len(routes))
	for k, r := range routes {
		quoted[k] = strconv.Quote(r)
	}
	extra := ""
	if c.cfg.ClusterExtra != nil {
		extra = c.cfg.ClusterExtra(i)
	}
	conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
ports_file_dir: %q
jetstream { store_dir: %q, sync_interval: always }
cluster { name: %s, listen: "127.0.0.1:%d", %s routes: [%s] }
`, s.name, s.client, c.cfg.portsDir(), filepath.Join(c.cfg.Dir, s.name), c.cfg.Name, s.route, extra, strings.Join(quoted, ", "))
	confPath := filepath.Join(c.cfg.Dir, s.name+".conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return 0, err
	}
	logf, err := os.OpenFile(c.logPath(s.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, err
	}
	defer logf.Close() // the child has its own descriptor
	off, err := logf.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	cmd := exec.Command(c.cfg.Bin, "-c", confPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	return off, nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.cfg.Dir, name+".log") }

// errInUse is a server's exit because a port it was to listen on was
// taken; client and route say which.
type errInUse struct {
	name          string
	client, route bool
	log           string
}

func (e *errInUse) Error() string {
	return fmt.Sprintf("%s could not listen, a port was taken: %s", e.name, e.log)
}

// await waits until server i listens, and records its ports; off is where
// this run's lines begin in its log. A server that exits first is an
// error (an *errInUse when a port was taken).
func (c *Cluster) await(i int, off int64) error {
	c.mu.Lock()
	s := c.servers[i]
	cmd, exited := s.cmd, s.exited
	c.mu.Unlock()
	end := time.Now().Add(c.cfg.ReadyWait)
	for {
		client, route, ok := c.listening(s.name, cmd.Process.Pid, off)
		if ok {
			c.mu.Lock()
			s.client, s.route = client, route
			c.mu.Unlock()
			if c.cfg.Listening != nil {
				c.cfg.Listening(i, "127.0.0.1:"+strconv.Itoa(client), "127.0.0.1:"+strconv.Itoa(route))
			}
			return nil
		}
		select {
		case <-exited:
			c.mu.Lock()
			if s.cmd == cmd {
				s.cmd = nil
			}
			c.mu.Unlock()
			out := c.logSince(s.name, off)
			if strings.Contains(out, "address already in use") {
				return &errInUse{name: s.name, log: fatalLines(out),
					client: strings.Contains(out, "Error listening on port:"),
					route:  strings.Contains(out, "Error listening on router port:")}
			}
			return fmt.Errorf("%s exited at start (%v): %s", s.name, cmd.ProcessState, strings.TrimSpace(out))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(end) {
			return fmt.Errorf("%s did not listen within %s", s.name, c.cfg.ReadyWait)
		}
	}
}

// listening reads the ports server name (pid) listens on from its ports
// file, or, should the server not have written one (it gives up after
// 5 s), from the lines its run logged since off.
func (c *Cluster) listening(name string, pid int, off int64) (client, route int, ok bool) {
	files, _ := filepath.Glob(filepath.Join(c.cfg.portsDir(), fmt.Sprintf("*_%d.ports", pid)))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var ports struct{ Nats, Cluster []string }
		if json.Unmarshal(data, &ports) != nil || len(ports.Nats) == 0 || len(ports.Cluster) == 0 {
			continue // being written
		}
		client, route = urlPort(ports.Nats[0]), urlPort(ports.Cluster[0])
		if client > 0 && route > 0 {
			return client, route, true
		}
	}
	out := c.logSince(name, off)
	client = logPort(out, "Listening for client connections on ")
	route = logPort(out, "Listening for route connections on ")
	return client, route, client > 0 && route > 0
}

// fatalLines are the lines of log that say why the server exited.
func fatalLines(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "[FTL]") || strings.Contains(l, "address already in use") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}

func urlPort(s string) int {
	u, err := url.Parse(s)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

// logPort is the port in the log line that says prefix host:port.
func logPort(log, prefix string) int {
	i := strings.Index(log, prefix)
	if i < 0 {
		return 0
	}
	line, _, _ := strings.Cut(log[i+len(prefix):], "\n")
	line = strings.TrimSpace(line)
	p, _ := strconv.Atoi(line[strings.LastIndexByte(line, ':')+1:])
	return p
}

func (c *Cluster) logSince(name string, off int64) string {
	data, err := os.ReadFile(c.logPath(name))
	if err != nil || int64(len(data)) < off {
		return ""
	}
	return string(data[off:])
}

// Start starts server name again, after Kill9, on the same store and its
// old ports, with routes to every other server. When one of its ports was
// taken meanwhile (by another test process, say), it starts on a port the
// system assigns instead, and says so in the test log; the other servers
// and the clients learn its new addresses from it (URLs gives them too).
// Start returns once the server listens: it does not wait for the
// cluster (WaitReady does). It may be called from any goroutine.
func (c *Cluster) Start(name string) error {
	i := c.index(name)
	if i < 0 {
		return fmt.Errorf("natstest: no server %q", name)
	}
	others := make([]int, 0, len(c.servers)-1)
	for j := range c.servers {
		if j != i {
			others = append(others, j)
		}
	}
	var err error
	for try := 1; try <= restartTries; try++ {
		var off int64
		if off, err = c.spawn(i, c.routes(i, others)); err != nil {
			return fmt.Errorf("natstest: %w", err)
		}
		err = c.await(i, off)
		var inUse *errInUse
		if !errors.As(err, &inUse) || try == restartTries {
			break
		}
		c.mu.Lock()
		s := c.servers[i]
		var what []string
		if inUse.client || !inUse.route { // neither said: both
			what = append(what, fmt.Sprintf("client port %d", s.client))
			s.client = -1
		}
		if inUse.route || !inUse.client {
			what = append(what, fmt.Sprintf("route port %d", s.route))
			s.route = -1
		}
		c.mu.Unlock()
		c.cfg.Logf("natstest: %s could not listen again on its %s (address already in use, taken since it was killed): starting it on a port the system assigns", name, strings.Join(what, " and "))
	}
	if err != nil {
		return fmt.Errorf("natstest: %w%s", err, c.LogTails(30))
	}
	return nil
}

func (c *Cluster) index(name string) int {
	return slices.IndexFunc(c.servers, func(s *server) bool { return s.name == name })
}

// Kill9 kills server name outright (SIGKILL: no leadership hand-over) and
// waits for it to be gone. A server already down is left as it is.
func (c *Cluster) Kill9(name string) {
	i := c.index(name)
	if i < 0 {
		return
	}
	c.mu.Lock()
	s := c.servers[i]
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	c.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-exited
	}
}

func (c *Cluster) killAll() {
	for _, s := range c.servers {
		c.Kill9(s.name)
	}
}

// Names are the servers' names, n0, n1, ...
func (c *Cluster) Names() []string {
	names := make([]string, len(c.servers))
	for i, s := range c.servers {
		names[i] = s.name
	}
	return names
}

// Running are the names of the servers started and not killed.
func (c *Cluster) Running() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	for _, s := range c.servers {
		if s.cmd != nil {
			names = append(names, s.name)
		}
	}
	return names
}

// URLs are the servers' client URLs, in the order of Names, where each
// listens now (or last listened, while down).
func (c *Cluster) URLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	urls := make([]string, len(c.servers))
	for i, s := range c.servers {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", s.client)
	}
	return urls
}

// WaitReady waits until the cluster places a stream replicated on every
// server: a meta leader is not enough, every peer must be known online
// too. It fails the test at once, with the server's log, when a server
// exits on its own, and with every server's log after cfg.ReadyWait.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	end := time.Now().Add(c.cfg.ReadyWait)
	// A request sent before the meta leader is elected goes unanswered
	// until its deadline: the first tries are short, so a cluster that
	// forms in under a second is seen then, and they grow to 5 s, for a
	// loaded machine.
	try := 250 * time.Millisecond
	for ; time.Now().Before(end); try = min(2*try, 5*time.Second) {
		if err := c.exitedOnItsOwn(); err != nil {
			c.t.Fatalf("natstest: the cluster cannot become ready: %v%s", err, c.LogTails(30))
		}
		if nc, err := nats.Connect(strings.Join(c.URLs(), ",")); err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), try)
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "LOOM_READY", Subjects: []string{"loom.ready"}, Replicas: c.cfg.Servers})
			if err == nil {
				err = js.DeleteStream(ctx, "LOOM_READY")
			}
			cancel()
			nc.Close()
			if err == nil {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The directory goes with the test: say here what the servers said.
	c.t.Fatalf("natstest: the cluster was not ready within %s (a stream on %d replicas could not be placed)%s", c.cfg.ReadyWait, c.cfg.Servers, c.LogTails(30))
}

// exitedOnItsOwn is an error naming a server that ended without Kill9.
func (c *Cluster) exitedOnItsOwn() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.servers {
		if s.cmd == nil {
			continue
		}
		select {
		case <-s.exited:
			return fmt.Errorf("%s exited (%v)", s.name, s.cmd.ProcessState)
		default:
		}
	}
	return nil
}

// LogTails is the last n lines of each server's log, for a failure
// message: the logs are in the test's temporary directory, removed with
// it.
func (c *Cluster) LogTails(n int) string {
	return logtail.Files(c.cfg.Dir, c.Names(), n)
}
