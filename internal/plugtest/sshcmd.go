package plugtest

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"

	"github.com/yuin/gopher-lua/pm"
)

// ShellWords splits a command line into words the way a POSIX shell does
// for the forms loom.ssh sends (and the commands in Loom's docs): blanks
// separate words; single quotes, double quotes and backslashes quote.
// Nothing is expanded.
func ShellWords(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		inTok bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inTok = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`\n", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New("unterminated double quote")
			}
			inTok = true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] != '\n' {
				cur.WriteByte(s[i])
			}
			inTok = true
		case c == ' ' || c == '\t' || c == '\n':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out, nil
}

// invocation is what loom.ssh asked the fake host to run, with the
// binding's plumbing (its process-group wrapper, sudo, the kill script)
// taken off.
type invocation struct {
	cmd    string // the plugin's command
	marker string // the wrapper's start marker ("" for a bare command)
	sudo   *sudoCall
	kill   *killCall
	env    map[string]string // from "export K=V; " prefixes
	// exec's login_env: the line around the login environment the
	// capture prints, and the one that ends its block on stdin.
	envMarker, envEnd string
}

type sudoCall struct {
	user   string
	prompt string // -S -p PROMPT: a password comes on stdin
	noPass bool   // -n
}

type killCall struct {
	target  int
	cleanup string
}

var killHead = regexp.MustCompile(`^t=(\d+); m=(\w);`)

// parseInvocation undoes the binding's wrapping of a command line.
func parseInvocation(line string) (*invocation, error) {
	words, err := ShellWords(line)
	if err != nil {
		return nil, err
	}
	inv := &invocation{cmd: line}
	// login_env: /bin/sh -c '<print export -p between two $1>; exec "$@"' sh MARKER sudo ...
	if len(words) > 5 && words[0] == "/bin/sh" && words[1] == "-c" && strings.Contains(words[2], "export -p >&2") &&
		strings.HasPrefix(words[4], "loom-env-") {
		inv.envMarker = words[4]
		words = words[5:]
		inv.cmd = strings.Join(words, " ")
	}
	if len(words) > 0 && words[0] == "sudo" {
		sc := &sudoCall{user: "root"}
		i := 1
	opts:
		for ; i < len(words); i++ {
			switch words[i] {
			case "-n":
				sc.noPass = true
			case "-S":
			case "-p":
				if i+1 < len(words) {
					sc.prompt = words[i+1]
					i++
				}
			case "-u":
				if i+1 < len(words) {
					sc.user = words[i+1]
					i++
				}
			case "--":
				i++
				break opts
			default:
				break opts
			}
		}
		inv.sudo = sc
		words = words[i:]
		inv.cmd = strings.Join(words, " ")
	}
	if len(words) >= 3 && words[0] == "/bin/sh" && words[1] == "-c" {
		script, args := words[2], words[3:]
		switch {
		case len(args) == 4 && strings.HasPrefix(args[1], "loom-started-"):
			inv.marker, inv.cmd = args[1], args[3]
		case len(args) == 5 && strings.HasPrefix(args[1], "loom-started-") && strings.HasPrefix(args[4], "loom-env-end-"):
			inv.marker, inv.cmd, inv.envEnd = args[1], args[3], args[4]
		case killHead.MatchString(script):
			m := killHead.FindStringSubmatch(script)
			n, _ := strconv.Atoi(m[1])
			inv.kill = &killCall{target: n}
			if len(args) > 1 {
				inv.kill.cleanup = args[1]
			}
		}
	}
	inv.cmd, inv.env = stripExports(inv.cmd)
	if m := afterOnly.FindStringSubmatch(inv.cmd); m != nil {
		inv.cmd = m[1] // upload_dir's after, run alone after an SFTP upload
	}
	return inv, nil
}

var exportPrefix = regexp.MustCompile(`^export ([A-Za-z_][A-Za-z0-9_]*)=('(?:[^']|'\\'')*'|[A-Za-z0-9@%+=:,./_-]*); `)

// stripExports takes the "export K=V; " prefixes the binding writes when
// the server refuses Setenv (and always under sudo) off a command.
func stripExports(cmd string) (string, map[string]string) {
	var env map[string]string
	for {
		m := exportPrefix.FindStringSubmatch(cmd)
		if m == nil {
			return cmd, env
		}
		v, err := ShellWords(m[2])
		if err != nil {
			return cmd, env
		}
		if env == nil {
			env = map[string]string{}
		}
		env[m[1]] = strings.Join(v, "")
		cmd = cmd[len(m[0]):]
	}
}

// exportLines prints env as POSIX sh's export -p does, sorted.
func exportLines(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "export %s='%s'\n", k, strings.ReplaceAll(env[k], "'", `'\''`))
	}
	return b.String()
}

// applyEnvBlock plays the shell code exec's login_env writes on stdin
// (the login environment as exportLines printed it, then sudo's own values
// of HOME, PATH... kept, then unset of what sudo -E removes) and returns
// the variables it leaves set beyond sudo's own.
func applyEnvBlock(block []string) map[string]string {
	env := map[string]string{}
	for i := 0; i < len(block); i++ {
		stmt := block[i]
		words, err := ShellWords(stmt)
		for err != nil && i+1 < len(block) { // a value spanning lines
			i++
			stmt += "\n" + block[i]
			words, err = ShellWords(stmt)
		}
		if err != nil || len(words) == 0 {
			continue
		}
		switch words[0] {
		case "export":
			for _, w := range words[1:] {
				if k, v, ok := strings.Cut(w, "="); ok {
					env[k] = v
				}
			}
		case "unset":
			for _, w := range words[1:] {
				delete(env, w)
			}
		}
	}
	for _, k := range []string{"HOME", "USER", "LOGNAME", "SHELL", "PATH", "PWD"} {
		delete(env, k) // sudo's values are kept
	}
	return env
}

// normalizeCmd collapses blanks, so that expectations need not copy a
// command's exact spacing.
func normalizeCmd(s string) string {
	return strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
}

// cmdMatcher is how an expectation or an assertion names commands:
// "*" any, a string starting with ^ a Lua pattern, else the exact command
// (blanks collapsed).
type cmdMatcher struct {
	text    string
	any     bool
	pattern bool
}

func newCmdMatcher(s string) (cmdMatcher, error) {
	m := cmdMatcher{text: s}
	switch {
	case s == "*":
		m.any = true
	case strings.HasPrefix(s, "^"):
		m.pattern = true
		if _, err := pm.Find(s, []byte(""), 0, 1); err != nil {
			return m, fmt.Errorf("command pattern %q: %v", s, err)
		}
	default:
		m.text = normalizeCmd(s)
	}
	return m, nil
}

// match reports whether cmd matches, with the pattern's captures.
func (m cmdMatcher) match(cmd string) ([]string, bool) {
	switch {
	case m.any:
		return nil, true
	case m.pattern:
		md, err := pm.Find(m.text, []byte(cmd), 0, 1)
		if err != nil || len(md) == 0 {
			return nil, false
		}
		var caps []string
		d := md[0]
		for i := 2; i+1 < d.CaptureLength(); i += 2 {
			if d.IsPosCapture(i) {
				caps = append(caps, strconv.Itoa(d.Capture(i)))
				continue
			}
			caps = append(caps, cmd[d.Capture(i):d.Capture(i+1)])
		}
		return caps, true
	default:
		return nil, normalizeCmd(cmd) == m.text
	}
}

// The commands loom.ssh itself runs to finish its transfers; the fake
// host carries them out on its filesystem.
var (
	tarForm     = regexp.MustCompile(`^command -v tar >/dev/null 2>&1 \|\| \{ echo .* >&2; exit 127; \}; \{ mkdir -p -- (\S+) && tar -xpf - --no-same-owner -C \S+( && chown -R (\S+) -- \S+)?; \} \|\| \{ s=\$\?; echo .* >&2; exit \$s; \}(?s:\n\{\n(.*)\n\} </dev/null)?$`)
	afterOnly   = regexp.MustCompile(`^(?s)\{\n(.*)\n\} </dev/null$`)
	sudoPutHead = regexp.MustCompile(`^set -e; src=(\S+); dst=(\S+); stage=(\S+)\n`)
	sudoChmod   = regexp.MustCompile(`(?m)^chmod ([0-7]{3,4}) "\$stage"$`)
	sudoChown   = regexp.MustCompile(`(?m)^chown (\S+) "\$stage"$`)
)

// unquote1 is the single word a quoted string stands for.
func unquote1(s string) string {
	w, err := ShellWords(s)
	if err != nil || len(w) != 1 {
		return s
	}
	return w[0]
}

// splitOwner parses chown's "user:group", "user" or ":group".
func splitOwner(spec string) (string, string) {
	u, g, _ := strings.Cut(spec, ":")
	return u, g
}
