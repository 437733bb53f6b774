package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/yuin/gopher-lua/parse"

	"github.com/loomrt/loom/internal/plugtest"
)

// docBlock is one fenced code block of a Markdown file.
type docBlock struct {
	file string
	line int // the line of the first line of code
	lang string
	code string
	skip bool
}

var (
	fenceOpen = regexp.MustCompile("^(\\s*)(`{3,})\\s*([\\w+-]*)")
	// skipMarker, on the line before a fence, leaves a deliberately
	// partial block out of the checks.
	skipMarker = regexp.MustCompile(`^\s*<!--\s*docs-test:\s*skip\b`)
)

// docBlocks extracts the fenced code blocks of a Markdown file.
func docBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var (
		out    []docBlock
		cur    *docBlock
		fence  string
		indent string
		body   []string
		prev   string
		n      int
	)
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur == nil {
			if m := fenceOpen.FindStringSubmatch(line); m != nil {
				cur = &docBlock{file: file, line: n + 1, lang: strings.ToLower(m[3]), skip: skipMarker.MatchString(prev)}
				indent, fence, body = m[1], m[2], nil
			}
			if strings.TrimSpace(line) != "" {
				prev = line
			}
			continue
		}
		if strings.TrimSpace(line) == fence {
			cur.code = strings.Join(body, "\n")
			out = append(out, *cur)
			cur = nil
			prev = line
			continue
		}
		body = append(body, strings.TrimPrefix(line, indent))
	}
	if cur != nil {
		t.Errorf("%s:%d: a code block is never closed", file, cur.line-1)
	}
	return out
}

// docFiles are README.md and every Markdown file under docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../../README.md"}
	err := filepath.WalkDir("../../docs", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocsCodeBlocks keeps the examples in README.md and docs/ from
// rotting: every lua block parses, every json block is JSON (or JSON
// lines), every sh script block passes bash -n, and every loomd command
// line in sh blocks (and "$ loomd" lines
// in output blocks) names a real subcommand with flags it has. A block
// after <!-- docs-test: skip --> is left out (a deliberately partial
// snippet).
func TestDocsCodeBlocks(t *testing.T) {
	counts := map[string]int{}
	for _, file := range docFiles(t) {
		rel := strings.TrimPrefix(file, "../../")
		for _, b := range docBlocks(t, file) {
			if b.skip {
				counts["skipped"]++
				continue
			}
			where := fmt.Sprintf("%s:%d", rel, b.line)
			switch b.lang {
			case "lua":
				counts["lua"]++
				if _, err := parse.Parse(strings.NewReader(b.code), rel); err != nil {
					var pe *parse.Error
					if errors.As(err, &pe) {
						where = fmt.Sprintf("%s:%d", rel, b.line+pe.Pos.Line-1)
					}
					t.Errorf("%s: lua block does not parse: %v", where, err)
				}
			case "json":
				counts["json"]++
				if err := checkJSON(b.code); err != nil {
					t.Errorf("%s: json block: %v", where, err)
				}
			case "sh", "bash", "shell", "console", "":
				if b.lang != "" {
					counts["sh"]++
					if err := bashSyntax(b.code); err != nil {
						t.Errorf("%s: %s block: %v", where, b.lang, err)
					}
				}
				for _, c := range loomdCommands(b.code, b.lang == "") {
					counts["loomd commands"]++
					if testing.Verbose() {
						t.Logf("%s:%d: %s", rel, b.line+c.line, c.text)
					}
					if err := checkLoomdCommand(c.words); err != nil {
						t.Errorf("%s:%d: %s: %v", rel, b.line+c.line, c.text, err)
					}
				}
			}
		}
	}
	t.Logf("checked %v", counts)
	if counts["lua"] < 10 || counts["json"] < 10 || counts["loomd commands"] < 30 {
		t.Errorf("found too few blocks (%v): is the extraction broken?", counts)
	}
}

// bashSyntax checks a script block with bash -n (blocks of prompted
// command lines and their output are not scripts, and are left out).
func bashSyntax(code string) error {
	for _, l := range strings.Split(code, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
			return nil
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		return nil
	}
	cmd := exec.Command(bash, "-n")
	cmd.Stdin = strings.NewReader(code)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("bash -n: %s", strings.TrimSpace(string(out)))
	}
	return nil
}

// checkJSON accepts one JSON value, JSON lines, or object members
// ("permissions": {...}) shown out of their object.
func checkJSON(code string) error {
	if json.Valid([]byte(code)) || json.Valid([]byte("{"+code+"}")) {
		return nil
	}
	var d json.RawMessage
	err := json.Unmarshal([]byte(code), &d)
	lines := strings.Split(strings.TrimSpace(code), "\n")
	if len(lines) > 1 {
		for _, l := range lines {
			if strings.TrimSpace(l) != "" && !json.Valid([]byte(l)) {
				return fmt.Errorf("neither a JSON value (%v) nor JSON lines", err)
			}
		}
		return nil
	}
	return err
}

type docCommand struct {
	line  int // 0-based, in the block
	text  string
	words []string
}

var loomdWord = regexp.MustCompile(`^(\./|\S*/)?loomd$`)

// loomdCommands finds the loomd invocations of a shell block: each
// command line (continuations joined; a leading "$ " prompt taken off;
// in output blocks, only prompted lines and lines starting with
// "loomd "), split at | && || ;.
func loomdCommands(code string, promptedOnly bool) []docCommand {
	var out []docCommand
	lines := strings.Split(code, "\n")
	for i := 0; i < len(lines); i++ {
		start := i
		l := lines[i]
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + lines[i]
		}
		l = strings.TrimSpace(l)
		prompted := strings.HasPrefix(l, "$ ") || strings.HasPrefix(l, "loomd ")
		if promptedOnly && !prompted {
			continue
		}
		l = strings.TrimPrefix(l, "$ ")
		if strings.HasPrefix(l, "#") {
			continue
		}
		if j := strings.Index(l, " #"); j >= 0 {
			l = l[:j] // a trailing comment
		}
		for _, seg := range regexp.MustCompile(`\|\||&&|\||;`).Split(l, -1) {
			seg = strings.TrimSpace(seg)
			words, err := plugtest.ShellWords(seg)
			if err != nil || len(words) == 0 {
				continue
			}
			// sudo, env assignments and time before the command.
			for len(words) > 1 && (words[0] == "sudo" || words[0] == "time" || words[0] == "exec" || strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-")) {
				words = words[1:]
			}
			// "loomd test: ..." in output is a log line, not a command.
			if loomdWord.MatchString(words[0]) && (len(words) == 1 || !strings.HasSuffix(words[1], ":")) {
				out = append(out, docCommand{line: start, text: seg, words: words})
			}
		}
	}
	return out
}

// checkLoomdCommand resolves a loomd command line against the real
// command tree and parses its flags, as loomd would.
func checkLoomdCommand(words []string) error {
	app := NewSystemApp()
	root := app.newRootCmd()
	args := words[1:]
	var redirect bool
	var kept []string
	for _, a := range args {
		if redirect {
			redirect = false
			continue
		}
		switch {
		case a == ">" || a == ">>" || a == "<" || a == "2>":
			redirect = true
			continue
		case strings.HasPrefix(a, ">") || strings.HasPrefix(a, "2>") || strings.HasPrefix(a, "<") || a == "&":
			continue
		}
		kept = append(kept, a)
	}
	args = kept
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("unknown subcommand %q", rest[0])
	}
	if cmd.HasSubCommands() && cmd.Runnable() == false && len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		return fmt.Errorf("%q has no subcommand %q", cmd.CommandPath(), rest[0])
	}
	if err := cmd.ParseFlags(rest); err != nil && !errors.Is(err, pflag.ErrHelp) {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return nil
}

// The checks fail where they should.
func TestDocsChecksFail(t *testing.T) {
	for _, words := range [][]string{
		{"loomd", "tset", "."},
		{"loomd", "test", "--covrage"},
		{"loomd", "plugins", "chek", "x"},
		{"loomd", "serve", "--nats-listen"},
	} {
		if err := checkLoomdCommand(words); err == nil {
			t.Errorf("%q passed", words)
		}
	}
	for _, words := range [][]string{
		{"loomd", "test", ".", "--coverage", "--lcov", "x.info"},
		{"loomd", "plugins", "check", "--strict", "x"},
		{"loomd", "--plugins", "./plugins"},
		{"loomd", "run", "t.json", ">", "out.json"},
	} {
		if err := checkLoomdCommand(words); err != nil {
			t.Errorf("%q: %v", words, err)
		}
	}
	if checkJSON(`{"a": 1,}`) == nil || checkJSON(`"a": {"b": 2}`) != nil || checkJSON("{\"a\":1}\n{\"b\":2}") != nil {
		t.Error("checkJSON")
	}
	cmds := loomdCommands("$ loomd test . \\\n  --json | jq .\nloomd test: CREATE -> status 0\n", true)
	if len(cmds) != 1 || strings.Join(cmds[0].words, " ") != "loomd test . --json" {
		t.Errorf("loomdCommands: %+v", cmds)
	}
}
