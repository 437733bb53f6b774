// Package std builds the registry of every binding loomd gives plugins:
// loom.log, loom.json, loom.fs, loom.time, loom.http and loom.ssh. It is
// the one place that lists them, for loomd and for tests that want to run
// plugins exactly as loomd does.
package std

import (
	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	sshb "github.com/loomrt/loom/bindings/ssh"
	timeb "github.com/loomrt/loom/bindings/time"
)

// Options configure the bindings that hold process-wide state.
type Options struct {
	HTTP httpb.Options
	SSH  sshb.Options
}

// New returns a registry holding loomd's standard bindings.
func New(o Options) *bindings.Registry {
	return bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.New(),
		httpb.New(o.HTTP), sshb.New(o.SSH))
}
