// Package extract unpacks archives loomd did not make itself (a Coopr
// server's resource archives, a bundle's payload) so that nothing in them
// can reach outside the directory they are unpacked into.
//
// Every write goes through an os.Root opened on that directory, and the
// rules below are checked on the archive's own listing before anything
// could follow them:
//
//   - names are relative and hold no `..` component (even one that would
//     stay inside): an absolute name or a `..` refuses the archive;
//   - no entry is written through a link: a name whose parent is a link
//     (or a file) refuses the archive, and links are created last, after
//     every file and directory, so no write ever meets one;
//   - a symbolic link is kept only when its target, resolved the way the
//     kernel would through the archive's other links, stays inside the
//     directory (a chain such as `kit/x -> .` then `kit/x/x/x/l ->
//     ../../..` lands outside and is refused); absolute targets and loops
//     are refused;
//   - hard links, devices, FIFOs and sockets are refused, as is a name
//     that appears twice as different kinds (a link, then a directory);
//   - setuid, setgid and sticky bits are dropped; counts and sizes are
//     bounded.
//
// The caller opens the directory as an os.Root (so that the directory
// itself is not looked up by path again) and removes it when an archive is
// refused: whatever was written before the refusal is left in it.
package extract

import (
	"archive/tar"
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// Defaults of Options.
const (
	DefaultMaxEntries = 100_000
	DefaultMaxBytes   = 4 << 30
	// maxHops bounds link resolution, as Linux's MAXSYMLINKS does.
	maxHops = 40
)

// Options say what an archive may hold.
type Options struct {
	// Top, when set, is the only top-level name entries may have: a
	// Coopr resource archive holds one folder named after the resource.
	Top string
	// Links keeps symbolic links whose target resolves inside the
	// directory; without it any link refuses the archive.
	Links bool
	// Private makes every file and directory owner-only (a bundle's
	// plugin); otherwise files keep their permission bits and directories
	// get at least rwx for the owner.
	Private bool
	// MaxEntries and MaxBytes bound the number of entries and the bytes of
	// file content written (defaults DefaultMaxEntries, DefaultMaxBytes).
	MaxEntries int
	MaxBytes   int64
}

// Stats count what was unpacked.
type Stats struct {
	Files, Dirs, Links int
	Bytes              int64
}

// Error is why an archive was refused: Entry is the name as the archive
// spells it.
type Error struct {
	Entry  string
	Reason string
}

func (e *Error) Error() string {
	if e.Entry == "" {
		return e.Reason
	}
	return fmt.Sprintf("entry %q: %s", e.Entry, e.Reason)
}

// node is a name the archive has defined so far.
type node struct {
	kind   byte // 'd', 'f' or 'l'
	target string
	entry  string // the name as the archive spelled it
}

type extractor struct {
	root  *os.Root
	o     Options
	tree  map[string]*node
	links []string // clean names of links, in archive order
	st    Stats
}

func newExtractor(root *os.Root, o Options) *extractor {
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return &extractor{root: root, o: o, tree: map[string]*node{}}
}

// Tar unpacks the tar stream r into the directory root holds.
func Tar(r io.Reader, root *os.Root, o Options) (Stats, error) {
	x := newExtractor(root, o)
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return x.st, fmt.Errorf("reading the archive: %w", err)
		}
		var kind byte
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			continue // PAX defaults for what follows, not a file
		case tar.TypeDir:
			kind = 'd'
		case tar.TypeReg, tar.TypeRegA:
			kind = 'f'
		case tar.TypeSymlink:
			kind = 'l'
		case tar.TypeLink:
			return x.st, &Error{h.Name, "a hard link; archives may hold files, directories and symbolic links only"}
		case tar.TypeChar, tar.TypeBlock:
			return x.st, &Error{h.Name, "a device; archives may hold files, directories and symbolic links only"}
		case tar.TypeFifo:
			return x.st, &Error{h.Name, "a FIFO; archives may hold files, directories and symbolic links only"}
		default:
			return x.st, &Error{h.Name, fmt.Sprintf("an entry of type %q; archives may hold files, directories and symbolic links only", h.Typeflag)}
		}
		if err := x.add(h.Name, kind, fs.FileMode(h.Mode).Perm(), h.Linkname, tr); err != nil {
			return x.st, err
		}
	}
	return x.st, x.finish()
}

// Zip unpacks the zip archive zr into the directory root holds.
func Zip(zr *zip.Reader, root *os.Root, o Options) (Stats, error) {
	x := newExtractor(root, o)
	for _, zf := range zr.File {
		m := zf.Mode()
		var kind byte
		var target string
		switch {
		case m.IsDir():
			kind = 'd'
		case m.IsRegular():
			kind = 'f'
		case m&fs.ModeSymlink != 0:
			kind = 'l'
			if !x.o.Links {
				break // refused by add, before its content is read
			}
			rc, err := zf.Open()
			if err != nil {
				return x.st, &Error{zf.Name, err.Error()}
			}
			b, err := io.ReadAll(io.LimitReader(rc, 4096+1))
			rc.Close()
			if err != nil {
				return x.st, &Error{zf.Name, err.Error()}
			}
			if len(b) > 4096 {
				return x.st, &Error{zf.Name, "a link target longer than 4096 bytes"}
			}
			target = string(b)
		case m&fs.ModeDevice != 0:
			return x.st, &Error{zf.Name, "a device; archives may hold files, directories and symbolic links only"}
		case m&fs.ModeNamedPipe != 0:
			return x.st, &Error{zf.Name, "a FIFO; archives may hold files, directories and symbolic links only"}
		default:
			return x.st, &Error{zf.Name, fmt.Sprintf("a %v entry; archives may hold files, directories and symbolic links only", m.Type())}
		}
		if kind == 'f' {
			rc, err := zf.Open()
			if err != nil {
				return x.st, &Error{zf.Name, err.Error()}
			}
			err = x.add(zf.Name, kind, m.Perm(), target, rc)
			rc.Close()
			if err != nil {
				return x.st, err
			}
			continue
		}
		if err := x.add(zf.Name, kind, m.Perm(), target, nil); err != nil {
			return x.st, err
		}
	}
	return x.st, x.finish()
}

// clean checks an entry's name and returns it without "./", empty or "."
// components; "" is the archive's root itself.
func (x *extractor) clean(name string) (string, error) {
	if strings.ContainsRune(name, 0) {
		return "", &Error{name, "a NUL byte in the name"}
	}
	if strings.HasPrefix(name, "/") || strings.HasPrefix(name, `\`) {
		return "", &Error{name, "an absolute name; entries must be relative to the archive"}
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			return "", &Error{name, "a `..` in the name; entries must name what they are, not climb out of it"}
		default:
			parts = append(parts, c)
		}
	}
	clean := strings.Join(parts, "/")
	if clean != "" && x.o.Top != "" && parts[0] != x.o.Top {
		return "", &Error{name, fmt.Sprintf("outside the top-level folder %q, the only one this archive may hold", x.o.Top)}
	}
	return clean, nil
}

// add checks one entry against what the archive has defined so far and
// writes it (links are only recorded: finish creates them).
func (x *extractor) add(name string, kind byte, perm fs.FileMode, target string, content io.Reader) error {
	if x.st.Files+x.st.Dirs+len(x.links) >= x.o.MaxEntries {
		return &Error{name, fmt.Sprintf("more than %d entries in the archive", x.o.MaxEntries)}
	}
	clean, err := x.clean(name)
	if err != nil {
		return err
	}
	if clean == "" {
		if kind == 'd' {
			return nil
		}
		return &Error{name, "names the archive's root, which can only be a directory"}
	}
	// Every parent must be a directory of the archive, never a link: no
	// entry is written through one.
	parts := strings.Split(clean, "/")
	for i := 1; i < len(parts); i++ {
		p := strings.Join(parts[:i], "/")
		n := x.tree[p]
		switch {
		case n == nil:
			x.tree[p] = &node{kind: 'd', entry: p + "/"}
		case n.kind == 'l':
			return &Error{name, fmt.Sprintf("lies under the symbolic link %q; no entry is written through a link", n.entry)}
		case n.kind == 'f':
			return &Error{name, fmt.Sprintf("lies under the file %q", n.entry)}
		}
	}
	if n := x.tree[clean]; n != nil && (n.kind != 'd' || kind != 'd') {
		return &Error{name, fmt.Sprintf("appears twice in the archive (first as %q, a %s)", n.entry, kindName(n.kind))}
	}
	switch kind {
	case 'd':
		x.tree[clean] = &node{kind: 'd', entry: name}
		x.st.Dirs++
		return x.root.MkdirAll(clean, x.dirMode(perm))
	case 'l':
		if !x.o.Links {
			return &Error{name, "a symbolic link; this archive may hold files and directories only"}
		}
		if target == "" || strings.ContainsRune(target, 0) {
			return &Error{name, "a symbolic link without a valid target"}
		}
		if strings.HasPrefix(target, "/") {
			return &Error{name, fmt.Sprintf("a symbolic link to the absolute path %q; links must stay inside the archive", target)}
		}
		x.tree[clean] = &node{kind: 'l', target: target, entry: name}
		x.links = append(x.links, clean)
		return nil
	}
	x.tree[clean] = &node{kind: 'f', entry: name}
	if dir := path.Dir(clean); dir != "." {
		if err := x.root.MkdirAll(dir, x.dirMode(0o750)); err != nil {
			return &Error{name, err.Error()}
		}
	}
	// O_EXCL: never through whatever might already be at the name.
	f, err := x.root.OpenFile(clean, os.O_WRONLY|os.O_CREATE|os.O_EXCL, x.fileMode(perm))
	if err != nil {
		return &Error{name, err.Error()}
	}
	left := x.o.MaxBytes - x.st.Bytes
	n, err := io.Copy(f, io.LimitReader(content, left+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	x.st.Bytes += n
	x.st.Files++
	if err != nil {
		return &Error{name, err.Error()}
	}
	if n > left {
		return &Error{name, fmt.Sprintf("the archive unpacks to more than %d bytes", x.o.MaxBytes)}
	}
	return nil
}

func (x *extractor) dirMode(perm fs.FileMode) fs.FileMode {
	if x.o.Private {
		return 0o700
	}
	return perm | 0o700
}

func (x *extractor) fileMode(perm fs.FileMode) fs.FileMode {
	if x.o.Private {
		return perm&0o700 | 0o400
	}
	return perm
}

func kindName(k byte) string {
	switch k {
	case 'd':
		return "directory"
	case 'l':
		return "symbolic link"
	}
	return "file"
}

// finish checks every link against the whole archive, then creates them.
// Checking against the final listing (rather than as each link comes)
// also catches a link that only escapes through one defined after it.
func (x *extractor) finish() error {
	for _, l := range x.links {
		if err := x.resolve(l); err != nil {
			return err
		}
	}
	for _, l := range x.links {
		n := x.tree[l]
		if dir := path.Dir(l); dir != "." {
			if err := x.root.MkdirAll(dir, x.dirMode(0o750)); err != nil {
				return &Error{n.entry, err.Error()}
			}
		}
		if err := x.root.Symlink(n.target, l); err != nil {
			return &Error{n.entry, err.Error()}
		}
		x.st.Links++
	}
	return nil
}

// resolve follows link l's target through the archive's links as the
// kernel would, and fails if it leaves the directory or loops.
func (x *extractor) resolve(l string) error {
	n := x.tree[l]
	cur := strings.Split(l, "/")
	cur = cur[:len(cur)-1] // the link's directory
	rest := strings.Split(n.target, "/")
	via := ""
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				reason := fmt.Sprintf("a symbolic link to %q, which leaves the archive", n.target)
				if via != "" {
					reason += fmt.Sprintf(" (through the link %q)", via)
				}
				return &Error{n.entry, reason}
			}
			cur = cur[:len(cur)-1]
			continue
		}
		p := strings.Join(append(cur[:len(cur):len(cur)], c), "/")
		m := x.tree[p]
		if m == nil || m.kind != 'l' {
			if m != nil && m.kind == 'f' && len(rest) > 0 {
				return nil // through a file: it resolves nowhere
			}
			cur = append(cur, c)
			continue
		}
		hops++
		if hops > maxHops {
			return &Error{n.entry, fmt.Sprintf("a symbolic link that goes through more than %d links (a loop?)", maxHops)}
		}
		if via == "" {
			via = m.entry
		}
		if strings.HasPrefix(m.target, "/") {
			return &Error{n.entry, fmt.Sprintf("a symbolic link through %q, which is absolute", m.entry)}
		}
		rest = append(strings.Split(m.target, "/"), rest...)
	}
	return nil
}

// IsRefused reports whether err is an archive refused by these rules
// (rather than an I/O failure).
func IsRefused(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
