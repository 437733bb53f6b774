package plugtest

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/yuin/gopher-lua/parse"
)

func run(t *testing.T, opts Options) (*Report, string) {
	t.Helper()
	var out bytes.Buffer
	opts.Out = &out
	rep, err := Run(context.Background(), opts)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep, out.String()
}

// TestBundledPlugins runs the Lua suites shipped with the plugins: they
// are part of make test.
func TestBundledPlugins(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"../../plugins/..."}})
	if !rep.OK() || rep.Passed < 20 {
		t.Fatalf("bundled plugin tests: %d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
	plugins := map[string]bool{}
	for _, f := range rep.Files {
		plugins[f.Plugin] = true
	}
	for _, p := range []string{"static", "digitalocean", "shell", "openstack", "docker", "aws", "chef-solo", "google", "joyent"} {
		if !plugins[p] {
			t.Errorf("no test file ran for plugin %s:\n%s", p, out)
		}
	}
}

// TestAPI runs a suite that uses every part of the API; all must pass.
func TestAPI(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/api"}})
	if !rep.OK() || rep.Pending != 1 {
		t.Fatalf("%d passed, %d failed, %d pending\n%s", rep.Passed, rep.Failed, rep.Pending, out)
	}
	if !strings.Contains(out, "ok 19 - a pending test is reported, not run # SKIP pending") {
		t.Errorf("TAP output lacks the pending line:\n%s", out)
	}
}

// TestFailures checks how each kind of failure is reported: where, what,
// and the diff or logs that explain it.
func TestFailures(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/failing"}, Timeout: time.Second})
	if rep.OK() || rep.Passed != 0 || rep.Failed != 8 {
		t.Fatalf("want 8 failures, got %d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
	const file = "testdata/failing/failing_test.lua"
	want := map[string]struct{ at, msg, extra string }{
		"same":                                   {file + ":3", "values differ at b.c", "b.c: expected 2 (number), got 3 (number)"},
		"equals":                                 {file + ":7", `the name: expected "x", got "y"`, ""},
		"error":                                  {file + ":12", "attempt to index local 't' (a nil value)", ""},
		"handler":                                {file + ":18", `expected "POST", got "GET"`, ""},
		"unmatched":                              {file + ":24", "no route for GET /nothing on the HTTP fake for h.example.com", ""},
		"with a failing before_each is reported": {file + ":29", "in before_each: setup failed", ""},
		"timeout":                                {"", "test timed out after 1s", ""},
		"hook failure is in the logs":            {file + ":39", "expected 0 (number), got 1 (number)", "create broke"},
	}
	for _, tr := range rep.Files[0].Tests {
		w, ok := want[tr.Name]
		if !ok {
			t.Errorf("unexpected test %q", tr.Name)
			continue
		}
		f := tr.Failure
		if tr.Status != StatusFail || f == nil {
			t.Errorf("%s: status %s, want fail", tr.Name, tr.Status)
			continue
		}
		if w.at != "" && f.Location != w.at {
			t.Errorf("%s: at %q, want %q", tr.Name, f.Location, w.at)
		}
		if !strings.Contains(f.Message, w.msg) {
			t.Errorf("%s: message %q, want it to contain %q", tr.Name, f.Message, w.msg)
		}
		if w.extra != "" && !strings.Contains(f.Diff+strings.Join(tr.Logs, "\n"), w.extra) {
			t.Errorf("%s: diff and logs lack %q: %q %q", tr.Name, w.extra, f.Diff, tr.Logs)
		}
	}
	if !strings.Contains(out, "not ok 1 - same\n  ---\n  at: "+file+":3\n") {
		t.Errorf("TAP output:\n%s", out)
	}
	var junit bytes.Buffer
	if err := WriteJUnit(&junit, rep); err != nil {
		t.Fatal(err)
	}
	var parsed junitSuites
	if err := xml.Unmarshal(junit.Bytes(), &parsed); err != nil {
		t.Fatalf("JUnit output does not parse: %v\n%s", err, junit.String())
	}
	if parsed.Tests != 8 || parsed.Failures != 8 || len(parsed.Suites) != 1 {
		t.Errorf("JUnit: %d tests, %d failures, %d suites", parsed.Tests, parsed.Failures, len(parsed.Suites))
	}
}

// TestClock runs a polling plugin on the virtual clock: waits are
// recorded and cost nothing, deadlines still hold.
func TestClock(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/clock"}})
	if !rep.OK() || rep.Passed != 5 {
		t.Fatalf("%d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
}

// TestSSHFake runs an automator that uses every part of loom.ssh against
// SSH fake hosts; all must pass.
func TestSSHFake(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/sshapi"}})
	if !rep.OK() || rep.Passed != 14 {
		t.Fatalf("%d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
}

// TestSSHFailures checks how the SSH fake fails a test: an unexpected
// command, a command that did not run, an assertion in a handler.
func TestSSHFailures(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/sshfailing"}})
	const file = "testdata/sshfailing/sshfailing_test.lua"
	want := map[string]struct{ at, msg, diff string }{
		"unexpected": {file + ":7", `unexpected command on the SSH fake for 10.0.0.7: "rm -rf /"; add an expectation`, ""},
		"not ran":    {file + ":14", `expected "apt-get install -y nginx" to run at least once, it ran 0 time(s)`, `exec "apt-get update" -> exit 0`},
		"handler":    {file + ":20", `expected "deploy", got "root"`, ""},
	}
	if rep.Failed != len(want) || rep.Passed != 0 {
		t.Fatalf("want %d failures, got %d passed, %d failed\n%s", len(want), rep.Passed, rep.Failed, out)
	}
	for _, tr := range rep.Files[0].Tests {
		w := want[tr.Name]
		f := tr.Failure
		if f == nil || f.Location != w.at || !strings.Contains(f.Message, w.msg) || !strings.Contains(f.Diff, w.diff) {
			t.Errorf("%s: got %+v, want at %s message %q diff %q", tr.Name, f, w.at, w.msg, w.diff)
		}
	}
}

// TestRealSSHD runs the shell automator's real-sshd case (loomd test
// --sshd): loom.test.sshd starts OpenSSH on 127.0.0.1. Without --sshd the
// case is skipped, with the reason.
func TestRealSSHD(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"../../plugins/shell"}, Match: regexpMust("real sshd")})
	if rep.Pending != 1 || !strings.Contains(out, "# SKIP needs a real sshd: run loomd test --sshd") {
		t.Fatalf("without --sshd: want the case skipped\n%s", out)
	}
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("loom.test.sshd needs root")
	}
	rep, out = run(t, Options{Dirs: []string{"../../plugins/shell"}, Match: regexpMust("real sshd"), SSHD: true})
	if !rep.OK() || rep.Passed != 1 {
		t.Fatalf("%d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
}

// TestShellWords splits what loom.ssh sends as a POSIX shell would.
func TestShellWords(t *testing.T) {
	for in, want := range map[string][]string{
		`a 'b c' "d \"e\"" f\ g`:     {"a", "b c", `d "e"`, "f g"},
		`'it'\''s' ''`:               {"it's", ""},
		"sudo -n -u root -- /bin/sh": {"sudo", "-n", "-u", "root", "--", "/bin/sh"},
	} {
		got, err := ShellWords(in)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("ShellWords(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ShellWords("'open"); err == nil {
		t.Error("an unterminated quote passed")
	}
}

// TestCoverage counts the plugin's lines that ran: the sleep that raised
// ran, the line after it did not, nor the hook no test calls; the lcov
// file says the same.
func TestCoverage(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/clock"}, Coverage: true})
	if !rep.OK() || len(rep.Coverage) != 1 {
		t.Fatalf("coverage %+v\n%s", rep.Coverage, out)
	}
	c := rep.Coverage[0]
	// The closing "end" lines (25, 30, 34) are not counted, as luacov
	// does: create's always returns or raises before its end.
	if c.File != "testdata/clock/clock.lua" || c.Lines != 23 || c.Hit != 19 {
		t.Errorf("got %s %d/%d, want testdata/clock/clock.lua 19/23", c.File, c.Hit, c.Lines)
	}
	for _, l := range []int{25, 30, 34} {
		if _, counted := c.counts[l]; counted {
			t.Errorf("the end line %d is counted", l)
		}
	}
	for l, want := range map[int]bool{28: true, 29: false, 33: false, 12: true} {
		if got := c.counts[l] > 0; got != want {
			t.Errorf("line %d ran: %v, want %v", l, got, want)
		}
	}
	if !strings.Contains(out, "# coverage: 82.6% of 23 lines in 1 plugin files\n#   testdata/clock/clock.lua  82.6% (19/23)  missed: 19, 24, 29, 33\n") {
		t.Errorf("summary:\n%s", out)
	}
	var lcov bytes.Buffer
	if err := WriteLCOV(&lcov, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SF:/", "/testdata/clock/clock.lua\n", "DA:28,1\n", "DA:29,0\n", "LF:23\nLH:19\nend_of_record\n"} {
		if !strings.Contains(lcov.String(), want) {
			t.Errorf("lcov lacks %q:\n%s", want, lcov.String())
		}
	}
}

// TestMatch runs only the tests whose name matches.
func TestMatch(t *testing.T) {
	rep, _ := run(t, Options{Dirs: []string{"testdata/failing"}, Match: regexpMust("^equals$")})
	if len(rep.Files[0].Tests) != 1 || rep.Files[0].Tests[0].Name != "equals" {
		t.Fatalf("ran %+v", rep.Files[0].Tests)
	}
}

func TestDiscoverErrors(t *testing.T) {
	empty := t.TempDir()
	for _, dir := range []string{"testdata/nope", "plugtest.go", empty} {
		if _, err := Run(context.Background(), Options{Dirs: []string{dir}}); err == nil {
			t.Errorf("%s: no error", dir)
		}
	}
}

func regexpMust(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// The test API's LuaLS stub is valid Lua.
func TestStubParses(t *testing.T) {
	if _, err := parse.Parse(strings.NewReader(Stub), "loom.test.d.lua"); err != nil {
		t.Fatal(err)
	}
}

// TestSpies runs spies, stubs and mocks on the plugin's own tables: the
// hooks run in the test's VM and call what the test put there.
func TestSpies(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/spies"}})
	if !rep.OK() || rep.Passed != 10 {
		t.Fatalf("%d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
}

// TestSpyFailures checks what a failed spy or luassert assertion says.
func TestSpyFailures(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/spyfailing"}})
	const file = "testdata/spyfailing/spyfailing_test.lua"
	want := map[string]struct{ at, msg string }{
		"called_with":  {file + ":7", `expected the stub on request to be called with (match._, "POST", "/v1/servers", { name = "loom-web2" }), its 1 call(s):`},
		"called times": {file + ":14", "expected the spy on remember to be called exactly 2 time(s), it was called 1 time(s)"},
		"was_not":      {file + ":20", "expected the stub on request not to be called, it was called 1 time(s)"},
		"is_not":       {file + ":24", "expected a value other than 1 (number)"},
		"has_no":       {file + ":28", "expected no error, got: " + file + ":28: kaboom"},
		"near":         {file + ":32", "expected 1.5 (number) within 0.1 of 1"},
		"unknown word": {file + ":36", `assert.is_shiny: unknown word "shiny"`},
		"not a spy":    {file + ":40", "is not a spy or stub"},
	}
	if rep.Failed != len(want) || rep.Passed != 0 {
		t.Fatalf("want %d failures, got %d passed, %d failed\n%s", len(want), rep.Passed, rep.Failed, out)
	}
	for _, tr := range rep.Files[0].Tests {
		w := want[tr.Name]
		f := tr.Failure
		if f == nil || f.Location != w.at || !strings.Contains(f.Message, w.msg) {
			t.Errorf("%s: got %+v, want at %s message %q", tr.Name, f, w.at, w.msg)
		}
	}
	if !strings.Contains(rep.Files[0].Tests[0].Failure.Message, `({ api_url = "https://api.example.com" }, "POST", "/v1/servers", { name = "loom-web1" })`) {
		t.Errorf("called_with does not list the calls:\n%s", rep.Files[0].Tests[0].Failure.Message)
	}
}

// TestLifecycle runs busted's setups, teardowns, finally, insulate,
// expose and pending in their order; tags select tests.
func TestLifecycle(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/lifecycle"}})
	if !rep.OK() || rep.Passed != 15 || rep.Pending != 2 {
		t.Fatalf("%d passed, %d failed, %d pending\n%s", rep.Passed, rep.Failed, rep.Pending, out)
	}
	if !strings.Contains(out, "# SKIP pending: not ready") {
		t.Errorf("pending inside a test:\n%s", out)
	}
	rep, out = run(t, Options{Dirs: []string{"testdata/lifecycle"}, Tags: []string{"fast"}})
	if !rep.OK() || rep.Passed != 2 || len(rep.Files[0].Tests) != 2 {
		t.Fatalf("--tags fast: %d passed\n%s", rep.Passed, out)
	}
	rep, out = run(t, Options{Dirs: []string{"testdata/lifecycle"}, ExcludeTags: []string{"slow"}})
	if !rep.OK() || rep.Passed != 14 || rep.Pending != 1 || strings.Contains(out, "#slow") {
		t.Fatalf("--exclude-tags slow: %d passed, %d pending\n%s", rep.Passed, rep.Pending, out)
	}
}

// TestShuffle: --shuffle runs a file's tests in an order given by the
// seed, the same for the same seed, and says which seed it used.
func TestShuffle(t *testing.T) {
	order := func(seed int64) (string, string) {
		rep, out := run(t, Options{Dirs: []string{"testdata/spies", "testdata/deadline", "testdata/clock"}, Shuffle: true, Seed: seed})
		if !rep.OK() || rep.Seed == nil || *rep.Seed != seed {
			t.Fatalf("seed %d: %d failed\n%s", seed, rep.Failed, out)
		}
		var names []string
		for _, f := range rep.Files {
			for _, tr := range f.Tests {
				names = append(names, tr.Name)
			}
		}
		return strings.Join(names, "|"), out
	}
	a, out := order(7)
	b, _ := order(7)
	c, _ := order(8)
	plain, _ := run(t, Options{Dirs: []string{"testdata/spies", "testdata/deadline", "testdata/clock"}})
	var declared []string
	for _, f := range plain.Files {
		for _, tr := range f.Tests {
			declared = append(declared, tr.Name)
		}
	}
	if a != b || a == c || a == strings.Join(declared, "|") {
		t.Errorf("seed 7 twice: %v; seed 8 differs: %v; differs from the declared order: %v", a == b, a != c, a != strings.Join(declared, "|"))
	}
	if !strings.Contains(out, "# shuffled with seed 7 (loomd test --shuffle --seed 7 repeats this order)") {
		t.Errorf("the seed is not printed:\n%s", out)
	}
}

// TestFileArgument runs one test file of a plugin folder.
func TestFileArgument(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/lifecycle/lifecycle_test.lua"}})
	if !rep.OK() || len(rep.Files) != 1 || rep.Files[0].File != "testdata/lifecycle/lifecycle_test.lua" {
		t.Fatalf("%+v\n%s", rep.Files, out)
	}
	for _, bad := range []string{"testdata/lifecycle/lifecycle.lua", "plugtest.go"} {
		if _, err := Run(context.Background(), Options{Dirs: []string{bad}}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	outside := t.TempDir() + "/x_test.lua"
	os.WriteFile(outside, []byte(`it("x", function() end)`), 0o644)
	if _, err := Run(context.Background(), Options{Dirs: []string{outside}}); err == nil || !strings.Contains(err.Error(), "no plugin folder holds this file") {
		t.Errorf("a test file outside any plugin folder: %v", err)
	}
}

// TestDeadlines: hooks keep their definitions' deadlines on the virtual
// clock, however short --timeout is (it bounds real time only).
func TestDeadlines(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/deadline"}, Timeout: 5 * time.Second})
	if !rep.OK() || rep.Passed != 2 {
		t.Fatalf("%d passed, %d failed\n%s", rep.Passed, rep.Failed, out)
	}
}

// TestRunaway: a hook that never returns is stopped by --timeout, and the
// failure points at the plugin's line it was running.
func TestRunaway(t *testing.T) {
	rep, out := run(t, Options{Dirs: []string{"testdata/runaway"}, Timeout: 300 * time.Millisecond})
	if rep.Failed != 1 {
		t.Fatalf("%d failed\n%s", rep.Failed, out)
	}
	f := rep.Files[0].Tests[0].Failure
	// The loop is lines 6 to 8; the deadline finds it at one of them.
	inLoop := f.Location == "testdata/runaway/runaway.lua:6" || f.Location == "testdata/runaway/runaway.lua:7" || f.Location == "testdata/runaway/runaway.lua:8"
	if !inLoop || !strings.Contains(f.Message, "test timed out after 300ms") ||
		!strings.Contains(f.Message, "runaway create was still running at "+f.Location) ||
		!strings.Contains(f.Traceback, "runaway.lua:12: in function 'Runaway:create'") {
		t.Errorf("failure %+v", f)
	}
}

// A test file that ends inside a block is reported where the file ends
// (the line of <eof>, as lua5.1 says), not line -1.
func TestSyntaxErrorLine(t *testing.T) {
	dir := t.TempDir() + "/p"
	os.MkdirAll(dir, 0o755)
	os.WriteFile(dir+"/p.json", []byte(`{"name": "p", "providertypes": ["p"], "p": {"name": "p", "classname": "P"}}`), 0o644)
	os.WriteFile(dir+"/p.lua", []byte("P = require(\"loom\").Provider:extend(\"P\")\n"), 0o644)
	os.WriteFile(dir+"/p_test.lua", []byte("describe(\"x\", function()\n  it(\"y\", function()\n    assert.equals(1, 1)\n  end)\nend\n"), 0o644)
	rep, out := run(t, Options{Dirs: []string{dir}})
	f := rep.Files[0].Error
	if f == nil || f.Location != dir+"/p_test.lua:6" || !strings.Contains(f.Message, "unexpected end of file") {
		t.Fatalf("got %+v\n%s", f, out)
	}
}
