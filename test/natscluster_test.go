package test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loomrt/loom/internal/logtail"
)

// natsCluster is three nats-server processes clustered on loopback (the
// external-cluster deployment, small), for tests that run several loomd
// daemons sharing one queue: start them with natsDaemonArgs. The binary
// is built once per test run from the nats-server module loomd depends
// on.
type natsCluster struct {
	t     *testing.T
	bin   string
	dir   string
	procs map[string]*exec.Cmd // by server name
	urls  []string
}

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// natsServerBin builds nats-server once for the whole test binary.
func natsServerBin(t *testing.T) string {
	t.Helper()
	natsBinOnce.Do(func() {
		// Beside the loomd binary: TestMain removes the directory.
		natsBin = filepath.Join(filepath.Dir(loomdBin), "nats-server")
		out, err := exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			natsBinErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if natsBinErr != nil {
		t.Skipf("cannot build nats-server: %v", natsBinErr)
	}
	return natsBin
}

func loopbackPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNATSCluster starts the three servers and waits until the cluster
// places a 3-replica stream. They are killed when the test ends.
func startNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, bin: natsServerBin(t), dir: t.TempDir(), procs: map[string]*exec.Cmd{}}
	cports := []int{loopbackPort(t), loopbackPort(t), loopbackPort(t)}
	for i := range 3 {
		var routes []string
		for j, p := range cports {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		port := loopbackPort(t)
		name := fmt.Sprintf("n%d", i)
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\njetstream { store_dir: %q, sync_interval: always }\ncluster { name: loomtest, listen: 127.0.0.1:%d, routes: [%s] }\n",
			name, port, filepath.Join(c.dir, name), cports[i], strings.Join(routes, ", "))
		if err := os.WriteFile(filepath.Join(c.dir, name+".conf"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		c.start(name)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", port))
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	})
	end := time.Now().Add(natsReadyWait)
	for time.Now().Before(end) {
		if nc, err := nats.Connect(strings.Join(c.urls, ",")); err == nil {
			js, _ := jetstream.New(nc)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "LOOM_READY", Subjects: []string{"loom.ready"}, Replicas: 3})
			if err == nil {
				err = js.DeleteStream(ctx, "LOOM_READY")
			}
			cancel()
			nc.Close()
			if err == nil {
				return c
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The directory goes with the test: say here what the servers said.
	t.Fatalf("the nats cluster was not ready within %s (a 3-replica stream could not be placed)%s", natsReadyWait, c.logTails(30))
	return nil
}

// natsReadyWait bounds the wait for a new cluster: three servers forming
// a cluster and electing a meta leader took over 30 s on a loaded 2-core
// machine (internal/queue's failover tests wait as long), and the 60 s
// this waited before ran out in a lifecycle sequence under load.
const natsReadyWait = 2 * time.Minute

// logTails is the last n lines of each server's log, for a failure
// message: a server that could not start (its port taken meanwhile by
// another process) says so there.
func (c *natsCluster) logTails(n int) string {
	return logtail.Files(c.dir, []string{"n0", "n1", "n2"}, n)
}

// start runs server name from its config (again, after a kill: same store).
func (c *natsCluster) start(name string) {
	c.t.Helper()
	cmd := exec.Command(c.bin, "-c", filepath.Join(c.dir, name+".conf"))
	logf, err := os.OpenFile(filepath.Join(c.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[name] = cmd
}

// daemonArgs are the loomd serve flags that join the cluster, with each
// stream and bucket on 3 replicas; data is the daemon's own directory
// (known_hosts, its lock).
func (c *natsCluster) daemonArgs(data string) []string {
	return []string{"--nats", strings.Join(c.urls, ","), "--replicas", "3", "--data", data}
}
