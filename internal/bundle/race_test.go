package bundle

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The attacker of TestInstallRenameExchange: another local user who keeps
// exchanging the checked loomd-bundles-<uid> directory with a link to
// their own tree (renameat2 RENAME_EXCHANGE), as in issue 20. It runs as
// its own process, as nobody when the test runs as root.
func TestAttackerHelper(t *testing.T) {
	a, b := os.Getenv("LOOM_EXCHANGE_A"), os.Getenv("LOOM_EXCHANGE_B")
	if a == "" {
		t.Skip("the attacker process of TestInstallRenameExchange")
	}
	ok, failed := 0, 0
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
			failed++
			if failed == 1 {
				os.Stdout.WriteString("exchange: " + err.Error() + "\n")
			}
			time.Sleep(time.Millisecond)
			continue
		}
		ok++
	}
}

// startAttacker runs the attacker as uid (or as this user when uid < 0)
// until the test ends.
func startAttacker(t *testing.T, dir string, uid int, a, b string) *bytes.Buffer {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is private to this user: the
	// attacker runs a copy.
	cp := filepath.Join(dir, "attacker.test")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(cp, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(dst, src)
	src.Close()
	dst.Close()
	cmd := exec.Command(cp, "-test.run=^TestAttackerHelper$")
	cmd.Env = append(os.Environ(), "LOOM_EXCHANGE_A="+a, "LOOM_EXCHANGE_B="+b)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	time.Sleep(200 * time.Millisecond) // let it start exchanging
	return &out
}

// TestInstallRenameExchange (issue 20 item 8): in a world-writable
// directory without the sticky bit, another user can exchange the checked
// loomd-bundles-<uid> directory for a link to their own tree between the
// check and its use. Such a root is refused, saying why; in a sticky one
// (/tmp) the same attacker cannot move the directory, and every start
// uses the bundle's own files.
func TestInstallRenameExchange(t *testing.T) {
	uid := -1
	if os.Getuid() == 0 {
		uid = 65534 // nobody
	}
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		os.Chmod(d, 0o755)
	}
	b := testBundle(t)
	name := "loomd-bundles-" + strconv.Itoa(os.Getuid())

	// The attacker's tree: a complete-looking unpacked copy with their Lua.
	evil := filepath.Join(base, "evil")
	os.MkdirAll(filepath.Join(evil, b.SHA256[:16], "myplug"), 0o755)
	os.WriteFile(filepath.Join(evil, b.SHA256[:16], completeMark), []byte(b.SHA256+"\n"), 0o644)
	os.WriteFile(filepath.Join(evil, b.SHA256[:16], "myplug", "myplug.lua"), []byte("return 'attacker'"), 0o644)
	if uid >= 0 {
		filepath.Walk(evil, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, uid, uid) })
	}

	for _, c := range []struct {
		name   string
		mode   os.FileMode
		refuse bool
	}{
		{"world-writable without the sticky bit", 0o777, true},
		{"world-writable with the sticky bit", 0o777 | os.ModeSticky, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !c.refuse && uid < 0 {
				t.Skip("the attacker would be this same user, who may move their own files in a sticky directory")
			}
			shared := filepath.Join(base, strings.ReplaceAll(c.name, " ", "-"))
			os.Mkdir(shared, 0o755)
			// A first start makes the real directory while nobody races.
			if _, err := b.Install(shared); err != nil {
				t.Fatalf("first start in a private directory: %v", err)
			}
			if err := os.Chmod(shared, c.mode); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(shared, "evil")
			os.Symlink(evil, link)
			if uid >= 0 {
				os.Lchown(link, uid, uid)
			}
			out := startAttacker(t, base, uid, filepath.Join(shared, name), link)
			ran, refused := 0, 0
			const starts = 400
			other := 0
			for i := 0; i < starts; i++ {
				time.Sleep(time.Millisecond) // the attacker's turn, on a loaded machine
				dir, err := b.Install(shared)
				switch {
				case err != nil && strings.Contains(err.Error(), "without the sticky bit"):
					refused++
					continue
				case err != nil:
					other++ // caught the link itself: a safe failure, but not the defence
					continue
				}
				// What the loader reads next, by the returned path.
				if lua, _ := os.ReadFile(filepath.Join(dir, "myplug", "myplug.lua")); string(lua) == "return 'attacker'" {
					ran++
				}
			}
			t.Logf("%d starts: %d refused, %d failed otherwise, %d read the attacker's Lua; attacker: %s", starts, refused, other, ran, strings.TrimSpace(out.String()))
			if ran > 0 {
				t.Errorf("%d of %d starts read the attacker's Lua", ran, starts)
			}
			if c.refuse && refused != starts {
				t.Errorf("%d of %d starts were refused, want all", refused, starts)
			}
			if !c.refuse && refused > 0 {
				t.Errorf("%d starts were refused in a sticky directory", refused)
			}
		})
	}
}

// testBundle builds a bundle of a small plugin and opens it.
func testBundle(t *testing.T) *Bundle {
	t.Helper()
	tmp := t.TempDir()
	base := filepath.Join(tmp, "loomd")
	os.WriteFile(base, bytes.Repeat([]byte("ELF!"), 100), 0o755)
	out := filepath.Join(tmp, "out")
	write(t, base, plugin(t), out)
	b, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
