package apply

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReadResourcesFollowsLinks: resources as a Coopr server's sync lays
// them out, each activated by a link into its versioned store (an
// archive's link points to a dir), are read through the links, as the
// automators ship them.
func TestReadResourcesFollowsLinks(t *testing.T) {
	work := t.TempDir()
	base := filepath.Join(work, "t1", "automatortypes", "chef-solo")
	write := func(rel, content string) {
		p := filepath.Join(base, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".resources/cookbooks/hello/1/hello/recipes/default.rb", "log 'v1'\n")
	write(".resources/roles/web.json/2/web.json", `{"name": "web"}`)
	os.MkdirAll(filepath.Join(base, "cookbooks"), 0o755)
	os.MkdirAll(filepath.Join(base, "roles"), 0o755)
	os.Symlink("../.resources/cookbooks/hello/1/hello", filepath.Join(base, "cookbooks", "hello"))
	os.Symlink("../.resources/roles/web.json/2/web.json", filepath.Join(base, "roles", "web.json"))
	folders := map[string][]string{"chef-solo": {"cookbooks", "data_bags", "roles"}}
	r, err := ReadResources(work, "t1", folders)
	if err != nil {
		t.Fatal(err)
	}
	files := r.Types["chef-solo"].Files
	if len(files) != 2 || files["cookbooks/hello/recipes/default.rb"] == "" || files["roles/web.json"] == "" {
		t.Fatalf("files %v", files)
	}
	before := r.Types["chef-solo"].Digest
	// A new version activated: the digest changes.
	write(".resources/cookbooks/hello/2/hello/recipes/default.rb", "log 'v2'\n")
	os.Remove(filepath.Join(base, "cookbooks", "hello"))
	os.Symlink("../.resources/cookbooks/hello/2/hello", filepath.Join(base, "cookbooks", "hello"))
	r, err = ReadResources(work, "t1", folders)
	if err != nil {
		t.Fatal(err)
	}
	if r.Types["chef-solo"].Digest == before {
		t.Fatalf("a new version through the link left the digest as it was")
	}
}
