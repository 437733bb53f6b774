package cli

import "github.com/spf13/cobra"

// addMoreCommands registers the commands beyond run, plugins and version.
// Each lives in its own file.
func (a *App) addMoreCommands(root *cobra.Command, g *globalOptions) {
	root.AddCommand(a.newReplCmd(g))
	root.AddCommand(a.newStubsCmd(g))
	root.AddCommand(a.newWorkerCmd(g))
	root.AddCommand(a.newTestCmd(g))
	root.AddCommand(a.newNewCmd(g))
}
