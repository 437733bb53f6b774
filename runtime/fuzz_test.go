package runtime

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// Fuzz targets for the parsers of untrusted task and call input (issue
// 20 item 6). Their seeds are below and in testdata/fuzz/Fuzz*/; `go
// test` runs them as plain tests, `make fuzz` fuzzes each for a while.

var taskSeeds = []string{
	`{"taskId":"t1","jobId":"j","clusterId":"c","taskName":"CREATE","nodeId":"n","tenantId":"acme","config":{"provider":{"providertype":"digitalocean","provisioner":{"api_token":"x"}},"hostname":"h"}}`,
	`{"taskId":"t2","taskName":"install","config":{"service":{"name":"web","action":{"type":"shell","fields":{"a":[1,2,{"b":null}]}}},"nodes":{"n1":{"hostname":"a"}}}}`,
	`{"taskId":"t3","taskName":"BOOTSTRAP","config":{"automators":["shell","chef-solo"],"ipaddresses":{"access_v4":"10.0.0.1"}}}`,
	`{"taskId":"t4","taskName":"CALL","type":"gke","hook":"create","input":{"name":"x"}}`,
	`{"taskId":"\u0074\"5","taskName":"START","config":{"service":{"action":{"type":"sh\u0065ll"}}}}`,
	`{"taskId":"t6","taskName":"STOP","config":{"service":{"action":{"type":"shell"}}},"config":{"provider":{"providertype":"x"}}}`,
	`{"TaskId":"t7","TASKNAME":"DELETE","Config":{"Provider":{"ProviderType":"x"}}}`,
	`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`,
	`{"taskId":"t8","taskName":"CREATE","config":{"provider":{"providertype":"\xff\xfe"}}}`,
	`{"taskId":1e999,"taskName":"CREATE","config":{}}`,
	` {"taskName":"CREATE","config":{"provider":null}} `,
	// A string's plain run ending at a control byte, an escape, the end.
	"{\"taskName\":\"CREATE\",\"config\":{\"nodes\":{\"n1\":{\"hostname\":\"plain then \x01\"}}}}",
	`{"taskName":"CREATE","config":{"nodes":{"n1":{"hostname":"plain then \"quoted\" \u00e9 \\"}}}}`,
	`{"taskName":"CREATE","config":{"nodes":{"n1":{"hostname":"plain to the end`,
	`{"taskName":"CREATE","config":{"nodes":{"n1":{"hostname":"plain then a backslash at the end\`,
}

// FuzzTaskScan: the fast scanner agrees with encoding/json. When it says
// a task is well formed, encoding/json must accept it too and decode the
// same routing fields; when it gives up, ParseTask falls back to
// encoding/json, so giving up is always allowed.
func FuzzTaskScan(f *testing.F) {
	for _, s := range taskSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w, ok, tooDeep := scanTask(data)
		if !ok || tooDeep {
			return
		}
		ref, err := refTaskWire(data)
		if err != nil {
			t.Fatalf("the scanner accepted what encoding/json refuses (%v): %q", err, data)
		}
		w.Config = normRoute(w.Config)
		if !reflect.DeepEqual(w, ref) {
			t.Fatalf("the scanner decoded %+v, encoding/json %+v, from %q", w, ref, data)
		}
	})
}

// refTaskWire decodes a task's routing fields with encoding/json, keys
// matched exactly as Coopr (and the scanner, and the Lua task table) do:
// encoding/json alone would also take "TaskName" for "taskName".
func refTaskWire(data []byte) (taskWire, error) {
	var w taskWire
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return w, err
	}
	for key, dst := range map[string]*string{"taskId": &w.TaskID, "jobId": &w.JobID, "clusterId": &w.ClusterID,
		"taskName": &w.TaskName, "nodeId": &w.NodeID, "tenantId": &w.TenantID} {
		if raw, ok := top[key]; ok {
			if err := json.Unmarshal(raw, dst); err != nil {
				return w, err
			}
		}
	}
	raw, ok := top["config"]
	if !ok || string(raw) == "null" {
		return w, nil
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return w, err
	}
	w.Config = &routeInfo{}
	obj := func(raw json.RawMessage) (map[string]json.RawMessage, bool, error) {
		if raw == nil || string(raw) == "null" {
			return nil, false, nil
		}
		var m map[string]json.RawMessage
		err := json.Unmarshal(raw, &m)
		return m, err == nil, err
	}
	if p, ok, err := obj(cfg["provider"]); err != nil {
		return w, err
	} else if ok {
		w.Config.Provider = &struct {
			ProviderType string `json:"providertype"`
		}{}
		if raw, ok := p["providertype"]; ok {
			if err := json.Unmarshal(raw, &w.Config.Provider.ProviderType); err != nil {
				return w, err
			}
		}
	}
	if sv, ok, err := obj(cfg["service"]); err != nil {
		return w, err
	} else if ok {
		w.Config.Service = &struct {
			Action *struct {
				Type string `json:"type"`
			} `json:"action"`
		}{}
		if a, ok, err := obj(sv["action"]); err != nil {
			return w, err
		} else if ok {
			w.Config.Service.Action = &struct {
				Type string `json:"type"`
			}{}
			if raw, ok := a["type"]; ok {
				if err := json.Unmarshal(raw, &w.Config.Service.Action.Type); err != nil {
					return w, err
				}
			}
		}
	}
	if raw, ok := cfg["automators"]; ok {
		if err := json.Unmarshal(raw, &w.Config.Automators); err != nil {
			return w, err
		}
	}
	return w, nil
}

// normRoute drops what only the scanner records (where nodes lies).
func normRoute(r *routeInfo) *routeInfo {
	if r == nil {
		return nil
	}
	c := *r
	c.nodes = [2]int{}
	return &c
}

// FuzzParseTask: any input is a task or an invalid-task error, never a
// panic; an accepted task satisfies ParseTask's promises.
func FuzzParseTask(f *testing.F) {
	for _, s := range taskSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		task, err := ParseTask(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidTask) {
				t.Fatalf("an error that is not ErrInvalidTask: %v", err)
			}
			return
		}
		if task.TenantID != "" && !ValidTenant(task.TenantID) {
			t.Fatalf("accepted tenantId %q", task.TenantID)
		}
		if _, ok := hookByTask[task.TaskName]; !ok && task.TaskName != CallTaskName {
			t.Fatalf("accepted taskName %q", task.TaskName)
		}
	})
}

// FuzzParseCall: a call request or an invalid-call error.
func FuzzParseCall(f *testing.F) {
	for _, s := range []string{
		`{"type":"gke","hook":"create","input":{"name":"x","nodes":3}}`,
		`{"type":"gke","hook":"create","tenantId":"../x"}`,
		`{"type":"gke","hook":"create","extra":1}`,
		`{"type":"","hook":""}`,
		`{"type":"a","hook":"b","input":[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseCall(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidCall) {
				t.Fatalf("an error that is not ErrInvalidCall: %v", err)
			}
			return
		}
		if c.Type == "" || c.Hook == "" || c.TenantID != "" && !ValidTenant(c.TenantID) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
