package rancher

import (
	"fmt"
	"math"
	"sort"

	"github.com/loomrt/loom/internal/rancher/driverpb"
	"github.com/loomrt/loom/runtime"
)

// The hooks' tables use the snake_case keys of docs/kinds/clusterdriver.md.
// Results reach this file already checked against the kind's shapes, so
// JSON numbers are float64 and objects hold only the contract's keys.

// optionsIn is a DriverOptions as {bool, string, int, string_slice}.
func optionsIn(o *driverpb.DriverOptions) map[string]any {
	slices := make(map[string][]string, len(o.GetStringSliceOptions()))
	for k, v := range o.GetStringSliceOptions() {
		slices[k] = append([]string{}, v.GetValue()...)
	}
	return map[string]any{
		"bool":         nonNil(o.GetBoolOptions()),
		"string":       nonNil(o.GetStringOptions()),
		"int":          nonNil(o.GetIntOptions()),
		"string_slice": slices,
	}
}

func nonNil[V any](m map[string]V) map[string]V {
	if m == nil {
		return map[string]V{}
	}
	return m
}

// clusterInfoIn is a ClusterInfo with its non-empty fields only, so a
// plugin tests `ci.endpoint` for nil as for any optional key.
func clusterInfoIn(ci *driverpb.ClusterInfo) map[string]any {
	m := map[string]any{}
	set := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	set("version", ci.GetVersion())
	set("service_account_token", ci.GetServiceAccountToken())
	set("endpoint", ci.GetEndpoint())
	set("username", ci.GetUsername())
	set("password", ci.GetPassword())
	set("root_ca_certificate", ci.GetRootCaCertificate())
	set("client_certificate", ci.GetClientCertificate())
	set("client_key", ci.GetClientKey())
	set("status", ci.GetStatus())
	set("create_error", ci.GetCreateError())
	if n := ci.GetNodeCount(); n != 0 {
		m["node_count"] = n
	}
	if md := ci.GetMetadata(); len(md) > 0 {
		m["metadata"] = md
	}
	return m
}

func infoIn(ci *driverpb.ClusterInfo) map[string]any {
	return map[string]any{"cluster_info": clusterInfoIn(ci)}
}

func etcdIn(ci *driverpb.ClusterInfo, o *driverpb.DriverOptions, name string) map[string]any {
	return map[string]any{"cluster_info": clusterInfoIn(ci), "options": optionsIn(o), "snapshot_name": name}
}

// clusterInfoOut converts a hook's cluster_info result.
func clusterInfoOut(v any) (*driverpb.ClusterInfo, error) {
	m, _ := v.(map[string]any)
	str := func(k string) string { s, _ := m[k].(string); return s }
	n, err := intField(m, "node_count")
	if err != nil {
		return nil, err
	}
	ci := &driverpb.ClusterInfo{
		Version: str("version"), ServiceAccountToken: str("service_account_token"), Endpoint: str("endpoint"),
		Username: str("username"), Password: str("password"), RootCaCertificate: str("root_ca_certificate"),
		ClientCertificate: str("client_certificate"), ClientKey: str("client_key"), NodeCount: n,
		Status: str("status"), CreateError: str("create_error"),
	}
	if md, ok := m["metadata"].(map[string]any); ok && len(md) > 0 {
		ci.Metadata = make(map[string]string, len(md))
		for k, v := range md {
			ci.Metadata[k], _ = v.(string)
		}
	}
	return ci, nil
}

// intField reads an integer (absent: 0); the shapes check integers, this
// guards the int64 range.
func intField(m map[string]any, key string) (int64, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return 0, nil
	}
	return toInt64(v, key)
}

func toInt64(v any, what string) (int64, error) {
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.Abs(n) > 1<<63-1024 {
			return 0, fmt.Errorf("%s: want an integer, got %v", what, n)
		}
		return int64(n), nil
	case int64:
		return n, nil
	case int:
		return int64(n), nil
	}
	return 0, fmt.Errorf("%s: want an integer, got %T", what, v)
}

// flagsOut converts create_options/update_options: {key = Flag}. A
// flag's default is a scalar or list matching its type; the protocol has
// one Default field per type.
func flagsOut(v any) (*driverpb.DriverFlags, error) {
	m, _ := v.(map[string]any)
	out := &driverpb.DriverFlags{Options: make(map[string]*driverpb.Flag, len(m))}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad flag named is the same every time
	for _, key := range keys {
		f, _ := m[key].(map[string]any)
		str := func(k string) string { s, _ := f[k].(string); return s }
		pw, _ := f["password"].(bool)
		flag := &driverpb.Flag{Type: str("type"), Usage: str("usage"), Value: str("value"), Password: pw}
		if d, ok := f["default"]; ok && d != nil {
			def, err := defaultOut(flag.Type, d)
			if err != nil {
				return nil, fmt.Errorf("flag %q (type %s): default: %w", key, flag.Type, err)
			}
			flag.Default = def
		}
		out.Options[key] = flag
	}
	return out, nil
}

func defaultOut(typ string, d any) (*driverpb.Default, error) {
	switch typ {
	case "string":
		if s, ok := d.(string); ok {
			return &driverpb.Default{DefaultString: s}, nil
		}
		return nil, fmt.Errorf("want a string, got %s", runtime.DescribeValue(d))
	case "bool", "boolPtr":
		if b, ok := d.(bool); ok {
			return &driverpb.Default{DefaultBool: b}, nil
		}
		return nil, fmt.Errorf("want a boolean, got %s", runtime.DescribeValue(d))
	case "int", "intPtr":
		n, err := toInt64(d, "value")
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %s", runtime.DescribeValue(d))
		}
		return &driverpb.Default{DefaultInt: n}, nil
	case "stringSlice":
		list, ok := d.([]any)
		if !ok {
			return nil, fmt.Errorf("want a list of strings, got %s", runtime.DescribeValue(d))
		}
		ss := &driverpb.StringSlice{Value: make([]string, len(list))}
		for i, e := range list {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("[%d]: want a string, got %s", i+1, runtime.DescribeValue(e))
			}
			ss.Value[i] = s
		}
		return &driverpb.Default{DefaultStringSlice: ss}, nil
	}
	return nil, fmt.Errorf("unknown flag type %q", typ)
}

// Capability bits (kontainer-engine types/capabilities.go).
var capabilityBits = []struct {
	name string
	bit  int64
}{
	{"get_version", 0}, {"set_version", 1}, {"get_cluster_size", 2}, {"set_cluster_size", 3}, {"etcd_backup", 4},
}

func capabilitiesOut(v any) *driverpb.Capabilities {
	m, _ := v.(map[string]any)
	c := &driverpb.Capabilities{Capabilities: make(map[int64]bool, len(capabilityBits))}
	for _, b := range capabilityBits {
		on, _ := m[b.name].(bool)
		c.Capabilities[b.bit] = on
	}
	return c
}

func k8sCapabilitiesOut(v any) *driverpb.K8SCapabilities {
	m, _ := v.(map[string]any)
	out := &driverpb.K8SCapabilities{}
	out.NodePoolScalingSupported, _ = m["node_pool_scaling_supported"].(bool)
	out.NodePortRange, _ = m["node_port_range"].(string)
	if lb, ok := m["l4_load_balancer"].(map[string]any); ok {
		l := &driverpb.LoadBalancerCapabilities{}
		l.Enabled, _ = lb["enabled"].(bool)
		l.Provider, _ = lb["provider"].(string)
		l.HealthCheckSupported, _ = lb["health_check_supported"].(bool)
		l.ProtocolsSupported = stringList(lb["protocols_supported"])
		out.L4LoadBalancer = l
	}
	if list, ok := m["ingress_controllers"].([]any); ok {
		for _, e := range list {
			ic, _ := e.(map[string]any)
			c := &driverpb.IngressCapabilities{}
			c.IngressProvider, _ = ic["ingress_provider"].(string)
			c.CustomDefaultBackend, _ = ic["custom_default_backend"].(bool)
			out.IngressControllers = append(out.IngressControllers, c)
		}
	}
	return out
}

func stringList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
