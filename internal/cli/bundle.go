package cli

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/bundle"
	"github.com/loomrt/loom/runtime"
)

type bundleOptions struct {
	g      *globalOptions
	plugin string
	typ    string
	out    string
	base   string
}

func (a *App) newBundleCmd(g *globalOptions) *cobra.Command {
	o := &bundleOptions{g: g}
	cmd := &cobra.Command{
		Use:   "bundle --plugin DIR [--type TYPE] [-o OUT]",
		Short: "Build a Rancher cluster driver binary: loomd with a plugin folder embedded",
		Long: `Build one executable that serves a clusterdrivers plugin type to Rancher: a copy of
loomd (this binary, or --loomd) with the plugin folder DIR appended. Run as OUT PORT,
it serves types.Driver on 127.0.0.1:PORT, as loomd driver rancher TYPE PORT does.
No Go toolchain is needed; the folder is checked first (it must load, and declare
TYPE under "clusterdrivers"; --type may be left out when it declares one).

OUT defaults to kontainer-engine-driver-TYPE: Rancher takes the driver's name from
the binary's name after "kontainer-engine-driver-". Rancher runs drivers in a
chroot without libc, so the base loomd must be statically linked: a dynamically
linked one is refused, with the command that builds a static one
(CGO_ENABLED=0 go build, or make build).

Prints {"output", "type", "folder", "files", "bytes", "sha256"} on stdout: the
sha256 is the checksum to give Rancher with the driver's URL.`,
		Example: `  loomd bundle --plugin examples/kinds/gkelike -o kontainer-engine-driver-gkelike
  ./kontainer-engine-driver-gkelike 50051`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return a.runBundle(cmd.Context(), o) },
	}
	cmd.Flags().StringVar(&o.plugin, "plugin", "", "the plugin folder to embed (required)")
	cmd.Flags().StringVar(&o.typ, "type", "", "the clusterdrivers type the binary serves (default: the folder's only one)")
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "the binary to write (default kontainer-engine-driver-TYPE)")
	cmd.Flags().StringVar(&o.base, "loomd", "", "the loomd executable to copy (default: this one); for example a static build, or one for another platform")
	return cmd
}

var driverName = regexp.MustCompile(`kontainer-engine-driver-(.+)$`)

func (a *App) runBundle(ctx context.Context, o *bundleOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.plugin == "" {
		return usageErr(fmt.Errorf("--plugin DIR is required: the plugin folder to embed"))
	}
	dir, err := filepath.Abs(o.plugin)
	if err != nil {
		return usageErr(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usageErr(fmt.Errorf("--plugin %s: not a plugin folder (%v)", o.plugin, err))
	}
	logger, err := a.newLogger(o.g.log)
	if err != nil {
		return err
	}
	// Load the folder alone, as the bundle will: it must load cleanly.
	g := *o.g
	g.pluginsDir = filepath.Dir(dir)
	g.workDir, err = os.MkdirTemp("", "loomd-bundle-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(g.workDir)
	rt, err := a.newRuntime(ctx, &g, runtimeConfig{logger: logger, quietMissingHooks: true, folders: []string{dir}, poolSize: 1})
	if err != nil {
		return err
	}
	typ := o.typ
	if typ == "" {
		var found []string
		for _, t := range rt.Types() {
			if t.Family == runtime.ClusterDriver {
				found = append(found, t.Name)
			}
		}
		if len(found) != 1 {
			rt.Close()
			return usageErr(fmt.Errorf("--plugin %s declares %d cluster drivers (%s): name one with --type", o.plugin, len(found), orNone(found)))
		}
		typ = found[0]
	}
	_, err = clusterDriverType(rt, typ)
	rt.Close()
	if err != nil {
		return usageErr(fmt.Errorf("--plugin %s: %w", o.plugin, err))
	}

	base := o.base
	if base == "" {
		if base, err = a.executable(); err != nil {
			return err
		}
	}
	if interp := elfInterpreter(base); interp != "" {
		return usageErr(dynamicBase(base, o.base == "", interp))
	}
	out := o.out
	if out == "" {
		out = "kontainer-engine-driver-" + typ
	}
	if !driverName.MatchString(filepath.Base(out)) {
		logger.Warn("Rancher names a driver after its binary's name following \"kontainer-engine-driver-\": rename the file before you host it", "output", out)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-")
	if err != nil {
		return usageErr(fmt.Errorf("-o %s: %w", out, err))
	}
	defer os.Remove(tmp.Name())
	m, err := bundle.Write(tmp, base, dir, bundle.Manifest{Driver: "rancher", Type: typ, Folder: filepath.Base(dir), Loomd: a.Version})
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	sum, err := fileSHA256(out)
	if err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"output": out, "type": typ, "folder": m.Folder, "files": m.Files, "bytes": st.Size(), "sha256": sum})
	fmt.Fprintf(a.Out, "%s\n", b)
	return nil
}

// dynamicBase is the refusal of a dynamically linked base, with the
// commands that build and use a static one.
func dynamicBase(base string, self bool, interp string) error {
	which := "this loomd (" + base + ")"
	use := "  ./loomd-static bundle --plugin DIR    # or: loomd bundle --plugin DIR --loomd ./loomd-static"
	if !self {
		which = "--loomd " + base
		use = "  loomd bundle --plugin DIR --loomd ./loomd-static"
	}
	return fmt.Errorf("%s is dynamically linked (it asks for %s): Rancher runs cluster drivers chrooted in its driver jail, "+
		"which has no libc, so the bundle would not start there. Build a static loomd from the Loom source and bundle from it:\n"+
		"  CGO_ENABLED=0 go build -o loomd-static ./cmd/loomd    # or: make build (bin/loomd is static)\n%s", which, interp, use)
}

// elfInterpreter is the dynamic loader an ELF executable asks for, or ""
// (static, or not ELF).
func elfInterpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return "unknown"
			}
			return string(b[:len(b)-1])
		}
	}
	return ""
}

// bundledArgs turns the command line of a binary built by loomd bundle into
// loomd's: Rancher runs it as `OUT PORT`, which is
// `loomd driver rancher --bundled PORT`. Any other command line is loomd's
// own (OUT version, OUT --help). A plain loomd reads 16 bytes of itself.
func bundledArgs(args []string) []string {
	if len(args) > 1 {
		return args
	}
	if len(args) == 1 {
		if _, err := strconv.Atoi(args[0]); err != nil {
			return args
		}
	}
	exe, err := selfPath()
	if err != nil || !bundle.Has(exe) {
		return args
	}
	return append([]string{"driver", "rancher", "--bundled"}, args...)
}

// selfPath is this process's executable. os.Executable reads
// /proc/self/exe, which Rancher's driver jail (a bare chroot) lacks; then
// argv[0], the path Rancher ran, names it.
func selfPath() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		return exe, nil
	}
	if len(os.Args) > 0 && os.Args[0] != "" {
		if p, lerr := exec.LookPath(os.Args[0]); lerr == nil {
			return filepath.Abs(p)
		}
	}
	return "", err
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
