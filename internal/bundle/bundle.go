// Package bundle embeds a plugin folder in a copy of the loomd executable
// and reads it back: `loomd bundle` builds one self-contained binary per
// Rancher cluster driver, since Rancher downloads one binary per driver
// and starts it with the port as its only argument.
//
// The layout is the executable, unchanged, followed by the payload:
//
//	[executable][zip of the folder][manifest JSON][zip length u64][manifest length u64][magic 16 bytes]
//
// An ELF loader ignores bytes past the sections it maps, so the copy runs
// as loomd; loomd looks for the magic at start (16 bytes read from the end
// of its own file) and, when present, serves the embedded plugin. No Go
// toolchain is needed to bundle: any loomd binary for the target
// platform can be the base.
package bundle

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/loomrt/loom/internal/extract"
)

// magic ends every bundle.
const magic = "\x00loomd-bundle-1\x00"

const trailerLen = 8 + 8 + len(magic)

// maxManifest bounds the manifest read from a file's end.
const maxManifest = 64 << 10

// Manifest describes a bundle's payload.
type Manifest struct {
	// Format is the payload layout version (1).
	Format int `json:"format"`
	// Driver is the protocol the binary serves ("rancher").
	Driver string `json:"driver"`
	// Type is the plugin type served.
	Type string `json:"type"`
	// Folder is the plugin folder's name, the zip's top directory.
	Folder string `json:"folder"`
	// Loomd is the version of the loomd that built the bundle.
	Loomd string `json:"loomd,omitempty"`
	// Files counts the regular files embedded.
	Files int `json:"files"`
	// SHA256 is the hex digest of the zip; it names the unpacked copy.
	SHA256 string `json:"sha256"`
}

// ErrNoBundle is returned by Open for an executable without a payload.
var ErrNoBundle = errors.New("no embedded plugin")

// zipTime is every entry's modification time, so the same folder always
// gives the same bytes (and the same checksum for Rancher).
var zipTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// Zip writes a zip of the plugin folder dir to w, under the top directory
// folder, and returns the number of files. It takes regular files only;
// version-control directories (.git, .hg, .svn) are left out. A symlink is
// an error: the bundle must not depend on anything outside the folder.
func Zip(w io.Writer, dir, folder string) (int, error) {
	zw := zip.NewWriter(w)
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".hg", ".svn":
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file (a symlink or device): a bundle holds the folder's own files only; copy the file in instead", p)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := zip.FileInfoHeader(info)
		if err != nil {
			return err
		}
		h.Name = path.Join(folder, filepath.ToSlash(rel))
		h.Method = zip.Deflate
		h.Modified = zipTime
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(fw, f); err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		files++
		return nil
	})
	if err != nil {
		return 0, err
	}
	return files, zw.Close()
}

// Write writes the executable base (less any payload it already carries)
// followed by the payload: the zip of dir, the manifest m (its Files and
// SHA256 filled in) and the trailer. It returns the manifest written.
func Write(w io.Writer, base, dir string, m Manifest) (Manifest, error) {
	var z bytes.Buffer
	n, err := Zip(&z, dir, m.Folder)
	if err != nil {
		return m, fmt.Errorf("packing %s: %w", dir, err)
	}
	sum := sha256.Sum256(z.Bytes())
	m.Format, m.Files, m.SHA256 = 1, n, hex.EncodeToString(sum[:])
	man, err := json.Marshal(m)
	if err != nil {
		return m, err
	}
	f, err := os.Open(base)
	if err != nil {
		return m, fmt.Errorf("reading the loomd executable: %w", err)
	}
	defer f.Close()
	size, err := execSize(f)
	if err != nil {
		return m, fmt.Errorf("reading the loomd executable %s: %w", base, err)
	}
	if _, err := io.Copy(w, io.NewSectionReader(f, 0, size)); err != nil {
		return m, fmt.Errorf("copying the loomd executable %s: %w", base, err)
	}
	var tr [16]byte
	binary.BigEndian.PutUint64(tr[:8], uint64(z.Len()))
	binary.BigEndian.PutUint64(tr[8:], uint64(len(man)))
	for _, b := range [][]byte{z.Bytes(), man, tr[:], []byte(magic)} {
		if _, err := w.Write(b); err != nil {
			return m, err
		}
	}
	return m, nil
}

// execSize is the size of f without its payload, if it has one.
func execSize(f *os.File) (int64, error) {
	b, err := readPayload(f)
	switch {
	case err == nil:
		return b.base, nil
	case errors.Is(err, ErrNoBundle):
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		return fi.Size(), nil
	}
	return 0, err
}

// Has reports whether the executable at path carries a payload. It reads
// the file's last 16 bytes.
func Has(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < int64(trailerLen) {
		return false
	}
	var buf [len(magic)]byte
	if _, err := f.ReadAt(buf[:], fi.Size()-int64(len(magic))); err != nil {
		return false
	}
	return string(buf[:]) == magic
}

// Bundle is an executable's payload.
type Bundle struct {
	Manifest
	zip  []byte
	base int64
}

// Open reads and verifies the payload of the executable at path.
func Open(path string) (*Bundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readPayload(f)
	if err != nil && !errors.Is(err, ErrNoBundle) {
		return nil, fmt.Errorf("%s: %w (build it again with loomd bundle)", path, err)
	}
	return b, err
}

func readPayload(f *os.File) (*Bundle, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size < int64(trailerLen) {
		return nil, ErrNoBundle
	}
	var tr [trailerLen]byte
	if _, err := f.ReadAt(tr[:], size-int64(trailerLen)); err != nil {
		return nil, err
	}
	if string(tr[16:]) != magic {
		return nil, ErrNoBundle
	}
	zlen, mlen := binary.BigEndian.Uint64(tr[:8]), binary.BigEndian.Uint64(tr[8:16])
	if mlen > maxManifest || zlen > uint64(size) || int64(zlen+mlen) > size-int64(trailerLen) {
		return nil, errors.New("the embedded plugin's trailer is corrupt (lengths past the file's start)")
	}
	mstart := size - int64(trailerLen) - int64(mlen)
	zstart := mstart - int64(zlen)
	man := make([]byte, mlen)
	if _, err := f.ReadAt(man, mstart); err != nil {
		return nil, err
	}
	b := &Bundle{base: zstart}
	if err := json.Unmarshal(man, &b.Manifest); err != nil {
		return nil, fmt.Errorf("the embedded plugin's manifest is corrupt: %v", err)
	}
	if b.Format != 1 {
		return nil, fmt.Errorf("the embedded plugin has payload format %d; this loomd reads format 1", b.Format)
	}
	b.zip = make([]byte, zlen)
	if _, err := f.ReadAt(b.zip, zstart); err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(b.zip); hex.EncodeToString(sum[:]) != b.SHA256 {
		return nil, errors.New("the embedded plugin does not match its checksum (the file is damaged or was modified)")
	}
	return b, nil
}

// Extract writes the payload's files into the directory root holds
// (<root>/<Folder>/...), owner-only, refusing anything but regular files
// and directories under the plugin's folder (package extract's rules).
func (b *Bundle) Extract(root *os.Root) error {
	zr, err := zip.NewReader(bytes.NewReader(b.zip), int64(len(b.zip)))
	if err != nil {
		return fmt.Errorf("reading the embedded plugin: %w", err)
	}
	st, err := extract.Zip(zr, root, extract.Options{Top: b.Folder, Private: true})
	if err != nil {
		return fmt.Errorf("the embedded plugin: %w", err)
	}
	if st.Files != b.Files {
		return fmt.Errorf("the embedded plugin holds %d files, its manifest says %d (build it again with loomd bundle)", st.Files, b.Files)
	}
	return nil
}

// Install unpacks the payload once per content into the first of roots
// where that works, and returns the directory holding the plugin folder
// (<dir>/<Folder>). The copy is <root>/loomd-bundles-<uid>/<sha256 prefix>,
// reused by every later start of the same bundle: Rancher starts the
// binary once per operation and kills it, so a per-process copy would pile
// up. The parent must be a directory owned by this user and closed to
// others, so nobody else can plant Lua in it.
func (b *Bundle) Install(roots ...string) (string, error) {
	var errs []string
	for _, root := range roots {
		dir, err := b.installIn(root)
		if err == nil {
			return dir, nil
		}
		errs = append(errs, err.Error())
	}
	return "", fmt.Errorf("unpacking the embedded plugin: %s", strings.Join(errs, "; "))
}

const completeMark = ".complete"

// installIn unpacks under root, trusting no path twice: root and each of
// its ancestors must be safe from other users (safeDir), and every step
// after that works on open directory handles (os.Root), never on a path
// looked up again.
func (b *Bundle) installIn(root string) (string, error) {
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	if real, err = filepath.Abs(real); err != nil {
		return "", err
	}
	if err := safeDir(real); err != nil {
		return "", err
	}
	r, err := os.OpenRoot(real)
	if err != nil {
		return "", err
	}
	defer r.Close()
	uid := os.Getuid()
	name := fmt.Sprintf("loomd-bundles-%d", uid)
	parentPath := filepath.Join(real, name)
	if err := r.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if fi, err := r.Lstat(name); err != nil {
		return "", err
	} else if !fi.IsDir() {
		return "", fmt.Errorf("%s must be a directory owned by uid %d with mode 0700 (it is %v): remove it", parentPath, uid, fi.Mode())
	}
	parent, err := r.OpenRoot(name)
	if err != nil {
		return "", err
	}
	defer parent.Close()
	// The open directory itself, whatever its name points to now.
	fi, err := parent.Stat(".")
	if err != nil {
		return "", err
	}
	if owner := ownerOf(fi); owner != uid || fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s must be a directory owned by uid %d with mode 0700 (it is %v, owned by uid %d): remove it", parentPath, uid, fi.Mode(), owner)
	}
	sub := b.SHA256[:16]
	target := filepath.Join(parentPath, sub)
	if _, err := parent.Stat(sub + "/" + completeMark); err == nil {
		return target, nil
	}
	// A directory without the mark is the leftover of a failed unpack.
	parent.RemoveAll(sub)
	tmp := fmt.Sprintf(".unpack-%d-%d", os.Getpid(), time.Now().UnixNano())
	if err := parent.Mkdir(tmp, 0o700); err != nil {
		return "", err
	}
	if err := b.unpackInto(parent, tmp); err != nil {
		parent.RemoveAll(tmp)
		return "", err
	}
	if err := parent.Rename(tmp, sub); err != nil {
		parent.RemoveAll(tmp)
		// Another start of the same bundle won the race.
		if _, serr := parent.Stat(sub + "/" + completeMark); serr == nil {
			return target, nil
		}
		return "", err
	}
	return target, nil
}

// unpackInto extracts the payload into parent's directory dir and marks
// it complete.
func (b *Bundle) unpackInto(parent *os.Root, dir string) error {
	r, err := parent.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	if err := b.Extract(r); err != nil {
		return err
	}
	return r.WriteFile(completeMark, []byte(b.SHA256+"\n"), 0o600)
}

func ownerOf(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// safeDir checks that no other user can rename or replace dir or any
// directory above it: each belongs to root or to this user, and none is
// writable by group or others unless it is sticky (as /tmp is, where
// others cannot move what is not theirs). Otherwise another local user
// could swap what loomd unpacks for their own files between a check and
// its use (issue 20: a renameat2 exchange in a shared TMPDIR).
func safeDir(dir string) error {
	uid := os.Getuid()
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if owner := ownerOf(fi); owner != 0 && owner != uid {
			return fmt.Errorf("%s belongs to uid %d, neither root nor this user (uid %d): its owner could swap what loomd unpacks under it; set TMPDIR to a directory of your own", p, owner, uid)
		}
		if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("%s is writable by other users without the sticky bit (mode %v): another user could swap what loomd unpacks under it; set TMPDIR to a directory only you can write, or make it sticky (chmod +t %s)", p, fi.Mode(), p)
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}
