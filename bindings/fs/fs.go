// Package fs is the loom.fs binding: file access confined to the hook's
// own work dir, <work>/<tenant>/<family>types/<type> (read and write), the
// plugin's own folder (read only) and the other plugins' resources the task
// names (read only), plus cross-process locks. It is how plugins keep state
// between tasks, such as an inventory's claims or a provider's SSH key
// files.
//
// Relative paths are relative to the hook's work dir. Every path must
// resolve, symlinks included, inside one of those areas (package
// localpath): os.Root enforces it.
package fs

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/localpath"
)

// maxRead caps fs.read; larger files belong in a transfer, not in a Lua string.
const maxRead = 64 << 20

// Binding is the loom.fs module. It holds no state.
type Binding struct{}

// New returns the fs binding.
func New() *Binding { return &Binding{} }

// Spec implements bindings.Binding.
func (b *Binding) Spec() bindings.ModuleSpec {
	p := []string{"path string"}
	return bindings.ModuleSpec{
		Name: "fs",
		Doc: "Files in the hook's own work dir (self.env.work_dir: read/write), the plugin folder (read only) and other plugins' " +
			"resources the task names (read only, e.g. config[\"ssh-auth\"].identityfile). Relative paths are relative to the work dir. " +
			"Paths that resolve elsewhere, by \"..\", absolute path or symlink, raise a \"permission\" error that says nothing about " +
			"what is there; I/O failures raise \"io\".",
		Types: []bindings.TypeSpec{{
			Name:  "fs.WriteOptions",
			Doc:   "fs.write's options. Other keys are ignored at run time; the stubs flag them as typos.",
			Exact: true,
			Fields: []bindings.FieldSpec{
				{Name: "mode", Type: "string", Optional: true, Doc: "octal file mode such as \"0644\" (\"0600\")"},
			},
		}},
		Funcs: []bindings.FuncSpec{
			{Name: "read", Params: p, Returns: []string{"string"}, Doc: "Returns the file's content (at most 64 MiB)."},
			{Name: "write", Params: []string{"path string", "content string", "opts? fs.WriteOptions"},
				Doc: "Writes atomically (a temp file renamed over the target), creating parent dirs. mode is octal, default \"0600\"."},
			{Name: "exists", Params: p, Returns: []string{"boolean"}, Doc: "Reports whether the path exists."},
			{Name: "remove", Params: p, Returns: []string{"boolean"}, Doc: "Removes a file or an empty dir; returns false when it did not exist."},
			{Name: "mkdir", Params: p, Doc: "Creates the dir and its parents (mode 0750)."},
			{Name: "list", Params: p, Returns: []string{"string[]"}, Doc: "Lists a dir's entries, sorted."},
			{Name: "with_lock", Params: []string{"path string", "fn function"}, Returns: []string{"any..."},
				Doc: "Holds an exclusive lock (flock) on path while fn runs, across tasks and processes; returns fn's results and " +
					"releases the lock even when fn raises or the hook times out. Waiting honours the hook deadline. Each lock held " +
					"counts against the task's descriptors (32; past them a limit error)."},
		},
	}
}

// Open implements bindings.Binding.
func (b *Binding) Open(L *lua.LState, h bindings.Host) lua.LValue {
	m := &module{h: h}
	return L.SetFuncs(L.CreateTable(0, 7), map[string]lua.LGFunction{
		"read": m.read, "write": m.write, "exists": m.exists, "remove": m.remove,
		"mkdir": m.mkdir, "list": m.list, "with_lock": m.withLock,
	})
}

type module struct{ h bindings.Host }

// resolve maps a plugin's path to the os.Root of its area and a path
// inside it, following the rule of package localpath.
func (m *module) resolve(L *lua.LState, op, p string, write bool) (*os.Root, string) {
	a, rel, err := localpath.Resolve(m.h, "fs."+op, p, write)
	if err != nil {
		bindings.Raise(L, err)
	}
	root, err := localpath.OpenRoot(a, "fs."+op)
	if err != nil {
		bindings.Raise(L, err)
	}
	return root, rel
}

func ioErr(L *lua.LState, op, p string, err error) {
	bindings.Raise(L, localpath.IOError("fs."+op, p, err))
}

func (m *module) read(L *lua.LState) int {
	p := L.CheckString(1)
	root, rel := m.resolve(L, "read", p, false)
	defer root.Close()
	st, err := root.Stat(rel)
	if err != nil {
		ioErr(L, "read", p, err)
	}
	if st.Size() > maxRead {
		bindings.Raise(L, bindings.Errorf("io", "fs.read %s: %d bytes is over the %d-byte limit", p, st.Size(), maxRead))
	}
	data, err := root.ReadFile(rel)
	if err != nil {
		ioErr(L, "read", p, err)
	}
	L.Push(lua.LString(data))
	return 1
}

func (m *module) write(L *lua.LState) int {
	p := L.CheckString(1)
	content := L.CheckString(2)
	mode := os.FileMode(0o600)
	if opts, ok := L.Get(3).(*lua.LTable); ok {
		if s, ok := opts.RawGetString("mode").(lua.LString); ok {
			v, err := strconv.ParseUint(string(s), 8, 32)
			if err != nil || v > 0o7777 {
				bindings.Raise(L, bindings.Errorf("config", "fs.write: mode %q is not an octal file mode such as \"0644\"", string(s)))
			}
			mode = os.FileMode(v)
		}
	}
	root, rel := m.resolve(L, "write", p, true)
	defer root.Close()
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o750); err != nil {
			ioErr(L, "write", p, err)
		}
	}
	tmp := rel + ".tmp-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		ioErr(L, "write", p, err)
	}
	_, werr := f.WriteString(content)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = root.Rename(tmp, rel)
	}
	if werr != nil {
		_ = root.Remove(tmp)
		ioErr(L, "write", p, werr)
	}
	return 0
}

func (m *module) exists(L *lua.LState) int {
	p := L.CheckString(1)
	root, rel := m.resolve(L, "exists", p, false)
	defer root.Close()
	_, err := root.Stat(rel)
	if localpath.Escapes(err) {
		ioErr(L, "exists", p, err)
	}
	L.Push(lua.LBool(err == nil))
	return 1
}

func (m *module) remove(L *lua.LState) int {
	p := L.CheckString(1)
	root, rel := m.resolve(L, "remove", p, true)
	defer root.Close()
	err := root.Remove(rel)
	if errors.Is(err, iofs.ErrNotExist) {
		L.Push(lua.LFalse)
		return 1
	}
	if err != nil {
		ioErr(L, "remove", p, err)
	}
	L.Push(lua.LTrue)
	return 1
}

func (m *module) mkdir(L *lua.LState) int {
	p := L.CheckString(1)
	root, rel := m.resolve(L, "mkdir", p, true)
	defer root.Close()
	if err := root.MkdirAll(rel, 0o750); err != nil {
		ioErr(L, "mkdir", p, err)
	}
	return 0
}

func (m *module) list(L *lua.LState) int {
	p := L.CheckString(1)
	root, rel := m.resolve(L, "list", p, false)
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		ioErr(L, "list", p, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		ioErr(L, "list", p, err)
	}
	sort.Strings(names)
	t := L.CreateTable(len(names), 0)
	for _, n := range names {
		t.Append(lua.LString(n))
	}
	L.Push(t)
	return 1
}

func (m *module) withLock(L *lua.LState) int {
	p := L.CheckString(1)
	fn := L.CheckFunction(2)
	root, rel := m.resolve(L, "with_lock", p, true)
	defer root.Close()
	// The lock file's descriptor is held while fn runs: it counts against
	// the task's descriptors (nested locks cannot pile up without bound).
	if sc, ok := m.h.(bindings.Scoped); ok && sc.TaskScope() != nil {
		release, err := sc.TaskScope().Hold(bindings.File, "fs.with_lock "+p, nil)
		if err != nil {
			bindings.Raise(L, err)
		}
		defer release()
	}
	if dir := filepath.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o750); err != nil {
			ioErr(L, "with_lock", p, err)
		}
	}
	f, err := root.OpenFile(rel, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		ioErr(L, "with_lock", p, err)
	}
	defer f.Close()
	ctx := m.h.Context()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			ioErr(L, "with_lock", p, err)
		}
		select {
		case <-ctx.Done():
			bindings.Raise(L, bindings.Errorf("timeout", "fs.with_lock %s: gave up waiting for the lock: %v", p, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	top := L.GetTop()
	L.Push(fn)
	if err := L.PCall(0, lua.MultRet, nil); err != nil {
		var ae *lua.ApiError
		if errors.As(err, &ae) {
			L.Error(ae.Object, 0)
		}
		panic(err)
	}
	return L.GetTop() - top
}
