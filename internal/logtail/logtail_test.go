package logtail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "n0.log"), []byte("one\ntwo\nthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := Files(dir, []string{"n0", "n1"}, 2)
	if !strings.Contains(got, "the last 2 lines of n0.log:\ntwo\nthree") || strings.Contains(got, "one") {
		t.Errorf("n0's tail: %q", got)
	}
	if !strings.Contains(got, "--- n1: ") || !strings.Contains(got, "no such file") {
		t.Errorf("n1, missing, should say why: %q", got)
	}
}
