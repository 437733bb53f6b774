package cli

import (
	"os"
	"testing"
)

// loomd serve starts its worker processes from its own executable: in
// these tests, the test binary. With LOOM_CLI_TEST_WORKER set, the test
// binary is loomd (the variable is set for the children only).
func TestMain(m *testing.M) {
	if os.Getenv("LOOM_CLI_TEST_WORKER") != "" {
		os.Exit(Main())
	}
	os.Setenv("LOOM_CLI_TEST_WORKER", "1")
	os.Exit(m.Run())
}
