package ssh

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// sftpConn is an SFTP client on its own session of a pooled connection.
// Each transfer opens one (about 6 ms) and closes it, so a cancelled
// transfer never disturbs another one.
type sftpConn struct {
	*sftp.Client
	c    *pconn
	cfg  *connConfig
	ctx  context.Context
	done func()
}

func (b *Binding) sftp(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger) (*sftpConn, error) {
	c, sess, err := b.session(ctx, cfg, key, logger)
	if err != nil {
		return nil, err
	}
	fail := func(what string, err error) (*sftpConn, error) {
		sess.Close()
		b.pool.release(c)
		if c.isDead() {
			return nil, lostError(cfg, "sftp start", c)
		}
		return nil, cfg.connError("io", "%s: %v", what, err)
	}
	w, err := sess.StdinPipe()
	if err != nil {
		return fail("sftp stdin", err)
	}
	r, err := sess.StdoutPipe()
	if err != nil {
		return fail("sftp stdout", err)
	}
	if err := sess.RequestSubsystem("sftp"); err != nil {
		return fail("the server refused the sftp subsystem", err)
	}
	cl, err := sftp.NewClientPipe(r, w, sftp.UseConcurrentWrites(true), sftp.MaxConcurrentRequestsPerFile(64))
	if err != nil {
		return fail("starting sftp", err)
	}
	stop := context.AfterFunc(ctx, func() { cl.Close(); sess.Close() })
	var once sync.Once
	return &sftpConn{Client: cl, c: c, cfg: cfg, ctx: ctx, done: func() {
		once.Do(func() {
			stop()
			cl.Close()
			sess.Close()
			b.pool.release(c)
		})
	}}, nil
}

// fail classifies an SFTP error on a remote path.
func (s *sftpConn) fail(op, remote string, err error) *bindings.Error {
	switch {
	case s.ctx.Err() != nil:
		return s.cfg.connError("timeout", "hook deadline reached during %s %s", op, remote)
	case s.c.isDead():
		return lostError(s.cfg, op+" "+remote, s.c)
	case errors.Is(err, fs.ErrPermission):
		return s.cfg.connError("permission", "%s %s: permission denied (use sudo=true for root-owned paths)", op, remote)
	case errors.Is(err, fs.ErrNotExist):
		return s.cfg.connError("io", "%s %s: no such file or directory", op, remote)
	default:
		return s.cfg.connError("io", "%s %s: %v", op, remote, err)
	}
}

// putSpec says where and how an upload lands.
type putSpec struct {
	remote  string
	mode    os.FileMode
	modeSet bool
	owner   string
	group   string
	sudo    *sudoSpec
	atomic  bool
}

// put writes src to the remote path. Atomic puts go to a temp file in the
// same dir that gets its mode (and owner) before a posix-rename over the
// target, so readers see the old file or the new one, never a part. With
// sudo, the data goes to a private temp file first and a root shell
// copies it into place.
func (b *Binding) put(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, src io.Reader, ps putSpec) (int64, error) {
	if !path.IsAbs(ps.remote) {
		return 0, bindings.Errorf("config", "remote path %q must be absolute", ps.remote)
	}
	s, err := b.sftp(ctx, cfg, key, logger)
	if err != nil {
		return 0, err
	}
	defer s.done()
	if ps.sudo != nil && ps.sudo.user != cfg.user {
		return b.putSudo(ctx, cfg, key, logger, s, src, ps)
	}
	dst := ps.remote
	target := dst
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if ps.atomic {
		target = path.Join(path.Dir(dst), "."+path.Base(dst)+".loom-"+randToken())
		flags |= os.O_EXCL
	}
	mode := ps.mode
	if !ps.modeSet {
		mode = 0o644
		if fi, err := s.Stat(dst); err == nil {
			mode = fi.Mode().Perm()
		}
	}
	f, err := s.OpenFile(target, flags)
	if err != nil {
		return 0, s.fail("upload to", dst, err)
	}
	cleanup := func() {
		if ps.atomic {
			s.Remove(target)
		}
	}
	n, err := f.ReadFrom(src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.Chmod(target, mode)
	}
	if err != nil {
		cleanup()
		return n, s.fail("upload to", dst, err)
	}
	if ps.owner != "" || ps.group != "" {
		// chown needs an exec. Free the SFTP session first: holding it
		// while waiting for another could starve a full connection.
		s.done()
		cmd := "chown " + Quote(ownerSpec(ps.owner, ps.group)) + " -- " + Quote(target)
		if ps.atomic {
			cmd += " && mv -f -- " + Quote(target) + " " + Quote(dst)
		}
		res, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: cmd, maxCapture: 64 << 10})
		if err == nil && res.exitCode != 0 {
			err = cfg.connError("permission", "chown %s %s failed: %s (use sudo=true)", ownerSpec(ps.owner, ps.group), dst, shorten(string(res.stderr)))
		}
		if err != nil && ps.atomic {
			b.removeRemote(ctx, cfg, key, logger, target)
		}
		return n, err
	}
	if ps.atomic {
		if _, ok := s.HasExtension("posix-rename@openssh.com"); ok {
			err = s.PosixRename(target, dst)
		} else {
			s.Remove(dst) // plain SFTP rename refuses to overwrite
			err = s.Rename(target, dst)
		}
		if err != nil {
			cleanup()
			return n, s.fail("renaming into place", dst, err)
		}
	}
	return n, nil
}

func (b *Binding) putSudo(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, s *sftpConn, src io.Reader, ps putSpec) (int64, error) {
	tmp := "/tmp/.loom-upload-" + randToken()
	f, err := s.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return 0, s.fail("creating a temp file", tmp, err)
	}
	if err := s.Chmod(tmp, 0o600); err != nil {
		f.Close()
		s.Remove(tmp)
		return 0, s.fail("chmod", tmp, err)
	}
	n, err := f.ReadFrom(src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.Remove(tmp)
		return n, s.fail("upload to", tmp, err)
	}
	// Free the SFTP session before the sudo exec needs one.
	s.done()
	dst := ps.remote
	stage := dst
	if ps.atomic {
		stage = path.Join(path.Dir(dst), "."+path.Base(dst)+".loom-"+randToken())
	}
	var sc strings.Builder
	fmt.Fprintf(&sc, "set -e; src=%s; dst=%s; stage=%s\n", Quote(tmp), Quote(dst), Quote(stage))
	sc.WriteString("trap 'rm -f \"$src\"; [ \"$stage\" = \"$dst\" ] || rm -f \"$stage\"' EXIT\n")
	sc.WriteString("if [ -e \"$dst\" ]; then keep=1; else keep=; fi\n")
	sc.WriteString("cp \"$src\" \"$stage\"\n")
	if !ps.modeSet {
		sc.WriteString("if [ -n \"$keep\" ]; then chmod --reference=\"$dst\" \"$stage\"; else chmod 0644 \"$stage\"; fi\n")
	} else {
		fmt.Fprintf(&sc, "chmod %04o \"$stage\"\n", ps.mode)
	}
	if ps.owner == "" && ps.group == "" {
		sc.WriteString("if [ -n \"$keep\" ]; then chown --reference=\"$dst\" \"$stage\"; fi\n")
	} else {
		fmt.Fprintf(&sc, "chown %s \"$stage\"\n", Quote(ownerSpec(ps.owner, ps.group)))
	}
	if ps.atomic {
		sc.WriteString("mv -f \"$stage\" \"$dst\"\n")
	}
	res, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: sc.String(), sudo: ps.sudo, maxCapture: 64 << 10})
	if err == nil && res.exitCode != 0 {
		err = cfg.connError("io", "installing %s with sudo failed (exit %d): %s", dst, res.exitCode, shorten(string(res.stderr)))
	}
	if err != nil {
		// The script's trap removes the temp file, unless sudo never ran it.
		b.removeRemote(ctx, cfg, key, logger, tmp)
	}
	return n, err
}

// removeRemote deletes a temp file as the login user, best effort (the
// operation that made it already failed and is what gets reported).
func (b *Binding) removeRemote(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, p string) {
	if _, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: "rm -f -- " + Quote(p), maxCapture: 4 << 10}); err != nil {
		logger.Warn("ssh: could not remove a temp file", "conn", cfg.String(), "path", p, "err", err)
	}
}

// ownerSpec is chown's "user:group", "user" or ":group".
func ownerSpec(owner, group string) string {
	if group == "" {
		return owner
	}
	return owner + ":" + group
}

// chown runs chown on the host (as the login user, or through sudo).
func (b *Binding) chown(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, target, owner, group string, sudo *sudoSpec) error {
	cmd := "chown " + Quote(ownerSpec(owner, group)) + " -- " + Quote(target)
	res, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: cmd, sudo: sudo, maxCapture: 64 << 10})
	if err != nil {
		return err
	}
	if res.exitCode != 0 {
		return cfg.connError("permission", "chown %s %s failed: %s (use sudo=true)", ownerSpec(owner, group), target, shorten(string(res.stderr)))
	}
	return nil
}

// dirStats counts what an upload_dir moved.
type dirStats struct {
	files, dirs, links int
	bytes              int64
	method             string
}

// dirEntry is one local item of an upload_dir.
type dirEntry struct {
	rel   string // slash-separated, relative to the remote dir
	local string // the local path
	info  fs.FileInfo
	link  string // symlink target
}

// walkLocal lists a local tree without following symlinks (they travel
// as symlinks), so nothing outside the checked root is ever read. With a
// prefix, the entries land under prefix/ and the root itself is an entry
// (prefix, with the root's mode), so an empty tree still arrives.
//
// With follow (upload_dir's follow_links, tar -h), a symlink travels as
// what it points to: follow resolves it, and refuses a target outside
// what the hook may read, so the sandbox still holds. A link to a dir is
// walked in turn; a link back into a dir being walked (a cycle) fails.
func walkLocal(root, prefix string, follow func(string) (string, error)) ([]dirEntry, error) {
	var out []dirEntry
	err := walkInto(root, prefix, prefix == "", follow, map[string]bool{}, &out)
	return out, err
}

func walkInto(root, prefix string, skipRoot bool, follow func(string) (string, error), walking map[string]bool, out *[]dirEntry) error {
	if follow != nil {
		real, err := filepath.EvalSymlinks(root)
		if err != nil {
			return err
		}
		if walking[real] {
			return fmt.Errorf("symlink cycle: %s leads back into a directory being copied", root)
		}
		walking[real] = true
		defer delete(walking, real)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || (rel == "." && skipRoot) {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := dirEntry{rel: path.Join(prefix, filepath.ToSlash(rel)), local: p, info: info}
		switch {
		case info.Mode()&fs.ModeSymlink != 0 && follow != nil:
			target, err := follow(p)
			if err != nil {
				return err
			}
			ti, err := os.Stat(target)
			if err != nil {
				return err
			}
			if ti.IsDir() {
				return walkInto(target, e.rel, false, follow, walking, out)
			}
			if !ti.Mode().IsRegular() {
				return nil
			}
			e.local, e.info = target, ti
		case info.Mode()&fs.ModeSymlink != 0:
			if e.link, err = os.Readlink(p); err != nil {
				return err
			}
		case info.IsDir(), info.Mode().IsRegular():
		default:
			return nil // sockets, devices, fifos: skipped
		}
		*out = append(*out, e)
		return nil
	})
}

// writeTar streams the entries as a tar archive.
func writeTar(w io.Writer, entries []dirEntry) (dirStats, error) {
	st := dirStats{method: "tar"}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr, err := tar.FileInfoHeader(e.info, e.link)
		if err != nil {
			return st, err
		}
		hdr.Name = e.rel
		if e.info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return st, err
		}
		switch {
		case e.info.IsDir():
			st.dirs++
		case e.link != "":
			st.links++
		default:
			f, err := os.Open(e.local)
			if err != nil {
				return st, err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return st, err
			}
			st.files++
			st.bytes += n
		}
	}
	return st, tw.Close()
}

// errNoTar means the host has no tar (exit 127 with our marker).
var errNoTar = errors.New("no tar on the host")

const (
	noTarMarker   = "loom: no tar on this host"
	extractMarker = "loom: extraction failed"
)

// tarCommand is the remote side of a tar upload: extract into remote
// (chown -R when asked), then run after, if any, in the same shell with
// stdin from /dev/null. A failed extraction prints extractMarker, so it
// is told apart from a failed after.
func tarCommand(remote, owner, group, after string) string {
	extract := fmt.Sprintf("mkdir -p -- %s && tar -xpf - --no-same-owner -C %s", Quote(remote), Quote(remote))
	if owner != "" || group != "" {
		extract += " && chown -R " + Quote(ownerSpec(owner, group)) + " -- " + Quote(remote)
	}
	cmd := fmt.Sprintf("command -v tar >/dev/null 2>&1 || { echo %s >&2; exit 127; }; { %s; } || { s=$?; echo %s >&2; exit $s; }",
		Quote(noTarMarker), extract, Quote(extractMarker))
	if after != "" {
		cmd += "\n{\n" + after + "\n} </dev/null"
	}
	return cmd
}

// withoutMarker drops our marker line from a command's stderr.
func withoutMarker(stderr []byte, marker string) string {
	return strings.TrimSpace(strings.Replace(string(stderr), marker+"\n", "", 1))
}

// afterError reports a failed opts.after like conn:exec's check = true.
func afterError(cfg *connConfig, remote, after string, res *execResult) *bindings.Error {
	stderr := withoutMarker(res.stderr, extractMarker)
	e := cfg.connError("command", "upload_dir into %s: the after command exited with status %d: %s", remote, res.exitCode, shorten(stderr))
	e.Fields["command"] = after
	e.Fields["stdout"] = string(res.stdout)
	e.Fields["stderr"] = stderr
	e.Fields["exit_code"] = res.exitCode
	return e
}

// putDirTar streams the entries into `tar -x` on the host, then runs
// after (if any) in the same command.
func (b *Binding) putDirTar(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, entries []dirEntry, remote string, owner, group string, sudo *sudoSpec, after string) (dirStats, error) {
	cmd := tarCommand(remote, owner, group, after)
	pr, pw := io.Pipe()
	type tarDone struct {
		st  dirStats
		err error
	}
	done := make(chan tarDone, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, 256<<10) // few large channel writes, not one per header
		st, err := writeTar(bw, entries)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		done <- tarDone{st, err}
	}()
	res, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: cmd, stdin: pr, sudo: sudo, maxCapture: 256 << 10})
	pr.CloseWithError(errors.New("upload_dir: remote side finished")) // unblock the writer if tar stopped reading
	td := <-done
	if err != nil {
		return td.st, err
	}
	if res.exitCode == 127 && strings.Contains(string(res.stderr), noTarMarker) {
		return td.st, errNoTar
	}
	if res.exitCode != 0 {
		if after != "" && !strings.Contains(string(res.stderr), extractMarker) {
			return td.st, afterError(cfg, remote, after, res)
		}
		return td.st, cfg.connError("io", "extracting into %s failed (exit %d): %s", remote, res.exitCode, shorten(withoutMarker(res.stderr, extractMarker)))
	}
	if td.err != nil {
		return td.st, bindings.Errorf("io", "upload_dir: reading the local tree: %v", td.err)
	}
	return td.st, nil
}

// putDirSFTP is the fallback: dirs first, then 8 files in flight, then
// symlinks, and dir modes and times last (children change dir mtimes).
func (b *Binding) putDirSFTP(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, entries []dirEntry, remote string) (dirStats, error) {
	st := dirStats{method: "sftp"}
	s, err := b.sftp(ctx, cfg, key, logger)
	if err != nil {
		return st, err
	}
	defer s.done()
	if err := s.MkdirAll(remote); err != nil {
		return st, s.fail("mkdir", remote, err)
	}
	var dirs, files, links []dirEntry
	for _, e := range entries {
		switch {
		case e.info.IsDir():
			dirs = append(dirs, e)
		case e.link != "":
			links = append(links, e)
		default:
			files = append(files, e)
		}
	}
	for _, d := range dirs {
		if err := s.MkdirAll(path.Join(remote, d.rel)); err != nil {
			return st, s.fail("mkdir", path.Join(remote, d.rel), err)
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
		work     = make(chan dirEntry)
	)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e := range work {
				n, err := putFileSFTP(s, e.local, path.Join(remote, e.rel), e.info)
				mu.Lock()
				st.files++
				st.bytes += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, f := range files {
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
		work <- f
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return st, s.fail("upload_dir to", remote, firstErr)
	}
	for _, l := range links {
		dst := path.Join(remote, l.rel)
		s.Remove(dst)
		if err := s.Symlink(l.link, dst); err != nil {
			return st, s.fail("symlink", dst, err)
		}
		st.links++
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		dst := path.Join(remote, d.rel)
		if err := s.Chmod(dst, d.info.Mode().Perm()); err != nil {
			return st, s.fail("chmod", dst, err)
		}
		if err := s.Chtimes(dst, time.Now(), d.info.ModTime()); err != nil {
			return st, s.fail("chtimes", dst, err)
		}
		st.dirs++
	}
	return st, nil
}

func putFileSFTP(s *sftpConn, local, remote string, info fs.FileInfo) (int64, error) {
	lf, err := os.Open(local)
	if err != nil {
		return 0, err
	}
	defer lf.Close()
	f, err := s.OpenFile(remote, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return 0, err
	}
	n, err := f.ReadFrom(lf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.Chmod(remote, info.Mode().Perm())
	}
	if err == nil {
		err = s.Chtimes(remote, time.Now(), info.ModTime())
	}
	return n, err
}

// get downloads a remote file into a local path (atomically: temp file
// and rename), refusing files larger than max.
func (b *Binding) get(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, remote, local string, max int64, mode os.FileMode) (int64, error) {
	s, err := b.sftp(ctx, cfg, key, logger)
	if err != nil {
		return 0, err
	}
	defer s.done()
	f, err := s.Open(remote)
	if err != nil {
		return 0, s.fail("download of", remote, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, s.fail("stat", remote, err)
	}
	if fi.Size() > max {
		return 0, cfg.connError("io", "download of %s: %d bytes is over max_size %d", remote, fi.Size(), max)
	}
	tmp := local + ".loom-" + randToken()
	lf, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return 0, bindings.Errorf("io", "download: creating %s: %v", tmp, err)
	}
	n, err := f.WriteTo(&limitWriter{w: lf, left: max})
	if cerr := lf.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, local)
	}
	if err != nil {
		os.Remove(tmp)
		if errors.Is(err, errTooBig) {
			return n, cfg.connError("io", "download of %s: the file grew over max_size %d", remote, max)
		}
		return n, s.fail("download of", remote, err)
	}
	return n, nil
}

var errTooBig = errors.New("over the size limit")

type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errTooBig
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
}

// readRemote returns a remote file's content, at most max bytes.
func (b *Binding) readRemote(ctx context.Context, cfg *connConfig, key string, logger *slog.Logger, remote string, max int64, sudo *sudoSpec) ([]byte, error) {
	if sudo != nil && sudo.user != cfg.user {
		res, err := b.run(ctx, cfg, key, logger, execSpec{shell: "/bin/sh", cmd: "cat -- " + Quote(remote), sudo: sudo, maxCapture: max + 1})
		if err != nil {
			return nil, err
		}
		if res.exitCode != 0 {
			return nil, cfg.connError("io", "read of %s failed: %s", remote, shorten(string(res.stderr)))
		}
		if int64(len(res.stdout)) > max {
			return nil, cfg.connError("io", "read of %s: over max_size %d", remote, max)
		}
		return res.stdout, nil
	}
	s, err := b.sftp(ctx, cfg, key, logger)
	if err != nil {
		return nil, err
	}
	defer s.done()
	f, err := s.Open(remote)
	if err != nil {
		return nil, s.fail("read of", remote, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, s.fail("stat", remote, err)
	}
	if fi.Size() > max {
		return nil, cfg.connError("io", "read of %s: %d bytes is over max_size %d", remote, fi.Size(), max)
	}
	var buf strings.Builder
	if _, err := f.WriteTo(&limitWriter{w: &buf, left: max}); err != nil {
		if errors.Is(err, errTooBig) {
			return nil, cfg.connError("io", "read of %s: the file grew over max_size %d", remote, max)
		}
		return nil, s.fail("read of", remote, err)
	}
	return []byte(buf.String()), nil
}

// parseMode reads "0640", "640" or a number (decimal 416 or octal-looking 640).
func parseMode(v string) (os.FileMode, error) {
	m, err := strconv.ParseUint(strings.TrimPrefix(v, "0o"), 8, 32)
	if err != nil || m > 0o7777 {
		return 0, fmt.Errorf("want an octal mode like \"0640\", got %q", v)
	}
	return os.FileMode(m), nil
}

// putOptions reads {mode, owner, group, sudo, atomic}.
func (m *module) putOptions(f *fields, remote string) putSpec {
	ps := putSpec{remote: remote, owner: f.str("owner"), group: f.str("group"), atomic: f.boolean("atomic", true)}
	if ms := f.str("mode"); ms != "" {
		mode, err := parseMode(ms)
		if err != nil {
			f.fail("mode", "%v", err)
		}
		ps.mode, ps.modeSet = mode, true
	}
	ps.sudo = m.sudoOption(f, "sudo")
	return ps
}

func pushTransfer(L *lua.LState, n int64, start time.Time, extra map[string]lua.LValue) int {
	t := L.CreateTable(0, 2+len(extra))
	t.RawSetString("bytes", lua.LNumber(n))
	t.RawSetString("duration_ms", lua.LNumber(time.Since(start).Milliseconds()))
	for k, v := range extra {
		t.RawSetString(k, v)
	}
	L.Push(t)
	return 1
}

// connUpload is conn:upload(local, remote, opts).
func connUpload(L *lua.LState) int {
	c := checkConn(L, 1, "upload", false)
	localArg := checkString(L, 2, "conn:upload", "local path")
	remote := checkString(L, 3, "conn:upload", "remote path")
	f := newFields(optTable(L, 4, "conn:upload"), "conn:upload")
	ps := c.m.putOptions(f, remote)
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	local, err := resolveLocal(c.m.h, localArg, false)
	if err != nil {
		bindings.Raise(L, err)
	}
	lf, err := os.Open(local)
	if err != nil {
		bindings.Raise(L, bindings.Errorf("io", "conn:upload: opening %q: %v", localArg, errors.Unwrap(err)))
	}
	defer lf.Close()
	if fi, err := lf.Stat(); err != nil || !fi.Mode().IsRegular() {
		bindings.Raise(L, bindings.Errorf("io", "conn:upload: %q is not a regular file (use upload_dir for directories)", localArg))
	}
	start := time.Now()
	h := c.m.h
	n, err := c.m.b.put(h.Context(), c.cfg, c.key, h.Logger(), lf, ps)
	if err != nil {
		bindings.Raise(L, err)
	}
	h.Logger().Debug("ssh upload", "conn", c.cfg.String(), "local", localArg, "remote", remote, "bytes", n)
	return pushTransfer(L, n, start, nil)
}

// connWrite is conn:write(remote, content, opts).
func connWrite(L *lua.LState) int {
	c := checkConn(L, 1, "write", false)
	remote := checkString(L, 2, "conn:write", "remote path")
	content := checkString(L, 3, "conn:write", "content")
	f := newFields(optTable(L, 4, "conn:write"), "conn:write")
	ps := c.m.putOptions(f, remote)
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	start := time.Now()
	h := c.m.h
	n, err := c.m.b.put(h.Context(), c.cfg, c.key, h.Logger(), strings.NewReader(content), ps)
	if err != nil {
		bindings.Raise(L, err)
	}
	return pushTransfer(L, n, start, nil)
}

// connUploadDir is conn:upload_dir(local, remote, opts).
func connUploadDir(L *lua.LState) int {
	c := checkConn(L, 1, "upload_dir", false)
	sources := uploadSources(L)
	remote := checkString(L, 3, "conn:upload_dir", "remote dir")
	f := newFields(optTable(L, 4, "conn:upload_dir"), "conn:upload_dir")
	method := f.str("method")
	owner, group := f.str("owner"), f.str("group")
	after := f.str("after")
	followLinks := f.boolean("follow_links", false)
	sudo := c.m.sudoOption(f, "sudo")
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	if method == "" {
		method = "auto"
	}
	if method != "auto" && method != "tar" && method != "sftp" {
		bindings.Raise(L, bindings.Errorf("config", "conn:upload_dir: method %q: want auto, tar or sftp", method))
	}
	if sudo != nil && sudo.user != c.cfg.user && method == "sftp" {
		bindings.Raise(L, bindings.Errorf("config", "conn:upload_dir: sudo needs method tar (SFTP runs as the login user)"))
	}
	if !path.IsAbs(remote) {
		bindings.Raise(L, bindings.Errorf("config", "conn:upload_dir: remote path %q must be absolute", remote))
	}
	var entries []dirEntry
	for _, src := range sources {
		root, err := resolveLocal(c.m.h, src.local, false)
		if err != nil {
			bindings.Raise(L, err)
		}
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
			bindings.Raise(L, bindings.Errorf("io", "conn:upload_dir: %q is not a directory", src.local))
		}
		var follow func(string) (string, error)
		if followLinks {
			follow = func(p string) (string, error) { return resolveLocal(c.m.h, p, false) }
		}
		es, err := walkLocal(root, src.name, follow)
		var be *bindings.Error
		if errors.As(err, &be) {
			bindings.Raise(L, be) // a followed link leaving the sandbox
		}
		if err != nil {
			bindings.Raise(L, bindings.Errorf("io", "conn:upload_dir: reading %q: %v", src.local, err))
		}
		entries = append(entries, es...)
	}
	start := time.Now()
	h := c.m.h
	var st dirStats
	var err error
	if method != "sftp" {
		st, err = c.m.b.putDirTar(h.Context(), c.cfg, c.key, h.Logger(), entries, remote, owner, group, sudo, after)
		if errors.Is(err, errNoTar) {
			if method == "tar" || (sudo != nil && sudo.user != c.cfg.user) {
				bindings.Raise(L, c.cfg.connError("io", "conn:upload_dir: the host has no tar"))
			}
			method = "sftp"
		} else if err != nil {
			bindings.Raise(L, err)
		}
	}
	if method == "sftp" {
		if st, err = c.m.b.putDirSFTP(h.Context(), c.cfg, c.key, h.Logger(), entries, remote); err != nil {
			bindings.Raise(L, err)
		}
		if owner != "" || group != "" {
			if err := c.m.b.chown(h.Context(), c.cfg, c.key, h.Logger(), remote, owner, group, nil); err != nil {
				bindings.Raise(L, err)
			}
		}
		if after != "" {
			res, err := c.m.b.run(h.Context(), c.cfg, c.key, h.Logger(), execSpec{shell: "/bin/sh", cmd: "{\n" + after + "\n} </dev/null", maxCapture: 256 << 10})
			if err != nil {
				bindings.Raise(L, err)
			}
			if res.exitCode != 0 {
				bindings.Raise(L, afterError(c.cfg, remote, after, res))
			}
		}
	}
	h.Logger().Debug("ssh upload_dir", "conn", c.cfg.String(), "sources", len(sources), "remote", remote,
		"files", st.files, "method", st.method)
	return pushTransfer(L, st.bytes, start, map[string]lua.LValue{
		"files": lua.LNumber(st.files), "dirs": lua.LNumber(st.dirs), "links": lua.LNumber(st.links),
		"method": lua.LString(st.method),
	})
}

// uploadSource is one local tree of an upload_dir: name "" lands in the
// remote dir itself, any other name in remote/name.
type uploadSource struct{ name, local string }

// validSourceName: one path component, no dot-only names.
var validSourceName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*$`)

// uploadSources reads upload_dir's first argument: a local dir, or a
// table {name = local dir, ...} sent as one tar stream (names sorted).
func uploadSources(L *lua.LState) []uploadSource {
	switch v := L.Get(2).(type) {
	case lua.LString:
		return []uploadSource{{local: string(v)}}
	case *lua.LTable:
		var out []uploadSource
		var bad error
		v.ForEach(func(k, lv lua.LValue) {
			name, ok1 := k.(lua.LString)
			local, ok2 := lv.(lua.LString)
			switch {
			case bad != nil:
			case !ok1 || !validSourceName.MatchString(string(name)):
				bad = bindings.Errorf("config", "conn:upload_dir: source name %s: want a plain file name (letters, digits, '.', '_', '-')", k.String())
			case !ok2 || local == "":
				bad = bindings.Errorf("config", "conn:upload_dir: source %q: want a local dir path, got %s", string(name), lv.Type())
			default:
				out = append(out, uploadSource{name: string(name), local: string(local)})
			}
		})
		if bad != nil {
			bindings.Raise(L, bad)
		}
		if len(out) == 0 {
			bindings.Raise(L, bindings.Errorf("config", "conn:upload_dir: the table of local dirs is empty"))
		}
		sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
		return out
	default:
		bindings.Raise(L, bindings.Errorf("config", "conn:upload_dir: local dir: want a path or a table {name = path, ...}, got %s", v.Type()))
		return nil
	}
}

// connDownload is conn:download(remote, local, opts).
func connDownload(L *lua.LState) int {
	c := checkConn(L, 1, "download", false)
	remote := checkString(L, 2, "conn:download", "remote path")
	localArg := checkString(L, 3, "conn:download", "local path")
	f := newFields(optTable(L, 4, "conn:download"), "conn:download")
	max := f.size("max_size", 1<<30)
	mode := os.FileMode(0o644)
	if ms := f.str("mode"); ms != "" {
		var err error
		if mode, err = parseMode(ms); err != nil {
			f.fail("mode", "%v", err)
		}
	}
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	local, err := resolveLocal(c.m.h, localArg, true)
	if err != nil {
		bindings.Raise(L, err)
	}
	start := time.Now()
	h := c.m.h
	n, err := c.m.b.get(h.Context(), c.cfg, c.key, h.Logger(), remote, local, max, mode)
	if err != nil {
		bindings.Raise(L, err)
	}
	return pushTransfer(L, n, start, nil)
}

// connRead is conn:read(remote, opts) -> string.
func connRead(L *lua.LState) int {
	c := checkConn(L, 1, "read", false)
	remote := checkString(L, 2, "conn:read", "remote path")
	f := newFields(optTable(L, 3, "conn:read"), "conn:read")
	max := f.size("max_size", 16<<20)
	sudo := c.m.sudoOption(f, "sudo")
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	h := c.m.h
	data, err := c.m.b.readRemote(h.Context(), c.cfg, c.key, h.Logger(), remote, max, sudo)
	if err != nil {
		bindings.Raise(L, err)
	}
	L.Push(lua.LString(data))
	return 1
}
