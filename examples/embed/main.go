// Command embed shows Loom's runtime as a library: a Go program loads a
// plugins directory and runs a Coopr task through it, without loomd.
//
// It also shows the explicit opt-in for exposing the host program's own
// Go values to its plugins (Options.Expose, through gopher-luar): the
// plugin below calls inventory:Lookup from Lua.
//
//	go run ./examples/embed
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/loomrt/loom/runtime"
)

// Inventory is a host-program value a trusted plugin may call.
type Inventory struct{ hosts map[string]string }

// Lookup returns the address of a named host.
func (i *Inventory) Lookup(name string) string { return i.hosts[name] }

const plugin = `
local loom = require("loom")
Embedded = loom.Provider:extend("Embedded")

function Embedded:create(input)
  -- require("loom.host") holds the values the Go program exposed.
  local inv = require("loom.host").inventory
  self.result.result.providerid = "emb-" .. input.hostname
  self.result.result.address = inv:Lookup(input.hostname)
  log.info("created %s", input.hostname)
end

function Embedded:confirm(input) end
function Embedded:delete(input) end
`

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "loom-embed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pluginDir := filepath.Join(dir, "plugins", "embedded")
	if err := os.MkdirAll(pluginDir, 0o755); err != nil {
		return err
	}
	def := `{"name":"embedded","providertypes":["embedded"],"embedded":{"name":"embedded","classname":"Embedded"}}`
	if err := os.WriteFile(filepath.Join(pluginDir, "embedded.json"), []byte(def), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(pluginDir, "embedded.lua"), []byte(plugin), 0o644); err != nil {
		return err
	}

	rt, err := runtime.New(runtime.Options{
		PluginsDir: filepath.Join(dir, "plugins"),
		WorkDir:    filepath.Join(dir, "work"),
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Expose:     map[string]any{"inventory": &Inventory{hosts: map[string]string{"web1": "10.0.0.7"}}},
	})
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.Load(context.Background()); err != nil {
		return err
	}
	for _, e := range rt.LoadErrors() {
		fmt.Fprintln(os.Stderr, "load:", e)
	}

	task := []byte(`{"taskId":"embed-1","taskName":"CREATE","nodeId":"n1",
		"config":{"hostname":"web1","provider":{"providertype":"embedded","provisioner":{}}}}`)
	res, err := rt.Run(context.Background(), task)
	if err != nil {
		return err
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(out))
	if res.Status != 0 {
		return fmt.Errorf("task failed: %s", res.Message)
	}
	return nil
}
