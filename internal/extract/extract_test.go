package extract

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// member is one entry of a test archive.
type member struct {
	kind         byte // 'd', 'f', 'l' (symlink), 'h' (hard link), 'c' (device), 'p' (fifo)
	name, target string
}

func (m member) String() string { return fmt.Sprintf("%c %s %s", m.kind, m.name, m.target) }

// tarOf builds a tar stream of ms; a file's content is its name.
func tarOf(t testing.TB, ms []member) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Linkname: m.target, Mode: 0o755, Format: tar.FormatPAX}
		switch m.kind {
		case 'd':
			h.Typeflag = tar.TypeDir
		case 'f':
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o4755, int64(len(m.name))
		case 'l':
			h.Typeflag = tar.TypeSymlink
		case 'h':
			h.Typeflag = tar.TypeLink
		case 'c':
			h.Typeflag = tar.TypeChar
		case 'p':
			h.Typeflag = tar.TypeFifo
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		if m.kind == 'f' {
			tw.Write([]byte(m.name))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipOf builds a zip of ms (files, directories and symlinks).
func zipOf(t testing.TB, ms []member) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, m := range ms {
		h := &zip.FileHeader{Name: m.name, Method: zip.Store}
		body := m.name
		switch m.kind {
		case 'd':
			h.SetMode(fs.ModeDir | 0o755)
			body = ""
		case 'f':
			h.SetMode(0o644)
		case 'l':
			h.SetMode(fs.ModeSymlink | 0o777)
			body = m.target
		case 'c':
			h.SetMode(fs.ModeDevice | fs.ModeCharDevice | 0o644)
		case 'p':
			h.SetMode(fs.ModeNamedPipe | 0o644)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandbox is a directory to unpack into, inside a parent that also holds
// a sibling "outside" directory: nothing may ever appear there.
type sandbox struct {
	parent, dir, outside string
	root                 *os.Root
}

func newSandbox(t testing.TB) sandbox {
	p := t.TempDir()
	s := sandbox{parent: p, dir: filepath.Join(p, "in", "stage"), outside: filepath.Join(p, "outside")}
	for _, d := range []string{s.dir, s.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if s.root, err = os.OpenRoot(s.dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.root.Close() })
	return s
}

// check asserts the invariants whatever the archive: nothing outside the
// directory changed, and every link in it resolves inside (os.Root, an
// independent implementation of the rule, refuses to follow any other).
func (s sandbox) check(t testing.TB) {
	t.Helper()
	if ents, _ := os.ReadDir(s.outside); len(ents) > 0 {
		t.Fatalf("the archive wrote %s outside the directory", filepath.Join(s.outside, ents[0].Name()))
	}
	if ents, _ := os.ReadDir(s.parent); len(ents) != 2 {
		t.Fatalf("the archive wrote next to the directory: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Dir(s.dir)); len(ents) != 1 {
		t.Fatalf("the archive wrote next to the directory: %v", ents)
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(s.dir, p)
		fi, _ := os.Lstat(p)
		switch {
		case fi == nil:
		case fi.Mode()&fs.ModeSymlink != 0:
			if _, err := root.Stat(rel); err != nil && strings.Contains(err.Error(), "escapes") {
				target, _ := os.Readlink(p)
				t.Fatalf("the link %s -> %s leads outside the directory", rel, target)
			}
		case fi.Mode().IsRegular():
			if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
				t.Fatalf("%s kept mode %v", rel, fi.Mode())
			}
		case !fi.IsDir():
			t.Fatalf("%s is a %v", rel, fi.Mode().Type())
		}
		return nil
	})
}

// refused are archives that must be refused, each with what the error
// says. Several hold links that look inside, one at a time, but are not.
var refused = []struct {
	name    string
	members []member
	says    string
}{
	{"the issue's chained links", []member{
		{'d', "kit/", ""}, {'l', "kit/x", "."}, {'l', "kit/x/x/x/l", "../../.."}, {'f', "kit/x/x/x/l/pwned", ""}}, "lies under the symbolic link"},
	{"chained links, the file through the deepest link", []member{
		{'l', "kit/x", "."}, {'l', "kit/l", "x/x/x/../../../.."}, {'f', "kit/l/outside/pwned", ""}}, "lies under the symbolic link"},
	{"chained links, the link alone", []member{
		{'l', "kit/x", "."}, {'l', "kit/l", "x/x/x/../../../.."}}, "leaves the archive (through the link \"kit/x\")"},
	{"a link to a link that climbs", []member{
		{'l', "kit/a", "b/../.."}, {'l', "kit/b", "."}}, "leaves the archive (through the link \"kit/b\")"},
	{"a link that only escapes through a later one", []member{
		{'d', "kit/deep/deeper/", ""}, {'l', "kit/deep/deeper/a", "b/../../../.."}, {'l', "kit/deep/deeper/b", "../.."}}, "leaves the archive"},
	{"a link, then a directory of the same name", []member{
		{'l', "kit/d", "../../outside"}, {'d', "kit/d/", ""}, {'f', "kit/d/pwned", ""}}, "appears twice"},
	{"a link inside, then a directory of the same name", []member{
		{'d', "kit/in/", ""}, {'l', "kit/d", "in"}, {'d', "kit/d/", ""}}, "appears twice"},
	{"a directory, then a link of the same name", []member{
		{'d', "kit/d/", ""}, {'l', "kit/d", "../../outside"}}, "appears twice"},
	{"a file, then a link of the same name", []member{
		{'f', "kit/f", ""}, {'l', "kit/f", "../../outside/f"}}, "appears twice"},
	{"a file through a link that stays inside", []member{
		{'d', "kit/in/", ""}, {'l', "kit/s", "in"}, {'f', "kit/s/f", ""}}, "lies under the symbolic link"},
	{"a file under a file", []member{{'f', "kit/f", ""}, {'f', "kit/f/g", ""}}, "lies under the file"},
	{"dot-dot climbing out", []member{{'f', "kit/../../outside/pwned", ""}}, "`..`"},
	{"dot-dot staying inside", []member{{'f', "kit/a/../b", ""}}, "`..`"},
	{"dot-dot alone", []member{{'f', "..", ""}}, "`..`"},
	{"absolute name", []member{{'f', "/tmp/pwned", ""}}, "absolute"},
	{"backslash-absolute name", []member{{'f', `\tmp\pwned`, ""}}, "absolute"},
	{"absolute link", []member{{'l', "kit/abs", "/etc"}}, "absolute"},
	{"a link loop", []member{{'l', "kit/a", "b"}, {'l', "kit/b", "a"}}, "loop"},
	{"a link climbing from the top", []member{{'l', "kit/up", "../.."}}, "leaves the archive"},
	{"hard link", []member{{'f', "kit/f", ""}, {'h', "kit/h", "kit/f"}}, "hard link"},
	{"hard link outside", []member{{'h', "kit/h", "/etc/passwd"}}, "hard link"},
	{"device", []member{{'c', "kit/null", ""}}, "device"},
	{"fifo", []member{{'p', "kit/p", ""}}, "FIFO"},
	{"another top-level folder", []member{{'f', "kit/ok", ""}, {'f', "other/f", ""}}, "top-level folder"},
}

func TestTarRefused(t *testing.T) {
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t)
			_, err := Tar(bytes.NewReader(tarOf(t, c.members)), s.root, Options{Top: "kit", Links: true})
			s.check(t)
			if err == nil {
				t.Fatalf("accepted %v", c.members)
			}
			if !IsRefused(err) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
		})
	}
}

func TestZipRefused(t *testing.T) {
	for _, c := range refused {
		if strings.ContainsAny(string(c.members[len(c.members)-1].kind), "h") {
			continue // zip has no hard links
		}
		t.Run(c.name, func(t *testing.T) {
			s := newSandbox(t)
			b := zipOf(t, c.members)
			zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Zip(zr, s.root, Options{Top: "kit", Links: true})
			s.check(t)
			if err == nil {
				t.Fatalf("accepted %v", c.members)
			}
			if !IsRefused(err) {
				t.Errorf("error %q is not a refusal", err)
			}
		})
	}
}

// TestAccepted: what real archives hold unpacks, links with `..` that
// stay inside included, and modes lose their setuid bits.
func TestAccepted(t *testing.T) {
	ms := []member{
		{'d', "./kit/", ""}, {'d', "kit/lib/", ""}, {'f', "kit/lib/tool.sh", ""},
		{'l', "kit/bin/tool", "../lib/tool.sh"}, {'l', "kit/current", "lib"}, {'l', "kit/again", "current/tool.sh"},
		{'l', "kit/self", "."}, {'l', "kit/top", ".."}, {'l', "kit/dangling", "nowhere/file"},
		{'d', "kit/lib/", ""}, // a directory twice is fine
	}
	s := newSandbox(t)
	st, err := Tar(bytes.NewReader(tarOf(t, ms)), s.root, Options{Top: "kit", Links: true})
	s.check(t)
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != 1 || st.Links != 6 {
		t.Errorf("stats %+v", st)
	}
	for _, p := range []string{"kit/bin/tool", "kit/again", "kit/self/lib/tool.sh", "kit/top/kit/lib/tool.sh"} {
		if b, err := os.ReadFile(filepath.Join(s.dir, p)); err != nil || string(b) != "kit/lib/tool.sh" {
			t.Errorf("%s: %q %v", p, b, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(s.dir, "kit/lib/tool.sh")); err != nil || fi.Mode() != 0o755 {
		t.Errorf("mode %v %v, want 0755 without setuid", fi.Mode(), err)
	}
}

func TestNoLinks(t *testing.T) {
	s := newSandbox(t)
	_, err := Tar(bytes.NewReader(tarOf(t, []member{{'l', "kit/a", "b"}})), s.root, Options{})
	if err == nil || !strings.Contains(err.Error(), "files and directories only") {
		t.Errorf("err = %v", err)
	}
}

func TestBounds(t *testing.T) {
	s := newSandbox(t)
	ms := []member{{'f', "a", ""}, {'f', "b", ""}, {'f', "c", ""}}
	if _, err := Tar(bytes.NewReader(tarOf(t, ms)), s.root, Options{MaxEntries: 2}); err == nil || !strings.Contains(err.Error(), "more than 2 entries") {
		t.Errorf("entries: %v", err)
	}
	s = newSandbox(t)
	big := []member{{'f', strings.Repeat("n", 40), ""}}
	if _, err := Tar(bytes.NewReader(tarOf(t, big)), s.root, Options{MaxBytes: 10}); err == nil || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Errorf("bytes: %v", err)
	}
}
