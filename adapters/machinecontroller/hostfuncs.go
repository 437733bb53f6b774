package machinecontroller

import (
	"context"
	"fmt"
	"sort"
	"strings"

	cloudprovidertypes "k8c.io/machine-controller/pkg/cloudprovider/types"
	clusterv1alpha1 "k8c.io/machine-controller/sdk/apis/cluster/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlruntimeclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/loomrt/loom/runtime"
)

// hostFuncs is what the controller's ProviderData offers the hooks of Get,
// Create and Cleanup, as self.host functions:
//
//   - update_machine{annotations = {k = "v" or false}, labels = {...},
//     finalizers = {add = {...}, remove = {...}}}: the MachineUpdater
//     (re-read, modify, update, retried on conflict), for the Machine being
//     reconciled only. false removes a key.
//   - with host.kubernetes "read" or "read_write": k8s_get{api_version,
//     kind, namespace, name} (the object, nil when it does not exist) and
//     k8s_list{api_version, kind, namespace, labels} (the items), through
//     the controller's client and its RBAC;
//   - with "read_write" also k8s_delete{api_version, kind, namespace, name}
//     (true when deleted, false when it did not exist).
//
// A bad argument is a terminal error (a plugin bug); an API error is a
// plain one, which the controller retries.
func (p *Provider) hostFuncs(data *cloudprovidertypes.ProviderData, machine *clusterv1alpha1.Machine) map[string]runtime.HostFunc {
	funcs := map[string]runtime.HostFunc{}
	if data.Update != nil && machine != nil {
		funcs["update_machine"] = func(_ context.Context, arg any) (any, error) {
			mod, err := machineModifier(arg)
			if err != nil {
				return nil, err
			}
			if err := data.Update(machine, mod); err != nil {
				return nil, fmt.Errorf("updating machine %s: %w", machineID(machine), err)
			}
			return nil, nil
		}
	}
	access, _ := p.settings()["kubernetes"].(string)
	if data.Client == nil || (access != "read" && access != "read_write") {
		return funcs
	}
	c := data.Client
	funcs["k8s_get"] = func(ctx context.Context, arg any) (any, error) {
		ref, err := objectRef(arg, true)
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ref.gvk)
		if err := c.Get(ctx, ctrlruntimeclient.ObjectKey{Namespace: ref.namespace, Name: ref.name}, u); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("getting %s: %w", ref, err)
		}
		return u.Object, nil
	}
	funcs["k8s_list"] = func(ctx context.Context, arg any) (any, error) {
		ref, err := objectRef(arg, false)
		if err != nil {
			return nil, err
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(ref.gvk.GroupVersion().WithKind(ref.gvk.Kind + "List"))
		opts := []ctrlruntimeclient.ListOption{}
		if ref.namespace != "" {
			opts = append(opts, ctrlruntimeclient.InNamespace(ref.namespace))
		}
		if len(ref.labels) > 0 {
			opts = append(opts, ctrlruntimeclient.MatchingLabelsSelector{Selector: labels.SelectorFromSet(ref.labels)})
		}
		if err := c.List(ctx, list, opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", ref, err)
		}
		items := make([]any, 0, len(list.Items))
		for _, it := range list.Items {
			items = append(items, it.Object)
		}
		return items, nil
	}
	if access == "read_write" {
		funcs["k8s_delete"] = func(ctx context.Context, arg any) (any, error) {
			ref, err := objectRef(arg, true)
			if err != nil {
				return nil, err
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(ref.gvk)
			u.SetNamespace(ref.namespace)
			u.SetName(ref.name)
			if err := c.Delete(ctx, u); err != nil {
				if apierrors.IsNotFound(err) {
					return false, nil
				}
				return nil, fmt.Errorf("deleting %s: %w", ref, err)
			}
			return true, nil
		}
	}
	return funcs
}

// badArg is a host function's argument the plugin got wrong.
func badArg(format string, args ...any) error {
	return &runtime.CallError{Class: runtime.ClassTerminal, Reason: "InvalidConfiguration", Message: fmt.Sprintf(format, args...)}
}

// machineModifier reads update_machine's argument.
func machineModifier(arg any) (cloudprovidertypes.MachineModifier, error) {
	m, ok := arg.(map[string]any)
	if !ok {
		return nil, badArg("want a table {annotations, labels, finalizers}, got %T", arg)
	}
	for k := range m {
		if k != "annotations" && k != "labels" && k != "finalizers" {
			return nil, badArg("unknown key %q (want annotations, labels, finalizers)", k)
		}
	}
	annotations, err := stringPatch(m["annotations"], "annotations")
	if err != nil {
		return nil, err
	}
	lbls, err := stringPatch(m["labels"], "labels")
	if err != nil {
		return nil, err
	}
	var add, remove []string
	if f, present := m["finalizers"]; present {
		fm, ok := f.(map[string]any)
		if !ok {
			return nil, badArg("finalizers: want {add = {...}, remove = {...}}, got %T", f)
		}
		for k, v := range fm {
			list, err := stringList(v, "finalizers."+k)
			if err != nil {
				return nil, err
			}
			switch k {
			case "add":
				add = list
			case "remove":
				remove = list
			default:
				return nil, badArg("finalizers: unknown key %q (want add, remove)", k)
			}
		}
	}
	return func(mc *clusterv1alpha1.Machine) {
		mc.Annotations = applyPatch(mc.Annotations, annotations)
		mc.Labels = applyPatch(mc.Labels, lbls)
		for _, f := range add {
			if !contains(mc.Finalizers, f) {
				mc.Finalizers = append(mc.Finalizers, f)
			}
		}
		if len(remove) > 0 {
			kept := mc.Finalizers[:0]
			for _, f := range mc.Finalizers {
				if !contains(remove, f) {
					kept = append(kept, f)
				}
			}
			mc.Finalizers = kept
		}
	}, nil
}

// stringPatch reads {k = "v" or false}: nil values mean "remove".
func stringPatch(v any, what string) (map[string]*string, error) {
	if v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, badArg("%s: want a table of strings, got %T", what, v)
	}
	out := make(map[string]*string, len(m))
	for k, e := range m {
		switch x := e.(type) {
		case string:
			out[k] = &x
		case bool:
			if x {
				return nil, badArg("%s.%s: want a string, or false to remove it", what, k)
			}
			out[k] = nil
		default:
			return nil, badArg("%s.%s: want a string, or false to remove it, got %T", what, k, e)
		}
	}
	return out, nil
}

func applyPatch(m map[string]string, patch map[string]*string) map[string]string {
	for k, v := range patch {
		if v == nil {
			delete(m, k)
			continue
		}
		if m == nil {
			m = map[string]string{}
		}
		m[k] = *v
	}
	return m
}

func stringList(v any, what string) ([]string, error) {
	list, ok := v.([]any)
	if !ok {
		if m, isMap := v.(map[string]any); isMap && len(m) == 0 {
			return nil, nil // an empty Lua table
		}
		return nil, badArg("%s: want a list of strings, got %T", what, v)
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, badArg("%s[%d]: want a string, got %T", what, i+1, e)
		}
		out = append(out, s)
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// ref is the object a k8s_* function names.
type ref struct {
	gvk             schema.GroupVersionKind
	namespace, name string
	labels          map[string]string
}

func (r ref) String() string {
	s := r.gvk.Kind
	if r.namespace != "" {
		s += " " + r.namespace + "/"
	} else {
		s += " "
	}
	if r.name != "" {
		return s + r.name
	}
	return strings.TrimSpace(s)
}

// objectRef reads {api_version, kind, namespace, name, labels}.
func objectRef(arg any, named bool) (ref, error) {
	m, ok := arg.(map[string]any)
	if !ok {
		return ref{}, badArg("want a table {api_version, kind, namespace, name}, got %T", arg)
	}
	str := func(k string) string { s, _ := m[k].(string); return s }
	known := []string{"api_version", "kind", "namespace", "name"}
	if !named {
		known = []string{"api_version", "kind", "namespace", "labels"}
	}
	for k := range m {
		if !contains(known, k) {
			return ref{}, badArg("unknown key %q (want %s)", k, strings.Join(known, ", "))
		}
	}
	gv, err := schema.ParseGroupVersion(str("api_version"))
	if err != nil || str("api_version") == "" || str("kind") == "" {
		return ref{}, badArg("want api_version (\"v1\", \"apps/v1\" ...) and kind (\"Secret\" ...), got %q and %q", str("api_version"), str("kind"))
	}
	r := ref{gvk: gv.WithKind(str("kind")), namespace: str("namespace"), name: str("name")}
	if named && r.name == "" {
		return ref{}, badArg("%s: want a name", r.gvk.Kind)
	}
	if l, present := m["labels"]; present {
		p, err := stringPatch(l, "labels")
		if err != nil {
			return ref{}, err
		}
		r.labels = map[string]string{}
		keys := make([]string, 0, len(p))
		for k := range p {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p[k] == nil {
				return ref{}, badArg("labels.%s: want a string", k)
			}
			r.labels[k] = *p[k]
		}
	}
	return r, nil
}
