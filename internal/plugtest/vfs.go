package plugtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
)

// vnode is one entry of a fake host's filesystem.
type vnode struct {
	mode  fs.FileMode // type bits and permissions
	data  []byte
	link  string // symlink target
	owner string
	group string
	mtime time.Time
}

// vfs is the in-memory filesystem of an SSH fake host: what uploads
// write and downloads read, over SFTP or the binding's tar and sudo
// paths. Paths are absolute and clean; "/" always exists.
type vfs struct {
	mu    sync.Mutex
	nodes map[string]*vnode
}

// baseDirs exist on every fake host, so uploads to the usual places work
// without seeding; anything deeper must be made (as on a real host).
var baseDirs = []string{"/", "/tmp", "/etc", "/root", "/home", "/var", "/var/tmp", "/var/lib", "/var/log", "/usr", "/usr/local", "/usr/local/bin", "/opt", "/srv", "/run"}

func newVFS() *vfs {
	v := &vfs{nodes: map[string]*vnode{}}
	now := time.Now()
	for _, d := range baseDirs {
		mode := fs.ModeDir | 0o755
		if d == "/tmp" || d == "/var/tmp" {
			mode = fs.ModeDir | fs.ModeSticky | 0o777
		}
		v.nodes[d] = &vnode{mode: mode, owner: "root", group: "root", mtime: now}
	}
	return v
}

func cleanAbs(p string) string { return path.Clean("/" + p) }

// resolve follows symlinks in p (all components); it returns the final
// path and its node (nil when absent).
func (v *vfs) resolve(p string, followLast bool) (string, *vnode, error) {
	p = cleanAbs(p)
	for hops := 0; hops < 40; hops++ {
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		cur := "/"
		restarted := false
		for i, part := range parts {
			if part == "" {
				continue
			}
			next := path.Join(cur, part)
			n := v.nodes[next]
			last := i == len(parts)-1
			if n != nil && n.mode&fs.ModeSymlink != 0 && (!last || followLast) {
				target := n.link
				if !path.IsAbs(target) {
					target = path.Join(cur, target)
				}
				p = cleanAbs(path.Join(append([]string{target}, parts[i+1:]...)...))
				restarted = true
				break
			}
			if n == nil {
				if last {
					return next, nil, nil
				}
				return next, nil, &fs.PathError{Op: "lookup", Path: next, Err: fs.ErrNotExist}
			}
			if !last && !n.mode.IsDir() {
				return next, nil, &fs.PathError{Op: "lookup", Path: next, Err: errors.New("not a directory")}
			}
			cur = next
		}
		if !restarted {
			return p, v.nodes[p], nil
		}
	}
	return p, nil, &fs.PathError{Op: "lookup", Path: p, Err: errors.New("too many levels of symbolic links")}
}

// parentDir checks that p's parent exists and is a directory.
func (v *vfs) parentDir(p string) error {
	dir := path.Dir(p)
	_, n, err := v.resolve(dir, true)
	if err != nil {
		return err
	}
	if n == nil {
		return &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	if !n.mode.IsDir() {
		return &fs.PathError{Op: "open", Path: p, Err: errors.New("not a directory")}
	}
	return nil
}

// mkdirAll makes p and its parents, as mkdir -p.
func (v *vfs) mkdirAll(p, owner string) error {
	p = cleanAbs(p)
	cur := "/"
	for _, part := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
		if part == "" {
			continue
		}
		cur = path.Join(cur, part)
		rp, n, err := v.resolve(cur, true)
		if err != nil {
			return err
		}
		if n == nil {
			v.nodes[rp] = &vnode{mode: fs.ModeDir | 0o755, owner: owner, group: owner, mtime: time.Now()}
			continue
		}
		if !n.mode.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: cur, Err: fs.ErrExist}
		}
		cur = rp
	}
	return nil
}

// put writes a file (parents made), as a test seeds one.
func (v *vfs) put(p string, data []byte, mode fs.FileMode, owner, group string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	p = cleanAbs(p)
	if err := v.mkdirAll(path.Dir(p), "root"); err != nil {
		return err
	}
	rp, n, err := v.resolve(p, true)
	if err != nil {
		return err
	}
	if n != nil && n.mode.IsDir() {
		return &fs.PathError{Op: "write", Path: p, Err: errors.New("is a directory")}
	}
	v.nodes[rp] = &vnode{mode: mode.Perm(), data: append([]byte(nil), data...), owner: owner, group: group, mtime: time.Now()}
	return nil
}

// get returns a copy of a file's node (following symlinks), or nil.
func (v *vfs) get(p string) *vnode {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, n, err := v.resolve(p, true)
	if err != nil || n == nil {
		return nil
	}
	c := *n
	c.data = append([]byte(nil), n.data...)
	return &c
}

// lget is get without following a final symlink.
func (v *vfs) lget(p string) *vnode {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, n, err := v.resolve(p, false)
	if err != nil || n == nil {
		return nil
	}
	c := *n
	return &c
}

// remove deletes a file or link (not a directory), as rm -f.
func (v *vfs) remove(p string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	rp, n, err := v.resolve(p, false)
	if err != nil {
		return err
	}
	if n == nil {
		return &fs.PathError{Op: "remove", Path: p, Err: fs.ErrNotExist}
	}
	if n.mode.IsDir() {
		return &fs.PathError{Op: "remove", Path: p, Err: errors.New("is a directory")}
	}
	delete(v.nodes, rp)
	return nil
}

// rename moves a file, link or tree; over an existing target only when
// replace (POSIX rename; SFTP's plain rename refuses).
func (v *vfs) rename(from, to string, replace bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	rf, n, err := v.resolve(from, false)
	if err != nil {
		return err
	}
	if n == nil {
		return &fs.PathError{Op: "rename", Path: from, Err: fs.ErrNotExist}
	}
	if err := v.parentDir(cleanAbs(to)); err != nil {
		return err
	}
	rt, old, err := v.resolve(to, false)
	if err != nil {
		return err
	}
	if old != nil {
		if !replace {
			return &fs.PathError{Op: "rename", Path: to, Err: fs.ErrExist}
		}
		if old.mode.IsDir() != n.mode.IsDir() {
			return &fs.PathError{Op: "rename", Path: to, Err: errors.New("file type mismatch")}
		}
	}
	if rf == rt {
		return nil
	}
	moved := map[string]*vnode{}
	for p, x := range v.nodes {
		if p == rf || strings.HasPrefix(p, rf+"/") {
			moved[rt+strings.TrimPrefix(p, rf)] = x
			delete(v.nodes, p)
		}
	}
	for p, x := range moved {
		v.nodes[p] = x
	}
	return nil
}

// chown sets owner and group (empty keeps) on p, and on everything under
// it when recursive.
func (v *vfs) chown(p, owner, group string, recursive bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	rp, n, err := v.resolve(p, true)
	if err != nil {
		return err
	}
	if n == nil {
		return &fs.PathError{Op: "chown", Path: p, Err: fs.ErrNotExist}
	}
	for q, x := range v.nodes {
		if q == rp || (recursive && strings.HasPrefix(q, rp+"/")) {
			if owner != "" {
				x.owner = owner
			}
			if group != "" {
				x.group = group
			}
		}
	}
	return nil
}

// list returns the paths of files and symlinks under prefix (all when
// "" or "/"), sorted; with dirs, directories too.
func (v *vfs) list(prefix string, dirs bool) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	prefix = cleanAbs(prefix)
	var out []string
	for p, n := range v.nodes {
		if n.mode.IsDir() && !dirs {
			continue
		}
		if prefix == "/" || p == prefix || strings.HasPrefix(p, prefix+"/") {
			if dirs && contains(baseDirs, p) {
				continue
			}
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// fileInfo is an os.FileInfo of a node, for SFTP.
type fileInfo struct {
	name string
	n    vnode
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return int64(len(fi.n.data)) }
func (fi *fileInfo) Mode() fs.FileMode  { return fi.n.mode }
func (fi *fileInfo) ModTime() time.Time { return fi.n.mtime }
func (fi *fileInfo) IsDir() bool        { return fi.n.mode.IsDir() }
func (fi *fileInfo) Sys() any           { return nil }

// sftpFS serves a vfs over SFTP (pkg/sftp's request server) as one
// login user, recording transfers.
type sftpFS struct {
	v      *vfs
	user   string
	record func(kind, p string, n int)
}

func (s *sftpFS) handlers() sftp.Handlers {
	return sftp.Handlers{FileGet: s, FilePut: s, FileCmd: s, FileList: s}
}

// Fileread implements sftp.FileReader.
func (s *sftpFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	n := s.v.get(r.Filepath)
	if n == nil {
		return nil, os.ErrNotExist
	}
	if n.mode.IsDir() {
		return nil, errors.New("is a directory")
	}
	s.record("download", cleanAbs(r.Filepath), len(n.data))
	return bytes.NewReader(n.data), nil
}

// vwriter writes into a node and records the upload when closed.
type vwriter struct {
	s    *sftpFS
	p    string
	mu   sync.Mutex
	data []byte
}

func (w *vwriter) WriteAt(b []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if end := int(off) + len(b); end > len(w.data) {
		w.data = append(w.data, make([]byte, end-len(w.data))...)
	}
	copy(w.data[off:], b)
	return len(b), nil
}

// Close stores the data (the file was created at open).
func (w *vwriter) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.s.v.mu.Lock()
	_, n, _ := w.s.v.resolve(w.p, true)
	if n != nil {
		n.data = w.data
		n.mtime = time.Now()
	}
	w.s.v.mu.Unlock()
	w.s.record("upload", w.p, len(w.data))
	return nil
}

// Filewrite implements sftp.FileWriter: the file is created (or checked)
// at open, as open(2) does.
func (s *sftpFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	fl := r.Pflags()
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	p := cleanAbs(r.Filepath)
	rp, n, err := v.resolve(p, true)
	if err != nil {
		return nil, err
	}
	switch {
	case n != nil && fl.Creat && fl.Excl:
		return nil, os.ErrExist
	case n != nil && n.mode.IsDir():
		return nil, errors.New("is a directory")
	case n == nil && !fl.Creat:
		return nil, os.ErrNotExist
	case n == nil:
		if err := v.parentDir(rp); err != nil {
			return nil, os.ErrNotExist
		}
		n = &vnode{mode: 0o644, owner: s.user, group: s.user, mtime: time.Now()}
		v.nodes[rp] = n
	}
	w := &vwriter{s: s, p: rp}
	if !fl.Trunc {
		w.data = append([]byte(nil), n.data...)
	}
	if fl.Trunc {
		n.data = nil
	}
	return w, nil
}

// Filecmd implements sftp.FileCmder.
func (s *sftpFS) Filecmd(r *sftp.Request) error {
	v := s.v
	switch r.Method {
	case "Setstat":
		v.mu.Lock()
		defer v.mu.Unlock()
		_, n, err := v.resolve(r.Filepath, true)
		if err != nil {
			return err
		}
		if n == nil {
			return os.ErrNotExist
		}
		fl, a := r.AttrFlags(), r.Attributes()
		if fl.Permissions {
			n.mode = n.mode.Type() | fs.FileMode(a.Mode&0o7777).Perm() | fs.FileMode(a.Mode)&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
		}
		if fl.Size && int(a.Size) < len(n.data) {
			n.data = n.data[:a.Size]
		}
		if fl.Acmodtime {
			n.mtime = time.Unix(int64(a.Mtime), 0)
		}
		return nil
	case "Rename":
		return v.rename(r.Filepath, r.Target, false)
	case "Rmdir":
		v.mu.Lock()
		defer v.mu.Unlock()
		rp, n, err := v.resolve(r.Filepath, false)
		if err != nil {
			return err
		}
		if n == nil || !n.mode.IsDir() {
			return os.ErrNotExist
		}
		for p := range v.nodes {
			if strings.HasPrefix(p, rp+"/") {
				return errors.New("directory not empty")
			}
		}
		delete(v.nodes, rp)
		return nil
	case "Remove":
		return v.remove(r.Filepath)
	case "Mkdir":
		return s.create(r.Filepath, &vnode{mode: fs.ModeDir | 0o755})
	case "Symlink":
		// pkg/sftp: Filepath is the target, Target the link's path.
		return s.create(r.Target, &vnode{mode: fs.ModeSymlink | 0o777, link: r.Filepath})
	}
	return fmt.Errorf("the SSH fake's SFTP server does not support %s", r.Method)
}

// create adds a new dir or link at p, owned by the login user, as
// mkdir(2) and symlink(2) do: p must not exist, its parent must.
func (s *sftpFS) create(p string, n *vnode) error {
	v := s.v
	v.mu.Lock()
	defer v.mu.Unlock()
	rp, old, err := v.resolve(p, false)
	if err != nil {
		return err
	}
	if old != nil {
		return os.ErrExist
	}
	if err := v.parentDir(rp); err != nil {
		return os.ErrNotExist
	}
	n.owner, n.group, n.mtime = s.user, s.user, time.Now()
	v.nodes[rp] = n
	return nil
}

// PosixRename implements sftp.PosixRenameFileCmder.
func (s *sftpFS) PosixRename(r *sftp.Request) error {
	return s.v.rename(r.Filepath, r.Target, true)
}

type listerAt []os.FileInfo

func (l listerAt) ListAt(ls []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(ls, l[off:])
	if n < len(ls) {
		return n, io.EOF
	}
	return n, nil
}

// Filelist implements sftp.FileLister.
func (s *sftpFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	v := s.v
	switch r.Method {
	case "Stat":
		n := v.get(r.Filepath)
		if n == nil {
			return nil, os.ErrNotExist
		}
		return listerAt{&fileInfo{name: path.Base(r.Filepath), n: *n}}, nil
	case "List":
		v.mu.Lock()
		defer v.mu.Unlock()
		rp, n, err := v.resolve(r.Filepath, true)
		if err != nil {
			return nil, err
		}
		if n == nil || !n.mode.IsDir() {
			return nil, os.ErrNotExist
		}
		var out listerAt
		for p, x := range v.nodes {
			if p != rp && path.Dir(p) == rp {
				out = append(out, &fileInfo{name: path.Base(p), n: *x})
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
		return out, nil
	case "Readlink":
		n := v.lget(r.Filepath)
		if n == nil || n.mode&fs.ModeSymlink == 0 {
			return nil, os.ErrNotExist
		}
		return listerAt{&fileInfo{name: n.link, n: *n}}, nil
	}
	return nil, fmt.Errorf("the SSH fake's SFTP server does not support %s", r.Method)
}

// Lstat implements sftp.LstatFileLister.
func (s *sftpFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	n := s.v.lget(r.Filepath)
	if n == nil {
		return nil, os.ErrNotExist
	}
	return listerAt{&fileInfo{name: path.Base(r.Filepath), n: *n}}, nil
}

// Readlink implements sftp.ReadlinkFileLister.
func (s *sftpFS) Readlink(p string) (string, error) {
	n := s.v.lget(p)
	if n == nil || n.mode&fs.ModeSymlink == 0 {
		return "", os.ErrNotExist
	}
	return n.link, nil
}
