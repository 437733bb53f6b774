package bundle

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func plugin(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "myplug")
	for name, body := range map[string]string{"myplug.json": "{}", "myplug.lua": "return {}", "lib/helper.lua": "return 1"} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dir, ".git"), 0o755)
	os.WriteFile(filepath.Join(dir, ".git", "HEAD"), []byte("ref"), 0o644)
	return dir
}

func write(t *testing.T, base, dir, out string) Manifest {
	t.Helper()
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := Write(f, base, dir, Manifest{Driver: "rancher", Type: "t", Folder: "myplug"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRoundTrip(t *testing.T) {
	tmp := t.TempDir()
	base := filepath.Join(tmp, "loomd")
	exe := bytes.Repeat([]byte("ELF!"), 1000)
	os.WriteFile(base, exe, 0o755)
	if Has(base) {
		t.Fatal("a plain executable has a payload")
	}
	if _, err := Open(base); err != ErrNoBundle {
		t.Fatalf("Open(plain) = %v, want ErrNoBundle", err)
	}
	dir := plugin(t)
	out := filepath.Join(tmp, "out")
	m := write(t, base, dir, out)
	if m.Files != 3 || m.Format != 1 || len(m.SHA256) != 64 {
		t.Fatalf("manifest %+v", m)
	}
	data, _ := os.ReadFile(out)
	if !bytes.HasPrefix(data, exe) || !Has(out) {
		t.Fatal("the executable is not kept as is, or the payload is not found")
	}
	b, err := Open(out)
	if err != nil || b.Type != "t" || b.SHA256 != m.SHA256 {
		t.Fatalf("Open: %+v, %v", b, err)
	}
	// Bundling from a bundle replaces its payload: the same bytes.
	out2 := filepath.Join(tmp, "out2")
	write(t, out, dir, out2)
	if data2, _ := os.ReadFile(out2); !bytes.Equal(data, data2) {
		t.Fatal("a bundle of a bundle differs")
	}
	root := filepath.Join(tmp, "root")
	os.Mkdir(root, 0o755)
	got, err := b.Install(filepath.Join(tmp, "missing", "\x00bad"), root)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := os.ReadFile(filepath.Join(got, "myplug", "lib", "helper.lua")); err != nil || string(h) != "return 1" {
		t.Fatalf("unpacked helper.lua: %q, %v", h, err)
	}
	if _, err := os.Stat(filepath.Join(got, "myplug", ".git")); err == nil {
		t.Fatal(".git was bundled")
	}
	// A second start reuses the copy.
	if again, err := b.Install(root); err != nil || again != got {
		t.Fatalf("second Install: %s, %v (first %s)", again, err, got)
	}
	// A parent others may write to is refused.
	os.Chmod(filepath.Dir(got), 0o777)
	if _, err := b.Install(root); err == nil || !strings.Contains(err.Error(), "mode 0700") {
		t.Fatalf("Install under a shared directory: %v", err)
	}

	data[b.base+10] ^= 0xff // inside the zip
	os.WriteFile(out2, data, 0o755)
	if _, err := Open(out2); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Open(damaged) = %v", err)
	}
}

func TestZipRefusesSymlinks(t *testing.T) {
	dir := plugin(t)
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	var buf bytes.Buffer
	if _, err := Zip(&buf, dir, "myplug"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Zip with a symlink: %v", err)
	}
}
