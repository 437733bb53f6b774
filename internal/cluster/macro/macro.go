// Package macro expands Coopr's cluster macros in the strings of a
// cluster's config and service action fields, for one node of the
// cluster: %host.service.zk% becomes the hostnames of the nodes carrying
// zk, %join(map(ip.service.zk,'$:2181'),',')% a ZooKeeper connect string.
//
// The syntax is Coopr's (reference/coopr-server.md §5.4):
//
//	%host.self%                      this node's hostname
//	%ip.self%, %ip.<type>.self%      this node's address (type default bind_v4)
//	%host.service.<svc>%             hostnames of the nodes with svc, comma-separated
//	%ip.service.<svc>%               their addresses (%ip.<type>.service.<svc>%)
//	%host.service.<svc>[i]%          the i-th of them (0-based), by nodenum
//	%num.service.<svc>%              how many nodes carry svc
//	%instance.self.service.<svc>%    this node's 1-based rank among them
//	%join(<list>,'<sep>')%           the list joined by sep instead of ","
//	%map(<list>,'<format>')%         each element put in format at "$" ("$$" is a "$")
//
// A "%%" is not a macro delimiter (and stays "%%", as in Coopr). Loom
// differs from Coopr where Coopr was fragile: nodes are always listed by
// nodenum (Coopr used hash-set order); a service on no node expands to ""
// (Coopr left the macro in place when it was the only one in the string),
// as does %instance.self.service.<svc>% on a node without svc;
// %cluster.owner% is refused, Loom clusters having no owner account.
package macro

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Node is what macros read of a node.
type Node struct {
	ID          string
	Num         int
	Hostname    string
	IPAddresses map[string]any
	Services    []string
}

// DefaultIPType is the address type of %ip...% macros that name none.
const DefaultIPType = "bind_v4"

// kind is what a macro evaluates.
type kind int

const (
	hostSelf kind = iota
	ipSelf
	hostService
	ipService
	numService
	instanceSelf
)

// expr is one parsed macro.
type expr struct {
	kind     kind
	service  string
	ipType   string
	instance int // -1: all
	format   string
	hasFmt   bool
	sep      string
}

// SyntaxError is a malformed macro.
type SyntaxError struct {
	Macro string
	Msg   string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("macro %%%s%%: %s", e.Macro, e.Msg) }

// parse parses the text between two %.
func parse(in string) (*expr, error) {
	p := &parser{in: in}
	e, err := p.expression()
	if err != nil {
		return nil, &SyntaxError{Macro: in, Msg: err.Error()}
	}
	return e, nil
}

type parser struct {
	in  string
	pos int
}

func (p *parser) expression() (*expr, error) {
	join := strings.HasPrefix(p.in, "join(")
	if join {
		p.pos = len("join(")
	}
	e, err := p.inner()
	if err != nil {
		return nil, err
	}
	if join {
		if err := p.expect(','); err != nil {
			return nil, err
		}
		if e.sep, err = p.literal(); err != nil {
			return nil, err
		}
		if err := p.expect(')'); err != nil {
			return nil, err
		}
	}
	if p.pos < len(p.in) {
		return nil, fmt.Errorf("unexpected %q at position %d", p.in[p.pos:], p.pos)
	}
	return e, nil
}

func (p *parser) inner() (*expr, error) {
	if !strings.HasPrefix(p.in[p.pos:], "map(") {
		return p.basic()
	}
	p.pos += len("map(")
	e, err := p.basic()
	if err != nil {
		return nil, err
	}
	if err := p.expect(','); err != nil {
		return nil, err
	}
	if e.format, err = p.literal(); err != nil {
		return nil, err
	}
	e.hasFmt = true
	return e, p.expect(')')
}

func (p *parser) basic() (*expr, error) {
	start := p.pos
	for p.pos < len(p.in) && nameChar(p.in[p.pos]) {
		p.pos++
	}
	name := p.in[start:p.pos]
	if name == "" {
		return nil, errors.New("a macro name is missing")
	}
	e, err := evaluator(name)
	if err != nil {
		return nil, err
	}
	e.sep = ","
	e.instance = -1
	if p.pos < len(p.in) && p.in[p.pos] == '[' {
		end := strings.IndexByte(p.in[p.pos:], ']')
		if end < 0 {
			return nil, errors.New("no closing ']'")
		}
		digits := p.in[p.pos+1 : p.pos+end]
		n, err := strconv.Atoi(digits)
		if err != nil || n < 0 || strings.Trim(digits, "0123456789") != "" {
			return nil, fmt.Errorf("instance [%s]: want a number from 0", digits)
		}
		if e.kind != hostService && e.kind != ipService {
			return nil, fmt.Errorf("%s takes no instance number", name)
		}
		e.instance = n
		p.pos += end + 1
	}
	return e, nil
}

func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// evaluator maps a macro name to what it evaluates.
func evaluator(name string) (*expr, error) {
	svc := func(prefix string, k kind) (*expr, error) {
		s := strings.TrimPrefix(name, prefix)
		if s == "" {
			return nil, fmt.Errorf("%s names no service", name)
		}
		return &expr{kind: k, service: s}, nil
	}
	switch {
	case name == "host.self":
		return &expr{kind: hostSelf}, nil
	case name == "cluster.owner":
		return nil, errors.New("cluster.owner is not supported: Loom clusters have no owner account (put the value in the cluster config)")
	case strings.HasPrefix(name, "host.service."):
		return svc("host.service.", hostService)
	case strings.HasPrefix(name, "num.service."):
		return svc("num.service.", numService)
	case strings.HasPrefix(name, "instance.self.service."):
		return svc("instance.self.service.", instanceSelf)
	case strings.HasPrefix(name, "ip."):
		rest := strings.TrimPrefix(name, "ip.")
		parts := strings.SplitN(rest, ".", 3)
		switch {
		case rest == "self":
			return &expr{kind: ipSelf, ipType: DefaultIPType}, nil
		case len(parts) == 2 && parts[0] == "service" && parts[1] != "":
			return &expr{kind: ipService, ipType: DefaultIPType, service: parts[1]}, nil
		case len(parts) == 2 && parts[1] == "self" && parts[0] != "":
			return &expr{kind: ipSelf, ipType: parts[0]}, nil
		case len(parts) == 3 && parts[1] == "service" && parts[0] != "" && parts[2] != "":
			return &expr{kind: ipService, ipType: parts[0], service: parts[2]}, nil
		}
	}
	return nil, fmt.Errorf("%q is not a macro (host.self, ip[.TYPE].self, host.service.S, ip[.TYPE].service.S, num.service.S, instance.self.service.S)", name)
}

func (p *parser) expect(c byte) error {
	if p.pos >= len(p.in) || p.in[p.pos] != c {
		return fmt.Errorf("%q expected at position %d", c, p.pos)
	}
	p.pos++
	return nil
}

func (p *parser) literal() (string, error) {
	if p.pos >= len(p.in) || (p.in[p.pos] != '\'' && p.in[p.pos] != '"') {
		return "", fmt.Errorf("a quoted string (' or \") expected at position %d", p.pos)
	}
	q := p.in[p.pos]
	end := strings.IndexByte(p.in[p.pos+1:], q)
	if end < 0 {
		return "", fmt.Errorf("no closing %c for the string at position %d", q, p.pos)
	}
	s := p.in[p.pos+1 : p.pos+1+end]
	p.pos += end + 2
	return s, nil
}

// macros returns the macros of s: the text between each pair of single
// '%' ("%%" is skipped), with their byte ranges including the '%'s.
func macros(s string) (out [][2]int) {
	next := func(pos int) int {
		for pos < len(s) {
			i := strings.IndexByte(s[pos:], '%')
			if i < 0 {
				return -1
			}
			pos += i
			if pos+1 < len(s) && s[pos+1] == '%' {
				pos += 2
				continue
			}
			return pos
		}
		return -1
	}
	for pos := 0; pos < len(s); {
		a := next(pos)
		if a < 0 {
			break
		}
		b := next(a + 1)
		if b < 0 {
			break
		}
		out = append(out, [2]int{a, b + 1})
		pos = b + 1
	}
	return out
}

// Check parses every macro of s and returns the services they name.
func Check(s string) (services []string, err error) {
	for _, m := range macros(s) {
		e, err := parse(s[m[0]+1 : m[1]-1])
		if err != nil {
			return nil, err
		}
		if e.service != "" {
			services = append(services, e.service)
		}
	}
	return services, nil
}

// Ref is what one macro names: a service ("" for the self forms) and an
// address type ("" for host and count forms).
type Ref struct {
	Macro   string
	Service string
	IPType  string
}

// CheckRefs parses every macro of s and returns what each names.
func CheckRefs(s string) ([]Ref, error) {
	var out []Ref
	for _, m := range macros(s) {
		text := s[m[0]+1 : m[1]-1]
		e, err := parse(text)
		if err != nil {
			return nil, err
		}
		out = append(out, Ref{Macro: text, Service: e.service, IPType: e.ipType})
	}
	return out, nil
}

// Walk calls f with every string in v (maps, lists, strings), map keys
// sorted; the first error stops it.
func Walk(v any, f func(string) error) error { return walk(v, f) }

// CheckValue is Check over every string in v (maps, lists, strings).
func CheckValue(v any) (services []string, err error) {
	err = walk(v, func(s string) error {
		svcs, err := Check(s)
		services = append(services, svcs...)
		return err
	})
	return services, err
}

func walk(v any, f func(string) error) error {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := walk(x[k], f); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := walk(e, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// Has reports whether any string in v holds a '%' (so may hold a macro).
func Has(v any) bool {
	found := false
	_ = walk(v, func(s string) error {
		if strings.IndexByte(s, '%') >= 0 {
			found = true
		}
		return nil
	})
	return found
}

// Cluster is the cluster macros are expanded against.
type Cluster struct {
	nodes  []Node // by nodenum
	bySvc  map[string][]int
	byID   map[string]int
	selfID string
}

// NewCluster indexes nodes for expansion.
func NewCluster(nodes []Node) *Cluster {
	c := &Cluster{nodes: append([]Node(nil), nodes...), bySvc: map[string][]int{}, byID: map[string]int{}}
	sort.SliceStable(c.nodes, func(i, j int) bool { return c.nodes[i].Num < c.nodes[j].Num })
	for i, n := range c.nodes {
		c.byID[n.ID] = i
		for _, s := range n.Services {
			c.bySvc[s] = append(c.bySvc[s], i)
		}
	}
	return c
}

// IncompleteError is a macro the cluster cannot expand yet: a node it
// names has no address (its CONFIRM has not run).
type IncompleteError struct {
	Macro, Node, IPType string
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("macro %%%s%%: node %s has no %s address yet (its CONFIRM has not run)", e.Macro, e.Node, e.IPType)
}

// Expand expands the macros of s for node self.
func (c *Cluster) Expand(s, self string) (string, error) {
	ms := macros(s)
	if len(ms) == 0 {
		return s, nil
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		text := s[m[0]+1 : m[1]-1]
		e, err := parse(text)
		if err != nil {
			return "", err
		}
		parts, err := c.eval(e, text, self)
		if err != nil {
			return "", err
		}
		b.WriteString(s[last:m[0]])
		for i, p := range parts {
			if i > 0 {
				b.WriteString(e.sep)
			}
			if !e.hasFmt {
				b.WriteString(p)
				continue
			}
			for j := 0; j < len(e.format); j++ {
				switch {
				case e.format[j] == '$' && j+1 < len(e.format) && e.format[j+1] == '$':
					b.WriteByte('$')
					j++
				case e.format[j] == '$':
					b.WriteString(p)
				default:
					b.WriteByte(e.format[j])
				}
			}
		}
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// ExpandValue expands every string in v (maps and lists are copied where
// something changed; v itself is not modified).
func (c *Cluster) ExpandValue(v any, self string) (any, error) {
	switch x := v.(type) {
	case string:
		return c.Expand(x, self)
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			ne, err := c.ExpandValue(e, self)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if s, ok := e.(string); ok && ne.(string) == s {
				continue
			}
			if out == nil {
				out = maps.Clone(x)
			}
			out[k] = ne
		}
		if out == nil {
			return x, nil
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			ne, err := c.ExpandValue(e, self)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = ne
		}
		return out, nil
	}
	return v, nil
}

func (c *Cluster) ip(n *Node, typ, macro string) (string, error) {
	if s, ok := n.IPAddresses[typ].(string); ok && s != "" {
		return s, nil
	}
	return "", &IncompleteError{Macro: macro, Node: n.ID, IPType: typ}
}

func (c *Cluster) eval(e *expr, text, self string) ([]string, error) {
	var me *Node
	if i, ok := c.byID[self]; ok {
		me = &c.nodes[i]
	}
	switch e.kind {
	case hostSelf, ipSelf:
		if me == nil {
			return nil, fmt.Errorf("macro %%%s%%: node %s is not in the cluster", text, self)
		}
		if e.kind == hostSelf {
			return []string{me.Hostname}, nil
		}
		ip, err := c.ip(me, e.ipType, text)
		return []string{ip}, err
	case numService:
		return []string{strconv.Itoa(len(c.bySvc[e.service]))}, nil
	case instanceSelf:
		for rank, i := range c.bySvc[e.service] {
			if c.nodes[i].ID == self {
				return []string{strconv.Itoa(rank + 1)}, nil
			}
		}
		return nil, nil // a node without the service: nothing, as in Coopr
	}
	idx := c.bySvc[e.service]
	if e.instance >= 0 {
		if e.instance >= len(idx) {
			return nil, fmt.Errorf("macro %%%s%%: there are %d nodes with service %s, so no instance [%d] (instances count from 0)", text, len(idx), e.service, e.instance)
		}
		idx = idx[e.instance : e.instance+1]
	}
	out := make([]string, 0, len(idx))
	for _, i := range idx {
		n := &c.nodes[i]
		if e.kind == hostService {
			out = append(out, n.Hostname)
			continue
		}
		ip, err := c.ip(n, e.ipType, text)
		if err != nil {
			return nil, err
		}
		out = append(out, ip)
	}
	return out, nil
}
