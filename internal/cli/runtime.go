package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/internal/plugtest"
	"github.com/loomrt/loom/runtime"
)

// sshOptions are the daemon-wide SSH settings given to loom.ssh.
type sshOptions struct {
	knownHosts []string
	// hostKeys is loomd's own known_hosts: trusted, and where TOFU
	// records keys. Empty means the command's default (hostKeysFile).
	hostKeys      string
	allowTOFU     bool
	allowInsecure bool
}

func (o *sshOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.knownHosts, "known-hosts", nil, "known_hosts file(s) trusted for SSH host keys (default ~/.ssh/known_hosts when it exists); never inside --work-dir")
	fs.StringVar(&o.hostKeys, "host-keys", "", "loomd's own known_hosts file: trusted, and where TOFU records keys; never inside --work-dir "+
		"(default <data>/known_hosts for serve, $XDG_STATE_HOME/loomd/known_hosts (~/.local/state/loomd/known_hosts) otherwise)")
	fs.BoolVar(&o.allowTOFU, "ssh-allow-tofu", false, "let plugins use host_key policy \"tofu\" (trust an unknown host key on first use)")
	fs.BoolVar(&o.allowInsecure, "ssh-allow-insecure", false, "let plugins use host_key policy \"insecure\" (no host key check; for tests only)")
}

// newBindings builds the registry of Lua modules loomd gives plugins.
func (a *App) newBindings(g *globalOptions, logger *slog.Logger) *bindings.Registry {
	return a.newBindingsWith(g, logger, nil, nil)
}

// newBindingsWith is newBindings with the REPL's test kit: its HTTP fakes
// answer before the network, its SSH fakes are dialled in process and
// their host keys trusted. early, when not nil, are TCP connections to
// SSH servers opened ahead (loomd run).
func (a *App) newBindingsWith(g *globalOptions, logger *slog.Logger, kit *plugtest.Kit, early *sshb.EarlyDials) *bindings.Registry {
	h := httpb.Options{UserAgent: "loomd/" + a.Version, Listeners: g.listeners}
	s := a.sshBindingOptions(g, logger)
	s.EarlyDials = early
	if kit != nil {
		h.Intercept = kit.Intercept
		s.Dial = kit.Dial
		s.KnownHosts = append(s.KnownHosts, kit.KnownHosts())
	}
	return std.New(std.Options{HTTP: h, SSH: s})
}

// hostKeysFile is loomd's own known_hosts: --host-keys, else the
// command's default (serve sets <data>/known_hosts before building its
// runtime), else $XDG_STATE_HOME/loomd/known_hosts. It is never in the
// work dir: plugins write there, and host-key trust must not be theirs to
// give (issue 10).
func (a *App) hostKeysFile(g *globalOptions) string {
	if g.ssh.hostKeys != "" {
		return g.ssh.hostKeys
	}
	if d := a.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "loomd", "known_hosts")
	}
	if home := a.Getenv("HOME"); home != "" {
		return filepath.Join(home, ".local", "state", "loomd", "known_hosts")
	}
	return ""
}

// trustedKnownHosts lists the known_hosts files loom.ssh trusts: the
// --known-hosts files (or ~/.ssh/known_hosts) and loomd's own.
func (a *App) trustedKnownHosts(g *globalOptions) (known []string, own string) {
	known = append([]string(nil), g.ssh.knownHosts...)
	if len(known) == 0 {
		if home := a.Getenv("HOME"); home != "" {
			known = append(known, filepath.Join(home, ".ssh", "known_hosts"))
		}
	}
	own = a.hostKeysFile(g)
	if own != "" {
		known = append(known, own)
	}
	return known, own
}

// checkHostKeyFiles refuses trusted known_hosts files inside the work
// root, where a plugin could write a key, and warns about the file of
// older versions, <work-dir>/known_hosts, which is no longer read.
func (a *App) checkHostKeyFiles(g *globalOptions, logger *slog.Logger) error {
	root, err := realAbs(g.workDir)
	if err != nil {
		return fmt.Errorf("--work-dir %s: %w", g.workDir, err)
	}
	known, own := a.trustedKnownHosts(g)
	for _, f := range known {
		p, err := realAbs(f)
		if err != nil {
			return fmt.Errorf("known_hosts file %s: %w", f, err)
		}
		if p == root || strings.HasPrefix(p, root+string(filepath.Separator)) {
			flag := "--known-hosts"
			if f == own {
				flag = "--host-keys"
			}
			return fmt.Errorf("%s %s is inside --work-dir %s, where plugins write files: host-key trust must live outside it "+
				"(for example %s under --data); move the file", flag, f, g.workDir, filepath.Join("<data>", "known_hosts"))
		}
	}
	old := filepath.Join(g.workDir, "known_hosts")
	if st, err := os.Stat(old); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
		logger.Warn("ignoring the known_hosts file of older loomd versions: plugins could write it, so it is no longer trusted; "+
			"review its lines and append the ones you trust to loomd's own file, then remove it",
			"old", old, "own", own)
	}
	return nil
}

// realAbs is the absolute path with the symlinks of its existing part
// resolved, so that two spellings of one place compare equal.
func realAbs(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	var rest []string
	for dir := abs; ; {
		r, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(append([]string{r}, rest...)...), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs, nil
		}
		rest = append([]string{filepath.Base(dir)}, rest...)
		dir = parent
	}
}

// sshBindingOptions: trust the --known-hosts files (or ~/.ssh/known_hosts)
// plus loomd's own known_hosts (--host-keys), where TOFU records keys.
func (a *App) sshBindingOptions(g *globalOptions, logger *slog.Logger) sshb.Options {
	known, own := a.trustedKnownHosts(g)
	return sshb.Options{
		KnownHosts:    known,
		TOFUFile:      own,
		AllowTOFU:     g.ssh.allowTOFU,
		AllowInsecure: g.ssh.allowInsecure,
		Logger:        logger.With("component", "ssh"),
	}
}

// runtimeConfig is what a command needs to build a runtime.
type runtimeConfig struct {
	timeout time.Duration
	logger  *slog.Logger
	// poolSize is the warm VMs kept per plugin type (0: the runtime's
	// default); loomd apply --local keeps one per parallel task.
	poolSize int
	// folders, when set, are the only plugin folders loaded.
	folders []string
	// sources, when set, are the plugin versions loaded instead of the
	// folders (a worker loads the daemon's).
	sources []runtime.PluginSource
	// quietMissingHooks logs undefined hooks at debug level (loomd run).
	quietMissingHooks bool
	// permit are hosts added to every plugin's permissions.http
	// allow-list (--permit: a local server to debug against).
	permit []string
	// kit is the REPL's test kit (fakes), or nil.
	kit *plugtest.Kit
	// early are TCP connections to SSH servers opened ahead, or nil.
	early *sshb.EarlyDials
	// lazyTypes makes each type's first VM with its first task (a worker
	// runs versions the daemon validated, and only some of its types).
	lazyTypes bool
}

// newRuntime builds and loads a runtime from the global options.
// taskLimits are the runtime's per-task caps from --task-connections
// and --task-descriptors. Connections count as descriptors, so the lower
// of the two bounds them.
func (g *globalOptions) taskLimits() (runtime.Limits, error) {
	for _, f := range []struct {
		name string
		n    int
	}{{"task-connections", g.taskConns}, {"task-descriptors", g.taskDescs}} {
		if f.n < 1 || f.n > runtime.MaxTaskHeld {
			return runtime.Limits{}, fmt.Errorf("--%s %d: must be between 1 and %d", f.name, f.n, runtime.MaxTaskHeld)
		}
	}
	return runtime.Limits{MaxTaskConns: g.taskConns, MaxTaskDescriptors: g.taskDescs}, nil
}

func (a *App) newRuntime(ctx context.Context, g *globalOptions, rc runtimeConfig) (*runtime.Runtime, error) {
	if err := a.checkHostKeyFiles(g, rc.logger); err != nil {
		return nil, usageErr(err)
	}
	limits, err := g.taskLimits()
	if err != nil {
		return nil, usageErr(err)
	}
	var permit func() []string
	if len(rc.permit) > 0 || rc.kit != nil {
		permit = func() []string {
			p := append([]string(nil), rc.permit...)
			if rc.kit != nil {
				p = append(p, rc.kit.Permitted()...)
			}
			return p
		}
	}
	var hook func(*lua.LState, *lua.FunctionProto, int)
	if rc.kit != nil {
		hook = rc.kit.InstructionHook
	}
	rt, err := runtime.New(runtime.Options{
		PluginsDir:      g.pluginsDir,
		WorkDir:         g.workDir,
		Tenant:          g.tenant,
		Bindings:        a.newBindingsWith(g, rc.logger, rc.kit, rc.early),
		PermitHTTP:      permit,
		InstructionHook: hook,
		Logger:          rc.logger,
		Timeout:         rc.timeout,
		PoolSize:        rc.poolSize,
		Folders:         rc.folders,
		Sources:         rc.sources,

		ProvisionerID: g.provisionerID,
		WorkerID:      g.workerID,

		QuietMissingHooks: rc.quietMissingHooks,
		LazyTypes:         rc.lazyTypes,
		Limits:            limits,
	})
	if err != nil {
		return nil, usageErr(err)
	}
	if err := rt.Load(ctx); err != nil {
		rt.Close()
		return nil, usageErr(err)
	}
	return rt, nil
}
