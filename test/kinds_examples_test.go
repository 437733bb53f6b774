package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/loomrt/loom/internal/queue"
)

// The example plugins of examples/kinds run their whole contract twice,
// each against a fake of the API it wraps: through the built loomd (loomd
// call, one process per hook) and through a running daemon (POST
// /v1/calls, the queue, worker processes).

type kindCaller struct {
	t    *testing.T
	work string
	// d, when set, is the daemon the calls go through.
	d *daemon
}

func newKindCaller(t *testing.T) *kindCaller { return &kindCaller{t: t, work: t.TempDir()} }

// bothWays runs an example's contract through loomd call, then through
// the daemon.
func bothWays(t *testing.T, contract func(t *testing.T, c *kindCaller)) {
	t.Run("loomd call", func(t *testing.T) { contract(t, newKindCaller(t)) })
	t.Run("daemon", func(t *testing.T) {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "plugins"), 0o755)
		d := startDaemon(t, dir, "d.log", nil, "--plugins", examples("kinds"))
		contract(t, &kindCaller{t: t, work: filepath.Join(dir, "work"), d: d})
	})
}

// call runs one hook and returns the exit code loomd call would give (0
// success, 1 the hook failed, 2 a bad call) and the call result.
func (c *kindCaller) call(typ, hook string, input any) (int, map[string]any) {
	c.t.Helper()
	in, _ := json.Marshal(input)
	if c.d != nil {
		return c.post(typ, hook, in)
	}
	r := loomd(c.t, string(in), "call", typ, hook, "-", "--plugins", examples("kinds"), "--work-dir", c.work)
	var res map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		c.t.Fatalf("call %s %s: exit %d, stdout is not JSON: %v\nstdout: %s\nstderr: %s", typ, hook, r.code, err, r.stdout, r.stderr)
	}
	return r.code, res
}

// post queues the call on the daemon and waits for its result.
func (c *kindCaller) post(typ, hook string, input []byte) (int, map[string]any) {
	c.t.Helper()
	body, _ := json.Marshal(map[string]any{"type": typ, "hook": hook, "input": json.RawMessage(input)})
	code, b := c.d.call("POST", "/v1/calls", string(body))
	var acc map[string]any
	json.Unmarshal(b, &acc)
	if code == http.StatusBadRequest {
		return 2, acc
	}
	if code != http.StatusAccepted {
		c.t.Fatalf("POST /v1/calls %s %s = %d %s", typ, hook, code, b)
	}
	task := c.d.wait(acc["taskId"].(string))
	var res map[string]any
	if err := json.Unmarshal(task.Result, &res); err != nil {
		c.t.Fatalf("call %s %s: task %s result %s: %v", typ, hook, task.State, task.Result, err)
	}
	if task.State == queue.Succeeded && res["status"] == float64(0) {
		return 0, res
	}
	return 1, res
}

// ok runs a call that must succeed and returns its result.
func (c *kindCaller) ok(typ, hook string, input any) any {
	c.t.Helper()
	code, res := c.call(typ, hook, input)
	if code != 0 || res["status"] != float64(0) {
		c.t.Fatalf("call %s %s: exit %d: %v", typ, hook, code, res)
	}
	return res["result"]
}

// fails runs a call that must fail with class (and reason, if not empty).
func (c *kindCaller) fails(typ, hook string, input any, class, reason, msg string) map[string]any {
	c.t.Helper()
	code, res := c.call(typ, hook, input)
	e, _ := res["error"].(map[string]any)
	if code != 1 || e == nil || e["class"] != class || (reason != "" && e["reason"] != reason) || !strings.Contains(fmt.Sprint(e["message"]), msg) {
		c.t.Fatalf("call %s %s: exit %d, want class %s reason %q message %q: %v", typ, hook, code, class, reason, msg, res)
	}
	return res
}

// fakeAPI is a tiny JSON API guarded by a bearer token.
type fakeAPI struct {
	mu    sync.Mutex
	token string
	calls []string
}

func (f *fakeAPI) serve(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body map[string]any)) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, r.Method+" "+r.URL.Path)
		if r.Header.Get("Authorization") != "Bearer "+f.token {
			reply(w, 401, map[string]any{"error": "bad token"})
			return
		}
		var body map[string]any
		json.NewDecoder(r.Body).Decode(&body)
		h(w, r, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func reply(w http.ResponseWriter, status int, v any) {
	if v == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// gkeFake serves the managed-Kubernetes API the gkelike example driver
// wraps (token "kube-token"). A cluster named "doomed" fails to
// provision. Tests read and change clusters under api.mu.
func gkeFake(t *testing.T) (api *fakeAPI, url string, clusters map[string]map[string]any) {
	api = &fakeAPI{token: "kube-token"}
	clusters = map[string]map[string]any{}
	tokens := 0
	url = api.serve(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		switch {
		case r.Method == "POST" && len(parts) == 1:
			id := fmt.Sprintf("c%d", len(clusters)+1)
			status := "RUNNING"
			if body["name"] == "doomed" {
				status = "ERROR"
			}
			clusters[id] = map[string]any{"id": id, "name": body["name"], "nodeCount": body["nodeCount"], "version": body["version"],
				"status": status, "message": "out of quota", "endpoint": "https://10.0.0.1", "caCert": "Q0E="}
			reply(w, 201, clusters[id])
		case len(parts) >= 2 && clusters[parts[1]] == nil:
			reply(w, 404, map[string]any{"error": "no such cluster"})
		case r.Method == "GET":
			reply(w, 200, clusters[parts[1]])
		case r.Method == "PUT":
			for k, v := range body {
				clusters[parts[1]][k] = v
			}
			reply(w, 200, clusters[parts[1]])
		case r.Method == "POST" && len(parts) == 3:
			tokens++
			reply(w, 200, map[string]any{"token": fmt.Sprintf("sa-%s-%d", parts[1], tokens)})
		case r.Method == "DELETE":
			delete(clusters, parts[1])
			reply(w, 204, nil)
		}
	})
	return api, url, clusters
}

func TestExampleClusterDriver(t *testing.T) { bothWays(t, exampleClusterDriver) }

func exampleClusterDriver(t *testing.T, c *kindCaller) {
	_, url, clusters := gkeFake(t)
	flags := c.ok("gkelike", "create_options", nil).(map[string]any)
	if flags["api-token"].(map[string]any)["password"] != true || flags["node-count"].(map[string]any)["type"] != "int" {
		t.Fatalf("create_options: %v", flags)
	}
	c.ok("gkelike", "update_options", nil)
	if caps := c.ok("gkelike", "capabilities", nil).(map[string]any); caps["get_cluster_size"] != true || caps["set_version"] != false || caps["etcd_backup"] != false {
		t.Fatalf("capabilities: %v", caps)
	}
	// Rancher's options: schema names, metadata merged into strings.
	opts := map[string]any{"string": map[string]any{"name": "prod", "apiUrl": url, "apiToken": "kube-token"}, "int": map[string]any{"nodeCount": 2}}
	ci := c.ok("gkelike", "create", map[string]any{"options": opts}).(map[string]any)
	if ci["endpoint"] != "https://10.0.0.1" || ci["node_count"] != float64(2) || ci["metadata"].(map[string]any)["state"] == "" {
		t.Fatalf("create: %v", ci)
	}
	// Each call is a new process: post_check finds the cluster from metadata alone.
	ci = c.ok("gkelike", "post_check", map[string]any{"cluster_info": ci}).(map[string]any)
	if ci["service_account_token"] != "sa-c1-1" {
		t.Fatalf("post_check: %v", ci)
	}
	if again := c.ok("gkelike", "post_check", map[string]any{"cluster_info": ci}).(map[string]any); again["service_account_token"] != "sa-c1-2" {
		t.Fatalf("post_check again: %v", again)
	}
	ci = c.ok("gkelike", "update", map[string]any{"cluster_info": ci, "options": map[string]any{"int": map[string]any{"node-count": 5}}}).(map[string]any)
	if ci["node_count"] != float64(5) {
		t.Fatalf("update: %v", ci)
	}
	c.ok("gkelike", "set_cluster_size", map[string]any{"cluster_info": ci, "count": 4})
	if n := c.ok("gkelike", "get_cluster_size", map[string]any{"cluster_info": ci}).(map[string]any); n["count"] != float64(4) {
		t.Fatalf("get_cluster_size: %v", n)
	}
	if v := c.ok("gkelike", "get_version", map[string]any{"cluster_info": ci}).(map[string]any); v["version"] != "1.30" {
		t.Fatalf("get_version: %v", v)
	}
	c.ok("gkelike", "set_version", map[string]any{"cluster_info": ci, "version": "1.31"}) // absent: success
	if k := c.ok("gkelike", "k8s_capabilities", map[string]any{"options": opts}).(map[string]any); k["node_pool_scaling_supported"] != true {
		t.Fatalf("k8s_capabilities: %v", k)
	}
	etcd := map[string]any{"cluster_info": ci, "options": opts, "snapshot_name": "s1"}
	for _, h := range []string{"etcd_save", "etcd_restore", "etcd_remove_snapshot"} {
		c.fails("gkelike", h, etcd, "terminal", "unimplemented", "ETCD backup operations are not implemented")
	}
	c.ok("gkelike", "remove_legacy_service_account", map[string]any{"cluster_info": ci})
	c.ok("gkelike", "remove", map[string]any{"cluster_info": ci})
	c.ok("gkelike", "remove", map[string]any{"cluster_info": ci}) // gone already: still fine
	if len(clusters) != 0 {
		t.Fatalf("clusters left: %v", clusters)
	}

	// A create that fails half way keeps its state for the retry, and
	// the retry reuses the cluster it started.
	doomed := map[string]any{"string": map[string]any{"name": "doomed", "api-url": url, "api-token": "kube-token"}}
	res := c.fails("gkelike", "create", map[string]any{"options": doomed}, "retry", "", "failed to provision: out of quota")
	partial := res["result"].(map[string]any)
	clusters["c1"]["status"] = "RUNNING"
	if ci := c.ok("gkelike", "create", map[string]any{"options": doomed, "cluster_info": partial}).(map[string]any); ci["endpoint"] != "https://10.0.0.1" || len(clusters) != 1 {
		t.Fatalf("retried create: %v, clusters %v", ci, clusters)
	}
	// A bad token is terminal, and never printed.
	bad := map[string]any{"string": map[string]any{"name": "x", "api-url": url, "api-token": "wrong-secret-token"}}
	res = c.fails("gkelike", "create", map[string]any{"options": bad}, "terminal", "", "401 bad token")
	if b, _ := json.Marshal(res); strings.Contains(string(b), "wrong-secret-token") {
		t.Fatalf("the token leaked: %s", b)
	}
}

func TestExampleBucketProvisioner(t *testing.T) { bothWays(t, exampleBucketProvisioner) }

func exampleBucketProvisioner(t *testing.T, c *kindCaller) {
	api := &fakeAPI{token: "admin-token-1"}
	buckets := map[string]string{} // name -> owner
	users := map[string][2]string{}
	grants := map[string]bool{}
	configs := map[string]map[string]any{}
	url := api.serve(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		switch {
		case parts[0] == "buckets" && len(parts) == 3 && r.Method == "PUT": // config
			configs[parts[1]] = body
			reply(w, 204, nil)
		case parts[0] == "buckets" && r.Method == "PUT":
			if o, ok := buckets[parts[1]]; ok && o != body["owner"] {
				reply(w, 409, map[string]any{"error": "bucket " + parts[1] + " belongs to " + o})
				return
			}
			buckets[parts[1]] = body["owner"].(string)
			reply(w, 200, map[string]any{"name": parts[1]})
		case parts[0] == "buckets" && buckets[parts[1]] == "":
			reply(w, 404, map[string]any{"error": "no bucket"})
		case parts[0] == "buckets" && r.Method == "GET":
			reply(w, 200, map[string]any{"name": parts[1]})
		case parts[0] == "buckets" && r.Method == "DELETE":
			delete(buckets, parts[1])
			reply(w, 204, nil)
		case r.Method == "POST": // /users
			id := body["id"].(string)
			if _, ok := users[id]; !ok {
				users[id] = [2]string{"AK-" + id, "SK-" + id}
			}
			reply(w, 200, map[string]any{"accessKey": users[id][0], "secretKey": users[id][1]})
		case len(parts) == 2 && r.Method == "DELETE":
			delete(users, parts[1])
			reply(w, 204, nil)
		case len(parts) == 4 && r.Method == "PUT":
			grants[parts[1]+"/"+parts[3]] = true
			reply(w, 204, nil)
		case len(parts) == 4 && r.Method == "DELETE":
			delete(grants, parts[1]+"/"+parts[3])
			reply(w, 204, nil)
		}
	})
	claim := map[string]any{"metadata": map[string]any{"name": "photos", "namespace": "web"}, "spec": map[string]any{"storageClassName": "s3like"}}
	params := map[string]any{"adminUrl": url, "host": "s3.local", "port": "9000", "region": "eu-1"}
	req := map[string]any{"bucket_name": "photos-1", "claim": claim, "parameters": params}
	// No admin token yet: a retry that says where to put it.
	c.fails("s3like", "provision", req, "retry", "", "no admin token: write it to")
	dir := filepath.Join(c.work, "default", "bucketprovisioners", "s3like")
	if err := os.WriteFile(filepath.Join(dir, "admin-token"), []byte("admin-token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	uid := c.ok("s3like", "generate_user_id", map[string]any{"claim": claim})
	req["user_id"] = uid
	conn := c.ok("s3like", "provision", req).(map[string]any)
	if conn["access_keys"].(map[string]any)["secret_access_key"] != "SK-obc-web-photos" || conn["endpoint"].(map[string]any)["bucket_port"] != float64(9000) {
		t.Fatalf("provision: %v", conn)
	}
	// Every reconcile provisions again: idempotent.
	if again := c.ok("s3like", "provision", req).(map[string]any); again["access_keys"].(map[string]any)["access_key_id"] != "AK-obc-web-photos" || len(buckets) != 1 {
		t.Fatalf("provision again: %v %v", again, buckets)
	}
	// Another claim asking for the same name: bucket_exists.
	other := map[string]any{"bucket_name": "photos-1", "user_id": "obc-x-y", "claim": claim, "parameters": params}
	c.fails("s3like", "provision", other, "retry", "bucket_exists", "belongs to obc-web-photos")
	// Brownfield: grant on an existing bucket, refused on a missing one.
	grant := map[string]any{"bucket_name": "photos-1", "user_id": "obc-web-viewer", "claim": claim, "parameters": params}
	c.ok("s3like", "grant", grant)
	grant["bucket_name"] = "nope"
	c.fails("s3like", "grant", grant, "retry", "", "does not exist")
	// Delete and revoke get the ObjectBucket back from Kubernetes: no credentials.
	ob := func(user string) map[string]any {
		return map[string]any{"object_bucket": map[string]any{"metadata": map[string]any{"name": "obc-web-photos"},
			"spec": map[string]any{"reclaimPolicy": "Delete", "endpoint": map[string]any{"bucketName": "photos-1"},
				"additionalState": map[string]any{"user": user, "adminUrl": url}}}}
	}
	c.ok("s3like", "revoke", ob("obc-web-viewer"))
	if grants["obc-web-viewer/photos-1"] || !grants["obc-web-photos/photos-1"] {
		t.Fatalf("revoke: grants %v", grants)
	}
	c.ok("s3like", "delete", ob("obc-web-photos"))
	if len(buckets) != 0 || users["obc-web-photos"] != [2]string{} {
		t.Fatalf("delete: buckets %v users %v", buckets, users)
	}
	// Generation 2: a changed additionalConfig reaches the bucket.
	upd := ob("obc-web-photos")
	upd["object_bucket"].(map[string]any)["spec"].(map[string]any)["endpoint"].(map[string]any)["additionalConfig"] = map[string]any{"maxSize": "10G"}
	c.ok("s3like", "update", upd)
	if configs["photos-1"]["maxSize"] != "10G" {
		t.Fatalf("update: configs %v", configs)
	}
	// The library has no terminal errors: a foreign ObjectBucket is a
	// retry whose message says what to fix.
	bare := map[string]any{"object_bucket": map[string]any{"spec": map[string]any{}}}
	c.fails("s3like", "delete", bare, "retry", "", "not provisioned by s3like")
}

func TestExampleCloudProvider(t *testing.T) { bothWays(t, exampleCloudProvider) }

func exampleCloudProvider(t *testing.T, c *kindCaller) {
	api := &fakeAPI{token: "hz-token"}
	servers := map[int]map[string]any{}
	next := 0
	url := api.serve(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		switch {
		case r.Method == "GET":
			uid := strings.TrimPrefix(r.URL.Query().Get("label_selector"), "machine-uid==")
			list := []any{}
			for _, s := range servers {
				if s["labels"].(map[string]any)["machine-uid"] == uid {
					list = append(list, s)
				}
			}
			reply(w, 200, map[string]any{"servers": list})
		case r.Method == "POST":
			next++
			body["id"], body["status"], body["publicIp"], body["privateIp"] = next, "running", "203.0.113.9", "10.0.0.9"
			servers[next] = body
			reply(w, 201, map[string]any{"server": body})
		case r.Method == "DELETE":
			var id int
			fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/servers/"), &id)
			delete(servers, id)
			reply(w, 204, nil)
		case r.Method == "PUT":
			var id int
			fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/servers/"), &id)
			servers[id]["labels"] = body["labels"]
			reply(w, 200, map[string]any{"server": servers[id]})
		}
	})
	spec := func(token, os string) map[string]any {
		return map[string]any{"providerSpec": map[string]any{"value": map[string]any{
			"cloudProvider": "fakecloud", "operatingSystem": os,
			"cloudProviderSpec": map[string]any{"apiUrl": url, "token": token}}}}
	}
	s := c.ok("fakecloud", "add_defaults", map[string]any{"spec": spec("hz-token", "ubuntu")}).(map[string]any)
	if s["providerSpec"].(map[string]any)["value"].(map[string]any)["cloudProviderSpec"].(map[string]any)["serverType"] != "cx22" {
		t.Fatalf("add_defaults: %v", s)
	}
	c.ok("fakecloud", "validate", map[string]any{"spec": s})
	c.fails("fakecloud", "validate", map[string]any{"spec": spec("", "ubuntu")}, "terminal", "InvalidConfiguration", "needs apiUrl and token")
	c.fails("fakecloud", "validate", map[string]any{"spec": spec("hz-token", "windows")}, "terminal", "os_not_supported", "not supported")
	machine := map[string]any{"metadata": map[string]any{"name": "worker-1", "uid": "uid-1"}, "spec": s}
	// The controller's creation path: get says not_found, then create.
	c.fails("fakecloud", "get", map[string]any{"machine": machine}, "not_found", "", "instance not found")
	inst := c.ok("fakecloud", "create", map[string]any{"machine": machine, "userdata": "#cloud-config\n"}).(map[string]any)
	if inst["provider_id"] != "fakecloud://1" || inst["addresses"].(map[string]any)["203.0.113.9"] != "ExternalIP" || inst["status"] != "running" {
		t.Fatalf("create: %v", inst)
	}
	c.ok("fakecloud", "create", map[string]any{"machine": machine, "userdata": ""}) // idempotent
	if got := c.ok("fakecloud", "get", map[string]any{"machine": machine}).(map[string]any); got["id"] != "1" || len(servers) != 1 {
		t.Fatalf("get: %v, servers %v", got, servers)
	}
	if l := c.ok("fakecloud", "metrics_labels", map[string]any{"machine": machine}).(map[string]any); l["size"] != "cx22" {
		t.Fatalf("metrics_labels: %v", l)
	}
	// The uid changes: the server is re-tagged and found by the new uid.
	c.ok("fakecloud", "migrate_uid", map[string]any{"machine": machine, "new_uid": "uid-2"})
	machine["metadata"].(map[string]any)["uid"] = "uid-2"
	if got := c.ok("fakecloud", "get", map[string]any{"machine": machine}).(map[string]any); got["id"] != "1" {
		t.Fatalf("get after migrate_uid: %v, servers %v", got, servers)
	}
	c.ok("fakecloud", "set_metrics", map[string]any{"machines": []any{machine}})
	// Deletion: cleanup until it returns true.
	if done := c.ok("fakecloud", "cleanup", map[string]any{"machine": machine}); done != false {
		t.Fatalf("first cleanup: %v", done)
	}
	if done := c.ok("fakecloud", "cleanup", map[string]any{"machine": machine}); done != true {
		t.Fatalf("second cleanup: %v", done)
	}
	bad := map[string]any{"metadata": map[string]any{"uid": "uid-1"}, "spec": spec("stolen-token", "ubuntu")}
	c.fails("fakecloud", "get", map[string]any{"machine": bad}, "terminal", "InvalidConfiguration", "rejected the token")
}

func TestExampleKloudProvider(t *testing.T) { bothWays(t, exampleKloudProvider) }

func exampleKloudProvider(t *testing.T, c *kindCaller) {
	api := &fakeAPI{token: "kl-token"}
	machines := map[string]map[string]any{"m-1": {"state": "stopped", "ip": "10.10.0.5"}}
	url := api.serve(t, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		switch {
		case parts[0] == "whoami":
			reply(w, 200, map[string]any{"user": "alice"})
		case machines[parts[1]] == nil:
			reply(w, 404, map[string]any{"error": "no machine"})
		case r.Method == "GET":
			reply(w, 200, machines[parts[1]])
		case parts[2] == "start":
			machines[parts[1]]["state"] = "running"
			reply(w, 200, machines[parts[1]])
		case parts[2] == "stop":
			machines[parts[1]]["state"] = "stopped"
			reply(w, 200, machines[parts[1]])
		}
	})
	if sc := c.ok("kloudlike", "schema", nil).(map[string]any); len(sc["credential"].([]any)) != 2 {
		t.Fatalf("schema: %v", sc)
	}
	credential := map[string]any{"api_url": url, "token": "kl-token"}
	cred := map[string]any{"identifier": "cred-1", "provider": "kloudlike", "credential": credential}
	c.ok("kloudlike", "valid_credential", map[string]any{"value": credential})
	c.fails("kloudlike", "valid_credential", map[string]any{"value": map[string]any{"api_url": url}}, "retry", "", "api_url and token are required")
	c.ok("kloudlike", "verify_credential", map[string]any{"credential": cred})
	wrong := map[string]any{"credential": map[string]any{"api_url": url, "token": "nope"}}
	if res := c.fails("kloudlike", "verify_credential", map[string]any{"credential": wrong}, "retry", "", "GET /whoami: 401"); res["error"].(map[string]any)["code"] != float64(414) {
		t.Fatalf("verify_credential code: %v", res)
	}
	if tpls := c.ok("kloudlike", "bootstrap_templates", map[string]any{"credential": cred}).([]any); len(tpls) != 1 {
		t.Fatalf("bootstrap_templates: %v", tpls)
	}
	c.fails("kloudlike", "valid_bootstrap", map[string]any{"value": map[string]any{}}, "retry", "", "no network_id")
	user := `{"resource": {"kloudlike_instance": {"web": {"size": "small"}}}}`
	tpl := map[string]any{"credential": cred, "template": map[string]any{"content": user}, "group": "team", "stack_id": "s1"}
	c.fails("kloudlike", "apply_template", tpl, "terminal", "", "not bootstrapped")
	cred["bootstrap"] = map[string]any{"network_id": "net-7"}
	out := c.ok("kloudlike", "apply_template", tpl).(map[string]any)
	var applied map[string]any
	json.Unmarshal([]byte(out["content"].(string)), &applied)
	web := applied["resource"].(map[string]any)["kloudlike_instance"].(map[string]any)["web"].(map[string]any)
	if out["key"] != nil || web["network_id"] != "net-7" || web["size"] != "small" ||
		applied["provider"].(map[string]any)["kloudlike"].(map[string]any)["token"] != "${var.kloudlike_token}" ||
		strings.Contains(out["content"].(string), "kl-token") {
		t.Fatalf("apply_template: %v", out)
	}
	m := map[string]any{"credential": cred, "metadata": map[string]any{"id": "m-1"}, "machine": map[string]any{"label": "web"}}
	if i := c.ok("kloudlike", "info", m).(map[string]any); i["state"] != "Stopped" {
		t.Fatalf("info: %v", i)
	}
	if p := c.ok("kloudlike", "start", m).(map[string]any); p["ip"] != "10.10.0.5" || machines["m-1"]["state"] != "running" {
		t.Fatalf("start: %v", p)
	}
	if i := c.ok("kloudlike", "info", m).(map[string]any); i["state"] != "Running" {
		t.Fatalf("info after start: %v", i)
	}
	c.ok("kloudlike", "stop", m)
	gone := map[string]any{"credential": cred, "metadata": map[string]any{"id": "m-9"}}
	c.fails("kloudlike", "info", gone, "not_found", "", "machine m-9 not found")
	if i := c.ok("kloudlike", "info", map[string]any{"credential": cred}).(map[string]any); i["state"] != "NotInitialized" {
		t.Fatalf("info without id: %v", i)
	}
	c.ok("kloudlike", "valid_metadata", map[string]any{"value": map[string]any{"id": "m-1"}})
	c.fails("kloudlike", "valid_metadata", map[string]any{"value": map[string]any{"id": "x"}}, "retry", "", "not a kloudlike id")
}
