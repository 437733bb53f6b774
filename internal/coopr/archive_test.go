package coopr_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/coopr/coopfake"
)

// entry is one member of a hand-built resource archive.
type entry struct {
	name, link, data string
	kind             byte // tar type flag
}

func tgzEntries(t *testing.T, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.kind, Mode: 0o755}
		if e.kind == tar.TypeReg {
			h.Mode, h.Size = 0o644, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.kind == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// TestResourceArchiveEscapes: hostile resource archives (issue 20 item 2)
// never write outside the version being unpacked, and fail the sync with
// a message naming the entry. The first case is the attack: a
// link to its own folder, chained so that a link whose text stays inside
// lands, on disk, at /, and a file written through it.
func TestResourceArchiveEscapes(t *testing.T) {
	outside := t.TempDir()
	chain := strings.Repeat("x/", 40)
	up := strings.Repeat("../", 40)
	abs := strings.TrimPrefix(outside, "/")
	cases := []struct {
		name    string
		entries []entry
		refuse  string // what the sync's error says
	}{
		{"chained links", []entry{
			{name: "kit/", kind: tar.TypeDir},
			{name: "kit/x", link: ".", kind: tar.TypeSymlink},
			{name: "kit/" + chain + "l", link: up, kind: tar.TypeSymlink},
			{name: "kit/l/" + abs + "/pwned", data: "pwned", kind: tar.TypeReg},
		}, "link"},
		{"link to a link", []entry{
			{name: "kit/a", link: "b/../..", kind: tar.TypeSymlink},
			{name: "kit/b", link: ".", kind: tar.TypeSymlink},
			{name: "kit/a/" + abs + "/pwned", data: "pwned", kind: tar.TypeReg},
		}, "link"},
		{"a link, then a directory of the same name", []entry{
			{name: "kit/d", link: up + abs, kind: tar.TypeSymlink},
			{name: "kit/d/", kind: tar.TypeDir},
			{name: "kit/d/pwned", data: "pwned", kind: tar.TypeReg},
		}, "kit/d"},
		{"a file through a link inside", []entry{
			{name: "kit/in/", kind: tar.TypeDir},
			{name: "kit/s", link: "in", kind: tar.TypeSymlink},
			{name: "kit/s/f", data: "x", kind: tar.TypeReg},
		}, "link"},
		{"dot-dot in a name", []entry{{name: "kit/../../" + abs + "/pwned", data: "pwned", kind: tar.TypeReg}}, ".."},
		{"dot-dot that stays inside", []entry{{name: "kit/a/../b", data: "x", kind: tar.TypeReg}}, ".."},
		{"absolute name", []entry{{name: outside + "/pwned", data: "pwned", kind: tar.TypeReg}}, "absolute"},
		{"absolute link", []entry{{name: "kit/abs", link: outside, kind: tar.TypeSymlink}}, "link"},
		{"hard link", []entry{
			{name: "kit/f", data: "x", kind: tar.TypeReg},
			{name: "kit/h", link: "kit/f", kind: tar.TypeLink},
		}, "hard link"},
		{"device", []entry{{name: "kit/null", kind: tar.TypeChar}}, "device"},
		{"fifo", []entry{{name: "kit/p", kind: tar.TypeFifo}}, "FIFO"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			work := t.TempDir()
			reg := prometheus.NewRegistry()
			m := coopr.NewMetrics()
			reg.MustRegister(m.Collectors()...)
			var logs syncBuffer
			srv, p := start(t, coopr.Config{Runner: &runner{}, WorkDir: work, Metrics: m, Logger: logTo(&logs)})
			srv.SetResource("t", "automatortypes", "shell", "archives", "kit", 1, tgzEntries(t, c.entries))
			spec := map[string]any{"automatortypes": map[string]any{"shell": map[string]any{
				"archives": map[string]any{"format": "archive", "active": []any{map[string]any{"name": "kit", "version": 1}}}}}}
			if _, err := coopfake.PutTenant(ctx(t), "http://"+p.APIAddr(), "t", 0, spec); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the sync to end", func() bool {
				return metric(t, reg, "loom_coopr_resource_syncs_total", map[string]string{"tenant": "t", "outcome": "failed"}) > 0 ||
					metric(t, reg, "loom_coopr_resource_syncs_total", map[string]string{"tenant": "t", "outcome": "ok"}) > 0
			})
			if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
				os.Remove(filepath.Join(outside, "pwned"))
				t.Fatalf("the archive wrote %s, outside the work root", filepath.Join(outside, "pwned"))
			}
			if got := metric(t, reg, "loom_coopr_resource_syncs_total", map[string]string{"tenant": "t", "outcome": "failed"}); got != 1 {
				t.Errorf("the sync did not fail (failed syncs: %v); log:\n%s", got, logs.String())
			}
			if !strings.Contains(logs.String(), c.refuse) {
				t.Errorf("the log does not say %q:\n%s", c.refuse, logs.String())
			}
			// Nothing of the refused version is kept or activated.
			if _, err := os.Lstat(filepath.Join(work, "t/automatortypes/shell/archives/kit")); err == nil {
				t.Errorf("the refused archive was activated")
			}
			left, _ := filepath.Glob(filepath.Join(work, "t/automatortypes/shell/.resources/archives/kit/*"))
			if len(left) > 0 {
				t.Errorf("the refused archive left %v", left)
			}
		})
	}
}

// TestResourceArchiveLinksInside: links that stay inside the archive,
// `..` in their targets included, are kept.
func TestResourceArchiveLinksInside(t *testing.T) {
	work := t.TempDir()
	var logs syncBuffer
	srv, p := start(t, coopr.Config{Runner: &runner{}, WorkDir: work, Logger: logTo(&logs)})
	srv.SetResource("t", "automatortypes", "shell", "archives", "kit", 1, tgzEntries(t, []entry{
		{name: "kit/lib/", kind: tar.TypeDir},
		{name: "kit/lib/tool.sh", data: "echo tool\n", kind: tar.TypeReg},
		{name: "kit/bin/tool", link: "../lib/tool.sh", kind: tar.TypeSymlink},
		{name: "kit/current", link: "lib", kind: tar.TypeSymlink},
		{name: "kit/again", link: "current/tool.sh", kind: tar.TypeSymlink},
	}))
	spec := map[string]any{"automatortypes": map[string]any{"shell": map[string]any{
		"archives": map[string]any{"format": "archive", "active": []any{map[string]any{"name": "kit", "version": 1}}}}}}
	if _, err := coopfake.PutTenant(ctx(t), "http://"+p.APIAddr(), "t", 0, spec); err != nil {
		t.Fatal(err)
	}
	kit := filepath.Join(work, "t/automatortypes/shell/archives/kit")
	eventually(t, "the sync to end", func() bool { return strings.Contains(logs.String(), "resources synced") })
	if b, err := os.ReadFile(filepath.Join(kit, "bin/tool")); err != nil || string(b) != "echo tool\n" {
		t.Fatalf("kit/bin/tool: %q %v; log:\n%s", b, err, logs.String())
	}
	if b, err := os.ReadFile(filepath.Join(kit, "again")); err != nil || string(b) != "echo tool\n" {
		t.Errorf("kit/again: %q %v", b, err)
	}
}
