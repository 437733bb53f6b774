package runtime_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/luatest"
)

// These tests pin the behaviours Coopr's own artefacts rely on (issue 14):
// its fixtures, its worker's dispatch and its server's checks.

// echoPlugins writes a provider and an automator whose hooks return the
// fields they got, both with a required field and a defaulted one.
func echoPlugins(t *testing.T) *runtime.Runtime {
	t.Helper()
	dir := t.TempDir()
	code := `
E = {}
local function echo(self, input) self.result.result.fields = input.fields or {}; self.result.status = 0 end
for _, h in ipairs({"create","confirm","delete","bootstrap","install","configure","init","start","stop","remove"}) do E[h] = echo end
`
	params := map[string]any{"parameters": map[string]any{"admin": map[string]any{
		"fields": map[string]any{
			"token":  map[string]any{"label": "Token", "type": "password"},
			"region": map[string]any{"label": "Region", "default": "eu-1"},
		},
		"required": [][]string{{"token"}}}}}
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "p", Family: "provider", Classname: "E", Files: map[string]string{"e.lua": code}, Extra: params})
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "a", Family: "automator", Classname: "E", Files: map[string]string{"e.lua": code}, Extra: params})
	return luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: t.TempDir(), Tenant: "acme",
		ProvisionerID: "master-box-42", WorkerID: "box.example.com.42"})
}

// withFields sets the plugin fields of a luatest task.
func withFields(t *testing.T, task []byte, fields map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(task, &m); err != nil {
		t.Fatal(err)
	}
	cfg := m["config"].(map[string]any)
	if p, ok := cfg["provider"].(map[string]any); ok {
		p["provisioner"] = fields
	}
	if s, ok := cfg["service"].(map[string]any); ok {
		s["action"].(map[string]any)["fields"] = fields
	}
	b, _ := json.Marshal(m)
	return b
}

func TestCooprLowerCaseTaskName(t *testing.T) {
	rt := echoPlugins(t)
	for _, name := range []string{"install", "Install", "initialize", "delete"} {
		typ := "a"
		if name == "delete" {
			typ = "p"
		}
		task := withFields(t, luatest.Task(strings.ToUpper(name), typ, nil), map[string]any{"token": "x"})
		task = []byte(strings.Replace(string(task), `"taskName":"`+strings.ToUpper(name)+`"`, `"taskName":"`+name+`"`, 1))
		pt, err := runtime.ParseTask(task)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if pt.TaskName != strings.ToUpper(name) {
			t.Errorf("%s: TaskName %q", name, pt.TaskName)
		}
		if r := luatest.Run(t, rt, task); r.Status != 0 {
			t.Errorf("%s: %+v", name, r)
		}
	}
}

func TestCooprBootstrapWithoutAutomators(t *testing.T) {
	rt := echoPlugins(t)
	for _, cfg := range []string{`{"automators":[]}`, `{}`, `{"automators":null}`} {
		task := []byte(`{"taskId":"b-1","taskName":"BOOTSTRAP","config":` + cfg + `}`)
		r := luatest.Run(t, rt, task)
		if r.Status != 0 || !strings.Contains(r.Message, "nothing to bootstrap") {
			t.Errorf("%s: %+v", cfg, r)
		}
		b, _ := json.Marshal(r)
		if !strings.Contains(string(b), `"status":0`) {
			t.Errorf("%s: the finish body needs an integer status: %s", cfg, b)
		}
	}
}

func TestCooprRequiredWhereCooprChecked(t *testing.T) {
	rt := echoPlugins(t)
	cases := []struct {
		name, typ string
		fields    map[string]any
		fail      bool
	}{
		// A Coopr server refused a cluster create missing required fields.
		{"CREATE", "p", map[string]any{}, true},
		// It checked keys: "" is a value an admin chose.
		{"CREATE", "p", map[string]any{"token": ""}, false},
		// CONFIRM and DELETE were never checked: a node must be deletable.
		{"DELETE", "p", map[string]any{}, false},
		{"DELETE", "p", map[string]any{"token": ""}, false},
		{"CONFIRM", "p", map[string]any{}, false},
		// Coopr's automators raised on a missing (nil) field.
		{"INSTALL", "a", map[string]any{}, true},
		{"INSTALL", "a", map[string]any{"token": ""}, false},
		{"STOP", "a", map[string]any{"token": nil}, true},
	}
	for _, c := range cases {
		r := luatest.Run(t, rt, withFields(t, luatest.Task(c.name, c.typ, nil), c.fields))
		failed := r.Status != 0 && strings.Contains(r.Message, "missing required admin fields")
		if failed != c.fail {
			t.Errorf("%s %v: want failure %v, got %+v", c.name, c.fields, c.fail, r)
		}
	}
}

func TestCooprDefaultsFillOnlyAbsentFields(t *testing.T) {
	rt := echoPlugins(t)
	get := func(fields map[string]any) any {
		r := luatest.Run(t, rt, withFields(t, luatest.Task("CONFIRM", "p", nil), fields))
		return r.Result["fields"].(map[string]any)["region"]
	}
	if v := get(map[string]any{}); v != "eu-1" {
		t.Errorf("absent field: %v, want the default", v)
	}
	if v := get(map[string]any{"region": ""}); v != "" {
		t.Errorf("empty field: %v, want it kept empty (Coopr filled defaults into absent fields only)", v)
	}
	if v := get(map[string]any{"region": "us-2"}); v != "us-2" {
		t.Errorf("set field: %v", v)
	}
}

func TestCooprResultNamesWorker(t *testing.T) {
	rt := echoPlugins(t)
	r := luatest.Run(t, rt, withFields(t, luatest.Task("CONFIRM", "p", nil), nil))
	b, _ := json.Marshal(r)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	want := map[string]any{"workerId": "box.example.com.42", "provisionerId": "master-box-42", "tenantId": "acme", "taskId": "t-1"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("result %s = %v, want %v (%s)", k, m[k], v, b)
		}
	}
	var back runtime.Result
	if err := json.Unmarshal(b, &back); err != nil || back.WorkerID != "box.example.com.42" || back.Extra != nil {
		t.Errorf("round trip: %+v %v", back, err)
	}
}

func TestCooprProblems(t *testing.T) {
	ok := []string{
		`{"name":"shell","classname":"S","parameters":{"admin":{"fields":{"script":{"label":"Script","override":false}},"required":[["script"]]},"user":{"fields":{}}},
		  "resourceTypes":{"scripts":{"format":"file","permissions":"0755"},"archives":{"format":"archive"}}}`,
		`{"classname":"S"}`,
		`{"classname":"S","parameters":{"admin":{"fields":{"x":{"override":"true","options":["a","b"],"default":3}}}},"version":2}`,
	}
	for _, raw := range ok {
		if p := runtime.CooprProblems("shell", json.RawMessage(raw)); len(p) != 0 {
			t.Errorf("%s: %v", raw, p)
		}
	}
	bad := map[string]string{
		`{"classname":"S","parameters":{"Admin":{}}}`:                                         `parameters.Admin`,
		`{"classname":"S","parameters":{"admin":{"fields":{"a":{}},"required":[["a","b"]]}}}`: `names b, not declared`,
		`{"classname":"S","parameters":{"user":{"required":["a"]}}}`:                          `list of lists`,
		`{"classname":"S","parameters":{"admin":{"fields":{"a":{"override":1}}}}}`:            `override must be true or false`,
		`{"classname":"S","parameters":{"admin":{"fields":{"a":{"options":{"x":1}}}}}}`:       `options must be a list`,
		`{"classname":"S","resourceTypes":{"k":{"format":"File"}}}`:                           `format must be "file" or "archive"`,
		`{"classname":"S","resourceTypes":{"k":{}}}`:                                          `a missing value`,
		`{"classname":"S","resourceTypes":{"k":{"format":"archive","permissions":"0755"}}}`:   `only for the file format`,
		`{"classname":"S","resourceTypes":{"k":{"format":"file","permissions":"rwx"}}}`:       `octal mode`,
		`{"classname":"S","resourceTypes":{"k":{"format":"file","permissions":"0999"}}}`:      `octal mode`,
		`{"classname":"S","version":"2"}`:                                                     `version`,
		`{"classname":"S","label":{"x":1}}`:                                                   `"label" must be a string`,
	}
	for raw, want := range bad {
		p := runtime.CooprProblems("shell", json.RawMessage(raw))
		if len(p) == 0 || !strings.Contains(strings.Join(p, "; "), want) {
			t.Errorf("%s: %v, want %q", raw, p, want)
		}
	}
	if p := runtime.CooprProblems("my type", json.RawMessage(`{"classname":"S"}`)); len(p) != 1 {
		t.Errorf("a name with a space: %v", p)
	}
	// The 255-character limit holds at its edge.
	if p := runtime.CooprProblems(strings.Repeat("a", 255), json.RawMessage(`{"classname":"S"}`)); len(p) != 0 {
		t.Errorf("a name of 255 characters: %v", p)
	}
	if p := runtime.CooprProblems(strings.Repeat("a", 256), json.RawMessage(`{"classname":"S"}`)); len(p) != 1 {
		t.Errorf("a name of 256 characters: %v", p)
	}
}

// TestCooprSpecFixture runs Coopr's own rspec fixture (spec/task.json,
// copied verbatim to testdata) the way its automator_spec and
// provider_spec use it: as BOOTSTRAP, and with taskName replaced by the
// lower-case names. The fixture is the older shape (a flat ipaddress,
// nodenum as a string) that loomd accepts as it is.
func TestCooprSpecFixture(t *testing.T) {
	fixture, err := os.ReadFile(filepath.Join("testdata", "coopr-spec-task.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code := `
E = {}
local function echo(self, input)
  local r = self.result.result
  r["ran_" .. self.env.type] = true
  r.ipaddress = input.ipaddress
  r.user = input.sshauth and input.sshauth.user
  r.providerid = input.providerid
end
for _, h in ipairs({"create","confirm","delete","bootstrap"}) do E[h] = echo end
`
	for _, n := range []string{"shell", "chef"} {
		luatest.WritePlugin(t, dir, luatest.Plugin{Name: n, Family: "automator", Classname: "E", Files: map[string]string{"e.lua": code}})
	}
	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "rackspace", Family: "provider", Classname: "E", Files: map[string]string{"e.lua": code}})
	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir, WorkDir: t.TempDir()})

	r := luatest.Run(t, rt, fixture)
	if r.Status != 0 || r.Result["ran_shell"] != true || r.Result["ran_chef"] != true || r.Result["ipaddress"] != "192.168.0.1" || r.Result["user"] != "root" {
		t.Errorf("BOOTSTRAP: %+v", r)
	}
	for _, name := range []string{"bootstrap", "create", "confirm", "delete"} {
		task := []byte(strings.Replace(string(fixture), "BOOTSTRAP", name, 1))
		r := luatest.Run(t, rt, task)
		if r.Status != 0 {
			t.Errorf("%s: %+v", name, r)
			continue
		}
		if name != "bootstrap" && (r.Result["ran_rackspace"] != true || (name != "create" && r.Result["providerid"] != "00000000-aaaa-1111-bbbb-123456789abc")) {
			t.Errorf("%s: %+v", name, r.Result)
		}
	}
}
