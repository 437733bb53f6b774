package provider

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/loomrt/loom/adapters/kloud/mirror/koding/kites/kloud/stack"
)

var durationType = reflect.TypeOf(time.Duration(0))

// Describe describes the exported fields of the struct v points to, for
// credential.describe (describe.go): the name from the first of its bson,
// hcl and json tags, the type from its Go type (numbers: integer, string,
// []byte: file, map: object, time.Duration: duration, a stack.Enumer
// value: enum), the label and the secret and readOnly flags from its
// kloud:"Label,secret,readOnly" tag. A field of any other type is an
// error. A nil v describes nothing; a map (the default schema's
// credential) has no fields to describe.
func Describe(v interface{}) ([]stack.Value, error) {
	if v == nil {
		return nil, nil
	}
	typ := reflect.TypeOf(v)
	val := reflect.ValueOf(v)
	if typ.Kind() == reflect.Ptr {
		typ, val = typ.Elem(), val.Elem()
	}
	if typ.Kind() != reflect.Struct {
		return nil, nil
	}
	var desc []stack.Value
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.PkgPath != "" && !f.Anonymous {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Ptr {
			ft = ft.Elem()
		}
		d := stack.Value{Name: f.Name, Label: title(f.Name)}
		switch ft.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
			reflect.Float32, reflect.Float64:
			d.Type = "integer"
		case reflect.Slice:
			if ft.Elem().Kind() == reflect.Uint8 {
				d.Type = "file"
			}
		case reflect.String:
			d.Type = "string"
		case reflect.Map:
			d.Type = "object"
		}
		if ft == durationType {
			d.Type = "duration"
		}
		if e, ok := val.Field(i).Interface().(stack.Enumer); ok {
			d.Type = "enum"
			d.Values = e.Enums()
		}
		if d.Type == "" {
			return nil, fmt.Errorf("unsupported type of %q field: %s", f.Name, f.Type)
		}
		for _, tag := range []string{"bson", "hcl", "json"} {
			name, _, _ := strings.Cut(f.Tag.Get(tag), ",")
			if name != "" {
				d.Name = name
				break
			}
		}
		opts := strings.Split(f.Tag.Get("kloud"), ",")
		if opts[0] != "" {
			d.Label = opts[0]
		}
		for _, o := range opts[1:] {
			switch o {
			case "secret":
				d.Secret = true
			case "readOnly":
				d.ReadOnly = true
			}
		}
		desc = append(desc, d)
	}
	return desc, nil
}

// title turns a field name into a label: underscores become spaces,
// words are capitalised, and camel-case humps are split ("AccessKey" is
// "Access Key").
func title(s string) string {
	s = strings.ReplaceAll(s, "_", " ")
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if i == 0 || unicode.IsSpace(rs[i-1]) {
			r = unicode.ToUpper(r)
		} else if unicode.IsUpper(r) && !unicode.IsSpace(rs[i-1]) && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
			b.WriteRune(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}
