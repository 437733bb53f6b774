package runtime

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCooprOwnDefinitions: the definitions Coopr's provisioner shipped
// (testdata/coopr-definitions, copied verbatim from cdapio/coopr-provisioner,
// Apache 2.0) parse as Loom definitions, and CooprProblems finds nothing in
// them: what a Coopr server accepted, plugins check accepts.
func TestCooprOwnDefinitions(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "coopr-definitions", "*.json"))
	if len(files) != 4 {
		t.Fatalf("fixtures: %v", files)
	}
	types := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		def, err := parseDefinition(data)
		if err != nil || def == nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for name, td := range def.Types {
			types++
			if p := CooprProblems(name, td.Raw); len(p) != 0 {
				t.Errorf("%s: type %s: %v", f, name, p)
			}
		}
	}
	if types != 9 {
		t.Errorf("%d types, want 9 (6 fog providers, chef-solo, docker, shell)", types)
	}
}
