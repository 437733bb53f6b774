package extract

import (
	"archive/zip"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The fuzz targets unpack whatever the fuzzer makes and assert the
// invariants of sandbox.check: nothing is written outside the directory
// and no link left in it leads out, whether the archive was accepted or
// refused. Their seed corpora (testdata/fuzz/Fuzz*/) are the zip-slip
// archives of `refused` plus those the fuzzer found; they run as plain
// tests under `go test`. LOOM_WRITE_CORPUS=1 rewrites the seeds.

// script renders members as FuzzTarScript's input: one entry a line,
// "<kind> <name> [<target>]".
func script(ms []member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%c %s %s\n", m.kind, m.name, m.target)
	}
	return b.String()
}

// parseScript is script's inverse, bounded to 64 entries.
func parseScript(s string) []member {
	var ms []member
	for _, line := range strings.Split(s, "\n") {
		if len(ms) == 64 {
			break
		}
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 || len(f[0]) != 1 || f[1] == "" {
			continue
		}
		m := member{kind: f[0][0], name: f[1]}
		if len(f) == 3 {
			m.target = strings.TrimSpace(f[2])
		}
		ms = append(ms, m)
	}
	return ms
}

// tarBytes is tarOf for fuzzing: an entry the tar writer refuses (a
// name that is not UTF-8 in PAX) makes ok false.
func tarBytes(ms []member) (b []byte, ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return tarOf(panicTB{}, ms), true
}

// panicTB turns tarOf's Fatalf into a panic tarBytes recovers.
type panicTB struct{ testing.TB }

func (panicTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (panicTB) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }

func FuzzTarScript(f *testing.F) {
	for _, c := range refused {
		f.Add(script(c.members))
	}
	f.Add("d kit/\nf kit/a\nl kit/b a\nl kit/c ../kit/b\n")
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := tarBytes(parseScript(s))
		if !ok {
			t.Skip()
		}
		sb := newSandbox(t)
		_, err := Tar(bytes.NewReader(b), sb.root, Options{Links: true})
		sb.check(t)
		if err != nil && !IsRefused(err) && !strings.Contains(err.Error(), "reading the archive") {
			t.Fatalf("not a refusal: %v", err)
		}
	})
}

func FuzzTar(f *testing.F) {
	for _, c := range refused {
		f.Add(tarOf(f, c.members))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sb := newSandbox(t)
		Tar(bytes.NewReader(b), sb.root, Options{Links: true})
		sb.check(t)
	})
}

func FuzzZip(f *testing.F) {
	for _, c := range refused {
		f.Add(zipOf(f, withoutHardLinks(c.members)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		sb := newSandbox(t)
		Zip(zr, sb.root, Options{Links: true})
		sb.check(t)
	})
}

func withoutHardLinks(ms []member) []member {
	var out []member
	for _, m := range ms {
		if m.kind != 'h' {
			out = append(out, m)
		}
	}
	return out
}

// TestWriteCorpus writes the zip-slip seed corpus files with
// LOOM_WRITE_CORPUS=1; otherwise it checks they are there.
func TestWriteCorpus(t *testing.T) {
	slug := regexp.MustCompile(`[^a-z0-9]+`)
	for _, c := range refused {
		name := "zipslip-" + strings.Trim(slug.ReplaceAllString(strings.ToLower(c.name), "-"), "-")
		for target, data := range map[string]string{
			"FuzzTarScript": fmt.Sprintf("go test fuzz v1\nstring(%q)\n", script(c.members)),
			"FuzzTar":       fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", tarOf(t, c.members)),
			"FuzzZip":       fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", zipOf(t, withoutHardLinks(c.members))),
		} {
			p := filepath.Join("testdata", "fuzz", target, name)
			if os.Getenv("LOOM_WRITE_CORPUS") == "1" {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("seed %s is missing (LOOM_WRITE_CORPUS=1 go test -run TestWriteCorpus ./internal/extract writes it)", p)
			}
		}
	}
}
