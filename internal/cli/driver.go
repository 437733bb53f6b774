package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"

	"github.com/loomrt/loom/internal/bundle"
	"github.com/loomrt/loom/internal/rancher"
	"github.com/loomrt/loom/runtime"
	"github.com/loomrt/loom/runtime/kindcall"
)

type driverOptions struct {
	g       *globalOptions
	listen  string
	timeout time.Duration
	bundled bool
}

func (a *App) newDriverCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "driver",
		Short: "Serve a plugin type to a host program over its own protocol (rancher)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr(errors.New("name the protocol: loomd driver rancher TYPE PORT"))
		},
	}
	cmd.AddCommand(a.newRancherDriverCmd(g))
	return cmd
}

func (a *App) newRancherDriverCmd(g *globalOptions) *cobra.Command {
	o := &driverOptions{g: g}
	cmd := &cobra.Command{
		Use:   "rancher TYPE PORT",
		Short: "Serve a clusterdrivers type as a Rancher kontainer-engine cluster driver (gRPC types.Driver)",
		Long: `Serve the clusterdrivers plugin type TYPE as a Rancher kontainer-engine cluster
driver: the gRPC service types.Driver on 127.0.0.1:PORT (--listen to change the
address), plaintext and without authentication, as Rancher dials it. Each RPC runs
one hook of the type (docs/kinds/rancher.md has the table); optional hooks the
plugin leaves out are answered as the contract says. PORT 0 picks a free port
(the log line "serving" gives it). Logs go to stderr, one line per RPC.

Rancher itself starts a binary built by loomd bundle, with the port as its only
argument; this command is that binary's behaviour for a plugin folder on disk.
It runs until SIGINT or SIGTERM, then finishes the RPCs in flight (10 s at most).

Exit status: 0 after a signal, 1 when serving fails, 2 for usage errors (bad PORT,
an unknown type, a plugin that failed to load, an address already in use).`,
		Example: `  loomd driver rancher gkelike 50051 --plugins examples/kinds
  grpcurl -plaintext 127.0.0.1:50051 types.Driver/GetCapabilities`,
		Args: func(cmd *cobra.Command, args []string) error {
			if o.bundled {
				return cobra.MaximumNArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.bundled {
				return a.runBundledDriver(cmd.Context(), o, args, cmd.Flags().Changed("work-dir"))
			}
			return a.runRancherDriver(cmd.Context(), o, args[0], args[1], nil)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1", "address to listen on; anything but loopback exposes an unauthenticated plaintext service")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 0, "deadline of every hook, overriding the plugin definition's timeouts (default: theirs, or 10m)")
	cmd.Flags().BoolVar(&o.bundled, "bundled", false, "serve the plugin embedded in this executable (loomd bundle); set by the bundle itself")
	cmd.Flags().MarkHidden("bundled")
	return cmd
}

// parsePort reads a decimal TCP port; 0 asks for a free one.
func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 {
		return 0, fmt.Errorf("PORT %q: want a decimal TCP port (1-65535, or 0 for a free one)", s)
	}
	return p, nil
}

// runRancherDriver serves typ. folders, when set, are the only plugin
// folders loaded (a bundle's).
func (a *App) runRancherDriver(ctx context.Context, o *driverOptions, typ, portArg string, folders []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	port, err := parsePort(portArg)
	if err != nil {
		return usageErr(err)
	}
	logger, err := a.newLogger(o.g.log)
	if err != nil {
		return err
	}
	logger = logger.With("type", typ)
	rt, err := a.newRuntime(ctx, o.g, runtimeConfig{timeout: o.timeout, logger: logger, quietMissingHooks: true, folders: folders, poolSize: 2})
	if err != nil {
		return err
	}
	defer rt.Close()
	info, err := clusterDriverType(rt, typ)
	if err != nil {
		return usageErr(err)
	}

	addr := net.JoinHostPort(o.listen, strconv.Itoa(port))
	ln, err := o.g.listeners.Listen("Rancher driver port (types.Driver)", "tcp", addr)
	if err != nil {
		return usageErr(fmt.Errorf("listening on %s: %w (Rancher gives a free port; by hand, pick another or use 0)", addr, err))
	}
	if ip := net.ParseIP(o.listen); ip == nil || !ip.IsLoopback() {
		logger.Warn("serving the driver beyond loopback: types.Driver has no TLS and no authentication, anyone who reaches the port can create and delete clusters with the credentials they send",
			"listen", o.listen)
	}
	gs := grpc.NewServer()
	rancher.NewServer(rt, typ, logger).Register(gs)
	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(ln) }()
	logger.Info("serving", "addr", ln.Addr().String(), "service", "types.Driver", "plugin", info.Plugin, "version", info.Version,
		"hooks", strings.Join(info.Hooks, ","))

	sigs, stopSignals := a.signals(2)
	defer stopSignals()
	select {
	case err := <-errc:
		return fmt.Errorf("serving types.Driver on %s: %w", ln.Addr(), err)
	case sig := <-sigs:
		logger.Info("stopping", "signal", sig.String())
	case <-ctx.Done():
	}
	stopGracefully(gs, 10*time.Second)
	return nil
}

// stopGracefully lets the RPCs in flight finish, for at most d.
func stopGracefully(gs *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() { gs.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		gs.Stop()
	}
}

// clusterDriverType finds typ among the loaded types and checks it is a
// cluster driver; the error says what was loaded instead.
func clusterDriverType(rt *runtime.Runtime, typ string) (runtime.TypeInfo, error) {
	info, err := kindcall.Lookup(rt, typ, runtime.ClusterDriver)
	if err != nil {
		return info, fmt.Errorf("%w (check --plugins)", err)
	}
	return info, nil
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// runBundledDriver serves the plugin embedded in this executable: the
// whole command line of a bundle is its port.
// The work dir is the unpacked copy's unless LOOM_WORK_DIR names one:
// the jail's working directory may not be writable.
func (a *App) runBundledDriver(ctx context.Context, o *driverOptions, args []string, workDirSet bool) error {
	exe, err := a.executable()
	if err != nil {
		return err
	}
	b, err := bundle.Open(exe)
	if err != nil {
		return usageErr(err)
	}
	if len(args) == 0 {
		return usageErr(fmt.Errorf("%s is the Rancher cluster driver %q (plugin folder %s, %d files, built by loomd %s): run it as %s PORT; it serves types.Driver on 127.0.0.1:PORT",
			filepath.Base(exe), b.Type, b.Folder, b.Files, b.Loomd, filepath.Base(exe)))
	}
	// Rancher's jail has no TMPDIR, and maybe no /tmp: the directory of
	// the binary (Rancher's, writable) is the second choice.
	dir, err := b.Install(os.TempDir(), filepath.Dir(exe))
	if err != nil {
		return fmt.Errorf("%w (set TMPDIR to a writable directory)", err)
	}
	g := *o.g
	g.pluginsDir = dir
	if !workDirSet {
		g.workDir = filepath.Join(dir, "work")
	}
	o.g = &g
	return a.runRancherDriver(ctx, o, b.Type, args[0], []string{filepath.Join(dir, b.Folder)})
}

// executable is the loomd binary this process runs.
func (a *App) executable() (string, error) {
	if a.Executable != "" {
		return a.Executable, nil
	}
	exe, err := selfPath()
	if err != nil {
		return "", fmt.Errorf("finding this executable: %w", err)
	}
	return exe, nil
}
