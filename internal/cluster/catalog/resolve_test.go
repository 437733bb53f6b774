package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/cluster/spec"
)

// reactorCatalog is BaseSolverTest's entity store: provider joyent,
// hardware types small, medium, large-mem, large-cpu; image types
// centos6, ubuntu12; the reactor services and mysql.
func reactorCatalog(t *testing.T) *Catalog {
	t.Helper()
	dir := t.TempDir()
	w := func(rel, text string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w("providers/joyent.json", `{"name": "joyent", "providertype": "joyent", "provisioner": {}}`)
	w("providers/rackspace.json", `{"name": "rackspace", "providertype": "rackspace", "provisioner": {}}`)
	for name, flavor := range map[string]string{"small": "Small 2GB", "medium": "Medium 4GB", "large-mem": "Large 32GB", "large-cpu": "Large 16GB"} {
		w("hardwaretypes/"+name+".json", `{"name": "`+name+`", "providermap": {"joyent": {"flavor": "`+flavor+`"}}}`)
	}
	w("imagetypes/centos6.json", `{"name": "centos6", "providermap": {"joyent": {"image": "joyent-hash-of-centos6.4", "sshuser": "centos"}}}`)
	w("imagetypes/ubuntu12.yaml", "name: ubuntu12\nprovidermap:\n  joyent: {image: joyent-hash-of-ubuntu12}\n")
	for name, req := range map[string]string{"namenode": "", "datanode": "namenode", "resourcemanager": "datanode", "nodemanager": "resourcemanager",
		"hbasemaster": "datanode", "regionserver": "hbasemaster", "zookeeper": "", "reactor": `zookeeper", "regionserver", "nodemanager`, "mysql": ""} {
		deps := ""
		if req != "" {
			deps = `"dependencies": {"runtime": {"requires": ["` + req + `"]}},`
		}
		w("services/"+name+".json", `{"name": "`+name+`", `+deps+` "provisioner": {"actions": {"install": {"type": "shell", "fields": {"script": "x.sh"}}}}}`)
	}
	w("clustertemplates/reactor-medium.json", `{"name": "reactor-medium",
 "defaults": {"services": ["namenode", "datanode", "resourcemanager", "nodemanager", "hbasemaster", "regionserver", "zookeeper", "reactor"], "provider": "joyent"},
 "compatibility": {"services": ["namenode", "datanode", "resourcemanager", "nodemanager", "hbasemaster", "regionserver", "zookeeper", "reactor"]},
 "constraints": {
  "layout": {"mustcoexist": [["datanode", "nodemanager", "regionserver"], ["namenode", "resourcemanager", "hbasemaster"]],
             "cantcoexist": [["datanode", "namenode"], ["datanode", "zookeeper"], ["namenode", "zookeeper"], ["datanode", "reactor"], ["namenode", "reactor"]]},
  "services": {"namenode": {"hardwaretypes": ["large-mem"], "imagetypes": ["centos6", "ubuntu12"], "quantities": {"min": 1, "max": 1}},
               "datanode": {"hardwaretypes": ["medium", "large-cpu"], "imagetypes": ["centos6", "ubuntu12"], "quantities": {"min": 1, "max": 50}},
               "zookeeper": {"hardwaretypes": ["small", "medium"], "imagetypes": ["centos6"], "quantities": {"min": 1, "max": 5}},
               "reactor": {"hardwaretypes": ["medium", "large"], "quantities": {"min": 1, "max": 5}}}}}`)
	w("clustertemplates/simple.json", `{"name": "simple",
 "defaults": {"services": ["namenode", "datanode"], "provider": "joyent", "hardwaretype": "medium", "imagetype": "ubuntu12"},
 "compatibility": {"hardwaretypes": ["small", "medium", "large-mem"], "imagetypes": ["centos6", "ubuntu12"], "services": ["namenode", "datanode"]}}`)
	cat, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func templateSpec(t *testing.T, src string) *spec.Spec {
	t.Helper()
	sp, err := spec.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

// SolverTest#testEndToEnd through the catalog: 5 nodes of reactor-medium.
func TestResolveEndToEnd(t *testing.T) {
	cat := reactorCatalog(t)
	solved, res, err := Resolve(templateSpec(t, "name: mycluster\ntemplate: reactor-medium\nsize: 5\n"), cat, nil, 1000, Options{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, n := range solved.Nodes() {
		count[strings.Join(n.Services, ",")]++
		if n.ID != "mycluster-"+strings.TrimPrefix(n.Hostname, "mycluster-")[:4] || !strings.HasSuffix(n.Hostname, ".local") {
			t.Errorf("node %s hostname %s", n.ID, n.Hostname)
		}
	}
	want := map[string]int{"hbasemaster,namenode,resourcemanager": 1, "datanode,nodemanager,regionserver": 3, "reactor,zookeeper": 1}
	for k, v := range want {
		if count[k] != v {
			t.Fatalf("layout %v, want %v", count, want)
		}
	}
	// providermap: the master is on large-mem (its only type) with the
	// alphabetically first image (centos6) and that image's sshuser.
	for _, n := range solved.Nodes() {
		if strings.Contains(strings.Join(n.Services, ","), "namenode") &&
			(n.HardwareType != "large-mem" || n.Flavor != "Large 32GB" || n.Image != "joyent-hash-of-centos6.4" || n.SSHUser != "centos") {
			t.Fatalf("master node %+v", n)
		}
	}
	if res.Template != "reactor-medium" || len(res.Solution.Rows) != 3 {
		t.Fatalf("resolution %+v", res)
	}
}

// SolverTest's request validations, through the catalog.
func TestResolveErrors(t *testing.T) {
	cat := reactorCatalog(t)
	for _, tc := range []struct {
		name, src string
		o         Options
		want      string
	}{
		// testDisallowedServicesThrowsException
		{"incompatible", "name: c\ntemplate: reactor-medium\nsize: 5\nservices: [namenode, datanode, mysql]\n", Options{Size: -1}, "mysql are incompatible with the cluster"},
		// testInvalidServiceThrowsException
		{"no such service", "name: c\ntemplate: simple\nsize: 5\n", Options{Size: -1, AddServices: []string{"fakeservice"}, Services: []string{"namenode"}},
			"fakeservice are incompatible"},
		// testMissingServiceDependenciesThrowsException
		{"missing dependency", "name: c\ntemplate: reactor-medium\nsize: 5\nservices: [reactor, datanode]\n", Options{Size: -1},
			"datanode requires namenode, which is not on the cluster or in the list of services to add"},
		// testNoAvailableHardwareTypesThrowsException
		{"no hardware for provider", "name: c\ntemplate: reactor-medium\nsize: 5\n", Options{Size: -1, Provider: "rackspace"},
			"no hardware types are available to use with provider rackspace"},
		{"unknown template", "name: c\ntemplate: reactor-mediun\nsize: 5\n", Options{Size: -1}, `template "reactor-mediun" is not in the catalog`},
		{"required type not compatible", "name: c\ntemplate: simple\nsize: 5\nhardwaretype: large-cpu\n", Options{Size: -1},
			"hardware type large-cpu cannot be used with provider joyent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Resolve(templateSpec(t, tc.src), cat, nil, 1000, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// SolverTest#testRequiredTypes: a required hardware or image type is the
// only one used.
func TestResolveRequiredTypes(t *testing.T) {
	cat := reactorCatalog(t)
	for _, tc := range []struct {
		o        Options
		hw, imgs string
	}{
		{Options{Size: -1, HardwareType: "medium"}, "medium", "joyent-hash-of-ubuntu12"},
		{Options{Size: -1, HardwareType: "large-mem"}, "large-mem", "joyent-hash-of-ubuntu12"},
		{Options{Size: -1, ImageType: "ubuntu12"}, "medium", "joyent-hash-of-ubuntu12"},
		{Options{Size: -1, HardwareType: "small", ImageType: "centos6"}, "small", "joyent-hash-of-centos6.4"},
	} {
		solved, _, err := Resolve(templateSpec(t, "name: abc\ntemplate: simple\nsize: 5\n"), cat, nil, 1000, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		nodes := solved.Nodes()
		if len(nodes) != 5 {
			t.Fatalf("%d nodes", len(nodes))
		}
		for _, n := range nodes {
			if n.HardwareType != tc.hw || n.Image != tc.imgs {
				t.Fatalf("%+v: node %+v", tc.o, n)
			}
		}
	}
}

// SolverTest#testUsesDoesNotForceDependencyOnCluster and
// #testConflictingServicesThrowsException: uses orders only; conflicts
// refuse.
func TestResolveUsesAndConflicts(t *testing.T) {
	cat := reactorCatalog(t)
	base := "name: c\nprovider: {name: joyent, type: joyent}\nsize: 2\ntemplate:\n  name: t\n  defaults: {services: [service1]}\nservices:\n"
	ok := base + "  service1: {}\n  service2: {install: {uses: [service1]}}\n  service3: {runtime: {uses: [service1]}}\n"
	if _, _, err := Resolve(templateSpec(t, ok), cat, nil, 1000, Options{Size: -1, AddServices: []string{"service2", "service3"}}); err != nil {
		t.Fatal(err)
	}
	bad := base + "  service1: {}\n  myapp-1: {provides: [myapp], conflicts: [myapp-2]}\n  myapp-2: {provides: [myapp], conflicts: [myapp-1]}\n"
	_, _, err := Resolve(templateSpec(t, bad), cat, nil, 1000, Options{Size: -1, Services: []string{"myapp-1", "myapp-2"}})
	if err == nil || !strings.Contains(err.Error(), "myapp-1 conflicts with myapp-2") {
		t.Fatalf("conflict: %v", err)
	}
}

// TestLoadErrors: every bad catalog file is reported with file:line.
func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "hardwaretypes"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "hardwaretypes", "a.json"), []byte(`{"name": "a", "providermap": {}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "hardwaretypes", "b.json"), []byte(`{"name": "a", "providermap": {}}`), 0o644)
	os.WriteFile(filepath.Join(dir, "hardwaretypes", "c.json"), []byte("{\"name\": \"c\",\n \"providermap\": {\"x\": \"big\"}}"), 0o644)
	_, err := Load(dir)
	if err == nil {
		t.Fatal("loaded")
	}
	for _, want := range []string{"c.json:2: hardware type providermap.x must be a mapping", `b.json: hardwaretype "a" is already defined in`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
