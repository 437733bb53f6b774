package test

// End-to-end test of Coopr templates: a catalog of the hadoop kind
// (Coopr's JSON), `loomd apply --template hadoop --size 3` on real sshd
// hosts through the static provider, a scale to 5 that keeps the nodes'
// services, a service added to the existing nodes by Coopr's rules, and
// a service that fits no node refused with its reason, the cluster left
// as it was.

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeCatalog writes a hadoop-kind catalog whose services all run the
// effect script.
func (e *clusterEnv) writeCatalog() string {
	dir := filepath.Join(e.dir, "catalog")
	act := `{"type": "shell", "fields": {"script": "effect.sh"}}`
	svc := func(name, requires string) string {
		return `{"name": "` + name + `", "description": "` + name + `",
  "dependencies": {"provides": [], "conflicts": [], "install": {"requires": [], "uses": []}, "runtime": {"requires": [` + requires + `], "uses": []}},
  "provisioner": {"actions": {"install": ` + act + `, "configure": ` + act + `, "start": ` + act + `}}}`
	}
	for name, req := range map[string]string{"base": ``, "namenode": ``, "datanode": `"namenode"`, "resourcemanager": `"namenode"`,
		"nodemanager": `"resourcemanager"`, "hive": `"namenode"`, "zookeeper": ``} {
		e.write(filepath.Join(dir, "services", name+".json"), svc(name, req), 0o644)
	}
	e.write(filepath.Join(dir, "providers", "lab.json"), `{"name": "lab", "description": "the test hosts", "providertype": "static",
  "provisioner": {"confirm_wait": "5", "ssh_timeout": "5"}}`, 0o644)
	e.write(filepath.Join(dir, "hardwaretypes", "small.yaml"), "name: small\nprovidermap:\n  lab: {flavor: small}\n  aws: {flavor: t3.small}\n", 0o644)
	e.write(filepath.Join(dir, "hardwaretypes", "large.json"), `{"name": "large", "providermap": {"aws": {"flavor": "m5.large"}}}`, 0o644)
	e.write(filepath.Join(dir, "imagetypes", "debian12.json"), `{"name": "debian12", "providermap": {"lab": {"image": "debian12"}}}`, 0o644)
	e.write(filepath.Join(dir, "clustertemplates", "hadoop.json"), `{
  "name": "hadoop", "description": "Hadoop without HA",
  "defaults": {"services": ["base", "namenode", "datanode", "resourcemanager", "nodemanager"], "provider": "lab",
               "config": {"greeting": "hi", "peers": "%num.service.datanode%"}},
  "compatibility": {"hardwaretypes": [], "imagetypes": [], "services": ["base", "namenode", "datanode", "resourcemanager", "nodemanager", "hive", "zookeeper"]},
  "constraints": {
    "layout": {"mustcoexist": [["datanode", "nodemanager"], ["namenode", "resourcemanager"]],
               "cantcoexist": [["namenode", "datanode"], ["hive", "datanode"], ["zookeeper", "datanode"], ["zookeeper", "namenode"]]},
    "services": {"namenode": {"quantities": {"min": "1", "max": "1"}}, "resourcemanager": {"quantities": {"min": 1, "max": 1}},
                 "datanode": {"quantities": {"min": 1}}, "hive": {"quantities": {"max": 1}}, "zookeeper": {"quantities": {"min": 1, "max": 3}}},
    "size": {"min": 3}},
  "administration": {"leaseduration": {"initial": 0, "max": 0, "step": 0}}}`, 0o644)
	return dir
}

type layoutJSON struct {
	Layout struct {
		Template string `json:"template"`
		Solution struct {
			Layouts []struct {
				Layout struct {
					Services []string `json:"services"`
				} `json:"layout"`
				Kept, New int
				Why       string `json:"why"`
			} `json:"layouts"`
		} `json:"solution"`
	} `json:"layout"`
	Steps []planStep `json:"steps"`
}

// nodeServices reads node id -> services from the state.
func (e *clusterEnv) nodeServices(name string) map[string][]string {
	e.t.Helper()
	out, _ := e.loomd(0, "cluster", "get", name)
	var s struct {
		Status string `json:"status"`
		Nodes  map[string]struct {
			Services []string `json:"services"`
			State    string   `json:"state"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		e.t.Fatal(err)
	}
	if s.Status != "active" {
		e.t.Fatalf("cluster %s is %s, want active", name, s.Status)
	}
	m := map[string][]string{}
	for id, n := range s.Nodes {
		m[id] = n.Services
	}
	return m
}

// catalogCmd runs loomd catalog (which takes none of the cluster flags).
func (e *clusterEnv) catalogCmd(want int, args ...string) (string, string) {
	e.t.Helper()
	cmd := exec.Command(loomdBin, append([]string{"catalog"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	if code != want {
		e.t.Fatalf("loomd catalog %v: exit %d, want %d\n%s%s", args, code, want, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

func TestTemplateCluster(t *testing.T) {
	e := newClusterEnv(t, 5)
	cat := e.writeCatalog()

	// The catalog as loomd reads it.
	out, _ := e.catalogCmd(0, "list", "--catalog", cat)
	for _, want := range []string{"template", "hadoop", "hardwaretype", "large", "provider", "lab"} {
		if !strings.Contains(out, want) {
			t.Fatalf("catalog list lacks %q:\n%s", want, out)
		}
	}
	if out, _ := e.catalogCmd(0, "show", "template", "hadoop", "--catalog", cat); !strings.Contains(out, `"mustcoexist"`) {
		t.Fatalf("catalog show template hadoop:\n%s", out)
	}
	if _, errs := e.catalogCmd(2, "show", "template", "hadop", "--catalog", cat); !strings.Contains(errs, `did you mean "hadoop"`) {
		t.Fatalf("catalog show of a misspelt template: %s", errs)
	}

	// Size 2 is below the template's size constraint.
	if _, errs := e.loomd(2, "plan", "--template", "hadoop", "--size", "2", "hdp", "--catalog", cat, "--local"); !strings.Contains(errs, "size 2 is outside its constraints.size: at least 3 nodes") {
		t.Fatalf("size 2: %s", errs)
	}

	// The plan shows the layout: 2 datanodes, 1 master.
	out, _ = e.loomd(0, "plan", "--template", "hadoop", "--size", "3", "hdp", "--catalog", cat, "--local", "--json")
	var lj layoutJSON
	if err := json.Unmarshal([]byte(out), &lj); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	rows := lj.Layout.Solution.Layouts
	if lj.Layout.Template != "hadoop" || len(rows) != 2 || rows[0].New != 2 || !slices.Equal(rows[0].Layout.Services, []string{"base", "datanode", "nodemanager"}) ||
		rows[1].New != 1 || !slices.Equal(rows[1].Layout.Services, []string{"base", "namenode", "resourcemanager"}) {
		t.Fatalf("layout: %+v", lj.Layout)
	}
	table, _ := e.loomd(0, "plan", "--template", "hadoop", "--size", "3", "hdp", "--catalog", cat, "--local")
	if !strings.Contains(table, "Layout: template hadoop, 3 nodes, provider lab") || !strings.Contains(table, "namenode min: the nodes namenode still needs elsewhere leave 2") {
		t.Fatalf("plan table:\n%s", table)
	}

	// Create with 3 nodes.
	e.loomd(0, "apply", "--template", "hadoop", "--size", "3", "hdp", "--catalog", cat, "--local")
	nodes := e.nodeServices("hdp")
	want3 := map[string][]string{
		"hdp-1000": {"base", "datanode", "nodemanager"}, "hdp-1001": {"base", "datanode", "nodemanager"},
		"hdp-1002": {"base", "namenode", "resourcemanager"},
	}
	if !equalNodes(nodes, want3) {
		t.Fatalf("after create: %v, want %v", nodes, want3)
	}
	fx := e.effects()
	if n := countFx(fx, "INSTALL", "datanode"); n != 2 {
		t.Fatalf("%d INSTALL datanode effects, want 2: %v", n, fx)
	}

	// Scale to 5: the existing nodes keep their services, 2 datanodes
	// join (namenode max 1).
	e.loomd(0, "apply", "--template", "hadoop", "--size", "5", "hdp", "--catalog", cat, "--local")
	nodes = e.nodeServices("hdp")
	want5 := map[string][]string{"hdp-1003": {"base", "datanode", "nodemanager"}, "hdp-1004": {"base", "datanode", "nodemanager"}}
	for id, s := range want3 {
		want5[id] = s
	}
	if !equalNodes(nodes, want5) {
		t.Fatalf("after scale: %v, want %v", nodes, want5)
	}
	fx = e.effects()
	for _, f := range fx {
		if f.task == "INSTALL" && f.node != "hdp-1003" && f.node != "hdp-1004" {
			t.Fatalf("the scale installed on an existing node: %v", f)
		}
	}

	// Add hive: it can't coexist with datanode, max 1: the master.
	e.loomd(0, "apply", "--template", "hadoop", "--size", "5", "--add-services", "hive", "hdp", "--catalog", cat, "--local")
	nodes = e.nodeServices("hdp")
	want5["hdp-1002"] = []string{"base", "hive", "namenode", "resourcemanager"}
	if !equalNodes(nodes, want5) {
		t.Fatalf("after add-services: %v, want %v", nodes, want5)
	}
	fx = e.effects()
	if countFx(fx, "INSTALL", "hive") != 1 || countFx(fx, "INSTALL", "datanode") != 0 {
		t.Fatalf("add-services effects: %v", fx)
	}

	// zookeeper fits no existing node (it can't coexist with datanode nor
	// namenode, and adding services never adds nodes): refused with the
	// reason, nothing run, the cluster still active and unchanged.
	_, errs := e.loomd(2, "apply", "--template", "hadoop", "--size", "5", "--add-services", "hive,zookeeper", "hdp", "--catalog", cat, "--local")
	if !strings.Contains(errs, "service zookeeper can go on none of the 5 existing nodes") || !strings.Contains(errs, "cantcoexist [zookeeper, datanode]") {
		t.Fatalf("zookeeper: %s", errs)
	}
	if nodes := e.nodeServices("hdp"); !equalNodes(nodes, want5) {
		t.Fatalf("after the refused add: %v", nodes)
	}
	// With a sixth node it goes there.
	out, _ = e.loomd(0, "plan", "--template", "hadoop", "--size", "6", "--add-services", "hive,zookeeper", "hdp", "--catalog", cat, "--local")
	if !strings.Contains(out, "base,zookeeper") {
		t.Fatalf("plan with 6 nodes:\n%s", out)
	}
	e.loomd(0, "destroy", "hdp", "--local")
}

func countFx(fx []effect, task, service string) int {
	n := 0
	for _, f := range fx {
		if f.task == task && f.service == service {
			n++
		}
	}
	return n
}

func equalNodes(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for id, s := range a {
		if !slices.Equal(s, b[id]) {
			return false
		}
	}
	return true
}
