module github.com/loomrt/loom/adapters/kloud

go 1.26.8

require github.com/loomrt/loom v0.0.0-00010101000000-000000000000

require (
	github.com/kr/fs v0.1.0 // indirect
	github.com/pkg/sftp v1.13.12 // indirect
	github.com/yuin/gopher-lua v1.1.2 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	layeh.com/gopher-luar v1.0.11 // indirect
)

// The adapter builds against the Loom checkout it lives in; gopher-lua is
// the repository's patched copy (a main module's replace directives do not
// apply to its dependents, so this module repeats it).
replace (
	github.com/loomrt/loom => ../..
	github.com/yuin/gopher-lua => ../../third_party/gopher-lua
)
