// Tests for a cluster's worth of nodes: DigitalOcean's rate limits
// (10 key listings a minute, the account quota) shared by concurrent
// tasks, and GPU droplets, which listings leave out by default.
package digitalocean_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// TestCreateTwelveNodesWithinAMinute creates 12 nodes at once, then 12
// more, against a fake that allows 10 key listings a minute (each listing
// is 3 pages here). Before the key cache every CREATE listed the keys and
// most of them failed on 429s; now the tasks share one listing.
func TestCreateTwelveNodesWithinAMinute(t *testing.T) {
	// A short deadline makes a CREATE that would wait out the 10-a-minute
	// window fail instead of sleeping for a minute.
	e := newEnv(t, envOptions{timeout: 20 * time.Second})
	createAll := func(wave int) {
		results := make([]*runtime.Result, 12)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				node := fmt.Sprintf("node-%d-%d", wave, i)
				results[i] = e.create(nil, map[string]any{"nodeId": node, "hostname": node + ".example.com"})
			}()
		}
		wg.Wait()
		for i, res := range results {
			if res.Status != 0 {
				t.Errorf("wave %d, node %d: status %d: %s", wave, i, res.Status, res.Message)
			}
		}
	}
	createAll(1)
	createAll(2)
	t.Logf("24 CREATEs: %d requests in all, %d of them to GET /v2/account/keys, %d answered 429",
		len(e.fake.calls("")), len(e.fake.calls("GET /v2/account/keys")), e.fake.throttledCount())
	if n := e.fake.dropletCount(); n != 24 {
		t.Errorf("%d droplets, want 24", n)
	}
	if n := len(e.fake.calls("GET /v2/account/keys")); n > 10 {
		t.Errorf("%d key listings, over DigitalOcean's 10 a minute", n)
	}
	if n := e.fake.throttledCount(); n != 0 {
		t.Errorf("the fake answered %d requests with 429", n)
	}
	for _, post := range e.fake.calls("POST /v2/droplets") {
		keys, _ := post.Body["ssh_keys"].([]any)
		if len(keys) != 2 {
			t.Errorf("POST for %v: ssh_keys %v, want the two fingerprints", post.Body["name"], post.Body["ssh_keys"])
		}
	}
}

// TestKeyListingIsCachedAcrossTasks: one listing serves later CREATEs,
// and a key added to the account after the listing is still found.
func TestKeyListingIsCachedAcrossTasks(t *testing.T) {
	e := newEnv(t, envOptions{})
	for i := range 3 {
		node := fmt.Sprintf("node-%d", i)
		mustStatus(t, e.create(nil, map[string]any{"nodeId": node, "hostname": node + ".example.com"}), 0)
	}
	listings := len(e.fake.calls("GET /v2/account/keys"))
	if listings != 3 { // one listing of 3 pages
		t.Errorf("%d key list requests for 3 CREATEs, want 3 (one listing of 3 pages)", listings)
	}
	// A listing younger than 10 s that lacks a key is trusted: a misspelt
	// key fails without spending the listing budget...
	res := e.create(map[string]any{"ssh_keys": "newkey"}, map[string]any{"nodeId": "node-new", "hostname": "new.example.com"})
	mustStatus(t, res, 1)
	if !strings.Contains(res.Message, `no SSH key "newkey"`) {
		t.Errorf("message %q", res.Message)
	}
	if n := len(e.fake.calls("GET /v2/account/keys")); n != listings {
		t.Errorf("%d key list requests after a miss on a fresh listing, want %d", n, listings)
	}
}

// TestExhaustedQuotaIsSharedAndBoundedByTheDeadline: a 429 without
// retry-after (the hourly quota) blocks the account until ratelimit-reset.
// A task whose deadline comes first fails at once with a clear message,
// and the next task does not even send a request.
func TestExhaustedQuotaIsSharedAndBoundedByTheDeadline(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.quotaLeft = 0
	e.fake.quotaReset = time.Now().Add(time.Hour)
	for i := range 2 {
		res := e.create(nil, map[string]any{"nodeId": fmt.Sprintf("node-%d", i)})
		mustStatus(t, res, 1)
		for _, want := range []string{"DigitalOcean API rate limit", "ratelimit", "deadline", "run the task again later"} {
			if !strings.Contains(res.Message, want) && !strings.Contains(res.Message, "429") {
				t.Errorf("task %d: message %q lacks %q", i, res.Message, want)
			}
		}
		if res.Error["http_status"] != float64(429) && res.Error["http_status"] != 429 {
			t.Errorf("task %d: error %v, want http_status 429", i, res.Error)
		}
	}
	if n := len(e.fake.calls("")); n != 1 {
		t.Errorf("%d requests reached the API, want 1: the second task must know the account is blocked", n)
	}
	if e.fake.dropletCount() != 0 {
		t.Errorf("%d droplets", e.fake.dropletCount())
	}
}

// TestCreateWaitsForTheQuotaToReset: with 3 requests left until a reset 2 s
// away, CREATEs hold back until ratelimit-reset instead of collecting 429s.
func TestCreateWaitsForTheQuotaToReset(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.mu.Lock()
	e.fake.quotaLeft = 3
	e.fake.quotaReset = time.Now().Truncate(time.Second).Add(2 * time.Second)
	e.fake.mu.Unlock()
	for i := range 2 {
		node := fmt.Sprintf("node-%d", i)
		mustStatus(t, e.create(nil, map[string]any{"nodeId": node, "hostname": node + ".example.com"}), 0)
	}
	if n := e.fake.throttledCount(); n != 0 {
		t.Errorf("the fake answered %d requests with 429; the plugin should have waited for ratelimit-reset", n)
	}
	if !e.logged("INFO", "quota is used up") {
		t.Errorf("no log line about waiting for the quota:\n%s", e.logs.String())
	}
	if e.fake.dropletCount() != 2 {
		t.Errorf("%d droplets, want 2", e.fake.dropletCount())
	}
}

// TestCreateFindsItsGPUDroplet: a GPU droplet made by an earlier CREATE
// for the node is not in the listing by tag; CREATE must still find it.
func TestCreateFindsItsGPUDroplet(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 77, Name: hostname, Status: "active", GPU: true, Size: "gpu-h100x1-80gb",
		Region: "nyc3", Tags: []string{"loom", nodeTag}})
	// A GPU droplet of the same name for another node is not ours.
	e.fake.seed(&droplet{ID: 78, Name: hostname, Status: "active", GPU: true, Size: "gpu-h100x1-80gb",
		Region: "nyc3", Tags: []string{"loom", "coopr-node-other"}})
	res := e.create(nil, map[string]any{"flavor": "gpu-h100x1-80gb"})
	mustStatus(t, res, 0)
	if got := res.Result["providerid"]; got != "77" {
		t.Errorf("providerid %v, want the GPU droplet 77", got)
	}
	if n := len(e.fake.calls("POST /v2/droplets")); n != 0 {
		t.Errorf("%d POSTs: CREATE made a second droplet beside the GPU one", n)
	}
}

// TestDeleteWithoutProviderIDDeletesGPUDroplets: the cleanup by tag also
// reaches the node's GPU droplet, and only it.
func TestDeleteWithoutProviderIDDeletesGPUDroplets(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.fake.seed(&droplet{ID: 77, Name: hostname, Status: "active", GPU: true, Tags: []string{nodeTag}})
	e.fake.seed(&droplet{ID: 78, Name: hostname, Status: "active", GPU: true, Tags: []string{"coopr-node-other"}})
	mustStatus(t, e.delete(nil, map[string]any{"hostname": hostname}), 0)
	if e.fake.get(77) != nil || e.fake.get(78) == nil {
		t.Error("DELETE without providerid should remove exactly the node's GPU droplet")
	}
}

// TestCreateWithoutAWritableStateDir: the shared state is an
// optimisation; a work dir where it cannot be written only costs a
// warning.
func TestCreateWithoutAWritableStateDir(t *testing.T) {
	e := newEnv(t, envOptions{})
	// A file where the state dir should be makes every lock and write fail.
	luatest.WriteFile(t, filepath.Join(e.workDir, "default", "providertypes", "digitalocean", "state"), "not a dir")
	for i := range 2 {
		node := fmt.Sprintf("node-%d", i)
		mustStatus(t, e.create(nil, map[string]any{"nodeId": node, "hostname": node + ".example.com"}), 0)
	}
	if !e.logged("WARN", "cannot be shared with other tasks") {
		t.Errorf("no warning about the state dir:\n%s", e.logs.String())
	}
	if e.fake.dropletCount() != 2 {
		t.Errorf("%d droplets, want 2", e.fake.dropletCount())
	}
}

// TestCreateRelistsKeysReplacedSinceTheyWereCached: a key replaced in the
// account (same name, new fingerprint) after the listing was cached makes
// DigitalOcean refuse the POST; CREATE lists again and posts once more.
func TestCreateRelistsKeysReplacedSinceTheyWereCached(t *testing.T) {
	e := newEnv(t, envOptions{})
	mustStatus(t, e.create(nil, map[string]any{"nodeId": "node-1", "hostname": "node-1.example.com"}), 0)
	const replaced = "11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00"
	e.fake.mu.Lock()
	e.fake.keys[0].Fingerprint = replaced
	e.fake.mu.Unlock()
	res := e.create(nil, map[string]any{"nodeId": "node-2", "hostname": "node-2.example.com"})
	mustStatus(t, res, 0)
	posts := e.fake.calls("POST /v2/droplets")
	if len(posts) != 3 {
		t.Fatalf("%d POSTs, want 3 (the second refused for its stale key)", len(posts))
	}
	if keys := fmt.Sprint(posts[2].Body["ssh_keys"]); !strings.Contains(keys, replaced) {
		t.Errorf("the last POST sent ssh_keys %s, want the new fingerprint %s", keys, replaced)
	}
	if n := e.fake.dropletCount(); n != 2 {
		t.Errorf("%d droplets, want 2", n)
	}
	if !e.logged("INFO", "SSH keys changed since they were cached") {
		t.Errorf("no log line about the re-listing:\n%s", e.logs.String())
	}
}

// TestRuntimesShareTheBudgetThroughTheWorkDir: two runtimes (as two worker
// processes of loomd serve: no binding, VM or memory in common, only the
// work dir) create 12 nodes at once and still list the keys once.
func TestRuntimesShareTheBudgetThroughTheWorkDir(t *testing.T) {
	e := newEnv(t, envOptions{timeout: 20 * time.Second})
	rts := []*runtime.Runtime{e.rt, e.newRuntime(envOptions{timeout: 20 * time.Second})}
	var wg sync.WaitGroup
	results := make([]*runtime.Result, 12)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("node-%d", i)
			results[i] = luatest.Run(t, rts[i%2], task("CREATE", fields(nil),
				map[string]any{"nodeId": node, "hostname": node + ".example.com"}))
		}()
	}
	wg.Wait()
	for i, res := range results {
		if res.Status != 0 {
			t.Errorf("node %d: status %d: %s", i, res.Status, res.Message)
		}
	}
	if n := len(e.fake.calls("GET /v2/account/keys")); n != 3 {
		t.Errorf("%d key list requests, want 3 (one listing of 3 pages for both runtimes)", n)
	}
}
