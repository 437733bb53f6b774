// Package stdlib holds Loom's Lua-side library, embedded in the binary:
// the Provider and Automator base tables that plugins extend, required as
// require("loom").
//
// Modules live in lua/<name>.lua; a module named "loom.x" is lua/loom/x.lua
// and "loom" itself is lua/loom.lua. The runtime compiles each once.
package stdlib

import (
	"embed"
	"io/fs"
	"path"
	"strings"
)

//go:embed lua
var files embed.FS

//go:embed types/loom.d.lua
var loomStub []byte

// LoomStub returns the LuaLS stub of require("loom") (types/loom.d.lua),
// which loomd new writes beside the bindings' stubs.
func LoomStub() []byte { return loomStub }

// Source returns the source of a stdlib module ("loom", "loom.x") and
// whether it exists.
func Source(module string) ([]byte, bool) {
	b, err := files.ReadFile("lua/" + strings.ReplaceAll(module, ".", "/") + ".lua")
	return b, err == nil
}

// Modules lists the stdlib module names.
func Modules() []string {
	var out []string
	_ = fs.WalkDir(files, "lua", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".lua") {
			out = append(out, strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(p, "lua/"), path.Ext(p)), "/", "."))
		}
		return nil
	})
	return out
}
