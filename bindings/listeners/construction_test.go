package listeners

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// opensSocket matches the calls that open a listening socket in Go code.
var opensSocket = regexp.MustCompile(`\bnet\.Listen(TCP|UDP|Unix|Packet|MulticastUDP|IP)?\(|\btls\.Listen\(|ListenAndServe(TLS)?\(|\bnet\.ListenConfig\b|\bserver\.NewServer\(`)

// allowed are the files that may open sockets without the registry: the
// registry itself, the embedded NATS server (registered by the queue from
// the server's own addresses), and servers that tests and the plugin test
// kit start for plugins to call.
var allowed = map[string]string{
	"bindings/listeners/listeners.go":                      "the registry's own Listen",
	"internal/queue/queue.go":                              "the embedded NATS server; registerServer records its sockets",
	"internal/coopr/coopfake/coopfake.go":                  "a fake Coopr server for tests",
	"internal/sshdtest/sshdtest.go":                        "a test sshd",
	"internal/natstest/natstest.go":                        "test NATS clusters: the one route port picked before the first server starts",
	"internal/plugtest/httpfake.go":                        "loomd test's HTTP fake, which plugins under test are meant to call",
	"bench/daemon/main.go":                                 "a benchmark's fake server",
	"bench/daemon/ceiling.go":                              "a benchmark's NATS server without a network listener",
	"bench/cluster/main.go":                                "a benchmark's fake server",
	"bench/coopr/main.go":                                  "a benchmark's stand-in Coopr server",
	"bench/slowreaders/main.go":                            "a benchmark's free-port probe for the loomd it starts",
	"internal/cloudfake/linodefake/cmd/linodefake/main.go": "a test's Linode API stand-in, run as its own process",
}

// TestEveryListenerIsRegistered keeps the registry complete by
// construction: any code that opens a listening socket must do it through
// Registry.Listen (or register what a library opened), or be listed above
// with the reason. A new listener that bypasses the registry would be a
// port plugins can reach.
func TestEveryListenerIsRegistered(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skip("not in the loom source tree")
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			// testdata holds files the go tool never builds into loomd
			// (a container image's program, fixtures).
			if rel == "third_party" || d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if _, ok := allowed[rel]; ok {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "//") {
				continue
			}
			if opensSocket.MatchString(line) {
				t.Errorf("%s:%d opens a listening socket outside the registry: use listeners.Registry.Listen "+
					"(or Add for a socket a library opened) so plugins cannot reach it: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
