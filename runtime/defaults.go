package runtime

import (
	"github.com/loomrt/loom/bindings"
	fsb "github.com/loomrt/loom/bindings/fs"
	jsonb "github.com/loomrt/loom/bindings/json"
	logb "github.com/loomrt/loom/bindings/log"
	timeb "github.com/loomrt/loom/bindings/time"
)

// DefaultBindings returns a registry with the bindings every plugin VM
// needs: loom.log (also the global log), loom.json, loom.fs (files
// confined to the work dir) and loom.time (sleep within the hook's
// deadline). Programs that want SSH and HTTP register those bindings
// too (loomd does).
func DefaultBindings() *bindings.Registry {
	return bindings.NewRegistry(logb.New(), jsonb.New(), fsb.New(), timeb.New())
}
