// Command loomd runs Loom's provisioning plugins: as a daemon serving a
// durable task queue, one task at a time from a file, or in a REPL.
package main

import (
	"os"

	"github.com/loomrt/loom/internal/cli"
)

func main() { os.Exit(cli.Main()) }
