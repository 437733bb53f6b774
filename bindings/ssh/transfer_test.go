package ssh

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/internal/sshdtest"
)

// remoteDir makes a fresh dir owned by the login user (the "remote" host
// is this machine, so tests check effects with plain os calls).
func remoteDir(t testing.TB, owner string) string {
	t.Helper()
	dir := filepath.Join("/tmp", "loom-remote-"+randToken())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(owner)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestUploadWriteReadDownload(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	dir := remoteDir(t, e.srv.User)
	e.L.SetGlobal("DIR", lua.LString(dir))
	local := filepath.Join(e.h.Work, "files", "app.conf")
	os.MkdirAll(filepath.Dir(local), 0o755)
	os.WriteFile(local, []byte("listen 80\n"), 0o600)

	e.run(`c = conn()
		up = c:upload("files/app.conf", DIR .. "/app.conf", {mode="0640"})
		w = c:write(DIR .. "/note.txt", "hello")
		got = c:read(DIR .. "/app.conf")
		dl = c:download(DIR .. "/note.txt", "out/note.txt")`)
	if e.eval("up.bytes") != lua.LNumber(10) || e.str("got") != "listen 80\n" {
		t.Fatalf("upload: bytes %v read back %q", e.eval("up.bytes"), e.str("got"))
	}
	fi, err := os.Stat(filepath.Join(dir, "app.conf"))
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("uploaded file mode: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.h.Work, "out", "note.txt")); string(b) != "hello" {
		t.Fatalf("downloaded %q", b)
	}
	// Overwriting keeps the existing mode when none is given.
	e.run(`c:upload("files/app.conf", DIR .. "/app.conf")`)
	if fi, _ := os.Stat(filepath.Join(dir, "app.conf")); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode after overwrite: %v", fi.Mode())
	}
	// No temp files left behind.
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.loom-*")); len(m) != 0 {
		t.Fatalf("temp files left: %v", m)
	}
	// Size limits.
	et := e.luaErr(`c:read(DIR .. "/app.conf", {max_size=4})`)
	wantKind(t, et, "io", "max_size")
	// Missing remote file; permission denied.
	et = e.luaErr(`c:read(DIR .. "/missing")`)
	wantKind(t, et, "io", "no such file")
	et = e.luaErr(`c:write("/etc/loom-denied", "x")`)
	wantKind(t, et, "permission", "sudo")
	// Local paths outside the work root and the plugin dir.
	et = e.luaErr(`c:upload("/etc/passwd", DIR .. "/passwd")`)
	wantKind(t, et, "permission", "outside")
	if err := os.Symlink("/etc", filepath.Join(e.h.Work, "escape")); err != nil {
		t.Fatal(err)
	}
	et = e.luaErr(`c:upload("escape/passwd", DIR .. "/passwd")`)
	wantKind(t, et, "permission", "outside")
	et = e.luaErr(`c:download(DIR .. "/note.txt", "escape/loom-evil")`)
	wantKind(t, et, "permission", "outside")
	if _, err := os.Stat("/etc/loom-evil"); err == nil {
		t.Fatal("download escaped the work root")
	}
	// A path in the plugin dir is allowed.
	os.WriteFile(filepath.Join(e.h.Dir, "lib.sh"), []byte("#!/bin/sh\n"), 0o755)
	e.L.SetGlobal("PLUGINFILE", lua.LString(filepath.Join(e.h.Dir, "lib.sh")))
	e.run(`c:upload(PLUGINFILE, DIR .. "/lib.sh", {mode="0755"})`)
}

func TestAtomicUploadOverRootOwnedFile(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	dst := filepath.Join("/etc", "loom-test-"+randToken()+".conf")
	if err := os.WriteFile(dst, []byte("old secret config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dst) })
	e.L.SetGlobal("DST", lua.LString(dst))

	// As a plain user it is refused.
	et := e.luaErr(`conn(NPUSER):write(DST, "new")`)
	wantKind(t, et, "permission")
	// With sudo (NOPASSWD): new content, requested mode and group.
	e.run(`conn(NPUSER):write(DST, "new config\n", {sudo=true, mode="0640", owner="root", group=NPUSER})`)
	checkFile(t, dst, "new config\n", 0o640, "root", e.srv.NoPasswdUser)
	// With password sudo and no mode/owner: the existing ones are kept.
	e.run(`conn():write(DST, "newer config\n", {sudo={password=PASSWORD}})`)
	checkFile(t, dst, "newer config\n", 0o640, "root", e.srv.NoPasswdUser)
	// Nothing left behind: no stage file next to it, no private temp file.
	if m, _ := filepath.Glob("/etc/.loom-test-*.loom-*"); len(m) != 0 {
		t.Fatalf("stage files left in /etc: %v", m)
	}
	if m, _ := filepath.Glob("/tmp/.loom-upload-*"); len(m) != 0 {
		t.Fatalf("private temp files left: %v", m)
	}
	// Reading it back needs sudo too.
	if got := e.str(`conn(NPUSER):read(DST, {sudo=true})`); got != "newer config\n" {
		t.Fatalf("sudo read: %q", got)
	}
}

func checkFile(t testing.TB, path, content string, mode os.FileMode, owner, group string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || string(b) != content {
		t.Fatalf("%s: content %q, %v", path, b, err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != mode {
		t.Fatalf("%s: mode %v, want %v", path, fi.Mode().Perm(), mode)
	}
	st := fi.Sys().(*syscall.Stat_t)
	u, _ := user.LookupId(strconv.Itoa(int(st.Uid)))
	g, _ := user.LookupGroupId(strconv.Itoa(int(st.Gid)))
	if u.Username != owner || g.Name != group {
		t.Fatalf("%s: owner %s:%s, want %s:%s", path, u.Username, g.Name, owner, group)
	}
}

// makeTree writes n files across nested dirs, with varied modes and an
// old mtime, plus a symlink.
func makeTree(t testing.TB, root string, n int) {
	t.Helper()
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < n; i++ {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", i%20), fmt.Sprintf("s%d", i%3))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("f%03d.txt", i))
		data := make([]byte, 4096)
		rand.Read(data)
		mode := os.FileMode(0o644)
		if i%7 == 0 {
			mode = 0o755
		}
		if i%11 == 0 {
			mode = 0o600
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chtimes(p, old, old)
	}
	if err := os.Symlink("d00/s0/f000.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

func TestUploadDir500Files(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	local := filepath.Join(e.h.Work, "site")
	makeTree(t, local, 500)
	for _, method := range []string{"tar", "sftp"} {
		t.Run(method, func(t *testing.T) {
			dir := remoteDir(t, e.srv.User)
			dst := filepath.Join(dir, "site")
			e.L.SetGlobal("DST", lua.LString(dst))
			e.run(`r = conn():upload_dir("site", DST, {method="` + method + `"})`)
			if e.eval("r.files") != lua.LNumber(500) || e.eval("r.links") != lua.LNumber(1) || e.str("r.method") != method {
				t.Fatalf("result: files %v links %v method %v", e.eval("r.files"), e.eval("r.links"), e.eval("r.method"))
			}
			compareTrees(t, local, dst)
		})
	}
	// With sudo into a root-owned place, owned by the requested user.
	dst := filepath.Join("/opt", "loom-site-"+randToken())
	t.Cleanup(func() { os.RemoveAll(dst) })
	e.L.SetGlobal("DST", lua.LString(dst))
	e.run(`r = conn(NPUSER):upload_dir("site", DST, {sudo=true, owner="root", group="root"})`)
	compareTrees(t, local, dst)
}

func compareTrees(t testing.TB, local, remote string) {
	t.Helper()
	count := 0
	err := filepath.Walk(local, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		rp := filepath.Join(remote, rel)
		rfi, err := os.Lstat(rp)
		if err != nil {
			return fmt.Errorf("%s missing remotely: %v", rel, err)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			a, _ := os.Readlink(p)
			b, _ := os.Readlink(rp)
			if a != b {
				return fmt.Errorf("%s: link %q != %q", rel, b, a)
			}
		case fi.Mode().IsRegular():
			count++
			a, _ := os.ReadFile(p)
			b, _ := os.ReadFile(rp)
			if !bytes.Equal(a, b) {
				return fmt.Errorf("%s: content differs", rel)
			}
			if rfi.Mode().Perm() != fi.Mode().Perm() {
				return fmt.Errorf("%s: mode %v != %v", rel, rfi.Mode().Perm(), fi.Mode().Perm())
			}
			if !rfi.ModTime().Equal(fi.ModTime()) {
				return fmt.Errorf("%s: mtime %v != %v", rel, rfi.ModTime(), fi.ModTime())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if count != 500 {
		t.Fatalf("compared %d files", count)
	}
	if strings.HasPrefix(remote, "/tmp/") {
		if m, _ := filepath.Glob(filepath.Join(filepath.Dir(remote), ".*loom*")); len(m) != 0 {
			t.Fatalf("temp files left: %v", m)
		}
	}
}

// A sudo write needs an SFTP session and then an exec session. Ten at once
// on one host (8 session slots in all) must not starve each other.
func TestConcurrentSudoWrites(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	const n = 10
	base := "/etc/loom-conc-" + randToken()
	t.Cleanup(func() {
		m, _ := filepath.Glob(base + "-*")
		for _, f := range m {
			os.Remove(f)
		}
	})
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		L := e.newState()
		L.SetGlobal("DST", lua.LString(fmt.Sprintf("%s-%d", base, i)))
		go func() {
			if err := L.DoString(`conn(NPUSER):write(DST, "x", {sudo=true, mode="0600"})`); err != nil {
				errs <- fmt.Errorf("%s", describe(err))
				return
			}
			errs <- nil
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := 0; i < n; i++ {
		checkFile(t, fmt.Sprintf("%s-%d", base, i), "x", 0o600, "root", "root")
	}
	// chown as a plain user fails, and leaves no stage file behind.
	dir := remoteDir(t, e.srv.User)
	e.L.SetGlobal("DIR", lua.LString(dir))
	et := e.luaErr(`conn():write(DIR .. "/f", "x", {owner="root"})`)
	wantKind(t, et, "permission", "chown")
	if m, _ := filepath.Glob(filepath.Join(dir, ".*")); len(m) != 0 {
		t.Fatalf("stage files left: %v", m)
	}
}

// Several local trees travel as one tar stream (one exec), each into
// remote/<name>, and opts.after runs in that same command once they are
// extracted; a failing after raises "command" with its stderr.
func TestUploadDirSourcesAfter(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	for _, m := range []string{"tar", "sftp"} {
		t.Run(m, func(t *testing.T) {
			local := filepath.Join(e.h.Work, "multi-"+m)
			makeTree(t, filepath.Join(local, "a"), 500)
			if err := os.MkdirAll(filepath.Join(local, "empty"), 0o750); err != nil {
				t.Fatal(err)
			}
			os.Chmod(filepath.Join(local, "empty"), 0o750)
			dir := remoteDir(t, e.srv.User)
			e.L.SetGlobal("DST", lua.LString(dir+"/stage"))
			e.L.SetGlobal("LOCAL", lua.LString("multi-"+m))
			before := e.b.pool.sessionsOpened.Load()
			e.run(`r = conn():upload_dir({a = LOCAL .. "/a", e = LOCAL .. "/empty"}, DST, {method = "` + m + `",
				after = "set -e\nmv " .. ssh.quote(DST .. "/a") .. " " .. ssh.quote(DST .. "/moved") .. "\ncat >" .. ssh.quote(DST .. "/stdin")})`)
			if m == "tar" {
				if n := e.b.pool.sessionsOpened.Load() - before; n != 1 {
					t.Errorf("upload_dir with two sources and after used %d sessions, want 1", n)
				}
			}
			if e.eval("r.files") != lua.LNumber(500) || e.eval("r.dirs") != lua.LNumber(82) {
				t.Errorf("result: files %v dirs %v", e.eval("r.files"), e.eval("r.dirs"))
			}
			compareTrees(t, filepath.Join(local, "a"), dir+"/stage/moved")
			if fi, err := os.Stat(dir + "/stage/e"); err != nil || fi.Mode().Perm() != 0o750 {
				t.Errorf("the empty source: %v %v", fi, err)
			}
			if b, err := os.ReadFile(dir + "/stage/stdin"); err != nil || len(b) != 0 {
				t.Errorf("after's stdin was not /dev/null: %q %v", b, err)
			}
			et := e.luaErr(`conn():upload_dir({a = LOCAL .. "/empty"}, DST, {method = "` + m + `", after = "echo nope >&2; exit 3"})`)
			wantKind(t, et, "command", "after", "status 3", "nope")
			if et.RawGetString("exit_code") != lua.LNumber(3) || et.RawGetString("stderr").String() != "nope" {
				t.Errorf("after error fields: exit_code %v stderr %q", et.RawGetString("exit_code"), et.RawGetString("stderr").String())
			}
		})
	}
	wantKind(t, e.luaErr(`conn():upload_dir({["../x"] = "multi-tar"}, "/tmp/x")`), "config", "source name")
	wantKind(t, e.luaErr(`conn():upload_dir({}, "/tmp/x")`), "config", "empty")
	// A failed extraction is still "io", not the after command's fault.
	wantKind(t, e.luaErr(`conn():upload_dir({a = "multi-tar/empty"}, "/proc/loom-no", {after = "true"})`), "io", "extracting")
}

// TestUploadDirFollowLinks: with follow_links (tar -h, as Coopr shipped
// its resources), a link travels as its target, file or tree, over tar
// and SFTP; a link out of the sandbox or into a loop is refused.
func TestUploadDirFollowLinks(t *testing.T) {
	e := newEnv(t, sshdtest.Config{}, nil)
	w := e.h.Work
	// Coopr's layout: the active resource is a link into a versioned store.
	mustWrite := func(p, content string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	mustWrite(filepath.Join(w, ".store/scripts/run.sh/3/run.sh"), "#!/bin/sh\necho v3\n", 0o755)
	mustWrite(filepath.Join(w, ".store/archives/pkg/2/pkg/data.txt"), "payload\n", 0o640)
	mustLink := func(target, link string) {
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	mustLink("../../.store/scripts/run.sh/3/run.sh", filepath.Join(w, "res/scripts/run.sh"))
	mustLink("../../.store/archives/pkg/2/pkg", filepath.Join(w, "res/archives/pkg"))
	for _, m := range []string{"tar", "sftp"} {
		t.Run(m, func(t *testing.T) {
			dir := remoteDir(t, e.srv.User)
			e.L.SetGlobal("DST", lua.LString(dir))
			e.run(`r = conn():upload_dir({scripts = "res/scripts", archives = "res/archives"}, DST, {method = "` + m + `", follow_links = true})`)
			if e.eval("r.links") != lua.LNumber(0) || e.eval("r.files") != lua.LNumber(2) {
				t.Errorf("result: files %v links %v", e.eval("r.files"), e.eval("r.links"))
			}
			for p, want := range map[string]string{"scripts/run.sh": "#!/bin/sh\necho v3\n", "archives/pkg/data.txt": "payload\n"} {
				fi, err := os.Lstat(filepath.Join(dir, p))
				if err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("%s: %v %v, want a regular file", p, fi, err)
				}
				if b, _ := os.ReadFile(filepath.Join(dir, p)); string(b) != want {
					t.Errorf("%s = %q", p, b)
				}
			}
			if fi, _ := os.Stat(filepath.Join(dir, "scripts/run.sh")); fi.Mode().Perm() != 0o755 {
				t.Errorf("run.sh mode %v", fi.Mode().Perm())
			}
		})
	}
	// Without follow_links, links stay links (the default).
	dir := remoteDir(t, e.srv.User)
	e.L.SetGlobal("DST", lua.LString(dir))
	e.run(`r = conn():upload_dir("res/scripts", DST)`)
	if fi, err := os.Lstat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("without follow_links: %v %v", fi, err)
	}
	// A link out of the sandbox is refused, not followed.
	outside := filepath.Join(t.TempDir(), "secret")
	mustWrite(outside, "secret\n", 0o600)
	mustLink(outside, filepath.Join(w, "bad/leak"))
	wantKind(t, e.luaErr(`conn():upload_dir("bad", DST, {follow_links = true})`), "permission", "outside")
	// A loop fails instead of walking forever.
	mustLink(".", filepath.Join(w, "loop/back"))
	wantKind(t, e.luaErr(`conn():upload_dir("loop", DST, {follow_links = true})`), "io", "cycle")
}
