package chefsolo_test

// Random sequences of changes to the resources in the work dir and to the
// node's copy (edits, new and removed files, cookbooks and data bags),
// each followed by BOOTSTRAP on a real sshd host. After every BOOTSTRAP
// the node's three trees hold exactly the work dir's files, and BOOTSTRAP
// shipped if and only if something had changed. The seed is printed;
// LOOM_CHEF_SEED=<seed> replays a sequence.

import (
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tree reads every regular file under root/{cookbooks,data_bags,roles},
// following links: relative path -> content.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range []string{"cookbooks", "data_bags", "roles"} {
		var walk func(dir, rel string)
		walk = func(dir, rel string) {
			entries, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			for _, en := range entries {
				p, r := filepath.Join(dir, en.Name()), rel+"/"+en.Name()
				st, err := os.Stat(p) // follows links
				if err != nil {
					continue
				}
				if st.IsDir() {
					walk(p, r)
				} else if st.Mode().IsRegular() {
					b, _ := os.ReadFile(p)
					out[strings.TrimPrefix(r, "/")] = string(b)
				}
			}
		}
		walk(filepath.Join(root, d), d)
	}
	return out
}

func TestRandomResourceChanges(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("LOOM_CHEF_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (LOOM_CHEF_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	e := newEnv(t, false)
	e.standardResources()
	must(t, e.run("BOOTSTRAP", nil))
	version := map[string]int{"hello": 1, "base": 3}
	node := e.srv.HostPath("/var/chef")

	randomFile := func(root string) string {
		var files []string
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				files = append(files, p)
			}
			return nil
		})
		if len(files) == 0 {
			return ""
		}
		return files[rng.Intn(len(files))]
	}
	for step := 0; step < 30; step++ {
		var did []string
		changed := false
		for n := rng.Intn(3); n >= 0; n-- {
			switch rng.Intn(6) {
			case 0: // a new version of a cookbook, with a file more or less
				cb := []string{"hello", "base", "extra"}[rng.Intn(3)]
				version[cb]++
				files := map[string]string{"metadata.rb": fmt.Sprintf("name '%s'\nversion '%d.0.0'\n", cb, version[cb]),
					"recipes/default.rb": fmt.Sprintf("log 'v%d'\n", version[cb])}
				if rng.Intn(2) == 0 {
					files[fmt.Sprintf("files/default/f%d", rng.Intn(5))] = strconv.Itoa(rng.Int())
				}
				e.resource("cookbooks", cb, version[cb], files)
				did, changed = append(did, "new version of cookbook "+cb), true
			case 1: // a cookbook no longer active
				link := filepath.Join(e.work, "cookbooks", []string{"hello", "base", "extra"}[rng.Intn(3)])
				if os.Remove(link) == nil {
					did, changed = append(did, "removed "+link), true
				}
			case 2: // a data bag item
				version["users"]++
				e.resource("data_bags", "users", version["users"], map[string]string{
					fmt.Sprintf("u%d.json", rng.Intn(3)): fmt.Sprintf(`{"id": "u%d"}`, version["users"])})
				did, changed = append(did, "data bag users"), true
			case 3: // the node's copy edited by hand
				if f := randomFile(node + "/cookbooks"); f != "" {
					os.WriteFile(f, []byte("edited on the node\n"), 0o644)
					did, changed = append(did, "edited "+f), true
				}
			case 4: // a file only on the node
				dir := filepath.Join(node, "roles")
				os.MkdirAll(dir, 0o755)
				os.WriteFile(filepath.Join(dir, fmt.Sprintf("stray%d.json", rng.Intn(3))), []byte("{}"), 0o644)
				did, changed = append(did, "stray file on the node"), true
			case 5: // nothing
				did = append(did, "nothing")
			}
		}
		res := e.run("BOOTSTRAP", nil)
		if res.Status != 0 {
			t.Fatalf("step %d, seed %d (%v): BOOTSTRAP: %s", step, seed, did, res.Message)
		}
		shipped := strings.Contains(res.Stdout, "shipped")
		// A change may undo itself (an edit to the content already there):
		// what matters is that the trees end equal, and that a BOOTSTRAP
		// with nothing changed sends nothing.
		if !changed && shipped {
			t.Fatalf("step %d, seed %d (%v): BOOTSTRAP shipped with nothing changed: %s", step, seed, did, res.Stdout)
		}
		local, remote := tree(t, e.work), tree(t, node)
		if len(local) != len(remote) {
			t.Fatalf("step %d, seed %d (%v): the node has %d files, the work dir %d", step, seed, did, len(remote), len(local))
		}
		for p, c := range local {
			if remote[p] != c {
				t.Fatalf("step %d, seed %d (%v): %s differs on the node", step, seed, did, p)
			}
		}
	}
}
