// Package plugtest runs a plugin's Lua tests (files named *_test.lua in
// the plugin folder) with the real runtime: the same sandbox, loader,
// bindings and result handling loomd uses, so what passes here passes in
// production. It gives the test files a busted-like API (describe, it,
// before_each, after_each, pending, assert), task builders, a hook runner,
// a chain runner that carries results from task to task the way a Coopr
// server does, and HTTP fakes served on 127.0.0.1 that the plugin's
// loom.http reaches instead of the network. loomd test is its command.
package plugtest

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/loomrt/loom/runtime"
)

// Options configure a test run.
type Options struct {
	// Dirs are plugin folders, or folders holding plugin folders;
	// "DIR/..." means the same as DIR. Empty means ".".
	Dirs []string
	// Out receives TAP progress; nil discards it.
	Out io.Writer
	// Timeout bounds each test (its before_each, body and after_each) and
	// overrides the hooks' own timeouts. Default 30s.
	Timeout time.Duration
	// Match, when set, runs only the tests whose full name matches.
	Match *regexp.Regexp
	// Verbose prints the plugin's log lines of every test, not only of
	// failed ones.
	Verbose bool
	// SSHD lets tests start a real OpenSSH sshd on 127.0.0.1 with
	// loom.test.sshd() (root, openssh-server and sudo needed; it creates
	// the sshdtest users). Without it, tests that ask for one are skipped.
	SSHD bool
	// Coverage counts the lines of plugin files (not test files) that
	// ran: Report.Coverage, and a summary after the TAP output.
	Coverage bool
	// Tags, when set, runs only the tests that carry one of these tags
	// ("#slow" in its name or an enclosing describe's, as busted);
	// ExcludeTags leaves out the tests that carry one of those.
	Tags, ExcludeTags []string
	// Shuffle runs the files and each block's tests in a random order,
	// from Seed (the report prints it; the same seed repeats the order).
	Shuffle bool
	Seed    int64
	// Acceptance runs the tests tagged #acceptance against the real API
	// (loomd test --acceptance, LOOM_ACC=1); without it they replay their
	// recording, or are skipped. Record writes the real exchanges to
	// testdata/<file>.cassette.json. Sweep runs only the files'
	// sweepers, for everything any acceptance run left (AccPrefix).
	Acceptance, Record, Sweep bool

	cov *coverage
}

// Report is the outcome of a run.
type Report struct {
	Files      []*FileReport `json:"files"`
	Passed     int           `json:"passed"`
	Failed     int           `json:"failed"`
	Pending    int           `json:"pending"`
	DurationMS float64       `json:"duration_ms"`
	// Coverage is set with Options.Coverage: one entry per plugin file.
	Coverage []*FileCoverage `json:"coverage,omitempty"`
	// Seed is the shuffle's seed, with Options.Shuffle.
	Seed *int64 `json:"seed,omitempty"`
}

// OK reports whether every test passed (pending tests do not count) and
// at least one test file ran.
func (r *Report) OK() bool { return r.Failed == 0 && len(r.Files) > 0 }

// FileReport is one test file's outcome.
type FileReport struct {
	File   string `json:"file"`
	Plugin string `json:"plugin"`
	Type   string `json:"type,omitempty"`
	// Error is set when the file could not run at all (the plugin does
	// not load, the test file has a syntax error or raised outside an it).
	Error      *Failure      `json:"error,omitempty"`
	Tests      []*TestResult `json:"tests"`
	DurationMS float64       `json:"duration_ms"`
}

// Test outcomes.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusPending = "pending"
)

// TestResult is one it block's outcome.
type TestResult struct {
	// Name is the describe names and the it name, joined by " ".
	Name       string   `json:"name"`
	Line       int      `json:"line"`
	Status     string   `json:"status"`
	DurationMS float64  `json:"duration_ms"`
	Failure    *Failure `json:"failure,omitempty"`
	// Logs are the plugin's log lines during the test (failed tests, or
	// every test with Verbose).
	Logs []string `json:"logs,omitempty"`
	// Skip says why a pending test did not run, when it was skipped at
	// run time (loom.test.sshd without --sshd).
	Skip string `json:"skip,omitempty"`
}

// Failure says why a test failed.
type Failure struct {
	Message string `json:"message"`
	// Location is file:line of the failed assertion or error.
	Location  string `json:"location,omitempty"`
	Diff      string `json:"diff,omitempty"`
	Traceback string `json:"traceback,omitempty"`
}

func (f *Failure) String() string {
	if f.Location != "" && !strings.HasPrefix(f.Message, f.Location) {
		return f.Location + ": " + f.Message
	}
	return f.Message
}

// target is one plugin folder and its test files.
type target struct {
	dir   string
	tests []string
}

// testFile is one test file to run and its plugin folder.
type testFile struct{ dir, file string }

// Run finds the test files under opts.Dirs and runs them, printing TAP
// progress to opts.Out. The error is non-nil only when the run could not
// start (a folder that does not exist, no test file found); failed tests
// are in the report.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if len(opts.Dirs) == 0 {
		opts.Dirs = []string{"."}
	}
	targets, err := discover(opts.Dirs)
	if err != nil {
		return nil, err
	}
	if opts.Coverage {
		opts.cov = newCoverage()
	}
	start := time.Now()
	rep := &Report{}
	tap := newTAP(opts.Out)
	var files []testFile
	for _, tg := range targets {
		for _, file := range tg.tests {
			files = append(files, testFile{tg.dir, file})
		}
	}
	if opts.Shuffle {
		seed := opts.Seed
		rep.Seed = &seed
		tap.comment(fmt.Sprintf("shuffled with seed %d (loomd test --shuffle --seed %d repeats this order)", seed, seed))
		rand.New(rand.NewSource(seed)).Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	}
	for _, tf := range files {
		fr := runFile(ctx, opts, tf.dir, tf.file, tap)
		rep.Files = append(rep.Files, fr)
		if fr.Error != nil {
			rep.Failed++
		}
		for _, t := range fr.Tests {
			switch t.Status {
			case StatusPass:
				rep.Passed++
			case StatusFail:
				rep.Failed++
			case StatusPending:
				rep.Pending++
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.DurationMS = ms(time.Since(start))
	tap.summary(rep)
	if opts.cov != nil {
		var dirs []string
		for _, tg := range targets {
			dirs = append(dirs, tg.dir)
		}
		rep.Coverage = opts.cov.report(dirs)
		writeCoverage(opts.Out, rep.Coverage)
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// discover maps the arguments to plugin folders and their test files.
func discover(dirs []string) ([]target, error) {
	var out []target
	seen := map[string]bool{}
	seenFile := map[string]bool{}
	for _, arg := range dirs {
		d := strings.TrimSuffix(strings.TrimSuffix(arg, "..."), "/")
		if d == "" {
			d = "."
		}
		st, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("loomd test %s: %w", arg, err)
		}
		if !st.IsDir() {
			// A test file: run it alone, in its plugin folder.
			if !strings.HasSuffix(d, "_test.lua") {
				return nil, fmt.Errorf("loomd test %s: not a test file or a folder: give a plugin folder, a folder of plugin folders, or a *_test.lua file", arg)
			}
			dir := pluginFolderOf(d)
			if dir == "" {
				return nil, fmt.Errorf("loomd test %s: no plugin folder holds this file (a folder above it with a JSON definition declaring providertypes, automatortypes or another kind's types)", arg)
			}
			file := filepath.Clean(d)
			if !seenFile[file] {
				seenFile[file] = true
				out = append(out, target{dir: dir, tests: []string{file}})
			}
			continue
		}
		folders, err := pluginFolders(d)
		if err != nil {
			return nil, fmt.Errorf("loomd test %s: %w", arg, err)
		}
		if len(folders) == 0 {
			return nil, fmt.Errorf("loomd test %s: no plugin folder here (a plugin folder holds a JSON definition declaring providertypes, automatortypes or another kind's types: clusterdrivers, bucketprovisioners, cloudproviders, kloudproviders)", arg)
		}
		for _, f := range folders {
			if seen[f] {
				continue
			}
			seen[f] = true
			tests, err := testFiles(f)
			if err != nil {
				return nil, fmt.Errorf("loomd test %s: %w", f, err)
			}
			if len(tests) > 0 {
				out = append(out, target{dir: f, tests: tests})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("loomd test %s: no test files (name them <something>_test.lua, in the plugin folder)", strings.Join(dirs, " "))
	}
	return out, nil
}

// pluginFolderOf is the plugin folder that holds file: the nearest
// folder above it with a definition, or "".
func pluginFolderOf(file string) string {
	d := filepath.Dir(filepath.Clean(file))
	for {
		if runtime.IsPluginFolder(d) {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return ""
		}
		d = parent
	}
}

// pluginFolders returns d when it is a plugin folder, else the plugin
// folders under it (any depth, hidden folders skipped), sorted.
func pluginFolders(d string) ([]string, error) {
	if runtime.IsPluginFolder(d) {
		return []string{filepath.Clean(d)}, nil
	}
	var out []string
	err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !e.IsDir() {
			return nil
		}
		if p != d && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir
		}
		if p != d && runtime.IsPluginFolder(p) {
			out = append(out, filepath.Clean(p))
			return filepath.SkipDir
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}

// testFiles lists the *_test.lua files of a plugin folder, recursively.
func testFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() && p != dir && strings.HasPrefix(e.Name(), ".") {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(e.Name(), "_test.lua") {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
