package spec

import (
	"bytes"
	"fmt"
	"sort"

	"gopkg.in/yaml.v3"
)

// Template is a Coopr cluster template (reference/coopr-server.md §1.5):
// its defaults, compatibility lists, layout and service constraints and
// size bounds, read from Coopr's JSON unchanged (or the same in YAML).
type Template struct {
	Name, Description string
	Defaults          TemplateDefaults
	// Compatibility lists are whitelists; empty allows everything.
	Compatibility Compatibility
	Constraints   Constraints
	// SizeMin and SizeMax bound the number of nodes (SizeMax 0: none).
	SizeMin, SizeMax int
	// Extends and Includes name parent and partial templates.
	Extends  string
	Includes []string
	File     string
	Line     int
}

// TemplateDefaults are a template's defaults.
type TemplateDefaults struct {
	Services                []string
	Provider                string
	HardwareType, ImageType string
	DNSSuffix               string
	Config                  map[string]any
}

// Compatibility lists the hardware types, image types and services a
// template's clusters may use.
type Compatibility struct {
	HardwareTypes, ImageTypes, Services []string
}

// ServiceTypes restricts the hardware and image types of the nodes
// carrying a service (Coopr's service constraint hardwaretypes and
// imagetypes); empty allows any.
type ServiceTypes struct {
	HardwareTypes, ImageTypes []string
}

// TypeEntity is a Coopr hardware or image type: per provider name, the
// provider's values (flavor for hardware; image and sshuser for images).
type TypeEntity struct {
	Name, Description string
	ProviderMap       map[string]map[string]string
	File              string
	Line              int
}

// parseDoc decodes one YAML or JSON document and runs fn on its root.
func parseDoc(file string, data []byte, fn func(d *decoder, root *yaml.Node)) error {
	d := &decoder{file: file}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil {
		return d.yamlErr(err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	fn(d, root)
	if len(d.problems) > 0 {
		return &Error{File: file, Problems: d.problems}
	}
	return nil
}

// ParseTemplate reads a Coopr cluster template file.
func ParseTemplate(file string, data []byte) (*Template, error) {
	var t *Template
	err := parseDoc(file, data, func(d *decoder, root *yaml.Node) { t = d.template(root, "template") })
	if err != nil {
		return nil, err
	}
	t.File = file
	return t, nil
}

// ParseService reads a Coopr service file.
func ParseService(file string, data []byte) (*Service, error) {
	var s *Service
	err := parseDoc(file, data, func(d *decoder, root *yaml.Node) {
		s = d.service(root, "")
		s.Line = root.Line
		if s.Name == "" && root.Kind == yaml.MappingNode {
			d.errf(root, "a service needs a \"name\"")
		}
	})
	return s, err
}

// ParseTypeEntity reads a Coopr hardware or image type file (what names
// it in messages: "hardware type" or "image type").
func ParseTypeEntity(file string, data []byte, what string) (*TypeEntity, error) {
	var t *TypeEntity
	err := parseDoc(file, data, func(d *decoder, root *yaml.Node) { t = d.typeEntity(root, what) })
	if err != nil {
		return nil, err
	}
	t.File = file
	return t, nil
}

// ParseProvider reads a Coopr provider file ({name, providertype,
// provisioner}).
func ParseProvider(file string, data []byte) (*Provider, error) {
	var p Provider
	err := parseDoc(file, data, func(d *decoder, root *yaml.Node) {
		d.provider(root, root, &p)
		if p.Name == "" && root.Kind == yaml.MappingNode {
			d.errf(root, "a provider needs a \"name\"")
		}
	})
	return &p, err
}

func (d *decoder) typeEntity(n *yaml.Node, what string) *TypeEntity {
	t := &TypeEntity{ProviderMap: map[string]map[string]string{}, Line: n.Line}
	ignore := func(k, v *yaml.Node) {}
	d.fields(n, what, map[string]func(k, v *yaml.Node){
		"name":        func(k, v *yaml.Node) { d.str(v, what+" name", &t.Name) },
		"description": func(k, v *yaml.Node) { d.str(v, what+" description", &t.Description) },
		"label":       ignore, "icon": ignore, "version": ignore,
		"providermap": func(k, v *yaml.Node) {
			if v.Kind != yaml.MappingNode {
				d.errf(v, "%s providermap must map a provider name to its values, not %s", what, kindName(v))
				return
			}
			for i := 0; i+1 < len(v.Content); i += 2 {
				prov, vals := v.Content[i], v.Content[i+1]
				m := map[string]string{}
				if vals.Kind != yaml.MappingNode {
					d.errf(vals, "%s providermap.%s must be a mapping such as {flavor: ...}, not %s", what, prov.Value, kindName(vals))
					continue
				}
				for j := 0; j+1 < len(vals.Content); j += 2 {
					kk, vv := vals.Content[j], vals.Content[j+1]
					if vv.Kind != yaml.ScalarNode {
						continue // Coopr's extra keys (cost, disks...) the solver ignores
					}
					m[kk.Value] = vv.Value
				}
				t.ProviderMap[prov.Value] = m
			}
		},
	})
	if t.Name == "" && n.Kind == yaml.MappingNode {
		d.errf(n, "a %s needs a \"name\"", what)
	}
	return t
}

// template reads a Coopr cluster template.
func (d *decoder) template(n *yaml.Node, what string) *Template {
	t := &Template{Line: n.Line, Defaults: TemplateDefaults{Config: map[string]any{}}}
	ignore := func(k, v *yaml.Node) {}
	named := func(dst *string, w string) func(k, v *yaml.Node) {
		return func(k, v *yaml.Node) {
			if v.Kind == yaml.MappingNode {
				d.fields(v, w, map[string]func(k, v *yaml.Node){"name": func(k, v *yaml.Node) { d.str(v, w+".name", dst) }})
				return
			}
			d.str(v, w, dst)
		}
	}
	d.fields(n, what, map[string]func(k, v *yaml.Node){
		"name": func(k, v *yaml.Node) { d.str(v, what+".name", &t.Name) }, "description": func(k, v *yaml.Node) { d.str(v, what+".description", &t.Description) },
		"label": ignore, "icon": ignore, "version": ignore, "links": ignore, "administration": ignore, "immutable": ignore,
		"extends": named(&t.Extends, what+".extends"),
		"includes": func(k, v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				d.errf(v, "%s.includes must be a list of {name: ...}", what)
				return
			}
			for _, c := range v.Content {
				var x string
				named(&x, what+".includes")(nil, c)
				t.Includes = append(t.Includes, x)
			}
		},
		"defaults": func(k, v *yaml.Node) {
			w := what + ".defaults"
			d.fields(v, w, map[string]func(k, v *yaml.Node){
				"services": func(k, v *yaml.Node) {
					// strings, or {name, config} objects
					if v.Kind != yaml.SequenceNode {
						d.errf(v, "%s.services must be a list of service names", w)
						return
					}
					for _, c := range v.Content {
						var x string
						named(&x, w+".services")(nil, c)
						if x != "" {
							t.Defaults.Services = append(t.Defaults.Services, x)
						}
					}
				},
				"provider":     func(k, v *yaml.Node) { d.str(v, w+".provider", &t.Defaults.Provider) },
				"hardwaretype": func(k, v *yaml.Node) { d.str(v, w+".hardwaretype", &t.Defaults.HardwareType) },
				"imagetype":    func(k, v *yaml.Node) { d.str(v, w+".imagetype", &t.Defaults.ImageType) },
				"dnsSuffix":    func(k, v *yaml.Node) { d.str(v, w+".dnsSuffix", &t.Defaults.DNSSuffix) },
				"config":       func(k, v *yaml.Node) { t.Defaults.Config = d.object(v, w+".config") },
			})
		},
		"compatibility": func(k, v *yaml.Node) {
			w := what + ".compatibility"
			d.fields(v, w, map[string]func(k, v *yaml.Node){
				"hardwaretypes": func(k, v *yaml.Node) { t.Compatibility.HardwareTypes = d.strList(v, w+".hardwaretypes") },
				"imagetypes":    func(k, v *yaml.Node) { t.Compatibility.ImageTypes = d.strList(v, w+".imagetypes") },
				"services":      func(k, v *yaml.Node) { t.Compatibility.Services = d.strList(v, w+".services") },
			})
		},
		"constraints": func(k, v *yaml.Node) {
			w := what + ".constraints"
			c := &t.Constraints
			c.Line = v.Line
			d.fields(v, w, map[string]func(k, v *yaml.Node){
				"size": func(k, v *yaml.Node) {
					d.fields(v, w+".size", map[string]func(k, v *yaml.Node){
						"min": func(k, v *yaml.Node) { d.integer(v, w+".size.min", &t.SizeMin) },
						"max": func(k, v *yaml.Node) { d.integer(v, w+".size.max", &t.SizeMax) },
					})
					if t.SizeMax > 0 && t.SizeMax < t.SizeMin {
						d.errf(v, "%s.size: max %d is below min %d", w, t.SizeMax, t.SizeMin)
					}
				},
				"layout": func(k, v *yaml.Node) {
					d.fields(v, w+".layout", map[string]func(k, v *yaml.Node){
						"mustcoexist": func(k, v *yaml.Node) { c.MustCoexist = append(c.MustCoexist, d.groups(v, "mustcoexist")...) },
						"cantcoexist": func(k, v *yaml.Node) { c.CantCoexist = append(c.CantCoexist, d.groups(v, "cantcoexist")...) },
					})
				},
				"services": func(k, v *yaml.Node) {
					if v.Kind != yaml.MappingNode {
						d.errf(v, "%s.services must map a service to its constraint", w)
						return
					}
					if c.Quantities == nil {
						c.Quantities = map[string]Quantity{}
					}
					if c.Types == nil {
						c.Types = map[string]ServiceTypes{}
					}
					for i := 0; i+1 < len(v.Content); i += 2 {
						name, body := v.Content[i], v.Content[i+1]
						ws := w + ".services." + name.Value
						var q Quantity
						var ty ServiceTypes
						d.fields(body, ws, map[string]func(k, v *yaml.Node){
							"hardwaretypes": func(k, v *yaml.Node) { ty.HardwareTypes = d.strList(v, ws+".hardwaretypes") },
							"imagetypes":    func(k, v *yaml.Node) { ty.ImageTypes = d.strList(v, ws+".imagetypes") },
							"ratio":         ignore,
							"quantities": func(k, v *yaml.Node) {
								d.fields(v, ws+".quantities", map[string]func(k, v *yaml.Node){
									"min": func(k, v *yaml.Node) { d.integer(v, ws+".quantities.min", &q.Min) },
									"max": func(k, v *yaml.Node) { d.integer(v, ws+".quantities.max", &q.Max) },
								})
							},
						})
						if q.Max > 0 && q.Max < q.Min {
							d.errf(body, "%s: max %d is below min %d", ws, q.Max, q.Min)
						}
						c.Quantities[name.Value] = q
						if len(ty.HardwareTypes)+len(ty.ImageTypes) > 0 {
							c.Types[name.Value] = ty
						}
					}
				},
			})
		},
	})
	return t
}

// applyTemplate gives an inline template's config (unless the spec has
// one), dnsSuffix and constraints to the spec.
func (d *decoder) applyTemplate(s *Spec, t *Template, n *yaml.Node) {
	if len(s.Config) == 0 && len(t.Defaults.Config) > 0 {
		s.Config = t.Defaults.Config
	}
	if t.Defaults.DNSSuffix != "" && !s.dnsSet {
		x := yaml.Node{Kind: yaml.ScalarNode, Value: t.Defaults.DNSSuffix, Line: n.Line}
		d.dnsSuffix(&x, s)
	}
	c := &s.Constraints
	c.Line = t.Constraints.Line
	c.MustCoexist = append(c.MustCoexist, t.Constraints.MustCoexist...)
	c.CantCoexist = append(c.CantCoexist, t.Constraints.CantCoexist...)
	for name, q := range t.Constraints.Quantities {
		if c.Quantities == nil {
			c.Quantities = map[string]Quantity{}
		}
		c.Quantities[name] = q
	}
	for name, ty := range t.Constraints.Types {
		if c.Types == nil {
			c.Types = map[string]ServiceTypes{}
		}
		c.Types[name] = ty
	}
}

// typeEntities reads a list of hardware or image type objects.
func (d *decoder) typeEntities(n *yaml.Node, what string) []*TypeEntity {
	if n.Kind != yaml.SequenceNode {
		d.errf(n, "%ss must be a list of Coopr %s objects ({name, providermap})", what, what)
		return nil
	}
	var out []*TypeEntity
	seen := map[string]int{}
	for _, c := range n.Content {
		t := d.typeEntity(c, what)
		if line, dup := seen[t.Name]; dup {
			d.errf(c, "%s %q is defined twice (first on line %d)", what, t.Name, line)
			continue
		}
		seen[t.Name] = c.Line
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// NeedsSolve reports whether the spec names a template and a size but no
// node groups: the solver decides the nodes (solve.Resolve).
func (s *Spec) NeedsSolve() bool {
	return (s.Template != nil || s.TemplateName != "") && len(s.NodeGroups) == 0
}

// errTemplate reports a template problem.
func templateName(s *Spec) string {
	if s.Template != nil && s.Template.Name != "" {
		return s.Template.Name
	}
	if s.TemplateName != "" {
		return s.TemplateName
	}
	return "(inline)"
}

var _ = fmt.Sprintf
