package apply

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/loomrt/loom/internal/cluster/macro"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/internal/cluster/state"
)

// taskBuilder builds the Coopr task JSON of a run (reference/coopr-server.md
// §5.4): the node's properties, the provider, the service action, the
// cluster config under "cluster", every node's properties under "nodes",
// and the node's accumulated results at the top level, written last so
// they override same-named keys, as in Coopr.
type taskBuilder struct {
	spec    *spec.Spec
	cluster *state.Cluster
	jobID   string
	// inputs are the job's resource digests per "service/action" (part of
	// a service's digest).
	inputs map[string]string
	// confirming are the nodes whose CONFIRM this step has yet to run:
	// macros wait for their addresses. Other nodes without an address (a
	// CREATE that failed) are left out of the macros and config.nodes: no
	// task would ever get their address.
	confirming map[string]bool
	// topo caches the node list's digest; "" when a node changed.
	topo string
	// nodesJSON caches config.nodes, nil when a node changed; nodeJSON
	// caches each node's part of it, so a change re-encodes one node (a
	// create changes every node's addresses once: re-encoding all of them
	// each time was quadratic).
	nodesJSON json.RawMessage
	nodeJSON  map[string][]byte
	// macros indexes the nodes for Coopr macro expansion; nil when a
	// node changed.
	macros *macro.Cluster
}

// invalidate drops the cached config.nodes after node id's properties
// changed.
func (b *taskBuilder) invalidate(id string) {
	b.nodesJSON = nil
	b.macros = nil
	b.topo = ""
	delete(b.nodeJSON, id)
}

// visible reports whether tasks see node n (in config.nodes and macros):
// not deleted, and with an address or about to get one.
func (b *taskBuilder) visible(n *state.Node) bool {
	return n.State != state.NodeDeleted && (n.Address() != "" || len(n.IPAddresses) > 0 || b.confirming[n.ID])
}

// macroCluster is the cluster as macros see it: its visible nodes.
func (b *taskBuilder) macroCluster() *macro.Cluster {
	if b.macros == nil {
		nodes := make([]macro.Node, 0, len(b.cluster.Nodes))
		for _, n := range b.cluster.Nodes {
			if b.visible(n) {
				nodes = append(nodes, macro.Node{ID: n.ID, Num: n.Num, Hostname: n.Hostname, IPAddresses: n.IPAddresses, Services: n.Services})
			}
		}
		b.macros = macro.NewCluster(nodes)
	}
	return b.macros
}

// topology is the digest of the node list tasks see now.
func (b *taskBuilder) topology() string {
	if b.topo == "" {
		var nodes []topologyNode
		for _, n := range b.cluster.Nodes {
			if b.visible(n) {
				nodes = append(nodes, topologyNode{n.ID, n.Hostname, n.IPAddresses})
			}
		}
		b.topo = topologyDigest(nodes)
	}
	return b.topo
}

// expand expands the Coopr macros of v for node n: non-hardware tasks get
// the cluster config and their service action's fields expanded, as
// Coopr's did (its hardware tasks got them as written).
func (b *taskBuilder) expand(v any, n *state.Node, what string) (any, error) {
	if !macro.Has(v) {
		return v, nil
	}
	out, err := b.macroCluster().ExpandValue(v, n.ID)
	if err != nil {
		return nil, fmt.Errorf("expanding the macros of %s for node %s: %w", what, n.ID, err)
	}
	return out, nil
}

// properties are Coopr's NodeProperties of a node.
func (b *taskBuilder) properties(n *state.Node) map[string]any {
	ip := n.IPAddresses
	if ip == nil {
		ip = map[string]any{}
	}
	return map[string]any{
		"hostname": n.Hostname, "ipaddresses": ip, "nodenum": n.Num, "sshuser": n.SSHUser,
		"hardwaretype": n.HardwareType, "imagetype": n.ImageType, "flavor": n.Flavor, "image": n.Image,
		"services": nonNil(n.Services), "automators": nonNil(b.spec.Automators(n.Services)),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (b *taskBuilder) nodes() (json.RawMessage, error) {
	if b.nodesJSON != nil {
		return b.nodesJSON, nil
	}
	if b.nodeJSON == nil {
		b.nodeJSON = map[string][]byte{}
	}
	// As json.Marshal of the map would: keys sorted.
	data := []byte{'{'}
	for _, id := range sortedKeys(b.cluster.Nodes) {
		n := b.cluster.Nodes[id]
		if !b.visible(n) {
			continue
		}
		part, ok := b.nodeJSON[id]
		if !ok {
			var err error
			if part, err = json.Marshal(b.properties(n)); err != nil {
				return nil, fmt.Errorf("encoding config.nodes[%s]: %w", id, err)
			}
			b.nodeJSON[id] = part
		}
		if len(data) > 1 {
			data = append(data, ',')
		}
		key, _ := json.Marshal(id)
		data = append(data, key...)
		data = append(data, ':')
		data = append(data, part...)
	}
	b.nodesJSON = append(data, '}')
	return b.nodesJSON, nil
}

// build returns the task JSON for run name (CREATE, INSTALL...) of
// service svc ("" for node tasks) on node n, and for a service task the
// digest of its inputs (recorded on the node when it succeeds).
func (b *taskBuilder) build(id, name string, n *state.Node, svc string) ([]byte, string, error) {
	cfg := b.properties(n)
	hardware := name == "CREATE" || name == "CONFIRM" || name == "DELETE"
	cfg["cluster"] = b.spec.Config
	if !hardware {
		c, err := b.expand(b.spec.Config, n, "the cluster config")
		if err != nil {
			return nil, "", err
		}
		cfg["cluster"] = c
	}
	p := b.spec.Provider
	cfg["provider"] = map[string]any{"name": p.Name, "description": "", "providertype": p.Type, "provisioner": p.Fields}
	digest := ""
	if svc != "" {
		def := b.spec.Services[svc]
		if def == nil {
			return nil, "", fmt.Errorf("service %s is not defined in the job's spec", svc)
		}
		action := strings.ToLower(name)
		act, ok := def.Actions[action]
		if !ok {
			return nil, "", fmt.Errorf("service %s defines no %s action", svc, action)
		}
		var fields any = act.Fields
		if act.Fields == nil {
			fields = map[string]any{}
		} else if !hardware {
			var err error
			if fields, err = b.expand(act.Fields, n, "service "+svc+"'s "+action+" fields"); err != nil {
				return nil, "", err
			}
		}
		cfg["service"] = map[string]any{"name": svc, "action": map[string]any{"type": act.Type, "fields": fields}}
		digest = actionDigest(action, act.Type, cfg["cluster"], fields)
	}
	// Results last: Coopr let provider results override built-in keys.
	maps.Copy(cfg, n.Results)
	var nodes json.RawMessage
	if _, overridden := cfg["nodes"]; !overridden {
		var err error
		if nodes, err = b.nodes(); err != nil {
			return nil, "", err
		}
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("encoding task %s: %w", id, err)
	}
	// The task is assembled by hand: config.nodes is the same for every
	// task until a node changes, so it is encoded once and spliced in, not
	// re-encoded (and re-validated, as json.Marshal does a RawMessage) per
	// task.
	out := make([]byte, 0, len(cfgJSON)+len(nodes)+256)
	out = append(out, '{')
	fields := [][2]string{{"taskId", id}, {"jobId", b.jobID}, {"clusterId", b.cluster.Name}, {"taskName", name}, {"nodeId", n.ID}}
	if b.cluster.Tenant != "" {
		fields = append(fields, [2]string{"tenantId", b.cluster.Tenant})
	}
	for _, kv := range fields {
		v, _ := json.Marshal(kv[1])
		out = append(out, '"')
		out = append(out, kv[0]...)
		out = append(out, `":`...)
		out = append(out, v...)
		out = append(out, ',')
	}
	out = append(out, `"config":`...)
	if nodes == nil {
		out = append(out, cfgJSON...)
	} else {
		out = append(out, cfgJSON[:len(cfgJSON)-1]...) // without its closing brace
		out = append(out, `,"nodes":`...)
		out = append(out, nodes...)
		out = append(out, '}')
	}
	return append(out, '}'), digest, nil
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[K cmp.Ordered, V any](m map[K]V) []K { return slices.Sorted(maps.Keys(m)) }
