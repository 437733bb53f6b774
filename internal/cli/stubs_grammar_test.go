package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings"
)

// lua-language-server cannot be installed on the CI machine, so this test
// checks the committed stubs against its documented annotation grammar
// (https://luals.github.io/wiki/annotations/) instead:
//
//	---@meta [name]
//	---@class [(exact)] NAME[: PARENT[, PARENT]]
//	---@field NAME[?] TYPE [description]
//	---@param NAME[?] TYPE [description]
//	---@return TYPE [description]
//	---@alias NAME TYPE
//	---@overload TYPE, ---@type TYPE, ---@deprecated, ---@see ...
//
// Every type a stub names must be a builtin or a class or alias declared
// in some stub file, and in one file only; a class's fields must be unique; the ---@param lines
// before a function must name its parameters in order.
func TestStubsAnnotationGrammar(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "stdlib", "types", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no stub files: %v", err)
	}
	srcs := map[string][]string{}
	declared := map[string]bool{}
	classFile := map[string]string{}
	ident := `[A-Za-z_][A-Za-z0-9_.]*`
	classRe := regexp.MustCompile(`^---@class (\(exact\) )?(` + ident + `)(: ` + ident + `(, ` + ident + `)*)?$`)
	aliasRe := regexp.MustCompile(`^---@alias (` + ident + `) (.+)$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[f] = strings.Split(string(b), "\n")
		for _, line := range srcs[f] {
			if m := classRe.FindStringSubmatch(line); m != nil {
				// LuaLS merges same-named classes of different files.
				if other := classFile[m[2]]; other != "" && other != f {
					t.Errorf("class %s is declared in %s and %s: LuaLS would merge them", m[2], filepath.Base(other), filepath.Base(f))
				}
				classFile[m[2]] = f
				declared[m[2]] = true
			} else if m := aliasRe.FindStringSubmatch(line); m != nil {
				declared[m[1]] = true
			}
		}
	}
	for _, f := range files {
		name := filepath.Base(f)
		for _, e := range checkStubGrammar(srcs[f], declared) {
			t.Errorf("%s:%s", name, e)
		}
	}

	// The checker must catch what it is for.
	bad := []string{
		"---@class (strict) x.A",
		"---@field a? x.Missing doc",
		"---@field a string",
		"---@field a string",
		"---@param b {k: string",
		"function m.f(c) end",
		"---@frobnicate",
	}
	if got := checkStubGrammar(bad, map[string]bool{"x.A": true}); len(got) != 6 {
		t.Errorf("the checker found %d problems in a stub with 6:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// checkStubGrammar returns "line: problem" for each annotation of a stub
// that breaks the LuaLS grammar or names an undeclared type.
func checkStubGrammar(lines []string, declared map[string]bool) []string {
	var errs []string
	bad := func(i int, format string, args ...any) {
		errs = append(errs, fmt.Sprintf("%d: %s", i+1, fmt.Sprintf(format, args...)))
	}
	ident := `[A-Za-z_][A-Za-z0-9_.]*`
	classRe := regexp.MustCompile(`^---@class (\(exact\) )?(` + ident + `)(: ` + ident + `(, ` + ident + `)*)?$`)
	nameRe := regexp.MustCompile(`^(` + ident + `|\.\.\.|\[` + ident + `\])\??$`) // [string] is an index field
	funcRe := regexp.MustCompile(`^function ` + ident + `[.:]` + ident + `\(([^)]*)\) end$`)
	checkType := func(i int, typ string) {
		balanced := strings.Count(typ, "(") == strings.Count(typ, ")") &&
			strings.Count(typ, "{") == strings.Count(typ, "}") &&
			strings.Count(typ, "<") == strings.Count(typ, ">") &&
			strings.Count(typ, "[") == strings.Count(typ, "]")
		if !balanced || typ == "" {
			bad(i, "malformed type %q", typ)
			return
		}
		for _, n := range bindings.TypeNames(typ) {
			if !bindings.IsBuiltinType(n) && !declared[n] {
				bad(i, "undeclared type %s", n)
			}
		}
	}
	fields := map[string]bool{}
	var params []string
	// generics are the ---@generic names of the function being documented.
	generics := map[string]bool{}
	checkType = func(check func(int, string)) func(int, string) {
		return func(i int, typ string) {
			// `T` captures a type name from a string argument.
			typ = strings.ReplaceAll(typ, "`", "")
			for g := range generics {
				typ = regexp.MustCompile(`\b`+regexp.QuoteMeta(g)+`\b`).ReplaceAllString(typ, "any")
			}
			check(i, typ)
		}
	}(checkType)
	for i, line := range lines {
		if !strings.HasPrefix(line, "---@") {
			if m := funcRe.FindStringSubmatch(line); m != nil {
				var args []string
				for _, a := range strings.Split(m[1], ",") {
					if a = strings.TrimSpace(a); a != "" {
						args = append(args, a)
					}
				}
				if strings.Join(args, ",") != strings.Join(params, ",") {
					bad(i, "---@param lines name %v, the function takes %v", params, args)
				}
			}
			if !strings.HasPrefix(line, "---") {
				params = nil
				generics = map[string]bool{}
			}
			continue
		}
		tag, rest, _ := strings.Cut(strings.TrimPrefix(line, "---@"), " ")
		switch tag {
		case "generic":
			// ---@generic T[: PARENT]: T names a type until the function.
			for _, g := range strings.Split(rest, ",") {
				name, _, _ := strings.Cut(strings.TrimSpace(g), ":")
				generics[strings.TrimSpace(name)] = true
			}
			continue
		case "meta":
		case "class":
			if classRe.FindStringSubmatch(line) == nil {
				bad(i, "malformed class %q", line)
			}
			fields = map[string]bool{}
		case "alias":
			_, typ, _ := strings.Cut(rest, " ")
			checkType(i, typ)
		case "field", "param":
			name, tail, _ := strings.Cut(rest, " ")
			if !nameRe.MatchString(name) {
				bad(i, "malformed %s name %q", tag, name)
			}
			checkType(i, leadingType(tail))
			if tag == "param" {
				params = append(params, strings.TrimSuffix(name, "?"))
			} else if fields[name] {
				bad(i, "field %s declared twice", name)
			} else {
				fields[name] = true
			}
		case "return":
			checkType(i, strings.TrimSuffix(leadingType(rest), "..."))
		case "overload", "type":
			checkType(i, rest)
		case "deprecated", "nodiscard", "async", "see", "diagnostic":
		default:
			bad(i, "unknown annotation ---@%s", tag)
		}
	}
	return errs
}

// leadingType returns the type at the start of s: up to the first space
// outside brackets ("{a: string, b: number} the doc" gives the table).
func leadingType(s string) string {
	depth := 0
	for i, r := range s {
		switch r {
		case '(', '{', '<', '[':
			depth++
		case ')', '}', '>', ']':
			depth--
		case ' ':
			if depth == 0 {
				return s[:i]
			}
		}
	}
	return s
}
