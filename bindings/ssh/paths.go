package ssh

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/loomrt/loom/bindings"
)

// resolveLocal turns a plugin-supplied local path into a real path that
// lies inside the work root or the plugin dir, after every symlink is
// resolved. Relative paths are relative to the hook's work dir. With
// forWrite, the file itself may be missing: its nearest existing ancestor
// must resolve inside a root, and missing parent dirs are created.
func resolveLocal(h bindings.Host, p string, forWrite bool) (string, error) {
	if p == "" {
		return "", bindings.Errorf("config", "empty local path")
	}
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(h.WorkDir(), abs)
	}
	abs = filepath.Clean(abs)
	real, err := realPath(abs, forWrite)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", bindings.Errorf("io", "local path %q does not exist", p)
		}
		return "", bindings.Errorf("io", "local path %q: %v", p, err)
	}
	if !insideRoots(h, real) {
		return "", bindings.Errorf("permission", "local path %q resolves to %q, outside the work root and the plugin dir", p, real)
	}
	if forWrite {
		if err := os.MkdirAll(filepath.Dir(real), 0o755); err != nil {
			return "", bindings.Errorf("io", "creating the parent dir of %q: %v", p, err)
		}
		// A concurrent symlink swap could have moved the parent: check again.
		parent, err := filepath.EvalSymlinks(filepath.Dir(real))
		if err != nil || !insideRoots(h, filepath.Join(parent, filepath.Base(real))) {
			return "", bindings.Errorf("permission", "local path %q escapes the work root", p)
		}
		real = filepath.Join(parent, filepath.Base(real))
	}
	return real, nil
}

// realPath resolves symlinks. For a missing path (forWrite), it resolves
// the nearest existing ancestor and appends the rest.
func realPath(abs string, forWrite bool) (string, error) {
	real, err := filepath.EvalSymlinks(abs)
	if err == nil || !forWrite || !errors.Is(err, fs.ErrNotExist) {
		return real, err
	}
	var rest []string
	dir := abs
	for {
		rest = append([]string{filepath.Base(dir)}, rest...)
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", err
		}
		dir = parent
		r, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
	}
}

func insideRoots(h bindings.Host, real string) bool {
	for _, root := range []string{h.WorkRoot(), h.PluginDir()} {
		if root == "" {
			continue
		}
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		rel, err := filepath.Rel(r, real)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
