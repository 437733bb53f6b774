package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"

	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/listeners"
)

// globalOptions are the flags every command shares.
type globalOptions struct {
	configFile string
	pluginsDir string
	workDir    string
	tenant     string
	log        logOptions
	ssh        sshOptions
	// listeners is the registry of the sockets this process listens on
	// (serve's API, its Coopr provisioner API and NATS ports, a driver's
	// gRPC port): loom.http never reaches any of them. A worker process's
	// registry follows the daemon's over the worker protocol.
	listeners *listeners.Registry
	// provisionerID and workerID go into every result (provisionerId,
	// workerId, as a Coopr worker's): serve sets them, for its workers too.
	provisionerID, workerID string
	// taskConns and taskDescs are the per-task caps of plugins whose
	// definitions set no limits.connections / limits.descriptors.
	taskConns, taskDescs int
}

// Main runs loomd with the process's arguments and returns the exit code.
func Main() int {
	return NewSystemApp().Execute(bundledArgs(os.Args[1:]))
}

// Execute runs loomd with args and returns the exit code.
func (a *App) Execute(args []string) int {
	root := a.newRootCmd()
	// `loomd` alone, or with only flags, means `loomd serve`.
	if serve, _, err := root.Find([]string{"serve"}); err == nil && serve != root && defaultsToServe(args) {
		args = append([]string{"serve"}, args...)
	}
	root.SetArgs(args)
	err := root.Execute()
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.err != nil {
			fmt.Fprintf(a.Err, "loomd: %v\n", err)
		}
		if !errors.As(err, &ee) && isFlagError(err) {
			return ExitUsage
		}
	}
	return exitCode(err)
}

func defaultsToServe(args []string) bool {
	if len(args) == 0 {
		return true
	}
	switch args[0] {
	case "-h", "--help", "help", "--version":
		return false
	}
	return strings.HasPrefix(args[0], "-")
}

func isFlagError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "flag") || strings.Contains(msg, "unknown command") ||
		strings.Contains(msg, "arg(s)") || strings.Contains(msg, "argument")
}

func (a *App) newRootCmd() *cobra.Command {
	g := &globalOptions{listeners: listeners.New()}
	root := &cobra.Command{
		Use:   "loomd",
		Short: "Run Coopr-format provisioning plugins written in Lua",
		Long: `loomd runs provider and automator plugins written in Lua, in sandboxed VMs,
on Coopr (formerly Loom) tasks: as a daemon serving a durable queue (loomd serve,
the default), one task from a file (loomd run), or interactively (loomd repl).

Every flag can also be set with a LOOM_* environment variable (--work-dir is
LOOM_WORK_DIR) or in a YAML/TOML file given with --config; flags win over the
environment, which wins over the file.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       a.Version,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			return a.applyEnvAndConfig(cmd, g)
		},
	}
	root.SetIn(a.In)
	root.SetOut(a.Out)
	root.SetErr(a.Err)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr(fmt.Errorf("%w (see '%s --help')", err, c.CommandPath()))
	})
	pf := root.PersistentFlags()
	pf.StringVar(&g.configFile, "config", "", "YAML or TOML file holding any of these settings (keys are flag names)")
	pf.StringVar(&g.pluginsDir, "plugins", "plugins", "directory of plugin folders")
	pf.StringVar(&g.workDir, "work-dir", "work", "work-dir root: hooks run in <work-dir>/<tenant>/<providertypes|automatortypes>/<type>")
	pf.StringVar(&g.tenant, "tenant", "default", "tenant of tasks without a tenantId: work dirs and pooled VMs are per (tenant, plugin type)")
	pf.StringVar(&g.log.format, "log-format", "text", "log format on stderr: text or json")
	pf.StringVar(&g.log.level, "log-level", "info", "log level: debug, info, warn or error")
	g.ssh.addFlags(pf)
	pf.IntVar(&g.taskConns, "task-connections", bindings.DefaultTaskLimits.Conns, "private connections one task may hold at once (ssh.connect{reuse=false}), unless its plugin's definition sets limits.connections")
	pf.IntVar(&g.taskDescs, "task-descriptors", bindings.DefaultTaskLimits.Descriptors, "descriptors one task may hold across calls, connections included, unless its plugin's definition sets limits.descriptors")

	root.AddCommand(
		a.newRunCmd(g),
		a.newPluginsCmd(g),
		a.newVersionCmd(),
	)
	a.addMoreCommands(root, g)
	a.addClusterCommands(root, g)
	a.addKindCommands(root, g)
	root.AddCommand(a.newDriverCmd(g), a.newBundleCmd(g))
	root.AddCommand(a.newServeCmd(g), a.newSubmitCmd(g), a.newTaskCmd(g))
	root.AddCommand(a.newCooprCmd())
	return root
}

// envName is the LOOM_* variable of a flag: --work-dir is LOOM_WORK_DIR.
func envName(flag string) string {
	return "LOOM_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// applyEnvAndConfig fills flags the command line left unset from the
// environment, then from the --config file.
func (a *App) applyEnvAndConfig(cmd *cobra.Command, g *globalOptions) error {
	flags := cmd.Flags()
	if !flags.Changed("config") {
		if v := a.Getenv(envName("config")); v != "" {
			g.configFile = v
		}
	}
	var file map[string]any
	if g.configFile != "" {
		var err error
		if file, err = readConfigFile(g.configFile); err != nil {
			return usageErr(err)
		}
	}
	var ferr error
	flags.VisitAll(func(f *pflag.Flag) {
		if ferr != nil || f.Changed || f.Name == "config" || f.Name == "help" {
			return
		}
		if v := a.Getenv(envName(f.Name)); v != "" {
			if err := flags.Set(f.Name, v); err != nil {
				ferr = usageErr(fmt.Errorf("%s=%q: %v", envName(f.Name), v, err))
			}
			return
		}
		val, ok := file[f.Name]
		if !ok {
			val, ok = file[strings.ReplaceAll(f.Name, "-", "_")]
		}
		if ok {
			for _, s := range configValues(val) {
				if err := flags.Set(f.Name, s); err != nil {
					ferr = usageErr(fmt.Errorf("%s: setting %q: %v", g.configFile, f.Name, err))
					return
				}
			}
		}
	})
	return ferr
}

func configValues(v any) []string {
	if list, ok := v.([]any); ok {
		out := make([]string, len(list))
		for i, x := range list {
			out[i] = fmt.Sprint(x)
		}
		return out
	}
	return []string{fmt.Sprint(v)}
}

// readConfigFile reads a YAML (.yaml/.yml) or TOML (.toml) settings file.
func readConfigFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading --config: %w", err)
	}
	m := map[string]any{}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".toml":
		if _, err := toml.Decode(string(data), &m); err != nil {
			return nil, fmt.Errorf("parsing %s as TOML: %w", path, err)
		}
	case ".yaml", ".yml", ".json":
		if err := yaml.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("parsing %s as YAML: %w", path, err)
		}
	default:
		return nil, fmt.Errorf("--config %s: unknown format; use a .yaml, .yml or .toml file", path)
	}
	return m, nil
}

func version() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}

func (a *App) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print loomd's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(a.Out, "loomd %s\n", a.Version)
			return nil
		},
	}
}
