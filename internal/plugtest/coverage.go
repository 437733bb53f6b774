package plugtest

import (
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// FileCoverage is the line coverage of one plugin file (not its tests).
type FileCoverage struct {
	File string `json:"file"`
	// Lines is how many lines hold code; Hit how many of them ran.
	Lines   int     `json:"lines"`
	Hit     int     `json:"hit"`
	Percent float64 `json:"percent"`
	// Missed are the code lines that never ran.
	Missed []int `json:"missed,omitempty"`
	// counts maps each code line to how often it ran (lcov's DA).
	counts map[int]uint64
}

// coverage counts the instructions the plugins' VMs run (through the
// vendored gopher-lua's InstructionHook), by prototype and pc.
type coverage struct {
	mu   sync.Mutex
	hits map[*lua.FunctionProto][]uint64
}

func newCoverage() *coverage {
	return &coverage{hits: map[*lua.FunctionProto][]uint64{}}
}

// hook is runtime.Options.InstructionHook.
func (c *coverage) hook(_ *lua.LState, proto *lua.FunctionProto, pc int) {
	c.mu.Lock()
	h := c.hits[proto]
	if h == nil {
		h = make([]uint64, len(proto.Code))
		c.hits[proto] = h
	}
	if pc < len(h) {
		h[pc]++
	}
	c.mu.Unlock()
}

// lineCounts folds the counts into source file -> line -> runs (a line
// ran as often as its most run instruction).
func (c *coverage) lineCounts() map[string]map[int]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]map[int]uint64{}
	for p, h := range c.hits {
		m := out[p.SourceName]
		if m == nil {
			m = map[int]uint64{}
			out[p.SourceName] = m
		}
		for pc, n := range h {
			if n == 0 || pc >= len(p.DbgSourcePositions) {
				continue
			}
			if l := p.DbgSourcePositions[pc]; n > m[l] {
				m[l] = n
			}
		}
	}
	return out
}

// codeLines are the lines of a compiled chunk that hold instructions.
func codeLines(p *lua.FunctionProto, out map[int]bool) {
	for _, l := range p.DbgSourcePositions {
		if l > 0 {
			out[l] = true
		}
	}
	for _, c := range p.FunctionPrototypes {
		codeLines(c, out)
	}
}

// structural matches a line that only closes or opens a block: "end",
// "else", "end)", "do", "}" ... luacov does not count these: the compiler
// gives them instructions (a function's closing return, a loop's jump
// back), but a function whose every path returns never runs its "end",
// and a reader would not call that line untested.
var structural = regexp.MustCompile(`^\s*(?:(?:end|else|do|then|repeat)\b|[)\]},;])(?:\s*(?:(?:end|else|do|then|repeat)\b|[)\]},;]))*\s*(?:--.*)?$`)

// dropStructural removes the structural lines of src from lines.
func dropStructural(src []byte, lines map[int]bool) {
	for i, text := range strings.Split(string(src), "\n") {
		if lines[i+1] && structural.MatchString(text) {
			delete(lines, i+1)
		}
	}
}

// report measures every Lua file of the plugin folders (test files
// left out), named as the runtime names their chunks.
func (c *coverage) report(dirs []string) []*FileCoverage {
	counts := c.lineCounts()
	var out []*FileCoverage
	for _, dir := range dirs {
		filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if e.IsDir() && p != dir && strings.HasPrefix(e.Name(), ".") {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(p, ".lua") || strings.HasSuffix(p, "_test.lua") {
				return nil
			}
			src, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			chunk, err := parse.Parse(strings.NewReader(string(src)), p)
			if err != nil {
				return nil
			}
			proto, err := lua.Compile(chunk, p)
			if err != nil {
				return nil
			}
			lines := map[int]bool{}
			codeLines(proto, lines)
			dropStructural(src, lines)
			fc := &FileCoverage{File: p, Lines: len(lines), counts: map[int]uint64{}}
			ran := counts[p]
			for l := range lines {
				n := ran[l]
				fc.counts[l] = n
				if n > 0 {
					fc.Hit++
				} else {
					fc.Missed = append(fc.Missed, l)
				}
			}
			sort.Ints(fc.Missed)
			if fc.Lines > 0 {
				fc.Percent = math.Round(1000*float64(fc.Hit)/float64(fc.Lines)) / 10
			}
			out = append(out, fc)
			return nil
		})
	}
	return out
}

// ranges writes lines as "3-5, 9, 12-20", at most max ranges.
func ranges(lines []int, max int) string {
	var parts []string
	for i := 0; i < len(lines); {
		j := i
		for j+1 < len(lines) && lines[j+1] == lines[j]+1 {
			j++
		}
		if len(parts) == max {
			parts = append(parts, "...")
			break
		}
		if i == j {
			parts = append(parts, fmt.Sprint(lines[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", lines[i], lines[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// writeCoverage prints the coverage summary as TAP comments.
func writeCoverage(w io.Writer, files []*FileCoverage) {
	lines, hit := 0, 0
	width := 0
	for _, f := range files {
		lines += f.Lines
		hit += f.Hit
		width = max(width, len(f.File))
	}
	pct := 0.0
	if lines > 0 {
		pct = 100 * float64(hit) / float64(lines)
	}
	fmt.Fprintf(w, "# coverage: %.1f%% of %d lines in %d plugin files\n", pct, lines, len(files))
	for _, f := range files {
		fmt.Fprintf(w, "#   %-*s %5.1f%% (%d/%d)", width, f.File, f.Percent, f.Hit, f.Lines)
		if len(f.Missed) > 0 {
			fmt.Fprintf(w, "  missed: %s", ranges(f.Missed, 12))
		}
		fmt.Fprintln(w)
	}
}

// WriteLCOV writes the report's coverage as an lcov tracefile (genhtml,
// editors and CI services read it).
func WriteLCOV(w io.Writer, rep *Report) error {
	var b strings.Builder
	for _, f := range rep.Coverage {
		abs, err := filepath.Abs(f.File)
		if err != nil {
			abs = f.File
		}
		fmt.Fprintf(&b, "TN:\nSF:%s\n", abs)
		lines := make([]int, 0, len(f.counts))
		for l := range f.counts {
			lines = append(lines, l)
		}
		sort.Ints(lines)
		for _, l := range lines {
			fmt.Fprintf(&b, "DA:%d,%d\n", l, f.counts[l])
		}
		fmt.Fprintf(&b, "LF:%d\nLH:%d\nend_of_record\n", f.Lines, f.Hit)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
