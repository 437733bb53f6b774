package ssh

import (
	"github.com/loomrt/loom/bindings"
	"github.com/loomrt/loom/bindings/localpath"
)

// resolveLocal turns a plugin-supplied local path into a real path inside
// the hook's work dir, its plugin folder or a resource the task names,
// after every symlink is resolved (package localpath holds the rule and
// keeps errors from revealing anything outside). Relative paths are
// relative to the hook's work dir. With forWrite, the file itself may be
// missing and missing parent dirs are created; only the work dir is
// writable.
func resolveLocal(h bindings.Host, p string, forWrite bool) (string, error) {
	return localpath.Real(h, "ssh local path", p, forWrite)
}
