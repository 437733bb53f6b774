package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/loomrt/loom/internal/plugtest"
)

func (a *App) newTestCmd(g *globalOptions) *cobra.Command {
	var (
		asJSON  bool
		junit   string
		timeout time.Duration
		match   string
		verbose bool
		sshd    bool
		cover   bool
		lcov    string
		tags    []string
		exclude []string
		shuffle bool
		seed    int64
		acc     bool
		record  bool
		sweep   bool
	)
	cmd := &cobra.Command{
		Use:   "test [DIR | FILE_test.lua ...]",
		Short: "Run a plugin's Lua tests (*_test.lua) in the real sandbox, against HTTP and SSH fakes",
		Long: `Run the *_test.lua files of plugin folders. DIR is a plugin folder or a folder of
plugin folders ("plugins/..." works too), FILE one test file of a plugin
folder; the default is the current folder.

Each test file runs in a VM of its plugin's type, with a fresh work dir, the
real sandbox and bindings, and busted's API: describe, it, pending,
before_each, after_each, setup/teardown, lazy_setup/lazy_teardown,
before_all/after_all, finally, insulate, expose, tags (#name), assert with
luassert's chains (is_not, has_no, near, ...), spy, stub, mock and match.
The hooks of the plugin's type run in the same VM, so spies and stubs on
the plugin's tables are what the hooks call. loom.test.task, loom.test.run,
loom.test.chain, loom.test.http (fakes on 127.0.0.1 that loom.http reaches
instead of the network), loom.test.ssh (fake hosts that loom.ssh reaches
instead of the network: canned command answers, an in-memory filesystem) and
loom.test.clock (loom.time runs on a virtual clock: sleeps return at once,
and hooks keep their definitions' deadlines on it). See docs/testing.md.

Progress is TAP on stdout; --json prints one JSON report instead.
--coverage adds the lines of each plugin file that ran (--lcov writes them
as an lcov tracefile). Exit status 1 when a test fails, 2 when no test
could be found.`,
		Example: `  loomd test plugins/digitalocean
  loomd test plugins/digitalocean/digitalocean_test.lua --tags fast
  loomd test plugins/... --shuffle --junit report.xml
  loomd test . --run 'CREATE' -v
  loomd test . --coverage --lcov lcov.info`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := plugtest.Options{Dirs: args, Timeout: timeout, Verbose: verbose, Out: a.Out, SSHD: sshd,
				Coverage: cover || lcov != "", Tags: splitTags(tags), ExcludeTags: splitTags(exclude),
				Shuffle: shuffle || cmd.Flags().Changed("seed"), Seed: seed}
			if opts.Shuffle && !cmd.Flags().Changed("seed") {
				opts.Seed = time.Now().UnixNano() % 1_000_000_000
			}
			// Acceptance mode: --acceptance, or LOOM_ACC set as TF_ACC is;
			// --record and --sweep imply it. A real API takes real time:
			// an hour per test unless --timeout says otherwise.
			opts.Acceptance = acc || record || sweep || isTrue(a.Getenv("LOOM_ACC"))
			opts.Record, opts.Sweep = record, sweep
			if opts.Acceptance && !cmd.Flags().Changed("timeout") {
				opts.Timeout = time.Hour
			}
			if match != "" {
				re, err := regexp.Compile(match)
				if err != nil {
					return usageErr(fmt.Errorf("--run %q: %w", match, err))
				}
				opts.Match = re
			}
			if asJSON {
				opts.Out = io.Discard
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			rep, err := plugtest.Run(ctx, opts)
			if err != nil {
				return usageErr(err)
			}
			if asJSON {
				b, _ := json.MarshalIndent(rep, "", "  ")
				fmt.Fprintf(a.Out, "%s\n", b)
			}
			if junit != "" {
				if err := writeReport(junit, "--junit", rep, plugtest.WriteJUnit); err != nil {
					return err
				}
			}
			if lcov != "" {
				if err := writeReport(lcov, "--lcov", rep, plugtest.WriteLCOV); err != nil {
					return err
				}
			}
			if !rep.OK() {
				return silentExit(ExitFailure)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the report as JSON instead of TAP progress")
	f.StringVar(&junit, "junit", "", "also write a JUnit XML report to this file")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "longest a test may take in real time (its hooks' own deadlines, timeouts.create..., run on the virtual clock)")
	f.StringVar(&match, "run", "", "run only tests whose full name (describe names and it name) matches this regular expression")
	f.BoolVarP(&verbose, "verbose", "v", false, "print the plugin's log lines of passing tests too")
	f.BoolVar(&cover, "coverage", false, "count the lines of plugin files (not test files) the tests ran, and print a summary per file with the lines never run")
	f.StringVar(&lcov, "lcov", "", "also write line coverage as an lcov tracefile to this file (implies --coverage)")
	f.StringSliceVar(&tags, "tags", nil, "run only tests tagged with one of these (#tag in a describe or it name; comma-separated or repeated)")
	f.StringSliceVar(&exclude, "exclude-tags", nil, "leave out tests tagged with one of these")
	f.BoolVar(&shuffle, "shuffle", false, "run the files and each block's tests in a random order; the seed is printed")
	f.Int64Var(&seed, "seed", 0, "the shuffle's seed (implies --shuffle): repeats the order a run printed")
	f.BoolVar(&acc, "acceptance", false, "also run the tests tagged #acceptance against the real API, with the credentials their file declares (loom.test.acceptance) from the environment; LOOM_ACC=1 does the same")
	f.BoolVar(&record, "record", false, "with --acceptance (implied): write each acceptance test's real exchanges, secrets redacted, to testdata/<file>.cassette.json, which a plain loomd test replays offline")
	f.BoolVar(&sweep, "sweep", false, "run only the test files' sweepers, against the real API, deleting what any acceptance run left (names starting with "+plugtest.AccPrefix+")")
	f.BoolVar(&sshd, "sshd", false, "let tests start a real OpenSSH sshd on 127.0.0.1 with loom.test.sshd() (needs root, openssh-server and sudo; creates the test users loomtest and loomtestnp); without it those tests are skipped")
	return cmd
}

// isTrue reads an environment flag: 1, true, yes, on.
func isTrue(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// splitTags cleans --tags values: "#slow" and "slow" are the same tag.
func splitTags(in []string) []string {
	var out []string
	for _, t := range in {
		if t = strings.TrimPrefix(strings.TrimSpace(t), "#"); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// writeReport writes a report file (JUnit XML, lcov) for flag.
func writeReport(path, flag string, rep *plugtest.Report, write func(io.Writer, *plugtest.Report) error) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if err := write(fh, rep); err != nil {
		fh.Close()
		return fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return fh.Close()
}
