// Package xml is the loom.xml binding: XML documents decoded to plain Lua
// tables, within size, depth and element caps, for APIs that answer in
// XML (the EC2 Query API, IAM, STS, S3).
//
// The mapping is the one those APIs read naturally with:
//
//	<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
//	  <requestId>abc</requestId>
//	  <reservationSet><item><instancesSet><item>
//	    <instanceId>i-1</instanceId><instanceState><name>running</name></instanceState>
//	  </item></instancesSet></item></reservationSet>
//	</DescribeInstancesResponse>
//
// decodes to ({requestId = "abc", reservationSet = {item = {{instancesSet
// = {item = {{instanceId = "i-1", instanceState = {name = "running"}}}}}}}},
// "DescribeInstancesResponse"): an element holding only text is a string,
// one with child elements a table keyed by their local names, and a name
// that repeats, or that opts.lists names ("item" and "member" by default),
// a list, so a list of one is still a list.
//
// The package is named xml like the module; it imports the standard
// library's encoding/xml as stdxml.
package xml

import (
	"bytes"
	stdxml "encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/luaval"
)

// Limits of a document. The defaults fit any API answer; the maxima stop
// a hostile or broken server from using up the worker's memory.
const (
	defaultMaxBytes = 4 << 20
	maxMaxBytes     = 64 << 20
	defaultMaxDepth = 64
	maxMaxDepth     = 256
	// maxElements bounds the elements of one document, as the JSON
	// converter bounds its values.
	maxElements = 1 << 20
)

// defaultLists are the element names that are always lists: EC2's "item"
// and the "member" of IAM, STS and the other Query APIs.
var defaultLists = []string{"item", "member"}

// Binding is the loom.xml module. It holds no state.
type Binding struct{}

// New returns the xml binding.
func New() *Binding { return &Binding{} }

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	return bindings.ModuleSpec{
		Name: "xml",
		Doc: "XML decoded to plain tables, within size, depth and element caps: an element holding only text is a string, " +
			"one with child elements a table keyed by their local names (namespace prefixes dropped), and a name that repeats " +
			"or that opts.lists names (\"item\" and \"member\" by default) a list. Attributes are in _attr, text beside child " +
			"elements in _text. DTDs are not processed and entities other than XML's five and character references are errors.",
		Types: []bindings.TypeSpec{{
			Name:  "xml.DecodeOptions",
			Doc:   "xml.decode's options.",
			Exact: true,
			Fields: []bindings.FieldSpec{
				{Name: "lists", Type: "string[]", Optional: true, Doc: "element names that always decode to lists ({\"item\", \"member\"}); {} for none"},
				{Name: "max_bytes", Type: "integer", Optional: true, Doc: "the largest document, in bytes (4 MiB; at most 64 MiB)"},
				{Name: "max_depth", Type: "integer", Optional: true, Doc: "the deepest element nesting (64; at most 256)"},
			},
		}},
		Funcs: []bindings.FuncSpec{
			{Name: "decode", Params: []string{"text string", "opts? xml.DecodeOptions"}, Returns: []string{"table|string", "string"},
				Doc: "Decodes a document: returns its root element's value and the root's local name. Raises \"config\" with the line " +
					"of a syntax error, for a document over max_bytes, nesting deeper than max_depth, more than 1,048,576 elements, " +
					"or an encoding other than UTF-8."},
			{Name: "list", Params: []string{"v any"}, Returns: []string{"table"},
				Doc: "v as a list: {} for nil, v itself when decode made it a list (or json.decode an array), {v} otherwise. " +
					"For a name that may occur once or more and that opts.lists does not name."},
			{Name: "escape", Params: []string{"s string"}, Returns: []string{"string"},
				Doc: "Escapes &, <, >, \" and ' for text or an attribute value in a document the plugin builds."},
		},
	}
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	return L.SetFuncs(L.CreateTable(0, 3), map[string]lua.LGFunction{
		"decode": decode,
		"list":   list,
		"escape": escape,
	})
}

type options struct {
	lists    map[string]bool
	maxBytes int
	maxDepth int
}

func readOptions(L *lua.LState, v lua.LValue) options {
	o := options{lists: map[string]bool{}, maxBytes: defaultMaxBytes, maxDepth: defaultMaxDepth}
	for _, n := range defaultLists {
		o.lists[n] = true
	}
	t, ok := v.(*lua.LTable)
	if v == lua.LNil {
		return o
	}
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "xml.decode: opts must be a table, got %s", v.Type()))
	}
	t.ForEach(func(k, val lua.LValue) {
		switch k.String() {
		case "lists":
			lt, ok := val.(*lua.LTable)
			if !ok {
				bindings.Raise(L, bindings.Errorf("config", "xml.decode: opts.lists must be a list of element names, got %s", val.Type()))
			}
			o.lists = map[string]bool{}
			lt.ForEach(func(_, n lua.LValue) {
				s, ok := n.(lua.LString)
				if !ok {
					bindings.Raise(L, bindings.Errorf("config", "xml.decode: opts.lists must hold element names (strings), got %s", n.Type()))
				}
				o.lists[string(s)] = true
			})
		case "max_bytes":
			o.maxBytes = intOption(L, "max_bytes", val, maxMaxBytes)
		case "max_depth":
			o.maxDepth = intOption(L, "max_depth", val, maxMaxDepth)
		default:
			bindings.Raise(L, bindings.Errorf("config", "xml.decode: unknown option %s (known: lists, max_bytes, max_depth)", k.String()))
		}
	})
	return o
}

func intOption(L *lua.LState, name string, v lua.LValue, most int) int {
	n, ok := v.(lua.LNumber)
	if !ok || float64(n) != float64(int(n)) || n < 1 || int(n) > most {
		bindings.Raise(L, bindings.Errorf("config", "xml.decode: opts.%s must be an integer from 1 to %d, got %s", name, most, v.String()))
	}
	return int(n)
}

func decode(L *lua.LState) int {
	text := L.CheckString(1)
	o := readOptions(L, L.Get(2))
	if len(text) > o.maxBytes {
		bindings.Raise(L, bindings.Errorf("config", "xml.decode: the document is %d bytes, over the max_bytes limit of %d", len(text), o.maxBytes))
	}
	d := &decoder{L: L, o: o, dec: stdxml.NewDecoder(strings.NewReader(text))}
	d.dec.Strict = true
	if ctx := L.Context(); ctx != nil {
		d.stop = ctx.Done()
	}
	v, name, err := d.document()
	if err != nil {
		bindings.Raise(L, bindings.Errorf("config", "xml.decode: %v", err))
	}
	L.Push(v)
	L.Push(lua.LString(name))
	return 2
}

type decoder struct {
	L        *lua.LState
	o        options
	dec      *stdxml.Decoder
	elements int
	stop     <-chan struct{}
}

// errLine adds the decoder's line to an error.
func (d *decoder) errLine(format string, args ...any) error {
	line, _ := d.dec.InputPos()
	return fmt.Errorf("line %d: %s", line, fmt.Sprintf(format, args...))
}

// document reads the prolog and the root element, and refuses anything
// but comments and white space after it.
func (d *decoder) document() (lua.LValue, string, error) {
	var (
		root lua.LValue
		name string
	)
	for {
		tok, err := d.dec.Token()
		if err == io.EOF {
			if root == nil {
				return nil, "", errors.New("no root element")
			}
			return root, name, nil
		}
		if err != nil {
			return nil, "", d.syntax(err)
		}
		switch t := tok.(type) {
		case stdxml.StartElement:
			if root != nil {
				return nil, "", d.errLine("a second root element <%s>", t.Name.Local)
			}
			if root, err = d.element(t, 1); err != nil {
				return nil, "", err
			}
			name = t.Name.Local
		case stdxml.CharData:
			if len(bytes.TrimSpace(t)) > 0 {
				return nil, "", d.errLine("text outside the root element")
			}
		}
	}
}

// syntax words a decoder error with its line.
func (d *decoder) syntax(err error) error {
	var se *stdxml.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("line %d: %s", se.Line, se.Msg)
	}
	return d.errLine("%v", err)
}

// element decodes the element that start opened.
func (d *decoder) element(start stdxml.StartElement, depth int) (lua.LValue, error) {
	if depth > d.o.maxDepth {
		return nil, d.errLine("elements nest deeper than max_depth (%d)", d.o.maxDepth)
	}
	d.elements++
	if d.elements > maxElements {
		return nil, d.errLine("more than %d elements", maxElements)
	}
	if d.elements&4095 == 0 && d.stop != nil {
		select {
		case <-d.stop:
			return nil, errors.New("the hook's deadline passed while decoding")
		default:
		}
	}
	L := d.L
	var (
		t     *lua.LTable // the element's table, once it has a child or an attribute
		text  strings.Builder
		lists map[string]*lua.LTable
	)
	table := func() *lua.LTable {
		if t == nil {
			t = L.NewTable()
		}
		return t
	}
	var attrs *lua.LTable
	for _, a := range start.Attr {
		if a.Name.Space == "xmlns" || (a.Name.Space == "" && a.Name.Local == "xmlns") {
			continue
		}
		if attrs == nil {
			attrs = L.NewTable()
			table().RawSetString("_attr", attrs)
		}
		attrs.RawSetString(a.Name.Local, lua.LString(a.Value))
	}
	for {
		tok, err := d.dec.Token()
		if err != nil {
			if err == io.EOF {
				return nil, d.errLine("the document ends inside <%s>", start.Name.Local)
			}
			return nil, d.syntax(err)
		}
		switch tk := tok.(type) {
		case stdxml.StartElement:
			v, err := d.element(tk, depth+1)
			if err != nil {
				return nil, err
			}
			name := tk.Name.Local
			tb := table()
			if l := lists[name]; l != nil {
				l.Append(v)
				continue
			}
			prev := tb.RawGetString(name)
			switch {
			case d.o.lists[name]:
				l := d.newList()
				l.Append(v)
				tb.RawSetString(name, l)
				lists = setList(lists, name, l)
			case prev != lua.LNil:
				// A repeated name: the first value and this one become a list.
				l := d.newList()
				l.Append(prev)
				l.Append(v)
				tb.RawSetString(name, l)
				lists = setList(lists, name, l)
			default:
				tb.RawSetString(name, v)
			}
		case stdxml.CharData:
			text.Write(tk)
		case stdxml.EndElement:
			if t == nil {
				return lua.LString(text.String()), nil
			}
			if s := text.String(); strings.TrimSpace(s) != "" {
				t.RawSetString("_text", lua.LString(s))
			}
			return t, nil
		}
	}
}

func setList(m map[string]*lua.LTable, name string, l *lua.LTable) map[string]*lua.LTable {
	if m == nil {
		m = map[string]*lua.LTable{}
	}
	m[name] = l
	return m
}

// newList returns a table marked as a list (luaval.MarkArray, the mark
// json.array sets), for xml.list and json.encode.
func (d *decoder) newList() *lua.LTable {
	l := d.L.NewTable()
	luaval.MarkArray(d.L, l)
	return l
}

func list(L *lua.LState) int {
	v := L.Get(1)
	switch x := v.(type) {
	case *lua.LNilType:
		L.Push(L.NewTable())
		return 1
	case *lua.LTable:
		if luaval.IsMarkedArray(L, x) {
			L.Push(x)
			return 1
		}
	}
	t := L.NewTable()
	t.Append(v)
	L.Push(t)
	return 1
}

func escape(L *lua.LState) int {
	s := L.CheckString(1)
	var b strings.Builder
	if err := stdxml.EscapeText(&b, []byte(s)); err != nil {
		bindings.Raise(L, bindings.Errorf("config", "xml.escape: %v", err))
	}
	// EscapeText writes &#34; and &#39; for quotes, and &#xA; for line
	// breaks; keep line breaks as they are in text.
	L.Push(lua.LString(strings.ReplaceAll(b.String(), "&#xA;", "\n")))
	return 1
}
