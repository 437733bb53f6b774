package static_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An inventory key_file must live in a declared resource folder (keys/ or
// ssh_keys/): automators may read another plugin's files only there, so a
// key elsewhere fails CREATE, before the host is claimed, with a message
// saying where to put it (issue 10 item 2).
func TestKeyFileMustBeInResourceFolder(t *testing.T) {
	e := newEnv(t)
	os.MkdirAll(e.providerDir(), 0o755)
	if err := os.WriteFile(filepath.Join(e.providerDir(), "stray.pem"), []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.writeInventory(map[string]any{"hosts": []any{
		map[string]any{"id": "stray", "address": "10.0.3.1", "key_file": "stray.pem", "labels": map[string]any{"flavor": "a"}},
		map[string]any{"id": "escape", "address": "10.0.3.2", "key_file": "keys/../stray.pem", "labels": map[string]any{"flavor": "b"}},
	}})
	for _, flavor := range []string{"a", "b"} {
		r := e.create("n-"+flavor, map[string]any{"flavor": flavor, "image": ""}, nil)
		if r.Status == 0 || !strings.Contains(r.Message, "must be in the keys/ or ssh_keys/ folder") {
			t.Errorf("flavor %s: a key_file outside the resource folders was accepted: status %d: %s", flavor, r.Status, r.Message)
		}
	}
}
