package repl

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/chzyer/readline"
	"golang.org/x/term"
)

// HistoryPath returns where the interactive history lives: $LOOM_REPL_HISTORY
// when set, else $XDG_STATE_HOME/loom/repl_history, else
// ~/.local/state/loom/repl_history. getenv reads the environment.
func HistoryPath(getenv func(string) string) (string, error) {
	if p := getenv("LOOM_REPL_HISTORY"); p != "" {
		return p, nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "loom", "repl_history"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", errors.New("no history file: set HOME, XDG_STATE_HOME or LOOM_REPL_HISTORY")
	}
	return filepath.Join(home, ".local", "state", "loom", "repl_history"), nil
}

// termSource reads lines from a terminal through readline.
type termSource struct {
	rl *readline.Instance
}

func newTermSource(o Options, c readline.AutoCompleter) (*termSource, error) {
	if o.HistoryFile != "" {
		// The history may hold pasted tasks: keep it private.
		if err := os.MkdirAll(filepath.Dir(o.HistoryFile), 0o700); err != nil {
			return nil, fmt.Errorf("creating the history directory: %w", err)
		}
		f, err := os.OpenFile(o.HistoryFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return nil, fmt.Errorf("opening the history file: %w", err)
		}
		f.Close()
	}
	fd := o.TerminalFd
	var saved *term.State
	cfg := &readline.Config{
		HistoryFile:            o.HistoryFile,
		HistoryLimit:           1000,
		DisableAutoSaveHistory: true,
		HistorySearchFold:      true,
		AutoComplete:           c,
		Stdin:                  readline.NewCancelableStdin(o.In),
		Stdout:                 &crlfWriter{w: o.Out},
		Stderr:                 &crlfWriter{w: o.Err},
		FuncIsTerminal:         func() bool { return true },
		FuncMakeRaw: func() error {
			if fd < 0 {
				return nil
			}
			st, err := term.MakeRaw(fd)
			if err != nil {
				return err
			}
			saved = st
			return nil
		},
		FuncExitRaw: func() error {
			if fd < 0 || saved == nil {
				return nil
			}
			st := saved
			saved = nil
			return term.Restore(fd, st)
		},
		FuncGetWidth: func() int {
			if fd >= 0 {
				if w, _, err := term.GetSize(fd); err == nil && w > 0 {
					return w
				}
			}
			return 80
		},
	}
	rl, err := readline.NewEx(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting line editing: %w", err)
	}
	return &termSource{rl: rl}, nil
}

// ReadLine implements lineSource.
func (t *termSource) ReadLine(prompt string) (string, error) {
	t.rl.SetPrompt(prompt)
	line, err := t.rl.Readline()
	if errors.Is(err, readline.ErrInterrupt) {
		return "", errPromptInterrupt
	}
	return line, err
}

// SaveHistory implements lineSource.
func (t *termSource) SaveHistory(stmt string) { _ = t.rl.SaveHistory(stmt) }

// Close implements lineSource.
func (t *termSource) Close() error { return t.rl.Close() }

// pipedSource reads lines from a pipe or file, without editing.
type pipedSource struct {
	lines chan string
	stop  chan struct{}
	once  sync.Once
	err   error // set before lines is closed
}

func newPipedSource(in io.Reader) *pipedSource {
	p := &pipedSource{lines: make(chan string), stop: make(chan struct{})}
	go func() {
		defer close(p.lines)
		br := bufio.NewReader(in)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				select {
				case p.lines <- strings.TrimRight(line, "\r\n"):
				case <-p.stop:
					return
				}
			}
			if err != nil {
				p.err = err
				return
			}
		}
	}()
	return p
}

// ReadLine implements lineSource.
func (p *pipedSource) ReadLine(string) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			if p.err != nil && p.err != io.EOF {
				return "", fmt.Errorf("reading input: %w", p.err)
			}
			return "", io.EOF
		}
		return line, nil
	case <-p.stop:
		return "", io.EOF
	}
}

// SaveHistory implements lineSource: piped input keeps none.
func (p *pipedSource) SaveHistory(string) {}

// Close implements lineSource.
func (p *pipedSource) Close() error {
	p.once.Do(func() { close(p.stop) })
	return nil
}

// crlfWriter writes readline's output with every bare "\n" as "\r\n".
// readline writes while the terminal is raw (no output processing), so a
// bare LF moves down without returning to column 0: the newline it echoes
// for Enter left the first line of a statement's output starting at the
// cursor's column, and completion lists indented under the cursor. The
// REPL's own output is written after readline restores the terminal,
// whose output processing turns "\n" into "\r\n" itself.
type crlfWriter struct {
	mu     sync.Mutex // readline writes from its own goroutine too
	w      io.Writer
	lastCR bool // the last byte written was '\r'
}

// Write implements io.Writer; it reports len(p) written when all of the
// converted output was.
func (c *crlfWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if bytes.IndexByte(p, '\n') < 0 {
		if _, err := c.w.Write(p); err != nil {
			return 0, err
		}
		if len(p) > 0 {
			c.lastCR = p[len(p)-1] == '\r'
		}
		return len(p), nil
	}
	out := make([]byte, 0, len(p)+8)
	prevCR := c.lastCR
	for _, b := range p {
		if b == '\n' && !prevCR {
			out = append(out, '\r')
		}
		out = append(out, b)
		prevCR = b == '\r'
	}
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	c.lastCR = prevCR
	return len(p), nil
}
