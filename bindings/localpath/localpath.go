// Package localpath applies the one rule for local paths that plugins hand
// to bindings (loom.fs, loom.ssh key_file, known_hosts and transfers):
//
//   - the hook's own work dir, <work>/<tenant>/<family>types/<type>: read
//     and write;
//   - the plugin's folder: read only;
//   - the files of other plugin types that the task names (bindings.Grant):
//     read only.
//
// Nothing else is reachable, whatever the spelling ("..", absolute paths,
// symlinks). Errors never tell what lies outside: whether a path outside
// exists, or where a symlink points, is not in any message. The decision
// "which area" is taken on the path's spelling alone, without touching the
// disk; symlinks are then checked by opening through an os.Root of the
// area, which refuses any step that leaves it.
package localpath

import (
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/loomrt/loom/bindings"
)

// Area is a directory tree a hook may reach.
type Area struct {
	// Dir is absolute and clean.
	Dir string
	// Writable is true for the hook's work dir only.
	Writable bool
	// What names the area in error messages.
	What string
}

// Areas lists what the hook may reach: its work dir, its plugin folder,
// and the grants of the running task (a granted file's area is its folder,
// but only the file itself resolves there, see Resolve).
func Areas(h bindings.Host) []Area {
	out := []Area{{Dir: filepath.Clean(h.WorkDir()), Writable: true, What: "the hook's work dir"}}
	if d := h.PluginDir(); d != "" {
		out = append(out, Area{Dir: filepath.Clean(d), What: "the plugin folder"})
	}
	return out
}

// Resolve maps a plugin's path to the area holding it and the path
// relative to that area ("." for the area itself). Relative paths are
// relative to the work dir. It reads nothing from the disk, so a refusal
// reveals nothing. what names the caller in messages ("fs.read",
// "ssh key_file").
func Resolve(h bindings.Host, what, p string, write bool) (Area, string, error) {
	if p == "" {
		return Area{}, "", bindings.Errorf("config", "%s: empty path", what)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return Area{}, "", bindings.Errorf("config", "%s: path %q contains a NUL byte", what, p)
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(h.WorkDir(), abs)
	}
	abs = filepath.Clean(abs)
	// A path the task names: exactly, or (for a granted folder) below it.
	for _, g := range h.Grants() {
		named := g.Named
		if !filepath.IsAbs(named) {
			named = filepath.Join(h.WorkDir(), named)
		}
		named = filepath.Clean(named)
		below := ""
		switch {
		case named == abs, g.Path == abs:
		case within(g.Path, abs):
			below, _ = filepath.Rel(g.Path, abs)
		case within(named, abs):
			below, _ = filepath.Rel(named, abs)
		default:
			continue
		}
		if g.Denied != "" {
			return Area{}, "", bindings.Errorf("permission", "%s: %s", what, g.Denied)
		}
		if write {
			return Area{}, "", bindings.Errorf("permission", "%s: %s is another plugin's resource, which this task may read but never write", what, p)
		}
		if g.Root != "" && within(g.Root, g.Path) {
			// Only the named path is reachable; its links may lead
			// anywhere in the owner's work dir (activated versions).
			rel, _ := filepath.Rel(g.Root, filepath.Join(g.Path, below))
			return Area{Dir: g.Root, What: "a resource the task names"}, rel, nil
		}
		if below == "" {
			return Area{Dir: filepath.Dir(g.Path), What: "a resource the task names"}, filepath.Base(g.Path), nil
		}
		return Area{Dir: g.Path, What: "a resource the task names"}, below, nil
	}
	for _, a := range Areas(h) {
		if a.Dir != abs && !within(a.Dir, abs) {
			continue
		}
		if write && !a.Writable {
			return Area{}, "", bindings.Errorf("permission", "%s: %s is inside %s, which is read-only; write under the work dir instead", what, p, a.What)
		}
		rel, _ := filepath.Rel(a.Dir, abs)
		return a, rel, nil
	}
	return Area{}, "", outside(what, p)
}

// outside is the one error for a path that leaves the sandbox, by any
// spelling or symlink: the same words whatever is, or is not, out there.
func outside(what, p string) *bindings.Error {
	return bindings.Errorf("permission", "%s: %s is outside the hook's work dir and plugin folder (self.env.work_dir, self.env.plugin_dir); "+
		"another plugin's files are readable only when the task names them (see \"Trust model\" in docs/security.md)", what, p)
}

// within reports whether p is strictly below dir (both clean).
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// OpenRoot opens the area as an os.Root, creating a writable area (the
// work dir) when it is missing.
func OpenRoot(a Area, what string) (*os.Root, error) {
	if a.Writable {
		if err := os.MkdirAll(a.Dir, 0o750); err != nil {
			return nil, bindings.Errorf("io", "%s: creating the work dir: %v", what, err)
		}
	}
	r, err := os.OpenRoot(a.Dir)
	if err != nil {
		if errors.Is(err, iofs.ErrNotExist) {
			return nil, bindings.Errorf("io", "%s: %s does not exist", what, a.What)
		}
		return nil, bindings.Errorf("io", "%s: opening %s: %v", what, a.What, err)
	}
	return r, nil
}

// Escapes reports whether err is os.Root refusing a step that leaves the
// area (a ".." or a symlink pointing out).
func Escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "escapes from parent")
}

// IOError turns an error of an operation through an os.Root into a
// binding error that names the plugin's path only: an escape is the same
// "outside" error whatever lies beyond, a missing file inside the area is
// "does not exist", and anything else keeps the cause without the path.
func IOError(what, p string, err error) *bindings.Error {
	var pe *iofs.PathError
	switch {
	case Escapes(err):
		return outside(what, p)
	case errors.Is(err, iofs.ErrNotExist):
		return bindings.Errorf("io", "%s: %s does not exist", what, p)
	case errors.As(err, &pe):
		return bindings.Errorf("io", "%s: %s: %v", what, p, pe.Err)
	}
	return bindings.Errorf("io", "%s: %s: %v", what, p, err)
}

// Real resolves a plugin's path to a real path on disk (symlinks resolved)
// for code that needs a name rather than an open file: directory walks,
// SFTP transfers. It checks through the area's os.Root that no step leaves
// the area. For write, the file may be missing; its parent dirs are
// created.
func Real(h bindings.Host, what, p string, write bool) (string, error) {
	a, rel, err := Resolve(h, what, p, write)
	if err != nil {
		return "", err
	}
	root, err := OpenRoot(a, what)
	if err != nil {
		return "", err
	}
	defer root.Close()
	check := rel
	if write {
		if dir := filepath.Dir(rel); dir != "." {
			if err := root.MkdirAll(dir, 0o750); err != nil {
				return "", IOError(what, p, err)
			}
		}
		check = filepath.Dir(rel)
		// An existing target must not be a symlink leading out.
		if _, err := root.Stat(rel); err != nil && !errors.Is(err, iofs.ErrNotExist) {
			return "", IOError(what, p, err)
		}
	}
	if _, err := root.Stat(check); err != nil {
		return "", IOError(what, p, err)
	}
	base, err := filepath.EvalSymlinks(a.Dir)
	if err != nil {
		return "", IOError(what, p, err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(a.Dir, check))
	if err != nil {
		return "", IOError(what, p, err)
	}
	if real != base && !within(base, real) {
		// Swapped between the check and here: refuse the same way.
		return "", outside(what, p)
	}
	if write && check != rel {
		real = filepath.Join(real, filepath.Base(rel))
	}
	return real, nil
}

// ReadFile reads a file through the area's os.Root, at most max bytes.
func ReadFile(h bindings.Host, what, p string, max int64) ([]byte, error) {
	a, rel, err := Resolve(h, what, p, false)
	if err != nil {
		return nil, err
	}
	root, err := OpenRoot(a, what)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		return nil, IOError(what, p, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, IOError(what, p, err)
	}
	if !st.Mode().IsRegular() {
		return nil, bindings.Errorf("io", "%s: %s is not a regular file", what, p)
	}
	if st.Size() > max {
		return nil, bindings.Errorf("io", "%s: %s is %d bytes, over the %d-byte limit", what, p, st.Size(), max)
	}
	b := make([]byte, st.Size())
	n, err := f.ReadAt(b, 0)
	if err != nil && n != len(b) {
		return nil, IOError(what, p, err)
	}
	return b[:n], nil
}
