package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
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
	return bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(),
		httpb.New(httpb.Options{UserAgent: "loomd/" + a.Version}))
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
