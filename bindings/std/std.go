// Package std builds the registry of every binding loomd gives plugins:
// loom.log, loom.json, loom.fs, loom.time, loom.http, loom.ssh,
// loom.crypto and loom.xml. It is
// the one place that lists them, for loomd and for tests that want to run
// plugins exactly as loomd does.
package std

import (
	"github.com/loomrt/loom/bindings"
	cryptob "github.com/loomrt/loom/bindings/crypto"
	fsb "github.com/loomrt/loom/bindings/fs"
	httpb "github.com/loomrt/loom/bindings/http"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	sshb "github.com/loomrt/loom/bindings/ssh"
	timeb "github.com/loomrt/loom/bindings/time"
	xmlb "github.com/loomrt/loom/bindings/xml"
)

// Options configure the bindings that hold process-wide state.
type Options struct {
	HTTP httpb.Options
	SSH  sshb.Options
	// Clock is loom.time's clock and, unless HTTP.Clock or SSH.Clock is
	// set, the one loom.http's retries and ssh.wait_host_keys wait on; nil
	// means the wall clock.
	Clock bindings.Clock
}

// New returns a registry holding loomd's standard bindings.
func New(o Options) *bindings.Registry {
	if o.HTTP.Clock == nil {
		o.HTTP.Clock = o.Clock
	}
	if o.SSH.Clock == nil {
		o.SSH.Clock = o.Clock
	}
	return bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.NewWithClock(o.Clock),
		httpb.New(o.HTTP), sshb.New(o.SSH), cryptob.New(), xmlb.New())
}
