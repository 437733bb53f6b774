package repl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/stdlib"
)

// completer adapts Complete to readline.
type completer struct{ r *REPL }

// Do implements readline.AutoCompleter: the suffixes that complete the
// word before the cursor, and that word's length in runes.
func (c *completer) Do(line []rune, pos int) ([][]rune, int) {
	cands, word := c.r.Complete(string(line[:pos]))
	out := make([][]rune, 0, len(cands))
	for _, cand := range cands {
		out = append(out, []rune(strings.TrimPrefix(cand, word)))
	}
	return out, len([]rune(word))
}

// requireOpen matches an unfinished require("name.
var requireOpen = regexp.MustCompile(`require\s*\(?\s*["']([A-Za-z0-9_.]*)$`)

// Complete returns the candidates that complete head, the text before the
// cursor, and the word of head they extend (every candidate starts with
// it). It completes :commands and their arguments, require("...") module
// names, and dotted Lua names as the live Lua state holds them: globals,
// fields of tables and of their __index tables. It walks tables raw and
// never calls a metamethod or any Lua function.
func (r *REPL) Complete(head string) ([]string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	trimmed := strings.TrimLeft(head, " \t")
	if strings.HasPrefix(trimmed, ":") {
		return r.completeCommand(trimmed)
	}
	if m := requireOpen.FindStringSubmatch(head); m != nil {
		return filterPrefix(r.moduleNames(), m[1]), m[1]
	}
	if inString(head) {
		return nil, ""
	}
	i := len(head)
	for i > 0 && isNameByte(head[i-1]) {
		i--
	}
	token := head[i:]
	if token != "" && token[0] >= '0' && token[0] <= '9' {
		return nil, ""
	}
	return r.completeName(token), token
}

func isNameByte(c byte) bool {
	return c == '_' || c == '.' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// inString reports whether head ends inside a quoted string.
func inString(head string) bool {
	var q byte
	for i := 0; i < len(head); i++ {
		c := head[i]
		switch {
		case q != 0 && c == '\\':
			i++
		case q != 0 && c == q:
			q = 0
		case q == 0 && (c == '"' || c == '\''):
			q = c
		}
	}
	return q != 0
}

func filterPrefix(names []string, prefix string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// moduleNames lists what require reaches: the stdlib, the loom.* bindings
// and the current plugin's own modules.
func (r *REPL) moduleNames() []string {
	names := append([]string{}, stdlib.Modules()...)
	for _, m := range r.opts.Modules {
		names = append(names, "loom."+m.Name)
	}
	return append(names, r.pluginModules()...)
}

// completeName completes a dotted name such as "self.task.con".
func (r *REPL) completeName(token string) []string {
	L := r.s.State()
	cut := strings.LastIndexAny(token, ".:")
	if cut < 0 {
		keys := tableKeys(L, L.G.Global, false)
		keys = append(keys, luaKeywords()...)
		return filterPrefix(keys, token)
	}
	base, sep, word := token[:cut], token[cut], token[cut+1:]
	parts := strings.Split(base, ".")
	if strings.Contains(base, ":") {
		return nil
	}
	// Only what the live state holds: offering loom.log.info while loom
	// (or loom.log) is nil would complete code that fails. :help
	// loom.log.info documents a binding before it is required.
	var keys []string
	if v, ok := resolve(L, parts); ok {
		keys = tableKeys(L, v, sep == ':')
	}
	prefix := token[:cut+1]
	var out []string
	for _, k := range filterPrefix(keys, word) {
		out = append(out, prefix+k)
	}
	return out
}

// resolve walks a dotted path from the globals, raw, following __index
// tables (never functions).
func resolve(L *lua.LState, parts []string) (lua.LValue, bool) {
	var v lua.LValue = L.G.Global
	for _, p := range parts {
		if p == "" {
			return nil, false
		}
		v = field(L, v, p)
		if v == lua.LNil {
			return nil, false
		}
	}
	return v, true
}

// field is v[k] without metamethod calls: raw gets along a chain of
// __index tables.
func field(L *lua.LState, v lua.LValue, k string) lua.LValue {
	for hops := 0; hops < 16; hops++ {
		if t, ok := v.(*lua.LTable); ok {
			if x := t.RawGetString(k); x != lua.LNil {
				return x
			}
		}
		next := indexTable(L, v)
		if next == nil {
			return lua.LNil
		}
		v = next
	}
	return lua.LNil
}

// indexTable is v's metatable's __index when that is a table.
func indexTable(L *lua.LState, v lua.LValue) *lua.LTable {
	var mt lua.LValue
	switch x := v.(type) {
	case *lua.LTable:
		mt = x.Metatable
	case *lua.LUserData:
		mt = x.Metatable
	case lua.LString:
		mt = L.GetMetatable(x)
	default:
		return nil
	}
	mtt, ok := mt.(*lua.LTable)
	if !ok {
		return nil
	}
	idx, _ := mtt.RawGetString("__index").(*lua.LTable)
	return idx
}

// tableKeys lists v's name-like string keys and those of its __index
// chain; methodsOnly keeps functions.
func tableKeys(L *lua.LState, v lua.LValue, methodsOnly bool) []string {
	var out []string
	seen := map[*lua.LTable]bool{}
	t, _ := v.(*lua.LTable)
	if t == nil {
		t = indexTable(L, v)
	}
	for t != nil && !seen[t] && len(seen) < 16 {
		seen[t] = true
		t.ForEach(func(k, val lua.LValue) {
			s, ok := k.(lua.LString)
			if !ok || !isIdent(string(s)) {
				return
			}
			if _, isFn := val.(*lua.LFunction); methodsOnly && !isFn {
				return
			}
			out = append(out, string(s))
		})
		t = indexTable(L, t)
	}
	return out
}

// completeCommand completes a :command or its argument.
func (r *REPL) completeCommand(line string) ([]string, string) {
	name, arg, hasArg := strings.Cut(line, " ")
	if !hasArg {
		return filterPrefix(commandNames(), name), name
	}
	arg = strings.TrimLeft(arg, " ")
	switch name {
	case ":load":
		var names []string
		for _, t := range r.rt.Types() {
			names = append(names, t.Name)
		}
		return filterPrefix(names, arg), arg
	case ":run", ":call":
		hooks := runtime.AllHooks()
		if info, ok := r.typeInfo(r.s.Type()); ok {
			hooks = info.Hooks
		}
		return filterPrefix(hooks, arg), arg
	case ":task":
		return completeFile(arg), arg
	case ":help", ":h":
		return filterPrefix(r.help.names(), arg), arg
	case ":set":
		if strings.Contains(arg, " ") {
			return nil, ""
		}
		return r.completeTaskPath(arg), arg
	}
	return nil, ""
}

// completeFile completes a path to a .json file or a directory.
func completeFile(prefix string) []string {
	dir, base := filepath.Split(prefix)
	list := dir
	if list == "" {
		list = "."
	}
	ents, err := os.ReadDir(list)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, base) || (strings.HasPrefix(n, ".") && !strings.HasPrefix(base, ".")) {
			continue
		}
		if e.IsDir() {
			out = append(out, dir+n+"/")
		} else if strings.HasSuffix(n, ".json") {
			out = append(out, dir+n)
		}
	}
	sort.Strings(out)
	return out
}

// completeTaskPath completes a dotted path into the current task's JSON.
func (r *REPL) completeTaskPath(prefix string) []string {
	t := r.s.Task()
	if t == nil {
		return nil
	}
	var doc any
	if err := json.Unmarshal(t.Raw(), &doc); err != nil {
		return nil
	}
	parts := strings.Split(prefix, ".")
	node := doc
	for _, p := range parts[:len(parts)-1] {
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[p]
	}
	m, ok := node.(map[string]any)
	if !ok {
		return nil
	}
	stem := prefix[:len(prefix)-len(parts[len(parts)-1])]
	var out []string
	for k := range m {
		if strings.HasPrefix(k, parts[len(parts)-1]) && !strings.Contains(k, ".") {
			out = append(out, stem+k)
		}
	}
	sort.Strings(out)
	return out
}
