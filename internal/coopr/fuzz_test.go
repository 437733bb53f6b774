package coopr_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/loomrt/loom/internal/coopr"
)

// FuzzSiteConfig (issue 20 item 6): `loomd coopr flags` reads whatever
// XML it is given into a configuration or an error, and maps a
// configuration onto known loomd serve flags with non-empty values; never
// a panic.
func FuzzSiteConfig(f *testing.F) {
	if b, err := os.ReadFile("../../test/testdata/coopr/provisioner-default.xml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		`<configuration><property><name>provisioner.server.uri</name><value>https://coopr:55055</value></property></configuration>`,
		`<configuration><property><name>provisioner.bind.port</name><value>99999</value></property></configuration>`,
		`<configuration><property><name>provisioner.capacity</name><value>-1</value></property><property><name>x</name></property></configuration>`,
		`<configuration><property><name></name><value>v</value></property></configuration>`,
		`<!DOCTYPE x [<!ENTITY a "aaaa">]><configuration><property><name>&a;</name><value>&a;</value></property></configuration>`,
		`<configuration><property><name>provisioner.heartbeat.interval</name><value>1e9</value></property></configuration>`,
		`<configuration><property><name>provisioner.server.uri</name><value>http://x/'$(id)'; rm -rf ~</value></property></configuration>`,
		`<configuration>`, `not xml`,
	} {
		f.Add([]byte(s))
	}
	known := []string{"--coopr-server", "--coopr-listen", "--coopr-capacity", "--coopr-provisioner-id", "--coopr-heartbeat",
		"--coopr-poll", "--coopr-advertise", "--work-dir", "--coopr-ca", "--coopr-cert", "--coopr-key", "--log-level", "--coopr-tenants"}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := coopr.SiteConfig{}
		if err := c.Read(strings.NewReader(string(data)), "site.xml"); err != nil {
			return
		}
		flags, _, err := c.Flags()
		if err != nil {
			return
		}
		want := []string{"loomd", "serve"}
		for _, fl := range flags {
			if !slices.Contains(known, fl[0]) {
				t.Errorf("unknown flag %q (add it to known if it is a real loomd serve flag)", fl[0])
			}
			if fl[1] == "" {
				t.Errorf("flag %s with an empty value", fl[0])
			}
			want = append(want, fl[0], fl[1])
		}
		// The printed line reads back, in a POSIX shell, as exactly these
		// words: a value from the file cannot inject anything.
		line := coopr.ServeCommand(flags)
		if got, ok := shellWords(line); !ok || !slices.Equal(got, want) {
			t.Fatalf("the command line %q reads as %q (%v), want %q", line, got, ok, want)
		}
	})
}

// shellWords splits line as a POSIX shell would, for the only syntax
// ServeCommand may produce: words of plain characters and single-quoted
// parts (with '\” for a quote), separated by spaces, and backslash-newline
// continuations. ok is false for anything else ($, backticks, double
// quotes, other backslashes...).
func shellWords(line string) (words []string, ok bool) {
	line = strings.ReplaceAll(line, "\\\n", "")
	var b strings.Builder
	in := false
	for i := 0; i < len(line); {
		switch c := line[i]; {
		case c == ' ':
			if in {
				words = append(words, b.String())
				b.Reset()
				in = false
			}
			i++
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, false
			}
			b.WriteString(line[i+1 : i+1+j])
			in = true
			i += j + 2
		case c == '\\' && i+1 < len(line) && line[i+1] == '\'':
			b.WriteByte('\'')
			in = true
			i += 2
		case strings.IndexByte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@,+", c) >= 0:
			b.WriteByte(c)
			in = true
			i++
		default:
			return nil, false
		}
	}
	if in {
		words = append(words, b.String())
	}
	return words, true
}
