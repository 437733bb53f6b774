package openstack_test

// Random sequences of a few nodes' CREATE, CONFIRM and DELETE tasks (a
// Coopr server's retries included) while the cloud loses answers after
// doing the work, answers 5xx, throttles and expires tokens. After every
// task: no node ever has two servers, a node's last successful CREATE
// names its one server, a successful DELETE leaves the node none, and the
// fake saw no request the real API would refuse. The seed is printed;
// LOOM_OPENSTACK_SEED=<seed> replays a sequence.

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/loomrt/loom/internal/cloudfake/openstackfake"
)

func TestRandomNodeLivesWithFaults(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("LOOM_OPENSTACK_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (LOOM_OPENSTACK_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	e := newEnv(t, envOptions{timeout: 20 * time.Second, clock: &skipClock{}})
	nodes := []string{"node-a", "node-b", "node-c"}
	created := map[string]string{} // node -> providerid of its last successful CREATE
	faults := []openstackfake.Fault{
		{Method: "POST", Path: "/servers", Drop: true, After: true},
		{Method: "POST", Path: "/servers", Status: 500, Body: `{"computeFault": {"code": 500, "message": "Unexpected API Error."}}`},
		{Method: "GET", Path: "/servers", Status: 503, Body: `{"computeFault": {"code": 503, "message": "Service Unavailable"}}`},
		{Method: "", Path: "/servers", Status: 429, RetryAfter: "0", Body: `{"overLimit": {"code": 429, "message": "Over limit", "retryAfter": "0"}}`},
		{Method: "DELETE", Path: "/servers/", Drop: true, After: true},
	}
	for step := 0; step < 200; step++ {
		node := nodes[rng.Intn(len(nodes))]
		if rng.Intn(3) == 0 {
			f := faults[rng.Intn(len(faults))]
			f.Times = 1 + rng.Intn(2)
			e.cloud.Fail(f)
		}
		if rng.Intn(8) == 0 {
			e.cloud.ExpireTokens()
		}
		op := []string{"CREATE", "CONFIRM", "DELETE"}[rng.Intn(3)]
		cfg := map[string]any{"nodeId": node, "hostname": node + ".example.com"}
		var what string
		switch op {
		case "CREATE":
			res := e.create(nil, cfg)
			what = fmt.Sprintf("CREATE %s -> %d %s", node, res.Status, res.Message)
			if res.Status == 0 {
				created[node] = res.Result["providerid"].(string)
			}
		case "CONFIRM":
			id, ok := created[node]
			if !ok {
				continue
			}
			res := e.run(task("CONFIRM", e.fields(nil), map[string]any{"nodeId": node, "hostname": node + ".example.com", "providerid": id}))
			what = fmt.Sprintf("CONFIRM %s -> %d %s", node, res.Status, res.Message)
		case "DELETE":
			// Coopr's DELETE carries the providerid when CREATE reported one.
			var pid any
			if id, ok := created[node]; ok && rng.Intn(4) > 0 {
				pid = id
			}
			res := e.delete(pid, cfg)
			what = fmt.Sprintf("DELETE %s (providerid %v) -> %d %s", node, pid, res.Status, res.Message)
			left := false
			for _, s := range e.cloud.Servers() {
				if s.Metadata["loom_node"] == node {
					left = true
					if res.Status == 0 {
						t.Fatalf("step %d, seed %d: %s, but server %s of the node is left", step, seed, what, s.ID)
					}
				}
			}
			// A DELETE that failed may still have deleted (its answer
			// lost); the server then retries it.
			if !left {
				delete(created, node)
			}
		}
		per := map[string][]string{}
		for _, s := range e.cloud.Servers() {
			per[s.Metadata["loom_node"]] = append(per[s.Metadata["loom_node"]], s.ID)
		}
		for n, ids := range per {
			if len(ids) > 1 {
				t.Fatalf("step %d, seed %d: %s: node %s has servers %v", step, seed, what, n, ids)
			}
			if id, ok := created[n]; ok && ids[0] != id {
				t.Fatalf("step %d, seed %d: %s: node %s's server is %s, its CREATE said %s", step, seed, what, n, ids[0], id)
			}
		}
		for n, id := range created {
			if len(per[n]) == 0 {
				t.Fatalf("step %d, seed %d: %s: node %s's server %s is gone without a DELETE", step, seed, what, n, id)
			}
		}
	}
}
