package catalog

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/loomrt/loom/internal/cluster/solve"
	"github.com/loomrt/loom/internal/cluster/spec"
	"github.com/loomrt/loom/runtime"
)

// Options override a template spec (the CLI's flags).
type Options struct {
	// Size, when ≥ 0, replaces the spec's size.
	Size int
	// Services, when set, replace the services to place; AddServices
	// are placed too.
	Services, AddServices []string
	// Provider names a catalog provider to use instead of the spec's.
	Provider string
	// HardwareType and ImageType force one type for every new node.
	HardwareType, ImageType string
	Budget                  solve.Budget
}

// Existing is one node the cluster has now.
type Existing struct {
	ID                      string
	Num                     int
	Services                []string
	HardwareType, ImageType string
}

// Resolution is what the solver decided, for loomd plan.
type Resolution struct {
	Template string          `json:"template"`
	Size     int             `json:"size"`
	Provider string          `json:"provider"`
	Services []string        `json:"services"`
	Solution *solve.Solution `json:"solution"`
	// Flavors and Images map the layouts' types to the provider's values.
	Flavors map[string]string `json:"flavors"`
	Images  map[string]string `json:"images"`
}

// Resolve turns a template spec into an ordinary one: it finds the
// template (inline or in the catalog), the provider, the services and
// the hardware and image types the provider can use (Coopr's providermap:
// a hardware type needs a flavor for the provider's name, an image type
// an image, with an optional sshuser), solves the layout around the
// existing nodes (their services kept), and renders the result as a spec
// with one node group per node (id <cluster>-<nodenum>), validated as
// any spec. nextNum is the first nodenum a new node may take.
func Resolve(sp *spec.Spec, cat *Catalog, existing []Existing, nextNum int, o Options) (*spec.Spec, *Resolution, error) {
	if cat == nil {
		cat = Empty()
	}
	fail := func(format string, args ...any) (*spec.Spec, *Resolution, error) {
		return nil, nil, fmt.Errorf("%s: template %s: %s", sp.File, tmplName(sp), fmt.Sprintf(format, args...))
	}
	t := sp.Template
	if t == nil {
		if sp.TemplateName == "" {
			return nil, nil, fmt.Errorf("%s: the spec names no template", sp.File)
		}
		if _, err := cat.File("clustertemplates", sp.TemplateName); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", sp.File, err)
		}
		t = cat.Templates[sp.TemplateName]
	}
	if t.Extends != "" || len(t.Includes) > 0 {
		return fail("it extends or includes other templates: Coopr resolved inheritance only through its /resolve endpoint, never at cluster create, and neither does loomd; merge the parents into the template")
	}
	size := sp.Size
	if o.Size >= 0 {
		size = o.Size
	}
	if size < 0 {
		return fail("no size: give the number of nodes (size: N, or --size N)")
	}
	if min, max := max(t.SizeMin, 1), t.SizeMax; size < min || (max > 0 && size > max) {
		bound := fmt.Sprintf("at least %d", min)
		if max > 0 {
			bound += fmt.Sprintf(" and at most %d", max)
		}
		return fail("size %d is outside its constraints.size: %s nodes", size, bound)
	}
	if size > spec.MaxNodes {
		return fail("size %d is above the limit of %d nodes per cluster", size, spec.MaxNodes)
	}

	// The provider: the spec's, else the catalog's by name.
	prov := sp.Provider
	provName := o.Provider
	if provName == "" && prov.Type == "" {
		provName = t.Defaults.Provider
	}
	if provName != "" {
		if _, err := cat.File("providers", provName); err != nil {
			return fail("its provider: %v", err)
		}
		prov = *cat.Providers[provName]
	}
	if prov.Type == "" {
		return fail("no provider: the spec has none and the template's defaults.provider is empty")
	}

	// The services to place: the request's, else the template's
	// defaults; plus every service already on the cluster.
	names := slices.Clone(t.Defaults.Services)
	if len(sp.ServiceNames) > 0 {
		names = slices.Clone(sp.ServiceNames)
	}
	if len(o.Services) > 0 {
		names = slices.Clone(o.Services)
	}
	names = append(names, o.AddServices...)
	onCluster := map[string]bool{}
	for _, n := range existing {
		for _, s := range n.Services {
			onCluster[s] = true
		}
	}
	for s := range onCluster {
		names = append(names, s)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return fail("no services to place: the template's defaults.services is empty and the spec lists none")
	}
	pool := map[string]*spec.Service{}
	for n, s := range cat.Services {
		pool[n] = s
	}
	for n, s := range sp.Services {
		pool[n] = s
	}
	if err := checkServices(t, names, onCluster, pool); err != nil {
		return fail("%v", err)
	}

	hw, err := usableTypes("hardware", "flavor", t.Compatibility.HardwareTypes, pick(o.HardwareType, sp.HardwareType, t.Defaults.HardwareType), prov.Name, cat.HardwareTypes, sp.HardwareTypes)
	if err != nil {
		return fail("%v", err)
	}
	img, err := usableTypes("image", "image", t.Compatibility.ImageTypes, pick(o.ImageType, sp.ImageType, t.Defaults.ImageType), prov.Name, cat.ImageTypes, sp.ImageTypes)
	if err != nil {
		return fail("%v", err)
	}

	c := Constraints(t)
	req := solve.Request{Constraints: c, Services: names, Size: size, Budget: o.Budget}
	for _, e := range existing {
		if !strings.HasPrefix(e.ID, sp.Name+"-") || e.ID != fmt.Sprintf("%s-%d", sp.Name, e.Num) {
			return fail("cluster %s has node %s, which a template did not lay out (its nodes are <cluster>-<nodenum>): a cluster made from node groups keeps node groups", sp.Name, e.ID)
		}
		req.Existing = append(req.Existing, solve.Node{Num: e.Num, Layout: solve.NewLayout(e.HardwareType, e.ImageType, e.Services)})
		nextNum = max(nextNum, e.Num+1)
	}
	for name := range hw {
		req.Hardware = append(req.Hardware, name)
	}
	for name := range img {
		req.Images = append(req.Images, name)
	}
	sort.Strings(req.Hardware)
	sort.Strings(req.Images)
	sol, err := solve.Solve(req)
	if err != nil {
		return fail("%v", err)
	}
	nextNum = max(nextNum, 1000)
	for i := range sol.Nodes {
		if sol.Nodes[i].Num == 0 {
			sol.Nodes[i].Num = nextNum
			nextNum++
		}
	}
	res := &Resolution{Template: t.Name, Size: size, Provider: prov.Name, Services: names, Solution: sol,
		Flavors: map[string]string{}, Images: map[string]string{}}
	for name, v := range hw {
		res.Flavors[name] = v["flavor"]
	}
	for name, v := range img {
		res.Images[name] = v["image"]
	}
	text, err := render(sp, t, prov, names, pool, sol, hw, img, size)
	if err != nil {
		return nil, nil, err
	}
	solved, err := spec.Parse(sp.File+" (as solved)", text)
	if err != nil {
		return nil, nil, fmt.Errorf("template %s: the solved cluster does not validate (fix the template or its services):\n%w", t.Name, err)
	}
	solved.File = sp.File
	return solved, res, nil
}

func pick(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func tmplName(sp *spec.Spec) string {
	if sp.Template != nil && sp.Template.Name != "" {
		return sp.Template.Name
	}
	if sp.TemplateName != "" {
		return sp.TemplateName
	}
	return "(inline)"
}

// Constraints are the template's constraints in the solver's form.
func Constraints(t *spec.Template) *solve.Constraints {
	c := &solve.Constraints{MustCoexist: t.Constraints.MustCoexist, CantCoexist: t.Constraints.CantCoexist, Services: map[string]solve.ServiceConstraint{}}
	for name, q := range t.Constraints.Quantities {
		sc := solve.ServiceConstraint{Min: q.Min, Max: q.Max}
		if sc.Max == 0 {
			sc.Max = solve.NoMax
		}
		c.Services[name] = sc
	}
	for name, ty := range t.Constraints.Types {
		sc, ok := c.Services[name]
		if !ok {
			sc = solve.ServiceConstraint{Max: solve.NoMax}
		}
		sc.HardwareTypes, sc.ImageTypes = ty.HardwareTypes, ty.ImageTypes
		c.Services[name] = sc
	}
	return c
}

// checkServices applies Coopr's checks (reference §3.1): compatibility of
// the services new to the cluster, existence, requirements, conflicts.
func checkServices(t *spec.Template, names []string, onCluster map[string]bool, pool map[string]*spec.Service) error {
	if allowed := t.Compatibility.Services; len(allowed) > 0 {
		var bad []string
		for _, n := range names {
			if !onCluster[n] && !slices.Contains(allowed, n) {
				bad = append(bad, n)
			}
		}
		if len(bad) > 0 {
			return fmt.Errorf("%s are incompatible with the cluster (the template's compatibility.services allows %s)", strings.Join(bad, ","), strings.Join(allowed, ", "))
		}
	}
	known := make([]string, 0, len(pool))
	for n := range pool {
		known = append(known, n)
	}
	sort.Strings(known)
	var errs []error
	for _, n := range names {
		if pool[n] == nil {
			errs = append(errs, fmt.Errorf("service %s does not exist (neither the spec nor the catalog defines it)%s", n, runtime.DidYouMean(n, known)))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	provided := map[string]bool{}
	for _, n := range names {
		provided[n] = true
		for _, p := range pool[n].Provides {
			provided[p] = true
		}
	}
	for _, n := range names {
		s := pool[n]
		for _, dep := range append(slices.Clone(s.Install.Requires), s.Runtime.Requires...) {
			if !provided[dep] {
				errs = append(errs, fmt.Errorf("%s requires %s, which is not on the cluster or in the list of services to add", n, dep))
			}
		}
	}
	for _, n := range names {
		for _, cf := range pool[n].Conflicts {
			if slices.Contains(names, cf) {
				errs = append(errs, fmt.Errorf("%s conflicts with %s", n, cf))
			}
		}
	}
	return errors.Join(errs...)
}

// usableTypes is Coopr's getHardwareTypeMap / getImageTypeMap: the
// required type alone, else every type; each kept when the template's
// compatibility list allows it and its providermap has key for the
// provider's name.
func usableTypes(what, key string, compat []string, required, provider string, lists ...any) (map[string]map[string]string, error) {
	all := map[string]*spec.TypeEntity{}
	for _, l := range lists {
		switch l := l.(type) {
		case map[string]*spec.TypeEntity:
			for n, t := range l {
				all[n] = t
			}
		case []*spec.TypeEntity:
			for _, t := range l {
				all[t.Name] = t
			}
		}
	}
	out := map[string]map[string]string{}
	consider := func(t *spec.TypeEntity) {
		if len(compat) > 0 && !slices.Contains(compat, t.Name) {
			return
		}
		if v := t.ProviderMap[provider]; v != nil && v[key] != "" {
			out[t.Name] = v
		}
	}
	if required != "" {
		t := all[required]
		if t == nil {
			names := make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("%s type %s does not exist%s", what, required, runtime.DidYouMean(required, names))
		}
		consider(t)
		if len(out) == 0 {
			return nil, fmt.Errorf("%s type %s cannot be used with provider %s: it needs a providermap.%s.%s and the template's compatibility.%stypes must allow it",
				what, required, provider, provider, key, what)
		}
		return out, nil
	}
	for _, t := range all {
		consider(t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no %s types are available to use with provider %s (a type needs providermap.%s.%s and to be in the template's compatibility list)",
			what, provider, provider, key)
	}
	return out, nil
}

// Solved-spec rendering: a self-contained spec with one node group per
// node, so a saved job re-parses to the same nodes without a catalog.

type outSpec struct {
	Name        string            `yaml:"name"`
	Description string            `yaml:"description,omitempty"`
	DNSSuffix   string            `yaml:"dnsSuffix"`
	Template    string            `yaml:"template"`
	Size        int               `yaml:"size"`
	Provider    outProvider       `yaml:"provider"`
	Config      map[string]any    `yaml:"config,omitempty"`
	NodeGroups  []outGroup        `yaml:"nodegroups"`
	Services    map[string]outSvc `yaml:"services"`
	Constraints *outConstraints   `yaml:"constraints,omitempty"`
}

type outProvider struct {
	Name   string         `yaml:"name"`
	Type   string         `yaml:"type"`
	Fields map[string]any `yaml:"fields,omitempty"`
}

type outGroup struct {
	Name         string   `yaml:"name"`
	Num          int      `yaml:"num"`
	Flavor       string   `yaml:"flavor"`
	Image        string   `yaml:"image"`
	SSHUser      string   `yaml:"sshuser"`
	HardwareType string   `yaml:"hardwaretype"`
	ImageType    string   `yaml:"imagetype"`
	Services     []string `yaml:"services,flow"`
}

type outDeps struct {
	Requires []string `yaml:"requires,omitempty,flow"`
	Uses     []string `yaml:"uses,omitempty,flow"`
}

type outAction struct {
	Type   string         `yaml:"type"`
	Fields map[string]any `yaml:"fields,omitempty"`
}

type outSvc struct {
	Description string               `yaml:"description,omitempty"`
	Provides    []string             `yaml:"provides,omitempty,flow"`
	Conflicts   []string             `yaml:"conflicts,omitempty,flow"`
	Install     *outDeps             `yaml:"install,omitempty"`
	Runtime     *outDeps             `yaml:"runtime,omitempty"`
	Actions     map[string]outAction `yaml:"actions,omitempty"`
}

type outQuantity struct {
	Min int `yaml:"min"`
	Max int `yaml:"max,omitempty"`
}

type outConstraints struct {
	MustCoexist [][]string             `yaml:"mustcoexist,omitempty,flow"`
	CantCoexist [][]string             `yaml:"cantcoexist,omitempty,flow"`
	Services    map[string]outQuantity `yaml:"services,omitempty"`
}

func deps(d spec.Deps) *outDeps {
	if len(d.Requires)+len(d.Uses) == 0 {
		return nil
	}
	return &outDeps{Requires: d.Requires, Uses: d.Uses}
}

func render(sp *spec.Spec, t *spec.Template, prov spec.Provider, names []string, pool map[string]*spec.Service,
	sol *solve.Solution, hw, img map[string]map[string]string, size int) ([]byte, error) {
	out := outSpec{
		Name:        sp.Name,
		Description: sp.Description,
		Template:    t.Name,
		Size:        size,
		Provider:    outProvider{Name: prov.Name, Type: prov.Type, Fields: prov.Fields},
		Config:      sp.Config,
		Services:    map[string]outSvc{},
	}
	out.DNSSuffix = sp.DNSSuffix
	if out.DNSSuffix == "local" && t.Defaults.DNSSuffix != "" {
		out.DNSSuffix = strings.TrimPrefix(t.Defaults.DNSSuffix, ".")
	}
	if len(out.Config) == 0 {
		out.Config = t.Defaults.Config
	}
	for _, n := range sol.Nodes {
		l := n.Layout
		user := img[l.ImageType]["sshuser"]
		if user == "" {
			user = "root"
		}
		g := outGroup{Name: strconv.Itoa(n.Num), Num: n.Num, Flavor: hw[l.HardwareType]["flavor"], Image: img[l.ImageType]["image"],
			SSHUser: user, HardwareType: l.HardwareType, ImageType: l.ImageType, Services: l.Services}
		out.NodeGroups = append(out.NodeGroups, g)
	}
	// Every service of the pool: dependencies, conflicts and macros may
	// name services that are not on the cluster.
	for name, s := range pool {
		o := outSvc{Description: s.Description, Provides: s.Provides, Conflicts: s.Conflicts,
			Install: deps(s.Install), Runtime: deps(s.Runtime), Actions: map[string]outAction{}}
		for a, act := range s.Actions {
			o.Actions[a] = outAction{Type: act.Type, Fields: act.Fields}
		}
		out.Services[name] = o
	}
	con := &outConstraints{MustCoexist: t.Constraints.MustCoexist, CantCoexist: t.Constraints.CantCoexist, Services: map[string]outQuantity{}}
	for name, q := range t.Constraints.Quantities {
		if slices.Contains(names, name) {
			con.Services[name] = outQuantity{Min: q.Min, Max: q.Max}
		}
	}
	out.Constraints = con
	// Constraint groups may name services no definition has; the solved
	// spec keeps only groups whose members are all defined.
	con.MustCoexist = definedGroups(con.MustCoexist, pool, true)
	con.CantCoexist = definedGroups(con.CantCoexist, pool, false)
	data, err := yaml.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("rendering the solved spec: %w", err)
	}
	head := fmt.Sprintf("# Laid out by loomd's solver from template %s (%d nodes). This is the cluster as solved;\n# edit the template spec it came from, not this.\n", t.Name, size)
	return append([]byte(head), data...), nil
}

// definedGroups keeps the constraint groups the solved spec can state:
// a must-coexist group loses its undefined members (they are on no node);
// a cant-coexist group with an undefined member can never be complete
// and is dropped.
func definedGroups(groups [][]string, pool map[string]*spec.Service, must bool) [][]string {
	var out [][]string
	for _, g := range groups {
		var keep []string
		for _, s := range g {
			if pool[s] != nil {
				keep = append(keep, s)
			}
		}
		if (must && len(keep) > 1) || (!must && len(keep) == len(g)) {
			out = append(out, keep)
		}
	}
	return out
}
