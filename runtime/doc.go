// Package runtime is Loom's embeddable plugin runtime: it loads folders of
// Lua provider and automator plugins, written in the Coopr plugin format,
// and runs Coopr tasks through their hooks in sandboxed, pooled VMs.
//
// A Go program embeds it in four calls:
//
//	rt, err := runtime.New(runtime.Options{PluginsDir: "plugins"})
//	err = rt.Load(ctx)
//	res, err := rt.Run(ctx, taskJSON)
//	rt.Close()
//
// # Plugin lifecycle
//
// Each plugin goes through these steps, written down once here:
//
//  1. Load: read the JSON definition and compile every Lua file once into
//     shared function prototypes. No plugin code runs, no side effects.
//  2. Provision: a VM runs the compiled chunks in the plugin's environment
//     and captures the entry table named by classname (or returned by main).
//  3. Validate: the entry table must exist; missing hooks are warnings.
//  4. Use: each task gets a fresh instance {task, result, env} whose
//     metatable is the entry table, and the hook runs as hook(self, input)
//     under the task's deadline.
//  5. Cleanup: a VM that timed out, hit a limit or panicked is closed and
//     never reused; pools drain when a new version replaces the old one and
//     on Close.
//
// # Isolation
//
// Hooks run in the calling process. The sandbox caps what a single builtin
// may build and every hook runs under its deadline, but there is no memory
// budget per hook: a plugin that allocates without bound exhausts the
// host process. loomd serve runs the runtime inside worker processes under
// an OS memory limit for that (internal/worker); an embedding program that
// runs untrusted plugins should do the same.
//
// # gopher-lua
//
// Loom builds against a patched gopher-lua (third_party/gopher-lua, see its
// LOOM.md: a bounded traceback and a cap on the .. operator). Go ignores a
// dependency's replace directives, so an embedding program adds
//
//	replace github.com/yuin/gopher-lua => ./third_party/gopher-lua
//
// to its own go.mod, with a copy of that directory; without it the build
// fails on lua.Options.MaxConcatSize.
package runtime
