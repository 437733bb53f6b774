package runtime

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// ShapeType is the JSON type a Shape accepts.
type ShapeType string

// The shape types. Object has named properties; Map has arbitrary string
// keys whose values share one shape; List is a JSON array.
const (
	ShapeObject  ShapeType = "object"
	ShapeMap     ShapeType = "map"
	ShapeList    ShapeType = "list"
	ShapeString  ShapeType = "string"
	ShapeInteger ShapeType = "integer"
	ShapeNumber  ShapeType = "number"
	ShapeBoolean ShapeType = "boolean"
	ShapeAny     ShapeType = "any"
)

// Shape describes a value a hook receives or returns, as data: the host
// checks a call's input against it before any Lua runs and a hook's
// result before it leaves the runtime, and docs/kinds is written from it.
type Shape struct {
	Type ShapeType `json:"type"`
	// Name names a shape the contract names (ClusterInfo, Instance).
	Name string `json:"name,omitempty"`
	// Props are an object's known properties, in documentation order.
	Props []Prop `json:"props,omitempty"`
	// Open objects keep properties beyond Props (a Kubernetes object,
	// say); closed ones reject them, so a misspelt key is an error and
	// not a silently dropped value.
	Open bool `json:"open,omitempty"`
	// Elem is the shape of a list's items or a map's values.
	Elem *Shape `json:"elem,omitempty"`
	// Enum lists the values a string may take.
	Enum []string `json:"enum,omitempty"`
	// Nullable values may be absent (nil) where the shape is checked.
	Nullable bool `json:"nullable,omitempty"`
	// Doc says what the value means.
	Doc string `json:"doc,omitempty"`
}

// Prop is one property of an object shape.
type Prop struct {
	Name     string `json:"name"`
	Shape    *Shape `json:"shape"`
	Required bool   `json:"required,omitempty"`
}

// Constructors keep the kind tables readable.
func sString(doc string, enum ...string) *Shape {
	return &Shape{Type: ShapeString, Doc: doc, Enum: enum}
}
func sInt(doc string) *Shape     { return &Shape{Type: ShapeInteger, Doc: doc} }
func sBool(doc string) *Shape    { return &Shape{Type: ShapeBoolean, Doc: doc} }
func sAny(doc string) *Shape     { return &Shape{Type: ShapeAny, Doc: doc} }
func sList(elem *Shape) *Shape   { return &Shape{Type: ShapeList, Elem: elem} }
func sMap(elem *Shape) *Shape    { return &Shape{Type: ShapeMap, Elem: elem} }
func sObj(props ...Prop) *Shape  { return &Shape{Type: ShapeObject, Props: props} }
func sOpen(props ...Prop) *Shape { return &Shape{Type: ShapeObject, Props: props, Open: true} }
func req(name string, s *Shape) Prop {
	return Prop{Name: name, Shape: s, Required: true}
}
func opt(name string, s *Shape) Prop { return Prop{Name: name, Shape: s} }

// named returns a copy of s called name.
func (s *Shape) named(name string) *Shape {
	c := *s
	c.Name = name
	return &c
}

// withDoc returns a copy of s documented as doc.
func (s *Shape) withDoc(doc string) *Shape {
	c := *s
	c.Doc = doc
	return &c
}

// Check validates v (a value decoded from JSON or converted from Lua:
// map[string]any, []any, string, float64, bool, nil) against the shape
// and returns it normalised: an empty Lua table, which converts to an
// empty map, becomes an empty list where a list is expected and the
// other way round. path names v in errors ("result.cluster_info").
func (s *Shape) Check(v any, path string) (any, error) {
	if s == nil || s.Type == ShapeAny || (v == nil && s.Nullable) {
		return v, nil
	}
	switch s.Type {
	case ShapeString:
		str, ok := v.(string)
		if !ok {
			return nil, shapeErr(path, s, v)
		}
		if len(s.Enum) > 0 && !contains(s.Enum, str) {
			return nil, fmt.Errorf("%s: %q is not one of %s", path, str, strings.Join(s.Enum, ", "))
		}
		return str, nil
	case ShapeInteger:
		f, ok := v.(float64)
		if !ok || f != math.Trunc(f) || math.IsInf(f, 0) {
			return nil, shapeErr(path, s, v)
		}
		return f, nil
	case ShapeNumber:
		if _, ok := v.(float64); !ok {
			return nil, shapeErr(path, s, v)
		}
		return v, nil
	case ShapeBoolean:
		if _, ok := v.(bool); !ok {
			return nil, shapeErr(path, s, v)
		}
		return v, nil
	case ShapeList:
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				return []any{}, nil
			}
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				c, err := s.Elem.Check(e, fmt.Sprintf("%s[%d]", path, i+1))
				if err != nil {
					return nil, err
				}
				out[i] = c
			}
			return out, nil
		}
		return nil, shapeErr(path, s, v)
	case ShapeMap, ShapeObject:
		m, ok := v.(map[string]any)
		if !ok {
			if l, isList := v.([]any); isList && len(l) == 0 {
				m = map[string]any{}
			} else {
				return nil, shapeErr(path, s, v)
			}
		}
		if s.Type == ShapeMap {
			out := make(map[string]any, len(m))
			for k, e := range m {
				c, err := s.Elem.Check(e, path+"."+k)
				if err != nil {
					return nil, err
				}
				out[k] = c
			}
			return out, nil
		}
		return s.checkObject(m, path)
	}
	return nil, fmt.Errorf("%s: shape type %q is unknown (a bug in the kind's definition)", path, s.Type)
}

func (s *Shape) checkObject(m map[string]any, path string) (map[string]any, error) {
	out := make(map[string]any, len(m))
	known := make(map[string]bool, len(s.Props))
	for _, p := range s.Props {
		known[p.Name] = true
		e, present := m[p.Name]
		if !present || e == nil {
			if p.Required {
				return nil, fmt.Errorf("%s: missing %q (%s)", path, p.Name, p.Shape.describe())
			}
			continue
		}
		c, err := p.Shape.Check(e, path+"."+p.Name)
		if err != nil {
			return nil, err
		}
		out[p.Name] = c
	}
	var unknown []string
	for k, e := range m {
		if known[k] {
			continue
		}
		if s.Open {
			out[k] = e
			continue
		}
		unknown = append(unknown, k)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		names := make([]string, len(s.Props))
		for i, p := range s.Props {
			names[i] = p.Name
		}
		return nil, fmt.Errorf("%s: unknown key %q (known keys: %s)", path, unknown[0], strings.Join(names, ", "))
	}
	return out, nil
}

// describe is the shape in a few words, for errors and docs.
func (s *Shape) describe() string {
	if s == nil {
		return "nothing"
	}
	switch s.Type {
	case ShapeList:
		return "a list of " + plural(s.Elem.describe())
	case ShapeMap:
		return "a map of string to " + s.Elem.describe()
	case ShapeObject:
		if s.Name != "" {
			return s.Name
		}
		return "an object"
	case ShapeString:
		if len(s.Enum) > 0 {
			return "one of " + strings.Join(s.Enum, ", ")
		}
		return "a string"
	case ShapeInteger:
		return "an integer"
	case ShapeNumber:
		return "a number"
	case ShapeBoolean:
		return "a boolean"
	}
	return "any value"
}

func plural(s string) string {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
	if strings.HasPrefix(s, "one of") || strings.HasPrefix(s, "any") || strings.HasPrefix(s, "list") || strings.HasPrefix(s, "map") {
		return s
	}
	return s + "s"
}

func shapeErr(path string, s *Shape, v any) error {
	return fmt.Errorf("%s: want %s, got %s", path, s.describe(), DescribeValue(v))
}

// DescribeValue names a decoded JSON value's type, with the value when
// short ("string \"3\"", "a list of 2 items"), for errors that say what
// a plugin returned instead of what the contract wants.
func DescribeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing (nil)"
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("string %q", x)
	case float64:
		return fmt.Sprintf("number %v", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case []any:
		return fmt.Sprintf("a list of %d items", len(x))
	case map[string]any:
		return "an object (table with keys)"
	}
	return fmt.Sprintf("%T", v)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
