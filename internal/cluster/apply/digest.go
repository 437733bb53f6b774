package apply

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/loomrt/loom/internal/cluster/macro"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// Resources are the files of the automator types' resource folders (the
// folders a type's definition declares in resourceTypes, such as the
// shell automator's scripts/ and archives/), which BOOTSTRAP ships to the
// nodes. A change of a file a service's action uses changes that
// service's digest (it is reconfigured); a change of any file makes the
// next job that runs actions on a node ship them again first.
type Resources struct {
	// Types maps an automator type to its files.
	Types map[string]*TypeFiles `json:"types"`
}

// TypeFiles are one automator type's resource files.
type TypeFiles struct {
	// Digest covers every file (names and contents).
	Digest string `json:"digest"`
	// Files maps "<folder>/<path>" (scripts/db.sh) to its content's
	// digest.
	Files map[string]string `json:"files"`
}

// ReadResources hashes the resource folders of each automator type,
// <workRoot>/<tenant>/automatortypes/<type>/<folder>/..., as folders
// lists them (type → folder names). A folder that does not exist holds
// no files.
func ReadResources(workRoot, tenant string, folders map[string][]string) (*Resources, error) {
	r := &Resources{Types: map[string]*TypeFiles{}}
	for typ, fl := range folders {
		tf := &TypeFiles{Files: map[string]string{}}
		base := filepath.Join(workRoot, tenant, "automatortypes", typ)
		for _, folder := range fl {
			root := filepath.Join(base, folder)
			if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
				continue
			}
			err := walkFiles(root, folder, 0, func(p, rel string) error {
				sum, err := fileDigest(p)
				if err != nil {
					return err
				}
				tf.Files[rel] = sum
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("reading the resources of automator type %s (%s): %w", typ, root, err)
			}
		}
		tf.Digest = digestLines(tf.Files)
		r.Types[typ] = tf
	}
	return r, nil
}

// walkFiles calls fn for every regular file under dir, rel being its path
// below the type's dir ("cookbooks/hello/recipes/default.rb"). Links are
// followed: a Coopr server's resource sync activates each resource by a
// link into its versioned store (cookbooks/hello -> .resources/...), and
// the automators ship what links point to (tar -h), so that is what the
// nodes get and what the digest covers.
func walkFiles(dir, rel string, depth int, fn func(p, rel string) error) error {
	if depth > 64 {
		return fmt.Errorf("%s: nested more than 64 levels (a link loop?)", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, en := range entries {
		p, r := filepath.Join(dir, en.Name()), path.Join(rel, en.Name())
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			if err := walkFiles(p, r, depth+1, fn); err != nil {
				return err
			}
		case st.Mode().IsRegular():
			if err := fn(p, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func fileDigest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// digestLines hashes a map as sorted "key=value" lines.
func digestLines(m map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(h, "%s=%s\n", k, m[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// TypeDigests maps each automator type to the digest of its files.
func (r *Resources) TypeDigests() map[string]string {
	if r == nil {
		return nil
	}
	out := map[string]string{}
	for t, tf := range r.Types {
		out[t] = tf.Digest
	}
	return out
}

// digestedActions are the service actions whose inputs a service's
// digest records: a change re-runs them (STOP and REMOVE read their
// inputs when they run; INITIALIZE runs once).
var digestedActions = []string{"install", "configure", "start"}

// actionInputs maps "service/action" to the digest of the resource files
// the action uses: the files its fields name (a string field, or a word
// of one, equal to the file's path in its folder, "folder/path", or
// ending in "/path"), plus every file of its automator type that no
// action of any service of the spec names (a library the named scripts
// source: a change to it may change what any of them does).
func actionInputs(sp *spec.Spec, r *Resources) map[string]string {
	if r == nil {
		return nil
	}
	named := map[string]map[string]bool{} // "svc/action" → files
	anyNamed := map[string]map[string]bool{}
	for name, svc := range sp.Services {
		for act, a := range svc.Actions {
			tf := r.Types[a.Type]
			if tf == nil {
				continue
			}
			files := namedFiles(a.Fields, tf)
			named[name+"/"+act] = files
			if anyNamed[a.Type] == nil {
				anyNamed[a.Type] = map[string]bool{}
			}
			for f := range files {
				anyNamed[a.Type][f] = true
			}
		}
	}
	shared := map[string]string{}
	for typ, tf := range r.Types {
		m := map[string]string{}
		for f, sum := range tf.Files {
			if !anyNamed[typ][f] {
				m[f] = sum
			}
		}
		shared[typ] = digestLines(m)
	}
	out := map[string]string{}
	for name, svc := range sp.Services {
		for act, a := range svc.Actions {
			tf := r.Types[a.Type]
			if tf == nil {
				continue
			}
			m := map[string]string{"(shared)": shared[a.Type]}
			for f := range named[name+"/"+act] {
				m[f] = tf.Files[f]
			}
			out[name+"/"+act] = digestLines(m)
		}
	}
	return out
}

// namedFiles are the files of tf that a string in fields names.
func namedFiles(fields map[string]any, tf *TypeFiles) map[string]bool {
	out := map[string]bool{}
	var words []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case string:
			for _, w := range strings.Fields(x) {
				words = append(words, strings.Trim(w, `"'`))
			}
		case map[string]any:
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(fields)
	if len(words) == 0 {
		return out
	}
	for f := range tf.Files {
		_, rel, _ := strings.Cut(f, "/")
		for _, w := range words {
			if w == rel || w == f || strings.HasSuffix(w, "/"+rel) || path.Clean(w) == rel {
				out[f] = true
				break
			}
		}
	}
	return out
}

// actionDigest is the digest of one service action's effective inputs on
// one node, but for the resource files it uses (recorded apart, since
// not every planner can read them): its automator type, the cluster
// config and its fields, both with the macros expanded for the node.
// INSTALL's leaves the cluster config out: a config change reconfigures
// and restarts, it does not reinstall (Coopr's reconfigure ran CONFIGURE,
// never INSTALL); INSTALL runs again when its own fields or the files it
// uses change.
func actionDigest(action, typ string, cluster, fields any) string {
	if action == "install" {
		cluster = nil
	}
	data, err := json.Marshal(struct {
		Type    string `json:"t"`
		Cluster any    `json:"c"`
		Fields  any    `json:"f"`
	}{typ, cluster, fields})
	if err != nil {
		// Spec values are YAML scalars, maps and lists: always encodable.
		panic(fmt.Sprintf("encoding an action's inputs: %v", err))
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// topologyNode is what the node list digest covers of a node.
type topologyNode struct {
	ID, Hostname string
	Addresses    map[string]any
}

// topologyDigest is the digest of the node list tasks see (ids,
// hostnames, addresses).
func topologyDigest(nodes []topologyNode) string {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	data, _ := json.Marshal(nodes)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// digester computes the digests a plan compares with the recorded ones,
// for a cluster laid out as nodes (the target layout: nodes that stay with
// their addresses, new nodes without).
type digester struct {
	spec   *spec.Spec
	inputs map[string]string
	macros *macro.Cluster
	topo   string
}

func newDigester(sp *spec.Spec, inputs map[string]string, nodes []*state.Node) *digester {
	mn := make([]macro.Node, 0, len(nodes))
	tn := make([]topologyNode, 0, len(nodes))
	for _, n := range nodes {
		mn = append(mn, macro.Node{ID: n.ID, Num: n.Num, Hostname: n.Hostname, IPAddresses: n.IPAddresses, Services: n.Services})
		tn = append(tn, topologyNode{n.ID, n.Hostname, n.IPAddresses})
	}
	return &digester{spec: sp, inputs: inputs, macros: macro.NewCluster(mn), topo: topologyDigest(tn)}
}

// action is the digest service svc's action act would run with on node
// id; "" when it cannot be known yet (a macro names a node without its
// address: the inputs change once it has one).
func (d *digester) action(svc, act, id string) string {
	a, ok := d.spec.Services[svc].Actions[act]
	if !ok {
		return ""
	}
	cfg, err := d.macros.ExpandValue(d.spec.Config, id)
	if err != nil {
		return ""
	}
	var fields any = map[string]any{}
	if a.Fields != nil {
		if fields, err = d.macros.ExpandValue(a.Fields, id); err != nil {
			return ""
		}
	}
	return actionDigest(act, a.Type, cfg, fields)
}
