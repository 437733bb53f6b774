package test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/loomrt/loom/internal/natstest"
)

// natsCluster is three nats-server processes clustered on loopback (the
// external-cluster deployment, small; see internal/natstest), for tests
// that run several loomd daemons sharing one queue: start them with
// daemonArgs.
type natsCluster struct {
	*natstest.Cluster
}

var (
	natsBinOnce sync.Once
	natsBin     string
	natsBinErr  error
)

// natsServerBin builds nats-server once for the whole test binary, from
// the nats-server module loomd depends on.
func natsServerBin(t *testing.T) string {
	t.Helper()
	natsBinOnce.Do(func() {
		// Beside the loomd binary: TestMain removes the directory.
		natsBin = filepath.Join(filepath.Dir(loomdBin), "nats-server")
		natsBinErr = natstest.Build(natsBin)
	})
	if natsBinErr != nil {
		t.Skipf("cannot build nats-server: %v", natsBinErr)
	}
	return natsBin
}

// startNATSCluster starts the three servers and waits until the cluster
// places a 3-replica stream (up to 2 minutes: three servers forming a
// cluster and electing a meta leader took over 30 s on a loaded 2-core
// machine, and the 60 s this waited once ran out in a lifecycle sequence
// under load). They are killed when the test ends.
func startNATSCluster(t *testing.T) *natsCluster {
	t.Helper()
	return &natsCluster{natstest.Start(t, natstest.Config{Bin: natsServerBin(t)})}
}

// daemonArgs are the loomd serve flags that join the cluster, with each
// stream and bucket on 3 replicas; data is the daemon's own directory
// (known_hosts, its lock).
func (c *natsCluster) daemonArgs(data string) []string {
	return []string{"--nats", strings.Join(c.URLs(), ","), "--replicas", "3", "--data", data}
}
