package kloud_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/adapters/kloud/kloudtest"
)

// cloud is a fake of the small cloud API the kloudlike example wraps
// (networks and machines behind a bearer token), whose machines boot
// Klient: a machine that is running and whose user data carries a kite
// key (kitekey.<user>.<kiteID>, what kloudtest's key creator makes) has
// its Klient registered under that kite ID, until it stops.
type cloud struct {
	t     *testing.T
	token string
	srv   *httptest.Server

	mu       sync.Mutex
	next     int
	networks map[string]map[string]any
	machines map[string]map[string]any
	klients  map[string]string // kite ID -> kite URL
	calls    map[string]int    // "POST /machines/m-1/start" -> count
}

var kiteKeyLine = regexp.MustCompile(`content: kitekey\.[^.\s]+\.([0-9a-f]+)`)

func newCloud(t *testing.T, token string) *cloud {
	c := &cloud{t: t, token: token, networks: map[string]map[string]any{}, machines: map[string]map[string]any{},
		klients: map[string]string{}, calls: map[string]int{}}
	c.srv = httptest.NewServer(c)
	t.Cleanup(c.srv.Close)
	return c
}

func (c *cloud) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if v != nil {
			json.NewEncoder(w).Encode(v)
		}
	}
	if r.Header.Get("Authorization") != "Bearer "+c.token {
		reply(401, map[string]any{"error": "bad token"})
		return
	}
	c.calls[r.Method+" "+r.URL.Path]++
	var body map[string]any
	json.NewDecoder(r.Body).Decode(&body)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case parts[0] == "whoami":
		reply(200, map[string]any{"user": "alice"})
	case parts[0] == "networks" && r.Method == "POST":
		c.next++
		id := fmt.Sprintf("net-%d", c.next)
		c.networks[id] = body
		reply(201, map[string]any{"id": id})
	case parts[0] == "networks" && r.Method == "DELETE":
		delete(c.networks, parts[1])
		reply(204, nil)
	case parts[0] == "machines" && r.Method == "POST" && len(parts) == 1:
		if n, ok := body["network_id"]; ok && c.networks[fmt.Sprint(n)] == nil {
			reply(400, map[string]any{"error": "no such network"})
			return
		}
		c.next++
		id := fmt.Sprintf("m-%d", c.next)
		if body["label"] == "odd" {
			id = fmt.Sprintf("x-%d", c.next) // an id the plugin's valid_metadata refuses
		}
		body["id"], body["state"], body["ip"] = id, "running", fmt.Sprintf("10.10.0.%d", c.next)
		c.machines[id] = body
		c.boot(body)
		reply(201, body)
	case parts[0] == "machines" && c.machines[parts[1]] == nil:
		reply(404, map[string]any{"error": "no machine " + parts[1]})
	case parts[0] == "machines" && r.Method == "GET":
		reply(200, c.machines[parts[1]])
	case parts[0] == "machines" && r.Method == "DELETE":
		c.halt(c.machines[parts[1]])
		delete(c.machines, parts[1])
		reply(204, nil)
	case parts[0] == "machines" && len(parts) == 3 && parts[2] == "start":
		m := c.machines[parts[1]]
		m["state"] = "running"
		c.boot(m)
		reply(200, m)
	case parts[0] == "machines" && len(parts) == 3 && parts[2] == "stop":
		m := c.machines[parts[1]]
		m["state"] = "stopped"
		c.halt(m)
		reply(200, m)
	default:
		reply(405, nil)
	}
}

// boot registers the machine's Klient from the kite key in its user data.
func (c *cloud) boot(m map[string]any) {
	ud, _ := m["user_data"].(string)
	if key, ok := m["kite_key"].(string); ok {
		ud = "content: " + key // a cloud without cloud-init: Klient gets its key directly
	}
	if g := kiteKeyLine.FindStringSubmatch(ud); g != nil {
		c.klients[g[1]] = fmt.Sprintf("http://%s:56789/kite", m["ip"])
		m["kite_id"] = g[1]
	}
}

func (c *cloud) halt(m map[string]any) {
	if id, ok := m["kite_id"].(string); ok {
		delete(c.klients, id)
	}
}

// Dial implements kloudtest.Klients: the fake boots synchronously, so a
// Klient that is not registered now never will be.
func (c *cloud) Dial(kiteID string, timeout time.Duration) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u, ok := c.klients[kiteID]; ok {
		return u, nil
	}
	return "", fmt.Errorf("klient %s did not register within %s", kiteID, timeout)
}

func (c *cloud) count(call string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[call]
}

func (c *cloud) machine(id string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.machines[id]
}

// terraform applies JSON Terraform templates of kloudlike_network and
// kloudlike_instance resources against the cloud, as the kloudlike
// Terraform provider would: variables, ${lookup(var.x, count.index)},
// ${type.name.attr} interpolation, count, outputs; the provider block's
// api_url and token are what it calls the API with.
type terraform struct {
	t       *testing.T
	applied map[string][]string // key -> created resource paths ("/machines/m-1")
	// contents records each applied template.
	contents map[string]string
	api      map[string]any // the last applied provider block
}

type kloudtestState = kloudtest.State

func newTerraform(t *testing.T) *terraform {
	return &terraform{t: t, applied: map[string][]string{}, contents: map[string]string{}}
}

var interpolation = regexp.MustCompile(`\$\{([^}]*)\}`)

func (tf *terraform) Apply(key, content string) (*kloudtestState, error) {
	var tpl struct {
		Provider map[string]map[string]any            `json:"provider"`
		Variable map[string]map[string]any            `json:"variable"`
		Resource map[string]map[string]map[string]any `json:"resource"`
		Output   map[string]map[string]any            `json:"output"`
	}
	if err := json.Unmarshal([]byte(content), &tpl); err != nil {
		return nil, fmt.Errorf("terraform: %v", err)
	}
	tf.contents[key] = content
	attrs := map[string]map[string]any{} // "type.name" -> attributes
	var interp func(v any, index int) (any, error)
	interp = func(v any, index int) (any, error) {
		switch x := v.(type) {
		case string:
			var ierr error
			out := interpolation.ReplaceAllStringFunc(x, func(m string) string {
				expr := strings.TrimSpace(m[2 : len(m)-1])
				if g := regexp.MustCompile(`^lookup\(var\.([\w-]+),\s*count\.index\)$`).FindStringSubmatch(expr); g != nil {
					d, _ := tpl.Variable[g[1]]["default"].(map[string]any)
					if s, ok := d[fmt.Sprint(index)].(string); ok {
						return s
					}
					ierr = fmt.Errorf("terraform: lookup(var.%s, %d): no such key", g[1], index)
					return ""
				}
				if name, ok := strings.CutPrefix(expr, "var."); ok {
					if s, ok := tpl.Variable[name]["default"]; ok {
						return fmt.Sprint(s)
					}
					ierr = fmt.Errorf("terraform: variable %q is not declared", name)
					return ""
				}
				if p := strings.Split(expr, "."); len(p) == 3 {
					if a, ok := attrs[p[0]+"."+p[1]]; ok {
						return fmt.Sprint(a[p[2]])
					}
				}
				ierr = fmt.Errorf("terraform: cannot interpolate %q", m)
				return ""
			})
			return out, ierr
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				r, err := interp(e, index)
				if err != nil {
					return nil, err
				}
				out[k] = r
			}
			return out, nil
		}
		return v, nil
	}
	pc, err := interp(map[string]any(tpl.Provider["kloudlike"]), 0)
	if err != nil {
		return nil, err
	}
	api := pc.(map[string]any)
	call := func(method, path string, body any) (map[string]any, error) {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, fmt.Sprint(api["api_url"])+path, strings.NewReader(string(raw)))
		req.Header.Set("Authorization", "Bearer "+fmt.Sprint(api["token"]))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode >= 300 {
			return nil, fmt.Errorf("terraform: %s %s: %d %v", method, path, resp.StatusCode, out)
		}
		return out, nil
	}
	state := &kloudtestState{Outputs: map[string]any{}, Machines: map[string]map[string]string{}}
	// Networks first: instances refer to them.
	for _, name := range sortedNames(tpl.Resource["kloudlike_network"]) {
		body, err := interp(tpl.Resource["kloudlike_network"][name], 0)
		if err != nil {
			return nil, err
		}
		out, err := call("POST", "/networks", body)
		if err != nil {
			return nil, err
		}
		attrs["kloudlike_network."+name] = out
		tf.applied[key] = append(tf.applied[key], "/networks/"+fmt.Sprint(out["id"]))
	}
	for _, name := range sortedNames(tpl.Resource["kloudlike_instance"]) {
		inst := tpl.Resource["kloudlike_instance"][name]
		count := 1
		if n, ok := inst["count"].(float64); ok && n > 1 {
			count = int(n)
		}
		for i := 0; i < count; i++ {
			label := name
			if count > 1 {
				label = fmt.Sprintf("%s.%d", name, i)
			}
			body, err := interp(inst, i)
			if err != nil {
				return nil, err
			}
			b := body.(map[string]any)
			delete(b, "count")
			b["label"] = label
			out, err := call("POST", "/machines", b)
			if err != nil {
				return nil, err
			}
			tf.applied[key] = append(tf.applied[key], "/machines/"+fmt.Sprint(out["id"]))
			a := map[string]string{}
			for k, v := range out {
				a[k] = fmt.Sprint(v)
			}
			state.Machines[label] = a
		}
	}
	for name, o := range tpl.Output {
		v, err := interp(o["value"], 0)
		if err != nil {
			return nil, err
		}
		state.Outputs[name] = v
	}
	tf.api = api
	return state, nil
}

func (tf *terraform) Destroy(key string) error {
	paths := tf.applied[key]
	for i := len(paths) - 1; i >= 0; i-- {
		req, _ := http.NewRequest("DELETE", fmt.Sprint(tf.api["api_url"])+paths[i], nil)
		req.Header.Set("Authorization", "Bearer "+fmt.Sprint(tf.api["token"]))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 && resp.StatusCode != 404 {
			return fmt.Errorf("terraform: DELETE %s: %d", paths[i], resp.StatusCode)
		}
	}
	delete(tf.applied, key)
	return nil
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
