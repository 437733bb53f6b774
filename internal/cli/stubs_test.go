package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/yuin/gopher-lua/parse"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/stdlib"
)

// TestStubsAreCurrent fails when a binding's spec (or the kinds, or the
// test API) changed and the committed LuaLS stubs or the generated
// reference were not regenerated (make stubs).
func TestStubsAreCurrent(t *testing.T) {
	a := &App{Getenv: func(string) string { return "" }, Version: "test"}
	reg := a.newBindings(&globalOptions{workDir: t.TempDir()}, discardLogger())
	defer reg.Close()
	for _, f := range stubFiles(reg) {
		path := filepath.Join("..", "..", "stdlib", "types", f.name)
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, f.src) {
			t.Errorf("%s is missing or stale: run make stubs", path)
		}
	}
	ref, err := os.ReadFile(filepath.Join("..", "..", "docs", "bindings", "reference.md"))
	if err != nil || string(ref) != renderMarkdown(reg) {
		t.Errorf("docs/bindings/reference.md is missing or stale: run make stubs")
	}
}

// TestKindStubsAreCurrent fails when the kinds changed and
// stdlib/types/loom.kinds.d.lua was not regenerated (make stubs).
func TestKindStubsAreCurrent(t *testing.T) {
	path := filepath.Join("..", "..", "stdlib", "types", kindStubFile)
	got, err := os.ReadFile(path)
	if err != nil || string(got) != renderKindStubs(runtime.Kinds()) {
		t.Errorf("%s is missing or stale: run make stubs", path)
	}
}

// TestKindDocsAreCurrent fails when a kind's contract changed and
// docs/kinds/<family>.md was not regenerated (make stubs).
func TestKindDocsAreCurrent(t *testing.T) {
	for _, k := range runtime.Kinds() {
		path := filepath.Join("..", "..", "docs", "kinds", string(k.Family)+".md")
		got, err := os.ReadFile(path)
		if err != nil || string(got) != runtime.KindMarkdown(k) {
			t.Errorf("%s is missing or stale: run make stubs", path)
		}
	}
}

// TestStubsParse parses every committed stub file with a Lua parser: a
// stub with a syntax error (a parameter named after a keyword) is useless
// to a language server.
func TestStubsParse(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "stdlib", "types", "*.lua"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no stub files: %v", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parse.Parse(bytes.NewReader(src), f); err != nil {
			t.Errorf("%s does not parse: %v", f, err)
		}
	}
	if got := luaParamName("local?"); got != "local_?" {
		t.Errorf(`luaParamName("local?") = %q`, got)
	}
}

// TestSpecTypesDeclared fails when a Params, Returns or field type of any
// binding names a class that no spec declares: the editor would silently
// treat it as any.
func TestSpecTypesDeclared(t *testing.T) {
	a := &App{Getenv: func(string) string { return "" }, Version: "test"}
	reg := a.newBindings(&globalOptions{workDir: t.TempDir()}, discardLogger())
	defer reg.Close()
	// Specs may name the classes and aliases of loom.d.lua
	// (LoomAutomatorInput).
	loom := map[string]bool{}
	for _, m := range regexp.MustCompile(`---@(?:class|alias) ([A-Za-z_][A-Za-z0-9_.]*)`).FindAllStringSubmatch(string(stdlib.LoomStub()), -1) {
		loom[m[1]] = true
	}
	for _, name := range reg.Names() {
		b, _ := reg.Lookup(name)
		for _, bad := range b.Spec().UndeclaredTypes(loom) {
			t.Errorf("undeclared type in loom.%s: %s (declare it in the spec's Types, or fix the name)", name, bad)
		}
	}
	// The check itself must catch a typo.
	s := bindings.ModuleSpec{Name: "x", Types: []bindings.TypeSpec{{Name: "x.Opts"}},
		Funcs: []bindings.FuncSpec{{Name: "f", Params: []string{"o? x.Opt", "p {mode?: string}"}, Returns: []string{"x.Opts|nil"}}}}
	if got := s.UndeclaredTypes(nil); len(got) != 1 || got[0] != "x.f param o?: x.Opt" {
		t.Errorf("UndeclaredTypes = %q, want the one typo x.Opt", got)
	}
}
