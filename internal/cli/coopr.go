package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/coopr"
)

// newCooprCmd is `loomd coopr`: tools for moving from Coopr's provisioner.
func (a *App) newCooprCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "coopr",
		Short: "Tools for moving from Coopr's provisioner (docs/coopr.md)",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "flags FILE...",
		Short: "Print the loomd serve flags a Coopr provisioner configuration (provisioner-site.xml) comes to",
		Long: `Reads Coopr provisioner configuration files (Hadoop-style XML, as bin/provisioner -c read them:
give provisioner-default.xml first if you changed it, then provisioner-site.xml; later files win) and prints
the loomd serve command line that keeps their settings, Coopr's defaults included (the provisioner API on
0.0.0.0:55056, where the server already calls it). Settings with no flag, or that behave differently, are
explained on stderr. Add --plugins, --data and whatever else loomd needs.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := coopr.SiteConfig{}
			for _, f := range args {
				file, err := os.Open(f)
				if err != nil {
					return usageErr(fmt.Errorf("reading the Coopr configuration: %w", err))
				}
				err = cfg.Read(file, f)
				file.Close()
				if err != nil {
					return usageErr(err)
				}
			}
			flags, notes, err := cfg.Flags()
			if err != nil {
				return usageErr(fmt.Errorf("%s: %w", strings.Join(args, ", "), err))
			}
			fmt.Fprintln(a.Out, coopr.ServeCommand(flags))
			for _, n := range notes {
				fmt.Fprintln(a.Err, "note: "+n)
			}
			return nil
		},
	})
	return cmd
}
