package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const good = `name: web
dnsSuffix: .example.com
provider:
  type: static
  fields: {inventory: inventory.json}
config:
  port: 8080
  nested: {a: [1, 2]}
nodegroups:
  - name: db
    count: 1
    flavor: small
    services: [base, db]
  - name: app
    count: 2
    services: [base, app]
services:
  base:
    actions:
      install: {type: shell, fields: {script: base.sh}}
  db:
    provides: [database]
    install: {requires: [base]}
    actions:
      install: {type: shell, fields: {script: db.sh, args: install}}
      start: {type: shell, fields: {script: db.sh, args: start}}
  app:
    install: {requires: [base]}
    runtime: {requires: [database]}
    actions:
      start: {type: shell, fields: {script: app.sh}}
constraints:
  services:
    db: {min: 1, max: 1}
`

func TestParseGood(t *testing.T) {
	s, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "web" || s.DNSSuffix != "example.com" || s.Provider.Type != "static" || s.Provider.Name != "static" {
		t.Errorf("spec header: %+v", s)
	}
	if s.Provider.Fields["inventory"] != "inventory.json" || s.Config["port"] != 8080 {
		t.Errorf("fields %v config %v", s.Provider.Fields, s.Config)
	}
	nodes := s.Nodes()
	if len(nodes) != 3 || nodes[0].ID != "web-db-1" || nodes[0].Num != 1000 || nodes[2].ID != "web-app-2" ||
		nodes[2].Hostname != "web-app-2.example.com" || nodes[2].SSHUser != "root" || nodes[0].Flavor != "small" {
		t.Errorf("nodes: %+v", nodes)
	}
	if got := s.DepsOf(s.Services["app"], "runtime"); len(got) != 1 || got[0] != "db" {
		t.Errorf("app's runtime deps (database provided by db): %v", got)
	}
	if got := s.Automators([]string{"base", "db"}); len(got) != 1 || got[0] != "shell" {
		t.Errorf("automators %v", got)
	}
}

// TestParseCooprService loads a service in Coopr's JSON shape unchanged.
func TestParseCooprService(t *testing.T) {
	src := `{"name": "c", "provider": {"name": "aws-us-east-1", "providertype": "aws", "provisioner": {"region": "us-east-1"}},
 "nodegroups": [{"name": "all", "count": 1, "services": ["hadoop-hdfs-datanode", "base"]}],
 "services": [
  {"name": "base", "description": "x", "provisioner": {"actions": {"install": {"type": "chef-solo", "fields": {"run_list": "recipe[base]"}}}}},
  {"name": "hadoop-hdfs-datanode",
   "dependencies": {"provides": ["hadoop-client"], "conflicts": [], "install": {"requires": ["base"], "uses": []},
                    "runtime": {"requires": [], "uses": ["kerberos-master"]}},
   "provisioner": {"actions": {"start": {"type": "chef-solo", "fields": {"run_list": "recipe[dn]"}}}},
   "links": [{"label": "UI", "url": "http://%ip.access_v4.self%:50075"}]},
  {"name": "kerberos-master", "provisioner": {"actions": {}}}
 ]}`
	s, err := Parse("c.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	dn := s.Services["hadoop-hdfs-datanode"]
	if dn.Provides[0] != "hadoop-client" || dn.Install.Requires[0] != "base" || dn.Actions["start"].Type != "chef-solo" ||
		s.Provider.Name != "aws-us-east-1" || s.Provider.Type != "aws" || s.Provider.Fields["region"] != "us-east-1" {
		t.Errorf("coopr service: %+v provider %+v", dn, s.Provider)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
	}{
		{"empty", ``, []string{"empty.yaml: the file is empty"}},
		{"syntax", "name: [", []string{"syntax.yaml:1: not valid YAML or JSON"}},
		{"unknown key", "name: a\nprovider: {type: x}\nnodegroup: []\n", []string{`unknown.yaml:3: unknown key "nodegroup" in the cluster spec (did you mean "nodegroups"?) (known keys: catalog, config, constraints, description, dnsSuffix, dns_suffix, hardwaretype, hardwaretypes, imagetype, imagetypes, name, nodegroups, provider, services, size, template)`}},
		{"no type", "name: a\nprovider:\n  fields: {}\nnodegroups: []\n", []string{`:2: provider needs a "type"`}},
		{"bad count", "name: a\nprovider: {type: x}\nnodegroups:\n  - name: g\n    count: lots\n", []string{`:5: nodegroups[0].count must be a whole number ≥ 0, not "lots"`}},
		{"undefined service", "name: a\nprovider: {type: x}\nnodegroups:\n  - name: g\n    count: 1\n    services: [bse]\nservices:\n  base: {}\n",
			[]string{`:6: node group "g" lists service "bse", which the spec's services do not define (did you mean "base"?)`}},
		{"missing requirement", "name: a\nprovider: {type: x}\nnodegroups:\n  - {name: g, count: 1, services: [app]}\nservices:\n  db: {}\n  app:\n    runtime: {requires: [db]}\n",
			[]string{`:8: service "app" requires "db" (runtime), which no node group carries`}},
		{"cycle", "name: a\nprovider: {type: x}\nnodegroups:\n  - {name: g, count: 1, services: [p, q]}\nservices:\n  p: {install: {requires: [q]}}\n  q: {install: {uses: [p]}}\n",
			[]string{`install dependencies form a cycle: p → q → p`}},
		{"conflict", "name: a\nprovider: {type: x}\nnodegroups:\n  - {name: g, count: 1, services: [p]}\n  - {name: h, count: 1, services: [q]}\nservices:\n  p: {conflicts: [q]}\n  q: {}\n",
			[]string{`:7: service "p" conflicts with "q", and both are on the cluster`}},
		{"action type", "name: a\nprovider: {type: x}\nnodegroups: []\nservices:\n  p:\n    actions:\n      start: {fields: {}}\n      launch: {type: shell}\n",
			[]string{`:7: service "p" action start needs a "type"`, `:8: unknown key "launch" in service "p" actions`}},
		{"bad name", "name: Web_1\nprovider: {type: x}\nnodegroups: [{name: g, count: 1}]\n", []string{`:1: name "Web_1" must be a lower-case DNS label`}},
		{"constraints", "name: a\nprovider: {type: x}\nnodegroups:\n  - {name: g, count: 2, services: [p, q]}\nservices:\n  p: {}\n  q: {}\nconstraints:\n  cantcoexist: [[p, q]]\n  services:\n    p: {max: 1}\n",
			[]string{`:4: node group "g" carries p, q together`, `:9: service "p" is on 2 nodes; constraints.services wants it on between 0 and 1`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := strings.ReplaceAll(c.name, " ", "") + ".yaml"
			if c.name == "unknown key" {
				file = "unknown.yaml"
			}
			_, err := Parse(file, []byte(c.src))
			if err == nil {
				t.Fatalf("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\nwant it to contain\n%s", err, w)
				}
			}
		})
	}
}

// TestCooprTemplate: a Coopr cluster template, unchanged, gives the config
// and the constraints (here violated: two namenodes).
func TestCooprTemplate(t *testing.T) {
	tpl := `{"name": "hadoop-distributed", "description": "Hadoop cluster",
  "defaults": {"services": ["base", "nn", "dn"], "provider": "aws", "hardwaretype": "standard-large", "imagetype": "ubuntu12",
               "dnsSuffix": "dev.example.com", "config": {"hadoop": {"core_site": {"fs.defaultFS": "hdfs://%host.service.nn%"}}}},
  "compatibility": {"hardwaretypes": [], "imagetypes": [], "services": ["base", "nn", "dn"]},
  "constraints": {"layout": {"mustcoexist": [], "cantcoexist": [["nn", "dn"]]},
                  "services": {"nn": {"hardwaretypes": [], "quantities": {"min": "1", "max": "1"}}, "dn": {"quantities": {"min": "1"}}},
                  "size": {"min": 3}},
  "administration": {"leaseduration": {"initial": 0, "max": 0, "step": 0}}}`
	spec := func(masters int) string {
		return fmt.Sprintf(`{"name": "h", "provider": {"type": "aws"}, "template": %s,
 "nodegroups": [{"name": "m", "count": %d, "services": ["base", "nn"]}, {"name": "d", "count": 2, "services": ["base", "dn"]}],
 "services": {"base": {}, "nn": {}, "dn": {}}}`, tpl, masters)
	}
	s, err := Parse("h.json", []byte(spec(1)))
	if err != nil {
		t.Fatal(err)
	}
	hadoop, _ := s.Config["hadoop"].(map[string]any)
	if hadoop == nil || s.DNSSuffix != "dev.example.com" || s.Constraints.Quantities["nn"].Max != 1 || len(s.Constraints.CantCoexist) != 1 {
		t.Errorf("template: config %v suffix %q constraints %+v", s.Config, s.DNSSuffix, s.Constraints)
	}
	if _, err := Parse("h.json", []byte(spec(2))); err == nil || !strings.Contains(err.Error(), `service "nn" is on 2 nodes`) {
		t.Errorf("two namenodes: %v", err)
	}
}

// TestMacroChecks: a malformed macro or one naming an undefined service is
// a spec error at the config's (or the service's) line.
func TestMacroChecks(t *testing.T) {
	src := `name: m
provider: {type: p}
config:
  zk: "%host.service.zookeper%"
nodegroups:
  - {name: n, count: 1, services: [zookeeper]}
services:
  zookeeper:
    actions:
      install: {type: sh, fields: {args: "%join(host.service.zookeeper)%"}}
`
	_, err := Parse("m.yaml", []byte(src))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{`m.yaml:4: config: macro %host.service.zookeper% names service "zookeper", which the spec does not define (did you mean "zookeeper"?)`,
		`m.yaml:10: service zookeeper, action install, fields: macro %join(host.service.zookeeper)%`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestLoadFileLimit: a spec over the cap is refused before it is read,
// naming the size, the cap and --spec-max-size; one under it loads; a
// stream (a pipe) is cut at the cap.
func TestLoadFileLimit(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "web.yaml")
	padded := good + "# " + strings.Repeat("x", 4096) + "\n"
	if err := os.WriteFile(path, []byte(padded), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFileLimit(path, int64(len(padded))); err != nil {
		t.Fatalf("a spec at the cap: %v", err)
	}
	_, err := LoadFileLimit(path, 4096)
	var se *SizeError
	if !errors.As(err, &se) || se.Size != int64(len(padded)) || !strings.Contains(err.Error(), "--spec-max-size") || !strings.Contains(err.Error(), path) {
		t.Fatalf("a spec over the cap: %v", err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Errorf("LoadFile under the default cap: %v", err)
	}
	fifo := filepath.Join(dir, "spec.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no fifo: %v", err)
	}
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer f.Close()
		f.Write([]byte(padded))
	}()
	if _, err := LoadFileLimit(fifo, 1024); !errors.As(err, &se) || se.Size != -1 || !strings.Contains(err.Error(), "more than 1024 bytes") {
		t.Errorf("a pipe past the cap: %v", err)
	}
	if err := CheckSize("x.yaml", DefaultMaxSize+1, 0); err == nil || !strings.Contains(err.Error(), "8 MiB") {
		t.Errorf("CheckSize over the default: %v", err)
	}
}

// TestCheckAll: plan-time validation against the loaded plugins: unknown
// provider and automator types, misspelt macro address types, requires
// naming a near alias; every problem at its own line, all at once, each
// with a suggestion.
func TestCheckAll(t *testing.T) {
	src := `name: shop
provider:
  type: statik
config:
  db: "%ip.acess_v4.service.db%"
  web: "%host.service.web%"
nodegroups:
  - {name: db, count: 1, services: [db]}
  - {name: web, count: 1, services: [web]}
services:
  db:
    provides: [foundation]
    actions:
      install: {type: shel, fields: {args: "%ip.bind_v4.self%"}}
      start: {type: shell, fields: {args: "%num.service.wbe%"}}
  web:
    runtime:
      requires: [fundation]
    actions:
      install: {type: shell}
`
	_, err := ParseWith("shop.yaml", []byte(src), Options{Plugins: &Plugins{Providers: []string{"static", "digitalocean"}, Automators: []string{"shell"}, Where: "plugins/"}})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`shop.yaml:3: provider type "statik" is not a loaded provider plugin in plugins/ (did you mean "static"?)`,
		`shop.yaml:5: config: macro %ip.acess_v4.service.db% names address type "acess_v4", which no provider returns (did you mean "access_v4"?)`,
		`shop.yaml:14: service "db", action install: automator type "shel" is not a loaded automator plugin in plugins/ (did you mean "shell"?)`,
		`shop.yaml:15: service db, action start, fields: macro %num.service.wbe% names service "wbe", which the spec does not define (did you mean "web"?)`,
		`shop.yaml:18: service "web": runtime.requires names "fundation", which no service defines or provides (did you mean "foundation"?)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("errors lack\n%s\nin\n%v", want, err)
		}
	}
	if n := len(err.(*Error).Problems); n != 5 {
		t.Errorf("%d problems, want 5:\n%v", n, err)
	}
	// addresstypes lets a provider's own address types through.
	ok := strings.Replace(src, "  type: statik\n", "  type: static\n  addresstypes: [acess_v4]\n", 1)
	ok = strings.NewReplacer("type: shel,", "type: shell,", "wbe", "web", "fundation", "foundation").Replace(ok)
	if _, err := ParseWith("shop.yaml", []byte(ok), Options{Plugins: &Plugins{Providers: []string{"static"}, Automators: []string{"shell"}}}); err != nil {
		t.Errorf("fixed spec: %v", err)
	}
}
