package kloud

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// luaSchema is the schema hook's result: the fields of the credential,
// the bootstrap outputs and a machine's metadata. An absent list means
// kloud's default for it.
type luaSchema struct {
	Credential *[]valueDef `json:"credential"`
	Bootstrap  *[]valueDef `json:"bootstrap"`
	Metadata   *[]valueDef `json:"metadata"`
}

// valueDef is one field (the kind's Value).
type valueDef struct {
	Name      string    `json:"name"`
	Type      string    `json:"type"`
	Label     string    `json:"label"`
	Secret    bool      `json:"secret"`
	ReadOnly  bool      `json:"read_only"`
	Values    []enumDef `json:"values"`
	Attribute string    `json:"attribute"`
	field     reflect.StructField
}

type enumDef struct {
	Title string `json:"title"`
	Value any    `json:"value"`
}

// schema holds the Go types built from the plugin's schema: structs
// made with reflect.StructOf whose fields carry the json, bson and hcl
// tags kloud decodes and flattens them by, and the kloud tag its
// credential.describe reads (label, secret, readOnly). kloud handles
// them as it handles a Go provider's Credential, Bootstrap and Metadata
// structs.
type schema struct {
	credential, bootstrap, metadata *typeDef
}

type typeDef struct {
	typ    reflect.Type
	fields []valueDef
}

// enumValue is an enum field's zero value: kloud's Describe finds the
// field's values through stack.Enumer on it. Decoding a credential
// replaces it with the stored value.
type enumValue struct{ values []kEnum }

// Enums implements stack.Enumer.
func (e enumValue) Enums() []kEnum { return e.values }

var _ kEnumer = enumValue{}

func buildSchema(s luaSchema) (*schema, error) {
	out := &schema{}
	var err error
	for _, x := range []struct {
		defs *[]valueDef
		dst  **typeDef
		what string
	}{{s.Credential, &out.credential, "credential"}, {s.Bootstrap, &out.bootstrap, "bootstrap"}, {s.Metadata, &out.metadata, "metadata"}} {
		if x.defs == nil {
			continue
		}
		if *x.dst, err = buildType(*x.defs); err != nil {
			return nil, fmt.Errorf("%s: %w", x.what, err)
		}
	}
	return out, nil
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	anyType      = reflect.TypeOf((*any)(nil)).Elem()
)

func buildType(defs []valueDef) (*typeDef, error) {
	td := &typeDef{}
	var fields []reflect.StructField
	seenName, seenField := map[string]bool{}, map[string]bool{}
	for _, d := range defs {
		if seenName[d.Name] {
			return nil, fmt.Errorf("field %q is described twice", d.Name)
		}
		seenName[d.Name] = true
		var ft reflect.Type
		switch d.Type {
		case "string":
			ft = reflect.TypeOf("")
		case "integer":
			ft = reflect.TypeOf(0)
		case "file":
			ft = reflect.TypeOf([]byte(nil))
		case "object":
			ft = reflect.TypeOf(map[string]any(nil))
		case "duration":
			ft = durationType
		case "enum":
			ft = anyType
		default:
			return nil, fmt.Errorf("field %q: unknown type %q", d.Name, d.Type)
		}
		goName := exported(d.Name)
		for i := 2; seenField[goName]; i++ {
			goName = exported(d.Name) + strconv.Itoa(i)
		}
		seenField[goName] = true
		label := d.Label
		if label == "" {
			label = titleOf(d.Name)
		}
		kloudTag := strings.ReplaceAll(label, ",", " ")
		if d.Secret {
			kloudTag += ",secret"
		}
		if d.ReadOnly {
			kloudTag += ",readOnly"
		}
		tag := fmt.Sprintf(`json:%q bson:%q hcl:%q kloud:%q`, d.Name+",omitempty", d.Name+",omitempty", d.Name, kloudTag)
		d.field = reflect.StructField{Name: goName, Type: ft, Tag: reflect.StructTag(tag)}
		fields = append(fields, d.field)
		td.fields = append(td.fields, d)
	}
	td.typ = reflect.StructOf(fields)
	return td, nil
}

// exported is name as an exported Go identifier.
func exported(name string) string {
	var b strings.Builder
	for i, r := range name {
		switch {
		case i == 0 && unicode.IsLetter(r):
			b.WriteRune(unicode.ToUpper(r))
		case i == 0:
			b.WriteString("F")
			if unicode.IsDigit(r) {
				b.WriteRune(r)
			}
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_':
			b.WriteRune(r)
		default:
			b.WriteRune('_')
		}
	}
	if b.Len() == 0 {
		return "F"
	}
	return b.String()
}

// titleOf is a label for a field name without one: "api_url" is "Api Url".
func titleOf(name string) string {
	words := strings.FieldsFunc(name, func(r rune) bool { return r == '_' || r == '-' || r == ' ' })
	for i, w := range words {
		rs := []rune(w)
		rs[0] = unicode.ToUpper(rs[0])
		words[i] = string(rs)
	}
	return strings.Join(words, " ")
}

// newValue is a pointer to a new struct of the type, its enum fields set
// to their values' descriptions.
func (td *typeDef) newValue() any {
	v := reflect.New(td.typ)
	for i, d := range td.fields {
		if d.Type == "enum" {
			vals := make([]kEnum, 0, len(d.Values))
			for _, e := range d.Values {
				vals = append(vals, kEnum{Title: e.Title, Value: e.Value})
			}
			v.Elem().Field(i).Set(reflect.ValueOf(enumValue{values: vals}))
		}
	}
	return v.Interface()
}

// fromAttributes fills a metadata value from the Terraform attributes
// apply found for a machine: each field from the attribute it names
// (default its name), converted to the field's type. Attributes that do
// not convert are left out, as kloud's providers leave them.
func (td *typeDef) fromAttributes(attrs map[string]string) any {
	v := reflect.New(td.typ)
	for i, d := range td.fields {
		attr := d.Attribute
		if attr == "" {
			attr = d.Name
		}
		s, ok := attrs[attr]
		if !ok {
			continue
		}
		f := v.Elem().Field(i)
		switch d.Type {
		case "string", "enum":
			f.Set(reflect.ValueOf(s))
		case "integer":
			if n, err := strconv.Atoi(s); err == nil {
				f.SetInt(int64(n))
			}
		case "file":
			f.SetBytes([]byte(s))
		case "duration":
			if dur, err := time.ParseDuration(s); err == nil {
				f.SetInt(int64(dur))
			}
		case "object":
			var m map[string]any
			if json.Unmarshal([]byte(s), &m) == nil {
				f.Set(reflect.ValueOf(m))
			}
		}
	}
	return v.Interface()
}

// kloudSchema is the provider's Schema: nil constructors where the
// plugin describes nothing, so kloud applies its defaults (a free-form
// credential, no bootstrap, the machine's attributes as metadata).
func (s *schema) kloudSchema() *kSchema {
	ks := &kSchema{}
	if s.credential != nil {
		ks.NewCredential = s.credential.newValue
	}
	if s.bootstrap != nil {
		ks.NewBootstrap = s.bootstrap.newValue
	}
	if s.metadata != nil {
		md := s.metadata
		ks.NewMetadata = func(m *kStackMachine) any {
			if m == nil {
				return md.newValue()
			}
			return md.fromAttributes(m.Attributes)
		}
	}
	return ks
}

// secretValues are the string values of the secret fields of v, a value
// of one of the schema's types: they become the call's secrets.
func (td *typeDef) secretValues(v any) []string {
	if td == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Ptr {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() || rv.Type() != td.typ {
		return nil
	}
	var out []string
	for i, d := range td.fields {
		if !d.Secret {
			continue
		}
		switch f := rv.Field(i); f.Kind() {
		case reflect.String:
			out = append(out, f.String())
		case reflect.Slice:
			out = append(out, string(f.Bytes()))
		}
	}
	return out
}

// toLua turns a credential, bootstrap or metadata value (one of the
// schema's structs, kloud's default maps, or nil) into the table a hook
// gets: the fields under their names, a file's bytes as a string, a
// duration as Go's text for it ("1m30s").
func toLua(v any) map[string]any {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && (rv.Kind() == reflect.Ptr || rv.Kind() == reflect.Interface) {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return nil
	}
	switch rv.Kind() {
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil
		}
		out := make(map[string]any, rv.Len())
		for _, k := range rv.MapKeys() {
			out[k.String()] = luaValue(rv.MapIndex(k))
		}
		return out
	case reflect.Struct:
		out := map[string]any{}
		for i := 0; i < rv.NumField(); i++ {
			f := rv.Type().Field(i)
			if f.PkgPath != "" {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if val := luaValue(rv.Field(i)); val != nil {
				out[name] = val
			}
		}
		return out
	}
	return nil
}

func luaValue(rv reflect.Value) any {
	for rv.IsValid() && (rv.Kind() == reflect.Ptr || rv.Kind() == reflect.Interface) {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return nil
	}
	if rv.Type() == durationType {
		return time.Duration(rv.Int()).String()
	}
	switch x := rv.Interface().(type) {
	case enumValue:
		return nil // an enum never set
	case []byte:
		return string(x)
	}
	if rv.Kind() == reflect.Struct || rv.Kind() == reflect.Map {
		return toLua(rv.Interface())
	}
	return rv.Interface()
}

// decodeJSON decodes v (a map from the runtime) into out.
func decodeJSON(v any, out any) error {
	if v == nil {
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}
