package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxErrors caps how many problems one Load reports.
const maxErrors = 20

// Error lists every problem found in a spec, one "file:line: message" per
// line.
type Error struct {
	File     string
	Problems []Problem
}

// Problem is one mistake and the line it is on (0 when the whole file).
type Problem struct {
	Line int
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: %s", e.File, p.Line, p.Msg)
		} else {
			fmt.Fprintf(&b, "%s: %s", e.File, p.Msg)
		}
	}
	return b.String()
}

// DefaultMaxSize is the largest spec loomd reads unless told otherwise
// (--spec-max-size). A spec of a thousand node groups and services is a
// few hundred KiB; parsing costs about 15 times a spec's size in memory
// (a 64 MiB spec once took 1.09 GB), so a cap keeps a mistaken or hostile
// file from exhausting the process.
const DefaultMaxSize = 8 << 20

// SizeError is a spec larger than the cap, refused before it is read.
type SizeError struct {
	File string
	Size int64 // -1 when unknown (a stream cut at the cap)
	Max  int64
}

func (e *SizeError) Error() string {
	size := fmt.Sprintf("is %d bytes", e.Size)
	if e.Size < 0 {
		size = fmt.Sprintf("is more than %d bytes", e.Max)
	}
	return fmt.Sprintf("%s: the cluster spec %s, over the limit of %d bytes (%s); split the cluster, or raise --spec-max-size",
		e.File, size, e.Max, formatMiB(e.Max))
}

func formatMiB(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// CheckSize refuses a spec of size bytes over max (max <= 0 means
// DefaultMaxSize), before anything parses it.
func CheckSize(file string, size, max int64) error {
	if max <= 0 {
		max = DefaultMaxSize
	}
	if size > max {
		return &SizeError{File: file, Size: size, Max: max}
	}
	return nil
}

// Plugins are the plugin types a spec is checked against: every provider
// and automator type it names must be one of them.
type Plugins struct {
	Providers, Automators []string
	// Where says where they were loaded from, for messages.
	Where string
}

// Options tune Parse.
type Options struct {
	// Plugins, when set, checks the types the spec names.
	Plugins *Plugins
}

// LoadFile reads and validates the spec in path (YAML, or JSON, which is
// YAML too), refusing one over DefaultMaxSize.
func LoadFile(path string) (*Spec, error) { return LoadFileLimit(path, DefaultMaxSize) }

// LoadFileLimit is LoadFile with its own size cap (max <= 0 means
// DefaultMaxSize). A file over the cap is refused before it is read; a
// pipe or device is read up to the cap and refused past it.
func LoadFileLimit(path string, max int64) (*Spec, error) {
	if max <= 0 {
		max = DefaultMaxSize
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the cluster spec: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		if err := CheckSize(path, st.Size(), max); err != nil {
			return nil, err
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("reading the cluster spec: %w", err)
	}
	if int64(len(data)) > max {
		return nil, &SizeError{File: path, Size: -1, Max: max}
	}
	return Parse(path, data)
}

// Parse validates the spec in data; file names it in messages.
func Parse(file string, data []byte) (*Spec, error) { return ParseWith(file, data, Options{}) }

// ParseWith validates the spec in data, and checks it against the
// plugins when o names them. The phases: decode the file (every shape
// error), validate the cross-references (names, dependencies, layout
// constraints), check the macros (each at its own line), check the plugin
// types. Every problem found is reported at once (up to 20), each at its
// own file:line, with a suggestion when a name is near a known one.
func ParseWith(file string, data []byte, o Options) (*Spec, error) {
	d := &decoder{file: file}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, d.yamlErr(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	s := &Spec{File: file, Source: string(data), DNSSuffix: "local", Services: map[string]*Service{}, Config: map[string]any{}, Size: -1}
	d.spec(root, s)
	switch {
	case s.NeedsSolve() && len(d.problems) == 0:
		d.validateTemplateSpec(s)
	case !s.NeedsSolve() && root.Kind == yaml.MappingNode:
		d.validate(s)
		d.checkMacros(s)
		if o.Plugins != nil {
			d.checkPlugins(s, o.Plugins)
		}
	}
	if len(d.problems) > 0 {
		sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
		return nil, &Error{File: file, Problems: d.problems}
	}
	return s, nil
}

// yamlErr turns yaml.v3's "yaml: line N: msg" into file:line form.
func (d *decoder) yamlErr(err error) error {
	msg := err.Error()
	if errors.Is(err, io.EOF) {
		return &Error{File: d.file, Problems: []Problem{{Msg: "the file is empty; see docs/clusters.md for the spec format"}}}
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	line := 0
	if strings.HasPrefix(msg, "line ") {
		rest := msg[len("line "):]
		if i := strings.Index(rest, ":"); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &Error{File: d.file, Problems: []Problem{{Line: line, Msg: "not valid YAML or JSON: " + msg}}}
}

type decoder struct {
	file     string
	problems []Problem
}

func (d *decoder) errf(n *yaml.Node, format string, args ...any) {
	if len(d.problems) >= maxErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.problems = append(d.problems, Problem{Line: line, Msg: fmt.Sprintf(format, args...)})
}

// fields walks a mapping, calling the handler of each known key and
// reporting unknown ones with the list of known keys.
func (d *decoder) fields(n *yaml.Node, what string, handlers map[string]func(k, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		d.errf(n, "%s must be a mapping (key: value lines or a JSON object), not %s", what, kindName(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		h, ok := handlers[k.Value]
		if !ok {
			known := sortedHandlerKeys(handlers)
			d.errf(k, "unknown key %q in %s%s (known keys: %s)", k.Value, what, suggest(k.Value, known), strings.Join(known, ", "))
			continue
		}
		if seen[k.Value] {
			d.errf(k, "key %q appears twice in %s", k.Value, what)
			continue
		}
		seen[k.Value] = true
		h(k, v)
	}
}

func sortedHandlerKeys(h map[string]func(k, v *yaml.Node)) []string {
	out := make([]string, 0, len(h))
	for k := range h {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "something else"
}

func (d *decoder) str(n *yaml.Node, what string, dst *string) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.errf(n, "%s must be a string, not %s", what, kindName(n))
		return
	}
	*dst = n.Value
}

func (d *decoder) integer(n *yaml.Node, what string, dst *int) {
	if n.Kind != yaml.ScalarNode {
		d.errf(n, "%s must be a whole number, not %s", what, kindName(n))
		return
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil || v < 0 {
		d.errf(n, "%s must be a whole number ≥ 0, not %q", what, n.Value)
		return
	}
	*dst = v
}

func (d *decoder) strList(n *yaml.Node, what string) []string {
	out, _ := d.strListLines(n, what)
	return out
}

// strListLines is strList with the line of each entry.
func (d *decoder) strListLines(n *yaml.Node, what string) ([]string, []int) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(n, "%s must be a list of names such as [a, b], not %s", what, kindName(n))
		return nil, nil
	}
	out := make([]string, 0, len(n.Content))
	lines := make([]int, 0, len(n.Content))
	for _, c := range n.Content {
		var s string
		d.str(c, what+" entries", &s)
		if s != "" {
			out = append(out, s)
			lines = append(lines, c.Line)
		}
	}
	return out, lines
}

// object decodes a free-form mapping (fields, config) into JSON-ready Go
// values.
func (d *decoder) object(n *yaml.Node, what string) map[string]any {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return map[string]any{}
	}
	if n.Kind != yaml.MappingNode {
		d.errf(n, "%s must be a mapping, not %s", what, kindName(n))
		return map[string]any{}
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		d.errf(n, "%s: %v", what, err)
		return map[string]any{}
	}
	if m == nil {
		m = map[string]any{}
	}
	return m
}

func (d *decoder) spec(n *yaml.Node, s *Spec) {
	d.fields(n, "the cluster spec", map[string]func(k, v *yaml.Node){
		"name":        func(k, v *yaml.Node) { d.str(v, "name", &s.Name); s.nameLine = v.Line },
		"description": func(k, v *yaml.Node) { d.str(v, "description", &s.Description) },
		"dnsSuffix":   func(k, v *yaml.Node) { d.dnsSuffix(v, s) },
		"dns_suffix":  func(k, v *yaml.Node) { d.dnsSuffix(v, s) },
		"provider":    func(k, v *yaml.Node) { d.provider(k, v, &s.Provider) },
		"config":      func(k, v *yaml.Node) { s.Config = d.object(v, "config"); s.configLine = k.Line; s.config = v },
		"nodegroups":  func(k, v *yaml.Node) { d.nodeGroups(v, s) },
		"services":    func(k, v *yaml.Node) { d.services(v, s) },
		"constraints": func(k, v *yaml.Node) { d.constraints(v, &s.Constraints) },
		"template": func(k, v *yaml.Node) {
			if v.Kind == yaml.ScalarNode {
				d.str(v, "template", &s.TemplateName)
				return
			}
			s.Template = d.template(v, "template")
			d.applyTemplate(s, s.Template, v)
		},
		"size":          func(k, v *yaml.Node) { d.integer(v, "size", &s.Size) },
		"hardwaretype":  func(k, v *yaml.Node) { d.str(v, "hardwaretype", &s.HardwareType) },
		"imagetype":     func(k, v *yaml.Node) { d.str(v, "imagetype", &s.ImageType) },
		"hardwaretypes": func(k, v *yaml.Node) { s.HardwareTypes = d.typeEntities(v, "hardware type") },
		"imagetypes":    func(k, v *yaml.Node) { s.ImageTypes = d.typeEntities(v, "image type") },
		"catalog":       func(k, v *yaml.Node) { d.str(v, "catalog", &s.Catalog) },
	})
	if s.Name == "" && n.Kind == yaml.MappingNode {
		d.errf(n, "the spec needs a \"name\" (the cluster's name, a DNS label such as web or prod-db)")
	}
	if s.Provider.Type == "" && n.Kind == yaml.MappingNode && len(d.problems) == 0 && !s.NeedsSolve() {
		d.errf(n, "the spec needs a \"provider\" with a \"type\" (a provider plugin type such as static or digitalocean)")
	}
}

func (d *decoder) dnsSuffix(v *yaml.Node, s *Spec) {
	s.dnsSet = true
	var x string
	d.str(v, "dnsSuffix", &x)
	x = strings.TrimPrefix(x, ".")
	if x == "" {
		return
	}
	if !validDNSSuffix(x) {
		d.errf(v, "dnsSuffix %q is not a valid DNS suffix (labels of letters, digits and '-', at most 191 characters)", x)
		return
	}
	s.DNSSuffix = x
}

func (d *decoder) provider(key, n *yaml.Node, p *Provider) {
	p.Line = key.Line
	d.fields(n, "provider", map[string]func(k, v *yaml.Node){
		"name":         func(k, v *yaml.Node) { d.str(v, "provider.name", &p.Name) },
		"type":         func(k, v *yaml.Node) { d.str(v, "provider.type", &p.Type); p.typeLine = v.Line },
		"providertype": func(k, v *yaml.Node) { d.str(v, "provider.providertype", &p.Type); p.typeLine = v.Line },
		"addresstypes": func(k, v *yaml.Node) { p.AddressTypes = d.strList(v, "provider.addresstypes") },
		"description":  func(k, v *yaml.Node) {},
		"fields":       func(k, v *yaml.Node) { p.Fields = d.object(v, "provider.fields") },
		"provisioner":  func(k, v *yaml.Node) { p.Fields = d.object(v, "provider.provisioner") },
	})
	if n.Kind == yaml.MappingNode && p.Type == "" {
		d.errf(key, "provider needs a \"type\": the provider plugin type (for example static or digitalocean; 'loomd plugins' lists them)")
	}
	if p.Name == "" {
		p.Name = p.Type
	}
	if p.Fields == nil {
		p.Fields = map[string]any{}
	}
}

func (d *decoder) nodeGroups(n *yaml.Node, s *Spec) {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, "nodegroups must be a list of groups (- name: ..., count: ...), not %s", kindName(n))
		return
	}
	for i, c := range n.Content {
		g := &NodeGroup{Line: c.Line, SSHUser: "root", Count: -1}
		what := fmt.Sprintf("nodegroups[%d]", i)
		d.fields(c, what, map[string]func(k, v *yaml.Node){
			"name":         func(k, v *yaml.Node) { d.str(v, what+".name", &g.Name) },
			"count":        func(k, v *yaml.Node) { d.integer(v, what+".count", &g.Count) },
			"flavor":       func(k, v *yaml.Node) { d.str(v, what+".flavor", &g.Flavor) },
			"image":        func(k, v *yaml.Node) { d.str(v, what+".image", &g.Image) },
			"hardwaretype": func(k, v *yaml.Node) { d.str(v, what+".hardwaretype", &g.HardwareType) },
			"imagetype":    func(k, v *yaml.Node) { d.str(v, what+".imagetype", &g.ImageType) },
			"sshuser":      func(k, v *yaml.Node) { d.str(v, what+".sshuser", &g.SSHUser) },
			"num":          func(k, v *yaml.Node) { d.integer(v, what+".num", &g.Num) },
			"services": func(k, v *yaml.Node) {
				var lines []int
				g.Services, lines = d.strListLines(v, what+".services")
				g.servicesLine = v.Line
				g.serviceLines = map[string]int{}
				for i, name := range g.Services {
					g.serviceLines[name] = lines[i]
				}
			},
		})
		if c.Kind != yaml.MappingNode {
			continue
		}
		if g.Name == "" {
			d.errf(c, "%s needs a \"name\" (a DNS label such as web or db)", what)
		}
		if g.Count < 0 && g.Num > 0 {
			g.Count = 1
		}
		if g.Count < 0 {
			d.errf(c, "node group %q needs a \"count\" (0 or more nodes)", g.Name)
			g.Count = 0
		}
		if g.Num > 0 && (g.Count != 1 || g.Num < 1000) {
			d.errf(c, "node group %q has num %d: a group with a num is one node (count 1) with that nodenum (1000 or more)", g.Name, g.Num)
		}
		if g.servicesLine == 0 {
			g.servicesLine = c.Line
		}
		s.NodeGroups = append(s.NodeGroups, g)
	}
}

// services reads the services mapping (name: definition), or a list of
// Coopr service JSON objects (each with its own "name").
func (d *decoder) services(n *yaml.Node, s *Spec) {
	add := func(svc *Service, at *yaml.Node) {
		if svc.Name == "" {
			d.errf(at, "a service needs a name")
			return
		}
		if prev, dup := s.Services[svc.Name]; dup {
			d.errf(at, "service %q is defined twice (first on line %d)", svc.Name, prev.Line)
			return
		}
		s.Services[svc.Name] = svc
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			svc := d.service(v, k.Value)
			svc.Line = k.Line
			add(svc, k)
		}
	case yaml.SequenceNode:
		if len(n.Content) > 0 && n.Content[0].Kind == yaml.ScalarNode {
			// Coopr's request form: the names of the services to place.
			s.ServiceNames = d.strList(n, "services")
			return
		}
		for _, v := range n.Content {
			svc := d.service(v, "")
			svc.Line = v.Line
			add(svc, v)
		}
	default:
		d.errf(n, "services must be a mapping of service name to definition, not %s", kindName(n))
	}
}

func (d *decoder) service(n *yaml.Node, name string) *Service {
	svc := &Service{Name: name, Actions: map[string]Action{}}
	what := fmt.Sprintf("service %q", name)
	deps := func(dst *Deps, phase string) func(k, v *yaml.Node) {
		return func(k, v *yaml.Node) {
			d.fields(v, what+" "+phase, map[string]func(k, v *yaml.Node){
				"requires": func(k, v *yaml.Node) { dst.Requires, dst.reqLines = d.strListLines(v, what+" "+phase+".requires") },
				"uses":     func(k, v *yaml.Node) { dst.Uses, dst.useLines = d.strListLines(v, what+" "+phase+".uses") },
			})
		}
	}
	actions := func(k, v *yaml.Node) { d.actions(v, what, svc) }
	depKeys := map[string]func(k, v *yaml.Node){
		"provides":  func(k, v *yaml.Node) { svc.Provides, svc.provideLines = d.strListLines(v, what+" provides") },
		"conflicts": func(k, v *yaml.Node) { svc.Conflicts, svc.conflictLines = d.strListLines(v, what+" conflicts") },
		"install":   deps(&svc.Install, "install"),
		"runtime":   deps(&svc.Runtime, "runtime"),
	}
	keys := map[string]func(k, v *yaml.Node){
		"name": func(k, v *yaml.Node) {
			var x string
			d.str(v, what+" name", &x)
			if name != "" && x != name {
				d.errf(v, "service %q has name %q: remove the name or make it match", name, x)
			}
			svc.Name = x
		},
		"description": func(k, v *yaml.Node) { d.str(v, what+" description", &svc.Description) },
		"actions":     actions,
		// Coopr's service JSON: dependencies{...} and provisioner{actions}.
		"dependencies": func(k, v *yaml.Node) { d.fields(v, what+" dependencies", depKeys) },
		"provisioner": func(k, v *yaml.Node) {
			d.fields(v, what+" provisioner", map[string]func(k, v *yaml.Node){"actions": actions})
		},
		"label":   func(k, v *yaml.Node) {},
		"icon":    func(k, v *yaml.Node) {},
		"version": func(k, v *yaml.Node) {},
		"links":   func(k, v *yaml.Node) {},
	}
	for k, h := range depKeys {
		keys[k] = h
	}
	d.fields(n, what, keys)
	return svc
}

func (d *decoder) actions(n *yaml.Node, what string, svc *Service) {
	handlers := map[string]func(k, v *yaml.Node){}
	for _, a := range ServiceActions {
		a := a
		handlers[a] = func(k, v *yaml.Node) {
			act := Action{Fields: map[string]any{}, typeLine: v.Line}
			aw := what + " action " + a
			d.fields(v, aw, map[string]func(k, v *yaml.Node){
				"type":   func(k, v *yaml.Node) { d.str(v, aw+".type", &act.Type); act.typeLine = v.Line },
				"fields": func(k, v *yaml.Node) { act.Fields = d.object(v, aw+".fields"); act.fields = v },
			})
			if v.Kind == yaml.MappingNode && act.Type == "" {
				d.errf(v, "%s needs a \"type\": the automator plugin type that runs it (for example shell)", aw)
			}
			svc.Actions[a] = act
		}
	}
	d.fields(n, what+" actions", handlers)
}

func (d *decoder) constraints(n *yaml.Node, c *Constraints) {
	c.Line = n.Line
	groups := func(dst *[][]string, what string) func(k, v *yaml.Node) {
		return func(k, v *yaml.Node) { *dst = append(*dst, d.groups(v, "constraints."+what)...) }
	}
	d.fields(n, "constraints", map[string]func(k, v *yaml.Node){
		"mustcoexist": groups(&c.MustCoexist, "mustcoexist"),
		"cantcoexist": groups(&c.CantCoexist, "cantcoexist"),
		"services": func(k, v *yaml.Node) {
			if v.Kind != yaml.MappingNode {
				d.errf(v, "constraints.services must map a service to {min, max}")
				return
			}
			c.Quantities = map[string]Quantity{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				name, body := v.Content[i], v.Content[i+1]
				var q Quantity
				what := "constraints.services." + name.Value
				d.fields(body, what, map[string]func(k, v *yaml.Node){
					"min": func(k, v *yaml.Node) { d.integer(v, what+".min", &q.Min) },
					"max": func(k, v *yaml.Node) { d.integer(v, what+".max", &q.Max) },
				})
				if q.Max > 0 && q.Max < q.Min {
					d.errf(body, "%s: max %d is below min %d", what, q.Max, q.Min)
				}
				c.Quantities[name.Value] = q
			}
		},
	})
}

// groups reads a list of lists of service names.
func (d *decoder) groups(n *yaml.Node, what string) [][]string {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, "%s must be a list of lists of services, such as [[a, b]]", what)
		return nil
	}
	var out [][]string
	for _, g := range n.Content {
		out = append(out, d.strList(g, what+" groups"))
	}
	return out
}
