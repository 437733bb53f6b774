package cli

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docCredits records which flags README.md and docs/ document for which
// command: a flag mentioned in a unit of text (a table row, a paragraph,
// a list item) that names the command, or given to it on a loomd command
// line in a code block.
type docCredits struct {
	root  *cobra.Command
	flags map[*cobra.Command]map[string]bool // command -> long flag names
	cmds  map[*cobra.Command]bool            // commands named at all
}

var (
	loomdMention = regexp.MustCompile(`\bloomd((?:[ ]+[a-z][a-z0-9-]*)*)`)
	flagMention  = regexp.MustCompile(`(?:^|[^\w-])(--?[A-Za-z0-9][\w-]*)`)
	heading      = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
	listItem     = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.)\s`)
)

// named returns the commands a text names: each "loomd a b" resolved
// as deep into the command tree as its words go.
func (d *docCredits) named(text string) []*cobra.Command {
	var out []*cobra.Command
	for _, m := range loomdMention.FindAllStringSubmatch(text, -1) {
		cmd := d.root
		for _, w := range strings.Fields(m[1]) {
			var next *cobra.Command
			for _, c := range cmd.Commands() {
				if c.Name() == w || c.HasAlias(w) {
					next = c
					break
				}
			}
			if next == nil {
				break
			}
			cmd = next
		}
		out = append(out, cmd)
	}
	return out
}

// credit notes the flags a text mentions for each of cmds.
func (d *docCredits) credit(cmds []*cobra.Command, text string) {
	for _, c := range cmds {
		for p := c; p != nil; p = p.Parent() {
			d.cmds[p] = true // loomd driver rancher names loomd driver too
		}
		if d.flags[c] == nil {
			d.flags[c] = map[string]bool{}
		}
		for _, m := range flagMention.FindAllStringSubmatch(text, -1) {
			name := m[1]
			if !strings.HasPrefix(name, "--") {
				// -o: a shorthand, of this command or one it inherits.
				if len(name) == 2 {
					f := c.LocalFlags().ShorthandLookup(name[1:])
					if f == nil {
						f = c.InheritedFlags().ShorthandLookup(name[1:])
					}
					if f != nil {
						d.flags[c][f.Name] = true
					}
				}
				continue
			}
			d.flags[c][strings.TrimPrefix(name, "--")] = true
		}
	}
}

// creditCommand notes a loomd command line of a code block.
func (d *docCredits) creditCommand(words []string) {
	cmd, rest, err := d.root.Find(words[1:])
	if err != nil {
		return
	}
	if cmd == d.root && (len(rest) == 0 || strings.HasPrefix(rest[0], "-")) {
		// loomd alone or with only flags is loomd serve.
		if serve, _, err := d.root.Find([]string{"serve"}); err == nil {
			cmd = serve
		}
	}
	d.credit([]*cobra.Command{cmd}, strings.Join(rest, " "))
}

// scan reads one Markdown file.
func (d *docCredits) scan(t *testing.T, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// headings[i] is the text of the current heading of level i+1.
	var headings [6]string
	fromHeadings := func() []*cobra.Command {
		for i := len(headings) - 1; i >= 0; i-- {
			if cmds := d.named(headings[i]); len(cmds) > 0 {
				return cmds
			}
		}
		return nil
	}
	unit := func(text string) {
		if strings.TrimSpace(text) == "" {
			return
		}
		cmds := d.named(text)
		if strings.HasPrefix(strings.TrimSpace(text), "|") {
			// A table row names its command in its first cell, else
			// the section does.
			cells := strings.Split(strings.Trim(strings.TrimSpace(text), "|"), "|")
			cmds = d.named(cells[0])
		}
		if len(cmds) == 0 {
			cmds = fromHeadings()
		}
		d.credit(cmds, text)
	}
	var para []string
	flush := func() {
		unit(strings.Join(para, " "))
		para = nil
	}
	for _, b := range docBlocks(t, file) {
		if b.skip {
			continue
		}
		switch b.lang {
		case "sh", "bash", "shell", "console", "":
			for _, c := range loomdCommands(b.code, b.lang == "") {
				d.creditCommand(c.words)
			}
		}
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var fence string
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if trimmed == fence {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			flush()
			fence = m[2]
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			flush()
			level := len(m[1]) - 1
			headings[level] = m[2]
			for i := level + 1; i < len(headings); i++ {
				headings[i] = ""
			}
			unit(m[2])
			continue
		}
		switch {
		case trimmed == "":
			flush()
		case strings.HasPrefix(trimmed, "|"):
			flush()
			unit(trimmed)
		case listItem.MatchString(line):
			flush()
			para = append(para, trimmed)
		default:
			para = append(para, trimmed)
		}
	}
	flush()
}

// documented tells whether the docs document flag f of cmd: mentioned
// for cmd, for a command group above it (not loomd alone), or, for a
// persistent flag, for a command below it that inherits it.
func (d *docCredits) documented(cmd *cobra.Command, f *pflag.Flag, persistent bool) bool {
	for c := cmd; c != nil; c = c.Parent() {
		if (c == cmd || c != d.root) && d.flags[c][f.Name] {
			return true
		}
	}
	if !persistent {
		return false
	}
	var below func(c *cobra.Command) bool
	below = func(c *cobra.Command) bool {
		for _, s := range c.Commands() {
			if d.flags[s][f.Name] || below(s) {
				return true
			}
		}
		return false
	}
	return below(cmd)
}

// TestDocsFlags keeps docs/operations.md and the other docs complete for
// operators: every loomd subcommand and every flag (local or persistent,
// not hidden) must be mentioned for its command in README.md or docs/,
// and so must every LOOM_* environment variable the loomd binary reads
// beside the flags' own (LOOM_ plus the flag name).
func TestDocsFlags(t *testing.T) {
	d := &docCredits{root: NewSystemApp().newRootCmd(), flags: map[*cobra.Command]map[string]bool{}, cmds: map[*cobra.Command]bool{}}
	for _, file := range docFiles(t) {
		d.scan(t, file)
	}
	var missing []string
	flagEnv := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c != d.root && !d.cmds[c] {
			missing = append(missing, c.CommandPath()+": the command is not in README.md or docs/")
		}
		check := func(persistent bool) func(*pflag.Flag) {
			return func(f *pflag.Flag) {
				flagEnv[envName(f.Name)] = true
				if f.Hidden || f.Name == "help" || f.Name == "version" || d.documented(c, f, persistent) {
					return
				}
				missing = append(missing, c.CommandPath()+" --"+f.Name+": "+f.Usage)
			}
		}
		c.LocalNonPersistentFlags().VisitAll(check(false))
		c.PersistentFlags().VisitAll(check(true))
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(d.root)
	for _, m := range missing {
		t.Errorf("not documented: %s", m)
	}
	if len(missing) > 0 {
		t.Log("a flag is documented when README.md or docs/ mention it for its command: in a table row whose first " +
			"cell, or a paragraph that, names the command (`loomd task logs`), or under a heading that does " +
			"(### loomd serve), or on a loomd command line in a code block")
	}

	// The LOOM_* variables read other than through a flag.
	var docs strings.Builder
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	reads := loomEnvReads(t)
	if len(reads) == 0 {
		t.Fatal("found no LOOM_* variable read by loomd: is the scan broken? (LOOM_ACC is one)")
	}
	names := make([]string, 0, len(reads))
	for name := range reads {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if flagEnv[name] {
			continue
		}
		if !regexp.MustCompile(`\b` + name + `\b`).MatchString(docs.String()) {
			t.Errorf("not documented: the environment variable %s (read at %s)", name, strings.Join(reads[name], ", "))
		}
	}
}

// loomEnvReads finds the LOOM_* environment variables the packages of the
// loomd binary (not tests, not test helpers it does not link) read with a
// Getenv or LookupEnv call on a string constant: name -> file:line.
func loomEnvReads(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list loomd's packages")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{range .GoFiles}} {{.}}{{end}}{{end}}`, "github.com/loomrt/loom/cmd/loomd").Output()
	if err != nil {
		t.Fatalf("go list -deps cmd/loomd: %v", err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	reads := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 || !strings.HasPrefix(fields[0], repo+string(filepath.Separator)) {
			continue // a dependency's package, not loomd's
		}
		fset := token.NewFileSet()
		var files []*ast.File
		consts := map[string]string{}
		for _, name := range fields[1:] {
			f, err := parser.ParseFile(fset, filepath.Join(fields[0], name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
			for _, decl := range f.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, id := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[id.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
			}
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				var fn string
				switch x := call.Fun.(type) {
				case *ast.Ident:
					fn = x.Name
				case *ast.SelectorExpr:
					fn = x.Sel.Name
				}
				if !strings.EqualFold(fn, "getenv") && !strings.EqualFold(fn, "lookupenv") {
					return true
				}
				var name string
				switch x := call.Args[0].(type) {
				case *ast.BasicLit:
					name, _ = strconv.Unquote(x.Value)
				case *ast.Ident:
					name = consts[x.Name]
				case *ast.SelectorExpr:
					name = consts[x.Sel.Name] // a constant of the same package, qualified
				}
				if strings.HasPrefix(name, "LOOM_") {
					pos := fset.Position(call.Pos())
					rel, _ := filepath.Rel(repo, pos.Filename)
					reads[name] = append(reads[name], rel+":"+strconv.Itoa(pos.Line))
				}
				return true
			})
		}
	}
	return reads
}

// The flag check credits a flag to the command its row, paragraph or
// section names, and to no other.
func TestDocsFlagsChecksFail(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ops.md")
	doc := "# Operating loomd\n\n### loomd serve\n\n| Flag | Meaning |\n|---|---|\n" +
		"| `--cluster-lease D` | lease of a cluster job (loomd apply) |\n\n" +
		"### Clients: loomd submit, loomd task\n\n| Command | Prints |\n|---|---|\n" +
		"| `loomd task get ID` | the task, `--json`; see `--follow` of cluster logs |\n\n" +
		"They take `--server URL`.\n\n```sh\nloomd --task-log-lines 100\nloomd plan -o plan.json spec.yaml\n```\n"
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d := &docCredits{root: NewSystemApp().newRootCmd(), flags: map[*cobra.Command]map[string]bool{}, cmds: map[*cobra.Command]bool{}}
	d.scan(t, file)
	find := func(path ...string) *cobra.Command {
		c, _, err := d.root.Find(path)
		if err != nil || c == d.root {
			t.Fatalf("no command %q", path)
		}
		return c
	}
	for _, c := range []struct {
		path    []string
		flag    string
		persist bool
		want    bool
	}{
		{[]string{"serve"}, "cluster-lease", false, true},  // the section's command, not the row's text's
		{[]string{"serve"}, "task-log-lines", false, true}, // loomd with only flags is serve
		{[]string{"serve"}, "task-log-max", false, false},  // not mentioned
		{[]string{"plan"}, "out", false, true},             // a shorthand on a command line
		{[]string{"task"}, "json", true, true},             // persistent, mentioned for task get
		{[]string{"task", "logs"}, "follow", false, false}, // mentioned for task get only
		{[]string{"task"}, "server", true, true},           // a paragraph under the section naming loomd task
		{[]string{"apply"}, "spec-max-size", false, false}, // never mentioned
	} {
		cmd := find(c.path...)
		f := cmd.LocalFlags().Lookup(c.flag)
		if f == nil {
			t.Fatalf("%s has no flag --%s", cmd.CommandPath(), c.flag)
		}
		if got := d.documented(cmd, f, c.persist); got != c.want {
			t.Errorf("%s --%s: documented %v, want %v", cmd.CommandPath(), c.flag, got, c.want)
		}
	}
	if !d.cmds[find("task", "get")] || d.cmds[find("task", "logs")] || !d.cmds[find("task")] {
		t.Errorf("commands named: task get %v (want true), task logs %v (want false), task %v (want true)",
			d.cmds[find("task", "get")], d.cmds[find("task", "logs")], d.cmds[find("task")])
	}
}

// TestDocsAPIRoutes keeps docs/api.md complete: every route the API
// serves (mux.Handle(PATH, s.route(NAME, {METHOD: handler})) in
// internal/api) must be in README.md or docs/ as "METHOD PATH", or, for
// a route of any method, as its path.
func TestDocsAPIRoutes(t *testing.T) {
	var docs strings.Builder
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	files, err := filepath.Glob("../api/*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	routes := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "Handle" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			path, _ := strconv.Unquote(lit.Value)
			route, ok := call.Args[1].(*ast.CallExpr)
			if !ok || len(route.Args) != 2 {
				return true // the console's handler
			}
			if sel, ok := route.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "route" {
				return true
			}
			methods, ok := route.Args[1].(*ast.CompositeLit)
			if !ok {
				return true
			}
			for _, elt := range methods.Elts {
				kv, ok := elt.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				k, ok := kv.Key.(*ast.BasicLit)
				if !ok {
					continue
				}
				method, _ := strconv.Unquote(k.Value)
				routes++
				want := method + " " + path
				if method == "*" {
					want = "`" + path
				}
				if !strings.Contains(docs.String(), want) {
					t.Errorf("%s: the API route %s %s is not in README.md or docs/ (docs/api.md)", fset.Position(call.Pos()), method, path)
				}
			}
			return true
		})
	}
	if routes < 20 {
		t.Errorf("found %d API routes: is the scan broken?", routes)
	}
}

var docWildcard = regexp.MustCompile("`(loom_[a-z0-9_]*)\\*`")

// checkMetricsDocumented fails for each loom_* metric family a daemon's
// /metrics serves that README.md and docs/ do not name (docs/api.md lists
// them), or cover with a documented prefix such as `loom_ssh_*`; the
// bindings' gauges are covered by `loom_<binding stat>`.
func checkMetricsDocumented(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	var docs strings.Builder
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(data)
	}
	text := docs.String()
	var prefixes []string
	for _, m := range docWildcard.FindAllStringSubmatch(text, -1) {
		prefixes = append(prefixes, m[1])
	}
	help := map[string]string{}
	families := 0
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && f[1] == "HELP" {
			help[f[2]] = strings.Join(f[3:], " ")
		}
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" || !strings.HasPrefix(f[2], "loom_") {
			continue
		}
		name := f[2]
		families++
		if regexp.MustCompile(`\b` + name + `\b`).MatchString(text) {
			continue
		}
		if strings.HasPrefix(help[name], "Binding gauge") && strings.Contains(text, "loom_<binding stat>") {
			continue
		}
		covered := false
		for _, p := range prefixes {
			covered = covered || strings.HasPrefix(name, p)
		}
		if !covered {
			t.Errorf("not documented: the metric %s (%s) is not in README.md or docs/ (docs/api.md lists the metrics)", name, help[name])
		}
	}
	if families < 5 {
		t.Errorf("found %d loom_* metric families at %s: is the scan broken?", families, url)
	}
}
