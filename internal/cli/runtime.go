package cli

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/loomrt/loom/bindings"
	httpb "github.com/loomrt/loom/bindings/http"
	sshb "github.com/loomrt/loom/bindings/ssh"
	"github.com/loomrt/loom/bindings/std"
	"github.com/loomrt/loom/runtime"
)

// sshOptions are the daemon-wide SSH settings given to loom.ssh.
type sshOptions struct {
	knownHosts    []string
	allowTOFU     bool
	allowInsecure bool
}

func (o *sshOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.knownHosts, "known-hosts", nil, "known_hosts file(s) trusted for SSH host keys (default ~/.ssh/known_hosts when it exists)")
	fs.BoolVar(&o.allowTOFU, "ssh-allow-tofu", false, "let plugins use host_key policy \"tofu\" (trust an unknown host key on first use)")
	fs.BoolVar(&o.allowInsecure, "ssh-allow-insecure", false, "let plugins use host_key policy \"insecure\" (no host key check; for tests only)")
}

// newBindings builds the registry of Lua modules loomd gives plugins.
func (a *App) newBindings(g *globalOptions, logger *slog.Logger) *bindings.Registry {
	return std.New(std.Options{
		HTTP: httpb.Options{UserAgent: "loomd/" + a.Version},
		SSH:  a.sshBindingOptions(g, logger),
	})
}

// sshBindingOptions: trust the --known-hosts files (or ~/.ssh/known_hosts)
// plus loomd's own <work-dir>/known_hosts, where TOFU records keys.
func (a *App) sshBindingOptions(g *globalOptions, logger *slog.Logger) sshb.Options {
	known := append([]string(nil), g.ssh.knownHosts...)
	if len(known) == 0 {
		if home := a.Getenv("HOME"); home != "" {
			known = append(known, filepath.Join(home, ".ssh", "known_hosts"))
		}
	}
	own := filepath.Join(g.workDir, "known_hosts")
	return sshb.Options{
		KnownHosts:    append(known, own),
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
}

// newRuntime builds and loads a runtime from the global options.
func (a *App) newRuntime(ctx context.Context, g *globalOptions, rc runtimeConfig) (*runtime.Runtime, error) {
	rt, err := runtime.New(runtime.Options{
		PluginsDir: g.pluginsDir,
		WorkDir:    g.workDir,
		Tenant:     g.tenant,
		Bindings:   a.newBindings(g, rc.logger),
		Logger:     rc.logger,
		Timeout:    rc.timeout,
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
