package repl

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/stdlib"
)

// helpEntry documents one function for :help: a binding's function from
// its spec, or a base-table method from the stdlib's LuaLS stub.
type helpEntry struct {
	name    string   // full name: loom.ssh.connect, loom.ssh.conn:exec, loom.Base:fail
	params  []string // LuaLS notation: "opts table"
	returns []string
	doc     string
}

// helpTopics is everything :help TOPIC knows, built once per REPL.
type helpTopics struct {
	modules []bindings.ModuleSpec
	funcs   []helpEntry
	classes map[string][]string // loom.Provider -> its entries' names
}

func newHelpTopics(modules []bindings.ModuleSpec) *helpTopics {
	h := &helpTopics{modules: modules, classes: map[string][]string{}}
	for _, m := range modules {
		for _, f := range m.Funcs {
			h.funcs = append(h.funcs, helpEntry{name: "loom." + m.Name + "." + f.Name, params: f.Params, returns: f.Returns, doc: f.Doc})
		}
	}
	// The stub's typed entries first; the stdlib source adds what the
	// stub leaves out (Kind:fail, ClusterDriver:option...).
	entries := stubEntries(stdlib.LoomStub())
	if src, ok := stdlib.Source("loom"); ok {
		entries = append(entries, stubEntries(src)...)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.name] {
			continue
		}
		seen[e.name] = true
		h.funcs = append(h.funcs, e)
		cls, _, _ := strings.Cut(e.name, ":")
		h.classes[cls] = append(h.classes[cls], e.name)
	}
	return h
}

var (
	stubClassVar = regexp.MustCompile(`^local (\w+) = (\{|\w+:extend\()`)
	stubFunc     = regexp.MustCompile(`^function (\w+)([:.])(\w+)\((.*)\)`)
	stubParam    = regexp.MustCompile(`^---@param (\S+) (.+)$`)
	stubReturn   = regexp.MustCompile(`^---@return (.+)$`)
)

// stubEntries reads the methods of the base tables from the stdlib's
// stub of require("loom") or its source: their "--- doc" lines, and
// @param/@return (the source's parameter names when there are none).
// Only documented methods of local tables count.
func stubEntries(stub []byte) []helpEntry {
	var out []helpEntry
	var doc []string
	var params, returns []string
	classes := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(stub))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case stubClassVar.MatchString(line):
			classes[stubClassVar.FindStringSubmatch(line)[1]] = true
		case stubParam.MatchString(line):
			m := stubParam.FindStringSubmatch(line)
			params = append(params, m[1]+" "+m[2])
		case stubReturn.MatchString(line):
			returns = append(returns, stubReturn.FindStringSubmatch(line)[1])
		case strings.HasPrefix(line, "---@"):
		case strings.HasPrefix(line, "--- "):
			doc = append(doc, strings.TrimPrefix(line, "--- "))
		case stubFunc.MatchString(line):
			m := stubFunc.FindStringSubmatch(line)
			if params == nil && m[4] != "" {
				params = strings.Split(strings.ReplaceAll(m[4], " ", ""), ",")
			}
			if classes[m[1]] && (len(doc) > 0 || len(params) > 0) {
				out = append(out, helpEntry{name: "loom." + m[1] + m[2] + m[3], params: params, returns: returns, doc: strings.Join(doc, " ")})
			}
			doc, params, returns = nil, nil, nil
		default:
			doc, params, returns = nil, nil, nil
		}
	}
	return out
}

// names lists every topic, for completing :help.
func (h *helpTopics) names() []string {
	var out []string
	for _, m := range h.modules {
		out = append(out, "loom."+m.Name)
	}
	for c := range h.classes {
		out = append(out, c)
	}
	for _, f := range h.funcs {
		out = append(out, f.name)
	}
	out = append(out, commandNames()...)
	sort.Strings(out)
	return out
}

// write prints the help on topic to w, or says what topics there are.
func (h *helpTopics) write(w io.Writer, topic string) error {
	if strings.TrimSpace(topic) == "" {
		fmt.Fprintln(w, commandHelp)
		return nil
	}
	if text, ok := commandLines(topic); ok && !strings.ContainsAny(strings.TrimPrefix(topic, ":"), ".:") {
		fmt.Fprintln(w, text)
		return nil
	}
	full := topic
	if !strings.HasPrefix(full, "loom.") && full != "loom" {
		full = "loom." + full
	}
	if full == "loom" {
		return h.writeOverview(w)
	}
	for _, m := range h.modules {
		if full == "loom."+m.Name {
			h.writeModule(w, m)
			return nil
		}
	}
	if names, ok := h.classes[full]; ok {
		fmt.Fprintf(w, "%s: a base table of require(\"loom\"); extend it with %s:extend(\"Name\")\n", full, full)
		for _, n := range names {
			h.writeFunc(w, h.entry(n), "  ")
		}
		return nil
	}
	// ssh.conn.exec reads as ssh.conn:exec.
	if i := strings.LastIndex(full, "."); i > 0 && !strings.Contains(full, ":") {
		if e := h.entry(full[:i] + ":" + full[i+1:]); e != nil {
			h.writeFunc(w, e, "")
			return nil
		}
	}
	if e := h.entry(full); e != nil {
		h.writeFunc(w, e, "")
		return nil
	}
	// A bare function or method name: connect, conn:exec, fail.
	var hits []*helpEntry
	for i := range h.funcs {
		if n := h.funcs[i].name; strings.HasSuffix(n, "."+topic) || strings.HasSuffix(n, ":"+topic) {
			hits = append(hits, &h.funcs[i])
		}
	}
	switch {
	case len(hits) == 0:
		return fmt.Errorf("no help on %q: topics are the commands (:help), the loom modules (:help loom lists them), their functions (:help loom.ssh.connect), the base tables (:help loom.Provider) and the Lua functions the session holds (:help HelloAutomator:install)", topic)
	case len(hits) <= 3:
		for _, e := range hits {
			h.writeFunc(w, e, "")
		}
	default:
		fmt.Fprintf(w, "%q is in several modules:\n", topic)
		for _, e := range hits {
			fmt.Fprintf(w, "  %s\n", signature(e))
		}
	}
	return nil
}

func (h *helpTopics) entry(name string) *helpEntry {
	for i := range h.funcs {
		if h.funcs[i].name == name {
			return &h.funcs[i]
		}
	}
	return nil
}

func (h *helpTopics) writeOverview(w io.Writer) error {
	fmt.Fprintln(w, `Modules (require("loom.NAME"); :help loom.NAME for its functions):`)
	for _, m := range h.modules {
		fmt.Fprintf(w, "  loom.%-6s %s\n", m.Name, summary(m.Doc))
	}
	var classes []string
	for c := range h.classes {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	fmt.Fprintf(w, "Base tables of require(\"loom\"): %s\n", strings.Join(classes, ", "))
	return nil
}

func (h *helpTopics) writeModule(w io.Writer, m bindings.ModuleSpec) {
	fmt.Fprintf(w, "loom.%s (require(\"loom.%s\"))\n", m.Name, m.Name)
	writeWrapped(w, m.Doc, "  ")
	for _, f := range m.Funcs {
		e := h.entry("loom." + m.Name + "." + f.Name)
		fmt.Fprintf(w, "  %s\n", strings.TrimPrefix(signature(e), "loom."+m.Name+"."))
	}
	fmt.Fprintf(w, ":help loom.%s.FUNCTION shows one in full.\n", m.Name)
}

func (h *helpTopics) writeFunc(w io.Writer, e *helpEntry, indent string) {
	fmt.Fprintf(w, "%s%s\n", indent, signature(e))
	writeWrapped(w, e.doc, indent+"  ")
}

// signature is name(params) -> returns.
func signature(e *helpEntry) string {
	s := e.name + "(" + strings.Join(e.params, ", ") + ")"
	if len(e.returns) > 0 {
		s += " -> " + strings.Join(e.returns, ", ")
	}
	return s
}

// helpWidth is where help text wraps.
const helpWidth = 96

// writeWrapped prints doc's paragraphs (its lines) wrapped at helpWidth.
func writeWrapped(w io.Writer, doc, indent string) {
	for _, para := range strings.Split(strings.TrimSpace(doc), "\n") {
		var line strings.Builder
		for _, word := range strings.Fields(para) {
			if line.Len() > 0 && len(indent)+line.Len()+1+len(word) > helpWidth {
				fmt.Fprintf(w, "%s%s\n", indent, line.String())
				line.Reset()
			}
			if line.Len() > 0 {
				line.WriteByte(' ')
			}
			line.WriteString(word)
		}
		if line.Len() > 0 {
			fmt.Fprintf(w, "%s%s\n", indent, line.String())
		}
	}
}

// commandLines is the :help text of one command (":run" or "run"), with
// its continuation lines.
func commandLines(topic string) (string, bool) {
	name := ":" + strings.TrimPrefix(topic, ":")
	var out []string
	in := false
	for _, l := range strings.Split(commandHelp, "\n") {
		switch {
		case strings.HasPrefix(l, "  "+name+" ") || l == "  "+name:
			in = true
			out = append(out, l)
		case in && strings.HasPrefix(l, "    "):
			out = append(out, l)
		default:
			in = false
		}
	}
	if len(out) == 0 {
		return "", false
	}
	return strings.Join(out, "\n"), true
}

// summary is a doc's first clause, short enough for one line.
func summary(doc string) string {
	s := strings.TrimSpace(doc)
	for _, sep := range []string{". ", " (", ": ", "; ", ", "} {
		if i := strings.Index(s, sep); i > 0 && len(s) > 72 {
			s = s[:i]
		}
	}
	if len(s) > 72 {
		s = s[:69] + "..."
	}
	return strings.TrimSuffix(s, ".")
}

// liveHelp documents a Lua function the session holds that no spec
// covers (HelloAutomator:install, a helper defined at the prompt): where
// it is defined and its parameters. It reports whether topic was one.
func (r *REPL) liveHelp(topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	L := r.s.State()
	v, ok := resolve(L, strings.Split(strings.Replace(topic, ":", ".", 1), "."))
	fn, isFn := v.(*lua.LFunction)
	if !ok || !isFn {
		return false
	}
	if fn.IsG || fn.Proto == nil {
		fmt.Fprintf(r.out, "%s: a built-in function (no Lua source)\n", topic)
		return true
	}
	p := fn.Proto
	var params []string
	for i := 0; i < int(p.NumParameters) && i < len(p.DbgLocals); i++ {
		if i == 0 && p.DbgLocals[i].Name == "self" && strings.Contains(topic, ":") {
			continue // implicit in Class:method
		}
		params = append(params, p.DbgLocals[i].Name)
	}
	if p.IsVarArg != 0 {
		params = append(params, "...")
	}
	fmt.Fprintf(r.out, "%s(%s)\n  a Lua function defined at %s:%d-%d\n", topic, strings.Join(params, ", "), p.SourceName, p.LineDefined, p.LastLineDefined)
	return true
}
