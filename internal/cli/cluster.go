package cli

import "github.com/spf13/cobra"

// addClusterCommands registers the cluster commands: plan and apply.
func (a *App) addClusterCommands(root *cobra.Command, g *globalOptions) {
	root.AddCommand(a.newPlanCmd(g))
}
