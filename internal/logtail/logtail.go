// Package logtail quotes the last lines of log files in a failure
// message: tests that start servers (NATS clusters) keep their logs in
// the test's temporary directory, which is removed when the test ends.
package logtail

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Files is the last n lines of each dir/<name>.log, one block per name,
// each headed by the file it comes from; a file that cannot be read says
// why in its place.
func Files(dir string, names []string, n int) string {
	var b strings.Builder
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name+".log"))
		if err != nil {
			fmt.Fprintf(&b, "\n--- %s: %v", name, err)
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		lines = lines[max(0, len(lines)-n):]
		fmt.Fprintf(&b, "\n--- the last %d lines of %s.log:\n%s", len(lines), name, strings.Join(lines, "\n"))
	}
	return b.String()
}
